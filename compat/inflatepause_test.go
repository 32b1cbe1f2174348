package compat

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/corkwriter"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/wsframe"
)

// wantPauseCutShort waits for a pause's end on ended (the ended hook's
// timedOut) and fails the test if the pause ran its whole time: what, a
// close or the connection's end, did not cut it short.
func wantPauseCutShort(t *testing.T, ended <-chan bool, what string) {
	t.Helper()
	select {
	case timedOut := <-ended:
		if timedOut {
			t.Errorf("the pause ran its whole time: %s did not cut it short", what)
		}
	case <-time.After(hangBound):
		t.Fatal("the pause did not end")
	}
}

// wantPauseRanItsTime waits for a pause's end on ended, as
// wantPauseCutShort does, and fails the test if the pause was cut short:
// why says what must not have ended it.
func wantPauseRanItsTime(t *testing.T, ended <-chan bool, why string) {
	t.Helper()
	select {
	case timedOut := <-ended:
		if !timedOut {
			t.Errorf("the pause was cut short: %s", why)
		}
	case <-time.After(hangBound):
		t.Fatal("the pause did not end")
	}
}

// pauseHooks sets testHookInflatePause for the pauses of s's connections
// until the test ends: began, then ended with whether the pause's time
// ran out.
func pauseHooks(t *testing.T, s *Server, began func(*Peer), ended func(timedOut bool)) {
	t.Helper()
	testHookInflatePause.Store(&inflatePauseHooks{
		began: func(r inflatePacer) {
			if p, ok := r.(*Peer); ok && p.srv == s {
				began(p)
			}
		},
		ended: func(r inflatePacer, timedOut bool) {
			if p, ok := r.(*Peer); ok && p.srv == s {
				ended(timedOut)
			}
		},
	})
	t.Cleanup(func() { testHookInflatePause.Store(nil) })
}

// pmdBomb returns a permessage-deflate frame of a few hundred bytes
// holding a "bomb" event that inflates to about size.
func pmdBomb(t *testing.T, size int) []byte {
	t.Helper()
	pkt := wire.Append(nil, &wire.Packet{Kind: dispatch.KindEvent, Name: []byte("bomb"), Payload: make([]byte, size-16)})
	return wsframe.AppendMaskedFrame(nil, wsframe.OpBinary, deflateMessage(t, pkt), wsframe.Fin|wsframe.Rsv1, wsframe.NewMaskKey())
}

// pauseLimits makes a message of size a second's deficit: two bombs
// spend the burst and a second more, so the third pauses the reading for
// maxInflatePause.
func pauseLimits(size int) Limits {
	return Limits{MaxMessageSize: int64(size), MaxInflateRate: int64(size)}
}

// A call read in the same turn as, and after, a bomb that took the budget
// a second below zero is answered while the reading is paused for the
// next bomb, not once the pause is over: the pause sends the turn's
// answers so far first. The pause's start is held by the hook until the
// answer has come, so without that the answer never comes in time.
func TestInflatePauseSendsTheTurnsAnswers(t *testing.T) {
	const size = 64 << 10
	var events atomic.Int32
	s, addr := newTestServer(t, Options{
		Router:       inflateRateRouter(new(atomic.Int64), &events),
		NoDictionary: true,
		Limits:       pauseLimits(size),
	})
	began := make(chan struct{}, 1)
	release := make(chan struct{})
	ended := make(chan bool, 1)
	pauseHooks(t, s, func(*Peer) {
		began <- struct{}{}
		select {
		case <-release:
		case <-time.After(10 * time.Second):
		}
	}, func(timedOut bool) { ended <- timedOut })
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()

	c := dialPMD(t, addr, "permessage-deflate")
	bomb := pmdBomb(t, size)
	call := wsframe.AppendMaskedFrame(nil, wsframe.OpBinary, wire.AppendCall(nil, dispatch.KindCall, 7, "ping", 0, []byte("1")), wsframe.Fin, wsframe.NewMaskKey())
	var frames []byte
	for _, f := range [][]byte{bomb, bomb, call, bomb} {
		frames = append(frames, f...)
	}
	if err := c.WriteRaw(frames); err != nil { // one write: one read, one turn
		t.Fatal(err)
	}
	select {
	case <-began:
	case <-time.After(10 * time.Second):
		t.Fatal("the third bomb did not pause the reading")
	}
	if p := readPacket(t, c); p.Kind != dispatch.KindResult || p.ID != 7 {
		t.Fatalf("read %v %d while paused, want the call's result", p.Kind, p.ID)
	}
	if n := events.Load(); n != 2 {
		t.Errorf("%d bombs handled while the third waits, want 2", n)
	}
	close(release)
	released = true
	<-ended
	waitLong(t, "the third bomb", func() bool { return events.Load() == 3 })
	if m := s.Metrics(); m.InflateThrottled != 1 {
		t.Errorf("%d pauses counted, want 1", m.InflateThrottled)
	}
}

