package segmentqueue

import (
	"runtime"
	"slices"
	"testing"
	"time"
)

// shapeRatio returns how much longer reassemble takes on 16× the segments
// (and bytes) than on n segments of segSize bytes. Each side is the fastest
// of reps interleaved runs, so a burst of load from other processes cannot
// inflate one side only; with collect set, each run starts after a GC so
// that one side's garbage is not collected during the other. While the
// ratio is not below limit it measures again, up to attempts times, and
// returns the smallest: a linear reassembly measures about 16 on an idle
// machine, a quadratic one hundreds, so a retry cannot turn the second into
// a pass.
func shapeRatio(segSize, n, reps, attempts int, collect bool, limit float64, reassemble func(segs [][]byte, size int)) (best float64) {
	small := makeSegments(segSize*n, segSize)
	big := makeSegments(16*segSize*n, segSize)
	best = 1e9
	for range attempts {
		var tSmall, tBig time.Duration = 1 << 62, 1 << 62
		for range reps {
			if collect {
				runtime.GC()
			}
			start := time.Now()
			reassemble(small, segSize*n)
			tSmall = min(tSmall, time.Since(start))
			if collect {
				runtime.GC()
			}
			start = time.Now()
			reassemble(big, 16*segSize*n)
			tBig = min(tBig, time.Since(start))
		}
		best = min(best, float64(tBig)/float64(tSmall))
		if best < limit {
			break
		}
	}
	return best
}

// TestReassemblyIsLinear checks the complexity shape, not a time: pushing
// 16× the segments and bytes and taking them back as one message costs
// less than 32× the time (measured: 15-16×, and 12-20× under -race).
// Segments are 16 bytes so that the per-segment work dominates and both
// sizes stay in cache, even with the race detector's shadow memory; that
// is where a quadratic step (rescanning the ring, copying it on every push)
// would show.
func TestReassemblyIsLinear(t *testing.T) {
	const segSize, n, limit = 16, 256, 32
	q := New(Limits{MaxSegments: 16 * n})
	ratio := shapeRatio(segSize, n, 25, 5, false, limit, func(segs [][]byte, size int) {
		if err := reassembleQueue(q, segs, size); err != nil {
			t.Fatal(err)
		}
	})
	if ratio >= limit {
		t.Fatalf("16× the segments took %.1f× the time; linear reassembly stays under %d×", ratio, limit)
	}
	t.Logf("16× the segments took %.1f× the time", ratio)
}

// TestShapeCheckCatchesQuadratic runs the same measurement on naive
// re-concatenation, at a smaller size and with one attempt (the quadratic
// pattern is slow), to show that the check above can fail: it comes out
// far above the limit (measured: several hundred times).
func TestShapeCheckCatchesQuadratic(t *testing.T) {
	const segSize, n, limit = 16, 64, 32
	ratio := shapeRatio(segSize, n, 3, 1, true, limit, func(segs [][]byte, size int) {
		var msg []byte
		for _, s := range segs {
			msg = slices.Concat(msg, s)
		}
		sinkByte ^= msg[size-1]
	})
	if ratio < limit {
		t.Fatalf("re-concatenation measured %.1f×, the shape check would not catch it", ratio)
	}
	t.Logf("re-concatenation: 16× the segments took %.1f× the time", ratio)
}
