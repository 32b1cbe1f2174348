package wsframe

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"
)

// Every claim of the README has its benchmark here; comparisons sit beside
// their baseline in the same run (Mask beside copy, the validator beside
// utf8.Valid), so ratios come from one process on one machine.

var sink int

// paired times fn and base alternately, in batches long enough to time,
// and reports how many times faster fn is than base: the median and the
// best of the per-batch ratios' inputs. On a machine shared with other
// work, alternating exposes both to the same load, where separate
// benchmarks run seconds apart see different loads.
func paired(b *testing.B, fn, base func()) {
	batch := 1
	for {
		t0 := time.Now()
		for range batch {
			base()
		}
		if time.Since(t0) > 20*time.Microsecond || batch >= 1<<20 {
			break
		}
		batch *= 2
	}
	var tf, tb []time.Duration
	for b.Loop() {
		t0 := time.Now()
		for range batch {
			fn()
		}
		t1 := time.Now()
		for range batch {
			base()
		}
		tf = append(tf, t1.Sub(t0))
		tb = append(tb, time.Since(t1))
	}
	slices.Sort(tf)
	slices.Sort(tb)
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(batch) }
	b.ReportMetric(per(tf[len(tf)/2]), "ns/fn-median")
	b.ReportMetric(per(tb[len(tb)/2]), "ns/base-median")
	b.ReportMetric(float64(tb[len(tb)/2])/float64(tf[len(tf)/2]), "speed-ratio-median")
	b.ReportMetric(float64(tb[0])/float64(tf[0]), "speed-ratio-best")
}

// jsonText is ASCII-heavy JSON, the usual payload of a realtime server,
// with a non-ASCII character in about one record in four.
func jsonText(n int) []byte {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		name := "alice"
		if i%4 == 3 {
			name = "zoë"
		}
		fmt.Fprintf(&b, `{"type":"msg","room":"lobby-%d","from":"%s","seq":%d,"text":"see you at the usual place"},`, i%97, name, i)
	}
	return []byte(b.String()[:n])
}

// multilingualText mixes Latin, Greek, Cyrillic, CJK, Devanagari and emoji,
// cut at a character boundary near n bytes.
func multilingualText(n int) []byte {
	const sample = "Hello, world. Γειά σου κόσμε. Привет, мир. 你好，世界。こんにちは世界。नमस्ते दुनिया। 🌍🚀✨ "
	s := strings.Repeat(sample, n/len(sample)+1)
	cut := n
	for !utf8.RuneStart(s[cut]) {
		cut--
	}
	return []byte(s[:cut])
}

var sizes = []struct {
	name string
	n    int
}{{"200B", 200}, {"4KiB", 4096}, {"64KiB", 65536}}

// BenchmarkAppendFrame encodes a text frame into a reused buffer.
func BenchmarkAppendFrame(b *testing.B) {
	for _, s := range sizes {
		payload := jsonText(s.n)
		b.Run(s.name, func(b *testing.B) {
			buf := make([]byte, 0, s.n+MaxHeaderSize)
			b.SetBytes(int64(s.n))
			b.ReportAllocs()
			for b.Loop() {
				buf = AppendFrame(buf[:0], OpText, payload, Fin)
			}
			sink += len(buf)
		})
	}
}

// BenchmarkAppendHeader encodes only the header: with a vectored write the
// payload is sent from where it is, which is how a large frame is best sent.
func BenchmarkAppendHeader(b *testing.B) {
	var buf [MaxHeaderSize]byte
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		h := AppendHeader(buf[:0], Header{Flags: Fin, Opcode: OpText, Length: int64(sizes[i%3].n)})
		sink += len(h)
	}
}

// maskBytewise is the textbook loop, the baseline the word loop is judged
// by.
func maskBytewise(b []byte, key [4]byte, offset int) int {
	for i := range b {
		b[i] ^= key[(offset+i)&3]
	}
	return (offset + len(b)) & 3
}

// BenchmarkMaskVsCopy runs Mask and copy alternately: speed-ratio is
// Mask's throughput over copy's (masking touches each byte as a copy
// does). MaskWords is the portable word loop alone, what builds other than
// amd64 run; bytewise is the textbook loop.
func BenchmarkMaskVsCopy(b *testing.B) {
	for _, s := range sizes {
		buf := jsonText(s.n)
		dst := make([]byte, s.n)
		b.Run("Mask/"+s.name, func(b *testing.B) {
			paired(b, func() { Mask(buf, testKey, 1) }, func() { copy(dst, buf) })
		})
		b.Run("MaskWords/"+s.name, func(b *testing.B) {
			k64, _ := maskKey(testKey, 1, s.n)
			paired(b, func() { maskWords(buf, k64) }, func() { copy(dst, buf) })
		})
		b.Run("bytewise/"+s.name, func(b *testing.B) {
			paired(b, func() { maskBytewise(buf, testKey, 1) }, func() { copy(dst, buf) })
		})
	}
}

