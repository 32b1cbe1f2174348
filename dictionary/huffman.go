package dictionary

import (
	"encoding/binary"
	"math/bits"
	"slices"
)

// This file writes RFC 1951 blocks: fixed Huffman codes (§3.2.6) for small
// messages, where a dynamic code's header would cost more than it saves, and
// dynamic codes (§3.2.7) above, whichever the exact bit count says is
// smaller.

// bitWriter appends bits to out, least significant first: RFC 1951 §3.1.1,
// "Data elements are packed into bytes in order of increasing bit number
// within the byte".
type bitWriter struct {
	out   []byte
	acc   uint64
	nbits uint
}

// write appends the n low bits of b; n is at most 32.
func (w *bitWriter) write(b uint32, n uint) {
	w.acc |= uint64(b) << w.nbits
	w.nbits += n
	if w.nbits >= 32 {
		w.out = binary.LittleEndian.AppendUint32(w.out, uint32(w.acc))
		w.acc >>= 32
		w.nbits -= 32
	}
}

func (w *bitWriter) writeCode(c hcode) { w.write(uint32(c.code), uint(c.len)) }

// flush writes the last partial byte, padded with zero bits.
func (w *bitWriter) flush() {
	for w.nbits > 0 {
		w.out = append(w.out, byte(w.acc))
		w.acc >>= 8
		w.nbits -= min(w.nbits, 8)
	}
	w.acc = 0
}

// hcode is a Huffman code, bit-reversed so that it can be written least
// significant bit first: RFC 1951 §3.1.1, "Huffman codes are packed starting
// with the most-significant bit of the code".
type hcode struct {
	code uint16
	len  uint8
}

const (
	numLitLen   = 286 // RFC 1951 §3.2.5: literal/length codes 0..285
	numDist     = 30  // distance codes 0..29
	numCodeLen  = 19  // §3.2.7: code length codes 0..18
	endOfBlock  = 256
	maxCodeBits = 15
	maxCLBits   = 7
)

// RFC 1951 §3.2.5, the length and distance tables.
var (
	lengthBase  = [29]uint16{3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258}
	lengthExtra = [29]uint8{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0}
	distBase    = [30]uint16{1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577}
	distExtra   = [30]uint8{0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13}
	// §3.2.7: "the code length code lengths ... in the order":
	codeLenOrder = [numCodeLen]uint8{16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15}
)

// Lookup tables filled by init: the length code of every match length, and
// the distance code of every distance (directly below 257, by 128-byte
// steps above, where every code's range is 128-aligned).
var (
	lengthCode    [259]uint8
	distCodeSmall [256]uint8
	distCodeLarge [256]uint8
	fixedLit      [288]hcode
	fixedDist     [32]hcode
	fixedLitBits  [288]uint8
)

func init() {
	for c, base := range lengthBase {
		for l := int(base); l < int(base)+1<<lengthExtra[c] && l <= 258; l++ {
			lengthCode[l] = uint8(c)
		}
	}
	for c, base := range distBase {
		for d := int(base); d < int(base)+1<<distExtra[c]; d++ {
			if d <= 256 {
				distCodeSmall[d-1] = uint8(c)
			} else {
				distCodeLarge[(d-1)>>7] = uint8(c)
			}
		}
	}
	// RFC 1951 §3.2.6: literal 0-143 8 bits, 144-255 9, 256-279 7,
	// 280-287 8; "Distance codes 0-31 are represented by (fixed-length)
	// 5-bit codes".
	for i := range fixedLitBits {
		switch {
		case i < 144:
			fixedLitBits[i] = 8
		case i < 256:
			fixedLitBits[i] = 9
		case i < 280:
			fixedLitBits[i] = 7
		default:
			fixedLitBits[i] = 8
		}
	}
	assignCodes(fixedLitBits[:], fixedLit[:])
	var distBits [32]uint8
	for i := range distBits {
		distBits[i] = 5
	}
	assignCodes(distBits[:], fixedDist[:])
}

