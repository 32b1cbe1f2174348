package dictionary

import (
	"encoding/binary"
	"math"
	"math/bits"
)

// This file is the LZ77 half of the deflate encoder. A preset dictionary
// only pays for a small message if using it costs next to nothing per
// message. klauspost/compress's Writer.ResetDict re-encodes the dictionary
// on every message and StatelessDeflate hashes up to 8 KiB of it on every
// call (bench/results/dictionary-2026-12-02.txt: 17 µs for the 108 B event
// with the router's 899 B dictionary at level 1, 3.2 µs without). Here the
// dictionary is hashed once, into a read-only index shared by every encoder,
// and a message only hashes its own bytes.

const (
	minMatch     = 4
	maxMatch     = 258   // RFC 1951 §3.2.5: lengths 3..258
	maxDistance  = 32768 // RFC 1951 §3.2.5: distances 1..32768
	msgHashBits  = 13
	msgWays      = 2
	dictHashBits = 13
	dictWays     = 4
	// maxEncode: longer messages are left raw (no RPC message is this
	// long, and positions must fit an int32).
	maxEncode = 1 << 30
	// blockTokens bounds one block's tokens (and an encoder's memory).
	blockTokens = 1 << 14
	// lazyBelow: a match this long is taken without looking further.
	lazyBelow = 16
	// fixedOnlyTokens: blocks with fewer tokens use the fixed code without
	// pricing a dynamic one. On 2000 sample messages of the test router,
	// pricing smaller blocks too saved 0.5% of the bytes (under one byte a
	// message) for building three Huffman codes per message.
	fixedOnlyTokens = 96
)

func load32(b []byte, i int) uint32 { return binary.LittleEndian.Uint32(b[i:]) }

func hash4(u uint32, bits uint) uint32 { return (u * 0x9E3779B1) >> (32 - bits) }

// dictIndex maps 4-byte hashes to the last dictWays positions (plus one;
// zero is empty) of the dictionary that start with those bytes, latest
// first: the latest is nearest the message and cheapest to reach.
type dictIndex struct {
	data  []byte
	table [1 << dictHashBits][dictWays]uint16
}

func newDictIndex(data []byte) *dictIndex {
	x := &dictIndex{data: data}
	for p := 0; p+minMatch <= len(data); p++ {
		b := &x.table[hash4(load32(data, p), dictHashBits)]
		copy(b[1:], b[:dictWays-1])
		b[0] = uint16(p + 1)
	}
	return x
}

// matchLen counts the equal leading bytes of a and b.
func matchLen(a, b []byte) int {
	n := 0
	for len(a) >= 8 && len(b) >= 8 {
		if x := binary.LittleEndian.Uint64(a) ^ binary.LittleEndian.Uint64(b); x != 0 {
			return n + bits.TrailingZeros64(x)>>3
		}
		a, b, n = a[8:], b[8:], n+8
	}
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return n + i
		}
	}
	return n + min(len(a), len(b))
}

// A token is a literal byte, or a match: matchFlag | (length-3)<<15 |
// (distance-1).
const matchFlag = 1 << 31

// encoder compresses one message at a time; Deflate keeps a pool of them.
type encoder struct {
	// table maps 4-byte hashes to positions of the current message, stored
	// as base+position+1 so that entries of earlier messages (at most
	// base) are stale without clearing the table.
	table  [1 << msgHashBits][msgWays]int32
	base   int32
	tokens []uint32
	huff   huffScratch
	litF   [numLitLen]uint32
	distF  [numDist]uint32
	litL   [numLitLen]uint8
	distL  [numDist]uint8
	clF    [numCodeLen]uint32
	clL    [numCodeLen]uint8
	clC    [numCodeLen]hcode
	clSeq  []uint16
	hlit   int
	hdist  int
	hclen  int
	w      bitWriter
}

func newEncoder() *encoder {
	return &encoder{tokens: make([]uint32, 0, blockTokens)}
}

