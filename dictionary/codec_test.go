package dictionary

import (
	"bytes"
	stdflate "compress/flate"
	"errors"
	"io"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
)

type codecCase struct {
	name  string
	codec Codec
}

// testCodecs returns both codecs, without a dictionary, with the router's,
// and with the router's learned one.
func testCodecs(t testing.TB, opts CodecOptions) []codecCase {
	t.Helper()
	plain, err := Build(testSource(), BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	learned, err := Build(testSource(), BuildOptions{Samples: routerSamples(7, 1000)})
	if err != nil {
		t.Fatal(err)
	}
	var out []codecCase
	for _, d := range []struct {
		name string
		dict *Dictionary
	}{{"nodict", nil}, {"router", plain}, {"learned", learned}} {
		z, err := NewZstd(d.dict, opts)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { z.Close() })
		out = append(out,
			codecCase{"deflate/" + d.name, NewDeflate(d.dict, opts)},
			codecCase{"zstd/" + d.name, z})
	}
	return out
}

// randomMessages mixes router messages, random bytes, runs, text with
// long repeats, and sizes from empty to past one deflate block.
func randomMessages(r *rand.Rand, n int) [][]byte {
	out := routerSamples(r.Uint64(), n/2)
	out = append(out, nil, []byte{0}, eventMessage(), callMessage(), historyAnswer(), membersAnswer())
	for len(out) < n {
		size := r.IntN(1 << (4 + r.IntN(14)))
		m := make([]byte, size)
		switch r.IntN(4) {
		case 0:
			for i := range m {
				m[i] = byte(r.Uint32())
			}
		case 1:
			for i := range m {
				m[i] = "ab"[r.IntN(2)]
			}
		case 2:
			for i := 0; i < size; {
				w := words[r.IntN(len(words))]
				i += copy(m[i:], w+" ")
			}
		case 3:
			// all one byte: matches of the longest length, back to back
		}
		out = append(out, m)
	}
	return out
}

func TestRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	msgs := randomMessages(r, 300)
	for _, c := range testCodecs(t, CodecOptions{Threshold: 1}) {
		t.Run(c.name, func(t *testing.T) {
			compressed := 0
			for i, m := range msgs {
				prefix := []byte("prefix")
				out, ok := c.codec.AppendCompress(prefix, m)
				if !bytes.HasPrefix(out, []byte("prefix")) {
					t.Fatalf("message %d: AppendCompress lost dst's bytes", i)
				}
				if !ok {
					if len(out) != len(prefix) {
						t.Fatalf("message %d: not compressed, yet dst grew", i)
					}
					continue
				}
				compressed++
				if len(out)-len(prefix) >= len(m) {
					t.Fatalf("message %d: %d bytes compressed to %d", i, len(m), len(out)-len(prefix))
				}
				back, err := c.codec.AppendDecompress([]byte("x"), out[len(prefix):])
				if err != nil {
					t.Fatalf("message %d (%d bytes): %v", i, len(m), err)
				}
				if !bytes.Equal(back[1:], m) || back[0] != 'x' {
					t.Fatalf("message %d (%d bytes): round trip differs", i, len(m))
				}
			}
			if compressed < len(msgs)/3 {
				t.Fatalf("only %d of %d messages compressed", compressed, len(msgs))
			}
		})
	}
}

