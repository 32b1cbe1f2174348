package corkwriter

import (
	"errors"
	"io"
	"sync"
)

// Status reports what happened to one frame handed to an Outbox.
type Status uint8

const (
	// Sent: the frame was written to the connection before the call
	// returned.
	Sent Status = iota + 1
	// Queued: the frame was accepted and will be written in order, by the
	// write in progress or at the end of the owner's turn.
	Queued
	// Dropped: the frame was refused because the outbox is over its byte
	// limit and the policy is DropOnBackpressure. The connection stays.
	Dropped
	// Closed: the frame was refused because the outbox is closed: by Close,
	// by a write error, or by this very frame exceeding the limit under
	// CloseOnBackpressure. Err says which.
	Closed
)

// String returns the status's name in lower case.
func (s Status) String() string {
	switch s {
	case Sent:
		return "sent"
	case Queued:
		return "queued"
	case Dropped:
		return "dropped"
	case Closed:
		return "closed"
	}
	return "invalid status"
}

// Policy says what an Outbox does with a frame that would take it over its
// byte limit.
type Policy uint8

const (
	// DropOnBackpressure refuses the frame (status Dropped) and keeps the
	// connection: right for frames a slow reader can afford to miss.
	DropOnBackpressure Policy = iota
	// CloseOnBackpressure closes the outbox (status Closed, Err returns
	// ErrBackpressure, OnError is called): right when every frame matters
	// and a reader that cannot keep up must go.
	CloseOnBackpressure
)

// ErrClosed is the error of an Outbox after Close.
var ErrClosed = errors.New("corkwriter: outbox closed")

// ErrBackpressure is the error of an Outbox that closed because a frame
// would have taken it over MaxQueued under CloseOnBackpressure.
var ErrBackpressure = errors.New("corkwriter: outbox over its byte limit")

// DefaultMaxQueued is the default byte limit of an Outbox.
const DefaultMaxQueued = 1 << 20

// OutboxOptions configures an Outbox. A nil *OutboxOptions gives the
// defaults.
type OutboxOptions struct {
	// MaxQueued bounds the bytes accepted but not yet written, copied and
	// shared alike. A frame that would go past it is handled by Overflow,
	// except into an empty outbox, which always takes one frame so that a
	// frame larger than the limit is not refused forever. Zero means
	// DefaultMaxQueued.
	MaxQueued int
	// Overflow is the policy for a frame over the limit.
	Overflow Policy
	// OnError is called once when the outbox closes itself, after a write
	// error or under CloseOnBackpressure, with the cause. It is not called
	// for Close. It runs on the goroutine that hit the failure (maybe a
	// broadcaster), without locks held, and must not block: closing the
	// connection is the usual answer.
	OnError func(err error)
}

// OutboxStats counts what an Outbox did since it was made.
type OutboxStats struct {
	Accepted   uint64 // frames accepted: Sent or Queued
	Dropped    uint64 // frames refused with Dropped
	Copied     uint64 // bytes copied into pooled chunks
	Referenced uint64 // bytes queued by reference
	Syscalls   uint64 // write system calls
	Written    uint64 // bytes the connection accepted
	Handoffs   uint64 // times a flusher goroutine was started
}

