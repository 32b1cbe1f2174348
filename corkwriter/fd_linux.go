package corkwriter

import (
	"io"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// newConnSender picks the raw writev path when w exposes a file descriptor.
func newConnSender(w io.Writer) sender {
	if sc, ok := w.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			return newFDSender(rc, -1, sysWritev)
		}
	}
	return newPlainSender(w)
}

// sysWritev is writev(2) on fd. It calls the system call directly rather
// than unix.Writev, which would build a new iovec slice on every call. A
// single iovec, the common case of a lone answer or call, goes by write(2):
// the kernel then skips copying in and checking the iovec array.
func sysWritev(fd int, iov []unix.Iovec) (int, syscall.Errno) {
	var r uintptr
	var errno syscall.Errno
	if len(iov) == 1 {
		r, _, errno = unix.Syscall(unix.SYS_WRITE, uintptr(fd),
			uintptr(unsafe.Pointer(iov[0].Base)), uintptr(iov[0].Len))
	} else {
		r, _, errno = unix.Syscall(unix.SYS_WRITEV, uintptr(fd),
			uintptr(unsafe.Pointer(unsafe.SliceData(iov))), uintptr(len(iov)))
	}
	runtime.KeepAlive(iov)
	return int(r), errno
}
