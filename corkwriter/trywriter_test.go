package corkwriter

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// windowStream stands in for a QUIC stream: it takes bytes while its send
// window lasts. TryWrite takes what fits and says ErrWouldBlock for the
// rest; Write waits for the window to open.
type windowStream struct {
	mu     sync.Mutex
	opened sync.Cond
	window int
	out    []byte
	tries  int
	writes int
}

func newWindowStream(window int) *windowStream {
	s := &windowStream{window: window}
	s.opened.L = &s.mu
	return s
}

func (s *windowStream) take(p []byte) int {
	n := min(len(p), s.window)
	s.window -= n
	s.out = append(s.out, p[:n]...)
	return n
}

func (s *windowStream) TryWrite(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tries++
	if n := s.take(p); n < len(p) {
		return n, ErrWouldBlock
	}
	return len(p), nil
}

func (s *windowStream) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	written := 0
	for written < len(p) {
		for s.window == 0 {
			s.opened.Wait()
		}
		written += s.take(p[written:])
	}
	return written, nil
}

func (s *windowStream) open(n int) {
	s.mu.Lock()
	s.window += n
	s.mu.Unlock()
	s.opened.Broadcast()
}

func (s *windowStream) bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.out)
}

// TestOutboxTryWriter: on a TryWriter, a frame sent into an idle outbox is
// tried on the sender's goroutine, from its buffer; what the window does
// not take is copied and left to a flusher, and Send returns without
// waiting for the window to open (Write waits). Once it opens, the stream
// carries every frame once, in order, as it was when sent.
func TestOutboxTryWriter(t *testing.T) {
	s := newWindowStream(100)
	o := NewOutbox(s, nil)
	first := bytes.Repeat([]byte{1}, 40)
	if st := o.Send(first); st != Sent {
		t.Fatalf("a frame the window holds: %v, want sent", st)
	}
	second := bytes.Repeat([]byte{2}, 100)
	if st := o.Send(second); st != Queued {
		t.Fatalf("a frame past the window: %v, want queued", st)
	}
	clear(second) // the sender reuses its buffer
	third := bytes.Repeat([]byte{3}, 10)
	if st := o.Send(third); st != Queued {
		t.Fatalf("a frame behind a waiting one: %v, want queued", st)
	}
	if st := o.Stats(); st.Copied != 40+10 || st.Handoffs != 1 {
		t.Fatalf("stats %+v: want the 40 bytes the window left and the third frame copied, one handoff", st)
	}
	s.open(1 << 10)
	waitFor(t, "the flusher to write the rest", func() bool { return o.Queued() == 0 })
	want := append(append(bytes.Repeat([]byte{1}, 40), bytes.Repeat([]byte{2}, 100)...), bytes.Repeat([]byte{3}, 10)...)
	if got := s.bytes(); !bytes.Equal(got, want) {
		t.Fatalf("the stream carried %v\nwant %v", got, want)
	}
	if s.tries != 2 || s.writes == 0 {
		t.Fatalf("%d tries and %d writes: want the two idle sends tried, the rest written", s.tries, s.writes)
	}
}

// TestOutboxTryWriterUncorkWaits: the owner's turn still ends in a write
// that waits (Uncork), and QueueShared still writes on a flusher.
func TestOutboxTryWriterUncorkWaits(t *testing.T) {
	s := newWindowStream(1 << 10)
	o := NewOutbox(s, nil)
	o.Cork()
	o.Send([]byte("answer"))
	if err := o.Uncork(); err != nil {
		t.Fatal(err)
	}
	if s.writes != 1 || s.tries != 0 {
		t.Fatalf("%d writes, %d tries: want the turn written with Write", s.writes, s.tries)
	}
	if st := o.QueueShared([]byte("ping")); st != Queued {
		t.Fatalf("QueueShared: %v, want queued", st)
	}
	waitFor(t, "the flusher", func() bool { return o.Queued() == 0 })
	if got := string(s.bytes()); got != "answerping" {
		t.Fatalf("the stream carried %q", got)
	}
}

// TestOutboxUncorkTry: UncorkTry ends a turn without waiting for a peer
// that does not read, on every kind of connection, and what it left
// leaves later, in order. Two ends whose owners each wait in Uncork for
// the other to read (a client writing the calls its callers queued during
// a turn, a server writing that turn's answers) waited for ever: a
// robustness audit hung SCTP clients for their whole IdleTimeout.
func TestOutboxUncorkTry(t *testing.T) {
	big := bytes.Repeat([]byte{7}, 8<<20) // past any socket buffer
	for _, tc := range []struct {
		name string
		conn func(t *testing.T) (w io.Writer, read func() []byte, open func())
	}{
		{"trywriter", func(t *testing.T) (io.Writer, func() []byte, func()) {
			s := newWindowStream(1 << 10)
			read := func() []byte {
				waitFor(t, "the flusher", func() bool { return len(s.bytes()) == len(big)+5 })
				return s.bytes()
			}
			return s, read, func() { s.open(len(big) + 10) }
		}},
		{"descriptor", func(t *testing.T) (io.Writer, func() []byte, func()) {
			w, r := tcpPair(t)
			return w, readerOf(t, r, len(big)+5), func() {}
		}},
		{"plain", func(t *testing.T) (io.Writer, func() []byte, func()) {
			w, r := net.Pipe()
			t.Cleanup(func() { w.Close(); r.Close() })
			return w, readerOf(t, r, len(big)+5), func() {}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, read, open := tc.conn(t)
			o := NewOutbox(w, &OutboxOptions{MaxQueued: 64 << 20})
			o.Cork()
			o.Send([]byte("first"))
			o.Send(big)
			returned := make(chan error, 1)
			go func() { returned <- o.UncorkTry() }()
			select {
			case err := <-returned:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("UncorkTry waited for a peer that does not read")
			}
			open()
			got := read()
			if !bytes.Equal(got[:5], []byte("first")) || !bytes.Equal(got[5:], big) {
				t.Fatalf("the connection carried %d bytes, not the turn's frames in order", len(got))
			}
		})
	}
}

// readerOf returns a function that starts reading n bytes from r, once
// called (the peer does not read until then), and returns them.
func readerOf(t *testing.T, r io.Reader, n int) func() []byte {
	return func() []byte {
		b := make([]byte, n)
		done := make(chan error, 1)
		go func() { _, err := io.ReadFull(r, b); done <- err }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the rest never came")
		}
		return b
	}
}
