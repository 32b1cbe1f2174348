package corkwriter

import (
	"errors"
	"io"
	"net"
)

// plainSender writes to a connection without a usable file descriptor (TLS,
// net.Pipe, QUIC and SCTP streams): one Write per pending segment, in order.
// Consecutive copied writes already share a segment, so a turn of small
// answers is still one Write. On platforms without the raw writev path, TCP
// and Unix conns go through net.Buffers, which Go sends with its own writev.
type plainSender struct {
	w        io.Writer
	vectored bool
}

func newPlainSender(w io.Writer) *plainSender {
	s := &plainSender{w: w}
	switch w.(type) {
	case *net.TCPConn, *net.UnixConn:
		s.vectored = true
	}
	return s
}

func (s *plainSender) canWait() bool { return true }
func (s *plainSender) canTry() bool  { return false }

func (s *plainSender) send(b *batch, _ bool, st *Stats, p progress) error {
	if s.vectored {
		return s.sendBuffers(b, st) // one WriteTo: no progress to tell
	}
	return writeSegments(b, st, s.w, nil, p)
}

// writeSegments writes the unsent segments of b one at a time, with w's
// Write, or with try's TryWrite when try is not nil: then it stops, b
// holding the rest, where the connection would block. After each Write
// but the last it tells p, if not nil, of the progress.
func writeSegments(b *batch, st *Stats, w io.Writer, try TryWriter, p progress) error {
	for b.n > 0 {
		seg := b.segs[b.head]
		var (
			n   int
			err error
		)
		if try != nil {
			n, err = try.TryWrite(seg)
		} else {
			n, err = w.Write(seg)
		}
		st.Syscalls++
		if n < 0 || n > len(seg) {
			n = 0
			if err == nil {
				err = io.ErrShortWrite
			}
		}
		st.Written += uint64(n)
		b.advance(n)
		if try != nil && errors.Is(err, ErrWouldBlock) {
			return nil
		}
		if err != nil {
			return err
		}
		if n < len(seg) {
			return io.ErrShortWrite
		}
		if p != nil && b.n > 0 {
			p.wrote()
		}
	}
	return nil
}

// sendBuffers hands a copy of the segment list to net.Buffers.WriteTo, which
// consumes the list it is given.
func (s *plainSender) sendBuffers(b *batch, st *Stats) error {
	bufs := append(b.bufs[:0], b.segs[b.head:]...)
	b.bufs = bufs[:0]
	n, err := bufs.WriteTo(s.w)
	clear(b.bufs[:cap(b.bufs)])
	st.Syscalls++
	st.Written += uint64(n)
	b.advance(int(n))
	if err == nil && b.n > 0 {
		err = io.ErrShortWrite
	}
	return err
}

// A TryWriter is a connection without a file descriptor whose writes can
// be tried without waiting: a QUIC stream, whose send window a peer that
// stopped reading never opens again. Given one, an Outbox writes a frame
// into an idle connection on the sender's goroutine only as far as the
// connection takes it at once, and hands the rest to a flusher goroutine,
// which calls Write; so a producer off the connection's own loop, a
// client's caller, is never held by a peer that does not read, as on a
// descriptor. Without TryWrite, every write waits, or, where the producer
// must not wait (QueueShared), runs on a flusher goroutine.
type TryWriter interface {
	io.Writer
	// TryWrite writes a prefix of p without waiting for the connection,
	// or waiting a short bounded time (a stream that can only be tried
	// with a write deadline), and returns its length; when that is short
	// of len(p), err is ErrWouldBlock (the rest may be written later) or
	// the connection's error.
	TryWrite(p []byte) (n int, err error)
}

// newSender picks how a Writer or an Outbox talks to w.
func newSender(w io.Writer) sender {
	if tw, ok := w.(TryWriter); ok {
		return trySender{tw}
	}
	return newConnSender(w)
}

// trySender writes to a TryWriter one segment at a time, as plainSender
// does, with TryWrite when it must not wait.
type trySender struct{ w TryWriter }

func (s trySender) canWait() bool { return true }
func (s trySender) canTry() bool  { return true }

func (s trySender) send(b *batch, wait bool, st *Stats, p progress) error {
	if wait {
		return writeSegments(b, st, s.w, nil, p)
	}
	return writeSegments(b, st, nil, s.w, nil)
}
