//go:build unix

package corkwriter

import (
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// iovMax is IOV_MAX, the most iovec entries one writev accepts on Linux and
// the BSDs. A batch with more segments is sent in several calls.
const iovMax = 1024

type sysScratch struct {
	iov []unix.Iovec
}

func (s *sysScratch) clearScratch() {
	clear(s.iov)
	s.iov = s.iov[:0]
}

// iovecs fills the batch's iovec scratch with its unsent segments, at most
// iovMax of them.
func (b *batch) iovecs() []unix.Iovec {
	segs := b.segs[b.head:]
	if len(segs) > iovMax {
		segs = segs[:iovMax]
	}
	iov := b.iov[:0]
	for _, s := range segs {
		v := unix.Iovec{Base: &s[0]}
		v.SetLen(len(s))
		iov = append(iov, v)
	}
	b.iov = iov
	return iov
}

// writevFunc is one writev system call. Tests replace it with a fake
// descriptor that takes a random number of bytes or fails with EAGAIN.
type writevFunc func(fd int, iov []unix.Iovec) (int, syscall.Errno)

// fdSender writes a batch to a file descriptor with writev.
type fdSender struct {
	rc     syscall.RawConn // nil for NewFD: the caller's loop waits, not us
	fd     int
	writev writevFunc

	// RawConn.Write takes a callback; binding it once, with its state in
	// these fields, keeps send free of allocations.
	onWritable func(fd uintptr) bool
	b          *batch
	st         *Stats
	wait       bool
	p          progress
	err        error
}

func newFDSender(rc syscall.RawConn, fd int, writev writevFunc) *fdSender {
	s := &fdSender{rc: rc, fd: fd, writev: writev}
	s.onWritable = s.writable
	return s
}

// NewFD returns a Writer for a file descriptor that the caller's event loop
// owns, typically non-blocking (O_NONBLOCK). Its Flush never waits: when the
// socket's send buffer is full it returns ErrWouldBlock and keeps the rest,
// and the loop calls Flush again when the descriptor is writable. A Write
// that cannot be sent at once is kept in the same way and returns no error.
// The Writer never closes fd.
func NewFD(fd int, opts *Options) *Writer {
	return newWriter(newFDSender(nil, fd, sysWritev), opts)
}

func (s *fdSender) canWait() bool { return s.rc != nil }
func (s *fdSender) canTry() bool  { return true }

func (s *fdSender) send(b *batch, wait bool, st *Stats, p progress) error {
	if s.rc == nil {
		_, err := s.writeSome(s.fd, b, st)
		return err
	}
	s.b, s.st, s.wait, s.p, s.err = b, st, wait, p, nil
	err := s.rc.Write(s.onWritable)
	if err == nil {
		err = s.err
	}
	s.b, s.st, s.p, s.err = nil, nil, nil, nil
	return err
}

// writable is called by RawConn.Write with the descriptor; returning false
// asks it to wait on Go's poller until the socket is writable again.
// Before such a wait, what this call wrote is told to s.p.
func (s *fdSender) writable(fd uintptr) bool {
	before := s.st.Written
	blocked, err := s.writeSome(int(fd), s.b, s.st)
	if err != nil {
		s.err = err
		return true
	}
	if !blocked || !s.wait {
		return true
	}
	if s.p != nil && s.st.Written != before {
		s.p.wrote()
	}
	return false
}

// writeSome calls writev until the batch is empty, the socket would block,
// or an error occurs. A partial write advances the iovecs and tries again,
// EINTR is retried, EAGAIN reports blocked.
func (s *fdSender) writeSome(fd int, b *batch, st *Stats) (blocked bool, err error) {
	for b.n > 0 {
		n, errno := s.writev(fd, b.iovecs())
		st.Syscalls++
		switch errno {
		case 0:
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return true, nil
		default:
			return false, os.NewSyscallError("writev", errno)
		}
		if n <= 0 || n > b.n {
			return false, io.ErrShortWrite
		}
		st.Written += uint64(n)
		b.advance(n)
	}
	return false, nil
}
