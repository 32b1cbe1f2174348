package compat

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/corkwriter"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/scheduler"
	"github.com/hotpath-go/hotpath/wsframe"
)

// Peer is one client connection of a Server. Its methods are safe for
// concurrent use.
type Peer struct {
	srv        *Server
	link       link
	id         uint64
	identity   any
	remoteAddr string
	path       string

	// ctx is canceled when the connection ends; handlers' contexts derive
	// from it and PeerFrom finds the Peer in it.
	ctx    context.Context
	cancel context.CancelFunc

	codec Codec
	// dict is the dictionary codec negotiated through capabilities, nil
	// until then. Set by the read loop, read by every sender.
	dict atomic.Pointer[dictCodec]

	// The 4-byte fields go in pairs: a Peer per connection stays in a
	// 256-byte allocation.
	closed atomic.Bool
	// once holds flags set once each (onceDroppedSlow, onceWarnedEmit,
	// onceWarnedEmitRate, onceClosing): atomic.Bools took a word each,
	// which inflate needed.
	once atomic.Uint32
	// clientMaxMessage is the client's maxMessage capability, 0 until
	// known: packets over it are not sent (overClientLimit).
	clientMaxMessage atomic.Int64
	keepaliveHandle  atomic.Uint64 // a scheduler.Handle: re-armed by the keepalive goroutine
	inflight         atomic.Int32  // Async calls running
	answersWaiting   atomic.Int32  // answers waiting for room in the outbox: nothing else enters it (send)
	// loopCtx is the context of the handlers that run on the read loop
	// (synchronous methods, events), marked so that Ask can tell them;
	// inLoopHandler is set while one runs. Both are the read loop's.
	loopCtx       context.Context
	inLoopHandler atomic.Bool
	nextAsk       uint32 // under asksMu; here, beside a 4-byte field, for the Peer's size class
	// inflate bounds how fast the connection inflates
	// (Limits.MaxInflateRate), nil until its first compressed message.
	inflate atomic.Pointer[inflateBudget]

	roomsMu sync.Mutex
	rooms   *peerRooms // the rooms it is in and its emit budget; nil until its first Join

	asksMu sync.Mutex
	asks   map[uint32]*pendingAsk

	// The batch being answered, owned by the read loop: while batching,
	// answers of inline calls are gathered into batchItems.
	batchItems []byte
	batchCount uint32
	batching   bool
	// sawCapabilities is set by the read loop at the client's
	// Capabilities, which may come once (onCapabilities). Beside the
	// 4-byte batchCount, it takes no room of its own.
	sawCapabilities bool
}

// The flags of Peer.once.
const (
	onceDroppedSlow    uint32 = 1 << iota // counted as a slow consumer (dropSlow)
	onceWarnedEmit                        // an emit over Limits.MaxEmitSize was logged
	onceWarnedEmitRate                    // an emit past Limits.MaxEmitRate was logged
	onceClosing                           // a close or a drop was asked for: no more inflate pauses (endPauses)
)

// setOnce sets flag and reports whether this call set it.
func (p *Peer) setOnce(flag uint32) bool { return p.once.Or(flag)&flag == 0 }

type peerKey struct{}

// PeerFrom returns the connection a handler's context belongs to, or nil.
func PeerFrom(ctx context.Context) *Peer {
	p, _ := ctx.Value(peerKey{}).(*Peer)
	return p
}

func (s *Server) newPeer(l link, up *upgrade) *Peer {
	p := &Peer{srv: s, link: l, identity: up.identity, remoteAddr: up.remoteAddr, path: up.path, codec: s.opts.Codec}
	ctx, cancel := context.WithCancel(context.Background())
	p.ctx, p.cancel = context.WithValue(ctx, peerKey{}, p), cancel
	return p
}

// ID returns the connection's number, unique within its Server.
func (p *Peer) ID() uint64 { return p.id }

// Identity returns what Options.Authenticate returned for the connection.
func (p *Peer) Identity() any { return p.identity }

// RemoteAddr returns the address of the client.
func (p *Peer) RemoteAddr() string { return p.remoteAddr }

// Carrier returns what the connection runs over.
func (p *Peer) Carrier() Carrier { return p.link.carrier() }

