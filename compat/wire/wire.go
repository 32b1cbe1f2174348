// Package wire encodes and decodes the packets of the hotpath.v1 protocol
// specified in compat/PROTOCOL.md.
//
// Decoding allocates nothing: a decoded Packet's byte fields alias the input.
// Encoding appends to a caller's buffer. Both are independent of the carrier
// (WebSocket message, QUIC or SCTP stream message).
package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"math"
	"unicode/utf8"

	"github.com/hotpath-go/hotpath/dispatch"
)

// Kind is the packet kind, the low seven bits of a packet's first byte.
type Kind = dispatch.Kind

// ToServer reports whether a client may send a packet of kind k to a
// server, and ToClient whether a server may send one to a client: the
// direction column of PROTOCOL.md §3. Both are false for an unknown kind.
// A receiver treats a kind that travels only the other way as unknown,
// and can tell it from the head byte, before it inflates a body.
func ToServer(k Kind) bool {
	return k.Valid() && k != dispatch.KindResult && k != dispatch.KindError && k != dispatch.KindAsk
}

// ToClient: see ToServer.
func ToClient(k Kind) bool {
	return k.Valid() && k != dispatch.KindCall && k != dispatch.KindAnswer && k != dispatch.KindJoin && k != dispatch.KindLeave
}

// CompressedBit marks, in the head byte, a body compressed with the
// dictionary codec negotiated through capabilities (PROTOCOL.md §6).
const CompressedBit = 0x80

// Limits on string fields (PROTOCOL.md §2).
const (
	MaxNameLen  = 255  // method, event and room names
	MaxValueLen = 4096 // capability values and error messages
)

// ValidName reports whether name can travel as a method, event or room
// name: 1 to MaxNameLen bytes of UTF-8. A packet with any other name is
// malformed, and its receiver closes the connection.
func ValidName(name string) bool {
	return len(name) != 0 && len(name) <= MaxNameLen && utf8.ValidString(name)
}

// Flags of an Emit packet.
const (
	// EmitExceptSender asks the server not to deliver a client's emit back
	// to the client itself.
	EmitExceptSender = 0x01
)

// Status of an Answer packet.
const (
	AnswerOK    = 0
	AnswerError = 1
)

// Error codes of PROTOCOL.md §4.2.
const (
	CodeBadRequest    = 1
	CodeInvalidParams = 2
	CodeNotFound      = 3
	CodeInternal      = 4
	CodeTimeout       = 5
	CodeCanceled      = 6
	CodeOverloaded    = 7
	CodeUnauthorized  = 8
	CodeUnavailable   = 9
	// CodeApplication is the first code left to applications.
	CodeApplication = 1000
)

// Packet is one decoded packet. Which fields are set depends on Kind; the
// table in PROTOCOL.md §3 lists them. Byte slices alias the decoded input.
type Packet struct {
	Kind Kind
	// Compressed reports the head's compressed bit. Decode does not
	// decompress: when it is set, Body holds the compressed body and no
	// other field is decoded.
	Compressed bool

	ID      uint32 // Call, Result, Error, Ask, Answer, Join, Leave
	Name    []byte // method (Call, Ask), event (Event, Emit)
	Room    []byte // Join, Leave, Emit
	Timeout uint32 // milliseconds; Call, Ask
	Flags   uint8  // Emit
	Status  uint8  // Answer
	Code    uint32 // Error, Answer with status AnswerError
	Message []byte // Error, Answer with status AnswerError
	Count   uint32 // Batch items, Capabilities pairs

	// Payload is the rest of the packet: the encoded request or response,
	// error data, ping data, the items of a batch (iterate with Items) or
	// the pairs of capabilities (iterate with Pairs).
	Payload []byte
	// Body is every byte after the head byte.
	Body []byte
}

// ErrMalformed is matched by every decoding error (errors.Is).
var ErrMalformed = errors.New("wire: malformed packet")

// MalformedError says what is wrong with a packet.
type MalformedError struct {
	Kind   Kind
	Reason string
}

