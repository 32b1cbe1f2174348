package compat

// The Client's calls: sending one, waiting for its answer (or reading
// it), and settling it by answer, timeout, cancel or the connection's end.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/corkwriter"
	"github.com/hotpath-go/hotpath/dispatch"
)

// Call calls method with req and decodes the result into resp, a pointer
// (or nil to discard it). It returns the server's *Error, ErrTimeout when
// ctx's deadline or ClientOptions.CallTimeout passes first (one that
// matches context.DeadlineExceeded too, unless the server's timeout
// answer came first), ctx's error when ctx is canceled, or
// ErrDisconnected when the connection drops first. A canceled ctx ends
// the wait only: the protocol has no cancel packet, and the server's
// handler runs on until the call's timeout (the deadline, sent with the
// call) or its end. Before anything is sent, it refuses with
// ErrBadRequest a resp that is not a non-nil pointer (the method would
// run and its result be lost) and a method name the protocol cannot carry
// (empty, over 255 bytes, not UTF-8); Join, Leave, Emit and Event refuse
// such names too. A ctx that has ended already fails the call at once
// with ctx's error (ErrTimeout past its deadline), unsent: the server
// would run a handler whose answer nobody waits for.
//
// A raw result (resp a *[]byte or *json.RawMessage) is copied into the
// slice resp points to, reusing its capacity, as encoding/json does for a
// json.RawMessage: a caller that passes the same slice call after call
// allocates nothing per answer (at 10 KiB that saved a fifth of a
// call's time, BenchmarkCall10KiB), and one that keeps an earlier answer
// passes a nil slice.
func (c *Client) Call(ctx context.Context, method string, req, resp any) error {
	cc, pc, err := c.start(ctx, method, req, resp, nil)
	if err != nil {
		return err
	}
	if err := c.wait(ctx, cc, pc); err != nil {
		return callError(method, resp, err)
	}
	return nil
}

// callError is the error a call to method ended with, naming the method
// and resp's type when the answer came but did not decode into resp. A nil
// err returns before re is declared: errors.As makes re escape, and every
// answered Go call passes here (one allocation per call).
func callError(method string, resp any, err error) error {
	if err == nil {
		return nil
	}
	var re *resultError
	if errors.As(err, &re) {
		return fmt.Errorf("hotpath: %q answered, but its result does not decode into %T: %w", method, resp, re.err)
	}
	return err
}

// start checks a call, puts it in the pending table and sends it: the
// part of a call that Call and Go share. An error returned means the call
// never joined the table; from then on the call ends in settle, whoever
// settles it (its answer, its deadline, its ctx, a send that failed, the
// connection's end). With async, the call is Go's: settle delivers it on
// async.Done, and its ctx is watched from here (Call watches its own, in
// wait), so the caller must not touch pc after start returns.
func (c *Client) start(ctx context.Context, method string, req, resp any, async *AsyncCall) (*clientConn, *pendingCall, error) {
	if err := checkName("method", method); err != nil {
		return nil, nil, err
	}
	if err := checkResp(resp); err != nil {
		return nil, nil, err
	}
	if ctx.Err() != nil {
		// Not sent: the server would run a handler nobody waits for. A
		// Go call also spared the goroutine that context.AfterFunc starts
		// at once for an ended ctx: a loop of them on one core queued
		// hundreds on c.mu, ahead of the answers (a flake hunt).
		return nil, nil, ctxError(ctx)
	}
	cc, err := c.current()
	if err != nil {
		return nil, nil, err
	}
	deadline, hasDeadline := ctx.Deadline()
	if !hasDeadline && c.opts.CallTimeout > 0 {
		deadline, hasDeadline = time.Now().Add(c.opts.CallTimeout), true
	}
	if !cc.isReady() {
		if err := c.awaitReady(ctx, cc, deadline, hasDeadline); err != nil {
			return nil, nil, err
		}
	}
	var timeoutMS uint32
	if hasDeadline {
		timeoutMS = uint32(min(max(time.Until(deadline).Milliseconds(), 1), 1<<31))
	}

	pc := getPendingCall(resp)
	pc.async = async
	if async != nil && cc.shared != nil {
		// Nobody waits in wait to read this call's answer on WebSocket:
		// counted among the callers waiting on channels, it keeps the
		// token with the read loop until settle takes the count back.
		// Counted before the call joins the table, where any settler
		// may recycle pc.
		cc.shared.countWaiting(&pc.waitingOn)
	}
	c.mu.Lock()
	if err := c.stillCurrentLocked(cc); err != nil {
		c.mu.Unlock()
		uncount(&pc.waitingOn)
		putPendingCall(pc)
		return nil, nil, err
	}
	id := c.newID()
	pc.id = id
	if hasDeadline {
		// Armed under c.mu: whoever settles the call takes it out of the
		// table under c.mu first, so it sees the handle.
		pc.handle = c.timeouts.Arm(deadline, callRef{pc, id})
	}
	if async != nil && ctx.Done() != nil {
		// Registered under c.mu for the same reason; if ctx has ended
		// already, f runs on a goroutine of its own, after the unlock.
		ref := callRef{pc, id}
		pc.stopWatch = context.AfterFunc(ctx, func() { c.cancelRef(ref, ctxError(ctx)) })
	}
	c.pending.add(pc)
	c.mu.Unlock()

	bp := scratchBufs.Get().(*[]byte)
	b := wire.AppendCall(beginFrame(*bp), dispatch.KindCall, id, method, timeoutMS, nil)
	b, err = marshal(c.opts.Codec, b, req)
	if err == nil {
		// A Go caller has no other callers to wait for (enqueue's
		// yield): the calls it starts in a row leave one by one, as a
		// pipelining writer's do.
		err = cc.enqueue(b, async == nil)
	}
	*bp = b[:0]
	scratchBufs.Put(bp)
	// By id, not pc: a Go call's pc may have been settled (its ctx, its
	// deadline, the connection's end) and recycled for another call by
	// now, and canceling through pc would end that other call.
	ref := callRef{pc, id}
	switch {
	case err == ErrDisconnected:
		c.settleRefused(cc, ref)
	case err != nil:
		c.cancelRef(ref, err)
	}
	return cc, pc, nil
}

