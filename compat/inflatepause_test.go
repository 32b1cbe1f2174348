package compat

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/wsframe"
)

// pauseHooks sets testHookInflatePause for the pauses of s's connections
// until the test ends: began, then ended with whether the pause's time
// ran out.
func pauseHooks(t *testing.T, s *Server, began func(*Peer), ended func(timedOut bool)) {
	t.Helper()
	testHookInflatePause.Store(&inflatePauseHooks{
		began: func(p *Peer) {
			if p.srv == s {
				began(p)
			}
		},
		ended: func(p *Peer, timedOut bool) {
			if p.srv == s {
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
