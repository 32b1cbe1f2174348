package wsframe

import (
	"fmt"
	"io"
	"math"
)

// Role says which end of a connection a Decoder reads for.
type Role uint8

const (
	// Server decodes what a client sent: every frame must be masked.
	Server Role = iota
	// Client decodes what a server sent: no frame may be masked.
	Client
)

// DefaultMaxMessageSize and DefaultMaxFragments are the limits of a zero
// Config. A realtime server's messages are small; raise the limits for
// bulk transfers (the Autobahn 9.x cases need 16 MiB and 65536 fragments).
const (
	DefaultMaxMessageSize = 1 << 20
	DefaultMaxFragments   = 1024
)

// maxLimit keeps header size plus payload length within an int.
const maxLimit = int64(math.MaxInt - MaxHeaderSize)

// Config is what a Decoder needs to know about its connection. The zero
// value decodes for a server, without extensions, with default limits.
type Config struct {
	// Role is the end the Decoder reads for: a Server requires masked
	// frames and a Client unmasked ones (RFC 6455 §5.1).
	Role Role

	// Extensions holds the RSV bits that negotiated extensions define;
	// any other RSV bit fails the connection (RFC 6455 §5.2). Set Rsv1
	// when permessage-deflate (RFC 7692) was negotiated: RSV1 is then
	// accepted on the first frame of a data message only, as RFC 7692 §6.1
	// requires, and marks the message compressed.
	Extensions Flags

	// MaxFrameSize bounds the payload of one data frame, MaxMessageSize the
	// sum of the payloads of one message, MaxFragments the number of frames
	// of one message; control frames have their own bound of 125 bytes. A
	// frame header that would exceed a limit fails the connection with 1009
	// before any of its payload is buffered. Zero or negative means the
	// default: DefaultMaxMessageSize, MaxMessageSize (one frame may carry a
	// whole message), DefaultMaxFragments. For a compressed message the
	// sizes count compressed bytes: bounding the inflated size is the
	// inflater's job.
	MaxFrameSize   int64
	MaxMessageSize int64
	MaxFragments   int
}

// Source is a queue of received bytes the Decoder reads from without
// copying: a subset of segmentqueue.Queue, so a Decoder runs on one
// directly. Peek returns the first n bytes (a slice of the queue when they
// lie in one segment, else a copy in scratch[:n]); Next removes and returns
// the first n bytes as one slice (copied only when they span segments);
// Segments appends the segments covering the first n bytes to dst (the
// Decoder also copes with a last segment that extends past n). Each fails
// when fewer than n bytes are buffered. What Next returns must stay valid
// at least until the next call to Next.
//
// The Decoder unmasks payloads in place, in the memory the Source hands out.
type Source interface {
	Len() int
	Peek(n int, scratch []byte) ([]byte, error)
	Next(n int) ([]byte, error)
	Segments(n int, dst [][]byte) ([][]byte, error)
}

// Frame is one decoded frame: its payload is unmasked and, for text, checked
// as far as RFC 6455 allows for a fragment.
type Frame struct {
	Header  Header
	Payload []byte
}

// Message is one whole data message, or one control frame that arrived
// before or between the fragments of a data message.
type Message struct {
	// Opcode is OpText or OpBinary for a data message, OpClose, OpPing or
	// OpPong for a control frame.
	Opcode Opcode
	// Compressed reports that the first frame had RSV1 set: with
	// permessage-deflate, the payload is to be inflated (and, for text,
	// validated as UTF-8 after inflating: the decoder cannot).
	Compressed bool
	// CloseCode is the status of a close frame, validated: CloseNoStatus
	// when its body was empty.
	CloseCode CloseCode
	// Payload is unmasked. For a message of one frame it aliases the
	// input; for a fragmented message it is the assembly buffer. Either
	// way it is valid until the next call on the Decoder.
	Payload []byte
}