// Encrypted reports whether the connection is encrypted between the
// client and this server, which Carrier does not tell for WebSocket and
// SCTP: true over TLS (wss://, served by Serve over tls.NewListener or by
// ServeHTTP under an http.Server serving TLS), over DTLS (SCTP from
// ListenSCTPDTLS; WebRTC, always) and over QUIC (native QUIC and
// WebTransport, always); false for ws:// and for SCTP over plain UDP.
// It tells of the hop the server reads: behind a proxy that ends TLS it
// is false, whatever the client used. Under a listener that wraps each
// *tls.Conn, it sees through wrappers that have a NetConn method, as
// *tls.Conn has, and not through others. Options.Authenticate, which runs
// before the connection is a Peer, sees the same in r.TLS on every
// carrier but WebRTC, whose r is the signalling request.
func (p *Peer) Encrypted() bool { return p.link.encrypted() }

// Context returns a context canceled when the connection ends.
func (p *Peer) Context() context.Context { return p.ctx }

// Close closes the connection with code 1000 after the answers already
// queued. It is not a ban: a Go or browser client reconnects by its
// Reconnect policy and rejoins its rooms. To keep a client out, refuse
// its next connection in Options.Authenticate and its rooms in
// Options.AllowJoin.
func (p *Peer) Close() { p.closeWith(wsframe.CloseNormal, "") }

func (p *Peer) closeWith(code wsframe.CloseCode, reason string) {
	if !p.closed.Load() {
		p.link.requestClose(code, reason)
		p.endPauses()
	}
}

// start serves the connection on goroutines of its own and calls done
// when it has ended and released what it held.
func (p *Peer) start(done func(error)) {
	p.link.start(p, func(err error) {
		p.closed.Store(true)
		p.cancel()
		p.failAsks(err)
		done(err)
	})
}

// dropSlow disconnects a peer that does not keep up: its outbox could not
// take an answer, or a room emit under the Disconnect policy. It counts
// the connection once, however many answers or emits it refused before it
// ended (a burst of Async answers counted two or more).
func (p *Peer) dropSlow() {
	if p.setOnce(onceDroppedSlow) {
		p.srv.metrics.slowConsumers.Add(1)
	}
	p.link.abort()
	p.endPauses()
}

// handleMessage is the entry of every data message: one packet, dispatched
// by kind (PROTOCOL.md §1, §3).
func (p *Peer) handleMessage(op wsframe.Opcode, payload []byte) error {
	p.srv.metrics.messagesIn.Add(1)
	p.srv.metrics.bytesIn.Add(uint64(len(payload)))
	if p.srv.opts.Echo {
		return p.echo(op, payload)
	}
	if op != wsframe.OpBinary {
		return &CloseError{Code: wsframe.CloseUnsupportedData, Reason: "HP_ERR_TEXT_MESSAGE"}
	}
	if len(payload) == 0 {
		return errMalformed
	}
	head := payload[0]
	body := payload[1:]
	kind := dispatch.Kind(head &^ wire.CompressedBit)
	if !wire.ToServer(kind) {
		// An unknown kind, or one only a server sends (PROTOCOL.md §3:
		// 1008), read from the head byte before a compressed body is
		// inflated, as the Go and browser clients read it: inflated first,
		// such a packet whose body did not inflate closed with 1007 here
		// and 1008 there.
		p.srv.metrics.malformed.Add(1)
		return errUnknownKind
	}
	if head&wire.CompressedBit != 0 {
		d := p.dict.Load()
		if d == nil {
			return &CloseError{Code: wsframe.ClosePolicyViolation, Reason: "HP_ERR_UNNEGOTIATED_COMPRESSION"}
		}
		// A dictionary packet that came in a permessage-deflate message
		// was charged for that message's inflating too (wsConn.handle),
		// and is charged again here: two inflations, each costing CPU
		// for what it produced. Charged only for the packet's body, a
		// message inflating to a megabyte of empty stored blocks that
		// end in a tiny body would inflate for free.
		p.awaitInflate()
		inflated, release, err := d.decompress(body)
		if err != nil {
			p.srv.metrics.compressionFailures.Add(1)
			return err
		}
		defer release()
		countInflated(&p.srv.metrics, body, inflated)
		body = inflated
		p.inflated(len(inflated))
	}
	return p.dispatchPacket(kind, body)
}

