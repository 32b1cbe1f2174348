package compat

import (
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotpath-go/hotpath/wsframe"
)

// Watches of a peer's going are bounded in number (maxHangUpWatches): past
// the bound none is started, and the pause runs its time, so that
// connections paused together do not hold a second descriptor each. A
// stopped watch gives its place back.
func TestHangUpWatchesBounded(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()

	before := hangUpWatches.Load()
	hangUpWatches.Store(maxHangUpWatches)
	if w := watchHangUp(c); w != nil {
		w.stop()
		hangUpWatches.Store(before)
		t.Fatal("a watch started past maxHangUpWatches")
	}
	if got := hangUpWatches.Load(); got != maxHangUpWatches {
		t.Fatalf("a refused watch left the count at %d, want %d", got, maxHangUpWatches)
	}
	hangUpWatches.Store(before)

	w := watchHangUp(c)
	if w == nil {
		t.Fatal("no watch under the bound")
	}
	if got := hangUpWatches.Load(); got != before+1 {
		t.Fatalf("a watch under way counts %d, want %d", got, before+1)
	}
	peer.Close() // a FIN: the watch sees it
	select {
	case <-w.ended():
	case <-time.After(hangBound):
		t.Fatal("the watch did not see the peer's FIN")
	}
	if err := w.stop(); err != errPeerClosed {
		t.Fatalf("stop after the peer's FIN: %v, want %v", err, errPeerClosed)
	}
	if got := hangUpWatches.Load(); got != before {
		t.Fatalf("a stopped watch left the count at %d, want %d", got, before)
	}
}

// A client that sends its close frame and then its FIN while the
// server's reading is paused for MaxInflateRate (here 1001 going away,
// behind one more bomb) is reported with its close: the watch sees the
// FIN without a read, and the bytes the socket still holds are walked
// for a close frame, frame headers only, the data frames' payloads
// skipped. Reported as 1006 before, as at a FIN alone, which still is.
// Nothing the socket held is handled: the fourth bomb is never
// inflated. The pause is a whole maxInflatePause; the hook tells
// whether the FIN cut it short.
func TestInflatePauseKeepsThePeersCloseBeforeItsFIN(t *testing.T) {
	const size = 64 << 10
	for _, how := range []string{"close then FIN", "close then reset", "FIN alone"} {
		t.Run(how, func(t *testing.T) {
			var events atomic.Int32
			disconnected := make(chan error, 1)
			s, addr := newTestServer(t, Options{
				Router:       inflateRateRouter(new(atomic.Int64), &events),
				NoDictionary: true,
				Limits:       pauseLimits(size),
				OnDisconnect: func(_ *Peer, err error) { disconnected <- err },
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
			last := append([]byte(nil), bomb...)
			if how != "FIN alone" {
				last = wsframe.AppendMaskedFrame(last, wsframe.OpClose, wsframe.AppendClosePayload(nil, wsframe.CloseGoingAway, "bye"), wsframe.Fin, wsframe.NewMaskKey())
			}
			if err := c.WriteRaw(last); err != nil {
				t.Fatal(err)
			}
			if how == "close then reset" {
				c.NC.(*net.TCPConn).SetLinger(0)
				c.NC.Close()
			} else if err := c.NC.(*net.TCPConn).CloseWrite(); err != nil { // a FIN
				t.Fatal(err)
			}
			wantPauseCutShort(t, ended, "the client's FIN")
			var err error
			select {
			case err = <-disconnected:
			case <-time.After(hangBound):
				t.Fatal("the connection did not end")
			}
			want := CloseError{Code: wsframe.CloseAbnormal, Remote: true}
			if how != "FIN alone" {
				want = CloseError{Code: wsframe.CloseGoingAway, Reason: "bye", Remote: true}
			}
			var ce *CloseError
			if !errors.As(err, &ce) || ce.Code != want.Code || ce.Remote != want.Remote || (want.Reason != "" && ce.Reason != want.Reason) {
				t.Errorf("the server ended the connection with %#v, want %d %q (remote)", err, want.Code, want.Reason)
			}
			if m := s.Metrics(); m.Closes[want.Code] != 1 {
				t.Errorf("closes by code %v, want one %d", m.Closes, want.Code)
			}
			// The paused bomb is inflated once its pause is over, as
			// before; the one behind it, read only to be skipped, is not.
			if n := events.Load(); n != 3 {
				t.Errorf("%d bombs handled, want 3", n)
			}
		})
	}
}
