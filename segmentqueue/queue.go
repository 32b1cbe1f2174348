package segmentqueue

import "io"

// Default limits, used when a Limits field is zero or negative.
const (
	// DefaultMaxBytes bounds what one queue may buffer: room for a few
	// messages of 16 MiB, the message limit lxzan/gws applies by default. A
	// server with a smaller message limit should set its own.
	DefaultMaxBytes = 64 << 20

	// DefaultMaxSegments bounds how many segments one queue may hold: 64 MiB
	// of 16 KiB reads. A peer that trickles one byte per read makes one
	// segment per byte through Push, so this bound is what stops it; Write
	// coalesces small reads into shared chunks and rarely comes near it.
	DefaultMaxSegments = 4096
)

// Limits bounds a Queue. A zero or negative field selects its default.
type Limits struct {
	MaxBytes    int // most bytes buffered at once
	MaxSegments int // most segments buffered at once
}

func (l Limits) maxBytes() int {
	if l.MaxBytes <= 0 {
		return DefaultMaxBytes
	}
	return l.MaxBytes
}

func (l Limits) maxSegments() int {
	if l.MaxSegments <= 0 {
		return DefaultMaxSegments
	}
	return l.MaxSegments
}

// inlineSegments is how many segments a Queue holds without a heap ring. A
// message of a few reads fits, so a server whose queues fill and drain on
// every read never allocates bookkeeping.
const inlineSegments = 4

// segment is one buffered run of bytes.
type segment struct {
	// buf holds the segment's unconsumed bytes. For a pooled chunk its
	// capacity runs to the end of the chunk, and Write appends there.
	buf []byte
	// chunk is the pooled block behind buf, or nil for a segment the caller
	// pushed (the queue never writes to those and never pools them).
	chunk *buffer
}

// A Queue buffers a byte stream as a sequence of segments. The zero value is
// an empty queue with the default limits. A Queue is not safe for concurrent
// use and must not be copied after first use.
//
// # Ownership and validity
//
// Push hands a segment to the queue: the caller must not modify it, except
// through slices the queue hands back, until all of its bytes have been
// consumed (by Discard, Next or Read); after that the queue keeps no
// reference to it. Write copies, so the caller may reuse p at once; Fill
// reads into memory the queue owns.
//
// Slices returned by Peek, Next and Segments belong to the queue. The caller
// may read them and modify them in place (unmask a payload, for instance)
// until its next call to Discard, Next, Read, Release or Reset (or a
// Reserve that moves bytes); after that the memory behind them may be
// recycled. Push, Write, Fill, Len, Peek and
// Segments never invalidate a slice handed out earlier. To keep bytes
// longer, copy them, or Read them into a buffer of your own.
//
// # Memory
//
// An empty queue on which Release or Reset has been called holds no memory
// beyond the Queue struct itself (about 200 bytes): pooled chunks go back to
// their pool as soon as their last byte is consumed and nothing handed out
// still points into them.
type Queue struct {
	_ noCopy

	ring   []segment // power-of-two length; inline[:] until it outgrows it
	head   int       // ring index of the first segment
	count  int       // segments buffered
	length int       // bytes buffered
	limits Limits

	// lent is pooled memory behind the slice the last Next returned, kept
	// out of its pool until the caller's next removing call.
	lent *buffer

	// want is the byte count the last Reserve asked to hold contiguously
	// from the first byte; Fill sizes and places its reads by it. Every
	// removal clears it: left set after a Next, it made every later Fill
	// into the empty queue read into a fresh chunk of that size, which an
	// idle connection then held (a modules audit: 1 MiB for 2 bytes).
	want int

	inline [inlineSegments]segment
}

// New returns an empty queue bounded by limits.
func New(limits Limits) *Queue {
	return &Queue{limits: limits}
}

// Len returns the number of bytes buffered.
func (q *Queue) Len() int { return q.length }

// Push appends seg to the queue without copying it; the queue owns seg until
// its bytes are consumed. An empty seg is ignored. Push returns a
// *LimitError, and buffers nothing, when seg would take the queue past
// MaxBytes or MaxSegments.
func (q *Queue) Push(seg []byte) error {
	if len(seg) == 0 {
		return nil
	}
	if err := q.admit(len(seg), 1); err != nil {
		return err
	}
	q.pushBack(segment{buf: seg[:len(seg):len(seg)]})
	q.length += len(seg)
	return nil
}

