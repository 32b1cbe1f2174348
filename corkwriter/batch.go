package corkwriter

import (
	"net"
	"sync"
)

// chunkSize is the size of the pooled buffers that small writes are copied
// into. 16 KiB holds a typical turn (64 answers of 64 B take 4 KiB) in one
// chunk, so consecutive small writes become one iovec.
const chunkSize = 16 << 10

// copySharedBelow is the size under which WriteShared copies instead of
// referencing. An iovec entry costs the kernel about as much as copying a
// couple of hundred bytes, and copying small frames next to their neighbours
// keeps a long queue of tiny broadcasts within one writev's 1024 entries.
const copySharedBelow = 256

// maxPooledSegs bounds the segment list a batch keeps when it returns to the
// pool, so one huge backlog does not pin its memory forever.
const maxPooledSegs = 4096

type chunk struct {
	buf  [chunkSize]byte
	used int
	// last is the index in the owning batch's segs of the last segment that
	// points into buf; once head passes it the chunk can go back to the pool.
	last int
}

var chunkPool = sync.Pool{New: func() any { return new(chunk) }}

func getChunk() *chunk {
	c := chunkPool.Get().(*chunk)
	c.used = 0
	return c
}

// batch is the ordered list of byte segments a writer still has to send.
// Copied bytes live in pooled chunks, shared buffers are referenced. A batch
// exists only while something is pending: writers take one from batchPool
// when the first byte arrives and return it when the last byte has left, so
// an idle connection holds neither segments nor chunks.
type batch struct {
	segs [][]byte // segs[head:] are unsent; the front one may be partly sent
	head int
	n    int // unsent bytes

	chunks []*chunk // chunks that segs point into, oldest first
	// open reports that the last segment is a copy region ending at the
	// tail chunk's used mark, so the next copy can extend it in place.
	open bool

	bufs       net.Buffers // scratch for the net.Buffers fallback
	sysScratch             // per-platform scratch for the system call: iovecs
}

var batchPool = sync.Pool{New: func() any { return new(batch) }}

func getBatch() *batch { return batchPool.Get().(*batch) }

// release drops every pending segment, returns the chunks to their pool and
// the batch to its own. References to shared buffers are cleared so that a
// pooled batch never keeps a broadcast frame alive.
func (b *batch) release() {
	for _, c := range b.chunks {
		chunkPool.Put(c)
	}
	clear(b.chunks)
	b.chunks = b.chunks[:0]
	clear(b.segs)
	b.segs = b.segs[:0]
	if cap(b.segs) > maxPooledSegs {
		b.segs = nil
	}
	b.head, b.n, b.open = 0, 0, false
	b.clearScratch()
	batchPool.Put(b)
}

func (b *batch) tail() *chunk {
	if len(b.chunks) == 0 {
		return nil
	}
	return b.chunks[len(b.chunks)-1]
}

// appendCopy copies p to the end of the batch. Consecutive copies share one
// segment for as long as they fit in the tail chunk.
func (b *batch) appendCopy(p []byte) {
	for len(p) > 0 {
		c := b.tail()
		if c == nil || c.used == chunkSize {
			c = getChunk()
			b.chunks = append(b.chunks, c)
			b.open = false
		}
		n := copy(c.buf[c.used:], p)
		if b.open {
			last := &b.segs[len(b.segs)-1]
			*last = (*last)[:len(*last)+n]
		} else {
			b.segs = append(b.segs, c.buf[c.used:c.used+n])
			b.open = true
		}
		c.used += n
		c.last = len(b.segs) - 1
		b.n += n
		p = p[n:]
	}
}

// appendRef appends p to the batch without copying it.
func (b *batch) appendRef(p []byte) {
	if len(p) == 0 {
		return
	}
	b.segs = append(b.segs, p)
	b.open = false
	b.n += len(p)
}

// appendShared appends an immutable buffer: by reference, or copied when it
// is small enough that copying is cheaper than an iovec entry. It reports
// whether it copied.
func (b *batch) appendShared(p []byte) (copied bool) {
	if len(p) < copySharedBelow {
		b.appendCopy(p)
		return true
	}
	b.appendRef(p)
	return false
}

// advance marks the first n unsent bytes as sent. Fully sent segments are
// cleared, and chunks no segment points into any more go back to the pool.
func (b *batch) advance(n int) {
	b.n -= n
	for n > 0 {
		s := b.segs[b.head]
		if n < len(s) {
			b.segs[b.head] = s[n:]
			break
		}
		n -= len(s)
		b.segs[b.head] = nil
		b.head++
	}
	if b.n == 0 {
		return // the owner releases the whole batch
	}
	drop := 0
	for drop < len(b.chunks) && b.chunks[drop].last < b.head {
		chunkPool.Put(b.chunks[drop])
		drop++
	}
	if drop > 0 {
		if drop == len(b.chunks) {
			b.open = false
		}
		m := copy(b.chunks, b.chunks[drop:])
		clear(b.chunks[m:])
		b.chunks = b.chunks[:m]
	}
	// A batch that never drains (a non-blocking writer with a backlog) would
	// otherwise grow its segment list forever; slide the unsent part down.
	if b.head >= 64 && b.head*2 >= len(b.segs) {
		m := copy(b.segs, b.segs[b.head:])
		clear(b.segs[m:])
		b.segs = b.segs[:m]
		for _, c := range b.chunks {
			c.last -= b.head
		}
		b.head = 0
	}
}

// copied returns a batch holding copies of b's unsent segments, and
// releases b: for a batch that references a buffer its owner is about to
// reuse.
func (b *batch) copied() *batch {
	nb := getBatch()
	for _, s := range b.segs[b.head:] {
		nb.appendCopy(s)
	}
	b.release()
	return nb
}

// moveFrom appends every unsent segment of src to b, taking over its chunks,
// and releases src. The tail chunk of src is closed: later copies into b
// start a new segment.
func (b *batch) moveFrom(src *batch) {
	base := len(b.segs) - src.head
	b.segs = append(b.segs, src.segs[src.head:]...)
	for _, c := range src.chunks {
		c.last += base
		b.chunks = append(b.chunks, c)
	}
	b.n += src.n
	b.open = false
	clear(src.chunks)
	src.chunks = src.chunks[:0]
	src.release()
}
