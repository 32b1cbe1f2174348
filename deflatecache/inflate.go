package deflatecache

import (
	"compress/flate"
	"io"
	"math"
	"sync"
)

// DefaultMaxInflate caps an inflated message when the caller passes no cap:
// wsframe's default message limit.
const DefaultMaxInflate = 1 << 20

// trailer follows a message's payload into the inflater. RFC 7692 §7.2.2:
// "1. Append 4 octets of 0x00 0x00 0xff 0xff to the tail end of the
// payload of the message. 2. Decompress the resulting data using
// DEFLATE." The five bytes after those four are an empty final stored
// block: they end the DEFLATE stream, so the inflater reports io.EOF at
// the message's end instead of waiting for a next block. A message that
// already ended with a final block (RFC 7692 §7.2.3.4) stops before them.
var trailer = []byte{0x00, 0x00, 0xff, 0xff, 0x01, 0x00, 0x00, 0xff, 0xff}

// messageSource reads a message's payload and then the trailer, without
// copying the payload into a buffer of its own. It is an io.ByteReader, so
// the inflater reads from it directly, with no buffer in between.
type messageSource struct {
	payload []byte
	rest    []byte // what is left of trailer once payload is consumed
}

func (s *messageSource) reset(payload []byte) {
	s.payload = payload
	s.rest = trailer
}

func (s *messageSource) Read(p []byte) (int, error) {
	if len(s.payload) > 0 {
		n := copy(p, s.payload)
		s.payload = s.payload[n:]
		return n, nil
	}
	if len(s.rest) > 0 {
		n := copy(p, s.rest)
		s.rest = s.rest[n:]
		return n, nil
	}
	return 0, io.EOF
}

func (s *messageSource) ReadByte() (byte, error) {
	if len(s.payload) > 0 {
		c := s.payload[0]
		s.payload = s.payload[1:]
		return c, nil
	}
	if len(s.rest) > 0 {
		c := s.rest[0]
		s.rest = s.rest[1:]
		return c, nil
	}
	return 0, io.EOF
}

// An inflater is a DEFLATE decoder (a 32 KiB window and its Huffman
// tables, about 40 KiB) with the source it reads, pooled between
// messages: a connection keeps only its history, and only with context
// takeover.
//
// The decoder is the standard library's, not klauspost/compress's:
// klauspost's (v1.20.4) keeps the Huffman tables of an earlier stream
// through Reset, and a block that declares an empty code (legal for
// distances, never usable) then decodes with the tables of whatever
// message the pooled decoder saw before, possibly another connection's,
// where it must fail. compress/flate clears them. The README has the
// benchmark of both (BenchmarkInflater).
type inflater struct {
	src messageSource
	fr  io.ReadCloser
}

var inflaters = sync.Pool{New: func() any {
	in := &inflater{}
	in.fr = flate.NewReader(&in.src)
	return in
}}

// appendInflate appends the inflated payload to dst. history is the
// window of a peer with context takeover, nil for an empty one. The output
// may not exceed limit bytes: dst grows at most to len(dst)+limit, and one
// byte more is ErrTooLarge. Anything the decompressor rejects is
// ErrCorrupt. On error dst is returned with its length unchanged.
func (in *inflater) appendInflate(dst, payload, history []byte, limit int64) ([]byte, error) {
	in.src.reset(payload)
	if err := in.fr.(flate.Resetter).Reset(&in.src, history); err != nil {
		return dst, ErrCorrupt
	}
	start := len(dst)
	end := start + int(min(limit, int64(math.MaxInt-start)))
	for {
		if len(dst) == end {
			// At the cap: the message fits only if the stream ends here.
			var probe [1]byte
			n, err := in.fr.Read(probe[:])
			switch {
			case n > 0:
				return dst[:start], ErrTooLarge
			case err == io.EOF:
				return dst, nil
			default:
				return dst[:start], ErrCorrupt
			}
		}
		if len(dst) == cap(dst) {
			dst = growTo(dst, min(end, max(2*cap(dst), cap(dst)+4*len(payload)+512)))
		}
		n, err := in.fr.Read(dst[len(dst):min(cap(dst), end)])
		dst = dst[:len(dst)+n]
		switch err {
		case nil:
		case io.EOF:
			return dst, nil
		default:
			return dst[:start], ErrCorrupt
		}
	}
}

func growTo(b []byte, capacity int) []byte {
	nb := make([]byte, len(b), capacity)
	copy(nb, b)
	return nb
}
