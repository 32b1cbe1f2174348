package deflatecache

import (
	"bytes"
	stdflate "compress/flate"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/hotpath-go/hotpath/wsframe"
	kflate "github.com/klauspost/compress/flate"
)

// roomMessages are distinct 512-byte JSON room events, so every emit
// compresses a message of its own.
func roomMessages() [][]byte {
	msgs := make([][]byte, 64)
	for i := range msgs {
		msgs[i] = document(uint64(1000+i), 512)
	}
	return msgs
}

// room returns n server connections, the first half on window bitsA and
// the rest on bitsB, none with context takeover (the default policy).
func room(b *testing.B, n, bitsA, bitsB int) []*Conn {
	conns := make([]*Conn, n)
	for i := range conns {
		bits := bitsA
		if i >= n/2 {
			bits = bitsB
		}
		p := Params{ServerNoContextTakeover: true, ClientNoContextTakeover: true, ServerMaxWindowBits: bits}
		conns[i] = mustConn(b, p, wsframe.Server, Options{})
	}
	return conns
}

// BenchmarkBroadcast emits one 512 B JSON message per op to a room:
//
//   - shared: every recipient takes the frame from the message's cache
//     (BroadcastFrame), so the room costs one deflate per window;
//   - per-recipient: every recipient compresses its own copy, as a server
//     without a shared cache does;
//   - plain: no compression, the floor of the per-recipient work.
//
// The frames are collected into a per-recipient slot, as a writer queue
// would hold them. deflates/emit counts the DEFLATE runs per message.
func BenchmarkBroadcast(b *testing.B) {
	msgs := roomMessages()
	cases := []struct {
		name         string
		n            int
		bitsA, bitsB int
		mode         string
	}{
		{"shared/recipients=50", 50, 15, 15, "shared"},
		{"shared/recipients=200", 200, 15, 15, "shared"},
		{"shared-2-windows/recipients=200", 200, 10, 15, "shared"},
		{"per-recipient/recipients=50", 50, 15, 15, "per-recipient"},
		{"per-recipient/recipients=200", 200, 15, 15, "per-recipient"},
		{"plain/recipients=200", 200, 15, 15, "plain"},
	}
	for _, bc := range cases {
		b.Run(bc.name, func(b *testing.B) {
			conns := room(b, bc.n, bc.bitsA, bc.bitsB)
			queued := make([][]byte, bc.n)
			bufs := make([][]byte, bc.n)
			for i := range bufs {
				bufs[i] = make([]byte, 0, 1024)
			}
			before := Deflates()
			i := 0
			b.ReportAllocs()
			startCPU := cpuTime()
			for b.Loop() {
				payload := msgs[i%len(msgs)]
				i++
				pm, _ := wsframe.NewPrepared(wsframe.OpText, payload)
				for r, c := range conns {
					switch bc.mode {
					case "shared":
						f, err := c.BroadcastFrame(pm)
						if err != nil {
							b.Fatal(err)
						}
						queued[r] = f
					case "per-recipient":
						f, ok := c.AppendCompressedFrame(bufs[r][:0], wsframe.OpText, payload)
						if !ok {
							f = wsframe.AppendFrame(bufs[r][:0], wsframe.OpText, payload, wsframe.Fin)
						}
						queued[r] = f
					case "plain":
						queued[r] = pm.Frame()
					}
				}
			}
			reportCPU(b, i, cpuTime()-startCPU)
			// Every recipient must hold a compressed frame (RSV1, RFC 7692
			// §6), or the rows would compare compressing with not.
			for r, f := range queued {
				if compressed := len(f) > 0 && f[0]&0x40 != 0; compressed != (bc.mode != "plain") {
					b.Fatalf("recipient %d: frame compressed %v in mode %s", r, compressed, bc.mode)
				}
			}
			b.ReportMetric(float64(Deflates()-before)/float64(i), "deflates/emit")
			b.ReportMetric(float64(len(queued[0])), "frame-B")
		})
	}
}

