package compat

import (
	"errors"
	"os"
	"runtime"
	"sync/atomic"
	"time"
)

// A client's reads are shared between its read loop and its callers.
//
// With a read loop of its own, every answer reaches its caller through a
// channel: the loop is woken by the poller, then wakes the caller. On
// loopback that second wake-up doubles the round trip of a lone call
// (BenchmarkCallRawClient, reader-goroutine against same-goroutine; the
// figures are in bench/results/compat-call-2026-12-03.txt). So a caller waiting for its answer reads the
// connection itself when nobody else is reading (takeReads, readUntil),
// and the poller wakes the goroutine that wants the answer.
//
// Who reads is decided by a token. The read loop (runShared) holds it while
// the connection is quiet or busy with many calls, and lets go of it after
// a turn that answered the last call in flight: the next call is likely
// soon, from a caller just woken, and that caller can then read for
// itself. If no caller takes the token within readLinger, the loop takes
// it back, so an event or a ping waits at most that long (a close request
// wakes the loop at once). A caller that got its answer gives the token
// back to the loop at once when other callers wait on channels for their
// answers, and otherwise after readLinger again.
//
// A caller blocked in a read whose call is settled elsewhere (its timeout
// passed, its context ended, its batch was dropped) is woken by a read
// deadline in the past, told apart from the other deadlines by wake.
//
// The reader pauses before it inflates while the connection is over
// Limits.MaxInflateRate (clientConn.awaitInflate), whether it is the loop
// or a caller. A caller's pause ends, and the rest of its turn pauses no
// more, once its call is settled (clientConn.pauseOver): by an answer
// read in that turn, or by its ctx or deadline, which wake it
// (wakeReader). While the budget is spent, callers leave the reading to
// the loop (takeReads), which waits out the deficit.

// Who holds the read token.
const (
	readerNone   int32 = iota // nobody reads: a caller may take the token
	readerLoop                // the read loop reads
	readerCaller              // a caller reads for its answer
	readerFailed              // a caller's read ended the connection; the loop takes over to end it
)

// readLinger is how long the read loop leaves the reads to callers after
// the last call in flight was answered. It bounds the extra delay of an
// event that arrives meanwhile with no caller reading.
const readLinger = time.Millisecond

type sharedReads struct {
	owner atomic.Int32
	// handing is set by the turn that answers the last call in flight: the
	// read loop lets go of the token when that turn ends, and a caller
	// that finds the token with the loop meanwhile waits for it.
	handing atomic.Bool
	// waiting counts the callers that found the token taken and wait on
	// channels for answers not yet read: somebody must read for them.
	waiting  atomic.Int32
	loopWake chan struct{} // buffered: the read loop should try to take the token
	// The read loop takes the token back readLinger after the last
	// release. The timer is armed by the first release after it fired,
	// not reset by every release: a reset per call cost about 2% of a
	// lone call, as much as having no timer at all (BenchmarkCall;
	// bench/results/compat-client-2026-12-03.txt). When it fires early
	// for a later release, the loop arms it again for the rest.
	linger      *time.Timer
	lingerArmed atomic.Bool  // linger is pending; set by whoever arms it
	releasedAt  atomic.Int64 // when the token was last let go of, in monoNow nanoseconds
	wake        atomic.Bool  // the read deadline was set to wake a reading caller
	// closeDeadline is the closing handshake's read deadline, in
	// UnixNano, set under the wsConn's wmu: a woken reader puts it back.
	closeDeadline int64
	failure       error // why a caller's read ended the connection; owned by the token
	// readingFor is the settled flag of the call whose caller holds the
	// token (readUntil), nil while the loop does; owned by the token.
	readingFor *atomic.Bool
	// inflate is the connection's inflate budget (clientConn.inflateRate),
	// set before the connection is read: a wake-up ends a caller's pause.
	inflate *atomic.Pointer[inflateBudget]

	callerReads atomic.Uint64 // how many times a caller took the token
}

