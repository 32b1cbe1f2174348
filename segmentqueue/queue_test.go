package segmentqueue

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
	"testing/iotest"
	"unsafe"
)

// randChooser makes seeded random choices for a fixed number of operations.
type randChooser struct {
	rng  *rand.Rand
	left int
}

func (c *randChooser) intn(n int) int { return c.rng.IntN(n) }

func (c *randChooser) more() bool {
	c.left--
	return c.left >= 0
}

// TestModel runs random operation sequences against a bytes.Buffer model,
// with the default limits and with tight ones that the sequences hit.
func TestModel(t *testing.T) {
	limits := []Limits{
		{},
		{MaxBytes: 3000, MaxSegments: 6},
		{MaxBytes: 100000, MaxSegments: 3},
		{MaxBytes: 200, MaxSegments: 1000},
	}
	seeds := 25
	if testing.Short() {
		seeds = 8
	}
	for seed := range seeds {
		for _, l := range limits {
			r := newModelRun(t, l)
			r.run(&randChooser{rng: rand.New(rand.NewPCG(uint64(seed), 0x5e9)), left: 400})
		}
	}
}

func FuzzQueue(f *testing.F) {
	f.Add([]byte{0, 1, 0, 200, 0, 10, 0, 5, 0, 40, 0, 15, 0, 3})
	f.Add(bytes.Repeat([]byte{0, 5, 0, 7, 1, 0, 0, 14}, 8))
	f.Add([]byte{0, 0, 0, 6, 0, 0, 0, 4, 0, 5, 0, 1, 0, 14, 0, 16, 0, 9, 0, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		c := &fuzzChooser{data: data}
		var l Limits
		if len(data) > 0 && data[0]&1 == 1 {
			l = Limits{MaxBytes: 1 + c.intn(20000), MaxSegments: 1 + c.intn(16)}
		}
		newModelRun(t, l).run(c)
	})
}

func TestZeroValueUsesDefaults(t *testing.T) {
	var q Queue
	if err := q.Push(make([]byte, DefaultMaxBytes)); err != nil {
		t.Fatalf("pushing exactly DefaultMaxBytes: %v", err)
	}
	err := q.Push([]byte{1})
	var le *LimitError
	if !errors.As(err, &le) || le.Limit != LimitBytes || le.Max != DefaultMaxBytes {
		t.Fatalf("one byte past DefaultMaxBytes: err = %v", err)
	}
	q.Reset()
	for i := range DefaultMaxSegments {
		if err := q.Push([]byte{byte(i)}); err != nil {
			t.Fatalf("push %d: %v", i, err)
		}
	}
	err = q.Push([]byte{1})
	if !errors.As(err, &le) || le.Limit != LimitSegments || le.Max != DefaultMaxSegments || le.Buffered != DefaultMaxSegments || le.Adding != 1 {
		t.Fatalf("one segment past DefaultMaxSegments: err = %v", err)
	}
}

// TestTinySegmentFlood: a peer trickling one byte per read cannot grow the
// ring past MaxSegments through Push, while Write coalesces the same bytes
// into a few chunks and stays far from the bound.
func TestTinySegmentFlood(t *testing.T) {
	q := New(Limits{MaxSegments: 64})
	var err error
	pushed := 0
	for err == nil {
		err = q.Push([]byte{'x'})
		if err == nil {
			pushed++
		}
	}
	if !errors.Is(err, ErrLimit) || pushed != 64 || q.Len() != 64 {
		t.Fatalf("after %d one-byte pushes: err = %v, Len = %d", pushed, err, q.Len())
	}
	if len(q.ring) > 64 {
		t.Fatalf("ring grew to %d slots for a limit of 64", len(q.ring))
	}

	q = New(Limits{MaxSegments: 64})
	for i := range 1 << 18 {
		if _, err := q.Write([]byte{byte(i)}); err != nil {
			t.Fatalf("one-byte write %d: %v", i, err)
		}
	}
	// 512 B + 1 KiB + ... + 64 KiB holds 127.5 KiB in 8 chunks; the rest
	// takes three 64 KiB chunks.
	if q.count != 11 {
		t.Fatalf("256 KiB written a byte at a time took %d segments", q.count)
	}
}

