package emitter

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
)

// recorder collects the calls listeners receive, as "name:value" strings.
type recorder struct{ calls []string }

func (r *recorder) listener(name string) func(int) {
	return func(v int) { r.calls = append(r.calls, fmt.Sprintf("%s:%d", name, v)) }
}

func (r *recorder) take() []string {
	c := r.calls
	r.calls = nil
	return c
}

func expectCalls(t *testing.T, r *recorder, want ...string) {
	t.Helper()
	if got := r.take(); !slices.Equal(got, want) {
		t.Fatalf("calls %q, want %q", got, want)
	}
}

func TestEmitInRegistrationOrder(t *testing.T) {
	var e Emitter[int]
	var r recorder
	e.Emit(0)
	for _, name := range []string{"a", "b", "c"} {
		e.On(r.listener(name))
	}
	e.Emit(1)
	expectCalls(t, &r, "a:1", "b:1", "c:1")
	if e.Len() != 3 {
		t.Fatalf("Len = %d", e.Len())
	}
}

func TestOffRemovesOnlyItsListenerAndIsIdempotent(t *testing.T) {
	var e Emitter[int]
	var r recorder
	offA := e.On(r.listener("a"))
	e.On(r.listener("b"))
	// The same function registered twice is two listeners, each with its
	// own off.
	fn := r.listener("c")
	offC1 := e.On(fn)
	e.On(fn)
	offA()
	offA()
	offC1()
	offC1()
	e.Emit(1)
	expectCalls(t, &r, "b:1", "c:1")
	if e.Len() != 2 {
		t.Fatalf("Len = %d", e.Len())
	}
}

func TestOffLastListenerEmptiesTheList(t *testing.T) {
	var e Emitter[int]
	var r recorder
	off := e.On(r.listener("a"))
	off()
	if e.l.current.Load() != nil {
		t.Fatal("an emitter whose listeners are all gone is not back to the nil list")
	}
	e.Emit(1)
	expectCalls(t, &r)
}

func TestListenerRemovesItselfAndOthersDuringEmit(t *testing.T) {
	var e Emitter[int]
	var r recorder
	var offSelf, offC func()
	offSelf = e.On(func(v int) {
		r.calls = append(r.calls, fmt.Sprintf("a:%d", v))
		offSelf()
		offC()
	})
	e.On(r.listener("b"))
	offC = e.On(r.listener("c"))
	e.Emit(1)
	// This emit began with a, b and c: all three are called.
	expectCalls(t, &r, "a:1", "b:1", "c:1")
	e.Emit(2)
	expectCalls(t, &r, "b:2")
}

func TestListenerAddedDuringEmitWaitsForTheNextEmit(t *testing.T) {
	var e Emitter[int]
	var r recorder
	added := false
	e.On(func(v int) {
		r.calls = append(r.calls, fmt.Sprintf("a:%d", v))
		if !added {
			added = true
			e.On(r.listener("new"))
		}
	})
	e.On(r.listener("b"))
	e.Emit(1)
	expectCalls(t, &r, "a:1", "b:1")
	e.Emit(2)
	expectCalls(t, &r, "a:2", "b:2", "new:2")
}

func TestOnceFiresOnce(t *testing.T) {
	var e Emitter[int]
	var r recorder
	e.On(r.listener("a"))
	e.Once(r.listener("once"))
	e.On(r.listener("b"))
	e.Emit(1)
	e.Emit(2)
	expectCalls(t, &r, "a:1", "once:1", "b:1", "a:2", "b:2")
	if e.Len() != 2 {
		t.Fatalf("Len = %d after the Once listener fired", e.Len())
	}
}

func TestOnceOffBeforeItFires(t *testing.T) {
	var e Emitter[int]
	var r recorder
	off := e.Once(r.listener("once"))
	off()
	e.Emit(1)
	expectCalls(t, &r)
}

// TestOnceNestedEmit raises an emit from inside a listener that runs before
// a Once listener: the nested emit calls it, and the outer emit, whose
// snapshot still holds it, does not call it again.
func TestOnceNestedEmit(t *testing.T) {
	var e Emitter[int]
	var r recorder
	e.On(func(v int) {
		r.calls = append(r.calls, fmt.Sprintf("outer:%d", v))
		if v == 1 {
			e.Emit(2)
		}
	})
	e.Once(r.listener("once"))
	e.Emit(1)
	expectCalls(t, &r, "outer:1", "outer:2", "once:2")
}