// BenchmarkFanOutPaired checks the fan-out target on a noisy machine:
// every iteration emits one 512 B JSON message to a room of 50 and one to
// a room of 200 through the shared cache, in alternating order, timing
// each in wall time and in the CPU time of the benchmark's thread. The
// ratios x200/x50 come from emits that ran side by side all along, so a
// change of load moves both alike (target: at most 1.5); the CPU-time one
// also leaves out the time the thread waited for a core.
func BenchmarkFanOutPaired(b *testing.B) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	msgs := roomMessages()
	room50, room200 := room(b, 50, 15, 15), room(b, 200, 15, 15)
	queued := make([][]byte, 200)
	var wall50, wall200, cpu50, cpu200 time.Duration
	emit := func(conns []*Conn, payload []byte, wall, cpu *time.Duration) {
		start, startCPU := time.Now(), threadCPUTime()
		pm, _ := wsframe.NewPrepared(wsframe.OpText, payload)
		for r, c := range conns {
			queued[r], _ = c.BroadcastFrame(pm)
		}
		*cpu += threadCPUTime() - startCPU
		*wall += time.Since(start)
	}
	i := 0
	for b.Loop() {
		payload := msgs[i%len(msgs)]
		if i%2 == 0 {
			emit(room50, payload, &wall50, &cpu50)
			emit(room200, payload, &wall200, &cpu200)
		} else {
			emit(room200, payload, &wall200, &cpu200)
			emit(room50, payload, &wall50, &cpu50)
		}
		i++
	}
	b.ReportMetric(float64(wall50.Nanoseconds())/float64(i), "ns/emit-50")
	b.ReportMetric(float64(wall200.Nanoseconds())/float64(i), "ns/emit-200")
	b.ReportMetric(float64(cpu50.Nanoseconds())/float64(i), "cpu-ns/emit-50")
	b.ReportMetric(float64(cpu200.Nanoseconds())/float64(i), "cpu-ns/emit-200")
	b.ReportMetric(float64(wall200)/float64(wall50), "x200/x50")
	if cpu50 > 0 {
		b.ReportMetric(float64(cpu200)/float64(cpu50), "cpu-x200/x50")
	}
}

// streams are the message streams of the takeover comparison: 90 B chat
// events (user, time and text vary), 90 B ticks (only a counter and the
// time vary), and 4 KiB and 32 KiB JSON documents of chat events; each
// message differs from the last but has the same shape.
func streams() []struct {
	name string
	msgs [][]byte
} {
	r := rand.New(rand.NewPCG(11, 12))
	events := make([][]byte, 1024)
	ticks := make([][]byte, 1024)
	for i := range events {
		events[i] = event(r, i)
		ticks[i] = tick(i)
	}
	docs := func(n int) [][]byte {
		d := make([][]byte, 32)
		for i := range d {
			d[i] = document(uint64(2000+i), n)
		}
		return d
	}
	return []struct {
		name string
		msgs [][]byte
	}{{"90B-chat", events}, {"90B-tick", ticks}, {"4KiB", docs(4 << 10)}, {"32KiB", docs(32 << 10)}}
}

