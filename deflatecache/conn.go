package deflatecache

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/hotpath-go/hotpath/wsframe"
	"github.com/klauspost/compress/flate"
)

// Defaults of Options.
const (
	// DefaultLevel is the compression level at the 15-bit window:
	// klauspost/compress's fastest, the usual choice for realtime traffic.
	DefaultLevel = flate.BestSpeed
	// DefaultMinSize: a message shorter than this is sent plain when it
	// would be compressed from an empty window. One-shot DEFLATE of JSON
	// this short saves a few bytes at best (see the README's table) while
	// costing both ends a compressor and an inflater pass.
	DefaultMinSize = 128
	// DefaultTakeoverMinSize is the same threshold with context takeover,
	// where even a short message that repeats an earlier one shrinks
	// several times.
	DefaultTakeoverMinSize = 16
	// DefaultTakeoverHistory is how much of its past output a connection
	// with context takeover compresses against when its pooled compressor
	// has to be primed, which costs about as much as compressing that
	// much: it bounds both the memory kept per connection and the CPU per
	// message. For short messages, 1 KiB shrinks them as much as 4 KiB
	// or 32 KiB do (BenchmarkContextTakeover).
	DefaultTakeoverHistory = 1 << 10
)

// Options are the local choices of a connection's compression: nothing in
// them is negotiated. The zero value is the defaults.
type Options struct {
	// Level is the compression level, 1 (fastest) to 9, used with the
	// 15-bit window. Smaller windows use flate.NewWriterWindow, which has
	// a single algorithm. 0 means DefaultLevel.
	Level int
	// MinSize: messages shorter than this are sent plain (RSV1 clear)
	// when compressed without history. 0 or less means DefaultMinSize.
	MinSize int
	// TakeoverMinSize is MinSize for messages compressed with context
	// takeover. 0 or less means DefaultTakeoverMinSize.
	TakeoverMinSize int
	// TakeoverHistory is how many bytes of earlier messages a message
	// compressed with context takeover may refer to when its compressor
	// is primed, at most the negotiated window. 0 or less means
	// DefaultTakeoverHistory.
	TakeoverHistory int
}

// Conn is the permessage-deflate state of one connection, for one role,
// made by NewConn: the zero value is not usable.
//
// Without context takeover in a direction it holds nothing for that
// direction between messages: compressors and inflaters come from pools
// for the length of one call, so an idle connection costs the size of a
// Conn (112 bytes on the heap). With context takeover it keeps the window that
// direction refers back to, grown as traffic fills it: up to 2^bits bytes
// of the peer's window for Inflate, up to TakeoverHistory bytes of its own
// output for compression.
//
// Inflate touches only the receiving state and the sending methods only the
// sending state, so a connection's read loop and write loop may use one Conn
// at the same time. Two calls of Inflate must not overlap, nor two sending
// calls (AppendCompressed, AppendCompressedFrame, BroadcastFrame), nor Close
// with anything.
type Conn struct {
	id              uint64 // names the connection to pooled compressors
	sendGen         uint64 // counts the changes of send: a compressor is current if it saw the last
	role            wsframe.Role
	sendBits        int
	level           int
	slot            int // Prepared variant slot of a server's window
	minSize         int
	takeoverMinSize int
	send            *history // nil without context takeover when sending
	recv            *history // nil when the peer compresses without takeover
	recvErr         error    // sticky once recv's window is lost
	closed          bool
}

// NewConn returns the compression state for a connection that agreed on
// params, seen from role: a server compresses with the server_ parameters
// and inflates with the client_ ones, a client the other way round.
func NewConn(params Params, role wsframe.Role, opts Options) (*Conn, error) {
	if role != wsframe.Server && role != wsframe.Client {
		return nil, fmt.Errorf("deflatecache: role %d is neither wsframe.Server nor wsframe.Client", role)
	}
	sb, cb := params.ServerMaxWindowBits, params.ClientMaxWindowBits
	if sb == 0 {
		sb = MaxWindowBits
	}
	if cb == 0 {
		cb = MaxWindowBits
	}
	if sb < MinWindowBits || sb > MaxWindowBits || cb < MinWindowBits || cb > MaxWindowBits {
		return nil, errors.New("deflatecache: window bits outside 8 to 15")
	}
	if opts.Level == 0 {
		opts.Level = DefaultLevel
	}
	if opts.Level < flate.BestSpeed || opts.Level > flate.BestCompression {
		return nil, errors.New("deflatecache: level outside 1 to 9")
	}
	if opts.MinSize <= 0 {
		opts.MinSize = DefaultMinSize
	}
	if opts.TakeoverMinSize <= 0 {
		opts.TakeoverMinSize = DefaultTakeoverMinSize
	}
	if opts.TakeoverHistory <= 0 {
		opts.TakeoverHistory = DefaultTakeoverHistory
	}
	c := &Conn{
		id:              connIDs.Add(1),
		role:            role,
		level:           opts.Level,
		minSize:         opts.MinSize,
		takeoverMinSize: opts.TakeoverMinSize,
	}
	sendTakeover, recvTakeover := !params.ServerNoContextTakeover, !params.ClientNoContextTakeover
	recvBits := cb
	c.sendBits = sb
	if role == wsframe.Client {
		sendTakeover, recvTakeover = recvTakeover, sendTakeover
		c.sendBits, recvBits = cb, sb
	}
	c.slot = c.sendBits - MinWindowBits
	if sendTakeover {
		c.send = newHistory(min(opts.TakeoverHistory, 1<<c.sendBits))
	}
	if recvTakeover {
		// RFC 7692 §7.2.2: without no_context_takeover for the peer's
		// direction, this end "MUST decompress each new message using the
		// LZ77 sliding window used to process the last compressed
		// message". The peer refers back at most 2^bits bytes.
		c.recv = newHistory(1 << recvBits)
	}
	return c, nil
}