// CloseReason returns the reason of a close frame (valid UTF-8, at most
// MaxCloseReason bytes), or nil.
func (m Message) CloseReason() []byte {
	if m.Opcode != OpClose || len(m.Payload) < 2 {
		return nil
	}
	return m.Payload[2:]
}

// Decoder checks and decodes the frames of one connection, sans I/O: it is
// given bytes, as a slice or a Source, and returns frames or whole
// messages, or ErrNeedMore when the input ends inside a frame.
//
// It enforces RFC 6455 as a receiver must: reserved bits and opcodes,
// masking direction, control frames of at most 125 bytes and never
// fragmented, continuation rules, UTF-8 in text messages and close
// reasons, valid close codes, and the limits of its Config. A violation is
// a *ProtocolError carrying the close code to send; it is sticky: the
// Decoder returns it from then on. After a close frame the Decoder returns
// io.EOF: the peer sends nothing more that counts.
//
// Text is validated as the bytes arrive, even inside a frame whose end has
// not arrived yet, so invalid UTF-8 fails the connection at the first
// byte that makes it invalid.
//
// A Decoder is 224 bytes (on 64-bit platforms) and holds no buffer between
// messages: only while a fragmented message is being assembled does it hold
// the assembly buffer (the caller's, when one is given). It is not safe for
// concurrent use.
type Decoder struct {
	cfg Config
	err error

	// The data message in progress.
	msg       []byte // fragments assembled by the message API
	msgLen    int64
	fragments int
	msgOp     Opcode
	inMsg     bool
	msgRsv1   bool

	closed bool
	utf8   UTF8Validator

	// The frame whose end has not arrived: done bytes of its payload are
	// unmasked and validated already.
	done int64
	need int

	hdr  [MaxHeaderSize]byte // Peek scratch for a header split across segments
	segs [4][]byte           // Segments scratch, cleared after every use
}

// NewDecoder returns a Decoder for a connection described by cfg.
func NewDecoder(cfg Config) *Decoder {
	return &Decoder{cfg: cfg}
}

// Reset makes d ready for a new connection described by cfg, so a Decoder
// embedded in a connection struct needs no allocation of its own.
func (d *Decoder) Reset(cfg Config) {
	*d = Decoder{cfg: cfg}
}

// Need returns how many more bytes, at least, the last ErrNeedMore asked
// for: the rest of a header, or the rest of a frame's payload.
func (d *Decoder) Need() int { return d.need }

func (d *Decoder) maxMessage() int64 {
	if m := d.cfg.MaxMessageSize; m > 0 {
		return min(m, maxLimit)
	}
	return DefaultMaxMessageSize
}

func (d *Decoder) maxFrame() int64 {
	if m := d.cfg.MaxFrameSize; m > 0 {
		return min(m, maxLimit)
	}
	return d.maxMessage()
}

func (d *Decoder) maxFragments() int {
	if m := d.cfg.MaxFragments; m > 0 {
		return m
	}
	return DefaultMaxFragments
}

// stopped returns the error a failed or closed Decoder keeps returning.
func (d *Decoder) stopped() error {
	if d.err != nil {
		return d.err
	}
	return io.EOF
}

func (d *Decoder) fail(err error) error {
	d.err = err
	d.msg = nil
	return err
}

