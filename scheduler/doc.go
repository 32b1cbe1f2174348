// Package scheduler arms and cancels deadlines in O(1) without allocating,
// using one runtime timer per scheduler instead of one per deadline.
//
// Deadlines are grouped into buckets of a set granularity; the scheduler
// keeps a single timer for the earliest non-empty bucket and fires every
// deadline of a bucket in one batch. Handles are a slot index and a
// generation, so cancelling a fired or stale handle is a harmless no-op.
// A deadline fires exactly once, never before its time, and at most one
// bucket late under normal load.
//
// Pick scheduler for call timeouts, idle deadlines and ping schedules when
// there are thousands of them. It has no dependency beyond the standard
// library.
package scheduler