// TestDeflateStandardLibraryAgrees decodes the deflate output with
// compress/flate of the standard library, an inflater independent of the
// one the codec uses: RFC 1951 §3.2.6 fixed and §3.2.7 dynamic blocks,
// distances into the preset dictionary up to the 32768 of §3.2.5.
func TestDeflateStandardLibraryAgrees(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	msgs := randomMessages(r, 200)
	// A full-size dictionary, and messages that reach its first bytes
	// from past its end: only distances up to 32768 may be used.
	full := make([]byte, MaxSize)
	for i := range full {
		full[i] = byte(r.Uint32())
	}
	far := append(append([]byte(nil), full[:300]...), full[:300]...)
	msgs = append(msgs, far, append(make([]byte, 70000), full[:5000]...))
	fullDict, err := New(full)
	if err != nil {
		t.Fatal(err)
	}
	router, err := Build(testSource(), BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sawFixed, sawDynamic := false, false
	for _, d := range []*Dictionary{nil, router, fullDict} {
		c := NewDeflate(d, CodecOptions{Threshold: 1})
		var dictBytes []byte
		if d != nil {
			dictBytes = d.data
		}
		for i, m := range msgs {
			out, ok := c.AppendCompress(nil, m)
			if !ok {
				continue
			}
			switch out[0] >> 1 & 3 {
			case 1:
				sawFixed = true
			case 2:
				sawDynamic = true
			}
			fr := stdflate.NewReaderDict(bytes.NewReader(out), dictBytes)
			back, err := io.ReadAll(fr)
			if err != nil || !bytes.Equal(back, m) {
				t.Fatalf("message %d (%d bytes): compress/flate: %v, equal=%v", i, len(m), err, bytes.Equal(back, m))
			}
		}
	}
	if !sawFixed || !sawDynamic {
		t.Fatalf("fixed blocks seen: %v, dynamic: %v; both must be tested", sawFixed, sawDynamic)
	}
}

func TestThreshold(t *testing.T) {
	for _, c := range testCodecs(t, CodecOptions{}) {
		m := bytes.Repeat([]byte("a"), DefaultThreshold-1)
		if out, ok := c.codec.AppendCompress(nil, m); ok || out != nil {
			t.Errorf("%s: a %d-byte message was compressed under the default threshold", c.name, len(m))
		}
		m = append(m, 'a')
		if _, ok := c.codec.AppendCompress(nil, m); !ok {
			t.Errorf("%s: a %d-byte run was not compressed", c.name, len(m))
		}
	}
}

func TestIncompressibleIsLeftRaw(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	m := make([]byte, 4096)
	for i := range m {
		m[i] = byte(r.Uint32())
	}
	for _, c := range testCodecs(t, CodecOptions{}) {
		if _, ok := c.codec.AppendCompress(nil, m); ok {
			t.Errorf("%s: random bytes reported compressed", c.name)
		}
	}
}

// TestOtherDictionary: a decoder holding another dictionary never panics.
// Zstd names the error, because RFC 8878 §3.1.1.1.3 frames carry a
// Dictionary_ID. Raw deflate has no header to say it: a message decodes to
// the right bytes when the back-references it makes land on bytes both
// dictionaries share at the same distance from their ends (always, for a
// message compressed without a dictionary), and otherwise to other bytes
// or ErrCorrupt.
func TestOtherDictionary(t *testing.T) {
	a, err := Build(testSource(), BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	src := testSource()
	src.Fields = Entries("other", "fields", "entirely")
	b, err := Build(src, BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dicts := []*Dictionary{nil, a, b}
	msgs := [][]byte{eventMessage(), callMessage(), historyAnswer(), membersAnswer()}
	for _, enc := range dicts {
		for _, dec := range dicts {
			if enc == dec {
				continue
			}
			de, dd := NewDeflate(enc, CodecOptions{}), NewDeflate(dec, CodecOptions{})
			ze, err := NewZstd(enc, CodecOptions{})
			if err != nil {
				t.Fatal(err)
			}
			zd, err := NewZstd(dec, CodecOptions{})
			if err != nil {
				t.Fatal(err)
			}
			wrong := 0
			for _, m := range msgs {
				out, ok := de.AppendCompress(nil, m)
				if ok {
					back, err := dd.AppendDecompress(nil, out)
					if err != nil && !isDecodeError(err, ErrCorrupt) {
						t.Errorf("deflate: %v is not ErrCorrupt", err)
					}
					if err != nil || !bytes.Equal(back, m) {
						wrong++
					}
				}
				out, ok = ze.AppendCompress(nil, m)
				if !ok {
					continue
				}
				if _, err := zd.AppendDecompress(nil, out); !isDecodeError(err, ErrOtherDictionary) {
					t.Errorf("zstd: decoding with another dictionary: %v, want ErrOtherDictionary", err)
				}
			}
			if enc != nil && wrong == 0 {
				t.Errorf("deflate: every message survived a change of the dictionary's tail")
			}
			ze.Close()
			zd.Close()
		}
	}
}

func isDecodeError(err, reason error) bool {
	var de *DecodeError
	return errors.As(err, &de) && de.Reason == reason && errors.Is(err, reason)
}

// bomb returns a message of n zero bytes compressed by c.
func bomb(t *testing.T, c Codec, n int) []byte {
	t.Helper()
	out, ok := c.AppendCompress(nil, make([]byte, n))
	if !ok {
		t.Fatal("zeros did not compress")
	}
	return out
}

// TestDecodeCap: a message decoding past MaxDecoded fails with ErrTooLarge,
// and decoding it allocates about the cap, not the message.
func TestDecodeCap(t *testing.T) {
	const limit = 64 << 10
	const size = 8 << 20
	big := testCodecs(t, CodecOptions{MaxDecoded: 2 * size})
	small := testCodecs(t, CodecOptions{MaxDecoded: limit})
	for i := range big {
		c := small[i]
		msg := bomb(t, big[i].codec, size)
		// Exactly at the cap is fine.
		if _, err := c.codec.AppendDecompress(nil, bomb(t, big[i].codec, limit)); err != nil {
			t.Errorf("%s: a message of exactly MaxDecoded: %v", c.name, err)
		}
		// Warm the pools so that only the decode itself is counted.
		c.codec.AppendDecompress(nil, msg)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		out, err := c.codec.AppendDecompress([]byte("kept"), msg)
		runtime.ReadMemStats(&after)
		if !isDecodeError(err, ErrTooLarge) {
			t.Fatalf("%s: %d bytes with MaxDecoded %d: %v, want ErrTooLarge", c.name, size, limit, err)
		}
		var de *DecodeError
		if errors.As(err, &de); de.Limit != limit {
			t.Errorf("%s: DecodeError.Limit %d, want %d", c.name, de.Limit, limit)
		}
		if string(out) != "kept" {
			t.Errorf("%s: dst not restored on error: %q", c.name, out)
		}
		// 4x the cap leaves room for the doubling growth of dst and the
		// decoder's own buffers, and is 1/32 of the message.
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 4*limit {
			t.Errorf("%s: decoding a %d-byte bomb with a %d-byte cap allocated %d bytes", c.name, size, limit, alloc)
		}
	}
}

func TestCorruptInput(t *testing.T) {
	for _, c := range testCodecs(t, CodecOptions{}) {
		good, ok := c.codec.AppendCompress(nil, historyAnswer())
		if !ok {
			t.Fatalf("%s: not compressed", c.name)
		}
		inputs := map[string][]byte{
			"empty":     nil,
			"truncated": good[:len(good)/2],
			"trailing":  append(append([]byte(nil), good...), 0x55),
			"garbage":   bytes.Repeat([]byte{0xff}, 40),
		}
		for name, in := range inputs {
			if _, err := c.codec.AppendDecompress(nil, in); !isDecodeError(err, ErrCorrupt) {
				t.Errorf("%s: %s input: %v, want ErrCorrupt", c.name, name, err)
			}
		}
	}
}

// TestZeroAllocs: with a dst of enough capacity, a compress and a
// decompress allocate nothing once the pools are warm.
func TestZeroAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items")
	}
	for _, c := range testCodecs(t, CodecOptions{}) {
		for _, m := range [][]byte{eventMessage(), historyAnswer()} {
			dst := make([]byte, 0, 64<<10)
			comp, _ := c.codec.AppendCompress(nil, m)
			back := make([]byte, 0, 64<<10)
			if n := testing.AllocsPerRun(200, func() { c.codec.AppendCompress(dst, m) }); n > 0 {
				t.Errorf("%s: AppendCompress of %d bytes: %.1f allocations", c.name, len(m), n)
			}
			if len(comp) == 0 {
				continue
			}
			if n := testing.AllocsPerRun(200, func() { c.codec.AppendDecompress(back, comp) }); n > 0 {
				t.Errorf("%s: AppendDecompress of %d bytes: %.1f allocations", c.name, len(m), n)
			}
		}
	}
}

func TestConcurrentUse(t *testing.T) {
	msgs := append(routerSamples(5, 40), historyAnswer(), membersAnswer())
	for _, c := range testCodecs(t, CodecOptions{Threshold: 1}) {
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				for k := range msgs {
					m := msgs[(k+g*7)%len(msgs)]
					out, ok := c.codec.AppendCompress(nil, m)
					if !ok {
						continue
					}
					back, err := c.codec.AppendDecompress(nil, out)
					if err != nil || !bytes.Equal(back, m) {
						t.Errorf("%s: concurrent round trip failed: %v", c.name, err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
}

// TestEventTarget checks the size half of the target on the
// 108-byte event, which is deterministic: at least 1.8x smaller with the
// router's dictionary than deflate without one (this encoder without a
// dictionary, and klauspost/compress's best level, the smaller).
func TestEventTarget(t *testing.T) {
	m := eventMessage()
	if len(m) != 108 {
		t.Fatalf("the event is %d bytes, not 108", len(m))
	}
	d, err := Build(testSource(), BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	with, ok := NewDeflate(d, CodecOptions{}).AppendCompress(nil, m)
	if !ok {
		t.Fatal("the event was not compressed")
	}
	without, ok := NewDeflate(nil, CodecOptions{}).AppendCompress(nil, m)
	if !ok {
		without = m
	}
	best := min(len(without), klauspostBest(t, m))
	if ratio := float64(best) / float64(len(with)); ratio < 1.8 {
		t.Fatalf("%d bytes without a dictionary, %d with: %.2fx, want at least 1.8x", best, len(with), ratio)
	}
}

// After Zstd.Close, a message to compress is left plain and one to
// decompress fails with ErrClosed, not ErrCorrupt: the closed codec, not
// the peer, is at fault. A second Close does nothing.
func TestZstdAfterClose(t *testing.T) {
	d, err := Build(testSource(), BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	z, err := NewZstd(d, CodecOptions{})
	if err != nil {
		t.Fatal(err)
	}
	msg := bytes.Repeat([]byte(`{"method":"chat/send","text":"hello"}`), 8)
	frame, ok := z.AppendCompress(nil, msg)
	if !ok {
		t.Fatal("the message did not compress")
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	if err := z.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if out, ok := z.AppendCompress(nil, msg); ok || len(out) != 0 {
		t.Errorf("AppendCompress after Close = %d bytes, %v; want the message left plain", len(out), ok)
	}
	_, err = z.AppendDecompress(nil, frame)
	if !errors.Is(err, ErrClosed) || errors.Is(err, ErrCorrupt) {
		t.Errorf("AppendDecompress after Close: %v, want ErrClosed", err)
	}
}