// Error names the packet kind and what is wrong with its body.
func (e *MalformedError) Error() string {
	return fmt.Sprintf("wire: malformed %v packet: %s", e.Kind, e.Reason)
}

// Is lets errors.Is(err, ErrMalformed) match any MalformedError.
func (e *MalformedError) Is(target error) bool { return target == ErrMalformed }

// Decode parses one packet. It returns a *dispatch.UnknownKindError for a
// kind it does not know and a *MalformedError for a body that does not
// follow PROTOCOL.md; it never panics.
func Decode(b []byte) (Packet, error) {
	var p Packet
	if len(b) == 0 {
		return p, dispatch.ErrEmptyPacket
	}
	head := b[0]
	p.Compressed = head&CompressedBit != 0
	kind, _, err := dispatch.DecodeKind([]byte{head &^ CompressedBit})
	if err != nil {
		return p, err
	}
	p.Kind = kind
	p.Body = b[1:]
	if p.Compressed {
		return p, nil
	}
	if err := p.decodeBody(p.Body); err != nil {
		return Packet{Kind: kind}, err
	}
	return p, nil
}

// DecodeBody parses the body of a packet of the given kind, as Decode does
// after the head byte. It serves a receiver that decompressed a body.
func DecodeBody(kind Kind, body []byte) (Packet, error) {
	if !kind.Valid() {
		return Packet{}, &dispatch.UnknownKindError{Kind: kind}
	}
	p := Packet{Kind: kind, Body: body}
	if err := p.decodeBody(body); err != nil {
		return Packet{Kind: kind}, err
	}
	return p, nil
}

func (p *Packet) decodeBody(b []byte) error {
	r := reader{b: b, kind: p.Kind}
	switch p.Kind {
	case dispatch.KindCall, dispatch.KindAsk:
		p.ID = r.u32("id")
		p.Name = r.name("method")
		p.Timeout = r.u32("timeout")
	case dispatch.KindResult:
		p.ID = r.u32("id")
	case dispatch.KindError:
		p.ID = r.u32("id")
		p.Code = r.u32("code")
		p.Message = r.str("message", MaxValueLen)
	case dispatch.KindEvent:
		p.Name = r.name("event")
	case dispatch.KindAnswer:
		p.ID = r.u32("id")
		p.Status = r.u8("status")
		switch {
		case r.err != nil:
		case p.Status == AnswerError:
			p.Code = r.u32("code")
			p.Message = r.str("message", MaxValueLen)
		case p.Status != AnswerOK:
			r.fail("unknown answer status")
		}
	case dispatch.KindBatch:
		p.Count = r.u32("count")
		if r.err == nil && p.Count == 0 {
			r.fail("empty batch")
		}
	case dispatch.KindPing, dispatch.KindPong:
	case dispatch.KindJoin, dispatch.KindLeave:
		p.ID = r.u32("id")
		p.Room = r.name("room")
		r.end()
	case dispatch.KindEmit:
		p.Room = r.name("room")
		p.Name = r.name("event")
		p.Flags = r.u8("flags")
	case dispatch.KindCapabilities:
		p.Count = r.u32("count")
	}
	if r.err != nil {
		return r.err
	}
	p.Payload = r.b
	switch p.Kind {
	case dispatch.KindBatch:
		return p.checkItems()
	case dispatch.KindCapabilities:
		return p.checkPairs()
	}
	return nil
}

// checkItems walks a batch once so that Items never meets a malformed item
// boundary.
func (p *Packet) checkItems() error {
	n := uint32(0)
	for _, err := range p.items() {
		if err != nil {
			return err
		}
		n++
	}
	if n != p.Count {
		return &MalformedError{Kind: p.Kind, Reason: "batch count does not match its items"}
	}
	return nil
}

func (p *Packet) checkPairs() error {
	r := reader{b: p.Payload, kind: p.Kind}
	for i := uint32(0); i < p.Count && r.err == nil; i++ {
		r.str("capability key", MaxNameLen)
		r.str("capability value", MaxValueLen)
	}
	r.end()
	return r.err
}

