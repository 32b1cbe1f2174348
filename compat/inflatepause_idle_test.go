package compat

// The keepalive and inflate pauses: a pause is not the other end's
// silence.

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// A turn of many bombs, paused for before each, does not have the
// connection given up as idle: the silence is the reader's, holding back
// what the other end sent: the keepalive gives nothing up during a
// pause and restarts its idle clock where each pause ends
// (liveness.resume). Without, a client whose turn held more pauses than
// IdleTimeout gave up a server sending plenty (and a server its client:
// TestInflatePausesAreNotIdleOnTheServer). Each pause here is about a
// quarter of a second, twelve bombs in one write hold the turn for
// about 2.5 s, six times IdleTimeout (pauseIdle): given up, a pause ends
// cut short and the call fails. (The raw server answers no ping: the
// turn's pauses alone keep the connection.)
func TestClientInflatePausesAreNotIdle(t *testing.T) {
	const n = 12
	d := bombDictionary(t)
	c := dialClient(t, bombServer(t, d, n), ClientOptions{
		Dictionary:        d,
		Limits:            bombLimits(4),
		KeepaliveInterval: pauseKeepalive,
		IdleTimeout:       pauseIdle,
		Reconnect:         Reconnect{Disabled: true},
	})
	cc, err := c.current()
	if err != nil || cc.dict.Load() == nil {
		t.Fatalf("no dictionary negotiated: %v", err)
	}
	var got, pauses, cut atomic.Int32
	c.On("bomb", func(Message) { got.Add(1) })
	clientPauseHooks(t, cc, func() { pauses.Add(1) }, func(timedOut bool) {
		if !timedOut {
			cut.Add(1)
		}
	})
	call := c.Go(context.Background(), "bombs", nil, nil, nil)
	select {
	case <-call.Done:
	case <-time.After(3 * hangBound):
		t.Fatal("the call answered after the bombs never returned")
	}
	t.Logf("%d pauses, %d cut short", pauses.Load(), cut.Load())
	if call.Err != nil {
		t.Errorf("the call answered after the bombs: %v", call.Err)
	}
	if cut.Load() != 0 || got.Load() != n {
		t.Errorf("%d pauses cut short, %d bombs delivered; want none cut, %d delivered", cut.Load(), got.Load(), n)
	}
}

// The same on the server: a client whose one write holds twelve
// permessage-deflate bombs, paused for before each, is not given up as
// idle while the server holds back its reading for about 2.5 s, six
// times IdleTimeout (the raw client answers no ping).
func TestInflatePausesAreNotIdleOnTheServer(t *testing.T) {
	const (
		size = 64 << 10
		n    = 12
	)
	var events atomic.Int32
	idle := make(chan struct{})
	s, addr := newTestServer(t, Options{
		Router:            inflateRateRouter(new(atomic.Int64), &events),
		NoDictionary:      true,
		Limits:            Limits{MaxMessageSize: size, MaxInflateRate: 4 * size},
		KeepaliveInterval: pauseKeepalive,
		IdleTimeout:       pauseIdle,
		OnDisconnect: func(_ *Peer, err error) {
			var ce *CloseError
			if errors.As(err, &ce) && ce.Reason == idleTimeoutReason {
				close(idle)
			}
		},
	})
	var pauses, cut atomic.Int32
	pauseHooks(t, s, func(*Peer) { pauses.Add(1) }, func(timedOut bool) {
		if !timedOut {
			cut.Add(1)
		}
	})
	c := dialPMD(t, addr, "permessage-deflate")
	bomb := pmdBomb(t, size)
	var frames []byte
	for range n {
		frames = append(frames, bomb...)
	}
	if err := c.WriteRaw(frames); err != nil { // one write: one read, one turn
		t.Fatal(err)
	}
	waitLong(t, "every bomb, or the idle close", func() bool {
		select {
		case <-idle:
			return true
		default:
			return events.Load() == n
		}
	})
	t.Logf("%d events, %d pauses, %d cut short", events.Load(), pauses.Load(), cut.Load())
	if cut.Load() != 0 || events.Load() != n {
		t.Errorf("%d pauses cut short, %d bombs delivered; want none cut, %d delivered", cut.Load(), events.Load(), n)
	}
	select {
	case <-idle:
		t.Error("the client was given up as idle while the server held back its reading")
	default:
	}
}