// BenchmarkContextTakeover compresses a stream of messages: one-shot (no
// context takeover) against context takeover with the default 1 KiB of
// history and with the whole 32 KiB window. burst sends the stream on one
// connection, so its pooled compressor resumes from one message to the
// next; interleaved deals the stream round-robin to 64 connections, so
// every message primes a compressor with its connection's history first,
// the worst case. ratio is plain bytes over sent bytes (a message that
// does not shrink is sent plain); msgs/s is one goroutine's rate, and
// msgs/cpu-s the same per second of CPU time.
func BenchmarkContextTakeover(b *testing.B) {
	for _, s := range streams() {
		for _, mode := range []struct {
			name     string
			takeover bool
			history  int
			conns    int
		}{
			{"one-shot", false, 0, 1},
			{"takeover-1KiB/burst", true, 1 << 10, 1},
			{"takeover-1KiB/interleaved", true, 1 << 10, 64},
			{"takeover-32KiB/burst", true, 32 << 10, 1},
			{"takeover-32KiB/interleaved", true, 32 << 10, 64},
		} {
			b.Run(s.name+"/"+mode.name, func(b *testing.B) {
				conns := make([]*Conn, mode.conns)
				for i := range conns {
					conns[i] = mustConn(b, Params{ServerNoContextTakeover: !mode.takeover}, wsframe.Server, Options{MinSize: 1, TakeoverHistory: mode.history})
				}
				dst := make([]byte, 0, 64<<10)
				var plain, sent int64
				i := 0
				startCPU := cpuTime()
				for b.Loop() {
					// Each connection walks the stream in order.
					c := conns[i%len(conns)]
					m := s.msgs[i/len(conns)%len(s.msgs)]
					i++
					f, ok := c.AppendCompressedFrame(dst[:0], wsframe.OpText, m)
					if !ok {
						f = wsframe.AppendFrame(dst[:0], wsframe.OpText, m, wsframe.Fin)
					}
					plain += int64(len(m))
					sent += int64(len(f) - wsframe.HeaderSize(int64(len(f)), false))
				}
				reportRate(b, i, cpuTime()-startCPU)
				b.ReportMetric(float64(plain)/float64(sent), "ratio")
			})
		}
	}
}

// reportCPU reports the process's CPU time per op, which the other
// tenants of a shared machine disturb much less than wall time.
func reportCPU(b *testing.B, ops int, cpu time.Duration) {
	if cpu > 0 {
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(ops), "cpu-ns/op")
	}
}

// reportRate reports messages per second of wall time and per second of
// the process's CPU time, which the other tenants of a shared machine
// disturb much less.
func reportRate(b *testing.B, msgs int, cpu time.Duration) {
	b.ReportMetric(float64(msgs)/b.Elapsed().Seconds(), "msgs/s")
	if cpu > 0 {
		b.ReportMetric(float64(msgs)/cpu.Seconds(), "msgs/cpu-s")
	}
}

// BenchmarkInflate is the receiving side of the same streams: one-shot,
// and with context takeover (the history primes the inflater on every
// message).
func BenchmarkInflate(b *testing.B) {
	for _, s := range streams() {
		for _, takeover := range []bool{false, true} {
			name := s.name + "/one-shot"
			if takeover {
				name = s.name + "/takeover-32KiB"
			}
			b.Run(name, func(b *testing.B) {
				p := Params{ClientNoContextTakeover: !takeover}
				sender := mustConn(b, p, wsframe.Client, Options{MinSize: 1, TakeoverHistory: 32 << 10})
				receiver := mustConn(b, p, wsframe.Server, Options{})
				// Compress the stream once; with takeover every message
				// depends on the ones before, so replaying needs the same
				// order from a fresh receiver each lap.
				var comp [][]byte
				for _, m := range s.msgs {
					f, ok := sender.AppendCompressed(nil, m)
					if !ok {
						b.Skip("one-shot does not shrink these messages: they are sent plain, never inflated")
					}
					comp = append(comp, f)
				}
				dst := make([]byte, 0, 64<<10)
				var bytesOut int64
				var setupCPU time.Duration
				i := 0
				startCPU := cpuTime()
				for b.Loop() {
					if i > 0 && i%len(comp) == 0 && takeover {
						// The fresh receiver of each lap is setup, not
						// inflating: off the clock and off the CPU count
						// (which also leaves out the timer's own
						// ReadMemStats).
						c0 := cpuTime()
						b.StopTimer()
						receiver.Close()
						receiver = mustConn(b, p, wsframe.Server, Options{})
						b.StartTimer()
						setupCPU += cpuTime() - c0
					}
					out, err := receiver.Inflate(dst[:0], comp[i%len(comp)], 0)
					if err != nil {
						b.Fatal(err)
					}
					bytesOut += int64(len(out))
					i++
				}
				b.SetBytes(bytesOut / int64(i))
				reportRate(b, i, cpuTime()-startCPU-setupCPU)
			})
		}
	}
}

