package compat

import "context"

// AsyncCall is a call started by Go. Its fields other than Err and Done
// are what Go was given; Err is set before the call is sent on Done.
type AsyncCall struct {
	Method string
	Req    any
	Resp   any             // the answer is decoded into it, as Call's resp
	Err    error           // nil, or why the call failed, as Call returns it
	Done   chan *AsyncCall // receives the call once it has ended
}

// Go starts a call of method with req, as Call does, and returns without
// waiting for its answer: the call is sent on done once it has ended,
// with its result decoded into resp or Err set to the error Call would
// have returned (the server's *Error, ErrTimeout, ctx's error,
// ErrDisconnected, ErrClosed, ErrBadRequest, ...). One goroutine can so
// keep many calls in flight, as a pipelining writer keeps messages out,
// instead of a goroutine per call blocked in Call. Calls started in a row
// by one goroutine leave in the order they were started.
//
// Each Go call is a write of its own: blocking callers woken together
// share writes (Batch packets), Go calls in a row do not. On QUIC at 64 in
// flight, Go restarting one call per answer was slower than 64 blocking
// callers, and GoAll, restarting the answers that arrived together in one
// burst, faster than both (BenchmarkCarrierEcho/*/small-64, rpc-go and
// rpc-goall; bench/results/quic-64-2026-12-05.txt).
// Start bursts with GoAll.
//
// ctx, ClientOptions.CallTimeout and the connection's state rule a Go
// call as they rule a Call: ctx's deadline is sent with the call and ends
// it on the client's side, a canceled ctx ends it with ctx's error (the
// server's handler runs on, as for Call), a connection that drops fails
// it with ErrDisconnected, and Close fails the calls in flight before it
// returns. Go blocks only where Call would before its call is sent: for
// the server's capabilities on a connection just reconnected, within ctx.
// A call that fails before it is sent (a bad method name or resp, a ctx
// that has ended already, no connection) is on done when Go returns,
// unless done is full (below).
//
// If done is nil, Go makes a channel with room for one call. Otherwise
// done must be buffered: Go panics on an unbuffered channel, which the
// connection's read loop could not send to without waiting for the
// caller. Room for every call in flight on done is best; when done is
// full, the call is sent from a goroutine of its own, so that the read
// loop never waits for the caller and no call is lost. That goroutine
// waits until done is read, past Close if need be: a caller that stops
// reading done while it goes on calling Go holds one per call.
//
// resp must not be read or reused until the call is on done; req may be
// reused as soon as Go returns, since it is encoded by then.
func (c *Client) Go(ctx context.Context, method string, req, resp any, done chan *AsyncCall) *AsyncCall {
	if done == nil {
		done = make(chan *AsyncCall, 1)
	} else if cap(done) == 0 {
		panic("hotpath: Client.Go: done channel is unbuffered")
	}
	call := &AsyncCall{Method: method, Req: req, Resp: resp, Done: done}
	if _, _, err := c.start(ctx, method, req, resp, call); err != nil {
		call.finish(err)
	}
	return call
}

// finish records err and sends the call on its Done, on a goroutine of its
// own when Done is full.
func (call *AsyncCall) finish(err error) {
	call.Err = err
	select {
	case call.Done <- call:
	default:
		go func() { call.Done <- call }()
	}
}

// GoAll starts calls as Go does, each with its Method, Req, Resp and Done
// (nil: a channel with room for one is made), and sends those it can in
// as few writes as the protocol's batches allow: a burst of Go calls
// costs a write each, and on QUIC, where a write is a copy into the
// stream that quic-go grows to the exact size of what waits to be
// packed, a write per call cost more than the calls saved by not
// blocking (BenchmarkCarrierEcho/quic/small-64/rpc-go against rpc-goall;
// see Go). A call's Err
// is cleared first: a call that came back on Done may be started again.
// GoAll panics, as Go, on an unbuffered Done.
func (c *Client) GoAll(ctx context.Context, calls ...*AsyncCall) {
	for _, call := range calls {
		if call.Done == nil {
			call.Done = make(chan *AsyncCall, 1)
		} else if cap(call.Done) == 0 {
			panic("hotpath: Client.GoAll: done channel is unbuffered")
		}
	}
	// Holding the flusher's part, the burst's packets queue (enqueue)
	// and leave together at the end, with whatever other callers queued
	// meanwhile. Only on a ready connection: one waiting for its
	// server's capabilities would hold the other callers' packets as
	// long.
	cc, err := c.current()
	held := err == nil && len(calls) > 1 && cc.isReady() && cc.hold()
	if held {
		// Deferred: a codec that panics on a req must not leave the
		// connection with a flusher that never flushes.
		defer cc.flushQueue(0)
	}
	for _, call := range calls {
		call.Err = nil
		if _, _, err := c.start(ctx, call.Method, call.Req, call.Resp, call); err != nil {
			call.finish(err)
		}
	}
}
