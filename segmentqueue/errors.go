package segmentqueue

import (
	"errors"
	"fmt"
	"io"
)

var (
	// ErrNeedMore reports that a call asked for more bytes than the queue
	// holds. Nothing was removed; push more bytes and call again. It is a
	// plain value so that a parser polling a short queue allocates nothing.
	ErrNeedMore = errors.New("segmentqueue: fewer bytes buffered than requested")

	// ErrNegativeCount reports a negative byte count passed to Peek,
	// Discard, Next, Segments or Reserve.
	ErrNegativeCount = errors.New("segmentqueue: negative count")

	// ErrInvalidRead reports an io.Reader, passed to Fill, that returned a
	// count outside [0, len(p)]. Nothing it claimed to read was buffered.
	ErrInvalidRead = errors.New("segmentqueue: reader returned an invalid count")

	// ErrLimit matches every *LimitError with errors.Is.
	ErrLimit = errors.New("segmentqueue: limit exceeded")
)

// Limit names one bound of a Queue.
type Limit int

const (
	// LimitBytes is the bound on buffered bytes (Limits.MaxBytes).
	LimitBytes Limit = iota + 1
	// LimitSegments is the bound on buffered segments (Limits.MaxSegments).
	LimitSegments
)

// String returns the name of the Limits field that sets l.
func (l Limit) String() string {
	switch l {
	case LimitBytes:
		return "MaxBytes"
	case LimitSegments:
		return "MaxSegments"
	}
	return fmt.Sprintf("Limit(%d)", int(l))
}

// LimitError reports a Push, Write, Fill or Reserve refused because it would
// take the queue past one of its limits. The queue is left as it was:
// nothing of the refused call was buffered. For Fill, which cannot know how
// much a read would bring, Adding is 1 (bytes) or 1 (a new segment).
type LimitError struct {
	Limit    Limit // which bound was hit
	Max      int   // the bound in force
	Buffered int   // what the queue held before the call (bytes or segments)
	Adding   int   // what the call would have added (bytes or segments)
}

// Error names the limit and gives the figures that broke it.
func (e *LimitError) Error() string {
	unit := "bytes"
	if e.Limit == LimitSegments {
		unit = "segments"
	}
	return fmt.Sprintf("segmentqueue: %s exceeded: %d %s buffered + %d more > %d",
		e.Limit, e.Buffered, unit, e.Adding, e.Max)
}

// Is makes errors.Is(err, ErrLimit) true for every *LimitError.
func (e *LimitError) Is(target error) bool { return target == ErrLimit }

// ScratchError reports a Peek whose scratch buffer cannot hold the bytes
// asked for. Peek never allocates a larger one: the caller sizes scratch for
// the largest peek it makes (14 bytes for an RFC 6455 frame header).
type ScratchError struct {
	Need int // the byte count passed to Peek
	Cap  int // cap(scratch)
}

// Error gives the size needed and the capacity given.
func (e *ScratchError) Error() string {
	return fmt.Sprintf("segmentqueue: peek of %d bytes needs a scratch buffer of that capacity, got %d", e.Need, e.Cap)
}

// Unwrap makes errors.Is(err, io.ErrShortBuffer) true.
func (e *ScratchError) Unwrap() error { return io.ErrShortBuffer }