// BenchmarkUTF8VsStdlib runs UTF8Validator and utf8.Valid alternately on
// the same bytes: speed-ratio is the validator's throughput over
// utf8.Valid's.
func BenchmarkUTF8VsStdlib(b *testing.B) {
	for _, c := range []struct {
		name string
		p    []byte
	}{{"json", jsonText(64 << 10)}, {"multilingual", multilingualText(64 << 10)}, {"json-200B", jsonText(200)}} {
		if !utf8.Valid(c.p) {
			b.Fatalf("%s corpus is not valid UTF-8", c.name)
		}
		stdlib := func() {
			if !utf8.Valid(c.p) {
				b.Fatal("invalid")
			}
		}
		b.Run(c.name, func(b *testing.B) {
			paired(b, func() {
				var v UTF8Validator
				if !v.Valid(c.p) || !v.Complete() {
					b.Fatal("invalid")
				}
			}, stdlib)
		})
		if len(c.p) < 4096 {
			continue
		}
		b.Run(c.name+"/1KiB-pieces", func(b *testing.B) {
			paired(b, func() {
				var v UTF8Validator
				for p := c.p; len(p) > 0; {
					k := min(1024, len(p))
					if !v.Valid(p[:k]) {
						b.Fatal("invalid")
					}
					p = p[k:]
				}
				if !v.Complete() {
					b.Fatal("incomplete")
				}
			}, stdlib)
		})
	}
}

const (
	decodeMessages = 50000
	decodePayload  = 200
	segmentSize    = 64 << 10
)

// decodeCorpus is a client stream of 50,000 masked 200-byte text frames,
// cut into 64 KiB segments as reads from a socket would deliver it.
func decodeCorpus() [][]byte {
	payload := jsonText(decodePayload)
	var stream []byte
	for i := range decodeMessages {
		key := [4]byte{byte(i), byte(i >> 8), 0x5a, 0xa5}
		stream = AppendMaskedFrame(stream, OpText, payload, Fin, key)
	}
	var segs [][]byte
	for len(stream) > 0 {
		k := min(segmentSize, len(stream))
		segs = append(segs, stream[:k])
		stream = stream[k:]
	}
	return segs
}

// BenchmarkDecode decodes the corpus with unmasking and UTF-8 validation,
// reading each segment into a reused buffer first (the copy a read from a
// socket makes) and reusing the caller's buffers: one op is all 50,000
// messages. "slice" is a read loop that keeps one buffer and moves the cut
// frame at its end to the front; "source" hands segments to a Source.
func BenchmarkDecode(b *testing.B) {
	segs := decodeCorpus()
	report := func(b *testing.B) {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*decodeMessages), "ns/msg")
		b.ReportMetric(float64(b.N*decodeMessages)/b.Elapsed().Seconds(), "msgs/s")
	}
	b.Run("slice", func(b *testing.B) {
		dec := newSliceDecode(segs, false)
		b.ReportAllocs()
		for b.Loop() {
			if n := dec(); n != decodeMessages {
				b.Fatalf("%d messages", n)
			}
		}
		report(b)
	})
	b.Run("source", func(b *testing.B) {
		bufs := make([][]byte, len(segs))
		for i := range segs {
			bufs[i] = make([]byte, len(segs[i]))
		}
		q := &fakeQueue{}
		var d Decoder
		var buf []byte
		b.ReportAllocs()
		for b.Loop() {
			d.Reset(Config{})
			count := 0
			for i, seg := range segs {
				copy(bufs[i], seg)
				q.PushShared(bufs[i])
				for {
					m, err := d.NextMessage(q, &buf)
					if err != nil {
						if errors.Is(err, ErrNeedMore) {
							break
						}
						b.Fatal(err)
					}
					count += len(m.Payload) / decodePayload
				}
			}
			if count != decodeMessages {
				b.Fatalf("%d messages", count)
			}
		}
		report(b)
	})
	b.Run("Reader", func(b *testing.B) {
		src := &segmentReader{segs: segs}
		var d Decoder
		r := NewReader(src, &d, segmentSize)
		b.ReportAllocs()
		for b.Loop() {
			src.i, src.off = 0, 0
			d.Reset(Config{})
			count := 0
			for {
				m, err := r.ReadMessage()
				if err != nil {
					if errors.Is(err, io.EOF) {
						break
					}
					b.Fatal(err)
				}
				count += len(m.Payload) / decodePayload
			}
			if count != decodeMessages {
				b.Fatalf("%d messages", count)
			}
		}
		report(b)
	})
}