// Items returns the encoded packets of a batch, in order. Decode checked the
// batch, so every item is delimited correctly and is neither a batch nor
// capabilities; each item still needs Decode.
func (p *Packet) Items() iter.Seq[[]byte] {
	all := p.items()
	return func(yield func([]byte) bool) {
		for item, err := range all {
			if err != nil || !yield(item) {
				return
			}
		}
	}
}

// items walks the items. Its iterator holds the payload, not p, so that
// a Packet on the stack stays there.
func (p *Packet) items() iter.Seq2[[]byte, error] {
	payload, kind := p.Payload, p.Kind
	return func(yield func([]byte, error) bool) {
		r := reader{b: payload, kind: kind}
		for len(r.b) > 0 {
			n := r.u32("item length")
			if r.err == nil && (n == 0 || uint64(n) > uint64(len(r.b))) {
				r.fail("item length out of range")
			}
			if r.err != nil {
				yield(nil, r.err)
				return
			}
			item := r.b[:n]
			r.b = r.b[n:]
			if k := Kind(item[0] &^ CompressedBit); k == dispatch.KindBatch || k == dispatch.KindCapabilities || item[0]&CompressedBit != 0 {
				yield(nil, &MalformedError{Kind: kind, Reason: "batch item may not be a batch, capabilities or compressed"})
				return
			}
			if !yield(item, nil) {
				return
			}
		}
	}
}

// Pairs returns the key/value pairs of a Capabilities packet.
func (p *Packet) Pairs() iter.Seq2[[]byte, []byte] {
	payload, kind, count := p.Payload, p.Kind, p.Count
	return func(yield func(key, value []byte) bool) {
		r := reader{b: payload, kind: kind}
		for i := uint32(0); i < count; i++ {
			k := r.str("capability key", MaxNameLen)
			v := r.str("capability value", MaxValueLen)
			if r.err != nil || !yield(k, v) {
				return
			}
		}
	}
}

// reader reads fields and keeps the first error, so decoders read straight
// through and check once.
type reader struct {
	b    []byte
	kind Kind
	err  error
}

func (r *reader) fail(reason string) {
	if r.err == nil {
		r.err = &MalformedError{Kind: r.kind, Reason: reason}
	}
	r.b = nil
}

func (r *reader) u8(field string) uint8 {
	if r.err != nil {
		return 0
	}
	if len(r.b) == 0 {
		r.fail(field + " missing")
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *reader) u32(field string) uint32 { return r.u32Of(field, "") }

// u32Of reads the uvarint named field+suffix; the name is only built for
// an error, so that a string field's length (field, " length") costs no
// concatenation per packet.
func (r *reader) u32Of(field, suffix string) uint32 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	switch {
	case n == 0:
		r.fail(field + suffix + " missing")
		return 0
	case n < 0 || n > 5 || v > math.MaxUint32:
		r.fail(field + suffix + " out of range")
		return 0
	case n > 1 && r.b[n-1] == 0:
		r.fail(field + suffix + " not in shortest form")
		return 0
	}
	r.b = r.b[n:]
	return uint32(v)
}

func (r *reader) str(field string, max int) []byte {
	n := r.u32Of(field, " length")
	if r.err != nil {
		return nil
	}
	if uint64(n) > uint64(len(r.b)) {
		r.fail(field + " truncated")
		return nil
	}
	if int(n) > max {
		r.fail(field + " too long")
		return nil
	}
	s := r.b[:n]
	r.b = r.b[n:]
	if !utf8.Valid(s) {
		r.fail(field + " is not UTF-8")
		return nil
	}
	return s
}

func (r *reader) name(field string) []byte {
	s := r.str(field, MaxNameLen)
	if r.err == nil && len(s) == 0 {
		r.fail(field + " empty")
	}
	return s
}

func (r *reader) end() {
	if r.err == nil && len(r.b) != 0 {
		r.fail("trailing bytes")
	}
}
