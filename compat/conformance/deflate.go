package conformance

import (
	"errors"
	"fmt"
)

// A DEFLATE (RFC 1951) codec of the suite's own. compress/flate cannot
// say how far back a stream reaches, nor compress with a window under
// 32 KiB; RFC 7692 §7.1.2 makes both matter: a server that answered
// server_max_window_bits=N "MUST NOT use an LZ77 sliding window longer
// than 2^N bytes", and a client that offered client_max_window_bits=N
// compresses with at most that window.

// inflater decodes raw DEFLATE and fails on any back-reference farther
// than its window. With takeover it keeps the window of earlier messages,
// as RFC 7692 §7.2.2 says a receiver does under context takeover.
type inflater struct {
	windowBits int
	takeover   bool
	hist       []byte // the last 2^windowBits bytes of earlier messages
}

// errTooFar is a back-reference beyond the negotiated window.
var errTooFar = errors.New("back-reference beyond the negotiated LZ77 window")

// inflateMessage decompresses one permessage-deflate payload: RFC 7692
// §7.2.2 "Append 4 octets of 0x00 0x00 0xff 0xff to the tail end of the
// payload of the message" and decompress. It stops after a block with
// BFINAL set, or at the end of the input; max caps the output.
func (f *inflater) inflateMessage(payload []byte, max int) ([]byte, error) {
	in := append(append([]byte(nil), payload...), 0, 0, 0xff, 0xff)
	d := decoder{in: in, window: 1 << f.windowBits, max: max}
	if f.takeover {
		d.out = append(d.out, f.hist...)
		d.start = len(f.hist)
	}
	if err := d.run(); err != nil {
		return nil, err
	}
	msg := append([]byte(nil), d.out[d.start:]...)
	if f.takeover {
		all := d.out
		if len(all) > 1<<f.windowBits {
			all = all[len(all)-1<<f.windowBits:]
		}
		f.hist = append(f.hist[:0], all...)
	}
	return msg, nil
}

type decoder struct {
	in     []byte
	pos    int    // next byte of in to load into acc
	acc    uint64 // bits loaded and not consumed, first bit lowest
	nacc   uint   // how many
	out    []byte
	start  int // out[:start] is history from earlier messages
	window int
	max    int
}

var errInputEnd = errors.New("deflate stream ends inside a block")

// bits consumes n bits (n <= 32), first bit lowest.
func (d *decoder) bits(n uint) (int, error) {
	for d.nacc < n {
		if d.pos >= len(d.in) {
			return 0, errInputEnd
		}
		d.acc |= uint64(d.in[d.pos]) << d.nacc
		d.pos++
		d.nacc += 8
	}
	v := int(d.acc & (1<<n - 1))
	d.acc >>= n
	d.nacc -= n
	return v, nil
}

// atEnd reports whether only the padding bits of the last byte remain.
func (d *decoder) atEnd() bool {
	consumed := d.pos*8 - int(d.nacc)
	return (consumed+7)>>3 >= len(d.in)
}

func (d *decoder) run() error {
	for !d.atEnd() {
		final, err := d.bits(1)
		if err != nil {
			return err
		}
		kind, err := d.bits(2)
		if err != nil {
			return err
		}
		switch kind {
		case 0:
			err = d.stored()
		case 1:
			err = d.codes(&fixedLit, &fixedDist)
		case 2:
			err = d.dynamic()
		default:
			err = errors.New("deflate block type 3 is reserved")
		}
		if err != nil {
			return err
		}
		if final == 1 {
			return nil
		}
	}
	return nil
}

func (d *decoder) stored() error {
	// Skip to the byte boundary, then give back the whole bytes loaded
	// but not consumed: the block's header and data are read from in.
	d.acc >>= d.nacc % 8
	d.nacc -= d.nacc % 8
	d.pos -= int(d.nacc / 8)
	d.acc, d.nacc = 0, 0
	i := d.pos
	if i+4 > len(d.in) {
		return errInputEnd
	}
	n := int(d.in[i]) | int(d.in[i+1])<<8
	if n != ^(int(d.in[i+2])|int(d.in[i+3])<<8)&0xFFFF {
		return errors.New("stored block length does not match its complement")
	}
	i += 4
	if i+n > len(d.in) {
		return errInputEnd
	}
	if err := d.grow(n); err != nil {
		return err
	}
	d.out = append(d.out, d.in[i:i+n]...)
	d.pos = i + n
	return nil
}

func (d *decoder) grow(n int) error {
	if len(d.out)-d.start+n > d.max {
		return fmt.Errorf("inflated message exceeds %d bytes", d.max)
	}
	return nil
}

