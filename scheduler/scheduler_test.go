package scheduler

import (
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"weak"
)

// recorder collects the batches of a scheduler on a FakeClock.
type recorder[T any] struct {
	clock   *FakeClock
	batches []firedAt[T]
}

type firedAt[T any] struct {
	at     time.Time
	values []T
}

func (r *recorder[T]) fire(batch []T) {
	r.batches = append(r.batches, firedAt[T]{r.clock.Now(), slices.Clone(batch)})
}

// take returns the batches recorded since the last take.
func (r *recorder[T]) take() []firedAt[T] {
	b := r.batches
	r.batches = nil
	return b
}

func newFake[T any](g time.Duration) (*Scheduler[T], *recorder[T], *FakeClock) {
	clock := NewFakeClock(time.Unix(1_800_000_000, 777))
	r := &recorder[T]{clock: clock}
	return New(r.fire, WithGranularity(g), WithClock(clock)), r, clock
}

// A grid-aligned sweep that fires the bucket a deadline falls in fires
// early whenever the deadline lies after the bucket's start. The scheduler
// fires a deadline at the first grid line at or after it: for a deadline
// inside a bucket, the start of the bucket after it.
func TestDeadlineNeverFiresBeforeItsTime(t *testing.T) {
	const g = time.Millisecond
	s, r, clock := newFake[string](g)
	origin := clock.Now()
	line := origin.Add(5 * g)
	s.Arm(line.Add(-time.Nanosecond), "before the line")
	s.Arm(line, "on the line")
	s.Arm(line.Add(time.Nanosecond), "after the line")

	clock.Advance(5*g - time.Nanosecond)
	if b := r.take(); len(b) != 0 {
		t.Fatalf("fired before the grid line: %v", b)
	}
	clock.Advance(time.Nanosecond)
	b := r.take()
	if len(b) != 1 || !b[0].at.Equal(line) {
		t.Fatalf("at the grid line: batches %v, want one at %v", b, line)
	}
	slices.Sort(b[0].values)
	if want := []string{"before the line", "on the line"}; !slices.Equal(b[0].values, want) {
		t.Fatalf("at the grid line fired %q, want %q", b[0].values, want)
	}

	// One nanosecond past the line lies in the bucket [line, line+g): it
	// must wait for the next line, not fire at this one.
	clock.Advance(g - time.Nanosecond)
	if b := r.take(); len(b) != 0 {
		t.Fatalf("deadline line+1ns fired before line+g: %v", b)
	}
	clock.Advance(time.Nanosecond)
	b = r.take()
	if len(b) != 1 || !b[0].at.Equal(line.Add(g)) || !slices.Equal(b[0].values, []string{"after the line"}) {
		t.Fatalf("at line+g: %v, want [after the line] at %v", b, line.Add(g))
	}
}

func TestOneBucketFiresInOneBatch(t *testing.T) {
	const g = 10 * time.Millisecond
	s, r, clock := newFake[int](g)
	origin := clock.Now()
	// Deadlines spread over (3g, 4g] all belong to the bucket firing at 4g.
	for k := range 100 {
		s.Arm(origin.Add(3*g+time.Duration(k+1)*g/100), k)
	}
	clock.Advance(time.Hour)
	b := r.take()
	if len(b) != 1 || len(b[0].values) != 100 || !b[0].at.Equal(origin.Add(4*g)) {
		t.Fatalf("got %d batches, want one of 100 at 4g", len(b))
	}
}

func TestPastDeadlineFiresAtOnce(t *testing.T) {
	s, r, clock := newFake[int](time.Second)
	clock.Advance(90 * time.Minute)
	now := clock.Now()
	s.Arm(now.Add(-time.Hour), 1)
	s.Arm(now, 2)
	clock.Advance(0)
	b := r.take()
	if len(b) != 1 || len(b[0].values) != 2 || !b[0].at.Equal(now) {
		t.Fatalf("past deadlines: %v, want both at once", b)
	}
}

