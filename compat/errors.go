package compat

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/wsframe"
)

// Error is a call's error as it travels: a code (PROTOCOL.md §4.2), a
// message for people and optional data. A handler returns an *Error to
// choose what the caller sees; any other error becomes an Internal error
// whose text is logged, not sent. Its Code is one of the protocol's (the
// Err values below) or an application's, from 1000 up: code 0 and the
// codes the protocol keeps for later versions (10-999) are sent as
// Internal, with the message and data. A client's Call returns the *Error
// the server answered.
type Error struct {
	Code    uint32
	Message string
	Data    []byte // encoded with the connection's codec; may be empty
}

// Error returns the message with its code, which callers should test
// (errors.Is) rather than the text.
func (e *Error) Error() string {
	return fmt.Sprintf("hotpath: %s (code %d)", e.Message, e.Code)
}

// Is makes errors.Is(err, ErrNotFound) match any *Error with the code of
// ErrNotFound, whatever its message: callers test codes, never messages.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Errors with the protocol's codes, for handlers to return and callers to
// match with errors.Is.
var (
	ErrBadRequest    = &Error{Code: wire.CodeBadRequest, Message: "bad request"}
	ErrInvalidParams = &Error{Code: wire.CodeInvalidParams, Message: "invalid params"}
	ErrNotFound      = &Error{Code: wire.CodeNotFound, Message: "method not found"}
	ErrInternal      = &Error{Code: wire.CodeInternal, Message: "internal error"}
	ErrTimeout       = &Error{Code: wire.CodeTimeout, Message: "timeout"}
	ErrCanceled      = &Error{Code: wire.CodeCanceled, Message: "canceled"}
	ErrOverloaded    = &Error{Code: wire.CodeOverloaded, Message: "too many calls in flight"}
	ErrUnauthorized  = &Error{Code: wire.CodeUnauthorized, Message: "unauthorized"}
	ErrUnavailable   = &Error{Code: wire.CodeUnavailable, Message: "server unavailable"}
)

// ErrAskOnReadLoop is Peer.Ask's error when it is called with the context
// of a handler that runs on the connection's read loop (a method not
// registered with Async, an event handler but for events that came as
// datagrams): the answer could only be read
// by that loop, which the handler holds, so the ask would wait until its
// timeout and stall every other packet of the connection meanwhile.
var ErrAskOnReadLoop = errors.New("hotpath: Ask from a handler on the connection's read loop, which would read its answer: register the method with Async")

// ErrTooManyAsks is Peer.Ask's error when the peer already has
// Limits.MaxPendingAsks asks awaiting their answers: the ask is not sent
// and the connection lives on. Test for it with errors.Is; it is not a
// protocol error and never travels.
var ErrTooManyAsks = errors.New("hotpath: too many asks awaiting this peer's answers (Limits.MaxPendingAsks)")

// nameFault says why name cannot be sent as the method, event or room
// name what says, or "" when it can: it must travel (wire.ValidName), and
// an event name must not start with $, the protocol's own events ($join
// and $leave from rooms, $close notices on carriers without close frames:
// "$close" on QUIC or SCTP would be read as the end of the connection).
func nameFault(what, name string) string {
	if what == "event" && strings.HasPrefix(name, "$") {
		return fmt.Sprintf("event name %.32q: names starting with $ are reserved", name)
	}
	if wire.ValidName(name) {
		return ""
	}
	// %.32q quotes at most the name's first 32 runes.
	return fmt.Sprintf("%s name %.32q (%d bytes) is not 1-%d bytes of UTF-8", what, name, len(name), wire.MaxNameLen)
}

// checkName refuses, before anything is sent, a name nameFault faults: the
// peer would read the packet as malformed (or as a close) and end the
// connection, failing every call on it, and a room emit every member's.
func checkName(what, name string) error {
	if fault := nameFault(what, name); fault != "" {
		return &Error{Code: wire.CodeBadRequest, Message: fault}
	}
	return nil
}

func checkEmitNames(room, event string) error {
	if err := checkName("room", room); err != nil {
		return err
	}
	return checkName("event", event)
}

// checkResp refuses with ErrBadRequest, before the call is sent, a resp
// no answer can be decoded into (not a pointer, or a nil one): the server
// would run the method, and its result would be lost with an error only
// afterwards.
func checkResp(resp any) error {
	if resp == nil {
		return nil
	}
	if v := reflect.ValueOf(resp); v.Kind() != reflect.Pointer || v.IsNil() {
		return &Error{Code: wire.CodeBadRequest, Message: fmt.Sprintf("resp must be a non-nil pointer or nil, not %T(%v)", resp, resp)}
	}
	return nil
}

