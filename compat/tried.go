package compat

import (
	"context"
	"errors"
	"io"
	"os"
	"time"

	"github.com/hotpath-go/hotpath/corkwriter"
)

// deadlineTried is a stream whose writes can be tried only by giving them
// a deadline (a WebTransport stream, an SCTP stream, a large write on a
// QUIC stream): a TryWrite waits at most tryWait for the stream to take
// p, and reports what it did not take as corkwriter.ErrWouldBlock. So the
// outbox writes a packet sent off the read loop (a client's call, an
// Async answer, an event) on the sender's goroutine only as far as the
// stream takes it, and leaves the rest to its flusher: the sender never
// waits for a peer that stopped reading, whose window never opens again.
//
// The deadline is left on the stream and moved only when less than half
// of tryWait is left, as setting one costs locks and a timer; a Write
// that meets it clears it and goes on, so the flusher's writes wait as
// long as the peer takes, and a dead peer is left to IdleTimeout. The
// outbox calls it from one goroutine at a time.
type deadlineTried struct {
	deadlineStream
	until time.Time // the deadline on the stream; zero for none
}

// deadlineStream is a QUIC, WebTransport or SCTP stream, as deadlineTried
// uses it.
type deadlineStream interface {
	io.ReadWriter
	SetWriteDeadline(time.Time) error
}

// tryWait bounds a tried write's wait: long enough for quic-go's
// connection goroutine (pion's write loop) to take a write of many
// packets on a busy machine, short against a call's timeout.
const tryWait = time.Millisecond

func (s *deadlineTried) TryWrite(p []byte) (int, error) {
	if now := time.Now(); s.until.Sub(now) < tryWait/2 {
		s.until = now.Add(tryWait)
		s.deadlineStream.SetWriteDeadline(s.until)
	}
	n, err := s.deadlineStream.Write(p)
	if pastDeadline(err) {
		err = corkwriter.ErrWouldBlock
	}
	return n, err
}

func (s *deadlineTried) Write(p []byte) (int, error) {
	written := 0
	for {
		n, err := s.deadlineStream.Write(p[written:])
		written += n
		if s.until.IsZero() || !pastDeadline(err) {
			return written, err
		}
		s.until = time.Time{}
		s.deadlineStream.SetWriteDeadline(s.until)
	}
}

// pastDeadline reports whether a write failed at its deadline: quic-go and
// webtransport-go say so with os.ErrDeadlineExceeded, as net.Conn does,
// pion's SCTP with context.DeadlineExceeded.
func pastDeadline(err error) bool {
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded)
}
