package wsframe

import (
	"errors"
	"strconv"
)

// ProtocolError is a violation of RFC 6455 (or of a limit) by the peer. It
// carries the close code to send before closing the connection and a
// stable, machine-readable reason such as "WS_ERR_INVALID_UTF8", so callers
// branch on values, never on message text.
//
// The errors this package returns are the package-level *ProtocolError
// values below; compare them with errors.Is, or extract the code with
// CloseCodeOf.
type ProtocolError struct {
	Code   CloseCode // the close code to send: 1002, 1007 or 1009
	Reason string    // stable machine-readable reason, "WS_ERR_..."
	text   string
}

// Error returns a human-readable description with the reason and close code.
func (e *ProtocolError) Error() string {
	return "wsframe: " + e.text + " (" + e.Reason + ", close " + strconv.Itoa(int(e.Code)) + ")"
}

func protocolError(code CloseCode, reason, text string) *ProtocolError {
	return &ProtocolError{Code: code, Reason: reason, text: text}
}

// The protocol errors. Each is returned as is (never wrapped by this
// package), so errors.Is(err, ErrInvalidUTF8) and a switch on
// (*ProtocolError).Reason both work.
var (
	// RFC 6455 §5.2: RSV1-3 "MUST be 0 unless an extension is negotiated
	// that defines meanings for non-zero values".
	ErrReservedBits = protocolError(CloseProtocolError, "WS_ERR_UNEXPECTED_RSV", "reserved bit set without a negotiated extension")
	// RFC 7692 §6.1: "An endpoint MUST NOT set the "Per-Message
	// Compressed" bit of control frames and non-first fragments of a data
	// message", even with permessage-deflate negotiated.
	ErrMisplacedRsv1 = protocolError(CloseProtocolError, "WS_ERR_UNEXPECTED_RSV1", "RSV1 set on a control frame or a continuation frame")
	// RFC 6455 §5.2: "If an unknown opcode is received, the receiving
	// endpoint MUST _Fail the WebSocket Connection_."
	ErrReservedOpcode = protocolError(CloseProtocolError, "WS_ERR_INVALID_OPCODE", "reserved opcode")
	// RFC 6455 §5.1: "The server MUST close the connection upon receiving a
	// frame that is not masked."
	ErrUnmaskedFrame = protocolError(CloseProtocolError, "WS_ERR_EXPECTED_MASK", "client frame is not masked")
	// RFC 6455 §5.1: "A client MUST close a connection if it detects a
	// masked frame."
	ErrMaskedFrame = protocolError(CloseProtocolError, "WS_ERR_UNEXPECTED_MASK", "server frame is masked")
	// RFC 6455 §5.2: the 64-bit length's "most significant bit MUST be 0".
	ErrLengthMSB = protocolError(CloseProtocolError, "WS_ERR_INVALID_LENGTH", "64-bit payload length has its most significant bit set")
	// RFC 6455 §5.2: "the minimal number of bytes MUST be used to encode
	// the length".
	ErrNonMinimalLength = protocolError(CloseProtocolError, "WS_ERR_NON_MINIMAL_LENGTH", "payload length not in its minimal encoding")
	// RFC 6455 §5.5: "All control frames MUST have a payload length of 125
	// bytes or less".
	ErrControlTooLong = protocolError(CloseProtocolError, "WS_ERR_CONTROL_TOO_LONG", "control frame payload longer than 125 bytes")
	// RFC 6455 §5.5: control frames "MUST NOT be fragmented".
	ErrFragmentedControl = protocolError(CloseProtocolError, "WS_ERR_FRAGMENTED_CONTROL", "fragmented control frame")
	// RFC 6455 §5.4: a fragmented message starts with "a single frame with
	// the FIN bit clear and an opcode other than 0".
	ErrUnexpectedContinuation = protocolError(CloseProtocolError, "WS_ERR_UNEXPECTED_CONTINUATION", "continuation frame outside a fragmented message")
	// RFC 6455 §5.4: "The fragments of one message MUST NOT be interleaved
	// between the fragments of another message".
	ErrExpectedContinuation = protocolError(CloseProtocolError, "WS_ERR_EXPECTED_CONTINUATION", "new data frame inside a fragmented message")
	// RFC 6455 §5.5.1: a close body of one byte cannot hold the 2-byte code.
	ErrInvalidClosePayload = protocolError(CloseProtocolError, "WS_ERR_INVALID_CLOSE_PAYLOAD", "close frame body of one byte")
	// RFC 6455 §7.4: a close code that may not appear on the wire.
	ErrInvalidCloseCode = protocolError(CloseProtocolError, "WS_ERR_INVALID_CLOSE_CODE", "invalid close code")
	// RFC 6455 §8.1: "When an endpoint is to interpret a byte stream as
	// UTF-8 but finds that the byte stream is not, in fact, a valid UTF-8
	// stream, that endpoint MUST _Fail the WebSocket Connection_."
	ErrInvalidUTF8 = protocolError(CloseInvalidPayload, "WS_ERR_INVALID_UTF8", "invalid UTF-8 in text message or close reason")
	// RFC 6455 §10.4: implementations "MUST protect themselves against
	// exceeding those limits". The three limits of Config.
	ErrFrameTooBig      = protocolError(CloseMessageTooBig, "WS_ERR_FRAME_TOO_BIG", "frame larger than the configured maximum")
	ErrMessageTooBig    = protocolError(CloseMessageTooBig, "WS_ERR_MESSAGE_TOO_BIG", "message larger than the configured maximum")
	ErrTooManyFragments = protocolError(CloseMessageTooBig, "WS_ERR_TOO_MANY_FRAGMENTS", "message split into more fragments than the configured maximum")
)

// ErrNeedMore is returned by the Decoder when its input ends inside a frame.
// It is not a failure: feed more bytes and call again. Decoder.Need tells
// how many more bytes the next step needs at least.
var ErrNeedMore = errors.New("wsframe: need more input")

// CloseCodeOf returns the close code carried by err (through any wrapping),
// or 0 when err carries none, such as an I/O error, after which there is no
// connection left to send a close frame on.
func CloseCodeOf(err error) CloseCode {
	var pe *ProtocolError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return 0
}
