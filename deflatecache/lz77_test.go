package deflatecache

import (
	"errors"
	"fmt"
)

// traceInflate is a small RFC 1951 decoder, written after the structure of
// zlib's puff.c, that reports what the production decoders cannot: the
// longest back-reference a stream uses. It proves that a message
// compressed for a window of 2^w bytes never refers further back, which
// RFC 7692 §7.2.1 requires. history is what the stream may refer to before
// its first byte; the output is returned without it. The stream ends at a
// final block or, after a block, at the end of data.
func traceInflate(data, history []byte) (out []byte, maxDist int, err error) {
	br := &bitReader{in: data}
	buf := append([]byte(nil), history...)
	for {
		if br.pos >= len(br.in) && br.cnt == 0 {
			return buf[len(history):], maxDist, nil
		}
		final, err := br.bits(1)
		if err != nil {
			return nil, 0, err
		}
		typ, err := br.bits(2)
		if err != nil {
			return nil, 0, err
		}
		switch typ {
		case 0:
			br.cnt, br.buf = 0, 0 // to a byte boundary
			if br.pos+4 > len(br.in) {
				return nil, 0, errShort
			}
			n := int(br.in[br.pos]) | int(br.in[br.pos+1])<<8
			nn := int(br.in[br.pos+2]) | int(br.in[br.pos+3])<<8
			br.pos += 4
			if n != ^nn&0xffff || br.pos+n > len(br.in) {
				return nil, 0, errors.New("bad stored block")
			}
			buf = append(buf, br.in[br.pos:br.pos+n]...)
			br.pos += n
		case 1:
			buf, err = br.codes(buf, &fixedLit, &fixedDist, &maxDist)
		case 2:
			var lit, dist huffman
			if err = br.dynamic(&lit, &dist); err == nil {
				buf, err = br.codes(buf, &lit, &dist, &maxDist)
			}
		default:
			return nil, 0, errors.New("reserved block type")
		}
		if err != nil {
			return nil, 0, err
		}
		if final == 1 {
			return buf[len(history):], maxDist, nil
		}
	}
}

var errShort = errors.New("stream ends inside a block")

type bitReader struct {
	in  []byte
	pos int
	buf uint32
	cnt uint
}

func (b *bitReader) bits(n uint) (int, error) {
	for b.cnt < n {
		if b.pos >= len(b.in) {
			return 0, errShort
		}
		b.buf |= uint32(b.in[b.pos]) << b.cnt
		b.pos++
		b.cnt += 8
	}
	v := int(b.buf & (1<<n - 1))
	b.buf >>= n
	b.cnt -= n
	return v, nil
}

// huffman is a canonical code as counts per length and symbols in code
// order.
type huffman struct {
	count  [16]int
	symbol []int
}

func (h *huffman) build(lengths []int) {
	h.count = [16]int{}
	for _, l := range lengths {
		h.count[l]++
	}
	var offs [16]int
	for l := 1; l < 15; l++ {
		offs[l+1] = offs[l] + h.count[l]
	}
	h.symbol = make([]int, len(lengths))
	for s, l := range lengths {
		if l != 0 {
			h.symbol[offs[l]] = s
			offs[l]++
		}
	}
}

func (b *bitReader) decode(h *huffman) (int, error) {
	code, first, index := 0, 0, 0
	for l := 1; l < 16; l++ {
		bit, err := b.bits(1)
		if err != nil {
			return 0, err
		}
		code |= bit
		count := h.count[l]
		if code-count < first {
			return h.symbol[index+(code-first)], nil
		}
		index += count
		first += count
		first <<= 1
		code <<= 1
	}
	return 0, errors.New("bad Huffman code")
}

var (
	lengthBase  = [29]int{3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258}
	lengthExtra = [29]uint{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0}
	distBase    = [30]int{1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577}
	distExtra   = [30]uint{0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13}

	fixedLit, fixedDist = func() (lit, dist huffman) {
		var l [288]int
		for i := range l {
			switch {
			case i < 144:
				l[i] = 8
			case i < 256:
				l[i] = 9
			case i < 280:
				l[i] = 7
			default:
				l[i] = 8
			}
		}
		lit.build(l[:])
		var d [30]int
		for i := range d {
			d[i] = 5
		}
		dist.build(d[:])
		return lit, dist
	}()
)

func (b *bitReader) codes(out []byte, lit, dist *huffman, maxDist *int) ([]byte, error) {
	for {
		sym, err := b.decode(lit)
		if err != nil {
			return nil, err
		}
		switch {
		case sym < 256:
			out = append(out, byte(sym))
			continue
		case sym == 256:
			return out, nil
		case sym > 285:
			return nil, errors.New("bad length symbol")
		}
		sym -= 257
		extra, err := b.bits(lengthExtra[sym])
		if err != nil {
			return nil, err
		}
		length := lengthBase[sym] + extra
		ds, err := b.decode(dist)
		if err != nil {
			return nil, err
		}
		if ds > 29 {
			return nil, errors.New("bad distance symbol")
		}
		extra, err = b.bits(distExtra[ds])
		if err != nil {
			return nil, err
		}
		d := distBase[ds] + extra
		if d > len(out) {
			return nil, fmt.Errorf("distance %d before the start of history", d)
		}
		*maxDist = max(*maxDist, d)
		for range length {
			out = append(out, out[len(out)-d])
		}
	}
}

var codeLengthOrder = [19]int{16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15}

func (b *bitReader) dynamic(lit, dist *huffman) error {
	nlen, err := b.bits(5)
	if err != nil {
		return err
	}
	ndist, err := b.bits(5)
	if err != nil {
		return err
	}
	ncode, err := b.bits(4)
	if err != nil {
		return err
	}
	nlen, ndist, ncode = nlen+257, ndist+1, ncode+4
	var cl [19]int
	for i := range ncode {
		if cl[codeLengthOrder[i]], err = b.bits(3); err != nil {
			return err
		}
	}
	var lencode huffman
	lencode.build(cl[:])
	lengths := make([]int, 0, nlen+ndist)
	for len(lengths) < nlen+ndist {
		sym, err := b.decode(&lencode)
		if err != nil {
			return err
		}
		if sym < 16 {
			lengths = append(lengths, sym)
			continue
		}
		prev, rep := 0, 0
		switch sym {
		case 16:
			if len(lengths) == 0 {
				return errors.New("repeat with no previous length")
			}
			prev = lengths[len(lengths)-1]
			rep, err = b.bits(2)
			rep += 3
		case 17:
			rep, err = b.bits(3)
			rep += 3
		default:
			rep, err = b.bits(7)
			rep += 11
		}
		if err != nil {
			return err
		}
		for range rep {
			lengths = append(lengths, prev)
		}
	}
	if len(lengths) > nlen+ndist {
		return errors.New("too many code lengths")
	}
	lit.build(lengths[:nlen])
	dist.build(lengths[nlen:])
	return nil
}
