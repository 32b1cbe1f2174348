package wsframe

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// Variants is the number of variant slots of a Prepared message.
// deflatecache uses eight of them, one permessage-deflate frame per server
// window (8 to 15 bits) shared by both context-takeover modes, and leaves
// slots 8 to 15 to other encodings.
const Variants = 16

// ErrVariantSlot is returned by Prepared.Variant for a slot outside
// [0, Variants).
var ErrVariantSlot = errors.New("wsframe: variant slot out of range")

// ErrPreparedOpcode is returned by NewPrepared for an opcode that cannot
// stand alone as a message: continuation, a reserved opcode, or a control
// opcode with more than 125 bytes of payload.
var ErrPreparedOpcode = errors.New("wsframe: opcode cannot frame a prepared message")

// Prepared is one message encoded once and written by many: the building
// block of a broadcast. Its server frame is built lazily by whichever
// writer needs it first and then shared, read-only, by any number of
// concurrent writers with no copy and no lock.
//
// Besides the plain frame, a Prepared has Variants slots for other
// encodings of the same message that other modules build, keyed by a small
// int. deflatecache keeps one permessage-deflate frame per negotiated
// window there: it picks the slot from the window bits of a connection
// (with or without context takeover), and Variant builds that frame once,
// from the payload itself (never a copy), on the first connection that
// needs it; every later connection with the same window gets the same
// bytes with two atomic loads. Writers that need different slots never wait for one
// another; writers of the same slot wait only for its first build. A
// failed build leaves the slot empty for the next writer to retry. The
// slot table (Variants × 16 bytes) is allocated on first use, so a message
// that is never compressed costs one nil pointer for it.
//
// Prepared frames are unmasked: server to client only. A client masks each
// frame with a fresh key and can share nothing (RFC 6455 §5.3).
type Prepared struct {
	op      Opcode
	hlen    uint8
	hdr     [10]byte
	payload []byte

	once  sync.Once
	frame []byte

	slots atomic.Pointer[[Variants]variantSlot]
}

type variantSlot struct {
	mu    sync.Mutex // held by the one builder
	frame atomic.Pointer[[]byte]
}

// NewPrepared returns a message with opcode op and the given payload, which
// it keeps without copying: the caller must not modify payload afterwards.
// A text payload is sent as is; validating it as UTF-8 is the caller's
// part.
func NewPrepared(op Opcode, payload []byte) (*Prepared, error) {
	if op == OpContinuation || op.IsReserved() || (op.IsControl() && len(payload) > MaxControlPayload) {
		return nil, ErrPreparedOpcode
	}
	if op == OpClose {
		// A close body the peer would fail the connection on (one byte, a
		// code it must not receive, an invalid reason: RFC 6455 §5.5.1,
		// §7.4.1) cannot stand alone either.
		if _, _, err := ParseClosePayload(payload); err != nil {
			return nil, fmt.Errorf("%w: close body: %w", ErrPreparedOpcode, err)
		}
	}
	p := &Prepared{op: op, payload: payload}
	h := AppendHeader(p.hdr[:0], Header{Flags: Fin, Opcode: op, Length: int64(len(payload))})
	p.hlen = uint8(len(h))
	return p, nil
}

// ErrPreparedHeadroom is returned by NewPreparedAfter for a headroom
// smaller than a server frame header can be, or larger than the buffer.
var ErrPreparedHeadroom = errors.New("wsframe: prepared headroom under 10 bytes or past the buffer")

// maxServerHeaderSize is the largest header of an unmasked frame.
const maxServerHeaderSize = MaxHeaderSize - 4

// NewPreparedAfter is NewPrepared for a payload that buf holds after
// headroom free bytes, at least 10 (the largest server frame header;
// MaxHeaderSize will do): the header is written into them, so the frame
// is buf's own bytes and Frame neither copies nor allocates. A broadcast
// built this way costs one buffer instead of two. buf is kept: the caller
// must not modify it afterwards.
func NewPreparedAfter(op Opcode, buf []byte, headroom int) (*Prepared, error) {
	if headroom < maxServerHeaderSize || headroom > len(buf) {
		return nil, ErrPreparedHeadroom
	}
	p, err := NewPrepared(op, buf[headroom:])
	if err != nil {
		return nil, err
	}
	start := headroom - int(p.hlen)
	copy(buf[start:headroom], p.Header())
	p.frame = buf[start:len(buf):len(buf)]
	// The frame is built: Frame's first call must not build it again.
	// p is not shared yet, so this is ordered before any Frame.
	p.once.Do(func() {})
	return p, nil
}

// Opcode returns the message's opcode.
func (p *Prepared) Opcode() Opcode { return p.op }

// Payload returns the message payload, shared: read it, never modify it.
func (p *Prepared) Payload() []byte { return p.payload }

// Header returns the header of the plain server frame. Header and Payload
// written with one vectored write send the frame without building it,
// which is the better choice for a payload of more than a few KiB.
func (p *Prepared) Header() []byte { return p.hdr[:p.hlen:p.hlen] }

// Frame returns the plain server frame, header and payload in one slice,
// building it on the first call. The slice is shared: never modify it.
func (p *Prepared) Frame() []byte {
	p.once.Do(func() {
		f := make([]byte, 0, int(p.hlen)+len(p.payload))
		f = append(f, p.Header()...)
		f = append(f, p.payload...)
		p.frame = f
	})
	return p.frame
}

// Variant returns the frame stored in the given slot, calling build with
// the opcode and payload to make it first if the slot is empty. build runs
// at most once per slot at a time, and never again once it has succeeded;
// it must return a complete frame, which is then shared: neither build nor
// any caller may modify it, nor the payload build is given.
func (p *Prepared) Variant(slot int, build func(op Opcode, payload []byte) ([]byte, error)) ([]byte, error) {
	if slot < 0 || slot >= Variants {
		return nil, ErrVariantSlot
	}
	table := p.slots.Load()
	if table == nil {
		table = new([Variants]variantSlot)
		if !p.slots.CompareAndSwap(nil, table) {
			table = p.slots.Load()
		}
	}
	s := &table[slot]
	if f := s.frame.Load(); f != nil {
		return *f, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.frame.Load(); f != nil {
		return *f, nil
	}
	f, err := build(p.op, p.payload)
	if err != nil {
		return nil, err
	}
	s.frame.Store(&f)
	return f, nil
}

// LoadVariant returns the frame in slot if one was built, or nil. It never
// builds and never blocks.
func (p *Prepared) LoadVariant(slot int) []byte {
	if slot < 0 || slot >= Variants {
		return nil
	}
	table := p.slots.Load()
	if table == nil {
		return nil
	}
	if f := table[slot].frame.Load(); f != nil {
		return *f
	}
	return nil
}
