package scheduler

import "math/bits"

// The wheel is hierarchical: level 0 has 64 buckets of one tick each, level
// 1 has 64 buckets of 64 ticks, level L has 64 buckets of 64^L ticks, and 11
// levels cover every uint64 tick. A deadline is placed at the highest level
// where its tick differs from the current tick, so a deadline of one hour at
// 1 ms granularity (3.6e6 ticks) sits at level 3 and moves down at most three
// times before it fires: each move is O(1), and a far deadline costs no
// more memory than a near one.
//
// Invariant: an entry in bucket (L, s) has the same tick digits as cur above
// level L, and digit s > cur's digit at level L. So every entry of level L
// is due before every entry of level L+1, and the earliest event is the
// lowest occupied bucket of the lowest occupied level.
const (
	levelBits  = 6
	levelSlots = 1 << levelBits
	levelMask  = levelSlots - 1
	levels     = (64 + levelBits - 1) / levelBits

	wheelBuckets = levels * levelSlots
	dueBucket    = wheelBuckets     // entries whose tick has already passed
	freeBucket   = wheelBuckets + 1 // marks a slot on the free list

	// Slots live in fixed pages so that growing never copies the slots
	// already in use (no latency spike under the lock at 100,000 pending),
	// and indexes stay valid.
	pageBits = 10
	pageSize = 1 << pageBits
	pageMask = pageSize - 1

	nilIndex = ^uint32(0)
	maxPages = int(nilIndex >> pageBits) // keeps every index below nilIndex
)

// entry is one deadline slot: 32 bytes for a pointer-sized T.
type entry[T any] struct {
	value  T
	tick   uint64 // the tick at which it fires
	next   uint32 // bucket list, or free list
	prev   uint32
	gen    uint32 // bumped each time the slot is freed; part of the Handle
	bucket uint16 // the list it is on
}

// wheel holds the deadlines. It is not safe for concurrent use; the
// Scheduler guards it with its mutex.
type wheel[T any] struct {
	cur      uint64 // every tick <= cur has been processed
	pages    []*[pageSize]entry[T]
	free     uint32
	pending  int
	heads    [dueBucket + 1]uint32
	occupied [levels]uint64 // bit s of level L: bucket (L, s) is not empty
}

func (w *wheel[T]) init() {
	w.free = nilIndex
	for i := range w.heads {
		w.heads[i] = nilIndex
	}
}

func (w *wheel[T]) at(i uint32) *entry[T] {
	return &w.pages[i>>pageBits][i&pageMask]
}

// alloc takes a free slot, growing by one page when none is left. It
// returns nilIndex when maxPages pages are full.
func (w *wheel[T]) alloc() uint32 {
	if w.free == nilIndex {
		if len(w.pages) >= maxPages {
			return nilIndex
		}
		p := new([pageSize]entry[T])
		base := uint32(len(w.pages)) << pageBits
		for k := range p {
			p[k] = entry[T]{next: base + uint32(k) + 1, gen: 1, bucket: freeBucket}
		}
		p[pageSize-1].next = nilIndex
		w.pages = append(w.pages, p)
		w.free = base
	}
	i := w.free
	w.free = w.at(i).next
	return i
}

// release returns slot i to the free list and makes its handles stale.
func (w *wheel[T]) release(i uint32) {
	e := w.at(i)
	var zero T
	e.value = zero
	e.gen++
	if e.gen == 0 {
		e.gen = 1
	}
	e.bucket = freeBucket
	e.next = w.free
	w.free = i
}

// lookup returns the pending slot named by (i, gen), or nil.
func (w *wheel[T]) lookup(i, gen uint32) *entry[T] {
	if int(i>>pageBits) >= len(w.pages) {
		return nil
	}
	e := w.at(i)
	if e.gen != gen || e.bucket == freeBucket {
		return nil
	}
	return e
}