// check applies every rule that the header alone decides. It changes no
// state: a header is checked again on each call until its frame is whole.
func (d *Decoder) check(h Header) error {
	if rsv := h.Flags & rsvBits; rsv != 0 {
		// RFC 6455 §5.2: "If a nonzero value is received and none of the
		// negotiated extensions defines the meaning of such a nonzero value,
		// the receiving endpoint MUST _Fail the WebSocket Connection_."
		if rsv&^d.cfg.Extensions != 0 {
			return ErrReservedBits
		}
		// RFC 7692 §6.1: "An endpoint MUST NOT set the "Per-Message
		// Compressed" bit of control frames and non-first fragments of a
		// data message. An endpoint receiving such a frame MUST _Fail the
		// WebSocket Connection_."
		if rsv&Rsv1 != 0 && (h.Opcode.IsControl() || h.Opcode == OpContinuation) {
			return ErrMisplacedRsv1
		}
	}
	if h.Opcode.IsReserved() {
		return ErrReservedOpcode
	}
	// RFC 6455 §5.1: "The server MUST close the connection upon receiving a
	// frame that is not masked." and "A client MUST close a connection if
	// it detects a masked frame."
	if h.Masked != (d.cfg.Role == Server) {
		if h.Masked {
			return ErrMaskedFrame
		}
		return ErrUnmaskedFrame
	}
	if h.Opcode.IsControl() {
		// RFC 6455 §5.5: "All control frames MUST have a payload length of
		// 125 bytes or less and MUST NOT be fragmented."
		if h.Length > MaxControlPayload {
			return ErrControlTooLong
		}
		if !h.Fin() {
			return ErrFragmentedControl
		}
		return nil
	}
	msgLen, fragments := d.msgLen, d.fragments
	if h.Opcode == OpContinuation {
		if !d.inMsg {
			return ErrUnexpectedContinuation
		}
	} else {
		// RFC 6455 §5.4: "The fragments of one message MUST NOT be
		// interleaved between the fragments of another message unless an
		// extension has been negotiated that can interpret the
		// interleaving."
		if d.inMsg {
			return ErrExpectedContinuation
		}
		msgLen, fragments = 0, 0
	}
	// RFC 6455 §10.4: "a malicious endpoint can try to exhaust its peer's
	// memory or mount a denial-of-service attack by sending either a single
	// big frame (e.g., of size 2**60) or by sending a long stream of small
	// frames that are a part of a fragmented message."
	if h.Length > d.maxFrame() {
		return ErrFrameTooBig
	}
	if h.Length > d.maxMessage()-msgLen {
		return ErrMessageTooBig
	}
	if fragments >= d.maxFragments() {
		return ErrTooManyFragments
	}
	return nil
}

// isText reports whether the payload of a frame with header h is UTF-8 the
// decoder validates: uncompressed text, or a continuation of it.
func (d *Decoder) isText(h Header) bool {
	switch h.Opcode {
	case OpText:
		return h.Flags&Rsv1 == 0
	case OpContinuation:
		return d.inMsg && d.msgOp == OpText && !d.msgRsv1
	}
	return false
}

// scan unmasks and validates q, the next bytes of the payload of a text
// frame whose end has not arrived, so that invalid UTF-8 fails the
// connection as soon as it is received.
func (d *Decoder) scan(h Header, q []byte) error {
	off := d.done
	d.done += int64(len(q))
	if !d.unmaskText(h, q, off) {
		return ErrInvalidUTF8
	}
	return nil
}

// unmaskText unmasks q, the payload bytes of a text frame from offset off
// on, and feeds them to the UTF-8 validator. A masked payload that turns
// out all ASCII, with no character pending from the bytes before it, is
// valid without a second pass.
func (d *Decoder) unmaskText(h Header, q []byte, off int64) bool {
	if h.Masked {
		if maskASCII(q, h.Key, int(off&3)) && d.utf8.need == 0 && !d.utf8.failed {
			return true
		}
	}
	return d.utf8.Valid(q)
}

// finish completes a frame whose whole payload p is present, p[:d.done]
// being unmasked and validated already, and moves the message state on.
func (d *Decoder) finish(h Header, p []byte) error {
	text := d.isText(h)
	rest, off := p[d.done:], d.done
	d.done = 0
	if h.Masked && !text {
		Mask(rest, h.Key, int(off&3))
	}
	switch h.Opcode {
	case OpClose:
		if _, _, err := ParseClosePayload(p); err != nil {
			return err
		}
		d.closed = true
		d.msg = nil // a message cut short by the close is never delivered
		return nil
	case OpPing, OpPong:
		return nil
	case OpText, OpBinary:
		d.inMsg, d.msgOp, d.msgRsv1 = true, h.Opcode, h.Flags&Rsv1 != 0
		d.msgLen, d.fragments = 0, 0
	}
	d.msgLen += h.Length
	d.fragments++
	if text {
		// RFC 6455 §5.6: "a particular text frame might include a partial
		// UTF-8 sequence; however, the whole message MUST contain valid
		// UTF-8."
		if !d.unmaskText(h, rest, off) || (h.Fin() && !d.utf8.Complete()) {
			return ErrInvalidUTF8
		}
	}
	if h.Fin() {
		d.inMsg = false
		d.utf8.Reset()
	}
	return nil
}

