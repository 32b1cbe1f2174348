package compat

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/corkwriter"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/scheduler"
)

// Concurrent calls leave in batches; a batch must stay within what the
// server takes (PROTOCOL.md §4.7): its maxBatch capability and, in bytes,
// batchMaxBytes, a large call alone. With a server limit of 96 KiB, five
// queued calls of 20 KiB in one batch would close the connection with 1009.
func TestClientBatchesWithinServerLimits(t *testing.T) {
	s, addr := newTestServer(t, Options{Limits: Limits{MaxMessageSize: 96 << 10, MaxBatch: 4}})
	c := dialClient(t, addr, ClientOptions{})
	// The first call returns after the server's capabilities (maxBatch) have
	// arrived: they precede its answer on the connection.
	if err := c.Call(context.Background(), "echo/raw", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	const callers, rounds = 48, 4
	var wg sync.WaitGroup
	errs := make(chan error, callers*rounds)
	for i := range callers {
		size := 20 << 10
		if i%8 == 0 {
			size = 90 << 10 // larger than a batch: leaves alone
		} else if i%2 == 0 {
			size = 16 // small calls: many fit a batch
		}
		payload := bytes.Repeat([]byte{byte(i)}, size)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				var out []byte
				err := c.Call(context.Background(), "echo/raw", payload, &out)
				if err == nil && !bytes.Equal(out, payload) {
					err = errors.New("answer differs from the call")
				}
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("call failed: %v", err)
	}
	m := s.Metrics()
	if m.MessagesIn >= callers*rounds {
		t.Logf("no batching observed: %d messages for %d calls", m.MessagesIn, callers*rounds)
	}
}

// Limits below batchMaxBytes, either way: with the server's maxMessage at
// 16 KiB the client's batches of calls stay within it, and with the
// client's announced limit at 16 KiB the server's batches of answers do.
// 48 calls or answers of 3 KiB in one 64 KiB batch would close the
// connection with 1009.
func TestBatchesWithinSmallLimits(t *testing.T) {
	for _, tc := range []struct {
		name           string
		server, client Limits
	}{
		{"server limit", Limits{MaxMessageSize: 16 << 10}, Limits{}},
		{"client limit", Limits{}, Limits{MaxMessageSize: 16 << 10}},
	} {
		_, addr := newTestServer(t, Options{Limits: tc.server})
		c := dialClient(t, addr, ClientOptions{Limits: tc.client, Reconnect: Reconnect{Disabled: true}})
		if err := c.Call(context.Background(), "echo/raw", []byte("x"), nil); err != nil {
			t.Fatal(err) // the capabilities have crossed
		}
		const callers, rounds = 48, 8
		payload := make([]byte, 3<<10)
		errs := make(chan error, callers*rounds)
		var wg sync.WaitGroup
		for range callers {
			wg.Go(func() {
				for range rounds {
					if err := c.Call(context.Background(), "echo/raw", payload, nil); err != nil {
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("%s: call failed: %v", tc.name, err)
		}
	}
}

// A batch the client's outbox drops holds other callers' calls: they fail
// at once with ErrOverloaded instead of waiting for answers that will never
// come. The server's read loop is held in a handler, so the socket fills
// and the client's 256 KiB outbox overflows.
func TestClientDroppedBatchFailsItsCalls(t *testing.T) {
	r := testRouter()
	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	entered := make(chan struct{}, 1)
	Handle(r, "test/hold", func(ctx context.Context, _ struct{}) (string, error) {
		entered <- struct{}{}
		<-release
		return "released", nil
	})
	_, addr := newTestServer(t, Options{Router: r})
	c := dialClient(t, addr, ClientOptions{CallTimeout: 10 * time.Minute, Limits: Limits{MaxOutboxBytes: 256 << 10}})
	held := make(chan error, 1)
	go func() { held <- c.Call(context.Background(), "test/hold", struct{}{}, nil) }()
	<-entered

	// 24 MiB of calls in flight, more than loopback's socket buffers hold,
	// in items small enough to share batches.
	const callers, rounds = 1536, 1
	payload := make([]byte, 16<<10)
	results := make(chan error, callers*rounds)
	for range callers {
		go func() {
			for range rounds {
				results <- c.Call(context.Background(), "echo/raw", payload, nil)
			}
		}()
	}
	// Some calls must fail with ErrOverloaded while the server still holds
	// its read loop; a lost call would wait for its ten-minute timeout.
	overloaded, done := 0, 0
	wait := time.After(60 * time.Second)
	for overloaded == 0 {
		select {
		case err := <-results:
			done++
			if errors.Is(err, ErrOverloaded) {
				overloaded++
			} else {
				t.Fatalf("call finished with %v before the server read anything", err)
			}
		case <-wait:
			t.Fatalf("no call failed with ErrOverloaded in 60 s (%d finished)", done)
		}
	}
	unblock()
	if err := <-held; err != nil {
		t.Fatalf("held call: %v", err)
	}
	for done < callers*rounds {
		select {
		case err := <-results:
			done++
			if err != nil && !errors.Is(err, ErrOverloaded) {
				t.Fatalf("call: %v", err)
			}
		case <-wait:
			t.Fatalf("%d of %d calls still waiting: calls of a dropped batch were lost", callers*rounds-done, callers*rounds)
		}
	}
}

// scriptedLink is a link whose sends end as statuses says, one per send.
type scriptedLink struct {
	link
	statuses []corkwriter.Status
}

func (l *scriptedLink) sendBuilt([]byte) corkwriter.Status {
	st := l.statuses[0]
	l.statuses = l.statuses[1:]
	return st
}

func (l *scriptedLink) maxPacket() int { return 0 }

// A caller that queued its packet behind others (enqueue's yield) flushes
// a round that other callers may have queued behind it too before it
// began. When the outbox takes the caller's packet and refuses a later
// one, only the later one's call fails: the caller's call was sent, and
// failing it with ErrOverloaded would have the server run a call its
// caller was told had not left.
func TestOwnPacketSentBeforeARefusedOneStaysPending(t *testing.T) {
	c := &Client{timeouts: scheduler.New(func([]callRef) {})}
	defer c.timeouts.Stop()
	cc := &clientConn{c: c, link: &scriptedLink{statuses: []corkwriter.Status{corkwriter.Sent, corkwriter.Dropped}}}
	cc.serverMaxBatch.Store(1) // a packet per send
	own, later := &pendingCall{id: 1, done: make(chan struct{}, 1)}, &pendingCall{id: 2, done: make(chan struct{}, 1)}
	c.pending.add(own)
	c.pending.add(later)

	// As enqueue leaves it: the caller flushes, its packet queued, and
	// another caller's packet queued behind it.
	cc.flushing = true
	cc.queue = wire.AppendItem(nil, wire.AppendCall(nil, dispatch.KindCall, own.id, "m", 0, nil))
	ownEnd := len(cc.queue)
	cc.queue = wire.AppendItem(cc.queue, wire.AppendCall(nil, dispatch.KindCall, later.id, "m", 0, nil))
	cc.queued = 2
	if err := cc.flushQueue(ownEnd); err != nil {
		t.Fatalf("the caller's packet was sent, but the flush returned %v", err)
	}
	if c.pending.get(own.id) != own {
		t.Fatal("the caller's call left the table")
	}
	if c.pending.get(later.id) != nil || !errors.Is(later.err, ErrOverloaded) {
		t.Fatalf("the refused packet's call: pending %v, err %v", c.pending.get(later.id) != nil, later.err)
	}
}