// appendDeflate appends src as raw deflate (RFC 1951) to dst, as if dict
// (which may be nil) had been written before it. src is at most maxEncode
// bytes, so that positions fit the int32 table.
func (e *encoder) appendDeflate(dst, src []byte, dict *dictIndex) []byte {
	if int64(e.base)+int64(len(src))+1 > math.MaxInt32 {
		clear(e.table[:])
		e.base = 0
	}
	base := e.base
	e.base += int32(len(src)) + 1

	var dd []byte
	if dict != nil {
		dd = dict.data
	}
	nd := len(dd)
	e.w = bitWriter{out: dst}
	e.tokens = e.tokens[:0]

	emitLiterals := func(lits []byte) {
		for _, b := range lits {
			e.tokens = append(e.tokens, uint32(b))
			if len(e.tokens) == blockTokens {
				e.writeBlock(false)
			}
		}
	}

	i, emit := 0, 0
	last := len(src) - minMatch
	for i <= last {
		bestLen, bestDist := e.find(src, i, base, dict)
		if bestLen > 0 && bestLen < lazyBelow && i+1 <= last {
			// Lazy matching: a longer match one byte on is worth a literal.
			if l, d := e.find(src, i+1, base, dict); l > bestLen+1 {
				i++
				bestLen, bestDist = l, d
			}
		}
		if bestLen == 0 {
			// Step faster through bytes that keep failing to match.
			i += 1 + (i-emit)>>5
			continue
		}
		bestLen = min(bestLen, maxMatch)
		// Extend the match backwards over literals not yet emitted.
		for i > emit && bestLen < maxMatch {
			var prev byte
			if s := i - bestDist - 1; s >= 0 {
				prev = src[s]
			} else if nd+s >= 0 {
				prev = dd[nd+s]
			} else {
				break
			}
			if prev != src[i-1] {
				break
			}
			i--
			bestLen++
		}
		emitLiterals(src[emit:i])
		e.tokens = append(e.tokens, matchFlag|uint32(bestLen-3)<<15|uint32(bestDist-1))
		if len(e.tokens) == blockTokens {
			e.writeBlock(false)
		}
		i += bestLen
		emit = i
		// Index positions inside the match too, so that later repeats of
		// what it covered find a start; a long match is indexed sparsely.
		step := 1 + bestLen>>4
		for j := i - bestLen + 1; j < i && j <= last; j += step {
			b := &e.table[hash4(load32(src, j), msgHashBits)]
			copy(b[1:], b[:msgWays-1])
			b[0] = base + int32(j) + 1
		}
	}
	emitLiterals(src[emit:])
	e.writeBlock(true)
	e.w.flush()
	out := e.w.out
	e.w.out = nil
	return out
}

// find returns the longest match for src[i:] among the last msgWays
// positions of the message and the dictWays positions of the dictionary with
// the same hash, and indexes i.
func (e *encoder) find(src []byte, i int, base int32, dict *dictIndex) (bestLen, bestDist int) {
	cv := load32(src, i)
	h := hash4(cv, msgHashBits)
	// What a match may cover: maxMatch bytes at most, which also keeps
	// matchLen from scanning a long run to its end every time.
	ahead := src[i+minMatch : min(len(src), i+maxMatch)]
	b := &e.table[h]
	for _, cand := range b {
		if cand <= base {
			break
		}
		c := int(cand - base - 1)
		if i-c > maxDistance {
			break
		}
		if load32(src, c) == cv {
			if l := minMatch + matchLen(src[c+minMatch:], ahead); l > bestLen {
				bestLen, bestDist = l, i-c
			}
		}
	}
	copy(b[1:], b[:msgWays-1])
	b[0] = base + int32(i) + 1
	if dict == nil || bestLen >= lazyBelow {
		return bestLen, bestDist
	}
	dd := dict.data
	nd := len(dd)
	for _, p1 := range &dict.table[hash4(cv, dictHashBits)] {
		if p1 == 0 {
			break
		}
		p := int(p1) - 1
		dist := nd - p + i
		if dist > maxDistance {
			break // the remaining ways are older, farther
		}
		if load32(dd, p) == cv {
			l := minMatch + matchLen(dd[p+minMatch:], ahead)
			if l > bestLen {
				bestLen, bestDist = l, dist
			}
		}
	}
	return bestLen, bestDist
}
