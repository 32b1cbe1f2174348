package compat

// The keepalive during one whole inflate pause: while a connection's own
// reading is paused for Limits.MaxInflateRate, the other end's answers
// to its pings wait unread, so the pause must not be taken for the
// other end's silence, however short IdleTimeout - KeepaliveInterval is.

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
)

// Keepalive settings of these tests: a ping is given up on
// pauseIdle - pauseKeepalive (300 ms) after it went out, under a third
// of the pause (maxInflatePause, a second), so a ping sent during the
// pause times out well within it unless the pause holds the timeout off.
const (
	pauseKeepalive = 100 * time.Millisecond
	pauseIdle      = 400 * time.Millisecond
)

// A server whose reading of a live client is paused for a whole
// maxInflatePause, longer than IdleTimeout - KeepaliveInterval, does not
// give the client up as idle: its pings during the pause go out, and the
// client's answers wait unread behind the pause, which is the server's
// own silence. Given up, the pause is cut short (the idle close ends it)
// and the client disconnected with 1001 HP_IDLE_TIMEOUT.
func TestInflatePauseIsNotTheClientsSilence(t *testing.T) {
	const size = 64 << 10
	r, d := pauseRouter(t)
	var idle atomic.Int32
	e := newCarrierEnv(t, Options{
		Router:            r,
		Limits:            pauseLimits(size),
		KeepaliveInterval: pauseKeepalive,
		IdleTimeout:       pauseIdle,
		OnDisconnect: func(_ *Peer, err error) {
			var ce *CloseError
			if errors.As(err, &ce) && ce.Reason == idleTimeoutReason {
				idle.Add(1)
			}
		},
	})
	paused, ended := watchPauses(t, e.srv)
	for _, carrier := range append([]Carrier{CarrierWebSocket}, goCarriers...) {
		t.Run(carrierName(carrier), func(t *testing.T) {
			c := e.dial(t, carrier, ClientOptions{Dictionary: d, Reconnect: Reconnect{Disabled: true}})
			sendPauseBombs(t, c, size)
			select {
			case <-paused:
			case <-time.After(hangBound):
				t.Fatal("the third event did not pause the reading")
			}
			wantPauseRanItsTime(t, ended, "the server gave its client up during its own pause")
			if n := idle.Load(); n != 0 {
				t.Errorf("%d clients given up as idle", n)
			}
			if err := callWithin(t, c, context.Background(), "ping", []byte("2"), nil); err != nil {
				t.Errorf("a call after the pause: %v", err)
			}
		})
	}
}

// The same on the Go client: its reading of a live server paused for a
// whole maxInflatePause (three dictionary-compressed events of about
// MaxMessageSize, at MaxMessageSize a second) does not have it give the
// server up as idle. The call whose answer follows the events is a Go
// call, whose caller does not read: the read loop pauses. Given up, the
// pause is cut short and the call fails with the idle close.
func TestClientInflatePauseIsNotTheServersSilence(t *testing.T) {
	const size = 64 << 10
	r := inflateRateRouter(new(atomic.Int64), new(atomic.Int32))
	payload := strings.Repeat("a", size-100)
	Handle(r, "bombs", func(ctx context.Context, _ []byte) (string, error) {
		p := PeerFrom(ctx)
		for range 3 {
			if err := p.Event("bomb", payload); err != nil {
				return "", err
			}
		}
		return "ok", nil
	})
	d, err := RouterDictionary(r)
	if err != nil {
		t.Fatal(err)
	}
	e := newCarrierEnv(t, Options{Router: r})
	for _, carrier := range append([]Carrier{CarrierWebSocket}, goCarriers...) {
		t.Run(carrierName(carrier), func(t *testing.T) {
			c := e.dial(t, carrier, ClientOptions{
				Dictionary:        d,
				Limits:            pauseLimits(size),
				KeepaliveInterval: pauseKeepalive,
				IdleTimeout:       pauseIdle,
				Reconnect:         Reconnect{Disabled: true},
			})
			cc, err := c.current()
			if err != nil || cc.dict.Load() == nil {
				t.Fatalf("no dictionary negotiated: %v", err)
			}
			var got atomic.Int32
			c.On("bomb", func(Message) { got.Add(1) })
			var pauses, cut atomic.Int32
			clientPauseHooks(t, cc, func() { pauses.Add(1) }, func(timedOut bool) {
				if !timedOut {
					cut.Add(1)
				}
			})
			call := c.Go(context.Background(), "bombs", nil, nil, nil)
			select {
			case <-call.Done:
			case <-time.After(hangBound):
				t.Fatal("the call answered after the events never returned")
			}
			if call.Err != nil {
				t.Errorf("the call answered after the events: %v", call.Err)
			}
			if pauses.Load() == 0 {
				t.Error("the events did not pause the reading")
			}
			if cut.Load() != 0 || got.Load() != 3 {
				t.Errorf("%d pauses cut short, %d events delivered; want none cut, 3 delivered", cut.Load(), got.Load())
			}
			if err := callWithin(t, c, context.Background(), "ping", []byte("2"), nil); err != nil {
				t.Errorf("a call after the pause: %v", err)
			}
		})
	}
}