// countInflated moves BytesIn, which counted the compressed body as it
// came, to what it inflated to: packets are counted after decompression,
// as BytesOut counts them before compression. The difference is negative
// for a body that inflated to fewer bytes, which the uint64 addition
// subtracts (the total already holds the compressed body).
func countInflated(m *metrics, compressed, inflated []byte) {
	m.bytesIn.Add(uint64(len(inflated) - len(compressed)))
}

// inflateBudget returns the connection's inflate budget
// (Limits.MaxInflateRate), made at its first compressed message; nil when
// the limit is off.
func (p *Peer) inflateBudget() *inflateBudget {
	return loadInflateBudget(&p.inflate, &p.srv.opts.Limits)
}

// awaitInflate is called on the read loop before it inflates a message
// (inflateMeter): while the connection's budget is spent
// (Limits.MaxInflateRate) it pauses the reading until the budget is back
// (paceInflate), or until a close or a drop is asked for (endPauses).
func (p *Peer) awaitInflate() { paceInflate(p.inflateBudget(), p, p.link) }

// inflated charges the n bytes a message inflated to, on the read loop
// (inflateMeter).
func (p *Peer) inflated(n int) {
	if b := p.inflateBudget(); b != nil {
		b.charge(n, monoNow())
	}
}

// pauseOver reports whether a close or a drop was asked for: no inflate
// pause then (inflatePacer).
func (p *Peer) pauseOver() bool { return p.once.Load()&onceClosing != 0 }

// throttled counts an inflate pause (inflatePacer).
func (p *Peer) throttled() { p.srv.metrics.inflateThrottled.Add(1) }

// endPauses ends the read loop's inflate pause, if any, and those it
// would begin later: the connection is closing, or dropped.
func (p *Peer) endPauses() {
	p.once.Or(onceClosing)
	if b := p.inflate.Load(); b != nil {
		b.wakePause()
	}
}

// echo sends a message back as it came (Options.Echo), compressed when
// permessage-deflate was negotiated.
func (p *Peer) echo(op wsframe.Opcode, payload []byte) error {
	n := len(payload)
	var st corkwriter.Status
	if ws, ok := p.link.(*wsConn); ok {
		st = ws.sendFrame(op, payload, wsframe.Fin)
	} else {
		bp := scratchBufs.Get().(*[]byte)
		b := append(beginFrame(*bp), payload...)
		st = p.link.sendBuilt(b)
		*bp = b[:0]
		scratchBufs.Put(bp)
	}
	p.countSent(st, n, false)
	if st == corkwriter.Dropped {
		p.dropSlow()
	}
	return nil
}

// errDatagramKind closes a connection on which a packet of a kind other
// than Emit and Event arrived as a datagram (PROTOCOL.md §8.4).
var errDatagramKind = &CloseError{Code: wsframe.ClosePolicyViolation, Reason: "HP_ERR_DATAGRAM_KIND"}

// handleDatagram handles a packet that arrived as a datagram, off the
// read loop (datagramHandler): only Emit and Event packets may travel so
// (PROTOCOL.md §8.4); any other kind closes the connection with 1008. The
// kind is the head byte's, checked before a compressed body is inflated,
// as the Go and browser clients check it: inflated first, a compressed
// Call whose body did not inflate closed the connection with 1007 here
// and 1008 there, and the server inflated a packet it was to refuse.
func (p *Peer) handleDatagram(pkt []byte) error {
	p.srv.metrics.messagesIn.Add(1)
	p.srv.metrics.bytesIn.Add(uint64(len(pkt)))
	if len(pkt) == 0 {
		return errMalformed
	}
	head, body := pkt[0], pkt[1:]
	kind := dispatch.Kind(head &^ wire.CompressedBit)
	if kind != dispatch.KindEmit && kind != dispatch.KindEvent {
		p.srv.metrics.malformed.Add(1)
		return errDatagramKind
	}
	if head&wire.CompressedBit != 0 {
		d := p.dict.Load()
		if d == nil {
			return &CloseError{Code: wsframe.ClosePolicyViolation, Reason: "HP_ERR_UNNEGOTIATED_COMPRESSION"}
		}
		// Off the read loop, a datagram cannot pause the reading: one
		// that finds the budget spent is dropped uninflated.
		b := p.inflateBudget()
		if b != nil && b.empty(monoNow()) {
			p.srv.metrics.inflateThrottled.Add(1)
			p.srv.metrics.droppedEvents.Add(1)
			return nil
		}
		inflated, release, err := d.decompress(body)
		if err != nil {
			p.srv.metrics.compressionFailures.Add(1)
			return err
		}
		defer release()
		countInflated(&p.srv.metrics, body, inflated)
		body = inflated
		if b != nil {
			b.charge(len(inflated), monoNow())
		}
	}
	var err error
	if kind == dispatch.KindEmit {
		err = p.relayEmit(body, true)
	} else {
		err = p.handleEvent(body, false)
	}
	if errors.Is(err, wire.ErrMalformed) {
		p.srv.metrics.malformed.Add(1)
		return errMalformed
	}
	return err
}