// BenchmarkInflateBomb is what a compression bomb costs the receiver: a
// message of zeros compressed as tightly as DEFLATE allows (level 9),
// inflated whole. Memory is capped by the max Inflate takes; CPU is not,
// and this measures it. MB/s counts received (compressed) bytes, so it
// reads as the rate of such frames that keeps one core inflating; ratio
// is the inflated bytes per received byte.
func BenchmarkInflateBomb(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("zeros-%dKiB", size>>10), func(b *testing.B) {
			var buf bytes.Buffer
			w, err := stdflate.NewWriter(&buf, stdflate.BestCompression)
			if err != nil {
				b.Fatal(err)
			}
			w.Write(make([]byte, size))
			w.Flush()
			// A sender strips the flush's empty block tail (RFC 7692
			// §7.2.1); Inflate puts it back.
			payload := bytes.TrimSuffix(buf.Bytes(), []byte{0, 0, 0xff, 0xff})
			receiver := mustConn(b, Params{ClientNoContextTakeover: true}, wsframe.Server, Options{})
			dst := make([]byte, 0, size)
			b.SetBytes(int64(len(payload)))
			for b.Loop() {
				out, err := receiver.Inflate(dst[:0], payload, int64(size))
				if err != nil {
					b.Fatal(err)
				}
				if len(out) != size {
					b.Fatalf("inflated %d bytes, want %d", len(out), size)
				}
			}
			b.ReportMetric(float64(size)/float64(len(payload)), "ratio")
		})
	}
}

// BenchmarkWindow compresses a 4 KiB JSON message from an empty window at
// each window size: klauspost's windowed encoder below 15 bits, level 1 at
// 15.
func BenchmarkWindow(b *testing.B) {
	msg := document(3000, 4<<10)
	for _, bits := range []int{8, 10, 12, 14, 15} {
		b.Run(fmt.Sprintf("bits=%d", bits), func(b *testing.B) {
			c := mustConn(b, Params{ServerNoContextTakeover: true, ServerMaxWindowBits: bits}, wsframe.Server, Options{})
			dst := make([]byte, 0, 8<<10)
			var n, ops int
			b.SetBytes(int64(len(msg)))
			startCPU := cpuTime()
			for b.Loop() {
				out, _ := c.AppendCompressed(dst[:0], msg)
				n = len(out)
				ops++
			}
			reportCPU(b, ops, cpuTime()-startCPU)
			b.ReportMetric(float64(len(msg))/float64(n), "ratio")
		})
	}
}

// BenchmarkConnMemory measures the heap a connection keeps between
// messages, after traffic in both directions (40 chat events and a 40 KiB
// document each way): B/conn is the live heap of connsPerOp server
// connections divided by their number. Pooled compressors and inflaters
// are shared by all connections; two collections before each reading
// empty the pools, so they are not counted (see the README for their
// size).
func BenchmarkConnMemory(b *testing.B) {
	const connsPerOp = 500
	r := rand.New(rand.NewPCG(13, 14))
	var traffic [][]byte
	for i := range 40 {
		traffic = append(traffic, event(r, i))
	}
	traffic = append(traffic, document(1, 40<<10))
	liveHeap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	for _, m := range []struct {
		name string
		p    Params
		opts Options
	}{
		{"no-takeover", Params{ServerNoContextTakeover: true, ClientNoContextTakeover: true}, Options{}},
		{"takeover-both/window=15", Params{}, Options{}},
		{"takeover-both/window=15/history=32KiB", Params{}, Options{TakeoverHistory: 32 << 10}},
		{"takeover-both/window=12", Params{ServerMaxWindowBits: 12, ClientMaxWindowBits: 12}, Options{}},
		{"takeover-client-only/window=15", Params{ServerNoContextTakeover: true}, Options{}},
		{"takeover-server-only/window=15", Params{ClientNoContextTakeover: true}, Options{}},
	} {
		b.Run(m.name, func(b *testing.B) {
			var perConn float64
			for b.Loop() {
				before := liveHeap()
				servers := make([]*Conn, connsPerOp)
				for i := range servers {
					server, client := pair(b, m.p, m.opts)
					for _, msg := range traffic {
						if f, ok := client.AppendCompressed(nil, msg); ok {
							if _, err := server.Inflate(nil, f, 0); err != nil {
								b.Fatal(err)
							}
						}
						server.AppendCompressed(nil, msg)
					}
					servers[i] = server
				}
				perConn = float64(liveHeap()-before) / connsPerOp
				runtime.KeepAlive(servers)
			}
			b.ReportMetric(perConn, "B/conn")
		})
	}
}

