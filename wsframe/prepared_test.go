package wsframe

import (
	"bytes"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
)

func TestPreparedFrame(t *testing.T) {
	for _, n := range []int{0, 125, 126, 70000} {
		payload := bytes.Repeat([]byte{'p'}, n)
		p, err := NewPrepared(OpText, payload)
		if err != nil {
			t.Fatal(err)
		}
		want := AppendFrame(nil, OpText, payload, Fin)
		if !bytes.Equal(p.Frame(), want) {
			t.Fatalf("%d bytes: Frame differs from AppendFrame", n)
		}
		if !bytes.Equal(append(append([]byte(nil), p.Header()...), p.Payload()...), want) {
			t.Fatalf("%d bytes: Header+Payload differs from AppendFrame", n)
		}
		if n > 0 && &p.Payload()[0] != &payload[0] {
			t.Fatalf("%d bytes: payload was copied", n)
		}
		if p.Opcode() != OpText {
			t.Fatal("Opcode")
		}
	}
}

// TestNewPreparedAfter: a payload built after free headroom frames in
// place: the same frame as AppendFrame for every header size, in buf's
// own bytes, with Frame allocating nothing; too little headroom is
// refused.
func TestNewPreparedAfter(t *testing.T) {
	for _, n := range []int{0, 125, 126, 65535, 65536, 70000} {
		for _, headroom := range []int{10, MaxHeaderSize} {
			buf := append(make([]byte, headroom), bytes.Repeat([]byte{'p'}, n)...)
			p, err := NewPreparedAfter(OpBinary, buf, headroom)
			if err != nil {
				t.Fatal(err)
			}
			want := AppendFrame(nil, OpBinary, buf[headroom:], Fin)
			if !bytes.Equal(p.Frame(), want) {
				t.Fatalf("%d bytes after %d: Frame differs from AppendFrame", n, headroom)
			}
			if f := p.Frame(); &f[len(f)-1] != &buf[len(buf)-1] {
				t.Fatalf("%d bytes after %d: the frame is not buf's bytes", n, headroom)
			}
			if a := testing.AllocsPerRun(10, func() { p.Frame() }); a != 0 {
				t.Fatalf("Frame allocates %v", a)
			}
			if !bytes.Equal(p.Payload(), buf[headroom:]) || p.Opcode() != OpBinary {
				t.Fatal("Payload or Opcode")
			}
		}
	}
	if _, err := NewPreparedAfter(OpBinary, make([]byte, 9+200), 9); !errors.Is(err, ErrPreparedHeadroom) {
		t.Fatalf("headroom 9: %v, want ErrPreparedHeadroom", err)
	}
	if _, err := NewPreparedAfter(OpBinary, make([]byte, 5), 10); !errors.Is(err, ErrPreparedHeadroom) {
		t.Fatalf("headroom past the buffer: %v, want ErrPreparedHeadroom", err)
	}
	if _, err := NewPreparedAfter(OpContinuation, make([]byte, 20), 10); !errors.Is(err, ErrPreparedOpcode) {
		t.Fatalf("continuation: %v, want ErrPreparedOpcode", err)
	}
}

func TestNewPreparedRejectsUnframeableOpcodes(t *testing.T) {
	for _, c := range []struct {
		op Opcode
		n  int
	}{{OpContinuation, 1}, {3, 1}, {0xB, 1}, {OpPing, 126}} {
		if _, err := NewPrepared(c.op, make([]byte, c.n)); !errors.Is(err, ErrPreparedOpcode) {
			t.Errorf("%v with %d bytes: %v", c.op, c.n, err)
		}
	}
	if _, err := NewPrepared(OpPing, make([]byte, 125)); err != nil {
		t.Error(err)
	}
}

// Many writers ask for the frame and for variants at once: each is built
// exactly once, everyone gets the same bytes, and the race detector sees
// no unsynchronised access.
func TestPreparedConcurrentWriters(t *testing.T) {
	payload := bytes.Repeat([]byte("broadcast "), 100)
	p, _ := NewPrepared(OpBinary, payload)
	var builds [Variants]atomic.Int32
	build := func(slot int) func(Opcode, []byte) ([]byte, error) {
		return func(op Opcode, pl []byte) ([]byte, error) {
			builds[slot].Add(1)
			if &pl[0] != &payload[0] {
				t.Error("build got a copy of the payload")
			}
			return AppendFrame(nil, op, pl[:slot+1], Fin|Rsv1), nil
		}
	}
	const writers = 32
	frames := make([][]byte, writers)
	variants := make([][Variants][]byte, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			frames[w] = p.Frame()
			for i := range Variants {
				slot := (i + w) % Variants
				f, err := p.Variant(slot, build(slot))
				if err != nil {
					t.Error(err)
				}
				variants[w][slot] = f
			}
		})
	}
	wg.Wait()
	for w := range writers {
		if &frames[w][0] != &frames[0][0] {
			t.Fatal("writers got different frame buffers")
		}
		for s := range Variants {
			if &variants[w][s][0] != &variants[0][s][0] {
				t.Fatalf("slot %d: writers got different buffers", s)
			}
		}
	}
	for s := range Variants {
		if n := builds[s].Load(); n != 1 {
			t.Errorf("slot %d built %d times", s, n)
		}
		if got := p.LoadVariant(s); !bytes.Equal(got, variants[0][s]) {
			t.Errorf("LoadVariant(%d) differs", s)
		}
	}
}

func TestPreparedVariantFailureIsRetried(t *testing.T) {
	p, _ := NewPrepared(OpText, []byte("x"))
	if p.LoadVariant(3) != nil {
		t.Fatal("empty slot not nil")
	}
	boom := errors.New("compressor failed")
	if _, err := p.Variant(3, func(Opcode, []byte) ([]byte, error) { return nil, boom }); err != boom {
		t.Fatalf("failed build: %v", err)
	}
	if p.LoadVariant(3) != nil {
		t.Fatal("failed build stored a frame")
	}
	f, err := p.Variant(3, func(op Opcode, pl []byte) ([]byte, error) { return AppendFrame(nil, op, pl, Fin), nil })
	if err != nil || !bytes.Equal(f, p.Frame()) {
		t.Fatalf("retry: % x %v", f, err)
	}
	for _, slot := range []int{-1, Variants} {
		if _, err := p.Variant(slot, nil); !errors.Is(err, ErrVariantSlot) {
			t.Errorf("slot %d: %v", slot, err)
		}
		if p.LoadVariant(slot) != nil {
			t.Errorf("LoadVariant(%d) not nil", slot)
		}
	}
}

func TestPreparedVariantReadPathAllocatesNothing(t *testing.T) {
	p, _ := NewPrepared(OpText, []byte("hello"))
	build := func(op Opcode, pl []byte) ([]byte, error) { return AppendFrame(nil, op, pl, Fin|Rsv1), nil }
	if _, err := p.Variant(5, build); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if f, _ := p.Variant(5, build); len(f) == 0 {
			t.Fatal("empty")
		}
		if len(p.Frame()) == 0 {
			t.Fatal("empty")
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations on the read path", allocs)
	}
}
