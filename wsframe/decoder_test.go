package wsframe

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"
)

// mixedStream is a client stream with every kind of frame: small and large
// payloads in all three length forms, fragmented text split inside
// characters, control frames between fragments, empty frames.
func mixedStream() ([]byte, []got) {
	big := strings.Repeat("0123456789abcdef", 4200)   // 67200 bytes: 64-bit length
	mid := strings.Repeat("\xce\xba\xe1\xbd\xb9", 40) // 200 bytes: 16-bit length
	in := cat(
		clientFrame(OpText, "hello", Fin),
		clientFrame(OpBinary, "", Fin),
		clientFrame(OpText, mid[:7], 0),
		clientFrame(OpPing, "ping", Fin),
		clientFrame(OpContinuation, mid[7:101], 0),
		clientFrame(OpContinuation, "", 0),
		clientFrame(OpPong, "", Fin),
		clientFrame(OpContinuation, mid[101:], Fin),
		clientFrame(OpBinary, big, Fin),
		clientFrame(OpText, big[:126], Fin),
		clientFrame(OpBinary, big[:1000], 0),
		clientFrame(OpContinuation, big[1000:], Fin),
		clientFrame(OpClose, "\x03\xe9going", Fin),
	)
	want := []got{
		{op: OpText, payload: "hello"},
		{op: OpBinary},
		{op: OpPing, payload: "ping"},
		{op: OpPong},
		{op: OpText, payload: mid},
		{op: OpBinary, payload: big},
		{op: OpText, payload: big[:126]},
		{op: OpBinary, payload: big},
		{op: OpClose, code: CloseGoingAway, payload: "\x03\xe9going"},
	}
	return in, want
}

func sameMessages(t *testing.T, label string, got, want []got) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d messages, want %d", label, len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("%s: message %d = %v/%d bytes, want %v/%d bytes", label, i, got[i].op, len(got[i].payload), want[i].op, len(want[i].payload))
		}
	}
}

// drainSource decodes every message src holds now.
func drainSource(d *Decoder, src Source, buf *[]byte, out []got) ([]got, error) {
	for {
		m, err := d.NextMessage(src, buf)
		if err != nil {
			return out, err
		}
		out = append(out, got{m.Opcode, m.Compressed, m.CloseCode, string(m.Payload)})
	}
}

func TestDecodeMixedStreamWhole(t *testing.T) {
	in, want := mixedStream()
	msgs, err := decodeAll(Config{MaxMessageSize: 1 << 17}, in)
	if err != nil {
		t.Fatal(err)
	}
	sameMessages(t, "whole", msgs, want)
}

// The Decoder runs on a Source split at arbitrary points: headers
// straddling segments, payloads spread over several, frames arriving a
// segment at a time.
func TestDecodeFromSegmentedSource(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	pristine, want := mixedStream()
	for trial := range 100 {
		in := append([]byte(nil), pristine...)
		var cuts []int
		for range 1 + r.IntN(40) {
			cuts = append(cuts, r.IntN(len(in)))
		}
		if trial%3 == 0 {
			for i := range 40 { // many cuts in the first frames
				cuts = append(cuts, i)
			}
		}
		all := newFakeQueue(in, cuts...)
		d := NewDecoder(Config{MaxMessageSize: 1 << 17})
		var buf []byte
		var out []got
		var err error
		q := &fakeQueue{}
		// Segments arrive one at a time; decode after each.
		for _, seg := range all.segs {
			q.Push(seg)
			out, err = drainSource(d, q, &buf, out)
			if !errors.Is(err, ErrNeedMore) && !errors.Is(err, io.EOF) {
				t.Fatalf("trial %d: %v", trial, err)
			}
		}
		if err != io.EOF || q.Len() != 0 {
			t.Fatalf("trial %d: ended with %v, %d bytes left", trial, err, q.Len())
		}
		sameMessages(t, fmt.Sprintf("trial %d", trial), out, want)
	}
}

