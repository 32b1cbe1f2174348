package compat

// The Client's life after Dial: the read loop of each connection, the
// liveness watch, reconnecting with backoff and rejoining rooms.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/wsframe"
)

// run serves connections until Close: it reads one until it drops, fails
// the calls in flight, and reconnects with backoff.
//
// The backoff starts over only after a connection that served for
// Reconnect.MaxDelay at least. One that the server ended sooner counts as
// a failed attempt: a server that refuses the client after the handshake
// (an authentication refused on QUIC or SCTP, where the upgrade checks
// come after it) or closes every connection at once (over a quota) was
// asked again every MinDelay, for ever (a reconnect audit: 36 attempts in
// 3 s).
func (c *Client) run(cc *clientConn) {
	defer close(c.done)
	step := c.opts.Reconnect.MinDelay
	var settled chan struct{} // closed when a reconnected cc's settleReconnect is done
	for first := true; ; first = false {
		watch := cc.watchLiveness()
		err := cc.link.run(cc)
		if watch.stop() {
			// The closing handshake with a silent server ends in a
			// timeout or a reset, whatever the carrier: say why it began.
			err = &CloseError{Code: wsframe.CloseGoingAway, Reason: idleTimeoutReason}
		}
		if why := abnormalEnd(err); why != nil {
			// Wrapped, not errors.Join: one line, for logs.
			err = fmt.Errorf("%w: %w", ErrDisconnected, why)
		} else {
			err = ErrDisconnected
		}
		c.mu.Lock()
		c.conn, c.dropped = nil, err
		closed := c.closed
		failed := c.pending.drain()
		c.mu.Unlock()
		for _, pc := range failed {
			c.settle(pc, nil, err, true)
		}
		close(cc.ended) // after the drain: see settleRefused
		cc.cancelAsks()
		if settled != nil {
			<-settled // its Connected, rejoins or giving up come first
		}
		if first && !cc.isReady() {
			// Dial's connection, ended before the server's capabilities:
			// Dial fails with err, and nothing is retried.
			c.timeouts.Stop()
			c.watch.close()
			return
		}
		if closed || c.opts.Reconnect.Disabled {
			c.setState(Closed)
			c.timeouts.Stop()
			c.watch.close()
			return
		}
		if cc.servedFor() >= c.opts.Reconnect.MaxDelay {
			step = c.opts.Reconnect.MinDelay
		} else if !first {
			step = min(2*step, c.opts.Reconnect.MaxDelay)
		}
		c.setState(Reconnecting)
		cc, step = c.reconnect(step)
		if cc == nil {
			c.setState(Closed)
			c.timeouts.Stop()
			c.watch.close() // or the caller's context keeps the client
			return
		}
		settled = make(chan struct{})
		go c.settleReconnect(cc, settled)
	}
}

// settleReconnect waits, within ConnectTimeout, for the capabilities of
// a reconnected connection, as Dial does for the first one; then the
// client is Connected, and waits for the answers to its rejoins, sent
// when the capabilities came. A connection whose server
// sends none in time is given up, and run tries again. It was Connected
// as soon as the carrier's handshake was done: calls, emits and events
// waited for the capabilities of a server that had hung after its
// upgrade until IdleTimeout (a reconnect audit: 7 s with a 1 s
// ConnectTimeout), and OnState said Connected to a server that refused
// the client a moment later.
//
// The connection given up is closed with 1000 as Dial closes one it gives
// up on (link.closeNow): its close is sent, and the connection ended once
// that is written, without waiting for the answer. The answer would
// confirm nothing (no call, emit or event left before the capabilities),
// and a server silent since its handshake would hold the next attempt
// closeTimeout for it. Dropped, as it was, the server saw 1006.
func (c *Client) settleReconnect(cc *clientConn, done chan struct{}) {
	defer close(done)
	t := time.NewTimer(c.opts.ConnectTimeout)
	defer t.Stop()
	select {
	case <-cc.ready:
	case <-cc.ended:
		return
	case <-t.C:
		c.opts.Logger.Info("hotpath: reconnect failed", "err", &connectTimeoutError{url: c.url, timeout: c.opts.ConnectTimeout, step: stepCapabilities})
		cc.link.closeNow(wsframe.CloseNormal, "")
		return
	}
	c.metrics.reconnects.Add(1)
	c.setState(Connected)
	c.awaitRejoins(cc)
}

