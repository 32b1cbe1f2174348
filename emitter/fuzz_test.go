package emitter

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

// The fuzz target drives an emitter and a model of it with the same script
// and compares the calls they make after every step.
//
// The script is read a byte at a time. A top-level byte chooses On, Once,
// an off of an earlier registration, or an Emit. A byte read at
// registration chooses what the listener does when called: nothing, remove
// itself, remove another registration, add a listener, raise a nested emit,
// or (for the error variant) return an error.

// subject is the emitter under test, seen through the error variant's
// signatures so both emitters fit.
type subject interface {
	on(fn func(int) error) func()
	once(fn func(int) error) func()
	emit(v int) error
	len() int
}

type plainSubject struct{ e Emitter[int] }

func (s *plainSubject) on(fn func(int) error) func() {
	return s.e.On(func(v int) { _ = fn(v) })
}
func (s *plainSubject) once(fn func(int) error) func() {
	return s.e.Once(func(v int) { _ = fn(v) })
}
func (s *plainSubject) emit(v int) error { s.e.Emit(v); return nil }
func (s *plainSubject) len() int         { return s.e.Len() }

type errorSubject struct{ e ErrorEmitter[int] }

func (s *errorSubject) on(fn func(int) error) func()   { return s.e.On(fn) }
func (s *errorSubject) once(fn func(int) error) func() { return s.e.Once(fn) }
func (s *errorSubject) emit(v int) error               { return s.e.Emit(v) }
func (s *errorSubject) len() int                       { return s.e.Len() }

// action is what a listener does when called.
type action struct {
	kind   byte // one of the act constants
	target int  // registration number, for actOffOther
}

const (
	actNothing byte = iota
	actOffSelf
	actOffOther
	actAdd
	actNested
	actFail
	numActions
)

// Bounds on the work one script can cause, so that listeners which add
// listeners and raise nested emits cannot make it grow without limit: a
// fuzzer input once ran for ten minutes without them. Both sides apply them
// the same way, so they stay in step.
const (
	// maxNesting bounds how deep emits raised from listeners nest.
	maxNesting = 2
	// maxNestedEmits bounds the nested emits under one top-level emit.
	maxNestedEmits = 8
	// maxRegistrations bounds the registrations of one script.
	maxRegistrations = 64
)

// modelEntry is one registration in the model.
type modelEntry struct {
	id    int
	once  bool
	fired bool
	act   action
}

// harness runs a script against a subject and a model of it. The two run
// one after the other on each step and never share state: each side numbers
// its registrations in the order they happen, so as long as the subject
// behaves as the model does, a registration has the same number on both
// sides.
type harness struct {
	t           *testing.T
	sub         subject
	stopOnError bool

	// The subject's side: the off function of every registration, by
	// number, the depth of nested emits, and the calls made ("id:value").
	offs      []func()
	subDepth  int
	subNested int
	got       []string

	// The model's side: the listener list as the emitter should hold it,
	// the number of registrations so far, the depth of nested emits, and
	// the calls it predicts.
	model       []*modelEntry
	registered  int
	modelDepth  int
	modelNested int
	want        []string
}

var errListener = errors.New("listener failed")

// subRegister registers a listener with act on the subject.
func (h *harness) subRegister(once bool, act action) {
	id := len(h.offs)
	fn := func(v int) error {
		h.got = append(h.got, fmt.Sprintf("%d:%d", id, v))
		return h.subPerform(id, act, v)
	}
	if once {
		h.offs = append(h.offs, h.sub.once(fn))
	} else {
		h.offs = append(h.offs, h.sub.on(fn))
	}
}

func (h *harness) subPerform(id int, act action, v int) error {
	switch act.kind {
	case actOffSelf:
		h.offs[id]()
	case actOffOther:
		h.offs[act.target%len(h.offs)]()
	case actAdd:
		if len(h.offs) < maxRegistrations {
			h.subRegister(false, action{})
		}
	case actNested:
		if h.subDepth < maxNesting && h.subNested < maxNestedEmits {
			h.subNested++
			h.subDepth++
			defer func() { h.subDepth-- }()
			return h.sub.emit(v + 100)
		}
	case actFail:
		return errListener
	}
	return nil
}

