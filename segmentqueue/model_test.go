package segmentqueue

import (
	"bytes"
	"errors"
	"io"
	"math/bits"
	"math/rand/v2"
	"testing"
)

// chooser supplies the decisions of an operation sequence: from a seeded
// generator in the property tests, from the fuzzer's bytes in FuzzQueue.
type chooser interface {
	// intn returns a choice in [0, n); n > 0.
	intn(n int) int
	// more reports whether another operation should run.
	more() bool
}

// fuzzChooser reads its choices from fuzzer bytes, two at a time, and stops
// when they run out or after maxFuzzOps operations, so that one input
// stays fast however long the fuzzer makes it.
type fuzzChooser struct {
	data []byte
	ops  int
}

const maxFuzzOps = 300

func (c *fuzzChooser) more() bool {
	c.ops++
	return len(c.data) > 0 && c.ops <= maxFuzzOps
}

func (c *fuzzChooser) intn(n int) int {
	var v int
	for range 2 {
		v <<= 8
		if len(c.data) > 0 {
			v |= int(c.data[0])
			c.data = c.data[1:]
		}
	}
	return v % n
}

// modelRun drives a Queue and a bytes.Buffer with the same operations and
// fails t at the first difference. Besides contents it checks the queue's
// internal invariants after every operation and that slices handed out stay
// intact for as long as the Queue documentation promises.
type modelRun struct {
	t      testing.TB
	q      *Queue
	model  bytes.Buffer
	pushed int // total bytes generated, so every byte is distinguishable

	// held are slices handed out by Peek, Segments and Next, each with a
	// copy of what it held then; they must not change until the next
	// Discard, Next, Read, Release or Reset.
	held    [][]byte
	heldWas [][]byte

	writeSrc []byte // reused, and scribbled on, across Write calls
}

func newModelRun(t testing.TB, limits Limits) *modelRun {
	return &modelRun{t: t, q: New(limits)}
}

// pattern is random bytes that fill copies from, at an offset that moves
// with every byte generated, so that a byte read from the wrong place is
// caught. Copying (rather than computing each byte) keeps the model fast
// under the race detector.
var pattern = func() []byte {
	p := make([]byte, 1<<17+70001)
	rand.NewChaCha8([32]byte{'s', 'q'}).Read(p)
	return p
}()

// fill fills dst with the next bytes of the pattern and returns it.
func (r *modelRun) fill(dst []byte) []byte {
	off := r.pushed % (1<<17 - 1)
	copy(dst, pattern[off:])
	r.pushed += len(dst)
	return dst
}

// size picks a segment or request length: mostly small, sometimes spanning
// a chunk or several.
func size(c chooser, limit int) int {
	switch c.intn(8) {
	case 0:
		return 0
	case 1, 2, 3:
		return c.intn(16)
	case 4, 5:
		return c.intn(600)
	case 6:
		return c.intn(5000)
	}
	return c.intn(limit + 1)
}

// maxHeld bounds the slices checked after each operation, so a long
// sequence of peeks costs linear time to check.
const maxHeld = 16

func (r *modelRun) hold(b []byte) {
	if len(r.held) == maxHeld {
		r.held, r.heldWas = r.held[1:], r.heldWas[1:]
	}
	r.held = append(r.held, b)
	r.heldWas = append(r.heldWas, bytes.Clone(b))
}

// invalidate checks that every held slice is intact and forgets them: the
// operation about to run may recycle their memory.
func (r *modelRun) invalidate() {
	r.checkHeld()
	r.held, r.heldWas = r.held[:0], r.heldWas[:0]
}

func (r *modelRun) checkHeld() {
	r.t.Helper()
	for i := range r.held {
		if !bytes.Equal(r.held[i], r.heldWas[i]) {
			r.t.Fatalf("a slice handed out earlier changed before the next removing call:\n got %x\nwant %x", r.held[i], r.heldWas[i])
		}
	}
}

