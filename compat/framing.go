package compat

import (
	"encoding/binary"

	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/wsframe"
)

// Stream carriers (QUIC, WebTransport and SCTP streams) carry packets as
// length-prefixed messages (PROTOCOL.md §8.1):
//
//	message = length uvarint, packet (length bytes)
//
// maxPrefixLen is the longest prefix: a length is a 32-bit field, at most
// five bytes of uvarint.
const maxPrefixLen = 5

// prefixLen returns the size of the shortest uvarint encoding of n.
func prefixLen(n int) int {
	l := 1
	for n >= 0x80 {
		n >>= 7
		l++
	}
	return l
}

// parsePrefix reads a message's length prefix from the start of b. It
// returns the length and the prefix's size, 0 when b holds only part of
// the prefix, or errBadPrefix for a prefix longer than five bytes, a
// length over 32 bits or a prefix not in its shortest form (a 32-bit field
// of PROTOCOL.md §2, which has exactly one encoding).
func parsePrefix(b []byte) (length uint64, n int, err error) {
	length, n = binary.Uvarint(b)
	switch {
	case n > maxPrefixLen || n < 0 || length > 1<<32-1:
		return 0, 0, errBadPrefix
	case n == 0 && len(b) >= maxPrefixLen:
		return 0, 0, errBadPrefix
	case n > 1 && b[n-1] == 0:
		return 0, 0, errBadPrefix
	}
	return length, n, nil
}

// unexpectedStreamReason closes a connection whose other end opened an SCTP
// stream or a data channel its carrier does not carry (PROTOCOL.md §8.2).
const unexpectedStreamReason = "HP_ERR_UNEXPECTED_STREAM"

var (
	errBadPrefix      = &CloseError{Code: wsframe.CloseProtocolError, Reason: "HP_ERR_BAD_LENGTH_PREFIX"}
	errMessageTooBig  = &CloseError{Code: wsframe.CloseMessageTooBig, Reason: "HP_ERR_MESSAGE_TOO_BIG"}
	errTextOnChannel  = &CloseError{Code: wsframe.CloseUnsupportedData, Reason: "HP_ERR_TEXT_MESSAGE"}
	errBadCloseNotice = &CloseError{Code: wsframe.CloseProtocolError, Reason: "HP_ERR_BAD_CLOSE_NOTICE"}
)

// closeEvent is the name of the event that carries a close notice on the
// carriers that have no close frame (PROTOCOL.md §8.3).
const closeEvent = "$close"

// closeNoticeHead is how every close notice packet starts: the Event
// kind, then the name "$close" as a str.
var closeNoticeHead = append([]byte{byte(dispatch.KindEvent), byte(len(closeEvent))}, closeEvent...)

// appendCloseNotice appends the close notice packet for code and reason:
// an Event named "$close" whose payload is a WebSocket close payload, the
// code as two bytes big-endian, then the reason (RFC 6455 §5.5.1).
func appendCloseNotice(dst []byte, code wsframe.CloseCode, reason string) []byte {
	return wire.Append(dst, &wire.Packet{
		Kind:    dispatch.KindEvent,
		Name:    []byte(closeEvent),
		Payload: wsframe.AppendClosePayload(nil, code, reason),
	})
}

// isCloseNotice reports whether pkt is a close notice.
func isCloseNotice(pkt []byte) bool {
	if len(pkt) < len(closeNoticeHead) {
		return false
	}
	return string(pkt[:len(closeNoticeHead)]) == string(closeNoticeHead)
}

// parseCloseNotice returns the code and reason of a close notice, checked
// as a close frame's payload is (wsframe.ParseClosePayload): a notice
// without a code means 1005 (no status).
func parseCloseNotice(pkt []byte) (*CloseError, error) {
	payload := pkt[len(closeNoticeHead):]
	if len(payload) > 125 {
		return nil, errBadCloseNotice
	}
	code, reason, err := wsframe.ParseClosePayload(payload)
	if err != nil {
		return nil, errBadCloseNotice
	}
	return &CloseError{Code: code, Reason: string(reason), Remote: true}, nil
}
