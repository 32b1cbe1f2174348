package scheduler

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// Each benchmark runs the scheduler beside time.AfterFunc + Stop (one
// runtime timer per deadline) and beside heapQueue (container/heap behind
// one timer), in the same run, so that the README quotes ratios.
//
// Reading the clock is a large share of every operation (time.Since costs
// more than the whole of an arm plus a cancel on some virtual machines), so
// each scheduler operation is measured twice: impl=scheduler takes a
// deadline computed from a time the caller already holds (one clock read
// per turn or per read, shared by everything the turn arms), and
// impl=scheduler-after reads the monotonic clock on every call through
// ArmAfter/ResetAfter. AfterFunc always reads the clock inside the runtime.
// The heap takes given deadlines, like impl=scheduler, so the two compare
// data structures alone. Pending deadlines lie 10 to 20 s ahead, the armed
// ones 15 s ahead, so nothing fires while a benchmark runs.

var pendingCounts = []int{64, 1024, 100_000}

const (
	pendingFrom  = 10 * time.Second
	pendingSpan  = 10 * time.Second
	armedTimeout = 15 * time.Second
)

func pendingAfter(k, n int) time.Duration {
	return pendingFrom + time.Duration(k)*(pendingSpan/time.Duration(n))
}

// jitter spreads the armed deadlines over 1,024 ms, as real timeouts armed
// at different moments are.
func jitter(i int) time.Duration { return time.Duration(i&1023) * time.Millisecond }

func noopBatch([]uint64) {}

func noop() {}

// serial runs op in a b.Loop and reports allocations and CPU per op; op
// returns false when the deadline it should have found pending was not.
func serial(b *testing.B, op func(i int) bool) {
	b.ReportAllocs()
	cpu := startCPU()
	i := 0
	for b.Loop() {
		if !op(i) {
			b.Fatal("a deadline that should be pending was not")
		}
		i++
	}
	cpu.report(b, b.N, "cpu-ns/op")
}

// parallel runs op from every core and reports allocations and CPU per op.
func parallel(b *testing.B, op func(i int) bool) {
	b.ReportAllocs()
	var next atomic.Int64
	cpu := startCPU()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1)) * 7919
		for pb.Next() {
			if !op(i) {
				b.Error("a deadline that should be pending was not")
				return
			}
			i++
		}
	})
	cpu.report(b, b.N, "cpu-ns/op")
}

// BenchmarkArmCancel is the client case: n calls in flight, each with a
// timeout. Every operation arms the timeout of a new call and cancels the
// timeout of the call armed n operations earlier (answered in time), so n
// deadlines stay pending and every cancel finds a deadline that has sat in
// the structure while n others came and went.
func BenchmarkArmCancel(b *testing.B) {
	for _, n := range pendingCounts {
		b.Run(fmt.Sprintf("pending=%d/impl=scheduler", n), func(b *testing.B) {
			s := New(noopBatch)
			defer s.Stop()
			ring := make([]Handle, n)
			for k := range ring {
				ring[k] = s.ArmAfter(pendingAfter(k, n), uint64(k))
			}
			at := s.Now().Add(armedTimeout)
			serial(b, func(i int) bool {
				h := s.Arm(at.Add(jitter(i)), uint64(i))
				ok := s.Cancel(ring[i%n])
				ring[i%n] = h
				return ok
			})
		})
		b.Run(fmt.Sprintf("pending=%d/impl=scheduler-after", n), func(b *testing.B) {
			s := New(noopBatch)
			defer s.Stop()
			ring := make([]Handle, n)
			for k := range ring {
				ring[k] = s.ArmAfter(pendingAfter(k, n), uint64(k))
			}
			serial(b, func(i int) bool {
				h := s.ArmAfter(armedTimeout+jitter(i), uint64(i))
				ok := s.Cancel(ring[i%n])
				ring[i%n] = h
				return ok
			})
		})
		b.Run(fmt.Sprintf("pending=%d/impl=afterfunc", n), func(b *testing.B) {
			ring := make([]*time.Timer, n)
			for k := range ring {
				ring[k] = time.AfterFunc(pendingAfter(k, n), noop)
			}
			defer func() {
				for _, t := range ring {
					t.Stop()
				}
			}()
			serial(b, func(i int) bool {
				t := time.AfterFunc(armedTimeout+jitter(i), noop)
				ok := ring[i%n].Stop()
				ring[i%n] = t
				return ok
			})
		})
		b.Run(fmt.Sprintf("pending=%d/impl=heap", n), func(b *testing.B) {
			q := newHeapQueue(noopBatch)
			defer q.Stop()
			ring := make([]heapHandle[uint64], n)
			for k := range ring {
				ring[k] = q.ArmAfter(pendingAfter(k, n), uint64(k))
			}
			at := time.Now().Add(armedTimeout)
			serial(b, func(i int) bool {
				h := q.Arm(at.Add(jitter(i)), uint64(i))
				ok := q.Cancel(ring[i%n])
				ring[i%n] = h
				return ok
			})
		})
	}
	// The API choice: a per-deadline closure (Scheduler[func()]) instead of
	// one callback and a value. The closure is what allocates.
	b.Run("pending=1024/impl=scheduler-closure", func(b *testing.B) {
		s := New(func(batch []func()) {
			for _, f := range batch {
				f()
			}
		})
		defer s.Stop()
		var fired atomic.Uint64
		ring := make([]Handle, 1024)
		for k := range ring {
			ring[k] = s.ArmAfter(pendingAfter(k, 1024), noop)
		}
		at := s.Now().Add(armedTimeout)
		serial(b, func(i int) bool {
			id := uint64(i)
			h := s.Arm(at.Add(jitter(i)), func() { fired.Add(id) })
			ok := s.Cancel(ring[i%1024])
			ring[i%1024] = h
			return ok
		})
	})
}