var errMalformed = &CloseError{Code: wsframe.ClosePolicyViolation, Reason: "HP_ERR_MALFORMED_PACKET"}

func (p *Peer) dispatchPacket(kind dispatch.Kind, body []byte) error {
	err := p.srv.dispatch.DispatchKind(p, kind, body)
	if err == nil {
		return nil
	}
	var uk *dispatch.UnknownKindError
	var uh *dispatch.UnhandledKindError
	switch {
	case errors.Is(err, wire.ErrMalformed):
		p.srv.metrics.malformed.Add(1)
		return errMalformed
	case errors.As(err, &uk), errors.As(err, &uh):
		p.srv.metrics.malformed.Add(1)
		return errUnknownKind
	}
	return err
}

// errUnknownKind closes a connection on which a packet of a kind this end
// does not take arrived (PROTOCOL.md §3).
var errUnknownKind = &CloseError{Code: wsframe.ClosePolicyViolation, Reason: "HP_ERR_UNKNOWN_KIND"}

// decode parses the body of a packet of kind k.
func decode(k dispatch.Kind, body []byte) (wire.Packet, error) {
	return wire.DecodeBody(k, body)
}

func (p *Peer) onCall(body []byte) error {
	pk, err := decode(dispatch.KindCall, body)
	if err != nil {
		return err
	}
	s := p.srv
	if s.shutting.Load() {
		p.answerError(pk.ID, ErrUnavailable, true)
		return nil
	}
	i, ok := s.router.methodTable.Index(pk.Name) // a miss allocates nothing
	if !ok {
		s.metrics.unknownMethods.Add(1)
		p.answerError(pk.ID, &Error{Code: wire.CodeNotFound, Message: "method not found: " + string(pk.Name)}, true)
		return nil
	}
	m := s.router.methodTable.Route(i).Handler
	if !m.async {
		p.runCall(m, pk.ID, pk.Timeout, pk.Payload, true)
		return nil
	}
	if int(p.inflight.Add(1)) > s.opts.Limits.MaxInFlight {
		p.inflight.Add(-1)
		s.metrics.overloaded.Add(1)
		p.answerError(pk.ID, ErrOverloaded, true)
		return nil
	}
	if !s.admitAsync() {
		p.inflight.Add(-1)
		p.answerError(pk.ID, ErrUnavailable, true)
		return nil
	}
	payload := append([]byte(nil), pk.Payload...) // the read buffer is reused
	// The closure takes the id and timeout, not pk: a captured packet
	// would go to the heap on every call.
	id, timeout := pk.ID, pk.Timeout
	go func() {
		defer s.asyncCalls.done()
		defer p.inflight.Add(-1)
		p.runCall(m, id, timeout, payload, false)
	}()
	return nil
}