// An Outbox is made by NewOutbox; the zero value is not usable, and its
// methods panic.
//
// An Outbox is the send queue of one connection: any goroutine may queue
// frames (answers, broadcasts, pings), and everything queued while a write
// is in progress leaves in the next writev, so frames coalesce under load.
//
// There is no dedicated goroutine. A frame queued into an idle outbox is
// written at once by the goroutine that queued it, without waiting: if the
// socket cannot take it all, or more frames arrived meanwhile, a short-lived
// goroutine takes over and exits when the outbox is empty. So an idle
// connection costs no goroutine, no timer and no buffer, a broadcaster is
// never blocked by a slow reader, and a busy connection still has a single
// writer. On a connection without a file descriptor, where a write cannot be
// tried without blocking, the flusher goroutine always does the writing,
// unless the connection is a TryWriter (a QUIC stream), which is tried
// as a descriptor is.
//
// Cork and Uncork delimit the owner's turn as for a Writer: frames queued
// during it, by anyone, leave together at the outermost Uncork, which writes
// on the owner's goroutine and may wait for the socket.
type Outbox struct {
	mu     sync.Mutex
	q      *batch // accepted, not yet taken by the flusher; nil when empty
	queued int    // bytes in q and in flight
	err    error
	// The four flags and corks sit together in one word: an Outbox per
	// connection stays in a 240-byte allocation.
	flushing bool // a goroutine owns w and is writing
	last     bool // SendLast took its frame: nothing more is accepted
	inline   bool // producers may try a write on their own goroutine
	overflow Policy
	corks    int32
	// drainer is o.drain as a func value, made at the first hand-off: a go
	// statement on the method itself allocates a closure every time, one
	// per member whose flusher starts (2-3 of a room emit's 6-7
	// allocations in compat's BenchmarkRoomEmit). Set and read under mu.
	drainer func()
	stats   OutboxStats
	drained chan struct{} // closed when queued reaches 0 or err is set; made by Drained
	room    chan struct{} // closed when queued falls to roomAt or err is set; made by Room
	roomAt  int           // the most queued bytes that wake room's waiters

	w       Writer // used only by the goroutine that set flushing
	limit   int
	onError func(error)
}

// NewOutbox returns an Outbox that writes to w, with the raw writev path
// when w exposes a file descriptor, as NewWriter. It panics when w is nil.
func NewOutbox(w io.Writer, opts *OutboxOptions) *Outbox {
	mustWriter("NewOutbox", w)
	return newOutbox(newSender(w), opts)
}

func newOutbox(out sender, opts *OutboxOptions) *Outbox {
	o := &Outbox{limit: DefaultMaxQueued}
	o.w = Writer{out: out, threshold: DefaultFlushThreshold}
	o.inline = out.canTry() && out.canWait()
	if opts != nil {
		if opts.MaxQueued > 0 {
			o.limit = opts.MaxQueued
		}
		o.overflow = opts.Overflow
		o.onError = opts.OnError
	}
	return o
}

// Send queues a copy of p. The caller may reuse p when Send returns.
// Into an idle outbox, p is written from the caller's buffer at once and
// only what the socket did not take is copied (OutboxStats.Copied): a
// client's lone request costs no copy.
func (o *Outbox) Send(p []byte) Status { return o.enqueue(p, false, true, false) }

// SendLast queues p by reference, as SendShared does, as the last frame the
// outbox accepts: every send after it returns Closed, while what is queued
// is still written, p last. It is for a protocol's closing frame (RFC 6455
// §5.5.1: no data frame after a close frame), so that senders need no lock
// of their own to stay ahead of it. A second SendLast returns Closed.
// MaxQueued does not refuse it: a refused closing frame would have been
// lost for good, since the outbox accepts nothing after it either (a
// modules audit), and it is one frame, so the queue passes its limit by
// that much at most.
func (o *Outbox) SendLast(p []byte) Status { return o.enqueue(p, true, true, true) }

// SendShared queues p by reference, without copying: p must never be
// modified afterwards (a prepared broadcast frame, a constant ping). Frames
// shorter than 256 bytes are copied, as by Writer.WriteShared.
func (o *Outbox) SendShared(p []byte) Status { return o.enqueue(p, true, true, false) }

// QueueShared queues p by reference, as SendShared does, but never writes
// on the caller's goroutine: if the outbox is idle, a flusher goroutine
// starts and writes. It is for a broadcaster sending one frame to many
// outboxes, which should not pay a system call per recipient in its own
// loop: the writes run on the recipients' flushers, in parallel, and the
// frames of a burst of broadcasts coalesce into one writev per recipient.
// It never returns Sent.
func (o *Outbox) QueueShared(p []byte) Status { return o.enqueue(p, true, false, false) }

