package corkwriter

import (
	"net"
	"runtime"
	"testing"
	"unsafe"
)

// TestIdleOutboxCost measures what an idle connection's Outbox costs after
// it has sent a frame: heap and goroutine stacks per connection, for the
// Outbox and for the flusher-goroutine design it was measured against. It
// holds no chunk, no batch and no goroutine when idle: measured at 392
// bytes (the Outbox and its sender), it must stay under 1 KiB. The figures
// are logged for the README.
func TestIdleOutboxCost(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes memory figures")
	}
	const conns = 300
	cs := make([]net.Conn, conns)
	for i := range cs {
		cs[i] = benchConn(t)
	}
	frame := make([]byte, 16<<10)
	measure := func(open func(c net.Conn) func()) (perConn float64, release []func()) {
		before := memInUse()
		for _, c := range cs {
			release = append(release, open(c))
		}
		return float64(memInUse()-before) / conns, release
	}
	outbox, rel := measure(func(c net.Conn) func() {
		o := NewOutbox(c, nil)
		o.SendShared(frame)
		outboxSender{o}.drain()
		return func() { o.Close() }
	})
	for _, r := range rel {
		r()
	}
	goroutine, rel := measure(func(c net.Conn) func() {
		g := newGoroutineSender(c, DefaultMaxQueued)
		g.send(frame, true)
		g.drain()
		return g.close
	})
	for _, r := range rel {
		r()
	}
	t.Logf("idle cost per connection after one 16 KiB frame: Outbox %.0f B (struct %d B), flusher goroutine design %.0f B",
		outbox, unsafe.Sizeof(Outbox{}), goroutine)
	if outbox > 1024 {
		t.Fatalf("an idle Outbox costs %.0f B, more than 1 KiB", outbox)
	}
}

// memInUse returns heap bytes in use plus goroutine stacks, after a GC.
func memInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc + ms.StackInuse
}

// An Outbox per connection: a field that takes it past 240 bytes moves
// every connection to the next size class (256 B); regroup the fields.
func TestOutboxStructSize(t *testing.T) {
	if n := unsafe.Sizeof(Outbox{}); n > 240 {
		t.Errorf("Outbox is %d bytes, past its 240-byte size class", n)
	}
}