func TestCancelAndResetOfStaleHandles(t *testing.T) {
	s, r, clock := newFake[int](time.Millisecond)
	if s.Cancel(0) || s.Reset(0, clock.Now()) {
		t.Fatalf("the zero Handle was accepted")
	}
	if s.Cancel(Handle(1<<40|12345)) || s.Reset(Handle(1<<32|7), clock.Now()) {
		t.Fatalf("a Handle never issued was accepted")
	}
	h := s.Arm(clock.Now().Add(time.Second), 1)
	if !s.Cancel(h) {
		t.Fatalf("Cancel of a pending deadline returned false")
	}
	if s.Cancel(h) || s.Reset(h, clock.Now()) {
		t.Fatalf("a cancelled Handle was accepted again")
	}
	h2 := s.Arm(clock.Now().Add(time.Second), 2)
	if h2 == h {
		t.Fatalf("a reused slot kept its generation")
	}
	if s.Cancel(h) {
		t.Fatalf("the stale Handle cancelled the slot's new deadline")
	}
	if !s.Reset(h2, clock.Now().Add(2*time.Second)) {
		t.Fatalf("Reset of a pending deadline returned false")
	}
	clock.Advance(time.Second)
	if b := r.take(); len(b) != 0 {
		t.Fatalf("fired at its old deadline after Reset: %v", b)
	}
	clock.Advance(time.Second)
	if b := r.take(); len(b) != 1 || b[0].values[0] != 2 {
		t.Fatalf("did not fire at its new deadline: %v", b)
	}
	if s.Cancel(h2) || s.Reset(h2, clock.Now().Add(time.Hour)) {
		t.Fatalf("a fired Handle was accepted")
	}
	if s.Len() != 0 {
		t.Fatalf("Len() = %d after everything fired", s.Len())
	}
}

// The idle-timeout pattern: a read pushes the deadline out, over and over.
func TestResetKeepsPushingTheDeadlineOut(t *testing.T) {
	const idle = 30 * time.Second
	s, r, clock := newFake[string](time.Second)
	h := s.Arm(clock.Now().Add(idle), "conn")
	for range 100 {
		clock.Advance(7 * time.Second)
		if !s.Reset(h, clock.Now().Add(idle)) {
			t.Fatalf("Reset of an idle deadline that has not expired returned false")
		}
	}
	last := clock.Now()
	clock.Advance(idle - time.Nanosecond)
	if b := r.take(); len(b) != 0 {
		t.Fatalf("fired before the idle time: %v", b)
	}
	clock.Advance(time.Second)
	if b := r.take(); len(b) != 1 || b[0].at.Before(last.Add(idle)) {
		t.Fatalf("idle deadline: %v, want one batch after %v", b, last.Add(idle))
	}
}

// The fire callback may arm, cancel and reset deadlines, its own included,
// and stop the scheduler, without deadlock.
func TestCallbackMayCallTheScheduler(t *testing.T) {
	const g = time.Millisecond
	clock := NewFakeClock(time.Unix(1_800_000_000, 0))
	var (
		s       *Scheduler[string]
		fired   []string
		victim  Handle
		moved   Handle
		pings   int
		stopped bool
	)
	s = New(func(batch []string) {
		for _, v := range batch {
			fired = append(fired, v)
			switch v {
			case "ping":
				pings++
				if pings < 5 {
					s.Arm(s.Now().Add(10*g), "ping") // a periodic schedule
				}
				if pings == 1 {
					if !s.Cancel(victim) {
						t.Errorf("Cancel from the callback returned false")
					}
					if !s.Reset(moved, s.Now().Add(100*g)) {
						t.Errorf("Reset from the callback returned false")
					}
					s.Arm(s.Now().Add(-g), "past, armed in callback")
				}
			case "stop":
				s.Stop()
				stopped = true
			}
		}
	}, WithGranularity(g), WithClock(clock))
	start := clock.Now()
	s.Arm(start.Add(10*g), "ping")
	victim = s.Arm(start.Add(20*g), "victim")
	moved = s.Arm(start.Add(15*g), "moved")
	s.Arm(start.Add(500*g), "stop")
	s.Arm(start.Add(600*g), "after stop")
	clock.Advance(time.Second)

	want := []string{"ping", "past, armed in callback", "ping", "ping", "ping", "ping", "moved", "stop"}
	if !slices.Equal(fired, want) {
		t.Fatalf("fired %q, want %q", fired, want)
	}
	if !stopped || s.Len() != 0 {
		t.Fatalf("Stop from the callback: stopped %v, Len %d", stopped, s.Len())
	}
}

func TestStopDropsPendingAndRefusesNewDeadlines(t *testing.T) {
	s, r, clock := newFake[int](time.Millisecond)
	var handles []Handle
	for k := range 3000 {
		handles = append(handles, s.Arm(clock.Now().Add(time.Duration(k)*time.Millisecond), k))
	}
	clock.Advance(10 * time.Millisecond)
	r.take()
	s.Stop()
	s.Stop()
	if s.Len() != 0 {
		t.Fatalf("Len() = %d after Stop", s.Len())
	}
	clock.mu.Lock()
	armed := len(clock.timers)
	clock.mu.Unlock()
	if armed != 0 {
		t.Fatalf("%d timers armed after Stop", armed)
	}
	if h := s.Arm(clock.Now(), 1); h != 0 {
		t.Fatalf("Arm after Stop returned %#x, want the zero Handle", h)
	}
	for _, h := range handles {
		if s.Cancel(h) || s.Reset(h, clock.Now()) {
			t.Fatalf("a Handle was accepted after Stop")
		}
	}
	clock.Advance(time.Hour)
	if b := r.take(); len(b) != 0 {
		t.Fatalf("%d batches fired after Stop", len(b))
	}
}

