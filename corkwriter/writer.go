package corkwriter

import (
	"errors"
	"io"
)

// ErrWouldBlock is returned by Flush and Uncork of a Writer made with NewFD
// when the socket's send buffer filled before everything was written. The
// rest stays buffered (Buffered reports how much); flush again when the
// descriptor is writable.
var ErrWouldBlock = errors.New("corkwriter: write would block")

// DefaultFlushThreshold is the number of buffered bytes past which a Writer
// flushes even inside a turn, so one turn cannot buffer without bound.
const DefaultFlushThreshold = 64 << 10

// Options tunes a Writer. The zero value (or a nil *Options) is ready to use.
type Options struct {
	// FlushThreshold is the number of buffered bytes past which Write and
	// WriteShared flush even inside a turn. A Write at least this large is
	// sent straight from the caller's slice, with whatever is pending, in
	// one writev and without a copy, and returns once it has left; on a
	// Writer from NewFD, which never waits, it is copied like any other
	// Write. Zero means DefaultFlushThreshold.
	FlushThreshold int
}

// Stats counts what a Writer did since it was made.
type Stats struct {
	Syscalls   uint64 // write system calls: writev on a descriptor, Write on a fallback conn
	Written    uint64 // bytes the connection accepted
	Copied     uint64 // bytes copied into pooled chunks
	Referenced uint64 // bytes sent from the caller's buffers without a copy
}

// A Writer gathers the writes of one turn and sends them with one writev.
//
// Outside a turn (no Cork pending) every Write and WriteShared is sent at
// once. Inside a turn they are buffered until the outermost Uncork, an
// explicit Flush, or FlushThreshold bytes.
//
// A Writer is used by one goroutine at a time. After a write error every
// call returns that error, and everything pending is dropped.
type Writer struct {
	b         *batch // nil when nothing is pending
	out       sender
	corks     int
	threshold int
	err       error
	stats     Stats
}

// sender is the part of a Writer that talks to the connection.
type sender interface {
	// send writes the unsent bytes of b, advancing it. With wait it returns
	// only once everything is written or an error occurs; without, it stops
	// when the connection would block (b then still holds the rest), and a
	// sender that cannot tell blocks as with wait. A send that waits tells
	// p (when not nil) each time it has written part of b and more is
	// left, before it waits for the connection again.
	send(b *batch, wait bool, st *Stats, p progress) error
	// canWait reports whether send can wait for the connection to become
	// writable. A writer on a caller's descriptor (NewFD) cannot.
	canWait() bool
	// canTry reports whether send without wait never blocks.
	canTry() bool
}

// progress is told by a sender whose write waits for the connection that
// the connection took part of the batch (st.Written says how much so
// far): an Outbox counts that part as written at once, which makes room
// for its producers while the rest waits, rather than when the whole
// write returns.
type progress interface{ wrote() }

// NewWriter returns a Writer that sends to w. When w exposes a file
// descriptor (syscall.Conn: *net.TCPConn, *net.UnixConn, *os.File) it is
// written with writev on the raw descriptor, waiting on Go's poller like a
// normal Write; otherwise (TLS, net.Pipe, QUIC streams) the pending buffers
// are handed to w in order with the same results and more Write calls.
// NewWriter panics when w is nil.
func NewWriter(w io.Writer, opts *Options) *Writer {
	mustWriter("NewWriter", w)
	return newWriter(newSender(w), opts)
}

// mustWriter panics on a nil w here, where the caller can see and recover
// it, rather than in a flusher goroutine at the first write, where nobody
// can and the process ends.
func mustWriter(fn string, w io.Writer) {
	if w == nil {
		panic("corkwriter: " + fn + " with a nil io.Writer")
	}
}

func newWriter(out sender, opts *Options) *Writer {
	wr := &Writer{out: out, threshold: DefaultFlushThreshold}
	if opts != nil && opts.FlushThreshold > 0 {
		wr.threshold = opts.FlushThreshold
	}
	return wr
}

func (w *Writer) pending() *batch {
	if w.b == nil {
		w.b = getBatch()
	}
	return w.b
}

// Write copies p into a pooled chunk and, outside a turn or past the flush
// threshold, sends what is buffered. It never keeps a reference to p.
func (w *Writer) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if len(p) >= w.threshold && w.out.canWait() {
		// Copying would only fill chunks for the flush that follows at
		// once: send p by reference, and wait, so the caller gets p back.
		w.pending().appendRef(p)
		w.stats.Referenced += uint64(len(p))
		return len(p), w.flush(true, nil)
	}
	w.pending().appendCopy(p)
	w.stats.Copied += uint64(len(p))
	return len(p), w.maybeFlush()
}

// WriteShared queues p by reference, without copying, and, outside a turn
// or past the flush threshold, sends what is buffered. p must not be
// modified afterwards: it is meant for immutable buffers such as a prepared
// broadcast frame that many connections send. Buffers shorter than 256
// bytes are copied instead, which is cheaper than an iovec entry.
func (w *Writer) WriteShared(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if w.pending().appendShared(p) {
		w.stats.Copied += uint64(len(p))
	} else {
		w.stats.Referenced += uint64(len(p))
	}
	return len(p), w.maybeFlush()
}

func (w *Writer) maybeFlush() error {
	if w.corks > 0 && w.b.n < w.threshold {
		return nil
	}
	err := w.flush(w.out.canWait(), nil)
	if err == ErrWouldBlock {
		return nil // accepted and kept; the event loop flushes on writable
	}
	return err
}

// Cork starts a turn: writes are buffered until the matching Uncork. Turns
// nest; only the outermost Uncork flushes.
func (w *Writer) Cork() { w.corks++ }

// Uncork ends a turn and, if it was the outermost, flushes. An Uncork
// without a pending Cork just flushes.
func (w *Writer) Uncork() error {
	if w.corks > 0 {
		w.corks--
	}
	if w.corks > 0 {
		return w.err
	}
	return w.Flush()
}

// Flush sends everything buffered with as few writev calls as the kernel
// allows: one, unless there are more than 1024 segments or the socket takes
// only part. On a Writer from NewFD it does not wait: if the socket fills it
// returns ErrWouldBlock and keeps the rest.
func (w *Writer) Flush() error {
	if w.err != nil {
		return w.err
	}
	return w.flush(w.out.canWait(), nil)
}

// flush sends what is pending, telling p, if not nil, of what a write
// that waits has written so far (see progress).
func (w *Writer) flush(wait bool, p progress) error {
	if w.b == nil {
		return nil
	}
	err := w.out.send(w.b, wait, &w.stats, p)
	if err != nil {
		w.fail(err)
		return err
	}
	if w.b.n == 0 {
		w.b.release()
		w.b = nil
		return nil
	}
	return ErrWouldBlock
}

// fail makes err sticky and drops everything pending.
func (w *Writer) fail(err error) {
	w.err = err
	w.Discard()
}

// Buffered returns the number of bytes waiting to be sent.
func (w *Writer) Buffered() int {
	if w.b == nil {
		return 0
	}
	return w.b.n
}

// Discard drops everything buffered, returns its chunks to the pool and
// releases its references to shared buffers. It returns the number of bytes
// dropped. The Writer stays usable.
func (w *Writer) Discard() int {
	if w.b == nil {
		return 0
	}
	n := w.b.n
	w.b.release()
	w.b = nil
	return n
}

// Err returns the write error that broke the Writer, or nil.
func (w *Writer) Err() error { return w.err }

// Stats returns the Writer's counters.
func (w *Writer) Stats() Stats { return w.stats }