// A connection closed while its reading is paused for MaxInflateRate ends
// at once, not when the pause's time runs out: by Shutdown with a short
// ctx, which then returns within its drop grace, or by Peer.Close. The
// pause is a whole maxInflatePause; the hook tells whether it ran out.
func TestInflatePauseEndsWithTheConnection(t *testing.T) {
	const size = 64 << 10
	for _, how := range []string{"Shutdown", "Close"} {
		t.Run(how, func(t *testing.T) {
			disconnected := make(chan error, 1)
			s, addr := newTestServer(t, Options{
				Router:       inflateRateRouter(new(atomic.Int64), new(atomic.Int32)),
				NoDictionary: true,
				Limits:       pauseLimits(size),
				OnDisconnect: func(_ *Peer, err error) { disconnected <- err },
			})
			paused := make(chan *Peer, 1)
			ended := make(chan bool, 1)
			pauseHooks(t, s, func(p *Peer) { paused <- p }, func(timedOut bool) { ended <- timedOut })

			c := dialPMD(t, addr, "permessage-deflate")
			bomb := pmdBomb(t, size)
			if err := c.WriteRaw(append(append(append([]byte(nil), bomb...), bomb...), bomb...)); err != nil {
				t.Fatal(err)
			}
			var p *Peer
			select {
			case p = <-paused:
			case <-time.After(10 * time.Second):
				t.Fatal("the third bomb did not pause the reading")
			}
			switch how {
			case "Shutdown":
				// The client never answers the close frame: ctx runs out
				// and the connection is dropped.
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				defer cancel()
				s.Shutdown(ctx)
			case "Close":
				p.Close()
				if code, _ := c.ReadClose(10 * time.Second); code != wsframe.CloseNormal {
					t.Errorf("the client read close %d, want 1000", code)
				}
				c.Close()
			}
			select {
			case <-disconnected:
			case <-time.After(10 * time.Second):
				t.Fatal("the connection did not end")
			}
			select {
			case timedOut := <-ended:
				if timedOut {
					t.Error("the pause ran its whole time: the connection outlived it")
				}
			default:
				t.Error("the connection ended before its read loop's pause did")
			}
		})
	}
}