func TestOnceConcurrentEmits(t *testing.T) {
	for range 50 {
		var e Emitter[int]
		var calls atomic.Int32
		e.Once(func(int) { calls.Add(1) })
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() { e.Emit(g) })
		}
		wg.Wait()
		if n := calls.Load(); n != 1 {
			t.Fatalf("Once listener called %d times", n)
		}
	}
}

func TestNilListener(t *testing.T) {
	var e Emitter[int]
	e.On(nil)()
	e.Once(nil)()
	var ee ErrorEmitter[int]
	ee.On(nil)()
	ee.Once(nil)()
	if e.Len() != 0 || ee.Len() != 0 {
		t.Fatal("a nil listener was added")
	}
	e.Emit(1)
	if err := ee.Emit(1); err != nil {
		t.Fatal(err)
	}
}

// TestPanickingListener checks that a panic leaves the emitter usable: no
// lock is held while listeners run.
func TestPanickingListener(t *testing.T) {
	var e Emitter[int]
	var r recorder
	e.On(func(v int) {
		if v == 1 {
			panic("listener failed")
		}
	})
	e.On(r.listener("b"))
	func() {
		defer func() { _ = recover() }()
		e.Emit(1)
	}()
	off := e.On(r.listener("c"))
	off()
	e.Emit(2)
	expectCalls(t, &r, "b:2")
}

func TestErrorEmitterFirstErrorStops(t *testing.T) {
	var e ErrorEmitter[int]
	var calls []string
	errRefused := errors.New("refused")
	listener := func(name string, fail bool) func(int) error {
		return func(v int) error {
			calls = append(calls, name)
			if fail {
				return fmt.Errorf("%s: %w", name, errRefused)
			}
			return nil
		}
	}
	if err := e.Emit(0); err != nil {
		t.Fatalf("no listeners: %v", err)
	}
	e.On(listener("a", false))
	offB := e.On(listener("b", true))
	e.On(listener("c", false))
	err := e.Emit(1)
	if !errors.Is(err, errRefused) || err.Error() != "b: refused" {
		t.Fatalf("Emit = %v, want b's error as it is", err)
	}
	if !slices.Equal(calls, []string{"a", "b"}) {
		t.Fatalf("called %q, want a and b only", calls)
	}
	offB()
	calls = nil
	if err := e.Emit(2); err != nil || !slices.Equal(calls, []string{"a", "c"}) {
		t.Fatalf("after off: %v, called %q", err, calls)
	}
}

func TestErrorEmitterSingleListener(t *testing.T) {
	var e ErrorEmitter[int]
	errNo := errors.New("no")
	e.On(func(v int) error {
		if v < 0 {
			return errNo
		}
		return nil
	})
	if err := e.Emit(1); err != nil {
		t.Fatal(err)
	}
	if err := e.Emit(-1); err != errNo {
		t.Fatalf("Emit = %v", err)
	}
}

// TestErrorEmitterOnceAfterAnError checks that a Once listener behind a
// failing listener stays registered until an emit reaches it, and is
// removed when called even if it fails.
func TestErrorEmitterOnceAfterAnError(t *testing.T) {
	var e ErrorEmitter[int]
	errStop := errors.New("stop")
	onceCalls := 0
	e.On(func(v int) error {
		if v == 1 {
			return errStop
		}
		return nil
	})
	e.Once(func(int) error { onceCalls++; return errStop })
	if err := e.Emit(1); err != errStop || onceCalls != 0 {
		t.Fatalf("first emit: %v, once called %d times", err, onceCalls)
	}
	if err := e.Emit(2); err != errStop || onceCalls != 1 {
		t.Fatalf("second emit: %v, once called %d times", err, onceCalls)
	}
	if err := e.Emit(3); err != nil || onceCalls != 1 || e.Len() != 1 {
		t.Fatalf("third emit: %v, once called %d times, %d listeners", err, onceCalls, e.Len())
	}
}