// enqueue accepts p (a copy, or by reference when shared) and, when the
// outbox is idle, writes it: on the caller's goroutine if inline is allowed
// and the connection can be tried without blocking, else on a flusher
// goroutine. With last, p is the last frame the outbox accepts, whatever
// becomes of it.
func (o *Outbox) enqueue(p []byte, shared, inline, last bool) Status {
	if o.w.out == nil {
		panic("corkwriter: an Outbox not made by NewOutbox") // its flusher would panic where nobody can recover
	}
	o.mu.Lock()
	if o.err != nil || o.last {
		o.mu.Unlock()
		return Closed
	}
	o.last = last
	if len(p) == 0 {
		o.mu.Unlock()
		return Sent
	}
	if o.queued > 0 && o.queued+len(p) > o.limit && !last {
		if o.overflow == DropOnBackpressure {
			o.stats.Dropped++
			o.mu.Unlock()
			return Dropped
		}
		first := o.failLocked(ErrBackpressure)
		o.mu.Unlock()
		o.notify(first, ErrBackpressure)
		return Closed
	}
	if o.q == nil && !o.flushing && o.corks == 0 && o.inline && inline && o.w.b == nil {
		// Idle: p is written from the caller's buffer, not copied; only
		// what the socket does not take is (see flushInline).
		o.flushing = true
		o.queued += len(p)
		o.stats.Accepted++
		if shared {
			o.stats.Referenced += uint64(len(p))
		}
		o.w.b = getBatch()
		o.w.b.appendRef(p)
		o.mu.Unlock()
		st, _ := o.flushInline(false, !shared)
		return st
	}
	if o.q == nil {
		o.q = getBatch()
	}
	copied := true
	if shared {
		copied = o.q.appendShared(p)
	} else {
		o.q.appendCopy(p)
	}
	if copied {
		o.stats.Copied += uint64(len(p))
	} else {
		o.stats.Referenced += uint64(len(p))
	}
	o.queued += len(p)
	o.stats.Accepted++
	if o.flushing || o.corks > 0 {
		o.mu.Unlock()
		return Queued
	}
	o.flushing = true
	if !o.inline || !inline {
		drain := o.drainerLocked()
		o.mu.Unlock()
		go drain()
		return Queued
	}
	o.takeLocked()
	o.mu.Unlock()
	st, _ := o.flushInline(false, false)
	return st
}

// takeLocked moves the queue into the flusher's writer.
func (o *Outbox) takeLocked() {
	if o.q == nil {
		return
	}
	if o.w.b == nil {
		o.w.b = o.q
	} else {
		o.w.b.moveFrom(o.q)
	}
	o.q = nil
}

// inlineRounds is how many writes a goroutine that found the outbox idle
// makes before it hands the rest to a flusher goroutine. Frames that arrive
// during its write go out in its next one, on a goroutine that is already
// running, rather than waiting for a new goroutine to be scheduled, which on
// a busy machine takes far longer than a write; the bound keeps a producer
// from being held by a steady stream of other producers' frames.
const inlineRounds = 4

// flushInline writes what the flusher holds, and what arrives meanwhile, for
// up to inlineRounds writes; then it gives up the flusher role (nothing
// left) or hands it to a drain goroutine (the socket is full, or the budget
// is spent). It reports Sent when its first write, which held the caller's
// own frame, left completely.
//
// With borrowed, the first write holds only the caller's frame, by
// reference to a buffer the caller reuses once Send returns: what that
// write leaves is copied before anything else can write it later.
func (o *Outbox) flushInline(wait, borrowed bool) (Status, error) {
	st := Queued
	for round := 1; ; round++ {
		if err := o.write(wait); err != nil {
			return Closed, err
		}
		left := o.w.Buffered() > 0
		if round == 1 && !left {
			st = Sent
		}
		if round == 1 && borrowed && left {
			o.stats.Copied += uint64(o.w.b.n)
			o.w.b = o.w.b.copied()
		}
		if !left && (o.q == nil || o.corks > 0) {
			o.flushing = false
			o.mu.Unlock()
			return st, nil
		}
		if left || round == inlineRounds {
			drain := o.drainerLocked()
			o.mu.Unlock()
			go drain()
			return st, nil
		}
		o.takeLocked()
		o.mu.Unlock()
	}
}

