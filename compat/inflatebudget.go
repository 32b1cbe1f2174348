package compat

import (
	"sync"
	"time"
)

// inflateBudget bounds how many bytes one connection inflates per second
// (Limits.MaxInflateRate), its permessage-deflate messages and dictionary
// packets together: a token bucket of rate bytes a second holding at most
// burst (MaxMessageSize, so that one message of the largest size always
// passes at once).
//
// Why: inflating is bounded in memory by MaxMessageSize, not in CPU.
// Zeros compressed at level 9 inflate about 1000 times over, at some 5-6
// MB/s of received bytes per core, whatever the message size
// (deflatecache's BenchmarkInflateBomb): a client sending such frames at
// 5 MB/s kept a core inflating. Charged for what came out, a connection
// over its rate has its reading paused before it inflates again (the
// carrier's flow control pushes back on the sender; nothing is lost),
// and its compressed datagrams are dropped meanwhile.
//
// Made at a connection's first compressed message (Peer.inflateBudget):
// a connection that never compresses pays nothing. The mutex is there
// because datagrams are handled off the read loop, and because a close
// asked for on another goroutine ends the read loop's pause (wakePause).
type inflateBudget struct {
	mu     sync.Mutex
	rate   float64 // bytes a second
	burst  float64
	tokens float64 // below zero after a message larger than what was left
	last   int64   // monoNow of the last refill
	// wake is closed to end the read loop's pause early; nil while the
	// loop is not paused. A channel per pause: pauses are rare.
	wake chan struct{}
}

// maxInflatePause bounds one pause of the read loop. NewServer refuses a
// rate below MaxMessageSize a second, so a message alone never needs
// longer; a datagram that took the bucket below zero just before may add
// to a deficit, which the next messages then pay.
const maxInflatePause = time.Second

func newInflateBudget(rate, burst int64, now int64) *inflateBudget {
	return &inflateBudget{rate: float64(rate), burst: float64(burst), tokens: float64(burst), last: now}
}

// refill adds what the rate earned since the last refill (b.mu held).
func (b *inflateBudget) refill(now int64) {
	if now > b.last {
		b.tokens = min(b.burst, b.tokens+float64(now-b.last)*b.rate/1e9)
		b.last = now
	}
}

// charge takes n inflated bytes at now (monoNow).
func (b *inflateBudget) charge(n int, now int64) {
	b.mu.Lock()
	b.refill(now)
	b.tokens -= float64(n)
	b.mu.Unlock()
}

// wait returns how long the read loop should pause, at now, before it
// inflates again, for the bucket to be back at zero: 0 while it is not
// below, at most maxInflatePause.
func (b *inflateBudget) wait(now int64) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	if b.tokens >= 0 {
		return 0
	}
	return min(time.Duration(-b.tokens/b.rate*1e9)+1, maxInflatePause)
}

// empty reports whether nothing is left to inflate at now: a compressed
// datagram is then dropped before it is inflated.
func (b *inflateBudget) empty(now int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	return b.tokens <= 0
}

// beginPause returns the channel that wakePause closes to end the pause
// the read loop is about to begin.
func (b *inflateBudget) beginPause() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.wake = make(chan struct{})
	return b.wake
}

// endPause marks the read loop's pause over.
func (b *inflateBudget) endPause() {
	b.mu.Lock()
	b.wake = nil
	b.mu.Unlock()
}

// wakePause ends the read loop's pause, if it is paused.
func (b *inflateBudget) wakePause() {
	b.mu.Lock()
	if b.wake != nil {
		close(b.wake)
		b.wake = nil
	}
	b.mu.Unlock()
}