func newSharedReads() *sharedReads {
	s := &sharedReads{loopWake: make(chan struct{}, 1), linger: time.NewTimer(time.Hour)}
	s.linger.Stop()
	s.owner.Store(readerLoop) // the loop reads first: the upgrade's early bytes, the capabilities
	return s
}

// wakeLoop tells the read loop to take the token now.
func (s *sharedReads) wakeLoop() {
	select {
	case s.loopWake <- struct{}{}:
	default:
	}
}

// release lets go of the token, held by the caller, and hands the reads to
// the read loop after readLinger, at once if a caller waits on a channel.
// It reports whether one does.
func (s *sharedReads) release() (waiters bool) {
	hook := testHookReleased.Load()
	var who int32
	if hook != nil {
		who = s.owner.Load()
	}
	s.handing.Store(false)
	s.owner.Store(readerNone)
	// The timer is armed once the token is free. Armed before, a timer
	// that fired while this goroutine was descheduled for readLinger
	// found the token still taken; the loop then waited with no timer
	// armed, and once the token was freed nobody read the connection
	// (its pings, events and end) until a next call or the idle timeout
	// (TestReleaseRaceLeavesTheLoopATimer).
	s.releasedAt.Store(monoNow())
	if !s.lingerArmed.Swap(true) {
		s.linger.Reset(readLinger)
	}
	if hook != nil {
		(*hook)(who)
	}
	// Read once the token is free: a caller that found it taken counted
	// itself before it looked at the token a last time (takeReads).
	return s.waiting.Load() > 0
}

// lingerLeft is how long the reads stay with the callers after the last
// release, or 0 when that time is up.
func (s *sharedReads) lingerLeft() time.Duration {
	return max(0, readLinger-time.Duration(monoNow()-s.releasedAt.Load()))
}

// testHookReleased, when set, runs in release once the linger timer is
// armed, with who let go of the token (readerLoop, readerCaller): a test
// stalls a releasing caller there.
var testHookReleased atomic.Pointer[func(who int32)]

// runShared is the read loop of a connection whose reads are shared: it
// reads while it holds the token, and returns why the connection ended.
func (c *wsConn) runShared(h messageHandler) error {
	s := c.shared
	defer s.linger.Stop()
	if early := c.early; len(early) > 0 {
		c.early = nil
		if _, err := c.turn(early, h); err != nil {
			return err
		}
	}
	for {
		for !s.handing.Load() {
			_, herr, err := c.readOnce(h)
			if herr != nil {
				return herr
			}
			if err != nil {
				if c.takeWake(err) || c.takeCloseRequest(err) {
					continue
				}
				return c.readError(err)
			}
		}
		if s.release() && s.owner.CompareAndSwap(readerNone, readerLoop) {
			continue
		}
		// Every release leaves the linger timer armed, so a wait here
		// always ends.
		for {
			select {
			case <-s.loopWake:
			case <-s.linger.C:
				s.lingerArmed.Store(false)
				if rest := s.lingerLeft(); rest > 0 {
					if !s.lingerArmed.Swap(true) {
						s.linger.Reset(rest)
					}
					continue
				}
			}
			if s.owner.CompareAndSwap(readerNone, readerLoop) {
				break
			}
			// The token stays with the loop when the connection ends, so
			// that no caller reads from it any more.
			if s.owner.CompareAndSwap(readerFailed, readerLoop) {
				return s.failure
			}
		}
	}
}

// takeReads takes the token for a caller waiting for its answer, which
// then reads with readUntil, and reports whether it did. A caller alone in
// flight finding the read loop about to let go of the token waits for
// that. When somebody else reads, it counts the caller among those waiting
// on channels and stores the count in *counted, which the call's settler
// (or the caller, whichever comes first) takes back with uncount.
func (c *wsConn) takeReads(counted *atomic.Pointer[sharedReads], alone bool) bool {
	s := c.shared
	if s.inflateOwed() {
		// The loop reads and waits out the deficit: a caller would skip
		// its pauses once its answer is read (clientConn.pauseOver).
		s.countWaiting(counted)
		return false
	}
	for i := 0; alone && i < 64; i++ {
		if s.owner.CompareAndSwap(readerNone, readerCaller) {
			s.callerReads.Add(1)
			return true
		}
		if s.owner.Load() != readerLoop || !s.handing.Load() {
			break
		}
		runtime.Gosched() // the loop is finishing the turn that answered the last call
	}
	s.waiting.Add(1)
	counted.Store(s)
	if s.owner.CompareAndSwap(readerNone, readerCaller) {
		uncount(counted)
		s.callerReads.Add(1)
		return true
	}
	return false
}

