//go:build unix

package main

import (
	"net"
	"sync"
	"syscall"
)

// rawBufs lends rawEcho a buffer only while a read has data, so an idle
// connection costs its goroutine and its socket and nothing else: the
// least any goroutine-per-connection server can hold.
var rawBufs = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// rawEcho writes back whatever conn receives. It waits for readability
// through the connection's RawConn instead of blocking in conn.Read on a
// buffer of its own; when data is there it reads it into a pooled buffer,
// echoes it, and returns the buffer.
func rawEcho(conn net.Conn) {
	defer conn.Close()
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	// One closure per connection, not per read: its captured state
	// would otherwise be allocated on every message.
	var (
		buf  *[]byte
		n    int
		rerr error
	)
	read := func(fd uintptr) bool {
		buf = rawBufs.Get().(*[]byte)
		for {
			n, rerr = syscall.Read(int(fd), *buf)
			if rerr != syscall.EINTR {
				break
			}
		}
		if rerr == syscall.EAGAIN {
			rawBufs.Put(buf)
			buf = nil
			return false // not readable yet: let the poller wait
		}
		return true
	}
	for {
		buf, n, rerr = nil, 0, nil
		err := rc.Read(read)
		if err != nil || rerr != nil || n <= 0 {
			if buf != nil {
				rawBufs.Put(buf)
			}
			return
		}
		_, werr := conn.Write((*buf)[:n])
		rawBufs.Put(buf)
		if werr != nil {
			return
		}
	}
}

// openFileLimit returns the soft limit on open files (Go raises it to the
// hard limit at start-up), or 0 when it cannot be read.
func openFileLimit() uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	return rl.Cur
}
