package compat

// What a Client connection reads: the server's packets, dispatched by
// kind, and the answers to the server's asks.

import (
	"bytes"
	"context"
	"errors"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/corkwriter"
	"github.com/hotpath-go/hotpath/dictionary"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/wsframe"
)

// handleMessage is the entry of every packet the server sends.
func (cc *clientConn) handleMessage(op wsframe.Opcode, payload []byte) error {
	if op != wsframe.OpBinary {
		return &CloseError{Code: wsframe.CloseUnsupportedData, Reason: "HP_ERR_TEXT_MESSAGE"}
	}
	// An unknown kind, or one only a client sends (PROTOCOL.md §3: 1008),
	// is read from the head byte before anything else, as the server
	// reads it: decoded or inflated first, such a packet whose body did
	// not inflate closed with 1007 here and 1008 there.
	if len(payload) > 0 && !wire.ToClient(dispatch.Kind(payload[0]&^wire.CompressedBit)) {
		return errUnknownKind
	}
	p, err := wire.Decode(payload)
	if err != nil {
		return errMalformed
	}
	if p.Compressed {
		cc.awaitInflate()
		release, err := cc.inflate(&p)
		if err != nil {
			return err
		}
		defer release()
	}
	return cc.handlePacket(&p, true)
}

// inflate replaces a compressed packet by the one its body holds
// (PROTOCOL.md §6), charged to the connection's inflate budget; release
// gives back the buffer p then points into.
func (cc *clientConn) inflate(p *wire.Packet) (release func(), err error) {
	d := cc.dict.Load()
	if d == nil {
		return nil, &CloseError{Code: wsframe.ClosePolicyViolation, Reason: "HP_ERR_UNNEGOTIATED_COMPRESSION"}
	}
	body, release, err := d.decompress(p.Body)
	if err != nil {
		return nil, err
	}
	cc.inflated(len(body))
	if *p, err = wire.DecodeBody(p.Kind, body); err != nil {
		release()
		return nil, errMalformed
	}
	return release, nil
}

// inflateBudget returns the connection's inflate budget
// (Limits.MaxInflateRate), made at its first compressed packet; nil when
// the limit is off.
func (cc *clientConn) inflateBudget() *inflateBudget {
	return loadInflateBudget(&cc.inflateRate, &cc.c.opts.Limits)
}

// awaitInflate is called by the connection's reader before it inflates
// a packet (inflateMeter): while the budget is spent it pauses the
// reading until the budget is back (paceInflate), as a server does with
// its clients, so that a server sending bombs (packets of zeros that
// inflate 1000 times over) cannot keep a core of the client's inflating.
// The reader may be the read loop or a caller reading for its own
// answer (sharedread.go): see pauseOver.
func (cc *clientConn) awaitInflate() { paceInflate(cc.inflateBudget(), cc, cc.link) }

// inflated charges the n bytes a packet inflated to (inflateMeter).
func (cc *clientConn) inflated(n int) {
	if b := cc.inflateBudget(); b != nil {
		b.charge(n, monoNow())
	}
}

// pauseOver reports whether the reader should not pause for the inflate
// budget, or pause no longer (inflatePacer): the client closes or gives
// up the connection (endPauses), or the reader is a caller whose call is
// settled. Such a caller goes back to its program rather than wait out a
// pause for the others: by its answer read in this turn, it returns
// before the pause would have ended; by its ctx or its deadline
// (wakeReader), it returns at once. The rest of its turn is inflated
// without a pause, and the deficit is the read loop's to wait out:
// callers leave the reading to the loop while the budget is spent
// (takeReads), so that caller after caller could not each skip a turn's
// pauses.
func (cc *clientConn) pauseOver() bool {
	if cc.noPauses.Load() {
		return true
	}
	if s := cc.shared; s != nil {
		if done := s.readingFor; done != nil {
			return done.Load()
		}
	}
	return false
}

// endPauses ends the reader's inflate pause, if any, and those it would
// begin later: the client closes the connection, or gives it up.
func (cc *clientConn) endPauses() {
	cc.noPauses.Store(true)
	if b := cc.inflateRate.Load(); b != nil {
		b.wakePause()
	}
}