// DecodeFrame decodes the frame at the start of b, unmasking its payload in
// place. n is the number of bytes consumed: the caller drops them and
// passes what follows on the next call. When b ends inside the frame it
// returns ErrNeedMore with n = 0: call again with the same bytes and more
// appended (unconsumed bytes may move, as in a compacted buffer, but must
// not change). The same bytes means as this call left them: the part of a
// text frame's payload that has arrived is unmasked and checked for UTF-8
// in place already, so passing a fresh copy of the bytes as they came off
// the wire would unmask that part twice. The payload aliases b.
func (d *Decoder) DecodeFrame(b []byte) (f Frame, n int, err error) {
	if d.err != nil || d.closed {
		return Frame{}, 0, d.stopped()
	}
	h, hn, err := ParseHeader(b)
	if err != nil {
		if err == ErrShortHeader {
			d.need = hn - len(b)
			return Frame{}, 0, ErrNeedMore
		}
		return Frame{}, 0, d.fail(err)
	}
	if err := d.check(h); err != nil {
		return Frame{}, 0, d.fail(err)
	}
	if got := int64(len(b) - hn); got < h.Length {
		d.need = int(h.Length - got)
		if d.isText(h) && got > d.done {
			if err := d.scan(h, b[hn+int(d.done):]); err != nil {
				return Frame{}, 0, d.fail(err)
			}
		}
		return Frame{}, 0, ErrNeedMore
	}
	end := hn + int(h.Length)
	p := b[hn:end:end]
	if err := d.finish(h, p); err != nil {
		return Frame{}, 0, d.fail(err)
	}
	return Frame{Header: h, Payload: p}, end, nil
}

// NextFrame decodes the frame at the front of src and removes it from src.
// The payload is contiguous: a slice of src's memory when the frame lies in
// one segment, a single copy otherwise. When src ends inside the frame it
// returns ErrNeedMore and leaves src as it was (apart from unmasking in
// place the payload bytes it validated early).
func (d *Decoder) NextFrame(src Source) (Frame, error) {
	if d.err != nil || d.closed {
		return Frame{}, d.stopped()
	}
	avail := src.Len()
	if avail < 2 {
		d.need = 2 - avail
		return Frame{}, ErrNeedMore
	}
	hb, err := src.Peek(min(avail, MaxHeaderSize), d.hdr[:])
	if err != nil {
		return Frame{}, fmt.Errorf("wsframe: peeking frame header: %w", err)
	}
	h, hn, err := ParseHeader(hb)
	if err != nil {
		if err == ErrShortHeader {
			d.need = hn - avail
			return Frame{}, ErrNeedMore
		}
		return Frame{}, d.fail(err)
	}
	if err := d.check(h); err != nil {
		return Frame{}, d.fail(err)
	}
	if got := int64(avail - hn); got < h.Length {
		d.need = int(h.Length - got)
		if d.isText(h) && got > d.done {
			if err := d.scanSegments(src, h, hn, avail); err != nil {
				return Frame{}, err
			}
		}
		return Frame{}, ErrNeedMore
	}
	// Header and payload in one call: one copy at most, and only when the
	// frame spans segments.
	f, err := src.Next(hn + int(h.Length))
	if err != nil {
		return Frame{}, fmt.Errorf("wsframe: taking frame: %w", err)
	}
	p := f[hn:len(f):len(f)]
	if err := d.finish(h, p); err != nil {
		return Frame{}, d.fail(err)
	}
	return Frame{Header: h, Payload: p}, nil
}