// stillCurrentLocked returns nil if cc is still the client's connection,
// with c.mu held, and otherwise why not. A call is added to the pending
// table only then: the end of cc clears c.conn and fails the calls in the
// table under c.mu, so a call added after that was failed by nobody, and
// one without a deadline, queued behind another caller's packet, waited
// for ever (a reconnect audit: 1 call in about 500 dropped connections).
func (c *Client) stillCurrentLocked(cc *clientConn) error {
	now, err := c.currentLocked()
	if err == nil && now != cc {
		err = ErrDisconnected // cc ended, and a reconnect replaced it
	}
	return err
}

// resultError is an answer whose result did not decode into the caller's
// resp: the call itself succeeded (Call names the method).
type resultError struct{ err error }

func (e *resultError) Error() string { return "hotpath: decoding a call's result: " + e.err.Error() }
func (e *resultError) Unwrap() error { return e.err }

// awaitReady waits, for a call about to be sent on a reconnected
// connection, until the server's capabilities have arrived (see
// clientConn.awaitReady), or the call's ctx or deadline ends first, or the
// connection does: the errors a call waiting for its answer gets.
func (c *Client) awaitReady(ctx context.Context, cc *clientConn, deadline time.Time, hasDeadline bool) error {
	var expired <-chan time.Time
	if hasDeadline {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-cc.ready:
		return nil
	case <-cc.ended:
		return c.endError(cc)
	case <-ctx.Done():
		return ctxError(ctx)
	case <-expired:
		return errCallTimeout
	}
}

// settleRefused settles a call that cc refused because it was ending
// (ErrDisconnected) with why it ended, once it has. The end fails the
// calls pending then; this one may have joined the table after that. The
// caller waits for the settlement as for an answer (wait), within its ctx
// and deadline: an end that takes long (a read loop that has not noticed
// yet) does not hold the call past them.
func (c *Client) settleRefused(cc *clientConn, ref callRef) {
	go func() {
		<-cc.ended
		c.cancelRef(ref, c.endError(cc))
	}()
}

// endError is why cc ended, once cc.ended is closed: the error its calls
// failed with, or, when a reconnect has cleared that already,
// ErrDisconnected (ErrClosed after Close).
func (c *Client) endError(cc *clientConn) error {
	c.mu.Lock()
	err := c.dropped
	c.mu.Unlock()
	if err == nil {
		err = cc.sendError(corkwriter.Closed)
	}
	return err
}

// newID returns an id no pending call uses; c.mu is held. The table is
// searched only once the ids have wrapped: with 64 calls in flight the
// search cost 1.4% of BenchmarkCarrierEcho/quic/small-64/rpc-goall.
func (c *Client) newID() uint32 {
	for {
		c.nextID++
		if c.nextID == 0 {
			c.idsWrapped = true
			continue
		}
		if !c.idsWrapped || c.pending.get(c.nextID) == nil {
			return c.nextID
		}
	}
}

// wait blocks until pc is settled, settling it with ctx's error if ctx
// ends first. When nobody is reading cc, the caller reads its answer
// itself (readOwnAnswer).
func (c *Client) wait(ctx context.Context, cc *clientConn, pc *pendingCall) error {
	if ws, ok := cc.link.(*wsConn); ok && cc.shared != nil && !pc.settled.Load() && ws.takeReads(&pc.waitingOn, c.pending.size.Load() == 1) {
		c.readOwnAnswer(ctx, cc, ws, pc)
	}
	if done := ctx.Done(); done == nil || pc.settled.Load() {
		// A ctx that never ends, or a call settled already (its caller
		// read the answer): no select to pay for.
		<-pc.done
	} else {
		select {
		case <-pc.done:
		case <-done:
			c.cancelCall(pc, ctxError(ctx))
			<-pc.done
		}
	}
	uncount(&pc.waitingOn) // settled before it was counted
	err := pc.err
	putPendingCall(pc)
	return err
}

