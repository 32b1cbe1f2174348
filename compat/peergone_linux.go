package compat

import (
	"net"
	"os"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// hangUpWatch watches a TCP connection, during an inflate pause, for the
// other end's going away: a FIN or a reset, which a paused read loop
// would see only at its next read (wsConn.pauseTurn). It reads none of
// the socket's bytes: it waits on the runtime's poller for a duplicate
// of the socket's descriptor, and at each wake-up asks poll(2) whether
// the peer has shut its side (POLLRDHUP) or the connection failed
// (POLLHUP, POLLERR). A duplicate, not the descriptor itself, so that
// the watch holds nothing the read loop will need, and closing it ends
// the watch at once.
type hangUpWatch struct {
	f    *os.File      // the duplicate, on the runtime's poller
	gone chan struct{} // closed when the other end has gone
	done chan struct{} // closed when the watching goroutine returns
	// reset: the connection failed (POLLERR), not merely shut by the
	// other end. Set before gone is closed.
	reset bool
}

// maxHangUpWatches bounds the watches under way at once in the process,
// and so the descriptors they duplicate: connections that all spend
// their inflate budget together (a flood of bombs) would otherwise hold
// two descriptors each, and take from the accept loop the ones its
// process limit leaves. A pause that finds none left runs its time, as
// where nothing can be watched.
const maxHangUpWatches = 256

// hangUpWatches counts the watches under way (watchHangUp, stop).
var hangUpWatches atomic.Int32

// watchHangUp starts watching nc, over TLS the TCP connection under it
// (the watch reads nothing, so the records are left whole); nil when it
// cannot: nc has no descriptor, or none can be spared (maxHangUpWatches,
// or the process's limit).
func watchHangUp(nc net.Conn) *hangUpWatch {
	if tc, ok := nc.(interface{ NetConn() net.Conn }); ok { // *tls.Conn
		nc = tc.NetConn()
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	if hangUpWatches.Add(1) > maxHangUpWatches {
		hangUpWatches.Add(-1)
		return nil
	}
	dup, derr := -1, error(nil)
	if err := rc.Control(func(fd uintptr) { dup, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil || derr != nil {
		hangUpWatches.Add(-1)
		return nil
	}
	// Non-blocking as the socket is (the flag is the open file's), so
	// NewFile puts it on the poller.
	f := os.NewFile(uintptr(dup), "")
	frc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		hangUpWatches.Add(-1)
		return nil
	}
	w := &hangUpWatch{f: f, gone: make(chan struct{}), done: make(chan struct{})}
	go w.watch(frc)
	return w
}

// watch waits until the other end has gone, or stop closes the
// duplicate. Read calls its function at once, then at each readiness
// the poller reports: bytes arriving, the peer's FIN, a reset.
func (w *hangUpWatch) watch(rc syscall.RawConn) {
	defer close(w.done)
	rc.Read(func(fd uintptr) bool {
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
		n, err := unix.Poll(pfd, 0)
		for err == unix.EINTR {
			n, err = unix.Poll(pfd, 0)
		}
		switch ev := pfd[0].Revents; {
		case err != nil || ev&unix.POLLNVAL != 0:
			return true // cannot tell: the pause runs its time
		case n == 0 || ev&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR) == 0:
			return false // bytes only: wait on
		default:
			w.reset = ev&unix.POLLERR != 0
			close(w.gone)
			return true
		}
	})
}

// ended is closed when the other end has gone; nil without a watch.
func (w *hangUpWatch) ended() <-chan struct{} {
	if w == nil {
		return nil
	}
	return w.gone
}

// stop ends the watch, its goroutine returned, and returns the error the
// connection ends with when the other end has gone: 1006, as readError
// has it at the EOF or the reset the next read would have met, unless a
// close frame is among what the other end sent before it went
// (wsConn.dropGone). nil when the other end is still there, or nothing
// watched.
func (w *hangUpWatch) stop() error {
	if w == nil {
		return nil
	}
	w.f.Close() // wakes the goroutine, and waits for its Read to return
	<-w.done
	hangUpWatches.Add(-1)
	select {
	case <-w.gone:
	default:
		return nil
	}
	if w.reset {
		return errPeerReset
	}
	return errPeerClosed
}
