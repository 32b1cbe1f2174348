package compat

import (
	"sync"
	"sync/atomic"
	"time"
)

// inflateBudget bounds how many bytes one connection inflates per second
// (Limits.MaxInflateRate), its permessage-deflate messages and dictionary
// packets together, on a server's Peer and on a Go client's connection
// alike: a token bucket of rate bytes a second holding at most
// burst (MaxMessageSize, so that one message of the largest size always
// passes at once).
//
// Why: inflating is bounded in memory by MaxMessageSize, not in CPU.
// Zeros compressed at level 9 inflate about 1000 times over, at some 5-6
// MB/s of received bytes per core, whatever the message size
// (deflatecache's BenchmarkInflateBomb): a client sending such frames at
// 5 MB/s kept a core inflating, and a server (an untrusted one, or one
// taken over) could do the same to a Go client's program. Charged for
// what came out, a connection over its rate has its reading paused
// before it inflates again (the carrier's flow control pushes back on
// the sender; nothing is lost), and its compressed datagrams are
// dropped meanwhile.
//
// Made at a connection's first compressed message (loadInflateBudget): a
// connection that never compresses pays nothing. The mutex is there
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

// maxInflatePause bounds one pause of the read loop. NewServer and Dial
// refuse a rate below MaxMessageSize a second, so a message alone never
// needs longer; a datagram that took the bucket below zero just before
// may add to a deficit, which the next messages then pay.
const maxInflatePause = time.Second

func newInflateBudget(rate, burst int64, now int64) *inflateBudget {
	return &inflateBudget{rate: float64(rate), burst: float64(burst), tokens: float64(burst), last: now}
}

// refill adds what the rate earned since the last refill (b.mu held).
func (b *inflateBudget) refill(now int64) {
	b.tokens = min(b.burst, b.tokens+earned(&b.last, now, b.rate))
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

// inflatePacer is a connection whose reading an inflateBudget paces: a
// server's Peer or a client's connection (clientConn). Both pause alike
// (paceInflate); they differ in what ends a pause early and in what
// counts one.
type inflatePacer interface {
	// pauseOver reports whether the reading should not pause, or pause
	// no longer: the connection is closing, or, on a client, the caller
	// reading for its own answer has it (sharedread.go). Whatever makes
	// it true wakes the pause afterwards (wakePause); the pause looks at
	// it after beginPause, so one of the two sees the other.
	pauseOver() bool
	// throttled counts a pause (Metrics.InflateThrottled on a server).
	throttled()
	// endPauses ends the pause under way, if any, and those the reading
	// would begin later: the connection closes, or has ended.
	endPauses()
}

// loadInflateBudget returns the budget *p holds, made with lim at the
// first call, a connection's first compressed message; nil when lim
// turns the limit off.
func loadInflateBudget(p *atomic.Pointer[inflateBudget], lim *Limits) *inflateBudget {
	if b := p.Load(); b != nil {
		return b
	}
	if lim.MaxInflateRate < 0 {
		return nil
	}
	// Both the read loop and the datagram handler may get here first.
	p.CompareAndSwap(nil, newInflateBudget(lim.MaxInflateRate, lim.MaxMessageSize, monoNow()))
	return p.Load()
}

// paceInflate is called on r's read loop, l's, before it inflates a
// message: while b is spent it pauses the reading until the budget is
// back, which holds the sender back through the carrier's flow control.
// The pause comes before the next inflating, not after the one that
// spent the budget: a call read after a bomb is answered at once, and a
// turn that inflates nothing more does not wait. A nil b sets no limit.
func paceInflate(b *inflateBudget, r inflatePacer, l link) {
	if b == nil {
		return
	}
	if d := b.wait(monoNow()); d > 0 {
		b.pauseReading(r, l, d)
	}
}

// pauseReading holds r's read loop, in its turn, for d or until
// r.pauseOver. The turn's answers so far leave first (link.pauseTurn):
// held for the turn's end, they waited out the pause. A timer, not
// time.Sleep, so that a connection closed or dropped meanwhile (on a
// server Peer.Close, Shutdown, a slow consumer; on a client Close)
// ends at once, not up to maxInflatePause later, past
// Shutdown's shutdownDropGrace. The link ends it too (link.pauseTurn):
// when it is closed or dropped off the read loop (a violation in a
// datagram or a stream, a write that failed), and when its carrier
// connection ends (the other end closed it, or it died: seen on QUIC,
// WebTransport, SCTP and WebRTC; over TCP when the other end's FIN or
// reset arrives, on Linux, and elsewhere only at the next read). A
// wake-up that finds pauseOver false (a client's caller woken for a
// call settled after it had handed the reading on) leaves the pause to
// run its time.
//
// The keepalive (both ends' liveness.check) gives nothing up while the
// pause lasts, and its idle clock restarts where the pause ends
// (liveness.resume): the silence is this end's, holding back, with what
// the other end sent, its answers to pings among it, waiting to be
// read. Without, a pause longer than IdleTimeout - KeepaliveInterval
// had the server give up a live client, and the client its server,
// when a ping went out during it (TestInflatePauseIsNotTheClientsSilence,
// TestClientInflatePauseIsNotTheServersSilence); and a turn of many
// bombs, each paused for, had the connection given up as idle while
// the other end was sending plenty.
func (b *inflateBudget) pauseReading(r inflatePacer, l link, d time.Duration) {
	wake := b.beginPause()
	defer b.endPause()
	if r.pauseOver() {
		return
	}
	r.throttled()
	live := l.liveness()
	live.pause()
	defer live.resume()
	l.pauseTurn(r.endPauses, func(ended <-chan struct{}) {
		hooks := testHookInflatePause.Load()
		if hooks != nil {
			hooks.began(r)
		}
		t := time.NewTimer(d)
		defer t.Stop()
		timedOut := false
	wait:
		for {
			select {
			case <-t.C:
				timedOut = true
				break wait
			case <-ended:
				// Nothing more to read: no more pauses either.
				r.endPauses()
				break wait
			case <-wake:
				wake = b.beginPause()
				if r.pauseOver() {
					break wait
				}
			}
		}
		if hooks != nil {
			hooks.ended(r, timedOut)
		}
	})
}

// inflatePauseHooks are run by a read loop, when testHookInflatePause is
// set: began as an inflate pause begins, once the turn's answers so far
// are on their way, and ended as it ends, with whether its time ran out
// (false: pauseOver cut it short). r is the *Peer or *clientConn.
type inflatePauseHooks struct {
	began func(r inflatePacer)
	ended func(r inflatePacer, timedOut bool)
}

var testHookInflatePause atomic.Pointer[inflatePauseHooks]
