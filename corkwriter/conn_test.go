package corkwriter

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t testing.TB) (w, r net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c
	}()
	w, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	r = <-accepted
	if r == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { w.Close(); r.Close() })
	return w, r
}

// collect reads r until EOF or error into a buffer delivered on the channel.
func collect(r io.Reader) <-chan []byte {
	ch := make(chan []byte, 1)
	go func() {
		var buf bytes.Buffer
		io.Copy(&buf, r)
		ch <- buf.Bytes()
	}()
	return ch
}

// turnStream writes random turns to w (small copied writes around shared
// frames) and returns every byte written, in order.
func turnStream(t *testing.T, w *Writer, turns int, seed uint64) []byte {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	frame := pattern[:16<<10]
	var want []byte
	scratch := make([]byte, 0, 1024)
	for range turns {
		w.Cork()
		for range 1 + rng.IntN(80) {
			if rng.IntN(10) == 0 {
				p := frame[:rng.IntN(len(frame))]
				want = append(want, p...)
				mustWrite(t, w.WriteShared, p)
				continue
			}
			off := rng.IntN(patternPeriod)
			scratch = append(scratch[:0], pattern[off:off+rng.IntN(cap(scratch))]...)
			want = append(want, scratch...)
			mustWrite(t, w.Write, scratch)
		}
		if err := w.Uncork(); err != nil {
			t.Fatal(err)
		}
	}
	return want
}

// TestWriterLoopbackTCP: on a real socket, through the raw writev path, the
// peer reads exactly the bytes written, and each turn is one system call
// while the socket has room.
func TestWriterLoopbackTCP(t *testing.T) {
	c, peer := tcpPair(t)
	got := collect(peer)
	w := NewWriter(c, nil)
	if _, ok := w.out.(*plainSender); ok && isLinux {
		t.Fatal("a TCP conn took the fallback path on Linux")
	}
	const turns = 80
	want := turnStream(t, w, turns, 1)
	c.Close()
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("peer read %d bytes, want %d, first difference at %d", len(b), len(want), mismatch(want, b))
	}
	if st := w.Stats(); isLinux && st.Syscalls > turns*2 {
		t.Fatalf("%d system calls for %d turns", st.Syscalls, turns)
	}
}

// TestWriterLoopbackSlowReader: a reader slower than the writer makes the
// socket buffer fill, so writev returns partial counts and EAGAIN; the
// Writer waits on the poller and the stream stays exact.
func TestWriterLoopbackSlowReader(t *testing.T) {
	c, peer := tcpPair(t)
	c.(*net.TCPConn).SetWriteBuffer(8 << 10)
	got := make(chan []byte, 1)
	go func() {
		var buf []byte
		p := make([]byte, 3000)
		for {
			n, err := peer.Read(p)
			buf = append(buf, p[:n]...)
			if err != nil {
				got <- buf
				return
			}
			time.Sleep(50 * time.Microsecond)
		}
	}()
	w := NewWriter(c, &Options{FlushThreshold: 1 << 20})
	want := turnStream(t, w, 30, 2)
	c.Close()
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("peer read %d bytes, want %d, first difference at %d", len(b), len(want), mismatch(want, b))
	}
}

// TestWriterFallbackPipe: net.Pipe has no file descriptor; the same API
// writes the same stream through plain writes.
func TestWriterFallbackPipe(t *testing.T) {
	c, peer := net.Pipe()
	got := collect(peer)
	w := NewWriter(c, nil)
	if _, ok := w.out.(*plainSender); !ok {
		t.Fatalf("net.Pipe got sender %T", w.out)
	}
	want := turnStream(t, w, 40, 3)
	c.Close()
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("peer read %d bytes, want %d, first difference at %d", len(b), len(want), mismatch(want, b))
	}
}

// TestWriterFallbackShortWrite: a writer that takes less than it is given
// without an error breaks the io.Writer contract; the Writer reports it.
func TestWriterFallbackShortWrite(t *testing.T) {
	w := NewWriter(shortWriter{}, nil)
	if _, err := w.Write([]byte("hello")); !errors.Is(err, io.ErrShortWrite) {
		t.Fatalf("got %v, want io.ErrShortWrite", err)
	}
}

type shortWriter struct{}

func (shortWriter) Write(p []byte) (int, error) { return len(p) / 2, nil }

// TestWriterDeadline: a write deadline on a peer that does not read ends
// the flush with os.ErrDeadlineExceeded, and the Writer stays failed.
func TestWriterDeadline(t *testing.T) {
	c, _ := tcpPair(t)
	w := NewWriter(c, nil)
	c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	big := make([]byte, 1<<20)
	var err error
	for range 64 {
		if _, err = w.WriteShared(big); err != nil {
			break
		}
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("got %v, want a deadline error", err)
	}
	if _, err2 := w.Write([]byte("x")); err2 != err {
		t.Fatalf("Write after failure: %v", err2)
	}
}

// TestWriterPeerClosed: writing to a closed peer fails with an error that
// the caller recognises without string matching.
func TestWriterPeerClosed(t *testing.T) {
	c, peer := tcpPair(t)
	peer.Close()
	w := NewWriter(c, nil)
	var err error
	for range 1000 {
		if _, err = w.WriteShared(make([]byte, 64<<10)); err != nil {
			break
		}
	}
	if err == nil {
		t.Fatal("writes to a closed peer never failed")
	}
	var se *os.SyscallError
	var oe *net.OpError
	if !errors.As(err, &se) && !errors.As(err, &oe) {
		t.Fatalf("error %T %v is neither a syscall nor a net error", err, err)
	}
}

// TestWriterConcurrentTurnsOnDistinctWriters: writers share the chunk and
// batch pools, and shared frames, across goroutines.
func TestWriterConcurrentTurnsOnDistinctWriters(t *testing.T) {
	var wg sync.WaitGroup
	for i := range 8 {
		c, peer := tcpPair(t)
		got := collect(peer)
		wg.Go(func() {
			w := NewWriter(c, nil)
			want := turnStream(t, w, 20, uint64(10+i))
			c.Close()
			if b := <-got; !bytes.Equal(b, want) {
				t.Errorf("writer %d: stream differs at %d", i, mismatch(want, b))
			}
		})
	}
	wg.Wait()
}
