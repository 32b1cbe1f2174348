package corkwriter

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// roomBound bounds the wait for room the connection has made: only a hang
// (room never signalled) runs into it.
const roomBound = 10 * time.Second

// fillAndStall queues frames frames of size bytes into a corked o, so that
// the flusher takes them all in one write, hands them to the flusher,
// reads read frames' worth from peer and stops reading: the flusher's
// write waits for the rest. It checks that the outbox then counts those
// frames as written and has room for as many more, though the write is
// not done.
func fillAndStall(t *testing.T, o *Outbox, peer net.Conn, size, frames, read int) {
	t.Helper()
	o.Cork()
	for i := range frames {
		if st := o.QueueShared(bytes.Repeat([]byte{byte(i)}, size)); st != Queued {
			t.Fatalf("frame %d: %v", i, st)
		}
	}
	if st := o.QueueShared(make([]byte, size)); st != Dropped {
		t.Fatalf("a frame past the limit: %v, want dropped", st)
	}
	if err := o.UncorkTry(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, read*size)
	if _, err := io.ReadFull(peer, got); err != nil {
		t.Fatal(err)
	}
	if got[0] != 0 || int(got[read*size-1]) != read-1 {
		t.Fatalf("read frames %d to %d, want 0 to %d", got[0], got[read*size-1], read-1)
	}
	select {
	case <-o.Room(read * size):
	case <-time.After(roomBound):
		t.Fatalf("no room for %d frames %v after the connection took %d of %d: %d bytes counted queued, limit %d",
			read, roomBound, read, frames, o.Queued(), size*frames)
	}
	if q := o.Queued(); q > (frames-read)*size {
		t.Fatalf("%d bytes counted queued, at most %d not written", q, (frames-read)*size)
	}
	if st := o.QueueShared(make([]byte, size)); st != Queued {
		t.Fatalf("a frame into the room made: %v", st)
	}
}

// A flusher's write that waits for the connection counts what the
// connection took as it goes: a peer that reads makes room in the outbox
// while a write of more than that is still under way. Counted only once
// the whole write returned, a full outbox had no room (Room, Queued, and
// every send refused) until the peer had read all of it: in compat, an
// answer waiting for room behind a full outbox of events waited until
// the whole outbox was written, and a client reading steadily but slower
// than MaxOutboxBytes per closeTimeout was dropped as a slow consumer.
//
// Here on net.Pipe, written one frame per Write (plainSender).
func TestOutboxRoomWhileAWriteWaits(t *testing.T) {
	const size, frames = 16 << 10, 8
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	o := NewOutbox(a, &OutboxOptions{MaxQueued: size * frames})
	fillAndStall(t, o, b, size, frames, 2)
	go io.Copy(io.Discard, b)
	waitFor(t, "the outbox to drain", func() bool { return o.Queued() == 0 })
}

// TestOutboxRoomWhileAWriteWaits on a stream that is a TryWriter (a QUIC
// stream) whose window is shut: the flusher writes with Write, waiting.
func TestOutboxRoomWhileATryWriterWaits(t *testing.T) {
	const size, frames = 16 << 10, 8
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	o := NewOutbox(shutTryWriter{a}, &OutboxOptions{MaxQueued: size * frames})
	fillAndStall(t, o, b, size, frames, 2)
	go io.Copy(io.Discard, b)
	waitFor(t, "the outbox to drain", func() bool { return o.Queued() == 0 })
}

// shutTryWriter is a TryWriter whose tries never write: a stream whose
// window is shut until Write waits for it.
type shutTryWriter struct{ net.Conn }

func (shutTryWriter) TryWrite([]byte) (int, error) { return 0, ErrWouldBlock }

// TestOutboxRoomWhileAWriteWaits on loopback TCP, the raw writev path,
// whose flusher waits on Go's poller between writes.
func TestOutboxRoomWhileASocketWriteWaits(t *testing.T) {
	if !isLinux {
		t.Skip("the raw writev path is Linux's")
	}
	const size, frames = 64 << 10, 64
	c, peer := tcpPair(t)
	// Small buffers, so that the kernel holds little of the 4 MiB.
	c.(*net.TCPConn).SetWriteBuffer(64 << 10)
	peer.(*net.TCPConn).SetReadBuffer(64 << 10)
	o := NewOutbox(c, &OutboxOptions{MaxQueued: size * frames})
	fillAndStall(t, o, peer, size, frames, frames/2)
	go io.Copy(io.Discard, peer)
	waitFor(t, "the outbox to drain", func() bool { return o.Queued() == 0 })
}
