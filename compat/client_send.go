package compat

// What a Client connection sends: the queue of packets awaiting the
// server's capabilities or a write in progress, batches, size limits.

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"time"

	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/corkwriter"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/wsframe"
)

// refusedError is the error of an Emit, Event or EmitUnreliable that cc
// refused because it is ending (sendError's bare ErrDisconnected): why it
// ends, as a call refused so gets (settleRefused). Until the read loop has
// ended and recorded why, which takes a round trip or more (the closing
// handshake, the wait for the carrier's close), these returned a bare
// ErrDisconnected, whose CloseStatus is 0. The closing handshake says why
// as soon as it begins, without waiting for the loop, which a listener
// that emits may hold; a link dropped without one is waited for, as long
// as a closing handshake may take, unless a callback runs: it may be the
// read loop's own, which the loop waits for, and the wait would only run
// out (Close's rule, awaitDone). Without a handshake, the close is 1006.
func (cc *clientConn) refusedError(err error) error {
	if err != ErrDisconnected {
		return err
	}
	select {
	case <-cc.ended:
		return cc.c.endError(cc)
	default:
	}
	if ce := cc.link.closeCause(); ce != nil {
		return fmt.Errorf("%w: %w", ErrDisconnected, ce)
	}
	if cc.c.inCallbacks.Load() != 0 {
		return errDroppedWithoutClose
	}
	t := time.NewTimer(closeTimeout)
	defer t.Stop()
	select {
	case <-cc.ended:
		return cc.c.endError(cc)
	case <-t.C:
		return errDroppedWithoutClose
	}
}

// errDroppedWithoutClose is refusedError's when the link ended without a
// closing handshake and its read loop has not said more.
var errDroppedWithoutClose = fmt.Errorf("%w: %w", ErrDisconnected, &CloseError{Code: wsframe.CloseAbnormal, Reason: "the connection dropped"})

// enqueue sends one packet, built after frame headroom in b (see
// beginFrame); the caller owns b again on return. With batching, packets
// that arrive while a write is in progress are gathered and leave together
// as one Batch; the goroutine that finds no write in progress writes at
// once, its own packet straight from b when nobody queued behind it, so a
// lone call waits for nothing and is not copied.
func (cc *clientConn) enqueue(b []byte, yield bool) error {
	if err := cc.awaitReady(); err != nil {
		return err
	}
	if err := cc.checkSize(len(b) - frameHeadroom); err != nil {
		return err
	}
	if cc.c.opts.NoBatching {
		return cc.sendError(cc.sendPacket(b))
	}
	pkt := b[frameHeadroom:]
	cc.qmu.Lock()
	if cc.flushing {
		cc.queue = wire.AppendItem(cc.queue, pkt)
		cc.queued++
		cc.qmu.Unlock()
		return nil
	}
	cc.flushing = true
	cc.qmu.Unlock()
	// Callers are often woken together, by one read that settled their
	// previous calls; yielding once lets the others queue and leave in one
	// batch with this one. On QUIC, where a write is a copy into the
	// stream, 64 concurrent callers otherwise send a packet each; with the
	// yield about 20 calls share one (BenchmarkCarrierEcho/*/small-64).
	// A caller with no other call in flight has nobody to wait for, and
	// since callers read their own answers (sharedread.go) a yield would
	// only delay its packet and the read that follows it.
	// alone: this packet leaves first, straight from b, and what others
	// queued meanwhile follows it (flushQueue).
	alone := true
	ownEnd := 0
	if yield && cc.c.pending.size.Load() > 1 {
		runtime.Gosched()
		cc.qmu.Lock()
		if alone = cc.queued == 0; !alone {
			cc.queue = wire.AppendItem(cc.queue, pkt)
			cc.queued++
			ownEnd = len(cc.queue)
		}
		cc.qmu.Unlock()
	}
	if alone {
		err := cc.sendError(cc.sendPacket(b))
		cc.flushQueue(0)
		return err
	}
	return cc.flushQueue(ownEnd)
}

// hold makes the caller the flusher, as enqueue's first caller becomes
// one, if nobody is, and reports whether it did: packets enqueued
// meanwhile queue until the caller's flushQueue.
func (cc *clientConn) hold() bool {
	if cc.c.opts.NoBatching {
		return false
	}
	cc.qmu.Lock()
	defer cc.qmu.Unlock()
	if cc.flushing {
		return false
	}
	cc.flushing = true
	return true
}

