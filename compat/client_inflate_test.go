package compat

// The Go client held to Limits.MaxInflateRate, against a raw server
// (rawserver_test.go) that sends dictionary-compressed bombs: packets of
// zeros that inflate about 1000 times over. The Go client offers no
// permessage-deflate (a frame with RSV1 closes with 1002), so the
// dictionary (PROTOCOL.md §6) is what a server can make it inflate.

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gobwas/ws/wsutil"
	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/dictionary"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/wsframe"
	"github.com/quic-go/quic-go"
)

// bombSize is the client's MaxMessageSize in these tests, the burst of
// its inflate budget; a bomb inflates to a little less.
const bombSize = 64 << 10

// bombLimits are the client's limits: a bomb is 1/perSecond of a
// second's budget, so two spend the burst and the third pauses the
// reading for about that long.
func bombLimits(perSecond int64) Limits {
	return Limits{MaxMessageSize: bombSize, MaxInflateRate: perSecond * bombSize}
}

// dialBombed dials url as a client holding d, with bombLimits(perSecond),
// closed at the test's end.
func dialBombed(t *testing.T, url string, opts ClientOptions, d *dictionary.Dictionary, perSecond int64) (*Client, *clientConn) {
	t.Helper()
	opts.Dictionary = d
	opts.Limits = bombLimits(perSecond)
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()
	c, err := Dial(ctx, url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	cc, err := c.current()
	if err != nil {
		t.Fatal(err)
	}
	return c, cc
}

// bombDictionary is the dictionary both ends hold.
func bombDictionary(t *testing.T) *dictionary.Dictionary {
	t.Helper()
	d, err := RouterDictionary(testRouter())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// dictBomb returns a "bomb" Event packet, compressed with d's deflate
// codec, whose body inflates to about bombSize-64 bytes of zeros.
func dictBomb(t *testing.T, d *dictionary.Dictionary) []byte {
	t.Helper()
	return dictEvent(t, d, bombSize-64)
}

// dictEvent returns a "bomb" Event packet, compressed with d's deflate
// codec, whose body inflates to about n bytes of zeros.
func dictEvent(t *testing.T, d *dictionary.Dictionary, n int) []byte {
	t.Helper()
	dc := &dictCodec{name: "deflate:" + d.ID(), codec: dictionary.NewDeflate(d, dictionary.CodecOptions{MaxDecoded: maxDecodedBody(bombSize)})}
	pkt := wire.Append(nil, &wire.Packet{Kind: dispatch.KindEvent, Name: []byte("bomb"), Payload: make([]byte, n-16)})
	b, release, ok := dc.compressPacket(pkt)
	if !ok {
		t.Fatal("the bomb did not compress")
	}
	defer release()
	return append([]byte(nil), b[frameHeadroom:]...)
}

// bombServer is a raw server of one connection that negotiates d's
// deflate codec and answers each call by its method, all in one write
// (one read, one turn on the client's side): "ping" with its result;
// "bombs" with n bombs, then the result; "around" with two bombs, the
// result, and a third bomb; "hold" with three bombs and no result. It
// returns the server's address.
func bombServer(t *testing.T, d *dictionary.Dictionary, n int) string {
	t.Helper()
	ln := listenLoopback(t)
	bomb := wsframe.AppendFrame(nil, wsframe.OpBinary, dictBomb(t, d), wsframe.Fin)
	go func() {
		nc, err := acceptRaw(ln, "")
		if err != nil {
			return
		}
		wsutil.WriteServerBinary(nc, capsOf("codec", "json", "dict", "deflate:"+d.ID()))
		serveRaw(nc, func(p wire.Packet) {
			if p.Kind != dispatch.KindCall {
				return
			}
			result := wsframe.AppendFrame(nil, wsframe.OpBinary, wire.AppendResult(nil, p.ID, []byte(`"ok"`)), wsframe.Fin)
			var frames []byte
			switch string(p.Name) {
			case "ping":
				frames = result
			case "bombs":
				for range n {
					frames = append(frames, bomb...)
				}
				frames = append(frames, result...)
			case "around":
				frames = append(append(append(append(frames, bomb...), bomb...), result...), bomb...)
			case "hold":
				frames = append(append(append(frames, bomb...), bomb...), bomb...)
			}
			nc.Write(frames)
		})
	}()
	return ln.Addr().String()
}

// dialBombs dials a bombServer with the dictionary d and limits, and
// returns the client, its connection, and the count of the bombs its
// listener got.
func dialBombs(t *testing.T, addr string, d *dictionary.Dictionary, limits Limits) (*Client, *clientConn, *atomic.Int32) {
	t.Helper()
	c := dialClient(t, addr, ClientOptions{Dictionary: d, Limits: limits, Reconnect: Reconnect{Disabled: true}})
	cc, err := c.current()
	if err != nil {
		t.Fatal(err)
	}
	if cc.dict.Load() == nil {
		t.Fatal("no dictionary negotiated")
	}
	got := new(atomic.Int32)
	c.On("bomb", func(Message) { got.Add(1) })
	return c, cc, got
}

// clientPauseHooks sets testHookInflatePause for cc's pauses until the
// test ends: began, then ended with whether the pause's time ran out.
func clientPauseHooks(t *testing.T, cc *clientConn, began func(), ended func(timedOut bool)) {
	t.Helper()
	testHookInflatePause.Store(&inflatePauseHooks{
		began: func(r inflatePacer) {
			if r == inflatePacer(cc) {
				began()
			}
		},
		ended: func(r inflatePacer, timedOut bool) {
			if r == inflatePacer(cc) {
				ended(timedOut)
			}
		},
	})
	t.Cleanup(func() { testHookInflatePause.Store(nil) })
}

// awaitFullBudget waits until cc's inflate budget holds its whole burst
// again, so that two bombs pass and the third pauses.
func awaitFullBudget(t *testing.T, cc *clientConn) {
	t.Helper()
	waitLong(t, "a full inflate budget", func() bool {
		b := cc.inflateRate.Load()
		if b == nil {
			return true
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		b.refill(monoNow())
		return b.tokens >= b.burst
	})
}

// A server sending bombs faster than the client's MaxInflateRate has the
// client's reading paused before it inflates again, and every bomb is
// delivered all the same. The call whose answer follows the bombs is a
// Go call: its caller never reads, so the read loop does.
func TestClientInflatePausesAndDeliversAll(t *testing.T) {
	const n = 5
	d := bombDictionary(t)
	c, cc, got := dialBombs(t, bombServer(t, d, n), d, bombLimits(4))
	var pauses, timedOut atomic.Int32
	clientPauseHooks(t, cc, func() { pauses.Add(1) }, func(out bool) {
		if out {
			timedOut.Add(1)
		}
	})
	call := c.Go(context.Background(), "bombs", nil, nil, nil)
	select {
	case <-call.Done:
		if call.Err != nil {
			t.Fatalf("the call answered after the bombs: %v", call.Err)
		}
	case <-time.After(hangBound):
		t.Fatal("the call answered after the bombs never returned")
	}
	if k := got.Load(); k != n {
		t.Errorf("%d bombs delivered, want %d", k, n)
	}
	t.Logf("%d pauses, %d ran their time", pauses.Load(), timedOut.Load())
	if pauses.Load() == 0 || timedOut.Load() != pauses.Load() {
		t.Errorf("%d pauses, %d ran their time; want some, all of them", pauses.Load(), timedOut.Load())
	}
	if m := c.Metrics(); m.InflateThrottled != uint64(pauses.Load()) || m.DroppedDatagrams != 0 {
		t.Errorf("ClientMetrics %+v after %d pauses; want InflateThrottled %d, no datagram dropped", m, pauses.Load(), pauses.Load())
	}
	if _, err := c.current(); err != nil {
		t.Errorf("the connection after the bombs: %v", err)
	}
}

// The same over native QUIC, whose read loop is the pktConn's: bombs on
// the control stream pause it, and are all delivered.
func TestClientInflatePausesOverQUIC(t *testing.T) {
	const n = 5
	d := bombDictionary(t)
	bomb := dictBomb(t, d)
	send := make(chan struct{})
	url, opts := rawQUICServerCaps(t, capsOf("codec", "json", "dict", "deflate:"+d.ID()), func(qc *quic.Conn, control *quic.Stream) {
		writeBombsWhen(qc, control, send, bomb, n)
	})
	c, cc := dialBombed(t, url, opts, d, 4)
	var got atomic.Int32
	c.On("bomb", func(Message) { got.Add(1) })
	var pauses atomic.Int32
	clientPauseHooks(t, cc, func() { pauses.Add(1) }, func(bool) {})
	close(send)
	waitLong(t, "every bomb", func() bool { return got.Load() == n })
	if pauses.Load() == 0 {
		t.Error("the bombs did not pause the reading")
	}
}

// A negative MaxInflateRate turns the limit off: the same bombs, no
// pause, no budget.
func TestClientInflateRateNegativeTurnsItOff(t *testing.T) {
	const n = 5
	d := bombDictionary(t)
	c, cc, got := dialBombs(t, bombServer(t, d, n), d, Limits{MaxMessageSize: bombSize, MaxInflateRate: -1})
	var pauses atomic.Int32
	clientPauseHooks(t, cc, func() { pauses.Add(1) }, func(bool) {})
	if err := callWithin(t, c, context.Background(), "bombs", nil, nil); err != nil {
		t.Fatal(err)
	}
	if k := got.Load(); k != n {
		t.Errorf("%d bombs delivered, want %d", k, n)
	}
	if pauses.Load() != 0 || cc.inflateRate.Load() != nil {
		t.Errorf("%d pauses, budget %v; want none", pauses.Load(), cc.inflateRate.Load())
	}
}

// Dial refuses a MaxInflateRate below MaxMessageSize a second, as
// NewServer does: a packet of MaxMessageSize would pause the reading for
// more than a second.
func TestClientInflateRateBelowMessageSizeRefused(t *testing.T) {
	_, err := Dial(context.Background(), "ws://127.0.0.1:1/ws", ClientOptions{Limits: Limits{MaxMessageSize: 1 << 20, MaxInflateRate: 1 << 19}})
	if err == nil || !strings.Contains(err.Error(), "MaxInflateRate") || !strings.Contains(err.Error(), "below MaxMessageSize") {
		t.Fatalf("Dial with a rate below MaxMessageSize a second: %v", err)
	}
}

// A call whose answer comes in the same turn as, after, a bomb that
// spent the budget returns to its caller before the pause for the next
// bomb ends. The hook holds the pause's start until the call has
// returned: a call that returned only once the pause was over fails
// there, after hangBound. Read by the read loop (a Go call), the answer
// was settled before the pause; read by its caller (a Call, retried
// until its caller read its own answer), the caller does not pause at
// all once its call is settled (clientConn.pauseOver), and the deficit
// is left to the loop.
func TestClientInflatePauseReturnsTheTurnsAnswer(t *testing.T) {
	d := bombDictionary(t)
	for _, mode := range []string{"Go", "Call"} {
		t.Run(mode, func(t *testing.T) {
			c, cc, got := dialBombs(t, bombServer(t, d, 0), d, bombLimits(4))
			var returned atomic.Pointer[chan struct{}] // closed once the attempt's call returned
			var late atomic.Int32
			ended := make(chan struct{}, 64)
			clientPauseHooks(t, cc, func() {
				select {
				case <-*returned.Load():
				case <-time.After(hangBound):
					late.Add(1)
				}
			}, func(bool) { ended <- struct{}{} })
			attempts := 0
			for {
				attempts++
				awaitFullBudget(t, cc)
				ch := make(chan struct{})
				returned.Store(&ch)
				if mode == "Go" {
					call := c.Go(context.Background(), "around", nil, nil, nil)
					select {
					case <-call.Done:
						close(ch)
						if call.Err != nil {
							t.Fatal(call.Err)
						}
					case <-time.After(2 * hangBound):
						t.Fatal("the Go call never returned")
					}
					select {
					case <-ended:
					case <-time.After(2 * hangBound):
						t.Fatal("the read loop did not pause for the bomb after the answer")
					}
					break
				}
				// An answered call empties the table: the read loop hands
				// the reads to the callers, and the next one reads its own
				// answer, most times.
				if err := callWithin(t, c, context.Background(), "ping", nil, nil); err != nil {
					t.Fatal(err)
				}
				reads := cc.shared.callerReads.Load()
				err := callWithin(t, c, context.Background(), "around", nil, nil)
				close(ch)
				if err != nil {
					t.Fatal(err)
				}
				if cc.shared.callerReads.Load() > reads {
					t.Logf("attempt %d: the caller read its own answer", attempts)
					break
				}
				if attempts == 50 {
					t.Fatal("50 calls, none read by its caller")
				}
				select { // the loop read the turn, and paused after the answer
				case <-ended:
				case <-time.After(2 * hangBound):
					t.Fatal("the read loop did not pause for the bomb after the answer")
				}
			}
			if late.Load() != 0 {
				t.Error("the call returned only once the pause after its answer was over")
			}
			waitLong(t, "every bomb", func() bool { return got.Load() == int32(3*attempts) })
		})
	}
}

// A call whose caller reads for its own answer, and is paused there for
// the budget before the answer came, returns at once when its ctx ends:
// the pause ends (its time does not run out), as a read does
// (wakeReader). The hook cancels the ctx as the caller's pause begins;
// an attempt whose pause is the read loop's is retried.
func TestClientInflatePauseEndsWithTheCallersCtx(t *testing.T) {
	d := bombDictionary(t)
	c, cc, _ := dialBombs(t, bombServer(t, d, 0), d, bombLimits(1))
	type pause struct {
		caller   bool
		timedOut bool
	}
	var cancel atomic.Pointer[context.CancelFunc]
	var caller atomic.Bool
	pauses := make(chan pause, 1)
	clientPauseHooks(t, cc, func() {
		// The pausing goroutine holds the read token.
		caller.Store(cc.shared.owner.Load() == readerCaller)
		if caller.Load() {
			(*cancel.Load())()
		}
	}, func(timedOut bool) { pauses <- pause{caller.Load(), timedOut} })
	for attempt := 1; ; attempt++ {
		awaitFullBudget(t, cc)
		if err := callWithin(t, c, context.Background(), "ping", nil, nil); err != nil {
			t.Fatal(err)
		}
		ctx, cf := context.WithCancel(context.Background())
		cancel.Store(&cf)
		done := make(chan error, 1)
		go func() { done <- c.Call(ctx, "hold", nil, nil) }()
		var p pause
		select {
		case p = <-pauses:
		case <-time.After(hangBound):
			t.Fatal("the third bomb did not pause the reading")
		}
		cf()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("the held call: %v, want context.Canceled", err)
			}
		case <-time.After(hangBound):
			t.Fatal("the held call did not return once its ctx ended")
		}
		if p.caller {
			if p.timedOut {
				t.Error("the caller's pause ran its whole time past its ctx")
			}
			t.Logf("attempt %d: the caller paused", attempt)
			return
		}
		if attempt == 50 {
			t.Fatal("50 calls, none paused by its caller")
		}
	}
}

// Client.Close during a pause of the read loop ends the pause at once,
// not when its time runs out, and Close returns.
func TestClientInflatePauseEndsWithClose(t *testing.T) {
	d := bombDictionary(t)
	c, cc, _ := dialBombs(t, bombServer(t, d, 0), d, bombLimits(1))
	began := make(chan struct{}, 1)
	ended := make(chan bool, 1)
	clientPauseHooks(t, cc, func() { began <- struct{}{} }, func(timedOut bool) { ended <- timedOut })
	call := c.Go(context.Background(), "hold", nil, nil, nil)
	select {
	case <-began:
	case <-time.After(hangBound):
		t.Fatal("the third bomb did not pause the reading")
	}
	closed := make(chan struct{})
	go func() {
		c.Close()
		close(closed)
	}()
	wantPauseCutShort(t, ended, "Close")
	select {
	case <-closed:
	case <-time.After(hangBound):
		t.Fatal("Close did not return")
	}
	select {
	case <-call.Done:
		if !errors.Is(call.Err, ErrDisconnected) && !errors.Is(call.Err, ErrClosed) {
			t.Errorf("the held call after Close: %v", call.Err)
		}
	case <-time.After(hangBound):
		t.Fatal("the held call did not end with the client")
	}
}

// While the connection is over its budget, callers leave the reading to
// the read loop, which waits out the deficit: a caller that reads skips
// the pauses once its own answer is read (clientConn.pauseOver), and
// caller after caller reading a turn would skip them all. Their calls
// are answered all the same, read by the loop.
func TestClientCallersLeaveTheReadingWhileOverBudget(t *testing.T) {
	d := bombDictionary(t)
	c, cc, _ := dialBombs(t, bombServer(t, d, 1), d, bombLimits(1))
	// One bomb makes the budget; callers do read their answers.
	if err := callWithin(t, c, context.Background(), "bombs", nil, nil); err != nil {
		t.Fatal(err)
	}
	for i := 0; cc.shared.callerReads.Load() == 0; i++ {
		if err := callWithin(t, c, context.Background(), "ping", nil, nil); err != nil || i == 1000 {
			t.Fatalf("%d calls, none read by its caller: %v", i, err)
		}
	}
	// A deficit of a minute: the calls below are made within it.
	cc.inflateRate.Load().charge(60*bombSize, monoNow())
	reads := cc.shared.callerReads.Load()
	for range 50 {
		if err := callWithin(t, c, context.Background(), "ping", nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := cc.shared.callerReads.Load() - reads; n != 0 {
		t.Errorf("%d of 50 calls read by their callers while the connection owed its budget, want 0", n)
	}
}

// Compressed datagrams (PROTOCOL.md §8.4) that find the client's budget
// spent are dropped before they are inflated, as the server drops a
// client's; the others are delivered, and the connection lives on.
// Every datagram reaches handleDatagram (testHookDatagramBegun), so
// those not delivered were dropped there, not lost on the way.
func TestClientInflateRateDropsDatagrams(t *testing.T) {
	const n = 40
	d := bombDictionary(t)
	dgm := dictEvent(t, d, bombSize/4) // four spend the burst
	send := make(chan struct{})
	url, opts := rawQUICServerCaps(t, capsOf("codec", "json", "dict", "deflate:"+d.ID()), func(qc *quic.Conn, _ *quic.Stream) {
		select {
		case <-send:
		case <-qc.Context().Done():
			return
		}
		for range n {
			if err := qc.SendDatagram(dgm); err != nil {
				return
			}
		}
	})
	c, _ := dialBombed(t, url, opts, d, 1)
	var delivered atomic.Int32
	c.On("bomb", func(Message) { delivered.Add(1) })
	var begun atomic.Int32
	hook := func() { begun.Add(1) }
	testHookDatagramBegun.Store(&hook)
	defer testHookDatagramBegun.Store(nil)
	close(send)
	waitLong(t, "every datagram", func() bool { return begun.Load() == n })
	t.Logf("%d datagrams of %d bytes, inflating to about %d each: %d delivered", n, len(dgm), bombSize/4, delivered.Load())
	if k := delivered.Load(); k == 0 || k >= n {
		t.Errorf("%d of %d datagrams delivered; want some, and the others dropped", k, n)
	}
	// Each dropped one is counted, as a throttle and as a drop.
	lost := uint64(n - delivered.Load())
	if m := c.Metrics(); m.DroppedDatagrams != lost || m.InflateThrottled != lost {
		t.Errorf("ClientMetrics %+v; want %d datagrams dropped, and as many throttled", m, lost)
	}
	if _, err := c.current(); err != nil {
		t.Errorf("the connection after the datagrams: %v", err)
	}
}

// writeBombsWhen writes n copies of bomb, each with its length prefix, on
// a raw QUIC server's control stream once send is closed; false when the
// connection ended first.
func writeBombsWhen(qc *quic.Conn, control *quic.Stream, send <-chan struct{}, bomb []byte, n int) bool {
	select {
	case <-send:
	case <-qc.Context().Done():
		return false
	}
	var b []byte
	for range n {
		b = append(binary.AppendUvarint(b, uint64(len(bomb))), bomb...)
	}
	_, err := control.Write(b)
	return err == nil
}
