package compat

// earned is the refill of a token bucket that earns rate tokens a second:
// what it earned from *last, the time (monoNow) of its last refill, to
// now, with *last moved to now. The bucket adds it and caps what it holds
// itself: emitBudget keeps what it owes, inflateBudget what it holds.
//
// A now not after *last earns nothing and leaves *last where it is.
// monoNow does not go back, but a caller may read it before it locks the
// bucket (inflateBudget's charge, empty and wait), so that of two
// goroutines the one with the later reading may refill first; the other's
// earlier now must then neither earn again what was earned nor move the
// clock back, for the next refill to earn it twice.
func earned(last *int64, now int64, rate float64) float64 {
	if now <= *last {
		return 0
	}
	e := float64(now-*last) * rate / 1e9
	*last = now
	return e
}
