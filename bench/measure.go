package main

import (
	"math/bits"
	"runtime"
	"time"
)

// allocCounter reads the process's cumulative allocation counters. It uses
// runtime.ReadMemStats, which stops the world for a moment, so it is read
// only at the edges of a trial, never inside the measured loop.
type allocCounter struct{ objects, bytes uint64 }

func readAllocs() allocCounter {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return allocCounter{objects: ms.Mallocs, bytes: ms.TotalAlloc}
}

// loopResult is one timed run of an in-process operation.
type loopResult struct {
	N           int
	NsPerOp     float64
	AllocsPerOp float64
	BytesPerOp  float64
}

// measureLoop times op(n) the way testing.B does: it grows n until one
// call lasts at least target, then reports the last call per operation.
// n never exceeds maxN, so a trial stays bounded even when op is a no-op
// by mistake. The heap is collected first, so garbage left by the
// previous row is not charged to this one.
func measureLoop(target time.Duration, maxN int, op func(n int) error) (loopResult, error) {
	n := 1
	for {
		runtime.GC()
		a0 := readAllocs()
		start := time.Now()
		if err := op(n); err != nil {
			return loopResult{}, err
		}
		elapsed := time.Since(start)
		a1 := readAllocs()
		if elapsed >= target || n >= maxN {
			return loopResult{
				N:           n,
				NsPerOp:     float64(elapsed.Nanoseconds()) / float64(n),
				AllocsPerOp: float64(a1.objects-a0.objects) / float64(n),
				BytesPerOp:  float64(a1.bytes-a0.bytes) / float64(n),
			}, nil
		}
		n = nextN(n, elapsed, target, maxN)
	}
}

// nextN predicts how many iterations reach target from one that took
// elapsed, with 20% headroom, growing at least 2× and at most 100× per
// step like testing.B.
func nextN(n int, elapsed, target time.Duration, maxN int) int {
	next := 100 * n
	if ns := elapsed.Nanoseconds(); ns > 0 {
		next = int(float64(n) * 1.2 * float64(target.Nanoseconds()) / float64(ns))
	}
	next = max(next, 2*n)
	next = min(next, 100*n, maxN)
	return next
}

// latencyHist is a log-linear histogram of durations: 16 buckets per
// power of two, so any quantile is within about 3% of the true value
// (half a bucket). It has a fixed size and adding allocates nothing, so
// recording every round trip costs the client the same tiny amount
// whichever server it drives.
type latencyHist struct {
	counts [histBuckets]uint64
	n      uint64
}

const (
	histSubBits = 4
	histSub     = 1 << histSubBits
	histBuckets = histSub + (64-histSubBits)*histSub
)

func histIndex(ns uint64) int {
	if ns < histSub {
		return int(ns)
	}
	msb := bits.Len64(ns) - 1 // >= histSubBits
	mant := (ns >> (msb - histSubBits)) & (histSub - 1)
	return histSub + (msb-histSubBits)*histSub + int(mant)
}

// histBounds returns the smallest value of bucket i and the smallest value
// of the next bucket.
func histBounds(i int) (lo, hi uint64) {
	if i < histSub {
		return uint64(i), uint64(i) + 1
	}
	shift := (i - histSub) / histSub
	mant := uint64((i - histSub) % histSub)
	lo = (histSub + mant) << shift
	hi = (histSub + mant + 1) << shift
	return lo, hi
}

func (h *latencyHist) add(d time.Duration) {
	ns := uint64(max(d, 0))
	h.counts[histIndex(ns)]++
	h.n++
}

func (h *latencyHist) reset() { *h = latencyHist{} }

// quantile returns the middle of the bucket holding the q-th fraction of
// the recorded durations (0 when nothing was recorded).
func (h *latencyHist) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q * float64(h.n))
	if rank >= h.n {
		rank = h.n - 1
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen > rank {
			lo, hi := histBounds(i)
			return time.Duration((lo + hi) / 2)
		}
	}
	return 0
}
