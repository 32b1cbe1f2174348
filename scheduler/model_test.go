package scheduler

import (
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// The model-based test drives a Scheduler on a FakeClock with a sequence of
// arm, cancel, reset and advance operations, and checks every delivery
// against a model that knows exactly when each deadline must fire:
//
//	fireAt = max(first grid line at or after the deadline, time of arming)
//
// (the grid lines are origin + k*granularity). That one formula holds the
// contract: never early, less than one granularity late, a past deadline at
// once, and every deadline of one bucket in one batch.

type modelEntry struct {
	deadline time.Time
	setAt    time.Time // when it was armed or last reset
}

type firedBatch struct {
	at     time.Time
	values []int
}

type harness struct {
	t       testing.TB
	clock   *FakeClock
	s       *Scheduler[int]
	g       time.Duration
	origin  time.Time
	handles []Handle // by value: every handle ever issued, stale ones too
	pending map[int]modelEntry
	fired   []firedBatch
	last    time.Time // the deadline armed or reset last
}

var modelGranularities = []time.Duration{
	time.Millisecond,
	time.Second,
	7 * time.Millisecond,
	1003 * time.Nanosecond,
}

func newHarness(t testing.TB, g time.Duration) *harness {
	h := &harness{
		t:       t,
		clock:   NewFakeClock(time.Unix(1_700_000_000, 123_456_789)),
		g:       g,
		pending: make(map[int]modelEntry),
	}
	h.s = New(func(batch []int) {
		h.fired = append(h.fired, firedBatch{h.clock.Now(), slices.Clone(batch)})
	}, WithGranularity(g), WithClock(h.clock))
	h.origin = h.clock.Now()
	h.last = h.origin
	return h
}

// gridAtOrAfter returns the first grid line at or after t.
func (h *harness) gridAtOrAfter(t time.Time) time.Time {
	off := t.Sub(h.origin)
	if off <= 0 {
		return h.origin
	}
	k := (off + h.g - 1) / h.g
	return h.origin.Add(k * h.g)
}

func (h *harness) fireAt(e modelEntry) time.Time {
	at := h.gridAtOrAfter(e.deadline)
	if e.setAt.After(at) {
		return e.setAt
	}
	return at
}

// deadlineFrom turns x into a deadline relative to now, at one of several
// scales, so that every wheel level, the due list and the grid-line edges
// are exercised.
func (h *harness) deadlineFrom(x uint64) time.Time {
	now := h.clock.Now()
	n := x >> 3
	switch x % 6 {
	case 0: // within the next few buckets
		return now.Add(time.Duration(n % uint64(4*h.g)))
	case 1: // on a grid line, or one nanosecond either side of it
		line := h.gridAtOrAfter(now).Add(time.Duration(n%8) * h.g)
		return line.Add(time.Duration(int64(n/8%3) - 1))
	case 2: // up to 64^3 buckets away: levels 1 and 2
		return now.Add(time.Duration(n % uint64(262144*h.g)))
	case 3: // hours away
		return now.Add(time.Duration(n % uint64(48*time.Hour)))
	case 4: // in the past
		return now.Add(-time.Duration(n % uint64(10*h.g)))
	default: // the deadline armed last, so that buckets fill up
		return h.last
	}
}

func (h *harness) advanceFrom(x uint64) time.Duration {
	now := h.clock.Now()
	n := x >> 2
	switch x % 4 {
	case 0:
		return time.Duration(n % uint64(3*h.g))
	case 1: // to a grid line, or one nanosecond either side of it
		line := h.gridAtOrAfter(now).Add(time.Duration(n%4) * h.g)
		return max(0, line.Sub(now)+time.Duration(int64(n/4%3)-1))
	case 2:
		return time.Duration(n % uint64(4096*h.g))
	default:
		return time.Duration(n % uint64(12*time.Hour))
	}
}

// arm arms a deadline chosen by x, through Arm or, with after, through
// ArmAfter with the same deadline as a duration from now.
func (h *harness) arm(x uint64, after bool) {
	d := h.deadlineFrom(x)
	v := len(h.handles)
	var hd Handle
	if !after {
		hd = h.s.Arm(d, v)
	} else {
		hd = h.s.ArmAfter(d.Sub(h.clock.Now()), v)
	}
	if hd == 0 {
		h.t.Fatalf("Arm returned the zero Handle")
	}
	h.handles = append(h.handles, hd)
	h.last = d
	h.pending[v] = modelEntry{deadline: d, setAt: h.clock.Now()}
}

func (h *harness) pick(x uint64) (int, bool) {
	if len(h.handles) == 0 {
		return 0, false
	}
	return int(x % uint64(len(h.handles))), true
}

func (h *harness) cancel(x uint64) {
	v, ok := h.pick(x)
	if !ok {
		if h.s.Cancel(Handle(x)) {
			h.t.Fatalf("Cancel(%#x) with nothing armed returned true", x)
		}
		return
	}
	_, want := h.pending[v]
	if got := h.s.Cancel(h.handles[v]); got != want {
		h.t.Fatalf("Cancel(value %d) = %v, model says pending = %v", v, got, want)
	}
	delete(h.pending, v)
}

func (h *harness) reset(x, y uint64, after bool) {
	v, ok := h.pick(x)
	if !ok {
		return
	}
	d := h.deadlineFrom(y)
	_, want := h.pending[v]
	var got bool
	if !after {
		got = h.s.Reset(h.handles[v], d)
	} else {
		got = h.s.ResetAfter(h.handles[v], d.Sub(h.clock.Now()))
	}
	if got != want {
		h.t.Fatalf("Reset(value %d) = %v, model says pending = %v", v, got, want)
	}
	if want {
		h.pending[v] = modelEntry{deadline: d, setAt: h.clock.Now()}
		h.last = d
	}
}

// advance moves the clock and checks the batches delivered on the way.
func (h *harness) advance(d time.Duration) {
	h.fired = h.fired[:0]
	h.clock.Advance(d)
	now := h.clock.Now()

	batchOf := make(map[int]int) // value -> index of its batch
	for bi, b := range h.fired {
		if len(b.values) == 0 {
			h.t.Fatalf("empty batch delivered at %v", b.at.Sub(h.origin))
		}
		if bi > 0 && !b.at.After(h.fired[bi-1].at) {
			h.t.Fatalf("batch %d at %v not after batch %d at %v",
				bi, b.at.Sub(h.origin), bi-1, h.fired[bi-1].at.Sub(h.origin))
		}
		for _, v := range b.values {
			e, ok := h.pending[v]
			if !ok {
				h.t.Fatalf("value %d fired at %v but was not pending (fired twice, or cancelled)",
					v, b.at.Sub(h.origin))
			}
			if _, dup := batchOf[v]; dup {
				h.t.Fatalf("value %d fired twice in one advance", v)
			}
			batchOf[v] = bi
			if b.at.Before(e.deadline) {
				h.t.Fatalf("value %d fired early: at %v, deadline %v",
					v, b.at.Sub(h.origin), e.deadline.Sub(h.origin))
			}
			if want := h.fireAt(e); !b.at.Equal(want) {
				h.t.Fatalf("value %d (deadline %v, set at %v) fired at %v, want %v",
					v, e.deadline.Sub(h.origin), e.setAt.Sub(h.origin),
					b.at.Sub(h.origin), want.Sub(h.origin))
			}
			if !e.setAt.After(e.deadline) && b.at.Sub(e.deadline) >= h.g {
				h.t.Fatalf("value %d fired %v after its deadline, granularity %v",
					v, b.at.Sub(e.deadline), h.g)
			}
		}
	}
	// Everything due by now fired, and values due at the same time fired in
	// the same batch: the batch times are distinct, so the fireAt check
	// above already ties each value to the one batch of its time.
	for v, e := range h.pending {
		_, fired := batchOf[v]
		if due := !h.fireAt(e).After(now); due != fired {
			h.t.Fatalf("value %d (deadline %v, set at %v): due by %v = %v, fired = %v",
				v, e.deadline.Sub(h.origin), e.setAt.Sub(h.origin), now.Sub(h.origin), due, fired)
		}
		if fired {
			delete(h.pending, v)
		}
	}
	if got := h.s.Len(); got != len(h.pending) {
		h.t.Fatalf("Len() = %d, model has %d pending", got, len(h.pending))
	}
	h.s.mu.Lock()
	checkWheel(h.t, &h.s.w)
	h.s.mu.Unlock()
}

// step runs one operation chosen by op with arguments x and y.
func (h *harness) step(op byte, x, y uint64) {
	switch op % 8 {
	case 0, 1, 2:
		h.arm(x, op%8 == 2)
	case 3:
		h.cancel(x)
	case 4, 5:
		h.reset(x, y, op%8 == 5)
	default:
		h.advance(h.advanceFrom(x))
	}
}

// finish advances past every pending deadline and checks they all fired.
func (h *harness) finish() {
	h.advance(100 * time.Hour)
	if len(h.pending) != 0 {
		h.t.Fatalf("%d deadlines still pending after 100h", len(h.pending))
	}
}

func TestModelRandom(t *testing.T) {
	for _, g := range modelGranularities {
		t.Run(g.String(), func(t *testing.T) {
			for seed := range uint64(40) {
				h := newHarness(t, g)
				rng := rand.New(rand.NewPCG(seed, uint64(g)))
				for range 400 {
					h.step(byte(rng.Uint32()), rng.Uint64(), rng.Uint64())
				}
				h.finish()
			}
		})
	}
}

// FuzzModel runs the model-based test on operations decoded from the
// fuzzer's bytes: the first byte picks the granularity, then each
// operation takes one byte for its kind and two varints for its arguments.
func FuzzModel(f *testing.F) {
	f.Add([]byte{0, 0, 1, 7, 10, 6, 5})
	f.Add([]byte{1, 0, 0x81, 0x01, 0, 1, 0x89, 0x02, 0, 6, 0x05, 0, 3, 0, 0, 6, 0x07, 0})
	f.Add([]byte{2, 0, 3, 0, 0, 11, 0, 4, 0, 9, 14, 0x2d, 0, 6, 0x03, 0})
	f.Add([]byte{3, 0, 0xff, 0xff, 0x03, 0, 2, 0xfe, 0x7f, 0, 7, 0xff, 0xff, 0xff, 0x0f, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		h := newHarness(t, modelGranularities[int(data[0])%len(modelGranularities)])
		data = data[1:]
		for ops := 0; len(data) > 0 && ops < 512; ops++ {
			op := data[0]
			x, n := binary.Uvarint(data[1:])
			if n <= 0 {
				break
			}
			y, m := binary.Uvarint(data[1+n:])
			if m <= 0 {
				break
			}
			data = data[1+n+m:]
			h.step(op, x, y)
		}
		h.finish()
	})
}