// Frames that each lie in one segment are decoded without a copy: the
// payload is the segment's memory, unmasked in place.
func TestDecodeFromSourceZeroCopy(t *testing.T) {
	f1 := clientFrame(OpText, "first message", Fin)
	f2 := clientFrame(OpBinary, strings.Repeat("x", 300), Fin)
	q := &fakeQueue{}
	q.Push(f1)
	q.Push(f2)
	seg := q.segs[0]
	d := NewDecoder(Config{})
	m, err := d.NextMessage(q, nil)
	if err != nil || string(m.Payload) != "first message" {
		t.Fatalf("%q %v", m.Payload, err)
	}
	if &m.Payload[0] != &seg[6] {
		t.Error("payload is not the segment's memory")
	}
	if _, err := d.NextMessage(q, nil); err != nil {
		t.Fatal(err)
	}
	if q.copies != 0 {
		t.Errorf("%d copies for frames inside segments", q.copies)
	}
	// A frame spread over three segments costs exactly one copy.
	f3 := clientFrame(OpBinary, strings.Repeat("y", 100), Fin)
	q = newFakeQueue(f3, 1, 50)
	if m, err := d.NextMessage(q, nil); err != nil || len(m.Payload) != 100 {
		t.Fatal(err)
	}
	if q.copies != 2 { // the 2-byte header Peek across segments 1|2, then Next
		t.Errorf("%d copies for a frame over three segments, want 2", q.copies)
	}
}

// The slice path, fed a growing buffer as a read loop would, reports n and
// Need consistently and yields the same messages.
func TestDecodeSliceIncremental(t *testing.T) {
	pristine, want := mixedStream()
	for _, step := range []int{1, 2, 3, 7, 100, 4096} {
		in := append([]byte(nil), pristine...)
		d := NewDecoder(Config{MaxMessageSize: 1 << 17})
		var buf, pending []byte
		var out []got
		for off := 0; off < len(in); {
			end := min(off+step, len(in))
			pending = append(pending, in[off:end]...)
			off = end
			for {
				m, n, err := d.DecodeMessage(pending, &buf)
				pending = pending[n:]
				if errors.Is(err, ErrNeedMore) {
					if d.Need() < 1 {
						t.Fatalf("step %d: Need() = %d", step, d.Need())
					}
					break
				}
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				out = append(out, got{m.Opcode, m.Compressed, m.CloseCode, string(m.Payload)})
			}
		}
		sameMessages(t, fmt.Sprintf("step %d", step), out, want)
	}
}

func TestNeed(t *testing.T) {
	d := NewDecoder(Config{})
	frame := clientFrame(OpBinary, strings.Repeat("z", 300), Fin) // 8-byte header
	for k, want := range map[int]int{0: 2, 1: 1, 2: 6, 5: 3, 8: 300, 108: 200} {
		if _, _, err := d.DecodeFrame(frame[:k]); !errors.Is(err, ErrNeedMore) || d.Need() != want {
			t.Errorf("prefix %d: %v, Need %d, want %d", k, err, d.Need(), want)
		}
	}
	q := newFakeQueue(frame[:108], 3)
	if _, err := d.NextFrame(q); !errors.Is(err, ErrNeedMore) || d.Need() != 200 {
		t.Errorf("source: %v, Need %d", err, d.Need())
	}
}

func TestErrorsAreSticky(t *testing.T) {
	d := NewDecoder(Config{})
	bad := serverFrame(OpText, "unmasked", Fin)
	if _, _, err := d.DecodeMessage(bad, nil); !errors.Is(err, ErrUnmaskedFrame) {
		t.Fatal(err)
	}
	good := clientFrame(OpText, "fine", Fin)
	if _, _, err := d.DecodeMessage(good, nil); !errors.Is(err, ErrUnmaskedFrame) {
		t.Fatalf("after failure: %v", err)
	}
	if _, err := d.NextMessage(newFakeQueue(good), nil); !errors.Is(err, ErrUnmaskedFrame) {
		t.Fatalf("after failure, source: %v", err)
	}
	d.Reset(Config{})
	if m, _, err := d.DecodeMessage(good, nil); err != nil || string(m.Payload) != "fine" {
		t.Fatalf("after Reset: %v", err)
	}
}