// write flushes the flusher's writer and accounts for it. It returns with
// o.mu held, unless it returns an error: then the outbox is closed, the
// flusher role given up and the lock released.
//
// A write that waits counts what the connection took each time it waits
// again (wrote), not only when it returns: it may hold up to MaxQueued
// bytes, and a peer reading them slowly would otherwise make no room
// (Room, and every send refused) until it had read them all.
func (o *Outbox) write(wait bool) error {
	var p progress
	if wait {
		p = o
	}
	err := o.w.flush(wait, p)
	if err == ErrWouldBlock {
		err = nil
	}
	o.mu.Lock()
	o.countWrittenLocked()
	if err == nil && o.err != nil {
		err = o.err // closed while we were writing
	}
	if err == nil {
		return nil
	}
	first := o.failLocked(err)
	o.w.Discard()
	o.queued = 0
	o.flushing = false
	o.mu.Unlock()
	o.notify(first, err)
	return err
}

// wrote counts what the flusher's write has written so far; the flusher
// calls it, from its write, before it waits for the connection again.
func (o *Outbox) wrote() {
	o.mu.Lock()
	o.countWrittenLocked()
	o.mu.Unlock()
}

// countWrittenLocked takes what the flusher's writer wrote since it was
// last counted off the queued bytes and wakes the waiters of Drained and
// Room it makes room for. Only the flusher calls it: it owns o.w, whose
// counters stats.Written and stats.Syscalls copy.
func (o *Outbox) countWrittenLocked() {
	o.queued -= int(o.w.stats.Written - o.stats.Written)
	o.stats.Syscalls = o.w.stats.Syscalls
	o.stats.Written = o.w.stats.Written
	o.signalDrainedLocked()
}

// drainerLocked counts a hand-off to a flusher goroutine and returns the
// function that goroutine runs, o.drain, made once.
func (o *Outbox) drainerLocked() func() {
	o.stats.Handoffs++
	if o.drainer == nil {
		o.drainer = o.drain
	}
	return o.drainer
}

// drain is the flusher goroutine: it writes, waiting for the socket when
// needed, until the outbox is empty, and then exits.
func (o *Outbox) drain() {
	o.mu.Lock()
	for {
		if o.err != nil {
			o.w.Discard()
			o.queued = 0
			o.flushing = false
			o.mu.Unlock()
			return
		}
		if o.corks == 0 {
			o.takeLocked()
		}
		if o.w.Buffered() == 0 {
			o.flushing = false
			o.mu.Unlock()
			return
		}
		o.mu.Unlock()
		if o.write(true) != nil {
			return
		}
	}
}

// failLocked closes the outbox with err unless it is closed already, and
// releases everything queued. It reports whether err is the first error.
func (o *Outbox) failLocked(err error) bool {
	if o.err != nil {
		return false
	}
	o.err = err
	if o.q != nil {
		o.queued -= o.q.n
		o.q.release()
		o.q = nil
	}
	o.signalDrainedLocked()
	return true
}

// Drained returns a channel that is closed once everything accepted so far
// has been written, or the outbox is closed. A connection that queued its
// close frame waits on it (with a timeout of its own) before it closes the
// socket, so the close frame is not lost.
func (o *Outbox) Drained() <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.queued == 0 || o.err != nil {
		return closedChan
	}
	if o.drained == nil {
		o.drained = make(chan struct{})
	}
	return o.drained
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Room returns a channel that is closed once a frame of n bytes would be
// accepted under MaxQueued (the queue is empty, or at most MaxQueued-n
// bytes are queued), or the outbox is closed. It is for a sender that must
// not lose a frame the outbox refused (Dropped): it waits on Room and
// sends again. Others may take the room first, so the send may be refused
// again; the sender should also make sure that they stop trying meanwhile.
// Waiting on Drained instead would need the queue to empty, which a steady
// stream of other frames may never let happen.
func (o *Outbox) Room(n int) <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	at := max(o.limit-n, 0)
	if o.queued <= at || o.err != nil {
		return closedChan
	}
	if o.room == nil {
		o.room, o.roomAt = make(chan struct{}), at
	} else {
		// One channel for every waiter: it wakes at the room the
		// smallest frame needs, and larger ones try and wait again.
		o.roomAt = max(o.roomAt, at)
	}
	return o.room
}