// runCall runs one handler and answers. inTurn is true on the read loop,
// where the answer may join a batch and leaves with the turn's writev.
func (p *Peer) runCall(m *method, id, timeoutMS uint32, payload []byte, inTurn bool) {
	ctx := p.ctx
	if inTurn {
		ctx = p.loopContext()
		p.inLoopHandler.Store(true)
		defer p.inLoopHandler.Store(false)
	}
	var cs *callState
	if timeoutMS > 0 {
		cs = p.newCallState(ctx, id, timeoutMS)
		ctx = cs.ctx
		defer cs.finish()
	}
	bp := scratchBufs.Get().(*[]byte)
	defer scratchBufs.Put(bp)
	b := wire.AppendResult(beginFrame(*bp), id, nil)
	b, err := p.invoke(ctx, m, payload, b)
	*bp = b[:0]
	if id == 0 || (cs != nil && !cs.answered.CompareAndSwap(false, true)) {
		return // a notification, or the timeout answered already
	}
	if err != nil {
		p.answerError(id, err, inTurn)
		return
	}
	if n := len(b) - frameHeadroom; p.overClientLimit(n) {
		// Sent, the result would make the client close the connection
		// (1009) and fail every call it has in flight; the carrier would
		// not carry it at all.
		limit, whose := p.sendLimit()
		p.answerError(id, &Error{Code: wire.CodeInternal, Message: fmt.Sprintf("a result of %d bytes, over %s message limit of %d", n, whose, limit)}, inTurn)
		return
	}
	p.sendAnswer(b, inTurn)
}

// overClientLimit reports whether a packet of n bytes is over what the
// client takes (sendLimit).
func (p *Peer) overClientLimit(n int) bool {
	limit, _ := p.sendLimit()
	return limit > 0 && int64(n) > limit
}

// sendLimit is the largest packet the client takes, 0 for any, and whose
// limit it is: the message limit the client announced in its capabilities
// (maxMessage, PROTOCOL.md §4.9; a client that announced none takes any
// size) or, when lower, the carrier's (256 KiB on a WebRTC data channel),
// which would not carry a larger packet at all.
func (p *Peer) sendLimit() (limit int64, whose string) {
	limit, whose = p.clientMaxMessage.Load(), "the client's"
	if m := int64(p.link.maxPacket()); m > 0 && (limit <= 0 || m < limit) {
		limit, whose = m, "the carrier's"
	}
	return limit, whose
}

// invoke calls the handler and turns a panic into ErrInternal; the
// connection lives on.
func (p *Peer) invoke(ctx context.Context, m *method, payload, dst []byte) (out []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			p.srv.metrics.panics.Add(1)
			p.srv.opts.Logger.Error("hotpath: handler panicked", "method", m.name, "peer", p.id, "panic", r, "stack", string(debug.Stack()))
			out, err = dst, ErrInternal
		}
	}()
	return m.call(ctx, p.codec, payload, dst)
}

// handlerError is the *Error a handler's err is answered with: an *Error
// with its code (withCode), a ctx's end as Timeout or Canceled, anything
// else as ErrInternal after logging it.
func (p *Peer) handlerError(err error) *Error {
	var e *Error
	switch {
	case errors.As(err, &e):
	case errors.Is(err, context.DeadlineExceeded):
		e = ErrTimeout
	case errors.Is(err, context.Canceled):
		e = ErrCanceled
	default:
		p.srv.opts.Logger.Warn("hotpath: handler failed", "peer", p.id, "err", err)
		e = ErrInternal
	}
	return withCode(e)
}

// answerError answers call id with err: an *Error as it is, anything else
// as ErrInternal after logging it.
func (p *Peer) answerError(id uint32, err error, inTurn bool) {
	if id == 0 {
		return
	}
	e := p.handlerError(err)
	bp := scratchBufs.Get().(*[]byte)
	defer scratchBufs.Put(bp)
	b := wire.AppendError(beginFrame(*bp), id, e.Code, wireMessage(e.Message), e.Data)
	if n := len(b) - frameHeadroom; p.overClientLimit(n) {
		// As a result over the limit is (runCall): the client would close
		// the connection (1009) on it, failing every call in flight.
		limit, whose := p.sendLimit()
		b = wire.AppendError(b[:frameHeadroom], id, wire.CodeInternal, fmt.Sprintf("an error of %d bytes, over %s message limit of %d", n, whose, limit), nil)
	}
	*bp = b[:0]
	p.sendAnswer(b, inTurn)
}

// sendAnswer sends an answer packet built after frame headroom. Inside a
// batch it joins the batch's answers instead. An answer is never dropped.
// One the outbox has no room for waits, up to closeTimeout, for room
// (link.awaitRoom): a turn's answers are queued until it ends, so a client
// that reads all along had many large answers to one read dropped, and
// was disconnected with them (a liveness audit: 32 calls answered with
// 256 KiB each). Meanwhile the peer's outbox takes no events, asks or
// room emits (see send). A peer that makes no room in that time is
// disconnected.
func (p *Peer) sendAnswer(b []byte, inTurn bool) {
	if inTurn && p.batching {
		p.batchItems = wire.AppendItem(p.batchItems, b[frameHeadroom:])
		p.batchCount++
		return
	}
	if p.send(b, true, inTurn) == corkwriter.Dropped {
		p.dropSlow()
	}
}

