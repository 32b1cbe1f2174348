package deflatecache

import (
	"bytes"
	"errors"
	"runtime"
	"testing"

	"github.com/hotpath-go/hotpath/wsframe"
)

// bitWriter writes a DEFLATE stream by hand: fields least significant bit
// first, Huffman codes most significant bit first (RFC 1951 §3.1.1).
type bitWriter struct {
	out []byte
	acc uint64
	n   uint
}

func (w *bitWriter) bits(v uint64, n uint) {
	w.acc |= v << w.n
	w.n += n
	for w.n >= 8 {
		w.out = append(w.out, byte(w.acc))
		w.acc >>= 8
		w.n -= 8
	}
}

func (w *bitWriter) code(c uint64, n uint) {
	var r uint64
	for i := range n {
		r |= (c >> i & 1) << (n - 1 - i)
	}
	w.bits(r, n)
}

func (w *bitWriter) flush() {
	if w.n > 0 {
		w.bits(0, 8-w.n)
	}
}

// bomb returns an RFC 7692 message payload of about reps/4 bytes that
// inflates to 1+258*reps zero bytes: one dynamic block whose code gives
// length 258 a 1-bit code and the only distance (1) a 1-bit code, so each
// 258 bytes of output cost 2 bits of input, the densest DEFLATE allows.
func bomb(reps int) []byte {
	var w bitWriter
	w.bits(0, 1)  // BFINAL 0
	w.bits(2, 2)  // BTYPE 10: dynamic Huffman codes
	w.bits(29, 5) // HLIT: 286 literal/length codes
	w.bits(0, 5)  // HDIST: 1 distance code
	w.bits(14, 4) // HCLEN: 18 code length codes
	// Code lengths for the code length alphabet, in the order of RFC 1951
	// §3.2.7: 18 gets 1 bit, 1 and 2 get 2 bits.
	for _, sym := range []int{16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1} {
		switch sym {
		case 18:
			w.bits(1, 3)
		case 1, 2:
			w.bits(2, 3)
		default:
			w.bits(0, 3)
		}
	}
	// Canonical code length codes: 18 = 0, 1 = 10, 2 = 11.
	len1, len2, zeros := func() { w.code(0b10, 2) }, func() { w.code(0b11, 2) }, func(n int) { w.code(0, 1); w.bits(uint64(n-11), 7) }
	len2()     // literal 0: 2 bits
	zeros(138) // literals 1..138
	zeros(117) // literals 139..255
	len2()     // 256, end of block: 2 bits
	zeros(28)  // lengths 257..284
	len1()     // 285, length 258: 1 bit
	len1()     // distance 0 (distance 1): 1 bit
	// Literal/length codes: 285 = 0, 0 = 10, 256 = 11; distance 0 = 0.
	w.code(0b10, 2) // one zero byte
	for left := 2 * reps; left > 0; left -= 32 {
		w.bits(0, uint(min(left, 32))) // 285 then distance 0, reps times: all zero bits
	}
	w.code(0b11, 2) // end of block
	w.bits(0, 3)    // an empty stored block's header; RFC 7692 strips the rest
	w.flush()
	return w.out
}

func TestBombConstruction(t *testing.T) {
	got, dist, err := traceInflate(append(bomb(10), tail...), nil)
	if err != nil || len(got) != 1+258*10 || dist != 1 || bytes.IndexByte(got, 1) >= 0 {
		t.Fatalf("%d bytes, distance %d, %v", len(got), dist, err)
	}
	got, err = mustConn(t, Params{}, wsframe.Server, Options{}).Inflate(nil, bomb(10), 0)
	if err != nil || len(got) != 1+258*10 {
		t.Fatalf("%d bytes, %v", len(got), err)
	}
}

// TestInflateBomb: 1 MiB of payload that would inflate to 1 GiB costs at
// most the 1 MiB cap in memory, and fails with ErrTooLarge.
func TestInflateBomb(t *testing.T) {
	const limit = 1 << 20
	payload := bomb(1 << 22)
	t.Logf("payload %d bytes, inflates to %d", len(payload), 1+258<<22)
	for _, takeover := range []bool{false, true} {
		c := mustConn(t, Params{ClientNoContextTakeover: !takeover}, wsframe.Server, Options{})
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		out, err := c.Inflate(nil, payload, limit)
		runtime.ReadMemStats(&after)
		if !errors.Is(err, ErrTooLarge) || out != nil {
			t.Fatalf("takeover=%v: %d bytes, %v", takeover, len(out), err)
		}
		// The output buffer doubles up to the cap: 2 MiB at most, plus a
		// pooled inflater (about 40 KiB) if the pool was empty.
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 2*limit+256<<10 {
			t.Fatalf("takeover=%v: %d bytes allocated for a %d-byte cap", takeover, alloc, limit)
		}
	}
}

// TestInflateCapExact: a message of exactly the cap passes, one byte more
// fails, and the output never grows past the cap.
func TestInflateCapExact(t *testing.T) {
	msg := document(3, 10000)
	comp, _ := mustConn(t, Params{}, wsframe.Client, Options{}).AppendCompressed(nil, msg)
	c := mustConn(t, Params{ClientNoContextTakeover: true}, wsframe.Server, Options{})
	out, err := c.Inflate(nil, comp, int64(len(msg)))
	if err != nil || !bytes.Equal(out, msg) || cap(out) > len(msg) {
		t.Fatalf("at the cap: %d bytes (cap %d), %v", len(out), cap(out), err)
	}
	prefix := []byte("prefix")
	out, err = c.Inflate(prefix, comp, int64(len(msg)-1))
	if !errors.Is(err, ErrTooLarge) || !bytes.Equal(out, prefix) {
		t.Fatalf("one byte over: %q %v", out, err)
	}
	// Appending keeps what dst held.
	out, err = c.Inflate(prefix, comp, 0)
	if err != nil || !bytes.Equal(out, append([]byte("prefix"), msg...)) {
		t.Fatalf("append: %v", err)
	}
}

