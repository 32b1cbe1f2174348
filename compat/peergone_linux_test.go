package compat

import (
	"net"
	"testing"
	"time"
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
