package dispatch

import (
	"bytes"
	"errors"
	"testing"
)

type conn struct {
	kinds  []Kind
	bodies [][]byte
}

// recordingHandlers returns Handlers whose every field records its kind and
// body on the conn.
func recordingHandlers() Handlers[*conn] {
	rec := func(k Kind) Handler[*conn] {
		return func(c *conn, body []byte) error {
			c.kinds = append(c.kinds, k)
			c.bodies = append(c.bodies, body)
			return nil
		}
	}
	return Handlers[*conn]{
		Call: rec(KindCall), Result: rec(KindResult), Error: rec(KindError),
		Event: rec(KindEvent), Ask: rec(KindAsk), Answer: rec(KindAnswer),
		Batch: rec(KindBatch), Ping: rec(KindPing), Pong: rec(KindPong),
		Join: rec(KindJoin), Leave: rec(KindLeave), Emit: rec(KindEmit),
		Capabilities: rec(KindCapabilities),
	}
}

func TestDispatchCallsTheKindsHandler(t *testing.T) {
	d := NewDispatcher(recordingHandlers())
	for k := KindCall; k <= KindCapabilities; k++ {
		var c conn
		body := []byte{'x', byte(k)}
		if err := d.Dispatch(&c, append([]byte{byte(k)}, body...)); err != nil {
			t.Fatalf("%v: %v", k, err)
		}
		if len(c.kinds) != 1 || c.kinds[0] != k || !bytes.Equal(c.bodies[0], body) {
			t.Fatalf("%v: handlers saw %v %q", k, c.kinds, c.bodies)
		}
	}
}

func TestDispatchErrors(t *testing.T) {
	d := NewDispatcher(Handlers[*conn]{Call: func(*conn, []byte) error { return nil }})
	var c conn
	if err := d.Dispatch(&c, nil); !errors.Is(err, ErrEmptyPacket) {
		t.Fatalf("empty packet: %v", err)
	}
	for _, b := range []byte{0, 14, 200, 255} {
		var unknown *UnknownKindError
		if err := d.Dispatch(&c, []byte{b, 1}); !errors.As(err, &unknown) || unknown.Kind != Kind(b) {
			t.Fatalf("kind byte %d: %v, want *UnknownKindError", b, err)
		}
	}
	for k := KindResult; k <= KindCapabilities; k++ {
		var unhandled *UnhandledKindError
		if err := d.Dispatch(&c, []byte{byte(k)}); !errors.As(err, &unhandled) || unhandled.Kind != k {
			t.Fatalf("%v without a handler: %v, want *UnhandledKindError", k, err)
		}
	}
}

func TestDispatchReturnsTheHandlersError(t *testing.T) {
	errBad := errors.New("bad call")
	d := NewDispatcher(Handlers[*conn]{Call: func(*conn, []byte) error { return errBad }})
	if err := d.Dispatch(nil, []byte{byte(KindCall)}); err != errBad {
		t.Fatalf("got %v, want the handler's error unwrapped", err)
	}
}

func TestDispatchAllocatesNothing(t *testing.T) {
	var n int
	count := func(_ *int, body []byte) error { n += len(body); return nil }
	d := NewDispatcher(Handlers[*int]{Call: count, Capabilities: count})
	packets := [][]byte{{byte(KindCall), 1}, {byte(KindCapabilities), 2, 3}}
	allocs := testing.AllocsPerRun(100, func() {
		for _, p := range packets {
			if err := d.Dispatch(&n, p); err != nil {
				t.Fatal(err)
			}
		}
	})
	if allocs != 0 {
		t.Fatalf("Dispatch allocates %v times", allocs)
	}
}

// TestDispatchKindMatchesDispatch checks that dispatching a split kind and
// body does what dispatching the whole packet does, for every kind byte.
func TestDispatchKindMatchesDispatch(t *testing.T) {
	d := NewDispatcher(recordingHandlers())
	body := []byte("b")
	for k := range 256 {
		var c1, c2 conn
		err1 := d.Dispatch(&c1, append([]byte{byte(k)}, body...))
		err2 := d.DispatchKind(&c2, Kind(k), body)
		if (err1 == nil) != (err2 == nil) || (err1 != nil && err1.Error() != err2.Error()) {
			t.Fatalf("kind %d: Dispatch %v, DispatchKind %v", k, err1, err2)
		}
		if len(c1.kinds) != len(c2.kinds) || (len(c1.kinds) == 1 && c1.kinds[0] != c2.kinds[0]) {
			t.Fatalf("kind %d: handlers saw %v and %v", k, c1.kinds, c2.kinds)
		}
	}
}

// BenchmarkDispatch measures Dispatch on its own, in the usual way, over
// packets of a mix of all kinds. (BenchmarkKindShapes runs the Dispatcher
// beside the shapes.)
func BenchmarkDispatch(b *testing.B) {
	d := newBenchDispatcher()
	seq := mixedSeq(13)
	var packets [numKinds][]byte
	for k := range packets {
		packets[k] = append([]byte{byte(k)}, make([]byte, 32)...)
	}
	var s sink
	b.ReportAllocs()
	for i := range b.N {
		if err := d.Dispatch(&s, packets[seq[i%len(seq)]]); err != nil {
			b.Fatal(err)
		}
	}
}