// TestEmitAllocatesNothing checks the claim of the package: no allocation
// per emit, for any number of listeners.
func TestEmitAllocatesNothing(t *testing.T) {
	for _, n := range []int{0, 1, 2, 8, 100} {
		var e Emitter[int]
		var ee ErrorEmitter[int]
		sum := 0
		for range n {
			e.On(func(v int) { sum += v })
			ee.On(func(v int) error { sum += v; return nil })
		}
		if allocs := testing.AllocsPerRun(100, func() { e.Emit(1) }); allocs != 0 {
			t.Errorf("Emitter with %d listeners: %v allocations per Emit", n, allocs)
		}
		if allocs := testing.AllocsPerRun(100, func() { _ = ee.Emit(1) }); allocs != 0 {
			t.Errorf("ErrorEmitter with %d listeners: %v allocations per Emit", n, allocs)
		}
	}
}

// TestConcurrentEmitOnOff runs emits on several goroutines while others add
// and remove listeners, under -race. A listener registered before it all
// starts must see every emit exactly once, and the churned listeners must
// all be gone at the end.
func TestConcurrentEmitOnOff(t *testing.T) {
	const emitters, churners, rounds = 2, 2, 1000
	var e Emitter[int]
	var stable atomic.Int64
	e.On(func(int) { stable.Add(1) })
	var churned, emits atomic.Int64
	var done atomic.Bool
	var emitting, churning sync.WaitGroup
	for range emitters {
		emitting.Go(func() {
			// Emit until the churners are done, so the listeners they
			// leave behind keep being removed and the list stays short.
			for i := 0; !done.Load(); i++ {
				e.Emit(i)
				emits.Add(1)
			}
		})
	}
	for range churners {
		churning.Go(func() {
			for i := range rounds {
				var off func()
				if i%3 == 0 {
					off = e.Once(func(int) { churned.Add(1) })
				} else {
					off = e.On(func(int) { churned.Add(1) })
				}
				if i%2 == 0 {
					off()
				} else {
					// Remove from inside an emit. An emit may call the
					// remover before On has returned its off, so it
					// finds that off through an atomic pointer.
					var self atomic.Pointer[func()]
					selfOff := e.On(func(int) {
						if f := self.Load(); f != nil {
							(*f)()
						}
						off()
					})
					self.Store(&selfOff)
				}
			}
		})
	}
	churning.Wait()
	done.Store(true)
	emitting.Wait()
	if got, want := stable.Load(), emits.Load(); got != want {
		t.Fatalf("stable listener saw %d emits, want %d", got, want)
	}
	// Every listener the churners left is removed by the first emit that
	// sees it: a Once fires, a remover takes itself and its target out. One
	// emit after everything stopped leaves only the stable listener.
	e.Emit(0)
	if e.Len() != 1 {
		t.Fatalf("%d listeners left, want 1", e.Len())
	}
}

// An emit that fires n Once listeners takes them out of the list in one
// copy: the bytes it allocates grow with n, not n². Removing them one by
// one copied the list each time: 10,000 of them allocated 1.2 GB. Four
// times the listeners must cost at most 8 times the bytes (linear is 4,
// quadratic 16), the 2× margin of a shape test.
func TestOnceListenersRemovedInOneCopy(t *testing.T) {
	allocated := func(n int) uint64 {
		var e Emitter[int]
		calls := 0
		for range n {
			e.Once(func(int) { calls++ })
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		e.Emit(1)
		runtime.ReadMemStats(&after)
		if calls != n || e.Len() != 0 {
			t.Fatalf("%d Once listeners: %d called, %d left", n, calls, e.Len())
		}
		e.Emit(2)
		if calls != n {
			t.Fatalf("a second emit called %d Once listeners again", calls-n)
		}
		return after.TotalAlloc - before.TotalAlloc
	}
	small, large := allocated(1000), allocated(4000)
	if large > 8*max(small, 1) {
		t.Fatalf("one emit of 1000 Once listeners allocated %d bytes, of 4000: %d (%.1f×): want linear", small, large, float64(large)/float64(max(small, 1)))
	}
}
