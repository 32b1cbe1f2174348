package compat

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/scheduler"
)

// pendingAsk is one server-to-client ask waiting for its answer. Whoever
// removes it from the peer's table (the answer, the timeout, the caller's
// context, the connection's end) settles it: exactly once.
type pendingAsk struct {
	peer   *Peer
	id     uint32
	handle scheduler.Handle
	result chan askResult // buffered: the settler never blocks
}

type askResult struct {
	payload []byte
	err     error
}

// Ask calls method on the client and decodes its answer into resp, a
// pointer, or discards it when resp is nil (PROTOCOL.md §4.4). It fails
// with ErrTimeout when ctx's deadline, or Options.AskTimeout when ctx has
// none, passes first; with ErrCanceled when ctx is canceled, the
// connection ends, or Server.Shutdown begins (joined with its close 1001
// HP_SHUTTING_DOWN, pending or unsent); with the client's *Error when it
// answers one
// (ErrOverloaded when the client runs as many ask handlers as its
// Limits.MaxInFlight); with ErrBadRequest, unsent, for a method name the
// protocol cannot carry; with ErrTooManyAsks, unsent, when the peer has
// Limits.MaxPendingAsks asks awaiting their answers already.
//
// A handler that asks must be registered with Async: the answer is read by
// the connection's read loop, which runs the other handlers and the event
// handlers (but for events that came as datagrams, which run off the
// loop, on a goroutine of the carrier's or the connection's). Ask with the context of one of those,
// while it runs, fails at once with ErrAskOnReadLoop, sends nothing, and
// the connection lives on; a goroutine that keeps such a context after
// its handler returned may meet the same refusal while another of those
// handlers runs.
func (p *Peer) Ask(ctx context.Context, method string, req, resp any) error {
	if p.onReadLoop(ctx) {
		return ErrAskOnReadLoop
	}
	if err := checkName("method", method); err != nil {
		return err
	}
	if err := checkResp(resp); err != nil {
		return err
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(p.srv.opts.AskTimeout)
	}
	timeoutMS := max(time.Until(deadline).Milliseconds(), 1)

	bp := scratchBufs.Get().(*[]byte)
	defer scratchBufs.Put(bp)
	a := &pendingAsk{peer: p, result: make(chan askResult, 1)}

	p.asksMu.Lock()
	if p.closed.Load() {
		p.asksMu.Unlock()
		return ErrClosed
	}
	if p.srv.shutting.Load() {
		// Shutdown fails the asks pending when it begins; one made after
		// would hold it as those did (see Shutdown).
		p.asksMu.Unlock()
		return askEndError(errShuttingDown)
	}
	if len(p.asks) >= p.srv.opts.Limits.MaxPendingAsks {
		// A client that never answers would otherwise let a handler that
		// asks in a loop grow the table (and the id search below, once
		// the ids run out) without bound.
		p.asksMu.Unlock()
		return ErrTooManyAsks
	}
	if p.asks == nil {
		p.asks = map[uint32]*pendingAsk{}
	}
	for {
		p.nextAsk++
		if _, busy := p.asks[p.nextAsk]; p.nextAsk != 0 && !busy {
			break
		}
	}
	a.id = p.nextAsk
	// Armed under asksMu: whoever settles the ask removes it under asksMu
	// first, so it sees the handle.
	a.handle = p.srv.timeouts.Arm(deadline, a)
	p.asks[a.id] = a
	p.asksMu.Unlock()

	b := wire.AppendCall(beginFrame(*bp), dispatch.KindAsk, a.id, method, uint32(min(timeoutMS, 1<<31)), nil)
	b, err := marshal(p.codec, b, req)
	*bp = b[:0]
	if n := len(b) - frameHeadroom; err == nil && p.overClientLimit(n) {
		limit, whose := p.sendLimit()
		err = fmt.Errorf("%w: an ask of %d bytes, over %s limit of %d", ErrMessageTooBig, n, whose, limit)
	}
	if err == nil {
		err = statusError(p.sendPacket(b))
	}
	if err != nil {
		p.settleAsk(a.id, askResult{err: err})
	}

	var r askResult
	select {
	case r = <-a.result:
	case <-ctx.Done():
		// ctx's deadline is the ask's: the scheduler would report it as
		// ErrTimeout, a bucket later.
		err := ErrCanceled
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = ErrTimeout
		}
		p.settleAsk(a.id, askResult{err: err})
		r = <-a.result
	}
	if r.err != nil || resp == nil {
		return r.err // a nil resp discards the answer, as Call's does
	}
	return unmarshal(p.codec, r.payload, resp)
}

// settleAsk removes ask id and delivers r to it, if it is still pending.
func (p *Peer) settleAsk(id uint32, r askResult) bool {
	p.asksMu.Lock()
	a, ok := p.asks[id]
	if ok {
		delete(p.asks, id)
	}
	p.asksMu.Unlock()
	if !ok {
		return false
	}
	p.srv.timeouts.Cancel(a.handle)
	a.result <- r
	return true
}

func (a *pendingAsk) timeout() { a.peer.settleAsk(a.id, askResult{err: ErrTimeout}) }

// onAnswer settles the ask an Answer packet answers. An answer to an ask
// that was never made, or that already timed out, is ignored (PROTOCOL.md
// §4.4).
func (p *Peer) onAnswer(body []byte) error {
	pk, err := decode(dispatch.KindAnswer, body)
	if err != nil {
		return err
	}
	var r askResult
	if pk.Status == wire.AnswerOK {
		r.payload = append([]byte(nil), pk.Payload...)
	} else {
		r.err = &Error{Code: pk.Code, Message: string(pk.Message), Data: append([]byte(nil), pk.Payload...)}
	}
	if !p.settleAsk(pk.ID, r) {
		p.srv.metrics.lateAnswers.Add(1)
	}
	return nil
}

// failAsks settles every pending ask when the connection ends.
func (p *Peer) failAsks(cause error) {
	p.asksMu.Lock()
	ids := make([]uint32, 0, len(p.asks))
	for id := range p.asks {
		ids = append(ids, id)
	}
	p.asksMu.Unlock()
	err := askEndError(cause)
	for _, id := range ids {
		p.settleAsk(id, askResult{err: err})
	}
}

// askEndError is the error of the asks that a connection's end, cause,
// fails: ErrCanceled, joined with the close when there is one.
func askEndError(cause error) error {
	if CloseStatus(cause) != 0 {
		return errors.Join(ErrCanceled, cause)
	}
	return ErrCanceled
}
