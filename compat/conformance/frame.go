package conformance

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The suite frames and parses on its own, without wsframe: a codec tested
// against itself would agree with its own mistakes.

// Opcodes of RFC 6455 §5.2.
const (
	opContinuation byte = 0x0
	opText         byte = 0x1
	opBinary       byte = 0x2
	opClose        byte = 0x8
	opPing         byte = 0x9
	opPong         byte = 0xA
)

// Header bits of RFC 6455 §5.2.
const (
	bitFin  byte = 0x80
	bitRsv1 byte = 0x40
	bitRsv2 byte = 0x20
	bitRsv3 byte = 0x10
)

// Close codes of RFC 6455 §7.4.1 the cases expect.
const (
	closeNormal        uint16 = 1000
	closeGoingAway     uint16 = 1001
	closeProtocol      uint16 = 1002
	closeInvalidData   uint16 = 1007
	closeMessageTooBig uint16 = 1009
)

// frame is one frame as the suite sends or receives it. Every field is
// written as given, valid or not, so a case can break any rule.
type frame struct {
	fin     bool
	rsv     byte // bitRsv1|bitRsv2|bitRsv3, as they sit in the first byte
	op      byte // 4 bits
	payload []byte

	// unmasked sends the frame without a mask (RFC 6455 §5.1 forbids it).
	unmasked bool
	// key is the masking key; a random one when zero and not zeroKey.
	key     [4]byte
	zeroKey bool
	// lengthForm forces the length encoding: 0 minimal, 16 or 64 the
	// 2- or 8-byte form even for a length that fits a smaller one.
	lengthForm int
	// length64 overrides the 8-byte length field (for a length with its
	// most significant bit set); the payload is sent as is.
	length64 uint64
}

func (f frame) String() string {
	s := fmt.Sprintf("op=%#x fin=%t len=%d", f.op, f.fin, len(f.payload))
	if f.rsv != 0 {
		s += fmt.Sprintf(" rsv=%#x", f.rsv)
	}
	return s
}

// appendFrame appends f encoded as a client sends it (masked unless f
// says otherwise).
func appendFrame(dst []byte, f frame) []byte {
	b0 := f.rsv | f.op&0x0F
	if f.fin {
		b0 |= bitFin
	}
	var mask byte
	if !f.unmasked {
		mask = 0x80
	}
	n := len(f.payload)
	switch {
	case f.length64 != 0:
		dst = append(dst, b0, mask|127)
		dst = binary.BigEndian.AppendUint64(dst, f.length64)
	case f.lengthForm == 64 || n > 0xFFFF:
		dst = append(dst, b0, mask|127)
		dst = binary.BigEndian.AppendUint64(dst, uint64(n))
	case f.lengthForm == 16 || n > 125:
		dst = append(dst, b0, mask|126)
		dst = binary.BigEndian.AppendUint16(dst, uint16(n))
	default:
		dst = append(dst, b0, mask|byte(n))
	}
	if f.unmasked {
		return append(dst, f.payload...)
	}
	key := f.key
	if key == ([4]byte{}) && !f.zeroKey {
		rand.Read(key[:])
	}
	dst = append(dst, key[:]...)
	start := len(dst)
	dst = append(dst, f.payload...)
	for i := range dst[start:] {
		dst[start+i] ^= key[i&3]
	}
	return dst
}

// errMaskedByServer is RFC 6455 §5.1: "A server MUST NOT mask any frames
// that it sends to the client."
var errMaskedByServer = errors.New("server sent a masked frame (RFC 6455 §5.1)")

// readFrame reads one frame as the server sent it. It checks only what a
// client must (RFC 6455 §5.1, §5.2): no mask, a minimal 64-bit length
// with its top bit clear, and at most max bytes of payload.
func readFrame(r io.Reader, max int64) (frame, error) {
	var h [14]byte
	if _, err := io.ReadFull(r, h[:2]); err != nil {
		return frame{}, err
	}
	f := frame{fin: h[0]&bitFin != 0, rsv: h[0] & (bitRsv1 | bitRsv2 | bitRsv3), op: h[0] & 0x0F}
	if h[1]&0x80 != 0 {
		return frame{}, errMaskedByServer
	}
	n := uint64(h[1] & 0x7F)
	switch n {
	case 126:
		if _, err := io.ReadFull(r, h[2:4]); err != nil {
			return frame{}, err
		}
		n = uint64(binary.BigEndian.Uint16(h[2:4]))
		if n < 126 {
			return frame{}, fmt.Errorf("server sent length %d in the 16-bit form (RFC 6455 §5.2: minimal encoding)", n)
		}
	case 127:
		if _, err := io.ReadFull(r, h[2:10]); err != nil {
			return frame{}, err
		}
		n = binary.BigEndian.Uint64(h[2:10])
		if n>>63 != 0 || n <= 0xFFFF {
			return frame{}, fmt.Errorf("server sent 64-bit length %#x (RFC 6455 §5.2)", n)
		}
	}
	if n > uint64(max) {
		return frame{}, fmt.Errorf("server frame of %d bytes exceeds the %d the suite reads", n, max)
	}
	f.payload = make([]byte, n)
	if _, err := io.ReadFull(r, f.payload); err != nil {
		return frame{}, err
	}
	return f, nil
}

// closePayload is the body of a close frame: the code, then the reason.
func closePayload(code uint16, reason string) []byte {
	return append(binary.BigEndian.AppendUint16(nil, code), reason...)
}
