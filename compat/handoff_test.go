package compat

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/hotpath-go/hotpath/wsframe"
)

// A server connection keeps its goroutine while calls keep coming, the
// idle deadline firing in the middle of a busy period included, hands over
// to a fresh goroutine once silent, and serves calls after the handoff.
func TestIdleHandoffKeepsServing(t *testing.T) {
	_, addr := newTestServer(t, Options{})
	c := dialClient(t, addr, ClientOptions{})
	call := func() {
		t.Helper()
		var out []byte
		if err := c.Call(context.Background(), "echo/raw", []byte("ping"), &out); err != nil || string(out) != "ping" {
			t.Fatalf("call = %q, %v", out, err)
		}
	}
	// Busy for three handoff periods: calls every idleHandoff/4.
	for end := time.Now().Add(3 * idleHandoff); time.Now().Before(end); {
		call()
		time.Sleep(idleHandoff / 4)
	}
	before := runtime.NumGoroutine()
	// Silent long enough for the handoff, then served again.
	time.Sleep(3 * idleHandoff)
	call()
	time.Sleep(3 * idleHandoff)
	call()
	if after := runtime.NumGoroutine(); after > before+2 {
		t.Errorf("goroutines grew from %d to %d across idle handoffs", before, after)
	}
}

// A connection this end closed with 1000, whose peer then hangs up
// without answering the close frame, ended with 1000, not 1001.
func TestLocalCloseKeepsItsCode(t *testing.T) {
	ended := make(chan error, 1)
	_, addr := newTestServer(t, Options{
		OnConnect:    func(p *Peer) { go p.Close() },
		OnDisconnect: func(_ *Peer, err error) { ended <- err },
	})
	c := dial(t, addr)
	if code, _ := c.ReadClose(5 * time.Second); code != wsframe.CloseNormal {
		t.Fatalf("close %d, want 1000", code)
	}
	c.Close() // no close frame back
	select {
	case err := <-ended:
		var ce *CloseError
		if !errors.As(err, &ce) || ce.Code != wsframe.CloseNormal {
			t.Fatalf("ended with %v, want close 1000", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("connection did not end")
	}
}
