package scheduler

import (
	"math/bits"
	"testing"
	"time"
)

// checkWheel verifies the wheel's structure: every list is well linked,
// each bucket's bit says whether it is empty, each entry sits where its tick
// belongs relative to cur (the invariant of wheel.go), the free list and the
// pending count add up.
func checkWheel[T any](t testing.TB, w *wheel[T]) {
	t.Helper()
	count := 0
	for b := range uint16(dueBucket + 1) {
		if b < wheelBuckets {
			bit := w.occupied[b/levelSlots]>>(b%levelSlots)&1 == 1
			if bit != (w.heads[b] != nilIndex) {
				t.Fatalf("bucket %d: occupied bit %v, head %d", b, bit, w.heads[b])
			}
		}
		prev := nilIndex
		for i := w.heads[b]; i != nilIndex; i = w.at(i).next {
			e := w.at(i)
			if e.bucket != b || e.prev != prev {
				t.Fatalf("slot %d in list %d: bucket %d, prev %d want %d", i, b, e.bucket, e.prev, prev)
			}
			if b == dueBucket {
				if e.tick > w.cur {
					t.Fatalf("slot %d on the due list has tick %d > cur %d", i, e.tick, w.cur)
				}
			} else {
				level, slot := int(b/levelSlots), uint64(b%levelSlots)
				shift := uint(level * levelBits)
				above := shift + levelBits
				if e.tick>>above != w.cur>>above || e.tick>>shift&levelMask != slot || slot <= w.cur>>shift&levelMask {
					t.Fatalf("slot %d tick %d in bucket (%d, %d) with cur %d", i, e.tick, level, slot, w.cur)
				}
			}
			prev = i
			count++
		}
	}
	if count != w.pending {
		t.Fatalf("%d entries on lists, pending = %d", count, w.pending)
	}
	free := 0
	for i := w.free; i != nilIndex; i = w.at(i).next {
		if w.at(i).bucket != freeBucket {
			t.Fatalf("slot %d on the free list has bucket %d", i, w.at(i).bucket)
		}
		free++
	}
	if free+count != len(w.pages)*pageSize {
		t.Fatalf("%d free + %d pending != %d slots", free, count, len(w.pages)*pageSize)
	}
}

func TestWheelFarDeadlineMovesDownLevels(t *testing.T) {
	var w wheel[int]
	w.init()
	// One hour at 1 ms granularity: 3.6e6 ticks, level 3.
	const hour = uint64(time.Hour / time.Millisecond)
	i := w.add(hour, 7)
	if got := int(w.at(i).bucket / levelSlots); got != (bits.Len64(hour)-1)/levelBits {
		t.Fatalf("one hour placed at level %d", got)
	}
	checkWheel(t, &w)
	var batch []int
	moves := 0
	for {
		tick, b, ok := w.nextEvent()
		if !ok {
			t.Fatalf("wheel empty before the deadline fired")
		}
		if tick > hour {
			t.Fatalf("next event %d after the deadline %d", tick, hour)
		}
		batch = w.advance(tick, batch)
		checkWheel(t, &w)
		if len(batch) > 0 {
			if tick != hour || batch[0] != 7 {
				t.Fatalf("fired %v at tick %d, want [7] at %d", batch, tick, hour)
			}
			break
		}
		if b >= levelSlots {
			moves++
		}
	}
	if moves > 3 {
		t.Fatalf("a level-3 deadline moved down %d times, want at most 3", moves)
	}
}

func TestWheelHandleGenerations(t *testing.T) {
	var w wheel[int]
	w.init()
	i := w.add(10, 1)
	gen := w.at(i).gen
	w.remove(i)
	if w.lookup(i, gen) != nil {
		t.Fatalf("a removed slot still matches its old generation")
	}
	j := w.add(20, 2)
	if j != i {
		t.Fatalf("freed slot %d not reused (got %d)", i, j)
	}
	if w.lookup(i, gen) != nil {
		t.Fatalf("the old handle matches the reused slot")
	}
	if w.lookup(j, w.at(j).gen) == nil {
		t.Fatalf("the new handle does not match")
	}
	// A slot on the free list never matches, whatever generation is asked.
	k := w.add(30, 3)
	w.remove(k)
	if w.lookup(k, w.at(k).gen) != nil {
		t.Fatalf("a free slot matched its current generation")
	}
	if w.lookup(5*pageSize, 1) != nil {
		t.Fatalf("an index past the pages matched")
	}
	checkWheel(t, &w)
}

func TestWheelGenerationSkipsZero(t *testing.T) {
	var w wheel[int]
	w.init()
	i := w.add(1, 1)
	w.at(i).gen = ^uint32(0)
	w.remove(i)
	if g := w.at(i).gen; g != 1 {
		t.Fatalf("generation wrapped to %d, want 1", g)
	}
}

func TestWheelGrowsByPages(t *testing.T) {
	var w wheel[int]
	w.init()
	for k := range 3*pageSize + 1 {
		if w.add(uint64(k+1), k) == nilIndex {
			t.Fatalf("add %d failed", k)
		}
	}
	if len(w.pages) != 4 {
		t.Fatalf("%d pages for 3 pages + 1 entries", len(w.pages))
	}
	checkWheel(t, &w)
	batch := w.advance(1<<40, nil)
	if len(batch) != 3*pageSize+1 {
		t.Fatalf("fired %d of %d", len(batch), 3*pageSize+1)
	}
	for k, v := range batch {
		if v != k {
			t.Fatalf("batch[%d] = %d: not in tick order", k, v)
		}
	}
	checkWheel(t, &w)
}
