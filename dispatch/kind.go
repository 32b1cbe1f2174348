package dispatch

import (
	"errors"
	"strconv"
)

// Kind is the kind of a packet: the first byte of every hotpath.v1 envelope.
// The values are part of the wire protocol and never change; a new kind gets
// the next free value.
type Kind uint8

// The packet kinds of hotpath.v1. Zero is never a valid kind, so a packet of
// zeroed memory is rejected instead of read as a call.
const (
	KindCall         Kind = 1  // client → server call that expects a result
	KindResult       Kind = 2  // server → client reply to a call
	KindError        Kind = 3  // server → client error reply to a call
	KindEvent        Kind = 4  // one-way notification, either direction
	KindAsk          Kind = 5  // server → client call
	KindAnswer       Kind = 6  // client → server reply to an ask; may carry an error
	KindBatch        Kind = 7  // several packets in one envelope
	KindPing         Kind = 8  // liveness probe
	KindPong         Kind = 9  // reply to a ping
	KindJoin         Kind = 10 // join a room
	KindLeave        Kind = 11 // leave a room
	KindEmit         Kind = 12 // an event raised in a room
	KindCapabilities Kind = 13 // what an end supports, exchanged once
)

// kindNames is indexed by Kind; the empty string marks an unknown kind.
var kindNames = [...]string{
	KindCall:         "call",
	KindResult:       "result",
	KindError:        "error",
	KindEvent:        "event",
	KindAsk:          "ask",
	KindAnswer:       "answer",
	KindBatch:        "batch",
	KindPing:         "ping",
	KindPong:         "pong",
	KindJoin:         "join",
	KindLeave:        "leave",
	KindEmit:         "emit",
	KindCapabilities: "capabilities",
}

// numKinds is one past the largest valid kind: the size of a table indexed
// by Kind.
const numKinds = len(kindNames)

// Valid reports whether k is one of the kinds defined above.
func (k Kind) Valid() bool {
	return int(k) < numKinds && kindNames[k] != ""
}

// String returns the lower-case protocol name of k ("call", "ask"), or
// "Kind(N)" for a value that is not a kind.
func (k Kind) String() string {
	if k.Valid() {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// ErrEmptyPacket is returned for a packet with no bytes at all: it has no
// kind to branch on.
var ErrEmptyPacket = errors.New("dispatch: empty packet")

// UnknownKindError reports a packet whose first byte is not a Kind this
// package defines: 0, or a value above KindCapabilities.
type UnknownKindError struct {
	Kind Kind
}

// Error gives the unknown kind's number.
func (e *UnknownKindError) Error() string {
	return "dispatch: unknown packet kind " + strconv.Itoa(int(e.Kind))
}

// DecodeKind splits a packet into its kind and its body, the bytes after the
// kind. The body aliases packet. It returns ErrEmptyPacket for an empty
// packet and an *UnknownKindError for a first byte that is not a kind.
func DecodeKind(packet []byte) (Kind, []byte, error) {
	if len(packet) == 0 {
		return 0, nil, ErrEmptyPacket
	}
	k := Kind(packet[0])
	if !k.Valid() {
		return 0, nil, &UnknownKindError{Kind: k}
	}
	return k, packet[1:], nil
}
