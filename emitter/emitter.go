package emitter

// Emitter calls listeners of events of type T. The zero value is an emitter
// with no listeners, ready to use. An Emitter must not be copied after first
// use.
//
// On, Once, the off functions they return, Emit and Len are safe to call
// from any goroutine at the same time, and from inside a listener.
type Emitter[T any] struct {
	l list[func(T)]
}

// On adds fn as a listener and returns the function that removes it.
// Calling off more than once, or after the emitter dropped the listener,
// does nothing. On(nil) adds nothing and returns an off that does nothing.
//
// On copies the listener list; an emit that has already begun does not see
// the new listener, and one that begins after On returns does.
func (e *Emitter[T]) On(fn func(T)) (off func()) {
	if fn == nil {
		return func() {}
	}
	return e.l.add(fn, false)
}

// Once adds fn as a listener that is called by at most one emit, even when
// several emits run at once or an emit is raised from inside a listener,
// and then removed. Its off function removes it if it has not been called.
func (e *Emitter[T]) Once(fn func(T)) (off func()) {
	if fn == nil {
		return func() {}
	}
	return e.l.add(fn, true)
}

// Emit calls every listener with v, in the order they were added, on the
// calling goroutine. It calls the listeners that were registered when it
// began: one that a listener adds is called from the next emit on, and one
// that a listener removes is still called by this emit if its turn has not
// come yet.
//
// Emit allocates nothing and takes no lock: with no listener it costs one
// atomic load, with one listener a load and a call. The one exception is a
// list with Once listeners: when the emit ends, those it called are taken
// out of the list in one copy of it, whatever their number.
//
// A listener that panics stops the emit and the panic propagates to the
// caller of Emit; the emitter stays usable.
func (e *Emitter[T]) Emit(v T) {
	s := e.l.current.Load()
	if s == nil {
		return
	}
	if !s.hasOnce {
		if len(s.entries) == 1 {
			s.entries[0].fn(v)
			return
		}
		for i := range s.entries {
			s.entries[i].fn(v)
		}
		return
	}
	fired := false
	defer func() {
		if fired { // also when a listener panicked
			e.l.removeFired()
		}
	}()
	for i := range s.entries {
		if en := &s.entries[i]; e.l.claim(en) {
			fired = fired || en.once
			en.fn(v)
		}
	}
}

// Len returns the number of listeners.
func (e *Emitter[T]) Len() int { return e.l.len() }

// ErrorEmitter is an Emitter whose listeners return an error. Emit stops at
// the first listener that returns one and returns that error as it is,
// so errors.Is and errors.As see it; the listeners after it are not called
// for that event. This lets a listener refuse an event (a join the room
// does not allow, a message that fails validation) before the listeners
// that act on it, in registration order.
//
// Everything else, including the zero value and concurrency, is as for
// Emitter.
type ErrorEmitter[T any] struct {
	l list[func(T) error]
}

// On adds fn as a listener and returns the function that removes it, as
// Emitter.On does.
func (e *ErrorEmitter[T]) On(fn func(T) error) (off func()) {
	if fn == nil {
		return func() {}
	}
	return e.l.add(fn, false)
}

// Once adds fn as a listener called by at most one emit, as Emitter.Once
// does. It is removed when it is called, whatever it returns; an emit that
// stops before its turn leaves it in place.
func (e *ErrorEmitter[T]) Once(fn func(T) error) (off func()) {
	if fn == nil {
		return func() {}
	}
	return e.l.add(fn, true)
}

// Emit calls the listeners with v in the order they were added, as
// Emitter.Emit does, until one returns an error, and returns that error. It
// returns nil when every listener returned nil, or there were none.
func (e *ErrorEmitter[T]) Emit(v T) error {
	s := e.l.current.Load()
	if s == nil {
		return nil
	}
	if !s.hasOnce {
		if len(s.entries) == 1 {
			return s.entries[0].fn(v)
		}
		for i := range s.entries {
			if err := s.entries[i].fn(v); err != nil {
				return err
			}
		}
		return nil
	}
	fired := false
	defer func() {
		if fired { // also when a listener panicked
			e.l.removeFired()
		}
	}()
	for i := range s.entries {
		if en := &s.entries[i]; e.l.claim(en) {
			fired = fired || en.once
			if err := en.fn(v); err != nil {
				return err
			}
		}
	}
	return nil
}

// Len returns the number of listeners.
func (e *ErrorEmitter[T]) Len() int { return e.l.len() }
