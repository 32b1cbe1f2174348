//go:build unix

package scheduler

import (
	"syscall"
	"time"
)

// processCPU returns the user and system CPU time the process has used.
// Benchmarks report it per operation beside ns/op: on a shared machine
// wall time includes whatever the other tenants take, CPU time does not.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