// payload is big enough to get its own allocation, so a weak pointer to it
// tells whether anything still references it.
type payload struct {
	id   int
	next *payload
	pad  [6]uint64
}

// Values are not kept alive by the scheduler once they have fired, been
// cancelled, or been dropped by Stop.
func TestValuesAreReleased(t *testing.T) {
	s, r, clock := newFake[*payload](time.Millisecond)
	mk := func(id int) (*payload, weak.Pointer[payload]) {
		p := &payload{id: id}
		return p, weak.Make(p)
	}
	p1, w1 := mk(1)
	p2, w2 := mk(2)
	p3, w3 := mk(3)
	s.Arm(clock.Now().Add(time.Millisecond), p1)
	h2 := s.Arm(clock.Now().Add(time.Hour), p2)
	s.Arm(clock.Now().Add(time.Hour), p3)
	p1, p2, p3 = nil, nil, nil
	_, _, _ = p1, p2, p3

	clock.Advance(time.Millisecond) // p1 fires; the recorder keeps it
	s.Cancel(h2)
	runtime.GC()
	if w2.Value() != nil {
		t.Fatalf("a cancelled value is still referenced")
	}
	if w3.Value() == nil {
		t.Fatalf("a pending value was collected")
	}
	s.Stop()
	runtime.GC()
	if w3.Value() != nil {
		t.Fatalf("a value dropped by Stop is still referenced")
	}
	if w1.Value() == nil {
		t.Fatalf("the recorder's copy of a fired value was collected")
	}
	runtime.KeepAlive(r)
}

// keepingClock is a FakeClock that keeps every timer function it was
// given, as the runtime keeps a stopped timer's function until the P whose
// heap holds the timer removes it (go.dev/issue/75935).
type keepingClock struct {
	*FakeClock
	kept []func()
}

func (c *keepingClock) AfterFunc(d time.Duration, f func()) Timer {
	c.kept = append(c.kept, f)
	return c.FakeClock.AfterFunc(d, f)
}

// What the fire callback reaches is released by Stop, though the stopped
// timer's function, and through it the scheduler, is kept: a compat client
// was kept by its scheduler's stopped timer for up to a second after its
// Close, with all its buffers (a soak).
func TestStopReleasesTheCallback(t *testing.T) {
	clock := &keepingClock{FakeClock: NewFakeClock(time.Unix(0, 0))}
	owner := &payload{id: 1}
	gone := weak.Make(owner)
	s := New(func(owner *payload) func([]int) {
		return func([]int) { owner.id++ }
	}(owner), WithClock(clock))
	s.Arm(clock.Now().Add(time.Hour), 1)
	owner = nil
	s.Stop()
	runtime.GC()
	if gone.Value() != nil {
		t.Fatal("what the fire callback reaches is still referenced after Stop, through the stopped timer")
	}
	runtime.KeepAlive(clock)
}

// On the system clock, inside a synctest bubble (virtual time that moves
// only when every goroutine is blocked), the real timer path is exact too.
func TestSystemClockFiresOnTheGridLine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var at []time.Time
		s := New(func(batch []int) {
			mu.Lock()
			for range batch {
				at = append(at, time.Now())
			}
			mu.Unlock()
		}, WithGranularity(time.Millisecond))
		defer s.Stop()
		origin := time.Now()
		s.Arm(origin.Add(1500*time.Microsecond), 1)
		time.Sleep(2*time.Millisecond - time.Nanosecond)
		synctest.Wait()
		mu.Lock()
		n := len(at)
		mu.Unlock()
		if n != 0 {
			t.Fatalf("fired before the grid line after the deadline")
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(at) != 1 || !at[0].Equal(origin.Add(2*time.Millisecond)) {
			t.Fatalf("fired at %v, want once at +2ms", at)
		}
	})
}

// Stop leaves nothing running: the goroutine count returns to where it was
// before the schedulers were made, with the system clock.
func TestStopLeavesNoGoroutine(t *testing.T) {
	before := runtime.NumGoroutine()
	var fired atomic.Int64
	var schedulers []*Scheduler[int]
	for range 8 {
		s := New(func(batch []int) { fired.Add(int64(len(batch))) })
		now := s.Now()
		for k := range 1000 {
			s.Arm(now.Add(time.Duration(k%5)*time.Millisecond), k)
			s.Arm(now.Add(time.Hour), k)
		}
		schedulers = append(schedulers, s)
	}
	for fired.Load() < 8*1000 {
		runtime.Gosched()
	}
	for _, s := range schedulers {
		s.Stop()
		if s.Len() != 0 {
			t.Fatalf("Len() = %d after Stop", s.Len())
		}
	}
	// Waiting for exit, not measuring time: the bound only stops a leak
	// from hanging the test.
	for start := time.Now(); runtime.NumGoroutine() > before; {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("%d goroutines after Stop, %d before", runtime.NumGoroutine(), before)
		}
		time.Sleep(time.Millisecond)
	}
}

