package compat

import (
	"context"
	"runtime"
	"testing"
	"time"
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