// servedFor is how long cc served, from its server's capabilities to now:
// 0 if they never came.
func (cc *clientConn) servedFor() time.Duration {
	at := cc.readyAt.Load()
	if at == 0 {
		return 0
	}
	return time.Since(time.Unix(0, at))
}

// isReady reports whether the server's capabilities have arrived.
func (cc *clientConn) isReady() bool {
	select {
	case <-cc.ready:
		return true
	default:
		return false
	}
}

// awaitReady waits for the server's capabilities, which carry its message
// and batch limits: sent before them, a packet over a limit the client
// does not know yet would make the server close the connection (1009)
// instead of failing alone. Dial returns after them; a reconnected
// connection's first packets wait here, for about a round trip. It must
// not run on the read loop, which is what makes the connection ready.
func (cc *clientConn) awaitReady() error {
	if cc.isReady() {
		return nil
	}
	select {
	case <-cc.ready:
		return nil
	case <-cc.ended:
		// Why it ended, as a call's error says (Client.awaitReady): a bare
		// ErrDisconnected lost the close of a server that refused the
		// reconnect after its handshake (QUIC, SCTP: 1008).
		return cc.c.endError(cc)
	}
}

// sendError is the error of a packet the link did not take: ErrOverloaded
// when the outbox is full; when the link is closing, ErrClosed if the
// client's owner closed it, else ErrDisconnected (the server or the
// network ended the connection, and it may reconnect).
func (cc *clientConn) sendError(st corkwriter.Status) error {
	if st != corkwriter.Closed {
		return statusError(st)
	}
	cc.c.mu.Lock()
	closed := cc.c.closed
	cc.c.mu.Unlock()
	if closed {
		return ErrClosed
	}
	return ErrDisconnected
}

// packetLimit is the largest packet this connection may send: the least
// of the server's maxMessage and the carrier's message limit, 0 while
// neither is known.
func (cc *clientConn) packetLimit() int {
	limit := int64(cc.link.maxPacket())
	if m := cc.serverMaxMessage.Load(); m > 0 && (limit == 0 || m < limit) {
		limit = m
	}
	return int(min(limit, math.MaxInt32))
}

// checkSize refuses a packet of n bytes over packetLimit, which the server
// would answer by closing the connection (1009), or the carrier could not
// carry.
func (cc *clientConn) checkSize(n int) error {
	if limit := cc.packetLimit(); limit > 0 && n > limit {
		return fmt.Errorf("%w: a packet of %d bytes, over the limit of %d", ErrMessageTooBig, n, limit)
	}
	return nil
}

// checkEmitSize refuses a room emit whose payload, n bytes as the codec
// encoded it, is over the server's maxEmit: the server would drop it
// without a word (an emit has no answer), and Emit would have returned
// nil for an emit nobody receives. It waits for the server's
// capabilities first, which tell the limit, as enqueue waits.
func (cc *clientConn) checkEmitSize(n int) error {
	if err := cc.awaitReady(); err != nil {
		return err
	}
	if limit := cc.serverMaxEmit.Load(); limit > 0 && int64(n) > limit {
		return fmt.Errorf("%w: a room emit's payload of %d bytes, over the server's emit limit (maxEmit) of %d", ErrMessageTooBig, n, limit)
	}
	return nil
}

// flushQueue writes what is queued until the queue stays empty. A packet
// that cannot be sent (the outbox dropped it, the connection closed) may
// hold other callers' calls: they fail with the error at once instead of
// waiting for answers that will never come.
//
// With ownEnd > 0, the caller's own packet is an item of the first round
// that ends ownEnd bytes into it, and the error returned is that packet's:
// nil when it was sent, whatever became of the others. Not necessarily the
// last item: others may queue behind it before the round begins, and a
// packet of theirs that the outbox refused made the caller's call fail
// with ErrOverloaded although it had been sent (an async-call audit).
func (cc *clientConn) flushQueue(ownEnd int) error {
	var own error
	spare := cc.spare
	cc.spare = nil
	for round := 0; ; round++ {
		cc.qmu.Lock()
		items, n := cc.queue, cc.queued
		if n == 0 {
			cc.flushing = false
			if cap(cc.queue) == 0 {
				cc.queue = spare[:0]
			} else if cap(spare) <= maxSpareQueue {
				cc.spare = spare[:0]
			}
			cc.qmu.Unlock()
			return own
		}
		cc.queue, cc.queued = spare[:0], 0
		cc.qmu.Unlock()
		unsent, err := cc.sendItems(items, n)
		if err != nil {
			// Go on with what queued meanwhile: its callers wait on this
			// flusher, and fail too if the outbox is still full.
			cc.failCalls(unsent, err)
			// unsent runs to the end of items: what precedes it was sent.
			if round == 0 && ownEnd > len(items)-len(unsent) {
				own = err
			}
		}
		spare = items
	}
}

