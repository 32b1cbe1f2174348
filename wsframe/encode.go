package wsframe

import "encoding/binary"

// AppendFrame appends one unmasked frame, as a server sends it, to dst and
// returns the extended slice. flags carries FIN and the RSV bits: pass Fin
// for a whole message, 0 for a fragment that more will follow, Fin|Rsv1 for
// a message compressed by permessage-deflate. RFC 6455 §5.1: "A server MUST
// NOT mask any frames that it sends to the client."
//
// With a dst of enough capacity AppendFrame allocates nothing; its cost is
// the payload copy. To send a large payload without copying it, append only
// the header (AppendHeader) and hand header and payload to a vectored write.
//
// A control frame (close, ping, pong) with a payload over
// MaxControlPayload or without Fin panics: RFC 6455 §5.5 "All control
// frames MUST have a payload length of 125 bytes or less and MUST NOT be
// fragmented", and the peer fails the connection on one that breaks it,
// so building one is a bug in the caller. Check the length first when the
// payload comes from elsewhere. A reserved opcode panics too (§5.2: the
// peer fails the connection), and flags bits other than Fin and the RSV
// bits are ignored. AppendHeader encodes any header, those §5.5 forbids
// included, for tests that send them on purpose.
func AppendFrame(dst []byte, op Opcode, payload []byte, flags Flags) []byte {
	n := len(payload)
	if op.IsReserved() {
		panicReserved(op)
	} else if op.IsControl() {
		checkControl(op, flags, int64(n))
	}
	b0 := byte(flags&(Fin|rsvBits)) | byte(op&0xF)
	switch {
	case n <= 125:
		dst = append(dst, b0, byte(n))
	case n <= 0xFFFF:
		dst = append(dst, b0, 126, byte(n>>8), byte(n))
	default:
		dst = append(dst, b0, 127)
		dst = binary.BigEndian.AppendUint64(dst, uint64(n))
	}
	return append(dst, payload...)
}

// AppendMaskedFrame appends one masked frame, as a client sends it, with
// the payload masked by key; payload itself is left untouched. RFC 6455
// §5.1: "a client MUST mask all frames that it sends to the server". Pick a
// fresh key for every frame (NewMaskKey): §5.3 "When preparing a masked
// frame, the client MUST pick a fresh masking key". It panics on a control
// frame §5.5 forbids, as AppendFrame does.
func AppendMaskedFrame(dst []byte, op Opcode, payload []byte, flags Flags, key [4]byte) []byte {
	if op.IsReserved() {
		panicReserved(op)
	} else if op.IsControl() {
		checkControl(op, flags, int64(len(payload)))
	}
	dst = AppendHeader(dst, Header{
		Flags:  flags,
		Opcode: op,
		Masked: true,
		Key:    key,
		Length: int64(len(payload)),
	})
	start := len(dst)
	dst = append(dst, payload...)
	Mask(dst[start:], key, 0)
	return dst
}

// Precompiled server frames, built once at package initialisation and
// shared read-only by every connection: write them, never modify them.
var (
	// FramePing is an empty ping; FramePong an empty (unsolicited) pong.
	FramePing = compiled(OpPing, CloseCode(0))
	FramePong = compiled(OpPong, CloseCode(0))
	// FrameClose is a close frame without a body: status "no status".
	FrameClose = compiled(OpClose, CloseNoStatus)
	// The close frames a server sends most, with their code and no reason.
	FrameCloseNormal          = compiled(OpClose, CloseNormal)
	FrameCloseGoingAway       = compiled(OpClose, CloseGoingAway)
	FrameCloseProtocolError   = compiled(OpClose, CloseProtocolError)
	FrameCloseInvalidPayload  = compiled(OpClose, CloseInvalidPayload)
	FrameClosePolicyViolation = compiled(OpClose, ClosePolicyViolation)
	FrameCloseMessageTooBig   = compiled(OpClose, CloseMessageTooBig)
	FrameCloseInternalError   = compiled(OpClose, CloseInternalError)
	FrameCloseTryAgainLater   = compiled(OpClose, CloseTryAgainLater)
)

// compiled builds a constant frame; its capacity equals its length, so an
// append to it by mistake copies instead of writing into shared memory.
func compiled(op Opcode, code CloseCode) []byte {
	var f []byte
	if op == OpClose {
		f = AppendCloseFrame(nil, code, "")
	} else {
		f = AppendFrame(nil, op, nil, Fin)
	}
	return f[:len(f):len(f)]
}

// CloseFrameFor returns the precompiled close frame for code, so the error
// path of a connection writes a constant instead of building one: the
// frames above for their codes, nil for any other code (build that one with
// AppendCloseFrame).
func CloseFrameFor(code CloseCode) []byte {
	switch code {
	case CloseNoStatus:
		return FrameClose
	case CloseNormal:
		return FrameCloseNormal
	case CloseGoingAway:
		return FrameCloseGoingAway
	case CloseProtocolError:
		return FrameCloseProtocolError
	case CloseInvalidPayload:
		return FrameCloseInvalidPayload
	case ClosePolicyViolation:
		return FrameClosePolicyViolation
	case CloseMessageTooBig:
		return FrameCloseMessageTooBig
	case CloseInternalError:
		return FrameCloseInternalError
	case CloseTryAgainLater:
		return FrameCloseTryAgainLater
	}
	return nil
}