func distCode(dist int) uint8 {
	if dist <= 256 {
		return distCodeSmall[dist-1]
	}
	return distCodeLarge[(dist-1)>>7]
}

// assignCodes gives canonical codes to code lengths, RFC 1951 §3.2.2.
func assignCodes(lengths []uint8, codes []hcode) {
	var count [maxCodeBits + 1]uint16
	for _, l := range lengths {
		count[l]++
	}
	count[0] = 0
	var next [maxCodeBits + 1]uint16
	code := uint16(0)
	for b := 1; b <= maxCodeBits; b++ {
		code = (code + count[b-1]) << 1
		next[b] = code
	}
	for i, l := range lengths {
		if l == 0 {
			codes[i] = hcode{}
			continue
		}
		codes[i] = hcode{code: bits.Reverse16(next[l]) >> (16 - l), len: l}
		next[l]++
	}
}

// huffScratch holds what building one code needs, so that building it
// allocates nothing.
type huffScratch struct {
	keys   [numLitLen]uint64
	freq   [2*numLitLen - 1]uint64
	parent [2*numLitLen - 1]int16
	depth  [2*numLitLen - 1]uint8
}

// buildLengths computes code lengths of at most limit bits for freq into
// lengths, forming a complete code (as inflaters demand) whenever at least
// one symbol is used: a lone symbol gets a 1-bit code and a 1-bit partner.
func (s *huffScratch) buildLengths(freq []uint32, lengths []uint8, limit uint8) {
	clear(lengths)
	n := 0
	for sym, f := range freq {
		if f > 0 {
			s.keys[n] = uint64(f)<<16 | uint64(sym)
			n++
		}
	}
	switch n {
	case 0:
		return
	case 1:
		sym := int(s.keys[0] & 0xffff)
		lengths[sym] = 1
		lengths[min(sym^1, len(lengths)-1)] = 1
		if sym == len(lengths)-1 {
			lengths[sym-1] = 1
		}
		return
	}
	keys := s.keys[:n]
	slices.Sort(keys) // by frequency, then symbol: deterministic

	// Two-queue Huffman: leaves 0..n-1 in ascending frequency, internal
	// nodes n..2n-2 created in ascending frequency too.
	for i, k := range keys {
		s.freq[i] = k >> 16
	}
	leaf, inner := 0, n
	pick := func(next int) int {
		if leaf < n && (inner >= next || s.freq[leaf] <= s.freq[inner]) {
			leaf++
			return leaf - 1
		}
		inner++
		return inner - 1
	}
	for next := n; next < 2*n-1; next++ {
		a := pick(next)
		b := pick(next)
		s.freq[next] = s.freq[a] + s.freq[b]
		s.parent[a], s.parent[b] = int16(next), int16(next)
	}
	root := 2*n - 2
	s.depth[root] = 0
	overflow := false
	for i := root - 1; i >= 0; i-- {
		d := s.depth[s.parent[i]] + 1
		s.depth[i] = d
		if i < n && d > limit {
			overflow = true
		}
	}
	for i, k := range keys {
		lengths[k&0xffff] = min(s.depth[i], limit)
	}
	if !overflow {
		return
	}
	// Clamped lengths oversubscribe the code: lengthen the least frequent
	// codes until the Kraft sum fits, then shorten the most frequent of the
	// longest codes until it is exactly complete.
	full := uint32(1) << limit
	var kraft uint32
	for _, k := range keys {
		kraft += full >> lengths[k&0xffff]
	}
	for kraft > full {
		for _, k := range keys {
			sym := k & 0xffff
			if lengths[sym] < limit {
				lengths[sym]++
				kraft -= full >> lengths[sym]
				if kraft <= full {
					break
				}
			}
		}
	}
	for kraft < full {
		for i := n - 1; i >= 0 && kraft < full; i-- {
			sym := keys[i] & 0xffff
			l := lengths[sym]
			if l > 1 && kraft+full>>l <= full {
				kraft += full >> l
				lengths[sym]--
			}
		}
	}
}