// parallelRing runs the client pattern of BenchmarkArmCancel from every
// core: each goroutine keeps its own share of the n calls in flight, and
// every operation arms a new call's timeout and cancels the one its
// goroutine armed n/GOMAXPROCS operations earlier.
func parallelRing[H any](b *testing.B, n int, arm func(i int) H, cancel func(H) bool) {
	per := max(1, n/runtime.GOMAXPROCS(0))
	b.ReportAllocs()
	var next atomic.Int64
	cpu := startCPU()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1)) * 7919
		ring := make([]H, per)
		for k := range ring {
			ring[k] = arm(i + k)
		}
		for pb.Next() {
			h := arm(i)
			if !cancel(ring[i%per]) {
				b.Error("a deadline that should be pending was not")
				return
			}
			ring[i%per] = h
			i++
		}
		for _, h := range ring {
			cancel(h)
		}
	})
	cpu.report(b, b.N, "cpu-ns/op")
}

// BenchmarkArmCancelParallel is the client case under contention: 1,024
// calls in flight on one scheduler, armed and cancelled from every core.
func BenchmarkArmCancelParallel(b *testing.B) {
	const n = 1024
	b.Run("pending=1024/impl=scheduler", func(b *testing.B) {
		s := New(noopBatch)
		defer s.Stop()
		at := s.Now().Add(armedTimeout)
		parallelRing(b, n, func(i int) Handle { return s.Arm(at.Add(jitter(i)), uint64(i)) }, s.Cancel)
	})
	b.Run("pending=1024/impl=scheduler-after", func(b *testing.B) {
		s := New(noopBatch)
		defer s.Stop()
		parallelRing(b, n, func(i int) Handle { return s.ArmAfter(armedTimeout+jitter(i), uint64(i)) }, s.Cancel)
	})
	b.Run("pending=1024/impl=afterfunc", func(b *testing.B) {
		parallelRing(b, n, func(i int) *time.Timer { return time.AfterFunc(armedTimeout+jitter(i), noop) },
			(*time.Timer).Stop)
	})
	b.Run("pending=1024/impl=heap", func(b *testing.B) {
		q := newHeapQueue(noopBatch)
		defer q.Stop()
		at := time.Now().Add(armedTimeout)
		parallelRing(b, n, func(i int) heapHandle[uint64] { return q.Arm(at.Add(jitter(i)), uint64(i)) }, q.Cancel)
	})
}

