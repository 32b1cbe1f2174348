package emitter

import (
	"slices"
	"sync"
	"sync/atomic"
)

// list is the copy-on-write listener list behind both emitters. F is the
// listener function type. Writers (add, remove) serialize on mu and publish a
// new snapshot; readers (the emit loops) load the current snapshot with one
// atomic load and never lock, so an emit allocates nothing and a listener
// may call add or remove while an emit runs.
type list[F any] struct {
	mu      sync.Mutex
	current atomic.Pointer[snapshot[F]]
}

// snapshot is an immutable listener list. A nil snapshot is an empty list,
// which is what makes an emit with no listener one load and one compare.
type snapshot[F any] struct {
	entries []entry[F]
	// hasOnce tells the emit loops whether any entry needs the Once
	// bookkeeping, so a list of plain listeners skips it.
	hasOnce bool
}

type entry[F any] struct {
	fn F
	// reg identifies the registration, for its off function; it is
	// compared by address.
	reg  *registration
	once bool
}

// registration is the identity of one On or Once call.
type registration struct {
	// fired is set by the one emit that calls a Once listener, so neither
	// a concurrent emit nor an emit nested in a listener calls it again.
	fired atomic.Bool
}

// add appends fn to the list and returns its off function.
func (l *list[F]) add(fn F, once bool) (off func()) {
	reg := new(registration)
	l.mu.Lock()
	old := l.current.Load()
	s := &snapshot[F]{hasOnce: once}
	if old != nil {
		s.entries = make([]entry[F], len(old.entries), len(old.entries)+1)
		copy(s.entries, old.entries)
		s.hasOnce = s.hasOnce || old.hasOnce
	}
	s.entries = append(s.entries, entry[F]{fn: fn, reg: reg, once: once})
	l.current.Store(s)
	l.mu.Unlock()
	return func() { l.remove(reg) }
}

// remove takes the registration out of the list. Removing a registration
// that is no longer there does nothing, which makes off idempotent.
func (l *list[F]) remove(reg *registration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.current.Load()
	if old == nil {
		return
	}
	i := slices.IndexFunc(old.entries, func(e entry[F]) bool { return e.reg == reg })
	if i < 0 {
		return
	}
	if len(old.entries) == 1 {
		l.current.Store(nil)
		return
	}
	s := &snapshot[F]{entries: make([]entry[F], 0, len(old.entries)-1)}
	s.entries = append(s.entries, old.entries[:i]...)
	s.entries = append(s.entries, old.entries[i+1:]...)
	for _, e := range s.entries {
		s.hasOnce = s.hasOnce || e.once
	}
	l.current.Store(s)
}

// claim reports whether the emit about to call e may call it: always for a
// plain listener; for a Once listener, only the first emit to get here. The
// emit takes the Once listeners it called out of the list when it ends
// (removeFired): removed one by one, each copying the list, an emit that
// fires n of them cost O(n²).
func (l *list[F]) claim(e *entry[F]) bool {
	return !e.once || e.reg.fired.CompareAndSwap(false, true)
}

// removeFired takes every Once listener that an emit called out of the
// list, in one copy.
func (l *list[F]) removeFired() {
	l.mu.Lock()
	defer l.mu.Unlock()
	old := l.current.Load()
	if old == nil {
		return
	}
	keep := 0
	for _, e := range old.entries {
		if !e.once || !e.reg.fired.Load() {
			keep++
		}
	}
	if keep == len(old.entries) {
		return // a concurrent emit removed them already
	}
	if keep == 0 {
		l.current.Store(nil)
		return
	}
	s := &snapshot[F]{entries: make([]entry[F], 0, keep)}
	for _, e := range old.entries {
		if !e.once || !e.reg.fired.Load() {
			s.entries = append(s.entries, e)
			s.hasOnce = s.hasOnce || e.once
		}
	}
	l.current.Store(s)
}

func (l *list[F]) len() int {
	if s := l.current.Load(); s != nil {
		return len(s.entries)
	}
	return 0
}