func (h *harness) modelRegister(once bool, act action) {
	h.model = append(h.model, &modelEntry{id: h.registered, once: once, act: act})
	h.registered++
}

func (h *harness) modelOff(id int) {
	h.model = slices.DeleteFunc(h.model, func(e *modelEntry) bool { return e.id == id })
}

func (h *harness) modelPerform(id int, act action, v int) error {
	switch act.kind {
	case actOffSelf:
		h.modelOff(id)
	case actOffOther:
		h.modelOff(act.target % h.registered)
	case actAdd:
		if h.registered < maxRegistrations {
			h.modelRegister(false, action{})
		}
	case actNested:
		if h.modelDepth < maxNesting && h.modelNested < maxNestedEmits {
			h.modelNested++
			h.modelDepth++
			defer func() { h.modelDepth-- }()
			return h.modelEmit(v + 100)
		}
	case actFail:
		return errListener
	}
	return nil
}

// modelEmit is the specification of Emit: call the listeners registered
// when the emit began, in order, skipping a Once listener another emit has
// already called and removing one when it is called; for the error
// variant, stop at the first error and return it.
func (h *harness) modelEmit(v int) error {
	for _, e := range slices.Clone(h.model) {
		if e.once {
			if e.fired {
				continue
			}
			e.fired = true
			h.modelOff(e.id)
		}
		h.want = append(h.want, fmt.Sprintf("%d:%d", e.id, v))
		if err := h.modelPerform(e.id, e.act, v); err != nil && h.stopOnError {
			return err
		}
	}
	return nil
}

// run plays script; see the top of the file for its encoding.
func (h *harness) run(script []byte) {
	next := func() byte {
		if len(script) == 0 {
			return 0
		}
		b := script[0]
		script = script[1:]
		return b
	}
	for step := 0; len(script) > 0; step++ {
		op := next()
		switch op % 4 {
		case 0, 1:
			once := op%4 == 1
			a := next()
			if h.registered >= maxRegistrations {
				continue
			}
			act := action{kind: a % numActions, target: int(a / numActions)}
			h.subRegister(once, act)
			h.modelRegister(once, act)
		case 2:
			if h.registered > 0 {
				id := int(next()) % h.registered
				h.offs[id]()
				h.modelOff(id)
			}
		case 3:
			h.subNested, h.modelNested = 0, 0
			gotErr := h.sub.emit(step)
			wantErr := h.modelEmit(step)
			if gotErr != wantErr {
				h.t.Fatalf("step %d: Emit returned %v, the model %v", step, gotErr, wantErr)
			}
		}
		if !slices.Equal(h.got, h.want) {
			h.t.Fatalf("step %d: calls\n%q\nthe model predicts\n%q", step, h.got, h.want)
		}
		if len(h.offs) != h.registered || h.sub.len() != len(h.model) {
			h.t.Fatalf("step %d: %d registrations and %d listeners, the model has %d and %d",
				step, len(h.offs), h.sub.len(), h.registered, len(h.model))
		}
	}
}

// FuzzEmitter plays random scripts of On, Once, off and Emit, with
// listeners that remove themselves and others, add listeners and raise
// nested emits while an emit runs, against the model, for both emitters.
func FuzzEmitter(f *testing.F) {
	// On a (removes itself), On b, Once c, Emit, Emit.
	f.Add([]byte{0, actOffSelf, 0, actNothing, 1, actNothing, 3, 3})
	// On a (removes registration 1), On b, Emit: b is still called.
	f.Add([]byte{0, actOffOther + numActions, 0, actNothing, 3, 3})
	// On a (adds a listener), Emit, Emit.
	f.Add([]byte{0, actAdd, 3, 3})
	// On a (nested emit), Once b, Emit.
	f.Add([]byte{0, actNested, 1, actNothing, 3, 3})
	// On a (fails), On b, Emit, off a, Emit.
	f.Add([]byte{0, actFail, 0, actNothing, 3, 2, 0, 3})
	f.Fuzz(func(t *testing.T, script []byte) {
		if len(script) > 512 {
			// Nested emits of listeners that add listeners grow the work
			// fast; a long script adds nothing a shorter one cannot.
			script = script[:512]
		}
		(&harness{t: t, sub: new(plainSubject)}).run(script)
		(&harness{t: t, sub: new(errorSubject), stopOnError: true}).run(script)
	})
}
