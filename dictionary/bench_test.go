package dictionary

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/flate"
)

// The benchmark messages of the issue, from the test router.
var benchMessages = []struct {
	name string
	msg  []byte
}{
	{"event108", eventMessage()},
	{"call84", callMessage()},
	{"answer1k", historyAnswer()},
	{"answer27k", membersAnswer()},
}

// oneShot compresses a message with a pooled klauspost/compress Writer
// (Reset, Write, Close), the usual way to deflate one message; with dict,
// Reset re-reads the dictionary every time.
type oneShot struct {
	w   *flate.Writer
	buf bytes.Buffer
}

func newOneShot(tb testing.TB, level int, dict []byte) *oneShot {
	o := &oneShot{}
	var err error
	if dict != nil {
		o.w, err = flate.NewWriterDict(&o.buf, level, dict)
	} else {
		o.w, err = flate.NewWriter(&o.buf, level)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return o
}

func (o *oneShot) compress(m []byte) int {
	o.buf.Reset()
	o.w.Reset(&o.buf)
	o.w.Write(m)
	o.w.Close()
	return o.buf.Len()
}

// klauspostBest is the smallest raw deflate of m without a dictionary over
// klauspost/compress's levels 1 to 9.
func klauspostBest(tb testing.TB, m []byte) int {
	best := len(m)
	for level := 1; level <= 9; level++ {
		best = min(best, newOneShot(tb, level, nil).compress(m))
	}
	return best
}

func reportPerMessage(b *testing.B, size int) {
	b.ReportMetric(float64(size), "out-B")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkCompress: compressed size (out-B; a message that does not
// shrink counts as sent raw) and rate of every codec on every message,
// beside klauspost/compress one-shot deflate as the baseline.
func BenchmarkCompress(b *testing.B) {
	router, err := Build(testSource(), BuildOptions{})
	if err != nil {
		b.Fatal(err)
	}
	namesOnly := testSource()
	namesOnly.Templates = nil
	names, err := Build(namesOnly, BuildOptions{})
	if err != nil {
		b.Fatal(err)
	}
	learned, err := Build(testSource(), BuildOptions{Samples: routerSamples(7, 1000)})
	if err != nil {
		b.Fatal(err)
	}
	type variant struct {
		name string
		run  func(m, dst []byte) int
	}
	var variants []variant
	for _, level := range []int{1, 5, 9} {
		o := newOneShot(b, level, nil)
		variants = append(variants, variant{"klauspost-L" + string(rune('0'+level)), func(m, _ []byte) int { return o.compress(m) }})
	}
	var sbuf bytes.Buffer
	variants = append(variants, variant{"klauspost-stateless", func(m, _ []byte) int {
		sbuf.Reset()
		flate.StatelessDeflate(&sbuf, m, true, nil)
		return sbuf.Len()
	}})
	od := newOneShot(b, 1, router.data)
	variants = append(variants, variant{"klauspost-L1-router", func(m, _ []byte) int { return od.compress(m) }})
	for _, d := range []struct {
		name string
		dict *Dictionary
	}{{"nodict", nil}, {"names", names}, {"router", router}, {"learned", learned}} {
		df := NewDeflate(d.dict, CodecOptions{Threshold: 1})
		z, err := NewZstd(d.dict, CodecOptions{Threshold: 1})
		if err != nil {
			b.Fatal(err)
		}
		defer z.Close()
		for _, c := range []struct {
			name  string
			codec Codec
		}{{"deflate-" + d.name, df}, {"zstd-" + d.name, z}} {
			variants = append(variants, variant{c.name, func(m, dst []byte) int {
				out, ok := c.codec.AppendCompress(dst, m)
				if !ok {
					return len(m)
				}
				return len(out)
			}})
		}
	}
	for _, bm := range benchMessages {
		for _, v := range variants {
			b.Run(bm.name+"/"+v.name, func(b *testing.B) {
				dst := make([]byte, 0, 2*len(bm.msg)+64)
				size := min(v.run(bm.msg, dst), len(bm.msg))
				b.SetBytes(int64(len(bm.msg)))
				b.ReportAllocs()
				for b.Loop() {
					v.run(bm.msg, dst)
				}
				reportPerMessage(b, size)
			})
		}
	}
}

// BenchmarkBuild: building the router's dictionary with samples to learn
// from, 1000 of them (about 200 KB) and as many as MaxSampleBytes allows.
// Build runs on the caller's goroutine alone, so ns/op is its CPU time.
func BenchmarkBuild(b *testing.B) {
	for _, n := range []int{1000, 6000} {
		samples := routerSamples(7, n)
		size := 0
		for _, s := range samples {
			size += len(s)
		}
		b.Run(fmt.Sprintf("samples=%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, err := Build(testSource(), BuildOptions{Samples: samples}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(min(size, MaxSampleBytes)), "sample-B")
		})
	}
}

// routerZstd returns the router's dictionary and a zstd codec with it,
// closed when the benchmark ends.
func routerZstd(b *testing.B) (*Dictionary, *Zstd) {
	router, err := Build(testSource(), BuildOptions{})
	if err != nil {
		b.Fatal(err)
	}
	z, err := NewZstd(router, CodecOptions{Threshold: 1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { z.Close() })
	return router, z
}

// BenchmarkDecompress: the rate of decoding each message with the router's
// dictionary, beside klauspost/compress inflating one-shot deflate without
// one.
func BenchmarkDecompress(b *testing.B) {
	router, z := routerZstd(b)
	codecs := []struct {
		name  string
		codec Codec
	}{
		{"deflate-nodict", NewDeflate(nil, CodecOptions{Threshold: 1})},
		{"deflate-router", NewDeflate(router, CodecOptions{Threshold: 1})},
		{"zstd-router", z},
	}
	for _, bm := range benchMessages {
		for _, c := range codecs {
			comp, ok := c.codec.AppendCompress(nil, bm.msg)
			if !ok {
				continue
			}
			b.Run(bm.name+"/"+c.name, func(b *testing.B) {
				dst := make([]byte, 0, len(bm.msg))
				b.SetBytes(int64(len(bm.msg)))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := c.codec.AppendDecompress(dst, comp); err != nil {
						b.Fatal(err)
					}
				}
				reportPerMessage(b, len(comp))
			})
		}
	}
}

// BenchmarkSameLoad runs the contenders in alternating batches inside one
// benchmark, so that each meets the same load on a shared machine, and
// reports each one's messages per CPU-second (the process's CPU time spent
// in its batches) and the ratios the README quotes: deflate with the
// router's dictionary against klauspost/compress one-shot deflate without
// one (a pooled Writer at level 1, and StatelessDeflate) and against this
// package's encoder without one. wall-router/L1 is the same ratio in wall
// time, noisier.
func BenchmarkSameLoad(b *testing.B) {
	router, err := Build(testSource(), BuildOptions{})
	if err != nil {
		b.Fatal(err)
	}
	withDict := NewDeflate(router, CodecOptions{Threshold: 1})
	noDict := NewDeflate(nil, CodecOptions{Threshold: 1})
	z, err := NewZstd(router, CodecOptions{Threshold: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer z.Close()
	l1 := newOneShot(b, 1, nil)
	var sbuf bytes.Buffer
	dst := make([]byte, 0, 64<<10)
	const (
		l1Index = iota
		statelessIndex
		noDictIndex
		routerIndex
		zstdIndex
	)
	contenders := []struct {
		name string
		run  func(m []byte)
	}{
		l1Index: {"klauspost-L1", func(m []byte) { l1.compress(m) }},
		statelessIndex: {"klauspost-stateless", func(m []byte) {
			sbuf.Reset()
			flate.StatelessDeflate(&sbuf, m, true, nil)
		}},
		noDictIndex: {"deflate-nodict", func(m []byte) { noDict.AppendCompress(dst, m) }},
		routerIndex: {"deflate-router", func(m []byte) { withDict.AppendCompress(dst, m) }},
		zstdIndex:   {"zstd-router", func(m []byte) { z.AppendCompress(dst, m) }},
	}
	for _, bm := range benchMessages {
		b.Run(bm.name, func(b *testing.B) {
			batch := max(1, (64<<10)/len(bm.msg))
			cpu := make([]time.Duration, len(contenders))
			wall := make([]time.Duration, len(contenders))
			for b.Loop() {
				for k, c := range contenders {
					startCPU, start := cpuTime(), time.Now()
					for range batch {
						c.run(bm.msg)
					}
					cpu[k] += cpuTime() - startCPU
					wall[k] += time.Since(start)
				}
			}
			rate := make([]float64, len(contenders))
			for k, c := range contenders {
				rate[k] = float64(b.N*batch) / cpu[k].Seconds()
				b.ReportMetric(rate[k], c.name+"-msgs/cpu-s")
			}
			b.ReportMetric(rate[routerIndex]/rate[l1Index], "router/L1")
			b.ReportMetric(rate[routerIndex]/rate[statelessIndex], "router/stateless")
			b.ReportMetric(rate[routerIndex]/rate[noDictIndex], "router/nodict")
			b.ReportMetric(rate[zstdIndex]/rate[l1Index], "zstd/L1")
			b.ReportMetric(float64(wall[l1Index])/float64(wall[routerIndex]), "wall-router/L1")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkZstdLock puts what Zstd's RWMutex costs (read-held by every
// call, so that Close waits for the calls in flight) beside the calls it
// guards: lock is an RLock and RUnlock alone, decompress the zstd codec's
// AppendDecompress of the smallest message, both from every P at once
// (RunParallel), where the readers' count is one cache line the cores
// pass between them. lock's ns/op over decompress's is the lock's share.
func BenchmarkZstdLock(b *testing.B) {
	_, z := routerZstd(b)
	msg := benchMessages[0].msg
	comp, ok := z.AppendCompress(nil, msg)
	if !ok {
		b.Fatal("the message did not compress")
	}
	b.Run("lock", func(b *testing.B) {
		var mu sync.RWMutex
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				mu.RLock()
				mu.RUnlock()
			}
		})
	})
	b.Run("decompress", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			dst := make([]byte, 0, len(msg))
			for pb.Next() {
				if _, err := z.AppendDecompress(dst, comp); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