// readOwnAnswer reads ws on the caller's goroutine, holding its read token,
// until pc is settled: by its answer, or by another goroutine (timeout,
// ctx, a dropped batch, the connection's end), which then wakes the read.
func (c *Client) readOwnAnswer(ctx context.Context, cc *clientConn, ws *wsConn, pc *pendingCall) {
	pc.reader.Store(ws)
	if ctx.Done() != nil {
		ref := callRef{pc, pc.id}
		c.watch.begin(c, ctx, ref)
		defer c.watch.end(ref)
	}
	ws.readUntil(cc, &pc.settled)
}

// ctxError is the error of a call whose ctx ended: ctx's error when it
// was canceled, errCallTimeout past its deadline.
func ctxError(ctx context.Context) error {
	err := ctx.Err()
	if errors.Is(err, context.DeadlineExceeded) {
		err = errCallTimeout
	}
	return err
}

// cancelCall settles pc with err if it is still pending.
func (c *Client) cancelCall(pc *pendingCall, err error) {
	c.mu.Lock()
	ok := c.pending.remove(pc.id) == pc
	c.mu.Unlock()
	if ok {
		c.settle(pc, nil, err, true)
	}
}

// cancelRef settles the call ref names with err if it is still pending:
// ref's id tells a pendingCall reused for a later call from the one meant.
func (c *Client) cancelRef(ref callRef, err error) {
	c.mu.Lock()
	ok := c.pending.get(ref.id) == ref.pc
	if ok {
		c.pending.remove(ref.id)
	}
	c.mu.Unlock()
	if ok {
		c.settle(ref.pc, nil, err, true)
	}
}

// settle completes a call that its settler removed from the table:
// decodes the result into the caller's resp, or records err. A settler
// other than the connection's reader passes wake, to wake a caller that
// reads for its own answer.
func (c *Client) settle(pc *pendingCall, payload []byte, err error, wake bool) {
	c.timeouts.Cancel(pc.handle)
	if err == nil && pc.resp != nil {
		// A raw answer is copied out of the read buffer it aliases, into
		// the caller's slice when it has the room (see Call).
		switch raw := pc.resp.(type) {
		case *[]byte:
			*raw = append((*raw)[:0], payload...)
		case *json.RawMessage:
			*raw = append((*raw)[:0], payload...)
		default:
			if derr := decodeResult(c.opts.Codec, payload, pc.resp); derr != nil {
				err = &resultError{derr}
			}
		}
	}
	if call := pc.async; call != nil {
		// Nobody waits on done: the settler recycles pc, whose callRefs
		// (the timeout's, the ctx watch's) its id guards.
		if pc.stopWatch != nil {
			pc.stopWatch()
		}
		uncount(&pc.waitingOn)
		putPendingCall(pc)
		call.finish(callError(call.Method, call.Resp, err))
		return
	}
	pc.err = err
	pc.settled.Store(true)
	uncount(&pc.waitingOn) // before the reader looks whether someone waits
	// Read after settled is set (the reading caller sets reader before it
	// looks at settled) and before done is signalled (the caller then
	// reuses pc).
	reader := pc.reader.Load()
	pc.done <- struct{}{}
	if wake && reader != nil {
		reader.wakeReader()
	}
}

// decodeResult decodes a call's answer into resp. A codec, or an
// UnmarshalJSON of resp's, that panics on what the server sent fails that
// call, as marshal fails an encoding that panics: the panic ended the
// program from the goroutine that read the answer, the client's read loop
// or another caller reading its own (a client audit).
func decodeResult(codec Codec, payload []byte, resp any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the %s codec panicked decoding a %T: %v", codec.Name(), resp, r)
		}
	}()
	return unmarshal(codec, payload, resp)
}

// callRef names a call for the timeout scheduler. The id guards against a
// timeout that fires after its call was answered and its pendingCall
// reused for another call.
type callRef struct {
	pc *pendingCall
	id uint32
}

func (c *Client) fireTimeouts(batch []callRef) {
	for _, ref := range batch {
		c.cancelRef(ref, errCallTimeout)
	}
}

// errCallTimeout ends a call whose deadline passed on the client's side
// (ctx's or CallTimeout): ErrTimeout, as a server's timeout answer is,
// wrapped with context.DeadlineExceeded so that either test matches it.
var errCallTimeout = fmt.Errorf("%w: %w", ErrTimeout, context.DeadlineExceeded)