// handleDatagram handles a packet that arrived as a datagram, on the
// carrier's goroutine: an Emit or an Event, compressed or not
// (PROTOCOL.md §8.4); any other kind closes the connection with 1008, as
// on the server. One that arrives once Close has begun is dropped, and
// Close waits for one begun before (beginDatagram); so is a compressed
// one past Limits.MaxInflateRate.
func (cc *clientConn) handleDatagram(pkt []byte) error {
	if !cc.c.beginDatagram() {
		return nil
	}
	defer cc.c.endDatagram()
	if hook := testHookDatagramBegun.Load(); hook != nil {
		(*hook)()
	}
	if len(pkt) == 0 {
		return errMalformed
	}
	if k := dispatch.Kind(pkt[0] &^ wire.CompressedBit); k != dispatch.KindEmit && k != dispatch.KindEvent {
		return errDatagramKind
	}
	p, err := wire.Decode(pkt)
	if err != nil {
		return errMalformed
	}
	if p.Compressed {
		// Off the read loop, a datagram cannot pause the reading: one
		// that finds the inflate budget spent is dropped uninflated, as
		// the server drops a client's.
		if b := cc.inflateBudget(); b != nil && b.empty(monoNow()) {
			cc.c.metrics.inflateThrottled.Add(1)
			cc.c.metrics.droppedDatagrams.Add(1)
			return nil
		}
		release, err := cc.inflate(&p)
		if err != nil {
			return err
		}
		defer release()
	}
	return cc.handlePacket(&p, false)
}

// handlePacket handles a packet, and the items of a Batch one by one; a
// Batch is malformed inside another or outside the packets of a message
// (top).
func (cc *clientConn) handlePacket(p *wire.Packet, top bool) error {
	if p.Kind != dispatch.KindBatch {
		return cc.handleOne(p)
	}
	if !top {
		return errMalformed
	}
	for item := range p.Items() {
		// An item's kind is read before its body, as the server reads it
		// (PROTOCOL.md §3): an unknown kind, or one only a client sends,
		// is HP_ERR_UNKNOWN_KIND whatever follows it. Items() yields no
		// empty, compressed, batch or capabilities item.
		if !wire.ToClient(dispatch.Kind(item[0])) {
			return errUnknownKind
		}
		ip, err := wire.Decode(item)
		if err != nil || ip.Kind == dispatch.KindBatch {
			return errMalformed
		}
		// handleOne does not call back here, so ip stays on the stack: a
		// recursive call moved it to the heap, an allocation per answer.
		if err := cc.handleOne(&ip); err != nil {
			return err
		}
	}
	return nil
}

// handleOne handles a packet other than a Batch.
func (cc *clientConn) handleOne(p *wire.Packet) error {
	c := cc.c
	switch p.Kind {
	case dispatch.KindResult, dispatch.KindError:
		c.mu.Lock()
		pc := c.pending.remove(p.ID)
		if pc != nil && c.pending.len() == 0 && cc.shared != nil {
			cc.shared.handing.Store(true)
		}
		c.mu.Unlock()
		if pc == nil {
			return nil // answered after its timeout
		}
		if p.Kind == dispatch.KindResult {
			c.settle(pc, p.Payload, nil, false)
		} else {
			c.settle(pc, nil, &Error{Code: p.Code, Message: string(p.Message), Data: append([]byte(nil), p.Payload...)}, false)
		}
	case dispatch.KindEvent:
		event := string(p.Name)
		c.deliver(listenerKey{event: event}, Message{Event: event, Data: p.Payload, codec: c.opts.Codec})
	case dispatch.KindEmit:
		room, event := string(p.Room), string(p.Name)
		c.deliver(listenerKey{room, event}, Message{Room: room, Event: event, Data: p.Payload, codec: c.opts.Codec})
	case dispatch.KindAsk:
		cc.answerAsk(p.ID, string(p.Name), append([]byte(nil), p.Payload...), p.Timeout)
	case dispatch.KindPing:
		return cc.answerPing(p.Payload)
	case dispatch.KindPong:
	case dispatch.KindCapabilities:
		// PROTOCOL.md §4.9: a server sends its Capabilities once per
		// connection, as a client does. A repeat could switch the
		// dictionary codec under packets compressed with the first (and
		// have a codec built per packet: a zstd codec's first compression
		// allocates 2 MiB), or change the limits that queued packets were
		// checked against; the server closes on a client's repeat alike.
		if cc.isReady() {
			return errRepeatedCapabilities
		}
		if bytes.Equal(p.Payload, cc.sentCapabilities) {
			return errEchoServer
		}
		for k, v := range p.Pairs() {
			switch string(k) {
			case "dict":
				if c.opts.Dictionary != nil {
					cc.chooseDictionary(string(v))
				}
			case "codec":
				if string(v) != c.opts.Codec.Name() {
					return errUnsupportedCodec
				}
			case "maxBatch":
				if n, err := strconv.ParseUint(string(v), 10, 32); err == nil && n > 0 {
					cc.serverMaxBatch.Store(uint32(n))
				}
			case "maxMessage":
				if n, err := strconv.ParseInt(string(v), 10, 64); err == nil && n > 0 {
					cc.serverMaxMessage.Store(n)
				}
			case "maxEmit":
				if n, err := strconv.ParseInt(string(v), 10, 64); err == nil && n > 0 {
					cc.serverMaxEmit.Store(n)
				}
			}
		}
		// Ready once the limits are stored: senders waiting for them
		// (awaitReady) go on, and Dial returns. A reconnected connection
		// sends its rejoins first, so that what they send goes after.
		cc.readyOnce.Do(func() {
			cc.rejoins = c.sendRejoins(cc)
			cc.readyAt.Store(time.Now().UnixNano())
			close(cc.ready)
		})
	default:
		return errUnknownKind
	}
	return nil
}