// sendPacket sends a packet built after frame headroom, compressed with
// the negotiated dictionary when that pays.
func (p *Peer) sendPacket(b []byte) corkwriter.Status { return p.send(b, false, false) }

// send is sendPacket; for an answer, a packet the outbox has no room for
// is sent again once there is room (sendAnswer), until closeTimeout.
//
// While an answer waits, other packets are refused as if the outbox were
// full: otherwise a server sending events faster than the peer reads
// takes every bit of room the peer makes, and the answer waits until the
// peer is disconnected (a liveness audit: a flood of Peer.Event beside
// 200 KiB answers dropped the client on QUIC, WebTransport, SCTP and
// WebRTC). Events can be dropped; an answer cannot.
func (p *Peer) send(b []byte, answer, inTurn bool) corkwriter.Status {
	if !answer && p.answersWaiting.Load() > 0 {
		return corkwriter.Dropped
	}
	n, compressed := len(b)-frameHeadroom, false
	if d := p.dict.Load(); d != nil {
		if cb, release, ok := d.compressPacket(b[frameHeadroom:]); ok {
			defer release()
			b, compressed = cb, true
		}
	}
	st := p.link.sendBuilt(b)
	if st != corkwriter.Dropped || !answer {
		p.countSent(st, n, compressed)
		return st
	}
	// Others may take the room first (other answers; room emits under
	// SlowConsumer Disconnect): try again each time there is room, until
	// closeTimeout.
	p.answersWaiting.Add(1)
	defer p.answersWaiting.Add(-1)
	for deadline := time.Now().Add(closeTimeout); st == corkwriter.Dropped && p.link.awaitRoom(b, inTurn, deadline); {
		st = p.link.sendBuilt(b)
	}
	p.countSent(st, n, compressed)
	return st
}

// countSent counts a packet of n bytes (before dictionary compression)
// that the link sent or queued; one it refused (the outbox full or
// closed: ErrOverloaded, ErrClosed for an event) was not sent, as room
// emits count only the members reached.
func (p *Peer) countSent(st corkwriter.Status, n int, compressed bool) {
	if st != corkwriter.Sent && st != corkwriter.Queued {
		return
	}
	p.srv.metrics.messagesOut.Add(1)
	p.srv.metrics.bytesOut.Add(uint64(n))
	if compressed {
		p.srv.metrics.dictCompressed.Add(1)
	}
}

func (p *Peer) onBatch(body []byte) error {
	pk, err := decode(dispatch.KindBatch, body)
	if err != nil {
		return err
	}
	if int(pk.Count) > p.srv.opts.Limits.MaxBatch {
		return &CloseError{Code: wsframe.CloseMessageTooBig, Reason: "HP_ERR_BATCH_TOO_LARGE"}
	}
	bp := scratchBufs.Get().(*[]byte)
	defer scratchBufs.Put(bp)
	p.batching, p.batchItems, p.batchCount = true, (*bp)[:0], 0
	for item := range pk.Items() {
		if err = p.dispatchPacket(dispatch.Kind(item[0]), item[1:]); err != nil {
			break
		}
	}
	p.batching = false
	*bp = p.batchItems[:0]
	if err != nil || p.batchCount == 0 {
		return err
	}
	// The answers leave in Batch packets within batchLimit, a large
	// answer alone (PROTOCOL.md §4.7).
	out := scratchBufs.Get().(*[]byte)
	defer scratchBufs.Put(out)
	limit := batchLimit(p.link.maxPacket())
	if m := p.clientMaxMessage.Load(); m > 0 && m < int64(limit) {
		limit = int(m) // the client's announced limit (PROTOCOL.md §4.9)
	}
	for items := p.batchItems; len(items) > 0; {
		end, count := nextBatch(items, limit, ^uint32(0))
		b := beginFrame(*out)
		if count == 1 {
			_, hl := binary.Uvarint(items)
			b = append(b, items[hl:end]...)
		} else {
			b = wire.Append(b, &wire.Packet{Kind: dispatch.KindBatch, Count: count, Payload: items[:end]})
		}
		*out = b[:0]
		if p.send(b, true, true) == corkwriter.Dropped {
			p.dropSlow()
			return nil
		}
		items = items[end:]
	}
	return nil
}