// BenchmarkInflater compares the two DEFLATE decoders on the same
// messages, through the same source: the standard library's, which
// Inflate uses, and klauspost/compress's, which leaks Huffman tables
// from one stream to the next (TestInflateNoStateBetweenMessages).
func BenchmarkInflater(b *testing.B) {
	for _, n := range []int{512, 4 << 10, 32 << 10} {
		msg := document(7, n)
		comp, _ := mustConn(b, Params{ServerNoContextTakeover: true}, wsframe.Server, Options{}).AppendCompressed(nil, msg)
		for _, impl := range []string{"compress-flate", "klauspost"} {
			b.Run(fmt.Sprintf("%d/%s", n, impl), func(b *testing.B) {
				var src messageSource
				var fr io.ReadCloser
				if impl == "klauspost" {
					fr = kflate.NewReader(&src)
				} else {
					fr = stdflate.NewReader(&src)
				}
				out := make([]byte, n)
				b.SetBytes(int64(n))
				ops := 0
				startCPU := cpuTime()
				for b.Loop() {
					src.reset(comp)
					fr.(stdflate.Resetter).Reset(&src, nil)
					if _, err := io.ReadFull(fr, out); err != nil {
						b.Fatal(err)
					}
					ops++
				}
				reportCPU(b, ops, cpuTime()-startCPU)
			})
		}
	}
}

// BenchmarkOneShotBySize compresses JSON of a given size from an empty
// window: what it costs and what it saves, the basis of DefaultMinSize.
func BenchmarkOneShotBySize(b *testing.B) {
	for _, n := range []int{64, 96, 128, 192, 256, 512} {
		b.Run(fmt.Sprintf("bytes=%d", n), func(b *testing.B) {
			msgs := make([][]byte, 32)
			for i := range msgs {
				msgs[i] = document(uint64(4000+i), n)
			}
			c := mustConn(b, Params{ServerNoContextTakeover: true}, wsframe.Server, Options{MinSize: 1})
			dst := make([]byte, 0, 1024)
			var plain, sent int64
			i := 0
			startCPU := cpuTime()
			for b.Loop() {
				m := msgs[i%len(msgs)]
				i++
				out, ok := c.AppendCompressed(dst[:0], m)
				plain += int64(len(m))
				if ok {
					sent += int64(len(out))
				} else {
					sent += int64(len(m))
				}
			}
			reportCPU(b, i, cpuTime()-startCPU)
			b.ReportMetric(float64(plain)/float64(sent), "ratio")
		})
	}
}

// BenchmarkPooledSizes reports the bytes one pooled compressor and one
// pooled inflater allocate when built: the figures the README gives for
// why they are pooled, not kept per connection.
func BenchmarkPooledSizes(b *testing.B) {
	compressor := func(name string, bits, level int) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if newCompressor(bits, level).fw == nil {
					b.Fatal("no writer")
				}
			}
		})
	}
	for level := 1; level <= 9; level++ {
		compressor(fmt.Sprintf("compressor/window=15/level=%d", level), MaxWindowBits, level)
	}
	compressor("compressor/window=12", 12, 1)
	b.Run("inflater", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if inflaters.New().(*inflater).fr == nil {
				b.Fatal("no reader")
			}
		}
	})
}