// bucketFor returns the bucket a deadline of the given tick belongs in now.
func (w *wheel[T]) bucketFor(tick uint64) uint16 {
	if tick <= w.cur {
		return dueBucket
	}
	level := (bits.Len64(tick^w.cur) - 1) / levelBits
	slot := (tick >> (level * levelBits)) & levelMask
	return uint16(level*levelSlots) + uint16(slot)
}

func (w *wheel[T]) push(b uint16, i uint32) {
	e := w.at(i)
	e.bucket = b
	e.prev = nilIndex
	e.next = w.heads[b]
	if e.next != nilIndex {
		w.at(e.next).prev = i
	}
	w.heads[b] = i
	if b < wheelBuckets {
		w.occupied[b/levelSlots] |= 1 << (b % levelSlots)
	}
}

func (w *wheel[T]) unlink(i uint32) {
	e := w.at(i)
	if e.prev != nilIndex {
		w.at(e.prev).next = e.next
	} else {
		w.heads[e.bucket] = e.next
		if e.next == nilIndex && e.bucket < wheelBuckets {
			w.occupied[e.bucket/levelSlots] &^= 1 << (e.bucket % levelSlots)
		}
	}
	if e.next != nilIndex {
		w.at(e.next).prev = e.prev
	}
}

// add places value v to fire at tick and returns its slot, or nilIndex when
// the wheel is full.
func (w *wheel[T]) add(tick uint64, v T) uint32 {
	i := w.alloc()
	if i == nilIndex {
		return nilIndex
	}
	e := w.at(i)
	e.value = v
	e.tick = tick
	w.push(w.bucketFor(tick), i)
	w.pending++
	return i
}

// remove drops the pending slot i.
func (w *wheel[T]) remove(i uint32) {
	w.unlink(i)
	w.release(i)
	w.pending--
}

// move changes the tick of the pending slot i. When the new tick belongs in
// the same bucket (the idle-timeout pattern: many pushes within one bucket)
// it only rewrites the tick.
func (w *wheel[T]) move(i uint32, tick uint64) {
	e := w.at(i)
	if b := w.bucketFor(tick); b != e.bucket {
		w.unlink(i)
		w.push(b, i)
	}
	e.tick = tick
}

// nextEvent returns the earliest tick at which the wheel has work: entries
// to fire, or a higher-level bucket to move down. ok is false when the
// wheel is empty.
func (w *wheel[T]) nextEvent() (tick uint64, bucket uint16, ok bool) {
	if w.heads[dueBucket] != nilIndex {
		return w.cur, dueBucket, true
	}
	for level, occ := range w.occupied {
		if occ == 0 {
			continue
		}
		slot := bits.TrailingZeros64(occ)
		shift := uint(level * levelBits)
		above := shift + levelBits // may be >= 64: the shifts then yield 0
		tick = w.cur>>above<<above | uint64(slot)<<shift
		return tick, uint16(level*levelSlots + slot), true
	}
	return 0, 0, false
}

// advance processes every tick up to and including now: entries due by
// then are appended to batch, in tick order, and their slots freed; far
// buckets whose time has come move down a level.
func (w *wheel[T]) advance(now uint64, batch []T) []T {
	for {
		tick, b, ok := w.nextEvent()
		if !ok || tick > now && b != dueBucket {
			break
		}
		w.cur = tick
		i := w.heads[b]
		w.heads[b] = nilIndex
		if b < wheelBuckets {
			w.occupied[b/levelSlots] &^= 1 << (b % levelSlots)
		}
		if b == dueBucket || b < levelSlots {
			// Level 0 and the due list hold only entries due by now.
			for i != nilIndex {
				e := w.at(i)
				next := e.next
				batch = append(batch, e.value)
				w.release(i)
				w.pending--
				i = next
			}
			continue
		}
		for i != nilIndex {
			e := w.at(i)
			next := e.next
			w.push(w.bucketFor(e.tick), i)
			i = next
		}
	}
	if now > w.cur {
		w.cur = now
	}
	return batch
}