// onEvent handles an event packet on the read loop.
func (p *Peer) onEvent(body []byte) error { return p.handleEvent(body, true) }

// handleEvent runs the handler of an event packet: on the read loop, or
// (onLoop false) on the goroutine of a carrier's datagrams.
func (p *Peer) handleEvent(body []byte, onLoop bool) error {
	pk, err := decode(dispatch.KindEvent, body)
	if err != nil {
		return err
	}
	i, ok := p.srv.router.eventTable.Index(pk.Name)
	if !ok {
		p.srv.metrics.droppedEvents.Add(1)
		return nil
	}
	if err := p.invokeEvent(p.srv.router.eventTable.Route(i).Handler, pk.Payload, onLoop); err != nil {
		p.srv.metrics.droppedEvents.Add(1)
	}
	return nil
}

// invokeEvent calls an event handler and turns a panic into a log line
// and a dropped event, as invoke does for methods: a client whose event
// makes a handler panic must not bring the server down.
func (p *Peer) invokeEvent(e *eventHandler, payload []byte, onLoop bool) (err error) {
	defer func() {
		if r := recover(); r != nil {
			p.srv.metrics.panics.Add(1)
			p.srv.opts.Logger.Error("hotpath: event handler panicked", "event", e.name, "peer", p.id, "panic", r, "stack", string(debug.Stack()))
			err = ErrInternal
		}
	}()
	if !onLoop {
		return e.call(p.ctx, p.codec, payload)
	}
	p.inLoopHandler.Store(true)
	defer p.inLoopHandler.Store(false)
	return e.call(p.loopContext(), p.codec, payload)
}

// loopKey marks the contexts of handlers that run on a connection's read
// loop: its value is the *Peer.
type loopKey struct{}

// loopContext returns the context of the handlers that run on the read
// loop, made at the first one: connections that only call Async methods,
// or none, never pay for it. Only the read loop calls it.
func (p *Peer) loopContext() context.Context {
	if p.loopCtx == nil {
		p.loopCtx = context.WithValue(p.ctx, loopKey{}, p)
	}
	return p.loopCtx
}

// onReadLoop reports whether ctx is that of a handler running on p's read
// loop now: an Ask made with it would wait for an answer that only the
// loop it holds can read.
func (p *Peer) onReadLoop(ctx context.Context) bool {
	q, _ := ctx.Value(loopKey{}).(*Peer)
	return q == p && p.inLoopHandler.Load()
}

// onPing answers a Ping with a Pong of the same data (PROTOCOL.md §4.8),
// as long as the Ping. A Ping whose Pong the client could not take closes
// the connection with 1009: sent, the Pong broke the server's §4.9
// promise, and the client closed with 1009 for it; dropped, a client
// waiting for it would wait out its idle timeout instead of hearing why.
// The client's announced maxMessage (§4.9) bounds the Pong inflated, the
// carrier's limit (256 KiB on WebRTC) the Pong as it travels, compressed
// when the dictionary shrinks it, as the client's Ping came: checked
// against the plain Pong, a compressed Ping that inflated past 256 KiB
// closed a connection whose Pong fitted, and the Go client's check of a
// server's Ping counts so (answerPing).
func (p *Peer) onPing(body []byte) error {
	if limit := p.clientMaxMessage.Load(); limit > 0 && int64(1+len(body)) > limit {
		return errMessageTooBig
	}
	bp := scratchBufs.Get().(*[]byte)
	defer scratchBufs.Put(bp)
	b := wire.Append(beginFrame(*bp), &wire.Packet{Kind: dispatch.KindPong, Payload: body})
	*bp = b[:0]
	if limit := p.link.maxPacket(); limit > 0 && len(b)-frameHeadroom > limit && !p.fitsCompressed(b, limit) {
		return errMessageTooBig
	}
	p.sendPacket(b)
	return nil
}