func TestWriteLimitIsAtomic(t *testing.T) {
	q := New(Limits{MaxBytes: 1 << 20, MaxSegments: 3})
	if _, err := q.Write(make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	// 200 KiB more needs more than the two chunks left under MaxSegments.
	n, err := q.Write(make([]byte, 200<<10))
	var le *LimitError
	if n != 0 || !errors.As(err, &le) || le.Limit != LimitSegments || le.Buffered != 1 {
		t.Fatalf("Write past MaxSegments = %d, %v", n, err)
	}
	if q.Len() != 1000 || q.count != 1 {
		t.Fatalf("refused Write left Len %d in %d segments", q.Len(), q.count)
	}
	if le.Error() == "" || LimitSegments.String() != "MaxSegments" || LimitBytes.String() != "MaxBytes" {
		t.Fatal("limit errors must describe themselves")
	}
}

func TestNegativeCounts(t *testing.T) {
	var q Queue
	q.Push([]byte("abc"))
	if _, err := q.Peek(-1, nil); err != ErrNegativeCount {
		t.Errorf("Peek(-1): %v", err)
	}
	if err := q.Discard(-1); err != ErrNegativeCount {
		t.Errorf("Discard(-1): %v", err)
	}
	if _, err := q.Next(-1); err != ErrNegativeCount {
		t.Errorf("Next(-1): %v", err)
	}
	if _, err := q.Segments(-1, nil); err != ErrNegativeCount {
		t.Errorf("Segments(-1): %v", err)
	}
	if q.Len() != 3 {
		t.Errorf("Len = %d after refused calls", q.Len())
	}
}

func TestNextCopiesOnlyWhenStraddling(t *testing.T) {
	var q Queue
	a, b := []byte("hello, "), []byte("world")
	q.Push(a)
	q.Push(b)
	got, _ := q.Next(5)
	if &got[0] != &a[0] {
		t.Error("Next inside one pushed segment copied")
	}
	got, _ = q.Next(4) // ", wo" straddles
	if string(got) != ", wo" || &got[0] == &a[5] || &got[0] == &b[0] {
		t.Errorf("straddling Next = %q, must be a copy", got)
	}
	if q.lent == nil {
		t.Error("the join buffer is not held as a loan")
	}
	got, _ = q.Next(3)
	if string(got) != "rld" || &got[0] != &b[2] {
		t.Error("Next of a segment's tail copied")
	}
	if q.lent != nil {
		t.Error("a pushed segment is held as a loan")
	}
}

// TestLoanOutlivesChunk: the chunk behind a zero-copy Next stays out of its
// pool while the caller may still use the slice, even though the queue has
// consumed every byte of it, and goes back at the next removing call.
func TestLoanOutlivesChunk(t *testing.T) {
	var q Queue
	msg := bytes.Repeat([]byte("m"), 300)
	q.Write(msg)
	got, _ := q.Next(300)
	if q.Len() != 0 || q.lent == nil || &got[0] != &q.lent.b[0] {
		t.Fatal("Next of a whole chunk does not lend it")
	}
	// Writes that would take a chunk from the pool must not get this one.
	for range 8 {
		q.Write(bytes.Repeat([]byte("x"), 300))
	}
	if !bytes.Equal(got, msg) {
		t.Fatal("a lent chunk was reused while the caller held it")
	}
	q.Discard(1)
	if q.lent != nil {
		t.Fatal("Discard did not end the loan")
	}
}

func TestReleaseLeavesNothingWhenEmpty(t *testing.T) {
	q := New(Limits{})
	for range 100 {
		q.Write(make([]byte, 3000))
	}
	for range 20 {
		q.Push(make([]byte, 100))
	}
	if len(q.ring) <= inlineSegments {
		t.Fatal("test needs a grown ring")
	}
	q.Next(q.Len() - 7)
	q.Release()
	if q.lent != nil || len(q.ring) != inlineSegments {
		t.Fatalf("after Release: loan %v, ring of %d", q.lent != nil, len(q.ring))
	}
	rest, _ := q.Next(7)
	if len(rest) != 7 {
		t.Fatal("Release lost bytes")
	}
	q.Release()
	if q.lent != nil || q.count != 0 || !inlineEmpty(q) {
		t.Fatal("an empty, released queue still references memory")
	}
	if size := unsafe.Sizeof(Queue{}); size > 256 {
		t.Fatalf("Queue struct is %d bytes; the docs promise about 200", size)
	}
}

func TestResetReturnsChunks(t *testing.T) {
	var q Queue
	q.Write(make([]byte, 10000))
	q.Push([]byte("pushed"))
	q.Next(20000 % 10007)
	q.Reset()
	if q.Len() != 0 || q.ring != nil || q.lent != nil || !inlineEmpty(&q) {
		t.Fatal("Reset left memory behind")
	}
	if _, err := q.Write([]byte("again")); err != nil || q.Len() != 5 {
		t.Fatal("queue unusable after Reset")
	}
}

func TestReadIsAnIOReader(t *testing.T) {
	var q Queue
	want := make([]byte, 100000)
	for i := range want {
		want[i] = byte(i * 7)
	}
	for i := 0; i < len(want); i += 999 {
		q.Push(want[i:min(i+999, len(want))])
	}
	got, err := io.ReadAll(&q)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("ReadAll: %d bytes, %v", len(got), err)
	}
	if n, err := q.Read(nil); n != 0 || err != nil {
		t.Fatalf("Read(nil) on empty queue = %d, %v; want 0, nil", n, err)
	}
}