// errEchoServer ends a connection whose server sent the client's own
// capabilities back: a server in echo mode (Options.Echo, hotpath -echo),
// which would echo every call too and answer none.
var errEchoServer = &CloseError{Code: wsframe.ClosePolicyViolation, Reason: "HP_ERR_ECHO_SERVER"}

// answerPing answers a server's Ping with a Pong of the same data
// (PROTOCOL.md §4.8), unless the server would refuse the Pong: then this
// end closes with 1009, as the server does on a client's such Ping. The
// server refuses a Pong whose packet, inflated, is over its maxMessage;
// the carrier cannot carry one whose message, as it travels (compressed
// when the dictionary shrinks it), is over its limit (256 KiB on WebRTC).
// Both were checked against the plain Pong, which closed the connection
// on a compressed Ping that inflated past 256 KiB on WebRTC, whose Pong
// the server takes compressed. Before the server's capabilities, only the
// carrier's limit is known, and nothing is compressed.
func (cc *clientConn) answerPing(data []byte) error {
	bp := scratchBufs.Get().(*[]byte)
	defer scratchBufs.Put(bp)
	b := wire.Append(beginFrame(*bp), &wire.Packet{Kind: dispatch.KindPong, Payload: data})
	*bp = b[:0]
	if limit := cc.serverMaxMessage.Load(); limit > 0 && int64(len(b)-frameHeadroom) > limit {
		return errMessageTooBig
	}
	if d := cc.dict.Load(); d != nil {
		if cb, release, ok := d.compressPacket(b[frameHeadroom:]); ok {
			defer release()
			b = cb
		}
	}
	if limit := cc.link.maxPacket(); limit > 0 && len(b)-frameHeadroom > limit {
		return errMessageTooBig
	}
	cc.link.sendBuilt(b)
	return nil
}

// chooseDictionary installs the dictionary codec the server chose.
func (cc *clientConn) chooseDictionary(choice string) {
	d := cc.c.opts.Dictionary
	codecName, id, _ := strings.Cut(choice, ":")
	if id != d.ID() {
		return
	}
	opts := dictionary.CodecOptions{MaxDecoded: maxDecodedBody(cc.c.opts.Limits.MaxMessageSize)}
	switch codecName {
	case "deflate":
		cc.dict.Store(&dictCodec{name: choice, codec: dictionary.NewDeflate(d, opts)})
	case "zstd":
		if z, err := dictionary.NewZstd(d, opts); err == nil {
			cc.dict.Store(&dictCodec{name: choice, codec: z})
		}
	}
}

// invokeAskHandler calls the handler of a server's ask and turns a panic
// into an Internal answer and a log line, as the server does with its
// handlers: the process and the connection live on.
func (c *Client) invokeAskHandler(ctx context.Context, m *method, payload []byte) (result []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			c.opts.Logger.Error("hotpath: ask handler panicked", "method", m.name, "panic", r, "stack", string(debug.Stack()))
			result, err = nil, ErrInternal
		}
	}()
	return m.call(ctx, c.opts.Codec, payload, nil)
}

