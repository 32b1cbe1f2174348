package compat

import "encoding/binary"

// batchMaxBytes bounds the items of one Batch packet, either way: a burst
// of calls (or of a batch's answers) leaves in packets of at most this
// size, well under any peer's message limit, and an item larger than this
// leaves alone, so batching never makes a peer refuse packets that would
// have passed one by one (PROTOCOL.md §4.7).
const batchMaxBytes = 64 << 10

// batchOverhead bounds a Batch packet's head: kind and count.
const batchOverhead = 1 + maxPrefixLen

// batchLimit is the most bytes of items one Batch packet may carry on a
// carrier whose packets are at most maxPacket bytes (0: no limit).
func batchLimit(maxPacket int) int {
	if maxPacket == 0 || maxPacket > batchMaxBytes {
		return batchMaxBytes
	}
	return maxPacket
}

// defaultMaxBatch is the most items a client puts in one Batch before the
// server's capabilities say how many it takes (Limits.MaxBatch's default).
const defaultMaxBatch = 1024

// nextBatch returns how many bytes and items at the front of items (each
// a uvarint length and a packet) fit one Batch packet of at most limit
// bytes and maxCount items: at least one item, however large.
func nextBatch(items []byte, limit int, maxCount uint32) (end int, count uint32) {
	for end < len(items) && count < maxCount {
		size, hl := binary.Uvarint(items[end:])
		next := end + hl + int(size)
		if count > 0 && next+batchOverhead > limit {
			break
		}
		end, count = next, count+1
	}
	return end, count
}