// scanSegments validates, segment by segment and in place, the payload
// bytes of an incomplete text frame that arrived since the last call.
func (d *Decoder) scanSegments(src Source, h Header, hn, avail int) error {
	segs, err := src.Segments(avail, d.segs[:0])
	if err != nil {
		return fmt.Errorf("wsframe: listing segments: %w", err)
	}
	skip := hn + int(d.done) // bytes at the front already handled
	left := avail - skip
	for _, s := range segs {
		if left == 0 {
			break
		}
		if skip >= len(s) {
			skip -= len(s)
			continue
		}
		s = s[skip:]
		skip = 0
		if len(s) > left {
			s = s[:left]
		}
		left -= len(s)
		if err = d.scan(h, s); err != nil {
			err = d.fail(err)
			break
		}
	}
	clear(segs)
	clear(d.segs[:])
	return err
}

// collect turns a decoded frame into a Message, or appends it to the
// fragmented message being assembled and reports ok = false.
func (d *Decoder) collect(f Frame, buf *[]byte) (m Message, ok bool) {
	h := f.Header
	if h.Opcode.IsControl() {
		m = Message{Opcode: h.Opcode, Payload: f.Payload}
		if h.Opcode == OpClose {
			m.CloseCode, _, _ = ParseClosePayload(f.Payload) // validated by finish
		}
		return m, true
	}
	if h.Opcode != OpContinuation {
		if h.Fin() {
			return Message{Opcode: h.Opcode, Compressed: h.Flags&Rsv1 != 0, Payload: f.Payload}, true
		}
		d.msg = nil
		if buf != nil {
			d.msg = (*buf)[:0]
		}
	}
	d.msg = append(d.msg, f.Payload...)
	if !h.Fin() {
		return Message{}, false
	}
	m = Message{Opcode: d.msgOp, Compressed: d.msgRsv1, Payload: d.msg}
	if buf != nil {
		*buf = d.msg
	}
	d.msg = nil
	return m, true
}

// DecodeMessage decodes from b the next whole data message, or the next
// control frame, which may arrive between the fragments of a message (RFC
// 6455 §5.4: "An endpoint MUST be capable of handling control frames in the
// middle of a fragmented message"). n is the number of bytes consumed,
// whatever err is: the caller always drops them, also on ErrNeedMore (the
// fragments consumed so far are kept in the assembly buffer), and passes
// the rest again as this call left it, as DecodeFrame says.
//
// A message of one frame is returned in place, aliasing b. The fragments of
// a fragmented message are copied into (*buf)[:0], grown as needed and
// stored back in *buf when the message is complete, so a caller that passes
// the same buf every time allocates nothing once it is large enough; with a
// nil buf the Decoder allocates the assembly buffer itself.
func (d *Decoder) DecodeMessage(b []byte, buf *[]byte) (m Message, n int, err error) {
	if m, n, ok, err := d.decodeWhole(b); ok {
		return m, n, err
	}
	for {
		f, fn, err := d.DecodeFrame(b[n:])
		n += fn
		if err != nil {
			return Message{}, n, err
		}
		if m, ok := d.collect(f, buf); ok {
			return m, n, nil
		}
	}
}

// The fast path of DecodeMessage and NextMessage covers the frame a server
// receives most: a whole text or binary message in one frame, no RSV bit,
// a 7- or 16-bit length, masked as the role requires, within the limits.
// Anything else takes the general path, which applies every rule. For the
// frames it takes, the fast path applies the same rules and returns the
// same results, as FuzzDecoder checks against the frame-by-frame path.