// inflateOwed reports whether the connection is over its inflate budget:
// its reader would pause before it inflates again. One that never
// inflated has no budget, and pays a nil check.
func (s *sharedReads) inflateOwed() bool {
	if s.inflate == nil {
		return false
	}
	b := s.inflate.Load()
	return b != nil && b.wait(monoNow()) > 0
}

// countWaiting counts a call among those waiting on channels, whose
// answers the read loop must read, in *counted for uncount, and wakes the
// loop if nobody holds the token: a Go call's caller never reads. A loop
// or caller letting go of the token later sees the count (release).
func (s *sharedReads) countWaiting(counted *atomic.Pointer[sharedReads]) {
	s.waiting.Add(1)
	counted.Store(s)
	if s.owner.Load() == readerNone {
		s.wakeLoop()
	}
}

// uncount takes back the count of a waiting caller, once.
func uncount(counted *atomic.Pointer[sharedReads]) {
	if counted.Load() == nil {
		return
	}
	if s := counted.Swap(nil); s != nil {
		s.waiting.Add(-1)
	}
}

// readUntil reads and handles turns on a caller's goroutine until done is
// set, then lets go of the token taken with takeReads. A read error or a
// handler's error is left to the read loop to end the connection with.
func (c *wsConn) readUntil(h messageHandler, done *atomic.Bool) {
	s := c.shared
	s.readingFor = done // cleared before the token is let go of
	for !done.Load() {
		_, herr, err := c.readOnce(h)
		if err != nil && herr == nil {
			if c.takeWake(err) || c.takeCloseRequest(err) {
				continue
			}
			herr = c.readError(err)
		}
		if herr != nil {
			s.readingFor = nil
			s.failure = herr
			s.owner.Store(readerFailed)
			s.wakeLoop()
			return
		}
	}
	s.readingFor = nil
	if s.release() {
		s.wakeLoop()
	}
}

// wakeReader wakes a caller blocked in readUntil, in a read or in an
// inflate pause: its call was settled by another goroutine. Once the
// connection is closing too: the caller held its call past its ctx until
// the closing handshake's deadline (3 s; a reconnect audit), and takeWake
// puts that deadline back.
//
// The flag and its deadline change together, under wmu held exclusively,
// as takeWake takes them: under the read lock, a wake-up's flag could be
// taken with an earlier wake-up's deadline, and its own deadline then
// land after takeWake cleared it, unflagged: the next read timed out as
// no wake-up, and the connection ended with 1006 "i/o timeout" (an
// async-call audit: callers timing out while Go calls were in flight).
func (c *wsConn) wakeReader() {
	c.wakeInflatePause()
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.shared.wake.Store(true)
	c.nc.SetReadDeadline(time.Now())
}

// wakeInflatePause ends the inflate pause of a caller whose call is
// settled (clientConn.pauseOver): a read deadline does not reach it.
func (c *wsConn) wakeInflatePause() {
	if p := c.shared.inflate; p != nil {
		if b := p.Load(); b != nil {
			b.wakePause()
		}
	}
}

// takeWake reports whether err is the wake-up of wakeReader, and then
// clears the deadline, keeping the wake-up of a close request that came
// meanwhile. It holds wmu as wakeReader does.
func (c *wsConn) takeWake(err error) bool {
	if c.shared == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if !c.shared.wake.Swap(false) {
		return false
	}
	if c.closing {
		c.nc.SetReadDeadline(time.Unix(0, c.shared.closeDeadline))
		return true
	}
	c.nc.SetReadDeadline(time.Time{})
	if c.closeRequest.Load() != nil {
		c.nc.SetReadDeadline(time.Now())
	}
	return true
}
