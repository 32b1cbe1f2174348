//go:build unix

package corkwriter

import (
	"errors"
	"math/rand/v2"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// fakeFD stands in for a socket: each writev takes a random number of bytes,
// or fails with EINTR or EAGAIN, as a real socket may. It records the byte
// stream it accepted and every call.
type fakeFD struct {
	rng      *rand.Rand
	out      []byte
	calls    int
	maxIov   int
	partial  bool          // accept a random prefix instead of everything
	failures int           // percent of calls that fail with EINTR or EAGAIN
	fail     syscall.Errno // an error to return from every call, if set
}

func newFakeFD(seed uint64, partial bool, failures int) *fakeFD {
	return &fakeFD{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), partial: partial, failures: failures}
}

func (f *fakeFD) writev(_ int, iov []unix.Iovec) (int, syscall.Errno) {
	f.calls++
	f.maxIov = max(f.maxIov, len(iov))
	if len(iov) > iovMax || len(iov) == 0 {
		return 0, syscall.EINVAL
	}
	if f.fail != 0 {
		return 0, f.fail
	}
	if f.failures > 0 && f.rng.IntN(100) < f.failures {
		if f.rng.IntN(2) == 0 {
			return 0, syscall.EINTR
		}
		return 0, syscall.EAGAIN
	}
	total := 0
	for _, v := range iov {
		total += int(v.Len)
	}
	n := total
	if f.partial {
		n = 1 + f.rng.IntN(total)
	}
	left := n
	for _, v := range iov {
		b := unsafe.Slice(v.Base, v.Len)
		k := min(left, len(b))
		f.out = append(f.out, b[:k]...)
		left -= k
		if left == 0 {
			break
		}
	}
	return n, 0
}

// fakeRawConn is a syscall.RawConn whose Write retries the callback at
// once where a real one would wait for the socket to be writable.
type fakeRawConn struct{ waits int }

func (c *fakeRawConn) Control(func(fd uintptr)) error { return errors.ErrUnsupported }
func (c *fakeRawConn) Read(func(fd uintptr) bool) error {
	return errors.ErrUnsupported
}

func (c *fakeRawConn) Write(f func(fd uintptr) bool) error {
	for !f(3) {
		c.waits++
	}
	return nil
}

// newFakeWriter returns a Writer on f: blocking through a fake RawConn, or
// non-blocking like NewFD.
func newFakeWriter(f *fakeFD, blocking bool, opts *Options) *Writer {
	if blocking {
		return newWriter(newFDSender(&fakeRawConn{}, -1, f.writev), opts)
	}
	return newWriter(newFDSender(nil, 3, f.writev), opts)
}