// Write appends a copy of p, so the caller may reuse p as soon as Write
// returns. Small writes fill the free space of the last pooled chunk before
// a new chunk is taken. Write buffers all of p or, returning 0 and a
// *LimitError, none of it.
func (q *Queue) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	// Bytes first, so that a p far past MaxBytes is refused before its
	// chunks are counted.
	if err := q.admit(len(p), 0); err != nil {
		return 0, err
	}
	free, tailSize := q.tailRoom()
	newChunks := 0
	for rem, prev := len(p)-free, tailSize; rem > 0; newChunks++ {
		prev = chunkSize(rem, prev)
		rem -= prev
	}
	if err := q.admit(len(p), newChunks); err != nil {
		return 0, err
	}

	rest := p
	if free > 0 {
		tail := q.at(q.count - 1)
		k := min(free, len(rest))
		tail.buf = append(tail.buf, rest[:k]...)
		rest = rest[k:]
	}
	for prev := tailSize; len(rest) > 0; {
		c := getBuffer(chunkSize(len(rest), prev))
		k := copy(c.b, rest)
		q.pushBack(segment{buf: c.b[:k], chunk: c})
		rest = rest[k:]
		prev = len(c.b)
	}
	q.length += len(p)
	return len(p), nil
}

// Fill reads once from r straight into pooled memory at the end of the
// queue and returns what r.Read returned, the bytes already buffered. A
// server that blocks in Read per connection uses it instead of reading into
// a buffer of its own and copying with Write: bytes reach the queue with the
// kernel's copy only. The read goes into the free space of the last pooled
// chunk when at least 4 KiB are free there (or the rest of a Reserve fits),
// else into a new chunk (4 KiB at first, doubling along a stream up to
// 64 KiB), and never past MaxBytes. Fill returns a *LimitError without
// reading when the queue is at MaxBytes, or at MaxSegments and a new chunk
// is needed.
//
// While r.Read blocks, the chunk it reads into is held: an event-loop
// server that reads many connections into one shared buffer should Write
// instead, so that idle connections hold nothing.
func (q *Queue) Fill(r io.Reader) (int, error) {
	room := q.limits.maxBytes() - q.length
	if room <= 0 {
		return 0, &LimitError{Limit: LimitBytes, Max: q.limits.maxBytes(), Buffered: q.length, Adding: 1}
	}
	need := q.want - q.length // bytes a Reserve still waits for
	if need <= 0 {
		q.want, need = 0, 0
	}
	free, prev := q.tailRoom()
	if free >= minFill || (need > 0 && free >= need) {
		tail := q.at(q.count - 1)
		end := len(tail.buf)
		n, err := r.Read(tail.buf[end : end+min(free, room)])
		if n < 0 || n > min(free, room) {
			return 0, ErrInvalidRead
		}
		tail.buf = tail.buf[:end+n]
		q.length += n
		return n, err
	}
	if err := q.admit(1, 1); err != nil {
		return 0, err
	}
	size := chunkSize(minFill, prev)
	if q.count == 0 {
		size = max(size, need)
	}
	c := getBuffer(size)
	p := c.b[:min(len(c.b), room)]
	n, err := r.Read(p)
	if n <= 0 || n > len(p) {
		putBuffer(c)
		if n != 0 {
			return 0, ErrInvalidRead
		}
		return 0, err
	}
	q.pushBack(segment{buf: c.b[:n], chunk: c})
	q.length += n
	return n, err
}

// Reserve prepares the queue to hold its first n bytes in one buffer, so
// that once Fill has read them all, Next(n) returns them without a copy. A
// decoder calls it with the length of a large payload whose header it has
// just read and discarded: the bytes of the payload already buffered move
// (once) into a pooled buffer with room for n, and Fill reads the rest
// straight after them.
//
// Reserve commits memory for n bytes before they arrive, so a peer that
// declares a large length and stops sending holds that memory: reserve only
// lengths you accept to hold for an idle peer (MaxBytes bounds them all).
// Reserve returns a *LimitError when n is past MaxBytes, does nothing when
// n bytes are buffered already, and, when it moves bytes, invalidates the
// slices Peek and Segments returned, like a removing call.
func (q *Queue) Reserve(n int) error {
	switch {
	case n < 0:
		return ErrNegativeCount
	case n > q.limits.maxBytes():
		return &LimitError{Limit: LimitBytes, Max: q.limits.maxBytes(), Buffered: q.length, Adding: n - q.length}
	case n <= q.length:
		return nil
	}
	if free, _ := q.tailRoom(); q.count > 1 || q.count == 1 && free < n-q.length {
		c := getBuffer(n)
		k := q.length
		q.consume(k, c.b[:k])
		q.pushBack(segment{buf: c.b[:k], chunk: c})
		q.length = k
	}
	q.want = n
	return nil
}

