package scheduler

import (
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// The baseline must be a working timer queue, or the benchmarks compare
// against nothing: it fires what is due, in order, and not what was
// cancelled.
func TestHeapQueueBaselineFires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var fired []int
		q := newHeapQueue(func(batch []int) {
			mu.Lock()
			fired = append(fired, batch...)
			mu.Unlock()
		})
		defer q.Stop()
		q.ArmAfter(3*time.Millisecond, 3)
		h := q.ArmAfter(2*time.Millisecond, 2)
		q.ArmAfter(time.Millisecond, 1)
		moved := q.ArmAfter(time.Hour, 4)
		if !q.Cancel(h) || q.Cancel(h) {
			t.Fatalf("Cancel: want true once")
		}
		if !q.ResetAfter(moved, 4*time.Millisecond) {
			t.Fatalf("ResetAfter of a pending deadline returned false")
		}
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(fired, []int{1, 3, 4}) {
			t.Fatalf("fired %v, want [1 3 4]", fired)
		}
	})
}