// BenchmarkResetIdle is the server case: 100,000 connections with an idle
// deadline at 1 s granularity, each read pushing its connection's deadline
// out by the idle timeout. The serial form is one reader; the parallel form
// is every core reading at once. With a given deadline, time moves on by
// 100 ns a read (ten million reads a second).
func BenchmarkResetIdle(b *testing.B) {
	const (
		n    = 100_000
		idle = 30 * time.Second
		read = 100 * time.Nanosecond
	)
	for _, inParallel := range []bool{false, true} {
		mode := "serial"
		if inParallel {
			mode = "parallel"
		}
		run := func(b *testing.B, reset func(i int) bool) {
			if inParallel {
				parallel(b, reset)
			} else {
				serial(b, reset)
			}
		}
		b.Run(fmt.Sprintf("pending=%d/%s/impl=scheduler", n, mode), func(b *testing.B) {
			s := New(noopBatch, WithGranularity(time.Second))
			defer s.Stop()
			handles := make([]Handle, n)
			for k := range handles {
				handles[k] = s.ArmAfter(idle, uint64(k))
			}
			at := s.Now().Add(idle)
			run(b, func(i int) bool { return s.Reset(handles[i%n], at.Add(time.Duration(i)*read)) })
		})
		b.Run(fmt.Sprintf("pending=%d/%s/impl=scheduler-after", n, mode), func(b *testing.B) {
			s := New(noopBatch, WithGranularity(time.Second))
			defer s.Stop()
			handles := make([]Handle, n)
			for k := range handles {
				handles[k] = s.ArmAfter(idle, uint64(k))
			}
			run(b, func(i int) bool { return s.ResetAfter(handles[i%n], idle) })
		})
		b.Run(fmt.Sprintf("pending=%d/%s/impl=afterfunc", n, mode), func(b *testing.B) {
			timers := make([]*time.Timer, n)
			for k := range timers {
				timers[k] = time.AfterFunc(idle, noop)
			}
			defer func() {
				for _, t := range timers {
					t.Stop()
				}
			}()
			run(b, func(i int) bool { return timers[i%n].Reset(idle) })
		})
		b.Run(fmt.Sprintf("pending=%d/%s/impl=heap", n, mode), func(b *testing.B) {
			q := newHeapQueue(noopBatch)
			defer q.Stop()
			handles := make([]heapHandle[uint64], n)
			for k := range handles {
				handles[k] = q.ArmAfter(idle, uint64(k))
			}
			at := time.Now().Add(idle)
			run(b, func(i int) bool { return q.Reset(handles[i%n], at.Add(time.Duration(i)*read)) })
		})
	}
}

// heapInUse returns the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkMemoryPerPending measures the heap held per pending deadline
// with 100,000 pending, each carrying one pointer-sized value. The caller's
// own slice of handles is allocated before the first reading and not
// counted, for every implementation. ns/op is the time to arm 100,000.
func BenchmarkMemoryPerPending(b *testing.B) {
	const n = 100_000
	report := func(b *testing.B, bytes float64) {
		b.ReportMetric(bytes/n, "B/deadline")
	}
	b.Run("pending=100000/impl=scheduler", func(b *testing.B) {
		handles := make([]Handle, n)
		var perDeadline float64
		for b.Loop() {
			b.StopTimer()
			before := heapInUse()
			b.StartTimer()
			s := New(noopBatch)
			for k := range handles {
				handles[k] = s.ArmAfter(time.Hour, uint64(k))
			}
			b.StopTimer()
			perDeadline = float64(heapInUse() - before)
			if s.Len() != n {
				b.Fatalf("Len() = %d", s.Len())
			}
			s.Stop()
			b.StartTimer()
		}
		report(b, perDeadline)
	})
	b.Run("pending=100000/impl=afterfunc", func(b *testing.B) {
		timers := make([]*time.Timer, n)
		var perDeadline float64
		for b.Loop() {
			b.StopTimer()
			before := heapInUse()
			b.StartTimer()
			for k := range timers {
				timers[k] = time.AfterFunc(time.Hour, noop)
			}
			b.StopTimer()
			perDeadline = float64(heapInUse() - before)
			for k, t := range timers {
				t.Stop()
				timers[k] = nil
			}
			b.StartTimer()
		}
		report(b, perDeadline)
	})
	b.Run("pending=100000/impl=afterfunc-closure", func(b *testing.B) {
		// The usual way to carry a value with a runtime timer: a closure.
		timers := make([]*time.Timer, n)
		var fired atomic.Uint64
		var perDeadline float64
		for b.Loop() {
			b.StopTimer()
			before := heapInUse()
			b.StartTimer()
			for k := range timers {
				id := uint64(k)
				timers[k] = time.AfterFunc(time.Hour, func() { fired.Add(id) })
			}
			b.StopTimer()
			perDeadline = float64(heapInUse() - before)
			for k, t := range timers {
				t.Stop()
				timers[k] = nil
			}
			b.StartTimer()
		}
		report(b, perDeadline)
	})
	b.Run("pending=100000/impl=heap", func(b *testing.B) {
		handles := make([]heapHandle[uint64], n)
		var perDeadline float64
		for b.Loop() {
			b.StopTimer()
			before := heapInUse()
			b.StartTimer()
			q := newHeapQueue(noopBatch)
			for k := range handles {
				handles[k] = q.ArmAfter(time.Hour, uint64(k))
			}
			b.StopTimer()
			perDeadline = float64(heapInUse() - before)
			q.Stop()
			clear(handles)
			b.StartTimer()
		}
		report(b, perDeadline)
	})
}