// watchLiveness pings the server once it has been silent for
// KeepaliveInterval and closes the connection with 1001 HP_IDLE_TIMEOUT
// once it has been silent for IdleTimeout, as the server does with its
// clients. The watch's stop ends it.
func (cc *clientConn) watchLiveness() *livenessWatch {
	w := &livenessWatch{}
	if cc.c.opts.IdleTimeout < 0 {
		return w
	}
	w.cc.Store(cc)
	t := time.AfterFunc(time.Hour, w.check)
	t.Stop()
	w.timer.Store(t) // before the first check can run
	t.Reset(cc.c.opts.KeepaliveInterval)
	return w
}

// idleTimeoutReason is the close reason of a connection given up for
// silence, at either end.
const idleTimeoutReason = "HP_IDLE_TIMEOUT"

// livenessWatch is the keepalive of one client connection: one timer,
// re-armed for when the server's silence would next matter.
//
// Its timers reach the connection only through cc, which stop clears: the
// runtime keeps a stopped timer's function until the P whose timer heap
// holds it removes it (go.dev/issue/75935), seconds later or at the time
// it was armed for. A function bound to the connection kept the closed
// client reachable meanwhile, with its buffers and dictionary encoders
// (a soak: about 4 MB, for up to a second after Close).
type livenessWatch struct {
	cc       atomic.Pointer[clientConn] // nil once stopped
	timer    atomic.Pointer[time.Timer]
	timedOut atomic.Bool
	// heldLoop fires heldLoopGrace after the connection was given up,
	// should its read loop not have ended by then (endHeldLoop).
	heldLoop atomic.Pointer[time.Timer]
}

// stop ends the watch and reports whether the server was given up.
func (w *livenessWatch) stop() (timedOut bool) {
	w.cc.Store(nil)
	if t := w.timer.Load(); t != nil {
		t.Stop()
	}
	if h := w.heldLoop.Load(); h != nil {
		h.Stop()
	}
	return w.timedOut.Load()
}

// heldLoopGrace is how long a connection given up for silence has to end
// before endHeldLoop concludes that its read loop is held: the closing
// handshake that ends it takes closeTimeout at most.
const heldLoopGrace = 2 * closeTimeout

func (w *livenessWatch) check() {
	cc := w.cc.Load()
	if cc == nil {
		return
	}
	o, l := cc.c.opts, cc.link
	act, next := l.liveness().check(time.Now(), o.KeepaliveInterval, o.IdleTimeout)
	switch act {
	case keepGiveUp:
		w.timedOut.Store(true)
		l.requestClose(wsframe.CloseGoingAway, idleTimeoutReason)
		cc.endPauses()
		w.heldLoop.Store(time.AfterFunc(heldLoopGrace, w.endHeldLoop))
		return
	case keepPing:
		l.ping()
	}
	w.timer.Load().Reset(time.Until(next))
}

// endHeldLoop is the heldLoop timer's function: it goes through the watch,
// not to the connection, which a stopped timer's function would keep.
func (w *livenessWatch) endHeldLoop() {
	if cc := w.cc.Load(); cc != nil {
		cc.endHeldLoop()
	}
}

// endHeldLoop ends the calls of a connection given up for silence whose
// read loop has not ended heldLoopGrace later: the loop is held by a
// callback of the program's, most likely a listener that made a Call,
// Join or Leave, whose answer only that loop could read. Such a call
// waited for ever, and with it the client: every later call, and the
// reconnect, which follows the loop's end. The link is dropped first, so
// that calls sent from then on fail to send instead of waiting; the calls
// waiting fail as at any end of the connection, and once the callback
// returns, the loop ends the connection and the client reconnects.
func (cc *clientConn) endHeldLoop() {
	select {
	case <-cc.ended:
		return
	default:
	}
	c := cc.c
	c.opts.Logger.Warn("hotpath: the connection was given up for silence, but its read loop is held by a listener or OnState callback; its calls fail now (a Call, Join or Leave made inside a listener waits for an answer only that loop can read: make it from a goroutine)",
		"url", c.url, "held", heldLoopGrace)
	cc.link.abort()
	cc.endPauses()
	err := fmt.Errorf("%w: %w", ErrDisconnected, &CloseError{Code: wsframe.CloseGoingAway, Reason: idleTimeoutReason})
	var failed []*pendingCall
	c.mu.Lock()
	if c.conn == cc {
		failed = c.pending.drain()
	}
	c.mu.Unlock()
	for _, pc := range failed {
		c.settle(pc, nil, err, true)
	}
}

