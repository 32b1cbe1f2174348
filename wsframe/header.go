package wsframe

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Opcode is the 4-bit frame opcode of RFC 6455 §5.2.
type Opcode uint8

// The opcodes RFC 6455 §5.2 defines. Every other value is reserved.
const (
	OpContinuation Opcode = 0x0
	OpText         Opcode = 0x1
	OpBinary       Opcode = 0x2
	OpClose        Opcode = 0x8
	OpPing         Opcode = 0x9
	OpPong         Opcode = 0xA
)

// IsControl reports whether o is a control opcode. RFC 6455 §5.5: "Control
// frames are identified by opcodes where the most significant bit of the
// opcode is 1."
func (o Opcode) IsControl() bool { return o&0x8 != 0 }

// IsReserved reports whether o is one of the opcodes RFC 6455 §5.2 keeps for
// future use: %x3-7 (non-control) and %xB-F (control).
func (o Opcode) IsReserved() bool {
	return (o >= 0x3 && o <= 0x7) || o >= 0xB
}

// String returns the opcode's name, or its hex value when it is reserved.
func (o Opcode) String() string {
	switch o {
	case OpContinuation:
		return "continuation"
	case OpText:
		return "text"
	case OpBinary:
		return "binary"
	case OpClose:
		return "close"
	case OpPing:
		return "ping"
	case OpPong:
		return "pong"
	}
	const hex = "0123456789abcdef"
	return "opcode 0x" + hex[o&0xF:o&0xF+1]
}

// Flags holds the FIN and RSV1-3 bits of a frame's first byte, in their wire
// positions, so that the first byte of a header is Flags|Opcode.
type Flags uint8

// The flag bits of RFC 6455 §5.2. RSV1 is the "Per-Message Compressed" bit
// of permessage-deflate (RFC 7692 §6).
const (
	Fin  Flags = 0x80
	Rsv1 Flags = 0x40
	Rsv2 Flags = 0x20
	Rsv3 Flags = 0x10

	rsvBits = Rsv1 | Rsv2 | Rsv3
)

// Header is a frame header: everything of a frame but its payload.
type Header struct {
	Flags  Flags // FIN and RSV1-3
	Opcode Opcode
	Masked bool
	Key    [4]byte // the masking key, meaningful when Masked
	Length int64   // payload length in bytes; never negative
}

// Fin reports whether the FIN bit is set: the frame ends its message.
func (h Header) Fin() bool { return h.Flags&Fin != 0 }

// MaxHeaderSize is the size of the largest header: 2 bytes, an 8-byte
// extended length and a 4-byte masking key.
const MaxHeaderSize = 14

// MaxControlPayload is the longest payload a control frame may carry. RFC
// 6455 §5.5: "All control frames MUST have a payload length of 125 bytes or
// less and MUST NOT be fragmented."
const MaxControlPayload = 125

// HeaderSize returns the number of bytes a header with the given payload
// length and mask bit occupies on the wire: 2, 4 or 10, plus 4 for a key.
func HeaderSize(length int64, masked bool) int {
	n := 2
	switch {
	case length > 0xFFFF:
		n = 10
	case length > 125:
		n = 4
	}
	if masked {
		n += 4
	}
	return n
}

// AppendHeader appends the wire form of h to dst and returns the extended
// slice. It always uses the minimal length encoding, as RFC 6455 §5.2
// requires: "in all cases, the minimal number of bytes MUST be used to
// encode the length". It panics on a negative h.Length, which has no wire
// form (as a 64-bit length it would set the most significant bit, which
// §5.2 forbids); other forbidden headers are encoded as given.
func AppendHeader(dst []byte, h Header) []byte {
	if h.Length < 0 {
		panic(fmt.Sprintf("wsframe: AppendHeader with length %d", h.Length))
	}
	b0 := byte(h.Flags&(Fin|rsvBits)) | byte(h.Opcode&0xF)
	var m byte
	if h.Masked {
		m = 0x80
	}
	n := uint64(h.Length)
	switch {
	case n <= 125:
		dst = append(dst, b0, m|byte(n))
	case n <= 0xFFFF:
		dst = append(dst, b0, m|126, byte(n>>8), byte(n))
	default:
		dst = append(dst, b0, m|127)
		dst = binary.BigEndian.AppendUint64(dst, n)
	}
	if h.Masked {
		dst = append(dst, h.Key[:]...)
	}
	return dst
}

// panicReserved panics on a data frame with a reserved opcode (or one
// past 4 bits): RFC 6455 §5.2 "If an unknown opcode is received, the
// receiving endpoint MUST _Fail the WebSocket Connection_".
func panicReserved(op Opcode) {
	panic(fmt.Sprintf("wsframe: frame with the reserved opcode %v", op))
}

// checkControl panics if the control frame op would break RFC 6455 §5.5
// (see AppendFrame). Callers test op.IsControl() first, so data frames
// pay one branch.
func checkControl(op Opcode, flags Flags, length int64) {
	if length > MaxControlPayload || flags&Fin == 0 {
		panic(fmt.Sprintf("wsframe: %v frame with a %d-byte payload and FIN %v: RFC 6455 §5.5 allows control frames of at most %d bytes, unfragmented",
			op, length, flags&Fin != 0, MaxControlPayload))
	}
}

// ErrShortHeader is returned by ParseHeader when b holds only part of a
// header. It is not a protocol error: more bytes will complete it.
var ErrShortHeader = errors.New("wsframe: incomplete frame header")

// ParseHeader decodes the frame header at the start of b and returns it with
// its size n in bytes.
//
// When b holds only part of a header, ParseHeader returns ErrShortHeader and
// n is the header size b implies so far: 2 when b has fewer than 2 bytes
// (the real size may be larger once the second byte is known), the exact
// size otherwise. n-len(b) more bytes are needed.
//
// A length that breaks RFC 6455 §5.2 (a 64-bit length with its most
// significant bit set, or a length not in its minimal encoding) is a
// *ProtocolError with close code 1002. ParseHeader checks nothing else: the
// rules that depend on the connection (reserved bits, opcodes, masking
// direction, limits) are the Decoder's.
func ParseHeader(b []byte) (h Header, n int, err error) {
	if len(b) < 2 {
		return Header{}, 2, ErrShortHeader
	}
	b0, b1 := b[0], b[1]
	n = 2
	l7 := b1 & 0x7F
	switch l7 {
	case 126:
		n = 4
	case 127:
		n = 10
	}
	masked := b1&0x80 != 0
	if masked {
		n += 4
	}
	if len(b) < n {
		return Header{}, n, ErrShortHeader
	}
	h = Header{
		Flags:  Flags(b0) & (Fin | rsvBits),
		Opcode: Opcode(b0 & 0xF),
		Masked: masked,
	}
	switch l7 {
	case 126:
		v := binary.BigEndian.Uint16(b[2:4])
		if v <= 125 {
			return Header{}, 0, ErrNonMinimalLength
		}
		h.Length = int64(v)
	case 127:
		v := binary.BigEndian.Uint64(b[2:10])
		// RFC 6455 §5.2: "If 127, the following 8 bytes interpreted as a
		// 64-bit unsigned integer (the most significant bit MUST be 0) are
		// the payload length."
		if v>>63 != 0 {
			return Header{}, 0, ErrLengthMSB
		}
		if v <= 0xFFFF {
			return Header{}, 0, ErrNonMinimalLength
		}
		h.Length = int64(v)
	default:
		h.Length = int64(l7)
	}
	if masked {
		copy(h.Key[:], b[n-4:n])
	}
	return h, n, nil
}