// fitsCompressed reports whether packet b, built after frame headroom,
// is within limit bytes once compressed with the dictionary (false with
// none, or when it does not shrink). Only a Pong over the carrier's limit
// asks, so it is compressed twice only then.
func (p *Peer) fitsCompressed(b []byte, limit int) bool {
	d := p.dict.Load()
	if d == nil {
		return false
	}
	cb, release, ok := d.compressPacket(b[frameHeadroom:])
	if !ok {
		return false
	}
	defer release()
	return len(cb)-frameHeadroom <= limit
}

func (p *Peer) onPong([]byte) error { return nil }

// Event sends the event name with payload v to the client (PROTOCOL.md
// §4.3). It returns ErrClosed when the connection is closed,
// ErrOverloaded when its outbound queue is full, and ErrBadRequest for a
// name the protocol cannot carry or one starting with $ (its own events).
func (p *Peer) Event(name string, v any) error {
	if err := checkName("event", name); err != nil {
		return err
	}
	bp := scratchBufs.Get().(*[]byte)
	defer scratchBufs.Put(bp)
	b := wire.Append(beginFrame(*bp), &wire.Packet{Kind: dispatch.KindEvent, Name: []byte(name)})
	b, err := marshal(p.codec, b, v)
	*bp = b[:0]
	if err != nil {
		return err
	}
	if n := len(b) - frameHeadroom; p.overClientLimit(n) {
		limit, whose := p.sendLimit()
		return fmt.Errorf("%w: an event of %d bytes, over %s limit of %d", ErrMessageTooBig, n, whose, limit)
	}
	return statusError(p.sendPacket(b))
}

func statusError(st corkwriter.Status) error {
	switch st {
	case corkwriter.Closed:
		return ErrClosed
	case corkwriter.Dropped:
		return errOutboxFull
	}
	return nil
}

// errOutboxFull is ErrOverloaded (errors.Is matches its code) for a packet
// the connection's outbound queue had no room for, which ErrOverloaded's
// "too many calls in flight" would misname.
var errOutboxFull = &Error{Code: wire.CodeOverloaded, Message: "outbound queue full (Limits.MaxOutboxBytes): the peer is not reading fast enough"}

// callState is a call with a timeout: its context, canceled by the
// server's timeout scheduler, and the flag that lets exactly one of the
// handler and the timeout answer.
type callState struct {
	peer     *Peer
	id       uint32
	ctx      context.Context
	cancel   context.CancelCauseFunc
	handle   scheduler.Handle
	answered atomic.Bool
}

// timeoutTarget is what the timeout scheduler fires: a call or an ask.
type timeoutTarget interface{ timeout() }

func fireTimeouts(batch []timeoutTarget) {
	for _, t := range batch {
		t.timeout()
	}
}

func (p *Peer) newCallState(parent context.Context, id, timeoutMS uint32) *callState {
	deadline := time.Now().Add(time.Duration(timeoutMS) * time.Millisecond)
	ctx, cancel := context.WithCancelCause(parent)
	cs := &callState{peer: p, id: id, ctx: deadlineContext{ctx, deadline}, cancel: cancel}
	cs.handle = p.srv.timeouts.Arm(deadline, cs)
	return cs
}

// timeout runs on the server's one timeout goroutine, which must not wait
// for any connection: the answer is written on a goroutine of its own, as
// on QUIC, WebTransport and SCTP a write waits for a peer that does not
// read (TestCallTimeoutOnStalledPeer).
func (cs *callState) timeout() {
	cs.cancel(context.DeadlineExceeded)
	if cs.id != 0 && cs.answered.CompareAndSwap(false, true) {
		go cs.peer.answerError(cs.id, ErrTimeout, false)
	}
}

func (cs *callState) finish() {
	cs.peer.srv.timeouts.Cancel(cs.handle)
	cs.cancel(context.Canceled)
}

// deadlineContext reports the call's deadline, which the scheduler, not a
// runtime timer of its own, enforces.
type deadlineContext struct {
	context.Context
	deadline time.Time
}

func (c deadlineContext) Deadline() (time.Time, bool) { return c.deadline, true }

// Err reports context.DeadlineExceeded once the timeout canceled the call,
// as a context.WithDeadline would.
func (c deadlineContext) Err() error {
	err := c.Context.Err()
	if err != nil && errors.Is(context.Cause(c.Context), context.DeadlineExceeded) {
		return context.DeadlineExceeded
	}
	return err
}