// cpuMeter reports the process CPU time per operation ("cpu-ns/op") from
// its start to report, when the platform can measure it.
type cpuMeter struct {
	start time.Duration
	ok    bool
}

func startCPU() cpuMeter {
	start, ok := processCPU()
	return cpuMeter{start, ok}
}

func (m cpuMeter) report(b *testing.B, ops int, unit string) {
	end, ok := processCPU()
	if m.ok && ok && ops > 0 {
		b.ReportMetric(float64(end-m.start)/float64(ops), unit)
	}
}

// BenchmarkExpiry arms 100,000 deadlines spread evenly over one second
// (one every 10 µs) on the real clock and waits until all have fired: one
// operation is that whole second. It reports the process CPU per fired
// deadline, arming included ("cpu-ns/fired"). The scheduler and the heap
// are made once per benchmark and reused, as a server would; the scheduler
// uses 1 ms granularity, about 100 deadlines a batch.
func BenchmarkExpiry(b *testing.B) {
	const (
		n    = 100_000
		span = time.Second
		step = span / n
	)
	var (
		fired atomic.Int64
		done  = make(chan struct{}, 1)
	)
	count := func(k int) {
		if fired.Add(int64(k)) == n {
			done <- struct{}{}
		}
	}
	run := func(b *testing.B, armAll func()) {
		cpu := startCPU()
		for b.Loop() {
			fired.Store(0)
			armAll()
			<-done
		}
		cpu.report(b, b.N*n, "cpu-ns/fired")
	}
	b.Run("deadlines=100000/impl=scheduler", func(b *testing.B) {
		s := New(func(batch []uint64) { count(len(batch)) })
		defer s.Stop()
		run(b, func() {
			at := s.Now()
			for k := range n {
				s.Arm(at.Add(time.Duration(k)*step), uint64(k))
			}
		})
	})
	// Coarser buckets: ten times fewer wake-ups, deadlines up to 10 ms late.
	b.Run("deadlines=100000/impl=scheduler-10ms", func(b *testing.B) {
		s := New(func(batch []uint64) { count(len(batch)) }, WithGranularity(10*time.Millisecond))
		defer s.Stop()
		run(b, func() {
			at := s.Now()
			for k := range n {
				s.Arm(at.Add(time.Duration(k)*step), uint64(k))
			}
		})
	})
	b.Run("deadlines=100000/impl=afterfunc", func(b *testing.B) {
		f := func() { count(1) }
		run(b, func() {
			for k := range n {
				time.AfterFunc(time.Duration(k)*step, f)
			}
		})
	})
	b.Run("deadlines=100000/impl=heap", func(b *testing.B) {
		q := newHeapQueue(func(batch []uint64) { count(len(batch)) })
		defer q.Stop()
		run(b, func() {
			at := time.Now()
			for k := range n {
				q.Arm(at.Add(time.Duration(k)*step), uint64(k))
			}
		})
	})
}
