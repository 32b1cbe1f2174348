//go:build unix

package compat

import (
	"os"
	"syscall"
)

// readReady is the read loop's callback to RawConn.Read: called when the
// poller believes the socket readable, it takes a pooled buffer and reads
// into it with one non-blocking read(2). When the socket has nothing after
// all, it gives the buffer back and returns false, and the goroutine parks
// on the poller holding no buffer: an idle connection costs no read buffer
// and a busy one pays one system call per read.
func (c *wsConn) readReady(fd uintptr) bool {
	bp := readBufs.Get().(*[]byte)
	n, err := syscall.Read(int(fd), *bp)
	for err == syscall.EINTR {
		n, err = syscall.Read(int(fd), *bp)
	}
	if err == syscall.EAGAIN {
		readBufs.Put(bp)
		return false
	}
	c.rbuf, c.rn, c.rerr = bp, max(n, 0), nil
	if err != nil {
		c.rerr = os.NewSyscallError("read", err)
	}
	return true
}

// canReadRaw: read(2) on the descriptor works here.
const canReadRaw = true
