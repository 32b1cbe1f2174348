package segmentqueue

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"
)

// appendFrame appends an RFC 6455 §5.2 frame header and the payload masked
// with key (when masked) to dst.
func appendFrame(dst []byte, payload []byte, masked bool, key [4]byte) []byte {
	dst = append(dst, 0x82) // FIN, binary
	maskBit := byte(0)
	if masked {
		maskBit = 0x80
	}
	// RFC 6455 §5.2: "If 0-125, that is the payload length. If 126, the
	// following 2 bytes interpreted as a 16-bit unsigned integer are the
	// payload length. If 127, the following 8 bytes interpreted as a 64-bit
	// unsigned integer [...] are the payload length."
	switch n := len(payload); {
	case n <= 125:
		dst = append(dst, maskBit|byte(n))
	case n <= 0xFFFF:
		dst = append(dst, maskBit|126)
		dst = binary.BigEndian.AppendUint16(dst, uint16(n))
	default:
		dst = append(dst, maskBit|127)
		dst = binary.BigEndian.AppendUint64(dst, uint64(n))
	}
	if !masked {
		return append(dst, payload...)
	}
	dst = append(dst, key[:]...)
	start := len(dst)
	dst = append(dst, payload...)
	maskBytes(dst[start:], key, 0)
	return dst
}

// maskBytes XORs b with key starting at key position pos and returns the
// position after b, so a payload can be unmasked one segment at a time.
// RFC 6455 §5.3: "Octet i of the transformed data ("transformed-octet-i")
// is the XOR of octet i of the original data ("original-octet-i") with
// octet at index i modulo 4 of the masking key ("masking-key-octet-j")".
func maskBytes(b []byte, key [4]byte, pos int) int {
	for i := range b {
		b[i] ^= key[(pos+i)&3]
	}
	return (pos + len(b)) & 3
}

// frameDecoder consumes frames from a Queue the way wsframe's decoder does:
// it peeks the 2-byte start of the header, then the whole 2..14-byte header
// (both may straddle segments), discards it, unmasks the payload in place
// segment by segment through Segments, and takes it with Next.
type frameDecoder struct {
	scratch          [14]byte
	segs             [][]byte
	straddledHeaders int
	multiSegPayloads int
}

// next decodes one frame, or reports false when the queue does not hold a
// whole one yet.
func (d *frameDecoder) next(t *testing.T, q *Queue) ([]byte, bool) {
	t.Helper()
	if q.Len() < 2 {
		return nil, false
	}
	h, err := q.Peek(2, d.scratch[:0])
	if err != nil {
		t.Fatalf("Peek(2): %v", err)
	}
	masked := h[1]&0x80 != 0
	hlen := 2
	switch h[1] & 0x7F {
	case 126:
		hlen += 2
	case 127:
		hlen += 8
	}
	if masked {
		hlen += 4
	}
	if q.Len() < hlen {
		return nil, false
	}
	h, err = q.Peek(hlen, d.scratch[:0])
	if err != nil {
		t.Fatalf("Peek(%d): %v", hlen, err)
	}
	if &h[0] == &d.scratch[0] {
		d.straddledHeaders++
	}
	plen, rest := int(h[1]&0x7F), h[2:]
	switch plen {
	case 126:
		plen, rest = int(binary.BigEndian.Uint16(rest)), rest[2:]
	case 127:
		plen, rest = int(binary.BigEndian.Uint64(rest)), rest[8:]
	}
	var key [4]byte
	if masked {
		copy(key[:], rest)
	}
	if q.Len() < hlen+plen {
		return nil, false
	}
	if err := q.Discard(hlen); err != nil {
		t.Fatalf("Discard(%d): %v", hlen, err)
	}
	if masked {
		d.segs, err = q.Segments(plen, d.segs[:0])
		if err != nil {
			t.Fatalf("Segments(%d): %v", plen, err)
		}
		if len(d.segs) > 1 {
			d.multiSegPayloads++
		}
		pos := 0
		for _, s := range d.segs {
			pos = maskBytes(s, key, pos)
		}
	}
	payload, err := q.Next(plen)
	if err != nil {
		t.Fatalf("Next(%d): %v", plen, err)
	}
	return payload, true
}

// TestDecoderAccessPattern runs a frame decoder over a stream of masked and
// unmasked frames of every header size (2, 4, 10 bytes, plus 4 with a mask),
// cut into random segments as small as one byte and delivered by Push or
// Write, and checks that every payload comes out unmasked and whole.
func TestDecoderAccessPattern(t *testing.T) {
	rng := rand.New(rand.NewPCG(6455, 7692))
	var payloads [][]byte
	var stream []byte
	var cuts []int // segment boundaries, some of them inside a header
	bytesSrc := rand.NewChaCha8([32]byte{6, 4, 5, 5})
	for i := range 300 {
		var n int
		switch {
		case i%20 == 19:
			n = 0x10000 + rng.IntN(5000) // 8-byte extended length
		case i%2 == 0:
			n = rng.IntN(126)
		default:
			n = 126 + rng.IntN(3000) // 2-byte extended length
		}
		p := make([]byte, n)
		bytesSrc.Read(p)
		key := [4]byte{byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32())}
		payloads = append(payloads, p)
		start := len(stream)
		stream = appendFrame(stream, p, i%4 != 0, key)
		hlen := len(stream) - start - n
		if rng.IntN(2) == 0 {
			cuts = append(cuts, start+1+rng.IntN(hlen-1))
		}
		for range rng.IntN(4) {
			cuts = append(cuts, start+rng.IntN(len(stream)-start))
		}
	}
	cuts = append(cuts, len(stream))
	slices.Sort(cuts)

	var q Queue
	var d frameDecoder
	next, from := 0, 0
	for _, to := range cuts {
		if to == from {
			continue
		}
		seg := stream[from:to:to]
		from = to
		var err error
		if rng.IntN(4) != 0 {
			err = q.Push(seg)
		} else {
			_, err = q.Write(seg)
		}
		if err != nil {
			t.Fatal(err)
		}
		for {
			got, ok := d.next(t, &q)
			if !ok {
				break
			}
			if !bytes.Equal(got, payloads[next]) {
				t.Fatalf("frame %d: payload of %d bytes differs", next, len(got))
			}
			next++
		}
		q.Release()
	}
	if next != len(payloads) || q.Len() != 0 {
		t.Fatalf("decoded %d of %d frames, %d bytes left", next, len(payloads), q.Len())
	}
	if d.straddledHeaders < 20 || d.multiSegPayloads < 20 {
		t.Fatalf("the stream did not exercise straddling: %d headers, %d payloads", d.straddledHeaders, d.multiSegPayloads)
	}
}