// wholeHeader recognises the header of a frame for the fast path at the
// start of b and returns its fields and size.
func (d *Decoder) wholeHeader(b []byte) (h Header, hn int, ok bool) {
	if len(b) < 2 || d.inMsg || d.done != 0 || d.err != nil || d.closed {
		return Header{}, 0, false
	}
	b0, b1 := b[0], b[1]
	if b0 != byte(Fin)|byte(OpText) && b0 != byte(Fin)|byte(OpBinary) {
		return Header{}, 0, false
	}
	h = Header{Flags: Fin, Opcode: Opcode(b0 & 0xF), Masked: b1&0x80 != 0, Length: int64(b1 & 0x7F)}
	if h.Masked != (d.cfg.Role == Server) {
		return Header{}, 0, false
	}
	hn = 2
	switch h.Length {
	case 126:
		if len(b) < 4 {
			return Header{}, 0, false
		}
		h.Length, hn = int64(b[2])<<8|int64(b[3]), 4
		if h.Length <= 125 {
			return Header{}, 0, false
		}
	case 127:
		return Header{}, 0, false
	}
	if h.Masked {
		if len(b) < hn+4 {
			return Header{}, 0, false
		}
		h.Key = [4]byte(b[hn : hn+4])
		hn += 4
	}
	if h.Length > d.maxFrame() || h.Length > d.maxMessage() {
		return Header{}, 0, false
	}
	return h, hn, true
}

// wholeMessage unmasks and checks the payload of a frame wholeHeader
// accepted, and returns its message.
func (d *Decoder) wholeMessage(h Header, p []byte) (Message, error) {
	d.msgOp, d.msgRsv1 = h.Opcode, false
	m := Message{Opcode: h.Opcode, Payload: p}
	if h.Opcode == OpBinary {
		if h.Masked {
			Mask(p, h.Key, 0)
		}
		return m, nil
	}
	if h.Masked && maskASCII(p, h.Key, 0) {
		return m, nil
	}
	if !d.utf8.Valid(p) || !d.utf8.Complete() {
		return Message{}, d.fail(ErrInvalidUTF8)
	}
	d.utf8.Reset()
	return m, nil
}

// decodeWhole is the fast path of DecodeMessage; ok = false leaves b and
// the Decoder untouched.
func (d *Decoder) decodeWhole(b []byte) (m Message, n int, ok bool, err error) {
	h, hn, ok := d.wholeHeader(b)
	if !ok || int64(len(b)-hn) < h.Length {
		return Message{}, 0, false, nil
	}
	n = hn + int(h.Length)
	m, err = d.wholeMessage(h, b[hn:n:n])
	if err != nil {
		return Message{}, 0, true, err
	}
	return m, n, true, nil
}

// nextWhole is the fast path of NextMessage; ok = false leaves src and the
// Decoder untouched.
func (d *Decoder) nextWhole(src Source) (m Message, ok bool, err error) {
	avail := src.Len()
	if avail < 2 {
		return Message{}, false, nil
	}
	hb, err := src.Peek(min(avail, 8), d.hdr[:]) // the fast path's longest header
	if err != nil {
		return Message{}, false, nil
	}
	h, hn, ok := d.wholeHeader(hb)
	if !ok || int64(avail-hn) < h.Length {
		return Message{}, false, nil
	}
	f, err := src.Next(hn + int(h.Length))
	if err != nil {
		return Message{}, true, fmt.Errorf("wsframe: taking frame: %w", err)
	}
	m, err = d.wholeMessage(h, f[hn:len(f):len(f)])
	return m, true, err
}

// NextMessage is DecodeMessage reading from a Source: the frames it
// decodes are removed from src, and a message of one frame is returned
// without a copy when it lies in one segment.
func (d *Decoder) NextMessage(src Source, buf *[]byte) (Message, error) {
	if m, ok, err := d.nextWhole(src); ok {
		return m, err
	}
	for {
		f, err := d.NextFrame(src)
		if err != nil {
			return Message{}, err
		}
		if m, ok := d.collect(f, buf); ok {
			return m, nil
		}
	}
}