func (r *modelRun) step(c chooser) {
	t, q := r.t, r.q
	t.Helper()
	switch op := c.intn(23); {
	case op < 4: // Push
		seg := r.fill(make([]byte, size(c, 70000)))
		before := q.Len()
		err := q.Push(seg)
		if r.checkLimit(err, len(seg), before) {
			return
		}
		r.model.Write(seg)
	case op < 8: // Write from a buffer the caller reuses
		n := size(c, 70000)
		if cap(r.writeSrc) < n {
			r.writeSrc = make([]byte, n)
		}
		src := r.fill(r.writeSrc[:n])
		before := q.Len()
		w, err := q.Write(src)
		if r.checkLimit(err, n, before) {
			if w != 0 {
				t.Fatalf("Write refused by a limit reported %d bytes written", w)
			}
			return
		}
		if w != n {
			t.Fatalf("Write(%d bytes) = %d", n, w)
		}
		r.model.Write(src)
		clear(src) // the queue must have copied
	case op < 10: // Peek
		n := size(c, r.model.Len()+2)
		scratch := make([]byte, 0, n+c.intn(3))
		if c.intn(4) == 0 && n > 0 {
			scratch = make([]byte, 0, n-1)
		}
		got, err := q.Peek(n, scratch)
		switch {
		case n > cap(scratch):
			var se *ScratchError
			if !errors.As(err, &se) || se.Need != n || se.Cap != cap(scratch) || !errors.Is(err, io.ErrShortBuffer) {
				t.Fatalf("Peek(%d) with scratch cap %d: err = %v, want *ScratchError", n, cap(scratch), err)
			}
		case n > r.model.Len():
			if err != ErrNeedMore {
				t.Fatalf("Peek(%d) of %d bytes: err = %v, want ErrNeedMore", n, r.model.Len(), err)
			}
		default:
			if err != nil || !bytes.Equal(got, r.model.Bytes()[:n]) {
				t.Fatalf("Peek(%d) = %x, %v; want %x", n, got, err, r.model.Bytes()[:n])
			}
			if len(got) != cap(got) {
				t.Fatalf("Peek result has spare capacity %d: an append would overwrite queued bytes", cap(got)-len(got))
			}
			r.hold(got)
		}
	case op < 12: // Segments
		n := size(c, r.model.Len()+2)
		dst := make([][]byte, c.intn(2))
		got, err := q.Segments(n, dst)
		if n > r.model.Len() {
			if err != ErrNeedMore || len(got) != len(dst) {
				t.Fatalf("Segments(%d) of %d bytes: %d segments, err = %v; want dst unchanged, ErrNeedMore", n, r.model.Len(), len(got), err)
			}
			return
		}
		if err != nil {
			t.Fatalf("Segments(%d): %v", n, err)
		}
		joined := bytes.Join(got[len(dst):], nil)
		if !bytes.Equal(joined, r.model.Bytes()[:n]) {
			t.Fatalf("Segments(%d) joined = %x, want %x", n, joined, r.model.Bytes()[:n])
		}
		for _, s := range got[len(dst):] {
			if len(s) == 0 || len(s) != cap(s) {
				t.Fatalf("Segments returned a segment of len %d cap %d", len(s), cap(s))
			}
			r.hold(s)
		}
	case op < 14: // Discard
		r.invalidate()
		n := size(c, r.model.Len()+2)
		err := q.Discard(n)
		if n > r.model.Len() {
			if err != ErrNeedMore {
				t.Fatalf("Discard(%d) of %d bytes: err = %v, want ErrNeedMore", n, r.model.Len(), err)
			}
			return
		}
		if err != nil {
			t.Fatalf("Discard(%d): %v", n, err)
		}
		r.model.Next(n)
	case op < 17: // Next
		r.invalidate()
		n := size(c, r.model.Len()+2)
		got, err := q.Next(n)
		if n > r.model.Len() {
			if err != ErrNeedMore || got != nil {
				t.Fatalf("Next(%d) of %d bytes = %d bytes, %v; want ErrNeedMore", n, r.model.Len(), len(got), err)
			}
			return
		}
		want := r.model.Next(n)
		if err != nil || !bytes.Equal(got, want) || len(got) != cap(got) {
			t.Fatalf("Next(%d) = %x (cap %d), %v; want %x", n, got, cap(got), err, want)
		}
		r.hold(got)
	case op < 19: // Read
		r.invalidate()
		p := make([]byte, size(c, r.model.Len()+2))
		want := make([]byte, len(p))
		wantN, wantErr := r.model.Read(want)
		n, err := q.Read(p)
		if n != wantN || err != wantErr || !bytes.Equal(p[:n], want[:wantN]) {
			t.Fatalf("Read(%d bytes) = %d, %v, %x; want %d, %v, %x", len(p), n, err, p[:n], wantN, wantErr, want[:wantN])
		}
	case op < 21: // Fill
		rd := &chunkReader{data: r.fill(make([]byte, size(c, 70000)))}
		switch c.intn(8) {
		case 0:
			rd.err = io.EOF
		case 1:
			rd.invalid = true
		}
		before := q.Len()
		n, err := q.Fill(rd)
		switch {
		case before == q.limits.maxBytes() || errors.Is(err, ErrLimit):
			if !r.checkLimit(err, 1, before) || rd.calls != 0 {
				t.Fatalf("Fill refused by a limit called Read %d times", rd.calls)
			}
			return
		case rd.invalid:
			if n != 0 || err != ErrInvalidRead {
				t.Fatalf("Fill from a reader claiming too much = %d, %v", n, err)
			}
		case n != rd.gave || err != rd.err:
			t.Fatalf("Fill = %d, %v; the reader gave %d, %v", n, err, rd.gave, rd.err)
		case n > r.q.limits.maxBytes()-before:
			t.Fatalf("Fill read %d bytes into a queue with room for %d", n, r.q.limits.maxBytes()-before)
		}
		if !rd.invalid {
			r.model.Write(rd.data[:rd.gave])
		}
	case op < 22: // Reserve
		r.invalidate()
		n := size(c, r.model.Len()+70000)
		err := q.Reserve(n)
		if n > q.limits.maxBytes() {
			var le *LimitError
			if !errors.As(err, &le) || le.Limit != LimitBytes {
				t.Fatalf("Reserve(%d) past MaxBytes %d: %v", n, q.limits.maxBytes(), err)
			}
			return
		}
		if err != nil {
			t.Fatalf("Reserve(%d): %v", n, err)
		}
		if n > r.model.Len() && r.model.Len() > 0 {
			if segs, _ := q.Segments(r.model.Len(), nil); len(segs) != 1 {
				t.Fatalf("Reserve(%d) left %d bytes in %d segments", n, r.model.Len(), len(segs))
			}
		}
	default:
		r.invalidate()
		if c.intn(8) == 0 {
			q.Reset()
			r.model.Reset()
		} else {
			q.Release()
		}
	}
}