// Close drops the connection's history. Later calls fail with ErrClosed or
// report that nothing was compressed.
func (c *Conn) Close() {
	c.closed = true
	c.send = nil
	c.recv = nil
}

// AppendCompressed appends payload compressed as RFC 7692 §7.2.1 describes
// (with the negotiated window, the 00 00 ff ff tail removed) and reports
// true, or returns dst unchanged and false when payload is below the
// threshold or would not shrink: then send it plain, RSV1 clear. (With
// context takeover and an empty history, a message is compressed even if
// it grows by a few bytes, to start the history.) It is for callers that
// frame the message themselves (to fragment it, or to write header and
// payload with one vectored write); AppendCompressedFrame frames it too.
//
// With context takeover, a true result joins the connection's history:
// the message must then be sent, and before any later compressed one.
func (c *Conn) AppendCompressed(dst, payload []byte) ([]byte, bool) {
	if c.closed {
		return dst, false
	}
	// RFC 7692 §7.2.1: "If the "agreed parameters" contain the
	// "server_no_context_takeover" extension parameter, the server MUST
	// start compressing each new message with an empty LZ77 sliding
	// window. Otherwise, the server MAY take over the LZ77 sliding window
	// used to build the last compressed message." (And the same for the
	// client.) Without takeover, history is nil: an empty window.
	var history []byte
	minSize := c.minSize
	if c.send != nil {
		history = c.send.bytes()
		minSize = c.takeoverMinSize
	}
	if len(payload) < minSize || len(payload) == 0 {
		return dst, false
	}
	comp := getCompressor(c.sendBits, c.level)
	defer putCompressor(comp, c.sendBits, c.level)
	// Priming a compressor with the history costs about as much as
	// compressing the history. A compressor whose stream still is this
	// connection's, untouched since its last message (the common case for
	// a burst of messages on one goroutine, since the pool hands back the
	// compressor last put on this P), resumes without it.
	var out []byte
	var ok bool
	if c.send != nil && comp.owner == c.id && comp.gen == c.sendGen {
		out, ok = comp.appendResume(dst, payload)
	} else {
		out, ok = comp.appendDeflate(dst, payload, history)
	}
	// A message that does not shrink is sent plain, except the first one
	// of a connection with context takeover: sent compressed (a stored
	// block costs about 5 bytes more than the message), it becomes the
	// history the messages after it shrink against. Sent plain, it would
	// not, and a stream of short messages, none of which shrinks alone,
	// would never start to.
	if !ok || (len(out)-len(dst) >= len(payload) && (c.send == nil || len(history) > 0)) {
		comp.owner = 0 // holds a message the peer never sees
		return dst, false
	}
	if c.send != nil {
		c.send.add(payload)
		c.sendGen++
		comp.owner, comp.gen = c.id, c.sendGen
	}
	return out, true
}

// connIDs numbers connections for compressor ownership; 0 is nobody.
var connIDs atomic.Uint64

var zeroHeader [wsframe.MaxHeaderSize]byte