// Compressed datagrams over native QUIC, sent faster than the connection
// may inflate (PROTOCOL.md §8.4: datagrams carry Emit and Event packets,
// here dictionary-compressed Events), are dropped once the budget is
// spent and counted in InflateThrottled and DroppedEvents; the connection
// lives on, and another connection's compressed datagrams, within its
// own budget, are all delivered meanwhile.
func TestInflateRateDatagramsDroppedOverQUIC(t *testing.T) {
	const (
		size = 256 << 10 // MaxMessageSize, the burst; and the rate, a second
		n    = 40        // datagrams from each client
	)
	var bomberGot, otherGot atomic.Int32
	var bomberID atomic.Uint64
	r := NewRouter()
	HandleEvent(r, "bomb", func(ctx context.Context, _ []byte) {
		if PeerFrom(ctx).ID() == bomberID.Load() {
			bomberGot.Add(1)
		} else {
			otherGot.Add(1)
		}
	})
	Handle(r, "ping", func(_ context.Context, v []byte) ([]byte, error) { return v, nil })
	s, err := NewServer(Options{Router: r, Logger: slog.New(slog.DiscardHandler), Limits: pauseLimits(size)})
	if err != nil {
		t.Fatal(err)
	}
	cert := testCert()
	ln, err := s.ListenQUIC("127.0.0.1:0", cert.ServerTLSConfig())
	if err != nil {
		t.Fatal(err)
	}
	go s.ServeQUIC(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	d, err := RouterDictionary(r)
	if err != nil {
		t.Fatal(err)
	}
	dialQUIC := func() (*Client, *clientConn) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := Dial(ctx, "quic://"+ln.Addr().String(), ClientOptions{TLSConfig: cert.ClientTLSConfig(), Dictionary: d, Reconnect: Reconnect{Disabled: true}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if err := c.Call(ctx, "ping", []byte("1"), nil); err != nil { // after the capabilities: the dictionary is on
			t.Fatal(err)
		}
		cc, err := c.current()
		if err != nil || cc.dict.Load() == nil {
			t.Fatalf("no dictionary negotiated: %v", err)
		}
		return c, cc
	}
	// compressed returns an Event datagram whose body, dictionary
	// compressed, inflates to about inflated bytes.
	compressed := func(cc *clientConn, inflated int) []byte {
		pkt := wire.Append(nil, &wire.Packet{Kind: dispatch.KindEvent, Name: []byte("bomb"), Payload: []byte(`"` + strings.Repeat("a", inflated-16) + `"`)})
		b, release, ok := cc.dict.Load().compressPacket(pkt)
		if !ok {
			t.Fatal("the event did not compress")
		}
		defer release()
		return append([]byte(nil), b[frameHeadroom:]...)
	}
	bomber, bcc := dialQUIC()
	ps := s.snapshotPeers()
	if len(ps) != 1 {
		t.Fatalf("%d peers, want the bomber's", len(ps))
	}
	bomberID.Store(ps[0].ID())
	_, occ := dialQUIC()

	big := compressed(bcc, size-64)    // two spend the burst and a second more
	small := compressed(occ, size/2/n) // n of them: half the burst
	t.Logf("datagrams of %d bytes inflating to about %d, and of %d to %d", len(big), size, len(small), size/2/n)
	before := s.Metrics()
	for range n {
		for _, x := range []struct {
			cc  *clientConn
			dgm []byte
		}{{bcc, big}, {occ, small}} {
			if st, ok := x.cc.link.sendDatagram(x.dgm); !ok || (st != corkwriter.Sent && st != corkwriter.Queued) {
				t.Fatalf("a datagram of %d bytes not sent: %v %v", len(x.dgm), st, ok)
			}
		}
	}
	dropped := func() uint64 { return s.Metrics().DroppedEvents - before.DroppedEvents }
	waitLong(t, "every datagram handled", func() bool {
		return uint64(bomberGot.Load())+dropped() == n && otherGot.Load() == n
	})
	m := s.Metrics()
	throttled := m.InflateThrottled - before.InflateThrottled
	t.Logf("the bomber's datagrams: %d delivered, %d dropped; %d throttled", bomberGot.Load(), dropped(), throttled)
	if bomberGot.Load() == 0 || dropped() == 0 || throttled != dropped() {
		t.Errorf("the bomber's datagrams: %d delivered, %d dropped, %d throttled; want some of each, as many throttled as dropped", bomberGot.Load(), dropped(), throttled)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := bomber.Call(ctx, "ping", []byte("2"), nil); err != nil {
		t.Fatalf("the bomber's call after its datagrams: %v", err)
	}
	if len(m.Closes) != 0 || s.Peers() != 2 {
		t.Errorf("closes %v, %d peers; want none closed", m.Closes, s.Peers())
	}
}
