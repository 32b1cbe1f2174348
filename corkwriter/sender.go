package corkwriter

import (
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

func (s *plainSender) send(b *batch, _ bool, st *Stats) error {
	if s.vectored {
		return s.sendBuffers(b, st)
	}
	for b.n > 0 {
		seg := b.segs[b.head]
		n, err := s.w.Write(seg)
		st.Syscalls++
		if n < 0 || n > len(seg) {
			n = 0
			if err == nil {
				err = io.ErrShortWrite
			}
		}
		st.Written += uint64(n)
		b.advance(n)
		if err != nil {
			return err
		}
		if n < len(seg) {
			return io.ErrShortWrite
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