// AppendCompressedFrame appends one whole frame (FIN and RSV1 set) carrying
// payload compressed, and reports true; or returns dst unchanged and false
// when the message is to be sent plain: below the threshold, not shrinking,
// or a control frame, which RFC 7692 §6.1 excludes: "An endpoint MUST NOT
// set the "Per-Message Compressed" bit of control frames". A server's frame
// is unmasked; a client's is masked with a fresh key from
// wsframe.NewMaskKey (RFC 6455 §5.3). With a dst of enough capacity it
// allocates nothing.
func (c *Conn) AppendCompressedFrame(dst []byte, op wsframe.Opcode, payload []byte) ([]byte, bool) {
	if op.IsControl() || op.IsReserved() || op == wsframe.OpContinuation {
		return dst, false
	}
	masked := c.role == wsframe.Client
	// Reserve the header payload's length would need, compress after it,
	// then slide the body to the header's real size: down, usually, as
	// the compressed payload is shorter; up when it is not, which
	// AppendCompressed allows with context takeover and an empty history
	// (an incompressible message of 120-125 or 65,530-65,535 bytes then
	// needed a larger header, and the slide down cut the body's end: the
	// peer inflated other bytes without an error; a modules audit).
	reserve := wsframe.HeaderSize(int64(len(payload)), masked)
	start := len(dst)
	out, ok := c.AppendCompressed(append(dst, zeroHeader[:reserve]...), payload)
	if !ok {
		return dst[:start], false
	}
	n := len(out) - start - reserve
	hs := wsframe.HeaderSize(int64(n), masked)
	if hs > reserve {
		out = append(out, zeroHeader[:hs-reserve]...)
	}
	copy(out[start+hs:], out[start+reserve:start+reserve+n])
	out = out[:start+hs+n]
	h := wsframe.Header{Flags: wsframe.Fin | wsframe.Rsv1, Opcode: op, Length: int64(n)}
	if masked {
		h.Masked = true
		h.Key = wsframe.NewMaskKey()
	}
	wsframe.AppendHeader(out[:start], h)
	if masked {
		wsframe.Mask(out[start+hs:], h.Key, 0)
	}
	return out, true
}

// BroadcastFrame returns the frame to send p with to this connection: the
// shared compressed frame for this connection's window, built by the first
// connection that needs it and then read by all others without a lock
// (Prepared's variant slot number bits-8), or p's plain frame when the
// message is a control frame, below MinSize, or does not shrink. The
// returned slice is shared: never modify it.
//
// The shared frame is compressed from an empty window, so every peer that
// negotiated this window can inflate it, with context takeover or
// without; the two modes share one slot, and the compression level is that
// of the connection that built it. On a connection with context takeover
// the message then joins the history, as it does in the peer's inflater
// (RFC 7692 §7.2.2), so later messages may refer to it.
//
// BroadcastFrame is for the server role; a client gets ErrClientBroadcast.
func (c *Conn) BroadcastFrame(p *wsframe.Prepared) ([]byte, error) {
	if f := p.LoadVariant(c.slot); len(f) > 0 && c.role == wsframe.Server && c.send == nil && !c.closed {
		return f, nil
	}
	return c.broadcastSlow(p)
}

func (c *Conn) broadcastSlow(p *wsframe.Prepared) ([]byte, error) {
	if c.role != wsframe.Server {
		return nil, ErrClientBroadcast
	}
	if c.closed {
		return nil, ErrClosed
	}
	payload := p.Payload()
	if p.Opcode().IsControl() || len(payload) < c.minSize || len(payload) == 0 {
		return p.Frame(), nil
	}
	f, err := p.Variant(c.slot, sharedBuilders[c.slot][c.level])
	if err != nil {
		return nil, err
	}
	if len(f) == 0 {
		return p.Frame(), nil
	}
	if c.send != nil {
		c.send.add(payload)
		c.sendGen++ // no compressor holds the stream with this message
	}
	return f, nil
}

// Inflate appends the message that payload, the whole payload of a
// message received with RSV1 set, inflates to. It appends the 00 00 ff ff
// tail itself (RFC 7692 §7.2.2) without copying payload. With context
// takeover negotiated for the peer's direction it inflates against the
// peer's earlier messages.
//
// max caps the inflated size; 0 or less means DefaultMaxInflate. Inflation
// stops, and dst is never grown past len(dst)+max, as soon as the output
// would exceed it: ErrTooLarge, close code 1009. A payload that is not
// DEFLATE data is ErrCorrupt, close code 1007. On error dst is returned
// with its length unchanged; with context takeover the history is then
// lost, and every later call returns the same error. An empty payload is
// an empty message.
//
// A text message must still be validated as UTF-8 after inflating.
func (c *Conn) Inflate(dst, payload []byte, max int64) ([]byte, error) {
	if c.closed {
		return dst, ErrClosed
	}
	if c.recvErr != nil {
		return dst, c.recvErr
	}
	if len(payload) == 0 {
		return dst, nil
	}
	if max <= 0 {
		max = DefaultMaxInflate
	}
	var history []byte
	if c.recv != nil {
		history = c.recv.bytes()
	}
	in := inflaters.Get().(*inflater)
	out, err := in.appendInflate(dst, payload, history, max)
	inflaters.Put(in)
	if err != nil {
		if c.recv != nil {
			c.recvErr = err
		}
		return dst, err
	}
	if c.recv != nil {
		c.recv.add(out[len(dst):])
	}
	return out, nil
}