// tailRoom returns the free bytes after the last segment, when it is a
// pooled chunk, and that chunk's size.
func (q *Queue) tailRoom() (free, size int) {
	if q.count == 0 {
		return 0, 0
	}
	tail := q.at(q.count - 1)
	if tail.chunk == nil {
		return 0, 0
	}
	return cap(tail.buf) - len(tail.buf), len(tail.chunk.b)
}

// admit checks that adding n bytes in segs new segments keeps q within its
// limits.
func (q *Queue) admit(n, segs int) error {
	if maxBytes := q.limits.maxBytes(); n > maxBytes-q.length {
		return &LimitError{Limit: LimitBytes, Max: maxBytes, Buffered: q.length, Adding: n}
	}
	if maxSegs := q.limits.maxSegments(); segs > maxSegs-q.count {
		return &LimitError{Limit: LimitSegments, Max: maxSegs, Buffered: q.count, Adding: segs}
	}
	return nil
}

// Peek returns the first n bytes without removing them. When they lie in
// one segment the result is a slice of it and nothing is copied; when they
// straddle segments they are copied into scratch[:n] and that is returned.
// Peek never allocates: it returns a *ScratchError when cap(scratch) < n,
// whether or not the bytes straddle, so a too-small scratch shows up on the
// first call. It returns ErrNeedMore when fewer than n bytes are buffered.
func (q *Queue) Peek(n int, scratch []byte) ([]byte, error) {
	if n > 0 && n <= cap(scratch) && q.count > 0 {
		if first := q.ring[q.head].buf; n <= len(first) {
			return first[:n:n], nil
		}
	}
	return q.peekSlow(n, scratch)
}

// peekSlow is Peek for bytes that straddle segments, and for every error.
func (q *Queue) peekSlow(n int, scratch []byte) ([]byte, error) {
	switch {
	case n < 0:
		return nil, ErrNegativeCount
	case n > cap(scratch):
		return nil, &ScratchError{Need: n, Cap: cap(scratch)}
	case n > q.length:
		return nil, ErrNeedMore
	case n == 0:
		return scratch[:0:0], nil
	}
	out := scratch[:n:n]
	for i, done := 0, 0; done < n; i++ {
		done += copy(out[done:], q.at(i).buf)
	}
	return out, nil
}

// Segments appends to dst the segments that cover the first n bytes (the
// last one cut at n) and returns the extended slice. Nothing is copied or
// removed; a caller may modify the bytes in place, for instance to unmask a
// WebSocket payload segment by segment before it calls Next. It returns dst
// unchanged and ErrNeedMore when fewer than n bytes are buffered.
func (q *Queue) Segments(n int, dst [][]byte) ([][]byte, error) {
	switch {
	case n < 0:
		return dst, ErrNegativeCount
	case n > q.length:
		return dst, ErrNeedMore
	}
	for i := 0; n > 0; i++ {
		buf := q.at(i).buf
		k := min(len(buf), n)
		dst = append(dst, buf[:k:k])
		n -= k
	}
	return dst, nil
}

// Discard removes the first n bytes. It returns ErrNeedMore, and removes
// nothing, when fewer than n bytes are buffered.
func (q *Queue) Discard(n int) error {
	if q.lent == nil && q.count > 0 {
		if first := &q.ring[q.head]; n >= 0 && n < len(first.buf) {
			first.buf = first.buf[n:]
			q.length -= n
			q.want = 0
			return nil
		}
	}
	return q.discardSlow(n)
}

// discardSlow is Discard when a loan ends, the first segment empties, or
// the call fails.
func (q *Queue) discardSlow(n int) error {
	q.endLoan()
	switch {
	case n < 0:
		return ErrNegativeCount
	case n > q.length:
		return ErrNeedMore
	}
	q.consume(n, nil)
	return nil
}

// Next removes the first n bytes and returns them as one contiguous slice.
// When they lie in one segment the result is a slice of it and nothing is
// copied; otherwise they are copied, once, into a pooled buffer. The result
// belongs to the queue and stays valid, for reading and writing in place,
// until the caller's next call to Discard, Next, Read, Release or Reset (see
// the Queue documentation). Next returns ErrNeedMore, and removes nothing,
// when fewer than n bytes are buffered.
func (q *Queue) Next(n int) ([]byte, error) {
	if q.lent == nil && q.count > 0 {
		if first := &q.ring[q.head]; n > 0 && n < len(first.buf) {
			out := first.buf[:n:n]
			first.buf = first.buf[n:]
			q.length -= n
			q.want = 0
			return out, nil
		}
	}
	return q.nextSlow(n)
}

