package corkwriter

import (
	"runtime"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// BenchmarkSingleIovec compares the two ways to send one 40-byte iovec, a
// lone small answer, on loopback TCP: sysWritev, which sends a single
// iovec with write(2), and writev(2), as it did before. The difference is
// the kernel's copying in and checking of the iovec array, small beside a
// TCP send, so the two alternate in blocks of sends on one connection,
// timed apart, and both face the same drain and the same neighbours. It
// reports each one's ns per send, and write/writev, their ratio (below 1:
// write(2) is cheaper).
func BenchmarkSingleIovec(b *testing.B) {
	const block = 500
	buf := make([]byte, 40)
	iov := []unix.Iovec{{Base: &buf[0]}}
	iov[0].SetLen(len(buf))
	writev := func(fd int, iov []unix.Iovec) (int, syscall.Errno) {
		r, _, errno := unix.Syscall(unix.SYS_WRITEV, uintptr(fd),
			uintptr(unsafe.Pointer(unsafe.SliceData(iov))), uintptr(len(iov)))
		runtime.KeepAlive(iov)
		return int(r), errno
	}
	rc, err := benchConn(b).(syscall.Conn).SyscallConn()
	if err != nil {
		b.Fatal(err)
	}
	var spent [2]time.Duration
	var sent [2]int
	var sendErr error
	sendBlock := func(fd int, send func(int, []unix.Iovec) (int, syscall.Errno), n int) (time.Duration, bool) {
		start := time.Now()
		for i := 0; i < n; {
			m, errno := send(fd, iov)
			if errno == syscall.EAGAIN {
				continue // the drain fell behind: try again, uncounted
			}
			if errno != 0 || m != len(buf) {
				sendErr = errno
				return 0, false
			}
			i++
		}
		return time.Since(start), true
	}
	b.ResetTimer()
	err = rc.Write(func(fd uintptr) bool {
		for left := b.N; left > 0; {
			n := min(block, left)
			for i, send := range []func(int, []unix.Iovec) (int, syscall.Errno){sysWritev, writev} {
				d, ok := sendBlock(int(fd), send, n)
				if !ok {
					return true
				}
				spent[i] += d
				sent[i] += n
			}
			left -= n
		}
		return true
	})
	if err != nil || sendErr != nil {
		b.Fatal(err, sendErr)
	}
	write := float64(spent[0].Nanoseconds()) / float64(sent[0])
	wv := float64(spent[1].Nanoseconds()) / float64(sent[1])
	b.ReportMetric(write, "write-ns/send")
	b.ReportMetric(wv, "writev-ns/send")
	b.ReportMetric(write/wv, "write/writev")
}