// answerAsk runs the handler of a server ask on a goroutine of its own
// and sends the Answer; an ask beyond Limits.MaxInFlight running at once
// is answered ErrOverloaded at once, as the server answers such calls
// (counted in ClientMetrics.OverloadedAsks). Handlers still running from
// an earlier connection count. An answer the full outbox refused is
// counted in ClientMetrics.DroppedAnswers.
func (cc *clientConn) answerAsk(id uint32, method string, payload []byte, timeoutMS uint32) {
	c := cc.c
	if int(c.asksRunning.Add(1)) > c.opts.Limits.MaxInFlight {
		c.asksRunning.Add(-1)
		c.metrics.overloadedAsks.Add(1)
		e := ErrOverloaded
		// Sent by the read loop itself, which enqueue's wait for the
		// capabilities (awaitReady) would block, and which must not wait
		// for room either: refused, the answer is dropped.
		if err := cc.sendRaw(wire.Append(nil, &wire.Packet{Kind: dispatch.KindAnswer, ID: id, Status: wire.AnswerError, Code: e.Code, Message: []byte(e.Message)})); errors.Is(err, ErrOverloaded) {
			c.metrics.droppedAnswers.Add(1)
		}
		return
	}
	go func() {
		defer c.asksRunning.Add(-1)
		ctx := cc.asksCtx
		if timeoutMS > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, time.Duration(timeoutMS)*time.Millisecond)
			defer cancel()
		}
		var result []byte
		var err error = &Error{Code: wire.CodeNotFound, Message: "method not found: " + method}
		if h := c.opts.Handlers; h != nil {
			if m, lerr := h.methodTable.Lookup([]byte(method)); lerr == nil {
				result, err = c.invokeAskHandler(ctx, m, payload)
			}
		}
		a := wire.Packet{Kind: dispatch.KindAnswer, ID: id, Status: wire.AnswerOK, Payload: result}
		if err != nil {
			e := askError(err)
			a = wire.Packet{Kind: dispatch.KindAnswer, ID: id, Status: wire.AnswerError, Code: e.Code, Message: []byte(wireMessage(e.Message)), Payload: e.Data}
		}
		err = cc.sendAnswer(&a)
		if errors.Is(err, ErrMessageTooBig) {
			// The server still gets an answer, and the asker a reason.
			a = wire.Packet{Kind: dispatch.KindAnswer, ID: id, Status: wire.AnswerError, Code: wire.CodeInternal, Message: []byte("answer over the message limit")}
			err = cc.sendAnswer(&a)
		}
		if errors.Is(err, ErrOverloaded) {
			c.metrics.droppedAnswers.Add(1)
			c.opts.Logger.Warn("hotpath: the answer to an ask was dropped: the outbound queue stayed full", "method", method)
		}
	}()
}

// sendAnswer sends the answer to a server's ask on its own, not through
// the calls' queue: a batch the outbox refuses fails its calls, and an
// answer lost with it left the server's Ask waiting for its timeout (a
// liveness audit: 8 asks of 256 KiB while 32 callers filled the outbox).
// One the outbox has no room for waits, up to closeTimeout, for the queue
// to drain, as the server's answers do; one still refused then is dropped
// (ErrOverloaded, counted in ClientMetrics.DroppedAnswers by answerAsk).
// It is built afresh for each try: a WebSocket client masks a packet in
// place.
func (cc *clientConn) sendAnswer(a *wire.Packet) error {
	if err := cc.awaitReady(); err != nil {
		return err
	}
	deadline := time.Now().Add(closeTimeout)
	for {
		b := wire.Append(beginFrame(nil), a)
		if err := cc.checkSize(len(b) - frameHeadroom); err != nil {
			return err
		}
		st := cc.sendPacket(b)
		if st != corkwriter.Dropped || !cc.link.awaitRoom(b, false, deadline) {
			return cc.sendError(st)
		}
	}
}

// askError is the *Error an ask handler's error is answered with, as the
// server answers a handler's (Peer.answerError): its own *Error (Internal
// if it has no code); Timeout
// or Canceled for its context's end, which a handler that respects its
// ctx returns when the ask's timeout passes; Internal for anything else.
func askError(err error) *Error {
	var e *Error
	switch {
	case errors.As(err, &e):
		return withCode(e)
	case errors.Is(err, context.DeadlineExceeded):
		return ErrTimeout
	case errors.Is(err, context.Canceled):
		return ErrCanceled
	}
	return ErrInternal
}