// maxSpareQueue bounds the spare queue buffer a client connection keeps
// between flushes. Without a spare, a flush that took more than one round
// grew a new buffer item by item: at 10 KiB with 64 callers, 9-13 KiB
// allocated per call (BenchmarkCall64x10KiB/batching;
// bench/results/compat-large-2026-12-03.txt). 64 calls of 10 KiB queue
// about 650 KiB, more than a smaller cap would keep.
const maxSpareQueue = 1 << 20

// sendItems sends n queued items: one alone, or several as Batch packets
// each within batchMaxBytes and the carrier's packet limit (a data
// channel's message size), a large item alone. On failure it returns the
// items that were not sent.
func (cc *clientConn) sendItems(items []byte, n uint32) (unsent []byte, err error) {
	if n == 1 {
		_, hl := binary.Uvarint(items) // one item: its length, then the packet
		if err := cc.sendRaw(items[hl:]); err != nil {
			return items, err
		}
		return nil, nil
	}
	limit := batchLimit(cc.packetLimit())
	for len(items) > 0 {
		end, count := nextBatch(items, limit, cc.maxBatch())
		var err error
		if count == 1 {
			_, hl := binary.Uvarint(items)
			err = cc.sendRaw(items[hl:end])
		} else {
			err = cc.sendBatch(items[:end], count)
		}
		if err != nil {
			return items, err
		}
		items = items[end:]
	}
	return nil, nil
}

// sendBatch sends count items as one Batch packet, built in a pooled
// frame buffer.
func (cc *clientConn) sendBatch(items []byte, count uint32) error {
	bp := scratchBufs.Get().(*[]byte)
	defer scratchBufs.Put(bp)
	b := wire.Append(beginFrame(*bp), &wire.Packet{Kind: dispatch.KindBatch, Count: count, Payload: items})
	*bp = b[:0]
	return cc.sendError(cc.sendPacket(b))
}

// maxBatch is the most items one Batch may carry to this server.
func (cc *clientConn) maxBatch() uint32 {
	if n := cc.serverMaxBatch.Load(); n > 0 {
		return n
	}
	return defaultMaxBatch
}

// failCalls fails the calls, joins and leaves among items, which were
// not sent, with err. Other packets (events, emits, answers) are lost as
// a packet sent alone would be.
func (cc *clientConn) failCalls(items []byte, err error) {
	if err == ErrDisconnected {
		return // the connection is ending: its end fails them, with why
	}
	for len(items) > 0 {
		size, hl := binary.Uvarint(items)
		if hl <= 0 || uint64(len(items)-hl) < size {
			return
		}
		pkt := items[hl : hl+int(size)]
		items = items[hl+int(size):]
		if len(pkt) == 0 {
			continue
		}
		switch k := dispatch.Kind(pkt[0]); k {
		case dispatch.KindCall, dispatch.KindJoin, dispatch.KindLeave:
			pk, derr := decode(k, pkt[1:])
			if derr != nil {
				continue
			}
			cc.c.mu.Lock()
			pc := cc.c.pending.remove(pk.ID)
			cc.c.mu.Unlock()
			if pc != nil {
				cc.c.settle(pc, nil, err, true)
			}
		}
	}
}

// sendRaw frames and sends one packet.
func (cc *clientConn) sendRaw(pkt []byte) error {
	bp := scratchBufs.Get().(*[]byte)
	defer scratchBufs.Put(bp)
	b := append(beginFrame(*bp), pkt...)
	*bp = b[:0]
	return cc.sendError(cc.sendPacket(b))
}

// sendPacket sends a packet built after frame headroom, compressed with
// the negotiated dictionary when that pays.
func (cc *clientConn) sendPacket(b []byte) corkwriter.Status {
	if d := cc.dict.Load(); d != nil {
		if cb, release, ok := d.compressPacket(b[frameHeadroom:]); ok {
			defer release()
			return cc.link.sendBuilt(cb)
		}
	}
	return cc.link.sendBuilt(b)
}