// reconnect dials, after a delay of about step and then doubling it up to
// Reconnect.MaxDelay after each failure, until a connection is made or
// the client is closed (nil). It returns the step it ended at.
func (c *Client) reconnect(step time.Duration) (*clientConn, time.Duration) {
	c.mu.Lock()
	dropped := c.dropped
	c.mu.Unlock()
	var notBefore time.Duration // the last refusal's Retry-After
	for attempt := 1; ; attempt++ {
		delay := reconnectDelay(step, notBefore)
		select {
		case <-time.After(delay):
		case <-c.closedCh():
			return nil, step
		}
		cc, err := c.connectUnlessClosed()
		if err != nil {
			select {
			case <-c.closedCh():
				return nil, step // the attempt was given up for Close
			default:
			}
			c.opts.Logger.Info("hotpath: reconnect failed", "attempt", attempt, "err", err)
			c.mu.Lock()
			c.dropped = &reconnectError{dropped: dropped, attempt: attempt, err: err}
			c.mu.Unlock()
			step = min(2*step, c.opts.Reconnect.MaxDelay)
			notBefore = 0
			if refused, ok := errors.AsType[*HTTPError](err); ok {
				notBefore = min(refused.RetryAfter, c.opts.Reconnect.MaxDelay)
			}
			continue
		}
		if hook := testHookReconnectDialed.Load(); hook != nil {
			(*hook)()
		}
		c.mu.Lock()
		if c.closed {
			// Closed as the attempt completed. The link was never started
			// (run starts it once reconnect returns): nothing reads it,
			// and on WebSocket closeNow, which the read loop carries out,
			// would never end it. refuse sends its close after the
			// capabilities queued and ends it without waiting for an
			// answer, as Close does with a connection that has not had
			// the server's capabilities. Dropped, as it was, the server
			// saw 1006.
			c.mu.Unlock()
			cc.link.refuse(wsframe.CloseNormal, "")
			return nil, step
		}
		c.conn = cc
		c.mu.Unlock()
		return cc, step
	}
}

// testHookReconnectDialed, when set, runs in reconnect once an attempt
// has made its connection, before it checks whether the client was
// closed meanwhile.
var testHookReconnectDialed atomic.Pointer[func()]

// reconnectDelay is the wait before a reconnect attempt: drawn from the
// upper half of step, and after a refusal with Retry-After (notBefore)
// from notBefore to half again as long, so that a fleet refused together
// by a full server spreads its return instead of coming back in lockstep
// at the moment it was given.
func reconnectDelay(step, notBefore time.Duration) time.Duration {
	delay := step/2 + rand.N(step/2+1)
	if notBefore > 0 {
		delay = max(delay, notBefore+rand.N(notBefore/2+1))
	}
	return delay
}

// reconnectError is the error of calls made while reconnect attempts
// fail: the last connection's end, which CloseStatus reads, with the last
// attempt's failure. A client whose reconnects were refused (a token
// revoked: Authenticate's 401 on WebSocket, WebTransport or WebRTC, where
// the refusal is the upgrade's answer) failed its calls with the old
// connection's drop for as long as it tried, and only the Info log said
// why.
type reconnectError struct {
	dropped error // ErrDisconnected with why the last connection ended
	attempt int
	err     error
}

func (e *reconnectError) Error() string {
	return fmt.Sprintf("%v; reconnect attempt %d failed: %v", e.dropped, e.attempt, e.err)
}

// Unwrap gives the drop, and the attempt's failure only when it is the
// server's refusal (an *HTTPError, for errors.As): a dial that timed out
// would otherwise make a call that failed at once match
// context.DeadlineExceeded, as a call that timed out does.
func (e *reconnectError) Unwrap() []error {
	var refused *HTTPError
	if errors.As(e.err, &refused) {
		return []error{e.dropped, refused}
	}
	return []error{e.dropped}
}

