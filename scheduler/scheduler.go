package scheduler

import (
	"math"
	"sync"
	"time"
)

// DefaultGranularity is the bucket width when none is given: fine enough
// for call timeouts. Idle timeouts and ping schedules are better served by
// time.Second.
const DefaultGranularity = time.Millisecond

// maxKeptBatch bounds the batch buffer a scheduler keeps between firings;
// a larger batch is delivered from a buffer that is then dropped.
const maxKeptBatch = 4096

// noTick marks the runtime timer as not armed.
const noTick = math.MaxUint64

// Handle names one armed deadline: a slot index in the low 32 bits and the
// slot's generation in the high 32 bits. Slots are reused, and a handle
// whose deadline has fired or been cancelled no longer matches its slot's
// generation, so Cancel or Reset with it is a no-op. The zero Handle is
// never returned by a successful Arm.
//
// A generation is 32 bits: a handle kept across 2^32 reuses of its slot
// could match again. At 10 million arms per second on one slot that is
// seven minutes; do not keep handles of fired deadlines that long.
type Handle uint64

func makeHandle(i, gen uint32) Handle { return Handle(uint64(gen)<<32 | uint64(i)) }

func (h Handle) parts() (i, gen uint32) { return uint32(h), uint32(h >> 32) }

// Option configures a Scheduler.
type Option func(*config)

type config struct {
	granularity time.Duration
	clock       Clock
}

// WithGranularity sets the bucket width. Deadlines within one bucket fire
// together; a deadline fires at most one bucket late. A value <= 0 keeps
// DefaultGranularity.
func WithGranularity(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.granularity = d
		}
	}
}

// WithClock sets the clock, for tests (see FakeClock). A nil clock keeps
// the system clock.
func WithClock(clock Clock) Option {
	return func(c *config) {
		if clock != nil {
			c.clock = clock
		}
	}
}

// Scheduler fires values of type T at their deadlines, in batches, through
// one callback. It is safe for concurrent use by many goroutines.
type Scheduler[T any] struct {
	clock       Clock
	origin      time.Time // time of tick 0
	granularity time.Duration
	system      bool // clock is the system clock

	mu        sync.Mutex
	onFire    func(batch []T) // nil once stopped
	w         wheel[T]
	timer     Timer
	timerTick uint64 // the tick the timer is armed for, or noTick
	firing    bool   // a batch is being collected or delivered
	stopped   bool
	batch     []T // reused between firings
}

// New returns a running Scheduler that calls fire with every batch of values
// whose deadlines have passed.
//
// fire runs on the goroutine of the scheduler's runtime timer (inside
// FakeClock.Advance under a FakeClock), one batch at a time: never
// concurrently with itself. It must not block, since every other deadline
// of the scheduler waits for it. It may call Arm, Cancel, Reset and Stop.
// The batch slice is reused once fire returns and must not be kept; the
// order of values within a batch is unspecified, and batches come in
// deadline order. fire must not be nil: New panics on a nil fire, which
// would otherwise panic later on the timer's goroutine, where no caller
// can recover it.
func New[T any](fire func(batch []T), opts ...Option) *Scheduler[T] {
	if fire == nil {
		panic("scheduler: New with a nil fire func")
	}
	cfg := config{granularity: DefaultGranularity, clock: systemClock{}}
	for _, o := range opts {
		o(&cfg)
	}
	s := &Scheduler[T]{
		onFire:      fire,
		clock:       cfg.clock,
		granularity: cfg.granularity,
		timerTick:   noTick,
	}
	_, s.system = s.clock.(systemClock)
	s.origin = s.clock.Now()
	s.w.init()
	s.timer = s.clock.AfterFunc(math.MaxInt64, s.fire)
	s.timer.Stop()
	return s
}

// Granularity returns the bucket width.
func (s *Scheduler[T]) Granularity() time.Duration { return s.granularity }

// Now returns the current time of the scheduler's clock, to compute
// deadlines from.
func (s *Scheduler[T]) Now() time.Time { return s.clock.Now() }

// Arm schedules v to be delivered to the fire callback once deadline has
// passed: never before it, and at most one granularity after it (plus the
// runtime's timer latency). A deadline in the past fires at once, in the
// next batch. Arm is O(1) and allocates nothing once the scheduler holds
// as many slots as its peak of pending deadlines.
//
// Arm returns the zero Handle, and v never fires, after Stop, or when
// 2^32-1024 deadlines (the most slot indexes can name) are already pending.
func (s *Scheduler[T]) Arm(deadline time.Time, v T) Handle {
	return s.arm(s.fireTick(deadline.Sub(s.origin)), v)
}

// ArmAfter is Arm with the deadline d from now. On the system clock it
// reads only the monotonic clock, which is cheaper than time.Now.
func (s *Scheduler[T]) ArmAfter(d time.Duration, v T) Handle {
	return s.arm(s.fireTick(addSaturating(s.elapsed(), d)), v)
}

func (s *Scheduler[T]) arm(tick uint64, v T) Handle {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return 0
	}
	i := s.w.add(tick, v)
	if i == nilIndex {
		s.mu.Unlock()
		return 0
	}
	h := makeHandle(i, s.w.at(i).gen)
	s.wakeBy(tick)
	s.mu.Unlock()
	return h
}

