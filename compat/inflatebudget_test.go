package compat

import (
	"testing"
	"time"
)

// The bucket's arithmetic on a fake clock: a burst passes at once, a
// deficit costs the next inflating its time at the rate, refills stop
// at the burst, and a pause never exceeds maxInflatePause.
func TestInflateBudgetArithmetic(t *testing.T) {
	const rate, burst = 1 << 20, 256 << 10 // 1 MiB/s, 256 KiB
	sec := int64(time.Second)
	b := newInflateBudget(rate, burst, 0)
	// charge takes n bytes at now and returns the pause the next
	// inflating then waits for.
	charge := func(n int, now int64) time.Duration {
		b.charge(n, now)
		return b.wait(now)
	}
	if d := charge(burst, 0); d != 0 {
		t.Fatalf("the burst paused %v", d)
	}
	if !b.empty(0) {
		t.Fatal("the budget is not empty after its burst")
	}
	// 256 KiB more at once: a quarter of a second's deficit.
	if d := charge(256<<10, 0); d < 250*time.Millisecond-time.Millisecond || d > 250*time.Millisecond+time.Millisecond {
		t.Fatalf("a deficit of a quarter second paused %v", d)
	}
	// A quarter second later the deficit is paid: a byte more owes 1 µs.
	if d := charge(1, sec/4); d <= 0 || d > 2*time.Microsecond {
		t.Fatalf("a byte over an empty budget paused %v", d)
	}
	// An hour later the budget holds its burst, not an hour's bytes.
	if d := charge(burst, 3600*sec); d != 0 {
		t.Fatalf("a burst after an hour paused %v", d)
	}
	if d := charge(1, 3600*sec); d <= 0 {
		t.Fatal("the refill went past the burst")
	}
	// A deficit of 4 s worth (a datagram, then messages) pauses 1 s at
	// most; the rest is owed by the next.
	if d := charge(4*rate, 3600*sec); d != maxInflatePause {
		t.Fatalf("a 4 s deficit paused %v, want %v", d, maxInflatePause)
	}
	if !b.empty(3601 * sec) {
		t.Fatal("a second repaid a 4 s deficit")
	}
	if b.empty(3605*sec + 1) {
		t.Fatal("the deficit was not repaid after 4 s")
	}
	// The clock going back (it does not, monoNow is monotonic) adds nothing.
	if d := charge(0, 0); d != 0 || b.tokens > burst {
		t.Fatalf("an earlier now: pause %v, tokens %v", d, b.tokens)
	}
}
