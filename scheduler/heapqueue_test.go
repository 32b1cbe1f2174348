package scheduler

import (
	"container/heap"
	"sync"
	"time"
)

// heapQueue is the baseline the wheel is measured against: the usual timer
// queue built on container/heap, with the same shape as Scheduler (one
// runtime timer, a mutex, batches to one callback) and items reused from a
// free list, so that it allocates nothing in steady state either. What is
// left to compare is the data structure: O(log n) sift against O(1) lists.
type heapQueue[T any] struct {
	fire   func([]T)
	origin time.Time

	mu        sync.Mutex
	items     heapItems[T]
	free      []*heapItem[T]
	timer     *time.Timer
	timerWhen time.Duration
	batch     []T
}

type heapItem[T any] struct {
	when  time.Duration // since origin
	value T
	index int // -1 when not queued
	gen   uint32
}

type heapHandle[T any] struct {
	item *heapItem[T]
	gen  uint32
}

type heapItems[T any] []*heapItem[T]

func (h heapItems[T]) Len() int           { return len(h) }
func (h heapItems[T]) Less(i, j int) bool { return h[i].when < h[j].when }
func (h heapItems[T]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *heapItems[T]) Push(x any) {
	it := x.(*heapItem[T])
	it.index = len(*h)
	*h = append(*h, it)
}
func (h *heapItems[T]) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	it.index = -1
	return it
}

const heapTimerIdle = time.Duration(1<<63 - 1)

func newHeapQueue[T any](fire func([]T)) *heapQueue[T] {
	q := &heapQueue[T]{fire: fire, origin: time.Now(), timerWhen: heapTimerIdle}
	q.timer = time.AfterFunc(heapTimerIdle, q.onTimer)
	q.timer.Stop()
	return q
}

func (q *heapQueue[T]) Arm(deadline time.Time, v T) heapHandle[T] {
	return q.arm(deadline.Sub(q.origin), v)
}

// ArmAfter reads the monotonic clock only, as Scheduler.ArmAfter does.
func (q *heapQueue[T]) ArmAfter(d time.Duration, v T) heapHandle[T] {
	return q.arm(time.Since(q.origin)+d, v)
}

func (q *heapQueue[T]) arm(when time.Duration, v T) heapHandle[T] {
	q.mu.Lock()
	var it *heapItem[T]
	if n := len(q.free); n > 0 {
		it = q.free[n-1]
		q.free = q.free[:n-1]
	} else {
		it = &heapItem[T]{}
	}
	it.when, it.value = when, v
	heap.Push(&q.items, it)
	q.wakeBy(when)
	h := heapHandle[T]{it, it.gen}
	q.mu.Unlock()
	return h
}

func (q *heapQueue[T]) wakeBy(when time.Duration) {
	if when < q.timerWhen {
		q.timerWhen = when
		q.timer.Reset(when - time.Since(q.origin))
	}
}

func (q *heapQueue[T]) release(it *heapItem[T]) {
	var zero T
	it.value = zero
	it.gen++
	q.free = append(q.free, it)
}

func (q *heapQueue[T]) Cancel(h heapHandle[T]) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	it := h.item
	if it.gen != h.gen || it.index < 0 {
		return false
	}
	heap.Remove(&q.items, it.index)
	q.release(it)
	return true
}

func (q *heapQueue[T]) Reset(h heapHandle[T], deadline time.Time) bool {
	return q.reset(h, deadline.Sub(q.origin))
}

func (q *heapQueue[T]) ResetAfter(h heapHandle[T], d time.Duration) bool {
	return q.reset(h, time.Since(q.origin)+d)
}

func (q *heapQueue[T]) reset(h heapHandle[T], when time.Duration) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	it := h.item
	if it.gen != h.gen || it.index < 0 {
		return false
	}
	it.when = when
	heap.Fix(&q.items, it.index)
	q.wakeBy(when)
	return true
}

func (q *heapQueue[T]) onTimer() {
	q.mu.Lock()
	now := time.Since(q.origin)
	batch := q.batch[:0]
	q.batch = nil // owned by this call until it is delivered
	for len(q.items) > 0 && q.items[0].when <= now {
		it := heap.Pop(&q.items).(*heapItem[T])
		batch = append(batch, it.value)
		q.release(it)
	}
	q.timerWhen = heapTimerIdle
	if len(q.items) > 0 {
		q.timerWhen = q.items[0].when
		q.timer.Reset(q.timerWhen - now)
	}
	q.mu.Unlock()
	if len(batch) > 0 {
		q.fire(batch)
	}
	clear(batch)
	q.mu.Lock()
	q.batch = batch[:0]
	q.mu.Unlock()
}

func (q *heapQueue[T]) Stop() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.timer.Stop()
	q.items = nil
	q.free = nil
}