// nextSlow is Next when a loan ends, the first segment empties or cannot
// hold the bytes, or the call fails.
func (q *Queue) nextSlow(n int) ([]byte, error) {
	q.endLoan()
	switch {
	case n < 0:
		return nil, ErrNegativeCount
	case n > q.length:
		return nil, ErrNeedMore
	case n == 0:
		return nil, nil
	}
	first := q.at(0)
	if len(first.buf) >= n {
		out := first.buf[:n:n]
		first.buf = first.buf[n:]
		q.length -= n
		q.want = 0
		if len(first.buf) == 0 {
			// The chunk behind out must outlive the segment: lend it
			// instead of pooling it.
			q.lent = q.popFront()
		}
		return out, nil
	}
	join := getBuffer(n)
	out := join.b[:n:n]
	q.consume(n, out)
	q.lent = join
	return out, nil
}

// Read removes up to len(p) bytes into p, as io.Reader: it returns io.EOF
// when the queue is empty and len(p) > 0.
func (q *Queue) Read(p []byte) (int, error) {
	q.endLoan()
	if q.length == 0 {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	n := min(len(p), q.length)
	q.consume(n, p[:n])
	return n, nil
}

// Release ends the loan of the slice the last Next returned, so pooled
// memory behind it goes back to its pool now rather than at the next call,
// and drops a segment ring that has grown beyond the inline one when at
// most four segments remain. Buffered bytes are kept. A server calls it when a
// connection goes idle (after handling a read, before waiting for the next)
// so that the idle connection holds only the bytes still buffered.
func (q *Queue) Release() {
	q.endLoan()
	if q.count <= inlineSegments && len(q.ring) > inlineSegments {
		q.regrow(q.inline[:])
	}
}

// Reset discards every buffered byte, returns pooled memory to its pool, and
// keeps the limits. The queue then holds no memory beyond its struct.
func (q *Queue) Reset() {
	q.endLoan()
	for q.count > 0 {
		if c := q.popFront(); c != nil {
			putBuffer(c)
		}
	}
	q.ring, q.head, q.length, q.want = nil, 0, 0, 0
}

// consume removes the first n bytes, copying them into dst when dst is not
// nil, and pools every chunk it empties. The caller has checked n <= q.length.
func (q *Queue) consume(n int, dst []byte) {
	q.length -= n
	q.want = 0
	for n > 0 {
		first := q.at(0)
		k := min(len(first.buf), n)
		if dst != nil {
			copy(dst[len(dst)-n:], first.buf[:k])
		}
		n -= k
		if k < len(first.buf) {
			first.buf = first.buf[k:]
			return
		}
		if c := q.popFront(); c != nil {
			putBuffer(c)
		}
	}
}

// endLoan pools the memory behind the slice the last Next returned.
func (q *Queue) endLoan() {
	if q.lent != nil {
		q.returnLoan()
	}
}

func (q *Queue) returnLoan() {
	putBuffer(q.lent)
	q.lent = nil
}

// at returns the i-th buffered segment.
func (q *Queue) at(i int) *segment {
	return &q.ring[(q.head+i)&(len(q.ring)-1)]
}

// pushBack appends s, growing the ring when it is full.
func (q *Queue) pushBack(s segment) {
	if q.count == len(q.ring) {
		q.grow()
	}
	q.ring[(q.head+q.count)&(len(q.ring)-1)] = s
	q.count++
}

// grow gives a queue without a ring the inline one, and doubles a full ring.
func (q *Queue) grow() {
	if q.ring == nil {
		q.ring = q.inline[:]
		return
	}
	q.regrow(make([]segment, 2*len(q.ring)))
}

// popFront removes the first segment and returns its chunk, if any, for the
// caller to pool or lend. The slot is cleared so that the ring keeps no
// pushed segment alive.
func (q *Queue) popFront() *buffer {
	slot := &q.ring[q.head]
	c := slot.chunk
	*slot = segment{}
	q.head = (q.head + 1) & (len(q.ring) - 1)
	q.count--
	return c
}

// regrow moves the buffered segments, in order, to the front of ring, whose
// length is a power of two not smaller than q.count, and clears the old ring
// so that neither keeps a consumed segment alive.
func (q *Queue) regrow(ring []segment) {
	old := q.ring
	if q.head+q.count <= len(old) {
		copy(ring, old[q.head:q.head+q.count])
	} else {
		k := copy(ring, old[q.head:])
		copy(ring[k:], old[:q.count-k])
	}
	clear(old)
	q.ring, q.head = ring, 0
}

// noCopy makes go vet's copylocks check report a Queue copied by value: the
// copy would share the ring and chunks of the original.
type noCopy struct{}

func (*noCopy) Lock()   {}
func (*noCopy) Unlock() {}