// A fragmented message is assembled into the caller's buffer; once it is
// large enough, decoding allocates nothing, and between messages the
// decoder holds no buffer.
func TestAssemblyBufferReused(t *testing.T) {
	msg := cat(clientFrame(OpText, "frag", 0), clientFrame(OpPing, "", Fin), clientFrame(OpContinuation, "mented", Fin))
	d := NewDecoder(Config{})
	var buf []byte
	decode := func() {
		in := append([]byte(nil), msg...)[:len(msg)] // pristine copy per round
		for len(in) > 0 {
			m, n, err := d.DecodeMessage(in, &buf)
			in = in[n:]
			if err != nil {
				t.Fatal(err)
			}
			if m.Opcode == OpText && string(m.Payload) != "fragmented" {
				t.Fatalf("payload %q", m.Payload)
			}
		}
	}
	decode()
	if string(buf) != "fragmented" || d.msg != nil {
		t.Fatalf("buf %q, decoder holds %q", buf, d.msg)
	}
	first := &buf[:1][0]
	decode()
	if &buf[:1][0] != first {
		t.Error("second message did not reuse the buffer")
	}
}

func TestDecoderIsSmall(t *testing.T) {
	if size := unsafe.Sizeof(Decoder{}); size > 256 {
		t.Fatalf("Decoder is %d bytes", size)
	}
	if size := unsafe.Sizeof(UTF8Validator{}); size != 4 {
		t.Fatalf("UTF8Validator is %d bytes", size)
	}
}

// Decoding a stream of masked text frames allocates nothing per message,
// from a slice and from a Source.
func TestDecodeAllocatesNothing(t *testing.T) {
	payload := []byte(`{"type":"event","room":"lobby","data":{"n":1,"text":"caf` + "\xc3\xa9" + `"}}`)
	var stream []byte
	for range 100 {
		stream = AppendMaskedFrame(stream, OpText, payload, Fin, testKey)
	}
	work := make([]byte, len(stream))
	d := NewDecoder(Config{})
	var buf []byte
	allocs := testing.AllocsPerRun(50, func() {
		copy(work, stream)
		in := work
		for len(in) > 0 {
			_, n, err := d.DecodeMessage(in, &buf)
			if err != nil {
				t.Fatal(err)
			}
			in = in[n:]
		}
	})
	if allocs != 0 {
		t.Errorf("slice path: %v allocations per 100 messages", allocs)
	}
	q := &fakeQueue{}
	allocs = testing.AllocsPerRun(50, func() {
		copy(work, stream)
		q.PushShared(work)
		for q.Len() > 0 {
			if _, err := d.NextMessage(q, &buf); err != nil {
				t.Fatal(err)
			}
		}
	})
	if allocs != 0 {
		t.Errorf("source path: %v allocations per 100 messages", allocs)
	}
}

// Text validated early, while its frame was incomplete, is not unmasked or
// validated a second time when the frame completes.
func TestEarlyValidationIsNotRepeated(t *testing.T) {
	text := strings.Repeat("\xce\xba\xe1\xbd\xb9 ", 50)
	for cut := 7; cut < 6+len(text); cut += 13 {
		frame := clientFrame(OpText, text, Fin)
		d := NewDecoder(Config{})
		if _, _, err := d.DecodeFrame(frame[:cut]); !errors.Is(err, ErrNeedMore) {
			t.Fatalf("cut %d: %v", cut, err)
		}
		f, _, err := d.DecodeFrame(frame)
		if err != nil || string(f.Payload) != text {
			t.Fatalf("cut %d: %q %v", cut, f.Payload, err)
		}
	}
}

func TestFrameAPI(t *testing.T) {
	in := cat(clientFrame(OpText, "ab", 0), clientFrame(OpContinuation, "cd", Fin))
	d := NewDecoder(Config{})
	f, n, err := d.DecodeFrame(in)
	if err != nil || f.Header.Fin() || f.Header.Opcode != OpText || string(f.Payload) != "ab" {
		t.Fatalf("%+v %v", f, err)
	}
	f, _, err = d.DecodeFrame(in[n:])
	if err != nil || !f.Header.Fin() || f.Header.Opcode != OpContinuation || !bytes.Equal(f.Payload, []byte("cd")) {
		t.Fatalf("%+v %v", f, err)
	}
}
