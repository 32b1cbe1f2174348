//go:build linux

package compat

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// unacked reports how many bytes the kernel still holds for the peer of
// rc's socket, not yet sent or not yet acknowledged (SIOCOUTQ), or -1 when
// it cannot tell.
func unacked(rc syscall.RawConn) int {
	if rc == nil {
		return -1
	}
	n := -1
	rc.Control(func(fd uintptr) {
		if v, err := unix.IoctlGetInt(int(fd), unix.SIOCOUTQ); err == nil {
			n = v
		}
	})
	return n
}