// TestFillReadsIntoChunks reads a stream the way a goroutine-per-connection
// server does, one Fill per read, and checks the bytes, the chunk growth
// and the limit.
func TestFillReadsIntoChunks(t *testing.T) {
	want := make([]byte, 1<<20)
	for i := range want {
		want[i] = byte(i * 13)
	}
	q := New(Limits{MaxBytes: len(want)})
	src := iotest.HalfReader(bytes.NewReader(want))
	for reads := 1; q.Len() < len(want); reads++ {
		if n, err := q.Fill(src); err != nil || n == 0 {
			t.Fatalf("Fill %d = %d, %v after %d bytes", reads, n, err, q.Len())
		}
	}
	if q.count > 20 {
		t.Fatalf("1 MiB took %d chunks; they should double to 64 KiB", q.count)
	}
	_, err := q.Fill(bytes.NewReader([]byte{1}))
	if !errors.Is(err, ErrLimit) {
		t.Fatalf("Fill into a full queue: %v", err)
	}
	got, _ := q.Next(q.Len())
	if !bytes.Equal(got, want) {
		t.Fatal("Fill corrupted the stream")
	}
	q.Release()
	if n, err := q.Fill(bytes.NewReader(nil)); n != 0 || err != io.EOF || q.count != 0 {
		t.Fatalf("an empty read kept a chunk: %d, %v, %d segments", n, err, q.count)
	}
}

// TestReserveMakesNextZeroCopy: a decoder that reserves a large payload's
// length after its header gets the payload in one buffer, read there by
// Fill, and Next copies nothing.
func TestReserveMakesNextZeroCopy(t *testing.T) {
	payload := bytes.Repeat([]byte("reserved payload"), 32<<10)
	stream := append([]byte("HEADER"), payload...)
	src := iotest.HalfReader(bytes.NewReader(stream))
	var q Queue
	for q.Len() < 6 {
		if _, err := q.Fill(src); err != nil {
			t.Fatal(err)
		}
	}
	q.Discard(6)
	if err := q.Reserve(len(payload)); err != nil {
		t.Fatal(err)
	}
	for q.Len() < len(payload) {
		if _, err := q.Fill(src); err != nil {
			t.Fatal(err)
		}
	}
	if segs, _ := q.Segments(len(payload), nil); len(segs) != 1 {
		t.Fatalf("a reserved payload arrived in %d segments", len(segs))
	}
	got, _ := q.Next(len(payload))
	if !bytes.Equal(got, payload) || q.lent == nil || &got[0] != &q.lent.b[0] {
		t.Fatal("Next of a reserved payload copied it or lost bytes")
	}
	if err := q.Reserve(DefaultMaxBytes + 1); !errors.Is(err, ErrLimit) {
		t.Fatalf("Reserve past MaxBytes: %v", err)
	}
	if err := q.Reserve(-1); err != ErrNegativeCount {
		t.Fatalf("Reserve(-1): %v", err)
	}
}