// farDistance is a fixed-code block with one literal and then a match at
// distance 4: three bytes before anything was written.
func farDistance() []byte {
	var w bitWriter
	w.bits(0, 1)        // BFINAL 0
	w.bits(1, 2)        // BTYPE 01: fixed codes
	w.code(0x30+'a', 8) // literal 'a'
	w.code(257-256, 7)  // length 3
	w.code(3, 5)        // distance code 3: distance 4
	w.code(0, 7)        // end of block
	w.bits(0, 3)        // empty stored block header
	w.flush()
	return w.out
}

func TestInflateCorruptAndTruncated(t *testing.T) {
	msg := document(4, 3000)
	comp, _ := mustConn(t, Params{}, wsframe.Client, Options{}).AppendCompressed(nil, msg)
	for name, payload := range map[string][]byte{
		"truncated":           comp[:len(comp)/2],
		"reserved block type": {0x07},
		"bad stored length":   {0x00, 0x05, 0x00, 0x05, 0x00, 'a'},
		"distance too far":    farDistance(),
		"garbage":             noise(5, 200),
	} {
		c := mustConn(t, Params{ClientNoContextTakeover: true}, wsframe.Server, Options{})
		if out, err := c.Inflate(nil, payload, 0); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %d bytes, %v", name, len(out), err)
		}
	}
	if out, err := mustConn(t, Params{}, wsframe.Server, Options{}).Inflate(nil, nil, 0); err != nil || len(out) != 0 {
		t.Errorf("empty payload: %q %v", out, err)
	}
}

// TestSteadyStateAllocations: with a buffer of enough capacity, inflating
// and compressing allocate nothing once the pools are warm.
func TestSteadyStateAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	msg := document(6, 2000)
	for _, takeover := range []bool{false, true} {
		p := Params{ServerNoContextTakeover: !takeover, ClientNoContextTakeover: !takeover}
		server, client := pair(t, p, Options{})
		dst := make([]byte, 0, 8192)
		var comp []byte
		if a := testing.AllocsPerRun(100, func() {
			comp, _ = client.AppendCompressed(dst[:0], msg)
		}); a != 0 {
			t.Errorf("takeover=%v: AppendCompressed allocates %.1f times", takeover, a)
		}
		var frame []byte
		if a := testing.AllocsPerRun(100, func() {
			frame, _ = server.AppendCompressedFrame(dst[:0], wsframe.OpText, msg)
		}); a != 0 {
			t.Errorf("takeover=%v: server AppendCompressedFrame allocates %.1f times", takeover, a)
		}
		if a := testing.AllocsPerRun(100, func() {
			frame, _ = client.AppendCompressedFrame(dst[:0], wsframe.OpText, msg)
		}); a != 0 {
			t.Errorf("takeover=%v: client AppendCompressedFrame allocates %.1f times", takeover, a)
		}
		_ = frame
		// Inflating the same compressed message again and again is valid
		// only without takeover; with it, feed a fresh one each time, from
		// a pair whose histories are in step.
		server, client = pair(t, p, Options{})
		if !takeover {
			comp, _ = client.AppendCompressed(dst[:0], msg)
		}
		out := make([]byte, 0, 8192)
		if a := testing.AllocsPerRun(100, func() {
			if takeover {
				comp, _ = client.AppendCompressed(dst[:0], msg)
			}
			var err error
			if out, err = server.Inflate(out[:0], comp, 0); err != nil {
				t.Fatal(err)
			}
		}); a != 0 {
			t.Errorf("takeover=%v: Inflate allocates %.1f times", takeover, a)
		}
	}
	pm, _ := wsframe.NewPrepared(wsframe.OpText, msg)
	c := mustConn(t, Params{ServerNoContextTakeover: true}, wsframe.Server, Options{})
	c.BroadcastFrame(pm)
	if a := testing.AllocsPerRun(100, func() { c.BroadcastFrame(pm) }); a != 0 {
		t.Errorf("BroadcastFrame allocates %.1f times", a)
	}
}

// TestInflateNoStateBetweenMessages: pooled decoders are shared by every
// connection, so a message must inflate the same whatever was inflated
// before it. The target declares an empty distance code and then uses it:
// corrupt on its own, and corrupt after anything else. (klauspost/compress
// v1.20.4 decodes it with the distance code of the previous stream
// instead; see the inflater type.)
func TestInflateNoStateBetweenMessages(t *testing.T) {
	previous := []byte{0xec, 0x19, 0x82, 0xa0, 0xec, 0xac, 0x29, 0x19, 0x06, 0x69, 0x8c, 0xec, 0xbb, 0x31, 0xa8, 0xb2, 0xa4, 0x47, 0xfe, 0x18, 0xf6, 0x46}
	target := []byte("2A!2\x00d1")
	history := []byte("Hello")
	fresh := inflaters.New().(*inflater)
	want, wantErr := fresh.appendInflate(nil, target, history, 36)
	if wantErr != ErrCorrupt {
		t.Fatalf("target alone: %q %v", want, wantErr)
	}
	used := inflaters.New().(*inflater)
	used.appendInflate(nil, previous, nil, 86)
	for i := range 3 {
		got, err := used.appendInflate(nil, target, history, 36)
		if err != wantErr || !bytes.Equal(got, want) {
			t.Fatalf("after another stream, attempt %d: %q %v", i, got, err)
		}
	}
}
