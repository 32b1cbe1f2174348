//go:build unix

package corkwriter

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"syscall"
	"testing"
)

// randomOps makes a turn-shaped workload: corked runs of small writes with
// shared frames between them, the odd large write and explicit flushes.
func randomOps(rng *rand.Rand, n int) []op {
	ops := make([]op, 0, n)
	for range n {
		o := op{kind: opKind(rng.IntN(int(numOps)))}
		switch rng.IntN(10) {
		case 0:
			o.size = rng.IntN(maxOpSize)
		case 1, 2:
			o.size = 256 + rng.IntN(20<<10)
		default:
			o.size = rng.IntN(300)
		}
		ops = append(ops, o)
	}
	return ops
}

// TestWriterExactStreamUnderPartialWrites: whatever the descriptor accepts
// per call, and however often it fails with EINTR or EAGAIN, the byte stream
// is exactly what was written, in order.
func TestWriterExactStreamUnderPartialWrites(t *testing.T) {
	seeds := uint64(40)
	if raceEnabled || testing.Short() {
		seeds = 8
	}
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(seed, 1))
		ops := randomOps(rng, 300)
		threshold := []int{0, 1, 4096, 70000}[seed%4]
		for _, blocking := range []bool{true, false} {
			t.Run(fmt.Sprintf("seed%d/blocking=%v", seed, blocking), func(t *testing.T) {
				runModel(t, seed, blocking, true, 20, threshold, ops)
			})
		}
	}
}