// A client that goes silent after its bombs, alive on the wire (its
// socket open, no FIN) but answering nothing, is still given up once
// the server's pause is over: the pause holds the idle timeout off, it
// does not turn it off. The pause runs its whole time (the give-up
// comes after it, not during it), and the client is given up with
// 1001 HP_IDLE_TIMEOUT, IdleTimeout after the pause at the latest
// (here within hangBound).
func TestInflatePauseThenASilentClientIsGivenUp(t *testing.T) {
	const size = 64 << 10
	idle := make(chan struct{})
	var once atomic.Bool
	s, addr := newTestServer(t, Options{
		Router:            inflateRateRouter(new(atomic.Int64), new(atomic.Int32)),
		NoDictionary:      true,
		Limits:            pauseLimits(size),
		KeepaliveInterval: pauseKeepalive,
		IdleTimeout:       pauseIdle,
		OnDisconnect: func(_ *Peer, err error) {
			var ce *CloseError
			if errors.As(err, &ce) && ce.Reason == idleTimeoutReason && once.CompareAndSwap(false, true) {
				close(idle)
			}
		},
	})
	paused, ended := watchPauses(t, s)
	c := dialPMD(t, addr, "permessage-deflate")
	bomb := pmdBomb(t, size)
	if err := c.WriteRaw(append(append(append([]byte(nil), bomb...), bomb...), bomb...)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-paused:
	case <-time.After(hangBound):
		t.Fatal("the third bomb did not pause the reading")
	}
	wantPauseRanItsTime(t, ended, "the silent client was given up during the server's own pause")
	select {
	case <-idle:
	case <-time.After(hangBound):
		t.Fatal("the silent client was never given up after the pause")
	}
}

// The same on the Go client: a server that sends its bombs and then
// nothing, not even the answers to pings (a raw QUIC server that reads
// and discards), is given up after the client's pause is over.
func TestClientInflatePauseThenASilentServerIsGivenUp(t *testing.T) {
	d := bombDictionary(t)
	bomb := dictBomb(t, d)
	send := make(chan struct{})
	url, opts := rawQUICServerCaps(t, capsOf("codec", "json", "dict", "deflate:"+d.ID()), func(qc *quic.Conn, control *quic.Stream) {
		writeBombsWhen(qc, control, send, bomb, 3)
	})
	opts.KeepaliveInterval, opts.IdleTimeout = pauseKeepalive, pauseIdle
	c, cc := dialBombed(t, url, opts, d, 1)
	began := make(chan struct{}, 1)
	ended := make(chan bool, 1)
	clientPauseHooks(t, cc, func() { began <- struct{}{} }, func(timedOut bool) { ended <- timedOut })
	close(send)
	select {
	case <-began:
	case <-time.After(hangBound):
		t.Fatal("the third bomb did not pause the reading")
	}
	wantPauseRanItsTime(t, ended, "the server was given up during the client's own pause")
	select {
	case <-cc.ended:
	case <-time.After(hangBound):
		t.Fatal("the silent server was never given up after the pause")
	}
	var ce *CloseError
	if _, err := c.current(); !errors.As(err, &ce) || ce.Reason != idleTimeoutReason {
		t.Errorf("the connection ended with %v, want 1001 %s", err, idleTimeoutReason)
	}
}

// The keepalive rule during a pause of the link's own reading, on a
// simulated clock: the link is pinged as any other, never given up
// however long the pause, and once the pause is over its silence counts
// from there: a peer that still answers nothing is pinged an interval
// after the pause's end and given up IdleTimeout after it, neither
// sooner nor later than a check re-armed as check says.
func TestKeepaliveDuringAPause(t *testing.T) {
	const interval, idle = 100 * time.Millisecond, 400 * time.Millisecond
	var l liveness
	l.touch()
	start := monoTime(l.lastRead.Load())
	l.pause()
	pings := 0
	next := start.Add(interval)
	for checks := 0; next.Sub(start) < 10*idle; checks++ {
		if checks > 1000 {
			t.Fatalf("%d checks in %v of pause", checks, next.Sub(start))
		}
		act, n := l.check(next, interval, idle)
		switch act {
		case keepGiveUp:
			t.Fatalf("given up %v into a pause of the link's own reading", next.Sub(start))
		case keepPing:
			pings++
		}
		if !n.After(next) {
			t.Fatalf("check at %v re-armed for %v", next.Sub(start), n.Sub(start))
		}
		next = n
	}
	if pings == 0 {
		t.Error("not pinged during the pause")
	}
	l.resume()
	end := monoTime(l.lastRead.Load())
	if end.Before(start) || l.pongPending.Load() {
		t.Fatalf("the pause's end restarted no clock: last read %v after the start, ping pending %v", end.Sub(start), l.pongPending.Load())
	}
	// The next check as a pause's re-arm would have it (an interval from
	// a check before the end), and every one after as check says.
	next = end
	for checks := 0; ; checks++ {
		if checks > 1000 {
			t.Fatal("never given up after the pause")
		}
		act, n := l.check(next, interval, idle)
		if act == keepGiveUp {
			if d := next.Sub(end); d < idle || d > idle+interval {
				t.Errorf("given up %v after the pause's end, want %v (or a check later)", d, idle)
			}
			break
		}
		if !n.After(next) {
			t.Fatalf("check at %v after the pause re-armed for %v", next.Sub(end), n.Sub(end))
		}
		next = n
	}
}
