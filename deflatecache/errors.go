package deflatecache

import (
	"errors"
	"strconv"

	"github.com/hotpath-go/hotpath/wsframe"
)

// Error is a failure to inflate a peer's message. It carries the close code
// to send before closing the connection and a stable machine-readable
// reason, so callers branch on values, never on message text.
//
// Error unwraps to a *wsframe.ProtocolError with the same code and reason,
// so wsframe.CloseCodeOf and wsframe.CloseFrameFor work on it as on every
// other error of the connection.
type Error struct {
	Code   wsframe.CloseCode // the close code to send: 1007 or 1009
	Reason string            // stable machine-readable reason, "WS_ERR_..."
	text   string
	proto  *wsframe.ProtocolError
}

// Error returns a human-readable description with the reason and close code.
func (e *Error) Error() string {
	return "deflatecache: " + e.text + " (" + e.Reason + ", close " + strconv.Itoa(int(e.Code)) + ")"
}

// Unwrap returns the equivalent *wsframe.ProtocolError.
func (e *Error) Unwrap() error { return e.proto }

func newError(code wsframe.CloseCode, reason, text string) *Error {
	return &Error{Code: code, Reason: reason, text: text, proto: &wsframe.ProtocolError{Code: code, Reason: reason}}
}

// The errors of Conn.Inflate. Each is returned as is, never wrapped, so
// errors.Is(err, ErrTooLarge) works, and so does a switch on
// (*Error).Reason.
var (
	// ErrTooLarge: the message inflates to more than the caller's cap.
	// RFC 6455 §7.4.1: 1009 "indicates that an endpoint is terminating
	// the connection because it has received a message that is too big
	// for it to process". The check is on inflated bytes, so a small
	// compressed frame cannot smuggle a large message past the limit.
	ErrTooLarge = newError(wsframe.CloseMessageTooBig, "WS_ERR_INFLATE_TOO_BIG", "inflated message larger than the cap")
	// ErrCorrupt: the payload of a message with RSV1 set is not a DEFLATE
	// stream (RFC 1951), or refers back further than the history it may
	// use. RFC 6455 §7.4.1: 1007 "indicates that an endpoint is
	// terminating the connection because it has received data within a
	// message that was not consistent with the type of the message".
	ErrCorrupt = newError(wsframe.CloseInvalidPayload, "WS_ERR_INFLATE_CORRUPT", "compressed payload is not valid DEFLATE data")
	// ErrClosed: the Conn was closed; its history is gone.
	ErrClosed = errors.New("deflatecache: connection state used after Close")
)

// Negotiation errors. They are returned wrapped with the detail of what was
// wrong (errors.Is works); neither carries a close code, since both happen
// during the opening handshake, before there is a WebSocket connection.
var (
	// ErrMalformedHeader: a Sec-WebSocket-Extensions value that breaks the
	// grammar of RFC 6455 §9.1. A server answers the handshake with 400.
	ErrMalformedHeader = errors.New("deflatecache: malformed Sec-WebSocket-Extensions header")
	// ErrInvalidResponse: a server's response that RFC 7692 §7 obliges the
	// client to refuse: "A client MUST _Fail the WebSocket Connection_ if
	// the peer server accepted an extension negotiation offer for this
	// extension with an extension negotiation response meeting any of the
	// following conditions".
	ErrInvalidResponse = errors.New("deflatecache: server's permessage-deflate response breaks RFC 7692")
	// ErrClientBroadcast: BroadcastFrame called on a client's Conn. A
	// client masks every frame with a fresh key (RFC 6455 §5.3), so it has
	// nothing to share.
	ErrClientBroadcast = errors.New("deflatecache: BroadcastFrame needs the server role")
)
