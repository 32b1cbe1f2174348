package corkwriter

import (
	"runtime"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// BenchmarkSingleIovec compares the two ways to send one 40-byte iovec, a
// lone small answer, on loopback TCP: sysWritev, which sends a single iovec
// with write(2), and writev(2) as it sent it before. The difference is
// the kernel's copying in and checking of the iovec array.
func BenchmarkSingleIovec(b *testing.B) {
	buf := make([]byte, 40)
	iov := []unix.Iovec{{Base: &buf[0]}}
	iov[0].SetLen(len(buf))
	writev := func(fd int, iov []unix.Iovec) (int, syscall.Errno) {
		r, _, errno := unix.Syscall(unix.SYS_WRITEV, uintptr(fd),
			uintptr(unsafe.Pointer(unsafe.SliceData(iov))), uintptr(len(iov)))
		runtime.KeepAlive(iov)
		return int(r), errno
	}
	for _, bc := range []struct {
		name string
		send func(int, []unix.Iovec) (int, syscall.Errno)
	}{{"sysWritev", sysWritev}, {"writev", writev}} {
		b.Run(bc.name, func(b *testing.B) {
			rc, err := benchConn(b).(syscall.Conn).SyscallConn()
			if err != nil {
				b.Fatal(err)
			}
			var sendErr error
			err = rc.Write(func(fd uintptr) bool {
				b.ResetTimer()
				for i := 0; i < b.N; {
					n, errno := bc.send(int(fd), iov)
					if errno == syscall.EAGAIN {
						// The drain fell behind: try again, uncounted.
						continue
					}
					if errno != 0 || n != len(buf) {
						sendErr = errno
						return true
					}
					i++
				}
				return true
			})
			if err != nil || sendErr != nil {
				b.Fatal(err, sendErr)
			}
		})
	}
}
