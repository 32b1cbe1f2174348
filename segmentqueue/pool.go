package segmentqueue

import (
	"math/bits"
	"sync"
)

// Pooled memory comes in power-of-two classes. The same pools back the
// chunks that Write copies into and the buffers that Next joins a
// straddling message into, so a connection that only ever writes small
// reads and one that reassembles 16 MiB messages both reach a steady state
// without allocating.
const (
	minClass = 6  // 64 B: the smallest join buffer worth pooling
	maxClass = 30 // 1 GiB: larger joins are allocated and left to the GC

	// Write copies into chunks of at least minChunk bytes so that small
	// reads coalesce, and at most maxChunk bytes so that a large read does
	// not pin one huge block until its last byte is consumed.
	minChunk = 512
	maxChunk = 64 << 10

	// Fill reads into a new chunk of at least minFill bytes, the read
	// buffer size of most Go WebSocket libraries, so that a read is not cut
	// short by a nearly full chunk.
	minFill = 4 << 10
)

// buffer is a block of pooled memory. class is its pool index (log2 of its
// size), or -1 for a block too large to pool.
type buffer struct {
	b     []byte
	class int
}

var pools [maxClass - minClass + 1]sync.Pool

// classOf returns the pool class that holds n bytes.
func classOf(n int) int {
	return max(bits.Len(uint(n-1)), minClass)
}

// getBuffer returns a block of at least n bytes, from its pool when one is
// there. The contents are whatever the previous user left.
func getBuffer(n int) *buffer {
	k := classOf(n)
	if k > maxClass {
		return &buffer{b: make([]byte, n), class: -1}
	}
	if v := pools[k-minClass].Get(); v != nil {
		return v.(*buffer)
	}
	return &buffer{b: make([]byte, 1<<k), class: k}
}

// putBuffer hands b back to its pool. The caller must hold no slice of it.
func putBuffer(b *buffer) {
	if b.class >= 0 {
		pools[b.class-minClass].Put(b)
	}
}

// chunkSize chooses the size of the next chunk Write copies into when rem
// bytes remain to be copied and the tail chunk (if any) has prev bytes.
// Chunks double along a stream of small writes, so a long message written
// in small reads spends few segments of the segment limit.
func chunkSize(rem, prev int) int {
	size := max(1<<classOf(min(rem, maxChunk)), 2*prev, minChunk)
	return min(size, maxChunk)
}
