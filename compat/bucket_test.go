package compat

import (
	"testing"
	"time"
)

// earned, the refill that emitBudget and inflateBudget share: time earns
// at the rate, from the last refill on, and an hour earns an hour's worth
// (each bucket caps it: TestEmitBudgetArithmetic and
// TestInflateBudgetArithmetic). A now not after the last refill, as when
// two goroutines read the clock and lock the bucket in opposite orders,
// earns nothing, and leaves the clock where it is, so that the next
// refill does not earn the same time twice.
func TestBucketEarned(t *testing.T) {
	const rate = 1000 // tokens a second
	sec := int64(time.Second)
	var last int64
	step := func(now int64, want float64, wantLast int64) {
		t.Helper()
		if got := earned(&last, now, rate); got != want || last != wantLast {
			t.Fatalf("earned at %v: %v, last %v; want %v, last %v", time.Duration(now), got, time.Duration(last), want, time.Duration(wantLast))
		}
	}
	step(0, 0, 0)             // a new bucket's first refill at its own time
	step(sec/10, 100, sec/10) // a tenth of a second: a tenth of the rate
	step(sec/10, 0, sec/10)   // the same now again: nothing more
	step(sec/20, 0, sec/10)   // an earlier now: nothing, and the clock stays
	step(sec/5, 100, sec/5)   // from the latest refill, not the earlier now
	step(3600*sec+sec/5, 3600*rate, 3600*sec+sec/5)
}
