package scheduler

import (
	"sync"
	"time"
)

// Clock is the source of time and the one runtime timer of a scheduler.
// The default is the system clock (time.Now and time.AfterFunc); tests pass
// a FakeClock so that time moves only when they say so.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc calls f on a goroutine of the clock's choosing once d has
	// elapsed, like time.AfterFunc.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is the timer returned by Clock.AfterFunc. *time.Timer implements it.
type Timer interface {
	// Stop prevents the timer from firing; it reports whether it was armed.
	Stop() bool
	// Reset rearms the timer to fire after d; it reports whether it was
	// armed.
	Reset(d time.Duration) bool
}

// systemClock is the real clock: monotonic time.Now and runtime timers.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) AfterFunc(d time.Duration, f func()) Timer {
	return time.AfterFunc(d, f)
}

// FakeClock is a Clock whose time moves only when Advance is called. Its
// timers fire inside Advance, on the goroutine that calls it, in the order
// of their due times, with Now set to each timer's due time while its
// function runs. A scheduler on a FakeClock therefore delivers its batches
// synchronously inside Advance, which makes timing tests exact and free of
// sleeps.
//
// A FakeClock is safe for concurrent use. Advance calls are serialized; a
// timer function must not call Advance.
type FakeClock struct {
	advancing sync.Mutex // held for a whole Advance

	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer // armed timers, in no particular order
}

// NewFakeClock returns a FakeClock that reads start until it is advanced.
func NewFakeClock(start time.Time) *FakeClock {
	return &FakeClock{now: start}
}

// Now returns the clock's current time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc arms a timer that calls f inside the Advance that moves the
// clock to or past Now()+d. A timer armed with d <= 0 fires in the next
// Advance, even Advance(0).
func (c *FakeClock) AfterFunc(d time.Duration, f func()) Timer {
	t := &fakeTimer{clock: c, f: f}
	t.Reset(d)
	return t
}

// Advance moves the clock forward by d, firing every timer that falls due on
// the way, in order of due time. A timer armed by a timer function fires in
// the same Advance if it is due by the end of it.
func (c *FakeClock) Advance(d time.Duration) {
	c.advancing.Lock()
	defer c.advancing.Unlock()
	c.mu.Lock()
	target := c.now
	if d > 0 {
		target = c.now.Add(d)
	}
	c.mu.Unlock()
	for {
		c.mu.Lock()
		next := -1
		for i, t := range c.timers {
			if !t.when.After(target) && (next < 0 || t.when.Before(c.timers[next].when)) {
				next = i
			}
		}
		if next < 0 {
			c.now = target
			c.mu.Unlock()
			return
		}
		t := c.timers[next]
		c.removeLocked(next)
		if t.when.After(c.now) {
			c.now = t.when
		}
		c.mu.Unlock()
		t.f()
	}
}

func (c *FakeClock) removeLocked(i int) {
	c.timers[i].armed = false
	last := len(c.timers) - 1
	c.timers[i] = c.timers[last]
	c.timers[last] = nil
	c.timers = c.timers[:last]
}

type fakeTimer struct {
	clock *FakeClock
	f     func()
	when  time.Time
	armed bool
}

func (t *fakeTimer) Stop() bool {
	c := t.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	if !t.armed {
		return false
	}
	for i, u := range c.timers {
		if u == t {
			c.removeLocked(i)
			break
		}
	}
	return true
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	c := t.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	t.when = c.now
	if d > 0 {
		t.when = c.now.Add(d)
	}
	was := t.armed
	if !was {
		t.armed = true
		c.timers = append(c.timers, t)
	}
	return was
}