// newSliceDecode returns a read loop over segs that keeps one buffer,
// copies each segment into it (the copy a read from a socket makes), moves
// the frame cut at its end to the front, and returns the number of
// messages decoded. general sends every frame through DecodeFrame, the
// general path, instead of DecodeMessage with its fast path.
func newSliceDecode(segs [][]byte, general bool) func() int {
	work := make([]byte, 2*segmentSize)
	var d Decoder
	var buf []byte
	return func() int {
		d.Reset(Config{})
		pending := work[:0]
		count := 0
		for _, seg := range segs {
			n := copy(work, pending)
			n += copy(work[n:], seg)
			pending = work[:n]
			for {
				var size, used int
				var err error
				if general {
					var f Frame
					f, used, err = d.DecodeFrame(pending)
					size = len(f.Payload)
				} else {
					var m Message
					m, used, err = d.DecodeMessage(pending, &buf)
					size = len(m.Payload)
				}
				pending = pending[used:]
				if err != nil {
					if errors.Is(err, ErrNeedMore) {
						break
					}
					panic(err)
				}
				count += size / decodePayload
			}
		}
		return count
	}
}

// BenchmarkDecodeFastVsGeneral runs the corpus through DecodeMessage, with
// its fast path for whole single-frame messages, and through DecodeFrame,
// the general path, alternately: speed-ratio is the fast path's.
func BenchmarkDecodeFastVsGeneral(b *testing.B) {
	segs := decodeCorpus()
	fast, general := newSliceDecode(segs, false), newSliceDecode(segs, true)
	paired(b, func() { fast() }, func() { general() })
}

// segmentReader delivers segments through Read, copying as a read from a
// socket does, at most one segment per call.
type segmentReader struct {
	segs   [][]byte
	i, off int
}

func (r *segmentReader) Read(p []byte) (int, error) {
	if r.i == len(r.segs) {
		return 0, io.EOF
	}
	n := copy(p, r.segs[r.i][r.off:])
	r.off += n
	if r.off == len(r.segs[r.i]) {
		r.i, r.off = r.i+1, 0
	}
	return n, nil
}

// BenchmarkBroadcast writes one 200-byte message to 1,000 connections:
// framed per connection with AppendFrame, or framed once by a Prepared and
// shared. Writing is modelled by taking the frame's length.
func BenchmarkBroadcast(b *testing.B) {
	const conns = 1000
	payload := jsonText(decodePayload)
	b.Run("AppendFrame-per-conn", func(b *testing.B) {
		buf := make([]byte, 0, 256)
		b.ReportAllocs()
		for b.Loop() {
			for range conns {
				buf = AppendFrame(buf[:0], OpText, payload, Fin)
				sink += len(buf)
			}
		}
	})
	b.Run("Prepared", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			p, _ := NewPrepared(OpText, payload)
			for range conns {
				sink += len(p.Frame())
			}
		}
	})
}

// BenchmarkPreparedVariantParallel reads a built variant from all cores at
// once: the lock-free read path every writer of a broadcast takes.
func BenchmarkPreparedVariantParallel(b *testing.B) {
	p, _ := NewPrepared(OpText, jsonText(decodePayload))
	build := func(op Opcode, pl []byte) ([]byte, error) { return AppendFrame(nil, op, pl, Fin|Rsv1), nil }
	if _, err := p.Variant(7, build); err != nil {
		b.Fatal(err)
	}
	var total atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		n := 0
		for pb.Next() {
			f, _ := p.Variant(7, build)
			n += len(f)
		}
		total.Add(int64(n))
	})
	if total.Load() == 0 && b.N > 0 {
		b.Fatal("no variant read")
	}
}

// BenchmarkNewMaskKey is the cost of a client frame's masking key, next to
// drawing the 4 bytes from crypto/rand directly, as NewMaskKey did before.
func BenchmarkNewMaskKey(b *testing.B) {
	b.Run("NewMaskKey", func(b *testing.B) {
		for b.Loop() {
			_ = NewMaskKey()
		}
	})
	b.Run("crypto-rand", func(b *testing.B) {
		var k [4]byte
		for b.Loop() {
			rand.Read(k[:])
		}
	})
}
