//go:build linux

package deflatecache

import (
	"syscall"
	"time"
	"unsafe"
)

// threadCPUTime is the CPU time of the calling thread (lock the goroutine
// to it): the cost of one step measured without the time the thread spent
// descheduled while other tenants of the machine ran.
func threadCPUTime() time.Duration {
	const clockThreadCPUTimeID = 3
	var ts syscall.Timespec
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockThreadCPUTimeID, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		return 0
	}
	return time.Duration(ts.Nano())
}