// Many goroutines arm, cancel and reset while another advances the clock:
// every armed value either fires exactly once or is cancelled (Cancel
// returned true), never both. Run with -race.
func TestConcurrentArmCancelReset(t *testing.T) {
	const (
		workers = 8
		perWork = 2000
	)
	clock := NewFakeClock(time.Unix(1_800_000_000, 0))
	var fires [workers * perWork]atomic.Int32
	s := New(func(batch []int) {
		for _, v := range batch {
			fires[v].Add(1)
		}
	}, WithGranularity(time.Millisecond), WithClock(clock))

	var cancelled [workers * perWork]bool
	var wg sync.WaitGroup
	done := make(chan struct{})
	go func() { // the clock
		for {
			select {
			case <-done:
				return
			default:
				clock.Advance(time.Millisecond)
			}
		}
	}()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []Handle
			for k := range perWork {
				v := w*perWork + k
				d := time.Duration(v%50) * time.Millisecond
				mine = append(mine, s.Arm(s.Now().Add(d), v))
				switch k % 4 {
				case 1:
					j := k - int(uint(v*7919)%uint(k+1))
					if s.Cancel(mine[j]) {
						if cancelled[w*perWork+j] {
							t.Errorf("value %d cancelled twice", w*perWork+j)
						}
						cancelled[w*perWork+j] = true
					}
				case 2:
					s.Reset(mine[k/2], s.Now().Add(d))
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	clock.Advance(time.Hour)
	for v := range fires {
		n := fires[v].Load()
		if cancelled[v] && n != 0 || !cancelled[v] && n != 1 {
			t.Fatalf("value %d: cancelled %v, fired %d times", v, cancelled[v], n)
		}
	}
	if s.Len() != 0 {
		t.Fatalf("Len() = %d at the end", s.Len())
	}
}

// The same on the system clock: real timers, real goroutines.
func TestConcurrentSystemClock(t *testing.T) {
	const (
		workers = 4
		perWork = 500
	)
	var fires [workers * perWork]atomic.Int32
	var total atomic.Int64
	s := New(func(batch []int) {
		for _, v := range batch {
			fires[v].Add(1)
		}
		total.Add(int64(len(batch)))
	})
	defer s.Stop()
	var cancelled [workers * perWork]bool
	var nCancelled atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range perWork {
				v := w*perWork + k
				h := s.Arm(time.Now().Add(time.Duration(v%5)*time.Millisecond), v)
				if k%2 == 0 && s.Cancel(h) {
					cancelled[v] = true
					nCancelled.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	want := workers*perWork - nCancelled.Load()
	for start := time.Now(); total.Load() < want; {
		if time.Since(start) > 10*time.Second {
			t.Fatalf("%d of %d deadlines fired", total.Load(), want)
		}
		time.Sleep(time.Millisecond)
	}
	for v := range fires {
		n := fires[v].Load()
		if cancelled[v] && n != 0 || !cancelled[v] && n != 1 {
			t.Fatalf("value %d: cancelled %v, fired %d times", v, cancelled[v], n)
		}
	}
}

func TestOptionDefaults(t *testing.T) {
	s := New(func([]int) {}, WithGranularity(0), WithGranularity(-time.Second), WithClock(nil))
	defer s.Stop()
	if s.Granularity() != DefaultGranularity {
		t.Fatalf("Granularity() = %v, want the default", s.Granularity())
	}
	if _, ok := s.clock.(systemClock); !ok {
		t.Fatalf("WithClock(nil) replaced the system clock")
	}
}

// A deadline centuries away saturates the duration arithmetic; it must
// neither fire nor break the deadlines before it.
func TestFarFutureDeadline(t *testing.T) {
	s, r, clock := newFake[int](time.Nanosecond)
	s.Arm(time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC), 1)
	s.Arm(clock.Now().Add(time.Microsecond), 2)
	clock.Advance(time.Hour)
	if b := r.take(); len(b) != 1 || b[0].values[0] != 2 {
		t.Fatalf("got %v, want only the near deadline", b)
	}
	if s.Len() != 1 {
		t.Fatalf("Len() = %d, want the far deadline pending", s.Len())
	}
}

// New panics on a nil fire at once: the nil call would otherwise come on
// the timer's goroutine at the first deadline, where no caller can
// recover it.
func TestNewRefusesNilFire(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("New(nil) did not panic")
		}
	}()
	s := New[int](nil)
	s.Stop()
}