// withCode is e as an answer carries it: an *Error without a code (the
// zero Code, which PROTOCOL.md §4.2 does not define) or with one the
// protocol keeps for itself (10-999, none defined yet) goes out as
// Internal, its message and data kept, instead of a code no caller can
// match, or that a later version of the protocol would give a meaning.
func withCode(e *Error) *Error {
	if e.Code != 0 && (e.Code <= wire.CodeUnavailable || e.Code >= wire.CodeApplication) {
		return e
	}
	return &Error{Code: wire.CodeInternal, Message: e.Message, Data: e.Data}
}

// wireMessage is an error's message as an error packet can carry it
// (PROTOCOL.md §2: UTF-8, at most 4096 bytes). A handler's message may be
// anything; sent as is, a longer or invalid one made a malformed packet,
// and the caller's connection closed on it.
func wireMessage(msg string) string { return validPrefix(msg, wire.MaxValueLen) }

// peerCloseReason is the reason of a close that a carrier brought from the
// other end (QUIC's CONNECTION_CLOSE, WebTransport's session close, an
// SCTP ABORT) as a *CloseError carries it: what a WebSocket close frame
// could carry (RFC 6455 §5.5: at most 123 bytes, valid UTF-8). Those
// carriers allow about 1 KiB of any bytes, which a *CloseError handed on
// unchecked to the program and its logs.
func peerCloseReason(reason string) string { return validPrefix(reason, wsframe.MaxCloseReason) }

// validPrefix is s made valid UTF-8 (invalid bytes become U+FFFD) and cut
// to at most n bytes at a character boundary.
func validPrefix(s string, n int) string {
	if len(s) <= n && utf8.ValidString(s) {
		return s
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) > n {
		cut := n
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s
}

// OptionError is the refusal of a value in NewServer's Options or in
// Dial's ClientOptions. Option names the field as the struct spells it
// ("IdleTimeout", "Limits.MaxInflateRate", "Router", "Reconnect.MaxDelay"):
// a program whose options come from settings of its own (a command's
// flags, a configuration file) tells from it, with errors.As, which of
// those to name, instead of matching the message. Err says what is wrong
// with the value. Dial's errors about its URL are no OptionError.
type OptionError struct {
	Option string
	Err    error
}

// Error is Err's message, which names the field too.
func (e *OptionError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *OptionError) Unwrap() error { return e.Err }

// CloseError reports that a connection closed with a WebSocket close code:
// the peer's, or the one this end sent after a violation. Reason is the
// machine-readable reason (PROTOCOL.md §7).
type CloseError struct {
	Code   wsframe.CloseCode
	Reason string
	// Remote is true when the peer sent the close frame.
	Remote bool
}

// Error says who closed the connection, with the close code and the
// reason when there is one.
func (e *CloseError) Error() string {
	if e.Code == wsframe.CloseAbnormal {
		// No close frame or notice from either end (a reset, a timeout,
		// a carrier's own end): neither end closed it.
		if e.Reason == "" {
			return fmt.Sprintf("hotpath: connection lost (code %d)", e.Code)
		}
		return fmt.Sprintf("hotpath: connection lost (code %d, %s)", e.Code, e.Reason)
	}
	who := "local"
	if e.Remote {
		who = "remote"
	}
	if e.Reason == "" {
		return fmt.Sprintf("hotpath: connection closed (%s, code %d)", who, e.Code)
	}
	return fmt.Sprintf("hotpath: connection closed (%s, code %d, %s)", who, e.Code, e.Reason)
}

// CloseStatus returns the close code carried by err (a *CloseError, or a
// wsframe protocol error), or 0 when err says nothing about one.
func CloseStatus(err error) wsframe.CloseCode {
	var ce *CloseError
	if errors.As(err, &ce) {
		return ce.Code
	}
	return wsframe.CloseCodeOf(err)
}

// ErrClosed is returned by calls on a connection or client that was closed
// by its owner.
var ErrClosed = errors.New("hotpath: closed")

// ErrMessageTooBig is returned, wrapped with the sizes, by a client's Call,
// Join, Leave, Emit or Event whose packet is over the server's message
// limit (its maxMessage capability, PROTOCOL.md §4.9) or over the largest
// message its carrier takes (256 KiB on a WebRTC data channel), by an Emit
// whose payload is over the server's emit limit (maxEmit), and by
// Peer.Event and Peer.Ask for a packet over the client's announced limit. The packet
// is not sent and the connection stays up; sent, it would make the other
// end close the connection with 1009 (or drop the emit, unseen).
var ErrMessageTooBig = errors.New("hotpath: message too big")
