package corkwriter

import (
	"bytes"
	"sync"
	"testing"
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
