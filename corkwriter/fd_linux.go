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
// than unix.Writev, which would build a new iovec slice on every call.
func sysWritev(fd int, iov []unix.Iovec) (int, syscall.Errno) {
	r, _, errno := unix.Syscall(unix.SYS_WRITEV, uintptr(fd),
		uintptr(unsafe.Pointer(unsafe.SliceData(iov))), uintptr(len(iov)))
	runtime.KeepAlive(iov)
	return int(r), errno
}