// checkLimit reports whether err is a limit refusal of adding n bytes to a
// queue holding before bytes, and fails r.t when err is wrong for that.
func (r *modelRun) checkLimit(err error, n, before int) bool {
	t := r.t
	t.Helper()
	maxBytes := r.q.limits.maxBytes()
	if err == nil {
		if n > 0 && before+n > maxBytes {
			t.Fatalf("adding %d bytes to %d passed MaxBytes %d without an error", n, before, maxBytes)
		}
		if r.q.count > r.q.limits.maxSegments() {
			t.Fatalf("%d segments buffered past MaxSegments %d", r.q.count, r.q.limits.maxSegments())
		}
		return false
	}
	var le *LimitError
	if !errors.As(err, &le) || !errors.Is(err, ErrLimit) {
		t.Fatalf("adding %d bytes: err = %v, want a *LimitError", n, err)
	}
	switch le.Limit {
	case LimitBytes:
		if before+n <= maxBytes || le.Max != maxBytes || le.Buffered != before || le.Adding != n {
			t.Fatalf("adding %d bytes to %d under MaxBytes %d: wrong %+v", n, before, maxBytes, le)
		}
	case LimitSegments:
		if le.Buffered+le.Adding <= le.Max || le.Max != r.q.limits.maxSegments() || le.Buffered != r.q.count {
			t.Fatalf("segment limit error that is not one: %+v (count %d)", le, r.q.count)
		}
	default:
		t.Fatalf("unknown limit in %+v", le)
	}
	if r.q.Len() != before {
		t.Fatalf("a refused call changed Len from %d to %d", before, r.q.Len())
	}
	return true
}

