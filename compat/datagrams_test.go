package compat

import (
	"sync"
	"testing"

	"github.com/hotpath-go/hotpath/corkwriter"
)

// A datagramQueue holds at most maxQueuedDatagrams bytes, also when many
// goroutines push at once (room emits to a member from several rooms'
// emitters): each push looked at the total, then added to it, so pushes
// that looked together could all pass.
func TestDatagramQueueBoundUnderConcurrentPushes(t *testing.T) {
	for range 50 {
		done := make(chan struct{})
		release := make(chan struct{})
		q := newDatagramQueue(func([]byte) bool { <-release; return true }, done)
		pkt := make([]byte, 1200)
		var wg sync.WaitGroup
		var mu sync.Mutex
		queued := 0
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 64 {
					if q.push(pkt) == corkwriter.Queued {
						mu.Lock()
						queued++
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		// The writer holds one packet, taken out of the count.
		if held := q.queued.Load(); held > maxQueuedDatagrams {
			t.Fatalf("%d bytes queued, over the bound of %d (%d packets accepted)", held, maxQueuedDatagrams, queued)
		}
		close(done)
		close(release)
	}
}
