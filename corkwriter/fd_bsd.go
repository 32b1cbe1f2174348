//go:build unix && !linux

package corkwriter

import (
	"io"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// newConnSender uses the portable path: on these platforms net.Buffers already
// sends TCP and Unix conns with the runtime's own writev.
func newConnSender(w io.Writer) sender { return newPlainSender(w) }

// sysWritev writes the first iovec only, a valid partial writev, so NewFD
// works everywhere; Linux has the real vectored call.
func sysWritev(fd int, iov []unix.Iovec) (int, syscall.Errno) {
	n, err := unix.Write(fd, unsafe.Slice(iov[0].Base, iov[0].Len))
	if err != nil {
		if errno, ok := err.(syscall.Errno); ok {
			return n, errno
		}
		return n, syscall.EIO
	}
	return n, 0
}