// connectUnlessClosed is one reconnect attempt, given up when Close is
// called: Close returns at once, not after the attempt's ConnectTimeout
// against a server that accepts and never answers.
func (c *Client) connectUnlessClosed() (*clientConn, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	closed := c.closedCh()
	go func() {
		select {
		case <-closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	return c.connect(ctx)
}

// rejoinCall is the Join of a room the client was in, sent on a
// reconnected connection.
type rejoinCall struct {
	room string
	pc   *pendingCall
}

// sendRejoins sends on cc, a reconnected connection whose capabilities
// have just come, a Join for every room the client is in, before cc is
// ready for anything else: what the program sends on cc then reaches the
// server after them, so an Emit made as soon as OnState says Connected
// (or made while the reconnect was under way, and waiting for it) finds
// the client a member again. Sent one at a time after Connected, each
// waiting for its answer, the rejoins let the server drop such emits
// from a client not yet back in their rooms (a soak test found it), for
// as many round trips as the client had rooms. It runs on the read loop,
// so it only sends; awaitRejoins waits for the answers.
func (c *Client) sendRejoins(cc *clientConn) []rejoinCall {
	c.memberMu.Lock()
	defer c.memberMu.Unlock()
	c.mu.Lock()
	if len(c.rooms) == 0 || c.stillCurrentLocked(cc) != nil {
		c.mu.Unlock()
		return nil
	}
	calls := make([]rejoinCall, 0, len(c.rooms))
	for room := range c.rooms {
		pc := getPendingCall(nil)
		pc.id = c.newID()
		c.pending.add(pc)
		calls = append(calls, rejoinCall{room, pc})
	}
	c.mu.Unlock()
	for _, j := range calls {
		err := cc.sendRaw(wire.Append(nil, &wire.Packet{Kind: dispatch.KindJoin, ID: j.pc.id, Room: []byte(j.room)}))
		switch {
		case err == ErrDisconnected:
			c.settleRefused(cc, callRef{j.pc, j.pc.id})
		case err != nil:
			c.cancelCall(j.pc, err)
		}
	}
	return calls
}

// awaitRejoins waits for the answers to cc's rejoins and reports those
// that failed, unless cc is no longer the client's by then (dropped: the
// next connection rejoins; closed: none does): after Close,
// OnRejoinError is not called. The answers of a connection that ended
// are settled by its end, so waiting for them then takes no time.
//
// They wait up to rejoinTimeout from now or from the last answer to one
// of them: a server that answers them slowly gets that long for each
// (one that checks them all in one turn answers them together, at its
// end). Given rejoinTimeout each, one after the other, whatever came,
// the rejoins of n rooms to a server that answered none were reported
// over n×10 s (a client audit). They are waited for all at once, each on
// a goroutine of its own, so that the bound runs from when an answer
// came: waited for one after the other, an answer picked up after an
// earlier rejoin's wait ran out pushed the bound on from then, and
// against a server that answered every other room the last report came
// about n/2 × rejoinTimeout after the reconnect (note19's "Left").
func (c *Client) awaitRejoins(cc *clientConn) {
	type answer struct {
		room string
		err  error
	}
	// Each pc is recycled once its wait returns: the refs, taken before,
	// tell at the bound whether it is still the rejoin's.
	refs := make([]callRef, len(cc.rejoins))
	for i, j := range cc.rejoins {
		refs[i] = callRef{j.pc, j.pc.id}
	}
	answers := make(chan answer, len(cc.rejoins))
	for _, j := range cc.rejoins {
		go func() { answers <- answer{j.room, c.wait(context.Background(), cc, j.pc)} }()
	}
	cc.rejoins = nil
	bound := time.NewTimer(rejoinTimeout)
	defer bound.Stop()
	for range refs {
		var a answer
		select {
		case a = <-answers:
			bound.Reset(rejoinTimeout)
		case <-bound.C:
			for _, ref := range refs {
				c.cancelRef(ref, errCallTimeout) // no-op for those answered
			}
			a = <-answers
		}
		if a.err != nil {
			c.rejoinFailed(cc, a.room, a.err)
		}
	}
}

// rejoinFailed reports a rejoin of room on cc that failed with err,
// unless cc is no longer the client's.
func (c *Client) rejoinFailed(cc *clientConn, room string, err error) {
	c.mu.Lock()
	gone := c.stillCurrentLocked(cc) != nil
	c.mu.Unlock()
	if gone {
		return
	}
	// Refused by the server (Options.AllowJoin), the room is left:
	// asking again at every reconnect would not change that.
	left := errors.Is(err, ErrUnauthorized)
	if left {
		c.mu.Lock()
		delete(c.rooms, room)
		c.mu.Unlock()
		c.opts.Logger.Warn("hotpath: rejoin refused; the room is left", "room", room, "err", err)
	} else {
		c.opts.Logger.Warn("hotpath: rejoin failed", "room", room, "err", err)
	}
	if h := c.opts.OnRejoinError; h != nil {
		c.rejoinError(h, room, err, left)
	}
}

// rejoinTimeout is how long a reconnect's rejoins wait for an answer
// (awaitRejoins); a variable for tests.
var rejoinTimeout = 10 * time.Second

// rejoinError tells OnRejoinError; a panic in it is logged, as one in
// OnState is. It counts in inCallbacks, as OnState does: a Close made
// from it waited for the goroutine running it, for ever (a client audit).
func (c *Client) rejoinError(h func(string, error, bool), room string, err error, left bool) {
	c.inCallbacks.Add(1)
	defer func() {
		c.inCallbacks.Add(-1)
		if r := recover(); r != nil {
			c.logCallbackPanic("OnRejoinError", r, "room", room)
		}
	}()
	h(room, err, left)
}