// checkInvariants verifies the queue's bookkeeping against its ring.
func checkInvariants(t testing.TB, q *Queue) {
	t.Helper()
	if q.ring == nil {
		if q.count != 0 || q.length != 0 || q.head != 0 {
			t.Fatalf("no ring but count %d, length %d, head %d", q.count, q.length, q.head)
		}
		return
	}
	if bits.OnesCount(uint(len(q.ring))) != 1 || q.count > len(q.ring) || q.head >= len(q.ring) {
		t.Fatalf("ring of %d with head %d and count %d", len(q.ring), q.head, q.count)
	}
	total := 0
	for i := range len(q.ring) {
		s := q.at(i)
		if i >= q.count {
			if s.buf != nil || s.chunk != nil {
				t.Fatalf("unused ring slot %d still references memory", i)
			}
			continue
		}
		if len(s.buf) == 0 {
			t.Fatalf("segment %d of %d is empty", i, q.count)
		}
		if s.chunk == nil {
			if cap(s.buf) != len(s.buf) {
				t.Fatalf("pushed segment %d has spare capacity", i)
			}
		} else if end, chunkEnd := &s.buf[:cap(s.buf)][cap(s.buf)-1], &s.chunk.b[len(s.chunk.b)-1]; end != chunkEnd {
			t.Fatalf("chunk segment %d does not extend to the end of its chunk", i)
		}
		total += len(s.buf)
	}
	if total != q.length {
		t.Fatalf("segments hold %d bytes, Len says %d", total, q.length)
	}
	if len(q.ring) > inlineSegments && !inlineEmpty(q) {
		t.Fatalf("the inline ring still references memory after the ring moved to the heap")
	}
}

func (r *modelRun) run(c chooser) {
	r.t.Helper()
	for c.more() {
		r.step(c)
		checkInvariants(r.t, r.q)
		if r.q.Len() != r.model.Len() {
			r.t.Fatalf("Len = %d, model holds %d", r.q.Len(), r.model.Len())
		}
		r.checkHeld()
	}
	// Drain what is left and check it byte for byte.
	r.invalidate()
	rest, err := io.ReadAll(r.q)
	if err != nil || !bytes.Equal(rest, r.model.Bytes()) {
		r.t.Fatalf("draining: %d bytes, %v; model holds %d", len(rest), err, r.model.Len())
	}
	r.q.Release()
	if r.q.lent != nil || r.q.count != 0 || len(r.q.ring) > inlineSegments {
		r.t.Fatalf("a drained, released queue still holds memory")
	}
}

// inlineEmpty reports whether no inline ring slot references memory.
func inlineEmpty(q *Queue) bool {
	for _, s := range q.inline {
		if s.buf != nil || s.chunk != nil {
			return false
		}
	}
	return true
}

// chunkReader serves data in one Read, as much as fits, with err; when
// invalid it claims one byte more than it was given room for.
type chunkReader struct {
	data    []byte
	err     error
	invalid bool
	calls   int
	gave    int
}

func (r *chunkReader) Read(p []byte) (int, error) {
	r.calls++
	if r.invalid {
		return len(p) + 1, nil
	}
	r.gave = copy(p, r.data)
	return r.gave, r.err
}
