// Package scheduler arms and cancels deadlines in O(1) without allocating,
// using one runtime timer per scheduler instead of one per deadline.
//
// A client with 1,024 calls in flight, each with a timeout, or a server
// with 100,000 connections, each with an idle deadline and a ping
// schedule, would otherwise own one runtime timer and one closure per
// deadline. A Scheduler groups deadlines into buckets of a set granularity
// (DefaultGranularity is 1 ms; idle timeouts want time.Second), keeps its
// one timer armed for the earliest non-empty bucket, and hands every value
// of a bucket to one callback in one batch.
//
// # Values, not closures
//
// A Scheduler[T] is made with one callback, func(batch []T), and Arm takes
// a value of type T: a connection pointer, a call id. A closure per
// deadline would allocate on every Arm; a value does not. Arm, Cancel and
// Reset take the scheduler's mutex for a few list operations, and Arm
// allocates only when the scheduler grows past its peak of pending
// deadlines (one page of 1,024 slots at a time).
//
// # Handles
//
// Arm returns a Handle: a slot index and the slot's generation. Slots are
// reused; a handle whose deadline has fired or been cancelled is stale and
// Cancel or Reset with it does nothing and reports false, like
// time.Timer.Stop.
//
// # When a deadline fires
//
// Buckets start on a grid: the scheduler's creation time plus multiples of
// the granularity. A deadline fires at the first grid line at or after it,
// so it is never early and at most one granularity late (plus the
// runtime's timer latency under load). Firing at the start of the bucket a
// deadline falls in, as a plain grid sweep would, would be early. Far
// deadlines (hours) sit in a hierarchical wheel of 64-bucket levels and
// move down a level at a time, at most a few O(1) moves each.
//
// # The callback
//
// The callback runs on the goroutine of the scheduler's runtime timer, one
// batch at a time, never concurrently with itself. It must not block: every
// other deadline of the scheduler waits for it. It may call Arm, Cancel,
// Reset and Stop. The batch slice is reused after it returns.
//
// # Costs
//
// Measured in the committed benchmark run (see the README): 32 bytes per
// pending deadline against 112 for a *time.Timer; arm plus cancel without
// allocation for an eighth to a tenth of the CPU of time.AfterFunc plus
// Stop; and one wake-up per non-empty bucket, which at 1 ms granularity is
// most of the CPU a deadline costs, so pick the coarsest granularity the
// use allows: 1 s for idle timeouts and pings, 1-10 ms for call timeouts.
//
// ArmAfter and ResetAfter read the monotonic clock on every call; where a
// clock read is expensive, Arm and Reset with a deadline computed from a
// time the caller already holds (one read per turn) are cheaper.
//
// # Testing
//
// WithClock(NewFakeClock(start)) replaces the system clock: time moves only in
// FakeClock.Advance, and batches are delivered synchronously inside it, so
// timing tests are exact and never sleep.
//
// The package has no dependency beyond the standard library.
package scheduler