// TestWriterTurnIsOneWritev: a turn of 64 small writes with a shared frame
// in the middle is one system call with three iovecs (the copied writes on
// either side of the frame each share one).
func TestWriterTurnIsOneWritev(t *testing.T) {
	fd := newFakeFD(1, false, 0)
	w := newFakeWriter(fd, true, nil)
	frame := bytes.Repeat([]byte{0xab}, 16<<10)
	msg := bytes.Repeat([]byte{'x'}, 64)
	w.Cork()
	for i := range 64 {
		if i == 32 {
			mustWrite(t, w.WriteShared, frame)
		}
		mustWrite(t, w.Write, msg)
	}
	if fd.calls != 0 {
		t.Fatalf("%d system calls inside the turn, want 0", fd.calls)
	}
	if err := w.Uncork(); err != nil {
		t.Fatal(err)
	}
	if fd.calls != 1 || fd.maxIov != 3 {
		t.Fatalf("turn took %d calls with up to %d iovecs, want 1 call with 3", fd.calls, fd.maxIov)
	}
	st := w.Stats()
	if st.Copied != 64*64 || st.Referenced != 16<<10 || st.Written != 64*64+16<<10 || st.Syscalls != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestWriterIOVMax: more than IOV_MAX (1024) segments go out in as few
// writev calls as the limit allows, none with more than 1024 iovecs.
func TestWriterIOVMax(t *testing.T) {
	fd := newFakeFD(1, false, 0)
	w := newFakeWriter(fd, true, &Options{FlushThreshold: 1 << 30})
	frame := bytes.Repeat([]byte{7}, copySharedBelow)
	const frames = 2*iovMax + 100
	w.Cork()
	for range frames {
		mustWrite(t, w.WriteShared, frame)
	}
	if err := w.Uncork(); err != nil {
		t.Fatal(err)
	}
	if fd.calls != 3 || fd.maxIov != iovMax {
		t.Fatalf("%d segments took %d calls, largest %d iovecs; want 3 calls of at most %d", frames, fd.calls, fd.maxIov, iovMax)
	}
	if len(fd.out) != frames*len(frame) {
		t.Fatalf("sent %d bytes, want %d", len(fd.out), frames*len(frame))
	}
}

// TestWriterFlushThreshold: a turn flushes on its own once it holds
// FlushThreshold bytes, so it cannot buffer without bound.
func TestWriterFlushThreshold(t *testing.T) {
	fd := newFakeFD(1, false, 0)
	w := newFakeWriter(fd, true, &Options{FlushThreshold: 1000})
	w.Cork()
	for range 9 {
		mustWrite(t, w.Write, make([]byte, 100))
	}
	if fd.calls != 0 {
		t.Fatalf("flushed below the threshold")
	}
	mustWrite(t, w.Write, make([]byte, 100))
	if fd.calls != 1 || w.Buffered() != 0 {
		t.Fatalf("at the threshold: %d calls, %d buffered", fd.calls, w.Buffered())
	}
}

// TestNewFDLargeWriteIsCopied: a Writer from NewFD never waits, so it
// cannot hand the caller's slice back only once it has left: a Write at the
// threshold is copied like any other, as Options.FlushThreshold says.
func TestNewFDLargeWriteIsCopied(t *testing.T) {
	fd := newFakeFD(1, false, 0)
	w := newFakeWriter(fd, false, &Options{FlushThreshold: 64 << 10})
	big := bytes.Repeat([]byte{1}, 100<<10)
	mustWrite(t, w.Write, big)
	if st := w.Stats(); st.Copied != 100<<10 || st.Referenced != 0 {
		t.Fatalf("stats %+v: want the write copied", st)
	}
}

// TestWriterLargeWriteIsNotCopied: a Write as large as the flush threshold
// leaves with the pending bytes in one writev, straight from the caller's
// slice.
func TestWriterLargeWriteIsNotCopied(t *testing.T) {
	fd := newFakeFD(1, false, 0)
	w := newFakeWriter(fd, true, &Options{FlushThreshold: 64 << 10})
	w.Cork()
	mustWrite(t, w.Write, []byte("head"))
	big := bytes.Repeat([]byte{1}, 100<<10)
	mustWrite(t, w.Write, big)
	if fd.calls != 1 || fd.maxIov != 2 {
		t.Fatalf("%d calls, %d iovecs; want 1 call with 2", fd.calls, fd.maxIov)
	}
	if st := w.Stats(); st.Copied != 4 || st.Referenced != 100<<10 {
		t.Fatalf("stats %+v", st)
	}
}

// TestWriterCorkNests: only the outermost Uncork flushes.
func TestWriterCorkNests(t *testing.T) {
	fd := newFakeFD(1, false, 0)
	w := newFakeWriter(fd, true, nil)
	w.Cork()
	w.Cork()
	mustWrite(t, w.Write, []byte("a"))
	if err := w.Uncork(); err != nil || fd.calls != 0 {
		t.Fatalf("inner Uncork: %v, %d calls", err, fd.calls)
	}
	mustWrite(t, w.Write, []byte("b"))
	if err := w.Uncork(); err != nil || fd.calls != 1 || string(fd.out) != "ab" {
		t.Fatalf("outer Uncork: %v, %d calls, %q", err, fd.calls, fd.out)
	}
	// Outside a turn each write leaves at once.
	mustWrite(t, w.Write, []byte("c"))
	if fd.calls != 2 || string(fd.out) != "abc" {
		t.Fatalf("uncorked write: %d calls, %q", fd.calls, fd.out)
	}
	// An unmatched Uncork is a flush, not a panic.
	if err := w.Uncork(); err != nil {
		t.Fatal(err)
	}
}

// TestWriterErrorIsSticky: a failed writev breaks the Writer; the error
// carries the errno, and pending buffers are released.
func TestWriterErrorIsSticky(t *testing.T) {
	fd := newFakeFD(1, false, 0)
	fd.fail = syscall.EPIPE
	w := newFakeWriter(fd, true, nil)
	w.Cork()
	mustWrite(t, w.WriteShared, make([]byte, 4096))
	err := w.Uncork()
	var se *os.SyscallError
	if !errors.Is(err, syscall.EPIPE) || !errors.As(err, &se) || se.Syscall != "writev" {
		t.Fatalf("Uncork: %v, want writev: EPIPE", err)
	}
	if w.Buffered() != 0 || w.b != nil {
		t.Fatal("pending bytes kept after a write error")
	}
	if _, err2 := w.Write([]byte("x")); err2 != err {
		t.Fatalf("Write after failure: %v", err2)
	}
	if w.Flush() != err || w.Err() != err {
		t.Fatal("Flush/Err after failure do not return the first error")
	}
}

// TestWriterNonBlockingKeepsTheRest: on a descriptor that takes nothing, a
// Writer from NewFD returns ErrWouldBlock and keeps every byte.
func TestWriterNonBlockingKeepsTheRest(t *testing.T) {
	fd := newFakeFD(1, false, 0)
	fd.fail = syscall.EAGAIN
	w := newFakeWriter(fd, false, nil)
	if _, err := w.Write([]byte("hello")); err != nil {
		t.Fatalf("Write on a full socket: %v, want the bytes kept", err)
	}
	if err := w.Flush(); err != ErrWouldBlock || w.Buffered() != 5 {
		t.Fatalf("Flush: %v with %d buffered", err, w.Buffered())
	}
	fd.fail = 0
	if err := w.Flush(); err != nil || string(fd.out) != "hello" {
		t.Fatalf("Flush when writable: %v, %q", err, fd.out)
	}
}

// TestWriterDiscard drops what is pending and keeps the Writer usable.
func TestWriterDiscard(t *testing.T) {
	fd := newFakeFD(1, false, 0)
	w := newFakeWriter(fd, true, nil)
	w.Cork()
	mustWrite(t, w.Write, []byte("dropped"))
	if n := w.Discard(); n != 7 || w.b != nil {
		t.Fatalf("Discard = %d", n)
	}
	mustWrite(t, w.Write, []byte("kept"))
	if err := w.Uncork(); err != nil || string(fd.out) != "kept" {
		t.Fatalf("%v %q", err, fd.out)
	}
}

// TestWriterAllocations: a turn of copied and shared writes allocates
// nothing once the pools are warm.
func TestWriterAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	fd := newFakeFD(1, false, 0)
	w := newFakeWriter(fd, true, nil)
	msg := make([]byte, 64)
	frame := make([]byte, 16<<10)
	turn := func() {
		w.Cork()
		for range 64 {
			w.Write(msg)
		}
		w.WriteShared(frame)
		w.Uncork()
		fd.out = fd.out[:0]
	}
	turn()
	if a := testing.AllocsPerRun(100, turn); a > 0 {
		t.Fatalf("a turn allocates %v times", a)
	}
}
