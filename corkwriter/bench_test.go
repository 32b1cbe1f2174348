package corkwriter

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// benchConn returns the writing end of a loopback TCP connection whose
// other end a goroutine drains, as a peer reading promptly would.
func benchConn(b testing.TB) net.Conn {
	b.Helper()
	c, peer := tcpPair(b)
	go func() {
		buf := make([]byte, 256<<10)
		for {
			if _, err := peer.Read(buf); err != nil {
				return
			}
		}
	}()
	return c
}

// writeSyscalls returns the process's count of write system calls (write,
// writev, ...) from /proc/self/io; ok is false where there is none.
func writeSyscalls() (n uint64, ok bool) {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0, false
	}
	for line := range bytes.Lines(data) {
		if v, found := bytes.CutPrefix(line, []byte("syscw: ")); found {
			n, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// reportSyscalls reports syscalls/op, the write system calls the kernel
// counted since start (from writeSyscalls) per op, so that every
// implementation is counted the same way.
func reportSyscalls(b *testing.B, start uint64, ok bool) {
	if end, ok2 := writeSyscalls(); ok && ok2 {
		b.ReportMetric(float64(end-start)/float64(b.N), "syscalls/op")
	}
}

// BenchmarkTurn64x64 sends turns of 64 writes of 64 bytes, the answers to
// 64 pipelined calls: through a Writer (one writev per turn), as 64 direct
// conn.Write calls, and through a bufio.Writer flushed once per turn.
// syscalls/op is counted by the kernel (Linux), for all three alike.
func BenchmarkTurn64x64(b *testing.B) {
	msg := make([]byte, 64)
	b.Run("impl=corkwriter", func(b *testing.B) {
		c := benchConn(b)
		w := NewWriter(c, nil)
		b.SetBytes(64 * 64)
		w0, ok := writeSyscalls()
		for b.Loop() {
			w.Cork()
			for range 64 {
				if _, err := w.Write(msg); err != nil {
					b.Fatal(err)
				}
			}
			if err := w.Uncork(); err != nil {
				b.Fatal(err)
			}
		}
		reportSyscalls(b, w0, ok)
	})
	b.Run("impl=write", func(b *testing.B) {
		c := benchConn(b)
		b.SetBytes(64 * 64)
		w0, ok := writeSyscalls()
		for b.Loop() {
			for range 64 {
				if _, err := c.Write(msg); err != nil {
					b.Fatal(err)
				}
			}
		}
		reportSyscalls(b, w0, ok)
	})
	b.Run("impl=bufio", func(b *testing.B) {
		c := benchConn(b)
		bw := bufio.NewWriter(c)
		b.SetBytes(64 * 64)
		w0, ok := writeSyscalls()
		for b.Loop() {
			for range 64 {
				if _, err := bw.Write(msg); err != nil {
					b.Fatal(err)
				}
			}
			if err := bw.Flush(); err != nil {
				b.Fatal(err)
			}
		}
		reportSyscalls(b, w0, ok)
	})
}

// BenchmarkBroadcast200x16KiB sends the same 16 KiB frame to 200
// connections per op, one turn each: by reference with WriteShared, through
// a bufio.Writer large enough to hold a turn (it copies the frame), and as
// one direct conn.Write (the floor: no copy, no gathering). copiedB/op
// counts the bytes copied in user space, where there is a buffer to copy
// into (the direct write has none, and reports no figure).
func BenchmarkBroadcast200x16KiB(b *testing.B) {
	const conns = 200
	frame := make([]byte, 16<<10)
	for i := range frame {
		frame[i] = byte(i)
	}
	open := func(b *testing.B) []net.Conn {
		cs := make([]net.Conn, conns)
		for i := range cs {
			cs[i] = benchConn(b)
		}
		return cs
	}
	b.Run("impl=corkwriter", func(b *testing.B) {
		cs := open(b)
		ws := make([]*Writer, conns)
		for i, c := range cs {
			ws[i] = NewWriter(c, nil)
		}
		b.SetBytes(conns * int64(len(frame)))
		for b.Loop() {
			for _, w := range ws {
				w.Cork()
				w.WriteShared(frame)
				if err := w.Uncork(); err != nil {
					b.Fatal(err)
				}
			}
		}
		var copied uint64
		for _, w := range ws {
			copied += w.Stats().Copied
		}
		b.ReportMetric(float64(copied)/float64(b.N), "copiedB/op")
	})
	b.Run("impl=bufio", func(b *testing.B) {
		cs := open(b)
		bws := make([]*bufio.Writer, conns)
		for i, c := range cs {
			bws[i] = bufio.NewWriterSize(c, 64<<10)
		}
		b.SetBytes(conns * int64(len(frame)))
		copied := 0
		for b.Loop() {
			for _, bw := range bws {
				bw.Write(frame)
				copied += bw.Buffered()
				if err := bw.Flush(); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(copied)/float64(b.N), "copiedB/op")
	})
	// The Outbox, and the alternative design with a flusher goroutine per
	// connection: the broadcaster queues the frame for every member, then
	// waits until every outbox has written it.
	b.Run("impl=outbox", func(b *testing.B) {
		cs := open(b)
		os := make([]*Outbox, conns)
		for i, c := range cs {
			os[i] = NewOutbox(c, nil)
		}
		b.SetBytes(conns * int64(len(frame)))
		for b.Loop() {
			for _, o := range os {
				if st := o.SendShared(frame); st != Sent && st != Queued {
					b.Fatal(st)
				}
			}
			for _, o := range os {
				outboxSender{o}.drain()
			}
		}
		var st OutboxStats
		for _, o := range os {
			s := o.Stats()
			st.Copied += s.Copied
			st.Handoffs += s.Handoffs
			o.Close()
		}
		b.ReportMetric(float64(st.Copied)/float64(b.N), "copiedB/op")
		b.ReportMetric(float64(st.Handoffs)/float64(b.N), "goroutines/op")
	})
	b.Run("impl=outbox-goroutine", func(b *testing.B) {
		cs := open(b)
		gs := make([]*goroutineSender, conns)
		for i, c := range cs {
			gs[i] = newGoroutineSender(c, DefaultMaxQueued)
		}
		b.SetBytes(conns * int64(len(frame)))
		for b.Loop() {
			for _, g := range gs {
				g.send(frame, true)
			}
			for _, g := range gs {
				g.drain()
			}
		}
		var copied uint64
		for _, g := range gs {
			g.mu.Lock()
			copied += g.copied
			g.mu.Unlock()
			g.close()
		}
		b.ReportMetric(float64(copied)/float64(b.N), "copiedB/op")
	})
	b.Run("impl=write", func(b *testing.B) {
		cs := open(b)
		b.SetBytes(conns * int64(len(frame)))
		for b.Loop() {
			for _, c := range cs {
				if _, err := c.Write(frame); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}

// frameSender is what the producer benchmark drives: an Outbox, or one of
// the designs it was measured against.
type frameSender interface {
	Send(p []byte) Status
	// drain waits until everything sent has been written and returns the
	// number of write system calls made.
	drain() uint64
}

type outboxSender struct{ *Outbox }

func (o outboxSender) drain() uint64 {
	for o.Queued() > 0 {
		runtime.Gosched()
	}
	return o.Stats().Syscalls
}

// mutexSender is the simple alternative: every producer takes a mutex and
// writes its frame with its own system call.
type mutexSender struct {
	mu    sync.Mutex
	c     net.Conn
	calls uint64
}

func (m *mutexSender) Send(p []byte) Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls++
	if _, err := m.c.Write(p); err != nil {
		return Closed
	}
	return Sent
}

func (m *mutexSender) drain() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls
}

// goroutineSender is the other Outbox design: a flusher goroutine per
// connection, parked on a channel while idle, woken by each send, that
// drains everything queued into one writev. Like the Outbox, it has a byte
// limit and drops what does not fit.
type goroutineSender struct {
	limit  int
	mu     sync.Mutex
	q      *batch
	queued int
	wake   chan struct{}
	w      *Writer
	calls  uint64
	copied uint64 // bytes copied into the queue's chunks
}

func newGoroutineSender(c net.Conn, limit int) *goroutineSender {
	g := &goroutineSender{limit: limit, wake: make(chan struct{}, 1), w: NewWriter(c, nil)}
	go g.loop()
	return g
}

func (g *goroutineSender) Send(p []byte) Status { return g.send(p, false) }

func (g *goroutineSender) send(p []byte, shared bool) Status {
	g.mu.Lock()
	if g.queued > 0 && g.queued+len(p) > g.limit {
		g.mu.Unlock()
		return Dropped
	}
	if g.q == nil {
		g.q = getBatch()
	}
	copied := true
	if shared {
		copied = g.q.appendShared(p)
	} else {
		g.q.appendCopy(p)
	}
	if copied {
		g.copied += uint64(len(p))
	}
	g.queued += len(p)
	g.mu.Unlock()
	select {
	case g.wake <- struct{}{}:
	default:
	}
	return Queued
}

func (g *goroutineSender) loop() {
	for range g.wake {
		for {
			g.mu.Lock()
			q := g.q
			g.q = nil
			g.mu.Unlock()
			if q == nil {
				break
			}
			g.w.b = q
			n := q.n
			if err := g.w.Flush(); err != nil {
				return
			}
			g.mu.Lock()
			g.queued -= n
			g.calls = g.w.Stats().Syscalls
			g.mu.Unlock()
		}
	}
}

func (g *goroutineSender) drain() uint64 {
	for {
		g.mu.Lock()
		q, calls := g.queued, g.calls
		g.mu.Unlock()
		if q == 0 {
			return calls
		}
		runtime.Gosched()
	}
}

func (g *goroutineSender) close() { close(g.wake) }

// work burns CPU for n loop iterations (a few ns each) between two sends of
// a producer, standing in for the work that produces a frame.
func work(n int) {
	x := uint64(n)
	for i := 0; i < n; i++ {
		x = x*6364136223846793005 + 1442695040888963407
	}
	workSink.Store(x)
}

var workSink atomic.Uint64

// BenchmarkOutbox4Producers: 4 goroutines send b.N frames of 64 bytes in
// all to one connection, each doing gap loop iterations of work between two
// sends, so load rises as gap falls. It compares the Outbox with a
// mutex-guarded conn.Write per frame, and with the alternative Outbox design
// that has a flusher goroutine per connection. frames/writev shows the
// coalescing. Both queues get a limit no run reaches, so that every frame is
// written and ns/op is the cost of delivering one; at gap=0 they run again
// with the default 1 MiB limit, and dropped-% is what each could not take.
func BenchmarkOutbox4Producers(b *testing.B) {
	type impl struct {
		name string
		make func(c net.Conn) (frameSender, func())
	}
	outbox := func(name string, limit int) impl {
		return impl{name, func(c net.Conn) (frameSender, func()) {
			o := NewOutbox(c, &OutboxOptions{MaxQueued: limit})
			return outboxSender{o}, func() { o.Close() }
		}}
	}
	goroutine := func(name string, limit int) impl {
		return impl{name, func(c net.Conn) (frameSender, func()) {
			g := newGoroutineSender(c, limit)
			return g, g.close
		}}
	}
	mutex := impl{"mutex", func(c net.Conn) (frameSender, func()) {
		return &mutexSender{c: c}, func() {}
	}}
	for _, gap := range []int{20000, 2000, 200, 0} {
		impls := []impl{outbox("outbox", 1<<30), mutex, goroutine("goroutine", 1<<30)}
		if gap == 0 {
			impls = append(impls, outbox("outbox-1MiB", DefaultMaxQueued), goroutine("goroutine-1MiB", DefaultMaxQueued))
		}
		for _, impl := range impls {
			b.Run(fmt.Sprintf("gap=%d/impl=%s", gap, impl.name), func(b *testing.B) {
				s, closeSender := impl.make(benchConn(b))
				defer closeSender()
				runProducers(b, s, gap)
			})
		}
	}
}

// runProducers has 4 goroutines send b.N frames of 64 bytes in all, each
// separated by gap iterations of work, then waits for the sender to drain.
// It reports frames per write system call and the share of frames dropped.
func runProducers(b *testing.B, s frameSender, gap int) {
	const producers = 4
	b.SetBytes(64)
	b.ResetTimer()
	var wg sync.WaitGroup
	var dropped atomic.Int64
	for p := range producers {
		n := b.N / producers
		if p < b.N%producers {
			n++
		}
		wg.Go(func() {
			msg := make([]byte, 64)
			for range n {
				if gap > 0 {
					work(gap)
				}
				switch s.Send(msg) {
				case Dropped:
					dropped.Add(1)
				case Closed:
					b.Error("outbox closed")
					return
				}
			}
		})
	}
	wg.Wait()
	calls := s.drain()
	b.StopTimer()
	sent := b.N - int(dropped.Load())
	b.ReportMetric(float64(sent)/float64(max(calls, 1)), "frames/writev")
	b.ReportMetric(100*float64(dropped.Load())/float64(b.N), "dropped-%")
}

// BenchmarkOutboxIdleSend is one Send at a time into an idle outbox, as a
// client's lone request is, next to a direct conn.Write of the same bytes
// (the floor). copiedB/op is what the outbox copied: nothing when the
// socket takes the whole frame, which it is written from the caller's
// buffer.
func BenchmarkOutboxIdleSend(b *testing.B) {
	for _, size := range []int{32, 10 << 10} {
		frame := make([]byte, size)
		b.Run(fmt.Sprintf("size=%d/impl=outbox", size), func(b *testing.B) {
			o := NewOutbox(benchConn(b), nil)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				switch st := o.Send(frame); st {
				case Sent:
				case Queued: // the socket was full: the next Send waits until the outbox is idle again
					<-o.Drained()
				default:
					b.Fatal(st)
				}
			}
			b.ReportMetric(float64(o.Stats().Copied)/float64(b.N), "copiedB/op")
		})
		b.Run(fmt.Sprintf("size=%d/impl=conn.Write", size), func(b *testing.B) {
			c := benchConn(b)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Write(frame); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