// signalDrainedLocked wakes the waiters of Drained and Room whose
// condition now holds.
func (o *Outbox) signalDrainedLocked() {
	if o.drained != nil && (o.queued == 0 || o.err != nil) {
		close(o.drained)
		o.drained = nil
	}
	if o.room != nil && (o.queued <= o.roomAt || o.err != nil) {
		close(o.room)
		o.room = nil
	}
}

func (o *Outbox) notify(first bool, err error) {
	if first && o.onError != nil {
		o.onError(err)
	}
}

// Cork starts the owner's turn: frames queued from now on, by any
// goroutine, wait for the matching Uncork. Turns nest. Only the goroutine
// that owns the connection should cork it, and it must uncork promptly:
// while corked, nothing is written.
func (o *Outbox) Cork() {
	o.mu.Lock()
	o.corks++
	o.mu.Unlock()
}

// Uncork ends a turn. The outermost Uncork writes everything queued in one
// writev on the calling goroutine, waiting for the socket if it must, unless
// a flusher is already at work (it takes the frames next). Frames that
// arrive during the write are left to a flusher goroutine, so a steady
// stream of broadcasts cannot hold the owner here. Uncork returns the
// outbox's error if it is closed.
func (o *Outbox) Uncork() error { return o.uncork(true) }

// UncorkTry ends a turn as Uncork does, except that it never waits for
// the connection: it writes what the socket (or TryWriter) takes at once
// and leaves the rest to a flusher goroutine, or all of it, on a
// connection whose writes cannot be tried. It is for an owner that must
// go back to reading whatever the peer does: a client, whose server may
// have stopped reading until the client takes its answers. Two ends that
// both wait in Uncork, each for the other to read, wait for ever.
func (o *Outbox) UncorkTry() error { return o.uncork(false) }

func (o *Outbox) uncork(wait bool) error {
	o.mu.Lock()
	if o.corks > 0 {
		o.corks--
	}
	if o.err != nil {
		err := o.err
		o.mu.Unlock()
		return err
	}
	if o.corks > 0 || o.flushing || o.q == nil {
		o.mu.Unlock()
		return nil
	}
	o.flushing = true
	if !wait && !o.inline {
		drain := o.drainerLocked()
		o.mu.Unlock()
		go drain()
		return nil
	}
	o.takeLocked()
	o.mu.Unlock()
	_, err := o.flushInline(wait, false)
	return err
}

// Close closes the outbox: later sends return Closed at once, and queued
// frames are dropped and their buffers released. A write in progress is not
// interrupted; its flusher releases what it holds when the write returns,
// which for a peer that does not read is when the connection is closed or
// its write deadline passes. Close does not close the connection and does
// not call OnError. It returns nil.
func (o *Outbox) Close() error {
	o.mu.Lock()
	o.failLocked(ErrClosed)
	o.mu.Unlock()
	return nil
}

// Err returns why the outbox is closed (ErrClosed, ErrBackpressure or a
// write error), or nil while it is open. After SendLast it stays nil,
// once Drained too: the outbox refuses sends (Closed) but has not failed
// (Drained tells when the last frame has left), until Close or a failure.
func (o *Outbox) Err() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

// Queued returns the number of bytes accepted and not yet written.
func (o *Outbox) Queued() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.queued
}

// Stats returns the outbox's counters.
func (o *Outbox) Stats() OutboxStats {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.stats
}