// Cancel removes the deadline named by h, in O(1). It reports whether the
// deadline was pending: false means it has already fired (or is in a batch
// being delivered), was cancelled, or h is stale or zero, and then Cancel
// does nothing.
func (s *Scheduler[T]) Cancel(h Handle) bool {
	i, gen := h.parts()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped || s.w.lookup(i, gen) == nil {
		return false
	}
	s.w.remove(i)
	return true
}

// Reset moves the pending deadline named by h to deadline, earlier or
// later, in O(1); the handle stays valid. It reports whether the deadline
// was pending; when it was not (fired, cancelled, stale), Reset does
// nothing and the caller should Arm again. Calling Reset on every read to
// push an idle deadline out is the intended use: within one bucket it only
// rewrites a number.
func (s *Scheduler[T]) Reset(h Handle, deadline time.Time) bool {
	return s.reset(h, s.fireTick(deadline.Sub(s.origin)))
}

// ResetAfter is Reset with the deadline d from now, read as in ArmAfter:
// s.ResetAfter(h, idleTimeout) on every read.
func (s *Scheduler[T]) ResetAfter(h Handle, d time.Duration) bool {
	return s.reset(h, s.fireTick(addSaturating(s.elapsed(), d)))
}

func (s *Scheduler[T]) reset(h Handle, tick uint64) bool {
	i, gen := h.parts()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped || s.w.lookup(i, gen) == nil {
		return false
	}
	s.w.move(i, tick)
	s.wakeBy(tick)
	return true
}

// Len returns the number of pending deadlines.
func (s *Scheduler[T]) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.pending
}

// Stop stops the scheduler: its runtime timer is stopped and every pending
// deadline is dropped without firing, with its value released. Later Arm
// calls return the zero Handle; Cancel and Reset return false. A batch
// already being delivered finishes; Stop does not wait for it, so it may be
// called from the fire callback. Once that batch returns, the scheduler
// holds no goroutine and no timer. Stop is idempotent.
//
// The fire callback is released too. The runtime keeps a stopped timer's
// function, and through it the scheduler, until the P whose timer heap
// holds it gets round to removing it (go.dev/issue/75935): seconds, or up
// to the deadline it was armed for. Kept, the callback kept what it
// reaches, such as a closed client with all its buffers.
func (s *Scheduler[T]) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	s.stopped = true
	s.timer.Stop()
	s.timerTick = noTick
	s.w = wheel[T]{}
	s.batch = nil
	s.onFire = nil
}

// elapsed returns the time since tick 0. time.Since reads only the
// monotonic clock when origin has a monotonic reading, as the system
// clock's times do.
func (s *Scheduler[T]) elapsed() time.Duration {
	if s.system {
		return time.Since(s.origin)
	}
	return s.clock.Now().Sub(s.origin)
}

// addSaturating returns a+b clamped to the range of time.Duration, as
// time.Time.Sub clamps, so that a huge d never wraps into the past.
func addSaturating(a, b time.Duration) time.Duration {
	sum := a + b
	switch {
	case b > 0 && sum < a:
		return math.MaxInt64
	case b < 0 && sum > a:
		return math.MinInt64
	}
	return sum
}

// fireTick returns the tick at whose start a deadline off after tick 0 may
// fire: the first grid line at or after it. Firing at the start of the
// bucket the deadline falls in would be early for any deadline past that
// bucket's start.
func (s *Scheduler[T]) fireTick(off time.Duration) uint64 {
	if off <= 0 {
		return 0
	}
	return uint64(off-1)/uint64(s.granularity) + 1
}

// nowTick returns the last tick whose start has passed.
func (s *Scheduler[T]) nowTick() uint64 {
	off := s.elapsed()
	if off <= 0 {
		return 0
	}
	return uint64(off) / uint64(s.granularity)
}

// wakeBy makes sure the timer fires no later than the start of tick, at
// once when that is past. While a batch is being delivered the timer is
// left alone: fire rearms it when the batch returns.
func (s *Scheduler[T]) wakeBy(tick uint64) {
	if s.firing || tick >= s.timerTick {
		return
	}
	s.armTimer(tick)
}

func (s *Scheduler[T]) armTimer(tick uint64) {
	s.timerTick = tick
	d := time.Duration(math.MaxInt64)
	if tick <= uint64(math.MaxInt64/s.granularity) {
		d = time.Duration(tick)*s.granularity - s.elapsed()
	}
	s.timer.Reset(d)
}

// fire is the runtime timer's function: it collects every deadline due by
// now, delivers them as one batch without holding the lock, and rearms the
// timer for the wheel's next event.
func (s *Scheduler[T]) fire() {
	s.mu.Lock()
	if s.stopped || s.firing {
		// Stopped, or a spurious second wake-up while a batch is out: that
		// batch's end rearms the timer.
		s.mu.Unlock()
		return
	}
	s.firing = true
	s.timerTick = noTick
	batch := s.w.advance(s.nowTick(), s.batch[:0])
	s.batch = nil
	onFire := s.onFire // Stop clears it, maybe while the batch is out
	s.mu.Unlock()

	if len(batch) > 0 {
		onFire(batch)
	}
	clear(batch) // drop references to the values

	s.mu.Lock()
	s.firing = false
	if !s.stopped {
		if cap(batch) <= maxKeptBatch {
			s.batch = batch[:0]
		}
		if tick, _, ok := s.w.nextEvent(); ok {
			s.armTimer(tick)
		}
	}
	s.mu.Unlock()
}