// huffman is a canonical Huffman code as counts of codes per length and
// symbols in code order (the decoding scheme of zlib's puff.c).
type huffman struct {
	count  [16]int
	symbol []int
}

func newHuffman(lengths []int) (huffman, error) {
	var h huffman
	for _, l := range lengths {
		h.count[l]++
	}
	left := 1
	for l := 1; l < 16; l++ {
		left <<= 1
		left -= h.count[l]
		if left < 0 {
			return h, errors.New("over-subscribed Huffman code")
		}
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
	return h, nil
}

func (d *decoder) decode(h *huffman) (int, error) {
	code, first, index := 0, 0, 0
	for l := 1; l < 16; l++ {
		b, err := d.bits(1)
		if err != nil {
			return 0, err
		}
		code |= b
		count := h.count[l]
		if code-count < first {
			return h.symbol[index+code-first], nil
		}
		index += count
		first += count
		first <<= 1
		code <<= 1
	}
	return 0, errors.New("invalid Huffman code")
}

var (
	lengthBase  = [29]int{3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258}
	lengthExtra = [29]int{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0}
	distBase    = [30]int{1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577}
	distExtra   = [30]int{0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13}

	fixedLit, fixedDist = fixedCodes()
)

func fixedCodes() (huffman, huffman) {
	lit := make([]int, 288)
	for s := range lit {
		switch {
		case s < 144:
			lit[s] = 8
		case s < 256:
			lit[s] = 9
		case s < 280:
			lit[s] = 7
		default:
			lit[s] = 8
		}
	}
	dist := make([]int, 30)
	for s := range dist {
		dist[s] = 5
	}
	l, _ := newHuffman(lit)
	ds, _ := newHuffman(dist)
	return l, ds
}

func (d *decoder) codes(lit, dist *huffman) error {
	for {
		sym, err := d.decode(lit)
		if err != nil {
			return err
		}
		switch {
		case sym < 256:
			if err := d.grow(1); err != nil {
				return err
			}
			d.out = append(d.out, byte(sym))
			continue
		case sym == 256:
			return nil
		case sym > 285:
			return fmt.Errorf("invalid length symbol %d", sym)
		}
		sym -= 257
		extra, err := d.bits(uint(lengthExtra[sym]))
		if err != nil {
			return err
		}
		length := lengthBase[sym] + extra
		dsym, err := d.decode(dist)
		if err != nil {
			return err
		}
		if dsym > 29 {
			return fmt.Errorf("invalid distance symbol %d", dsym)
		}
		extra, err = d.bits(uint(distExtra[dsym]))
		if err != nil {
			return err
		}
		distance := distBase[dsym] + extra
		if distance > d.window {
			return fmt.Errorf("%w: distance %d, window %d", errTooFar, distance, d.window)
		}
		if distance > len(d.out) {
			return fmt.Errorf("back-reference of %d bytes before the start of the stream", distance)
		}
		if err := d.grow(length); err != nil {
			return err
		}
		for range length {
			d.out = append(d.out, d.out[len(d.out)-distance])
		}
	}
}

var codeLengthOrder = [19]int{16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15}

func (d *decoder) dynamic() error {
	nlen, err := d.bits(5)
	if err != nil {
		return err
	}
	ndist, err := d.bits(5)
	if err != nil {
		return err
	}
	ncode, err := d.bits(4)
	if err != nil {
		return err
	}
	nlen, ndist, ncode = nlen+257, ndist+1, ncode+4
	if nlen > 286 || ndist > 30 {
		return errors.New("too many length or distance codes")
	}
	var clen [19]int
	for i := range ncode {
		if clen[codeLengthOrder[i]], err = d.bits(3); err != nil {
			return err
		}
	}
	ch, err := newHuffman(clen[:])
	if err != nil {
		return err
	}
	lengths := make([]int, nlen+ndist)
	for i := 0; i < len(lengths); {
		sym, err := d.decode(&ch)
		if err != nil {
			return err
		}
		if sym < 16 {
			lengths[i] = sym
			i++
			continue
		}
		var rep, val int
		switch sym {
		case 16:
			if i == 0 {
				return errors.New("repeat with no previous length")
			}
			val = lengths[i-1]
			rep, err = d.bits(2)
			rep += 3
		case 17:
			rep, err = d.bits(3)
			rep += 3
		default:
			rep, err = d.bits(7)
			rep += 11
		}
		if err != nil {
			return err
		}
		if i+rep > len(lengths) {
			return errors.New("code lengths overrun")
		}
		for range rep {
			lengths[i] = val
			i++
		}
	}
	if lengths[256] == 0 {
		return errors.New("no end-of-block code")
	}
	lit, err := newHuffman(lengths[:nlen])
	if err != nil {
		return err
	}
	dist, err := newHuffman(lengths[nlen:])
	if err != nil {
		return err
	}
	return d.codes(&lit, &dist)
}

// deflater compresses as a permessage-deflate client with an LZ77 window
// of 2^windowBits bytes: greedy matching, one fixed-Huffman block per
// message, ended as RFC 7692 §7.2.1 says ("Compress all the octets of
// the payload of the message using DEFLATE", flush to a byte boundary
// with an empty stored block, and "Remove 4 octets (that are 0x00 0x00
// 0xff 0xff) from the tail end"). With takeover, matches reach into the
// messages sent before.
type deflater struct {
	windowBits int
	takeover   bool
	hist       []byte
}

func (f *deflater) deflateMessage(msg []byte) []byte {
	window := 1 << f.windowBits
	var data []byte
	if f.takeover {
		data = append(data, f.hist...)
	}
	start := len(data)
	data = append(data, msg...)

	var w bitWriter
	w.write(0, 1) // BFINAL 0
	w.write(1, 2) // fixed Huffman
	// last[h] is one more than the latest position whose next three
	// bytes hash to h; 0 is none.
	last := make([]int32, 1<<15)
	hash := func(i int) uint32 {
		return (uint32(data[i]) | uint32(data[i+1])<<8 | uint32(data[i+2])<<16) * 2654435761 >> 17
	}
	for i := 0; i+2 < start; i++ {
		last[hash(i)] = int32(i + 1)
	}
	for i := start; i < len(data); {
		if i+2 < len(data) {
			h := hash(i)
			if j := int(last[h]) - 1; j >= 0 && i-j <= window {
				n := 0
				for n < 258 && i+n < len(data) && data[j+n] == data[i+n] {
					n++
				}
				if n >= 3 {
					w.length(n)
					w.distance(i - j)
					for k := i; k < i+n && k+2 < len(data); k++ {
						last[hash(k)] = int32(k + 1)
					}
					i += n
					continue
				}
			}
			last[h] = int32(i + 1)
		}
		w.literal(int(data[i]))
		i++
	}
	w.literal(256)
	w.write(0, 3) // an empty stored block, BFINAL 0: the sync flush
	w.align()
	// The stored block's 00 00 ff ff is what RFC 7692 §7.2.1 removes.
	if f.takeover {
		if len(data) > window {
			data = data[len(data)-window:]
		}
		f.hist = append(f.hist[:0], data...)
	}
	return w.out
}

// bitWriter writes DEFLATE's LSB-first bit stream.
type bitWriter struct {
	out   []byte
	acc   uint32
	nbits int
}

func (w *bitWriter) write(v uint32, n int) {
	w.acc |= v << w.nbits
	w.nbits += n
	for w.nbits >= 8 {
		w.out = append(w.out, byte(w.acc))
		w.acc >>= 8
		w.nbits -= 8
	}
}

func (w *bitWriter) align() {
	if w.nbits > 0 {
		w.out = append(w.out, byte(w.acc))
		w.acc, w.nbits = 0, 0
	}
}

// huff writes a Huffman code, which DEFLATE packs most significant bit
// first.
func (w *bitWriter) huff(code uint32, n int) {
	var rev uint32
	for i := range n {
		rev |= (code >> i & 1) << (n - 1 - i)
	}
	w.write(rev, n)
}

// literal writes a literal/length symbol in the fixed code (RFC 1951
// §3.2.6).
func (w *bitWriter) literal(sym int) {
	switch {
	case sym < 144:
		w.huff(uint32(0x30+sym), 8)
	case sym < 256:
		w.huff(uint32(0x190+sym-144), 9)
	case sym < 280:
		w.huff(uint32(sym-256), 7)
	default:
		w.huff(uint32(0xC0+sym-280), 8)
	}
}

func (w *bitWriter) length(n int) {
	s := len(lengthBase) - 1
	for lengthBase[s] > n {
		s--
	}
	w.literal(257 + s)
	w.write(uint32(n-lengthBase[s]), lengthExtra[s])
}

func (w *bitWriter) distance(n int) {
	s := len(distBase) - 1
	for distBase[s] > n {
		s--
	}
	w.huff(uint32(s), 5)
	w.write(uint32(n-distBase[s]), distExtra[s])
}
