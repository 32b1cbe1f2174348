package compat

import (
	"context"
	"sync"
)

// ctxWatch settles the call of a caller reading its own answer when the
// caller's context ends.
//
// Such a caller is blocked in a read, not in a select on ctx.Done, so
// something must cancel its call and wake the read (readOwnAnswer). A
// context.AfterFunc per call does it, but registers with the context and
// unregisters every call: three allocations and about 1.5 µs per call in
// BenchmarkCallCancellable. Callers mostly pass the same long-lived
// context, or contexts derived from it by WithValue, call after call. So
// the client keeps one AfterFunc for the Done channel a reading caller
// last passed and records beside it which call is being read: only one
// caller reads at a time (the read token). A different Done channel
// replaces the registration.
//
// The registration outlives the call until another context replaces it
// or the client closes: it keeps that context, and the client, reachable
// from the context's parent meanwhile.
type ctxWatch struct {
	mu     sync.Mutex
	done   <-chan struct{} // the Done channel watched
	stop   func() bool     // ends the watch of done
	closed bool            // the client closed: nothing is kept registered

	// The call whose caller reads now, and its context.
	reading    callRef
	readingCtx context.Context
}

// begin records that ref's caller reads with ctx, whose Done is not nil,
// and watches ctx for it. The caller calls end when it stops reading.
func (w *ctxWatch) begin(c *Client, ctx context.Context, ref callRef) {
	done := ctx.Done()
	w.mu.Lock()
	if w.done != done {
		if w.stop != nil {
			w.stop()
		}
		w.done = done
		w.stop = context.AfterFunc(ctx, func() { w.fire(c, done) })
	}
	w.reading, w.readingCtx = ref, ctx
	w.mu.Unlock()
	// A context that ended before this call: its watch may have fired
	// before the call was recorded.
	if ctx.Err() != nil {
		c.cancelRef(ref, ctxError(ctx))
	}
}

// end records that ref's caller stopped reading. It runs after the caller
// let go of the read token, so another caller may have taken it and begun
// meanwhile: its record is kept. Cleared unconditionally, a canceled
// context of the next reader went unnoticed, and its call waited for its
// answer past the cancel (a concurrency audit: seconds, for a handler that
// takes that long). After the client closed, the registration is not kept.
func (w *ctxWatch) end(ref callRef) {
	w.mu.Lock()
	if w.reading == ref {
		w.reading, w.readingCtx = callRef{}, nil
	}
	if w.closed && w.stop != nil && w.reading.pc == nil {
		w.stop()
		w.done, w.stop = nil, nil
	}
	w.mu.Unlock()
}

// fire runs when done is closed: it cancels the call being read if its
// caller's context is the one that ended.
func (w *ctxWatch) fire(c *Client, done <-chan struct{}) {
	w.mu.Lock()
	ref, ctx := w.reading, w.readingCtx
	match := ref.pc != nil && ctx.Done() == done
	w.mu.Unlock()
	if match {
		c.cancelRef(ref, ctxError(ctx))
	}
}

// close ends the watch, once the client closed.
func (w *ctxWatch) close() {
	w.mu.Lock()
	w.closed = true
	if w.stop != nil && w.reading.pc == nil {
		w.stop()
		w.done, w.stop = nil, nil
	}
	w.mu.Unlock()
}
