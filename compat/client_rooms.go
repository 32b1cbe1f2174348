package compat

// The Client's listeners, rooms, events and emits.

import (
	"context"
	"time"

	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/emitter"
)

// On registers fn for the server events named event; the returned
// function unregisters it. fn runs on the connection's read loop, but for
// an event or room emit that came as a datagram (Server.EmitUnreliable on
// QUIC, WebTransport, SCTP and WebRTC), which it gets on the goroutine
// of the carrier's datagrams, at the same time as the loop's: a listener
// whose state both may touch guards it. fn must not block: a Call made from fn would
// wait for an answer that only the loop it holds can read, so fn starts a
// goroutine for one. (Made from fn,
// such a call, Join or Leave fails with ErrDisconnected once the silent
// connection is given up, IdleTimeout plus 6 s after the loop's last
// read, and a warning is logged; the client reconnects when fn
// returns.) A panic in fn
// is logged and the event goes on to the other listeners. On panics on a
// name no event can have (empty, over 255 bytes, not UTF-8), as a
// listener that could never run is a bug in the caller.
func (c *Client) On(event string, fn func(Message)) (off func()) {
	mustListenName("event", event)
	return c.listen(listenerKey{event: event}, fn)
}

// OnRoom registers fn for the emits of event in room, including the
// presence events "$join" and "$leave" whose payload is {"members": n}.
// fn runs as On's does, and OnRoom panics as On does.
func (c *Client) OnRoom(room, event string, fn func(Message)) (off func()) {
	mustListenName("room", room)
	mustListenName("event", event)
	return c.listen(listenerKey{room, event}, fn)
}

// mustListenName panics on a name the wire cannot carry (see On); names
// starting with $ are fine here: the presence events.
func mustListenName(what, name string) {
	if !wire.ValidName(name) {
		panic("compat: " + nameFault(what, name) + ": a listener for it could never run")
	}
}

// guardListener wraps a listener so that its panic is logged, not fatal.
func (c *Client) guardListener(fn func(Message)) func(Message) {
	if fn == nil {
		return nil
	}
	return func(m Message) {
		c.inCallbacks.Add(1)
		defer func() {
			c.inCallbacks.Add(-1)
			if r := recover(); r != nil {
				c.logCallbackPanic("listener", r, "room", m.Room, "event", m.Event)
			}
		}()
		fn(m)
	}
}

// listenerKey names the listeners of an event: in a room, or outside
// rooms (room "", which no room is named). Names may hold any UTF-8,
// NUL included, so a key joined from the two strings could make two
// pairs meet.
type listenerKey struct{ room, event string }

// listen adds fn to the listeners of key. A key's entry goes with its
// last listener: a client that listens to many rooms or events in turn (a
// room per document opened) kept an entry per name for good.
func (c *Client) listen(key listenerKey, fn func(Message)) (off func()) {
	if fn == nil {
		return func() {}
	}
	c.handlersMu.Lock()
	defer c.handlersMu.Unlock()
	e := c.handlers[key]
	if e == nil {
		e = &emitter.Emitter[Message]{}
		c.handlers[key] = e
	}
	remove := e.On(c.guardListener(fn))
	return func() {
		remove()
		c.handlersMu.Lock()
		if c.handlers[key] == e && e.Len() == 0 {
			delete(c.handlers, key)
		}
		c.handlersMu.Unlock()
	}
}

func (c *Client) deliver(key listenerKey, m Message) {
	c.handlersMu.RLock()
	e := c.handlers[key]
	c.handlersMu.RUnlock()
	if e != nil {
		e.Emit(m)
	}
}

// Join adds the client to room and returns the member count. The client
// rejoins it after a reconnect until Leave, or until the server refuses a
// rejoin with ErrUnauthorized (Options.AllowJoin). A ctx that has ended
// already fails the Join at once, unsent, as it does a Call.
func (c *Client) Join(ctx context.Context, room string) (int, error) {
	c.mu.Lock()
	j := c.joining[room]
	if j == nil {
		j = &joinsInFlight{}
		c.joining[room] = j
	}
	j.n++
	c.mu.Unlock()
	n, err := c.membership(ctx, dispatch.KindJoin, room)
	c.mu.Lock()
	if err == nil && !j.left {
		c.rooms[room] = true
	}
	if j.n--; j.n == 0 && c.joining[room] == j {
		delete(c.joining, room)
	}
	c.mu.Unlock()
	return n, err
}

// joinsInFlight counts the Joins of a room in flight; left is set by a
// Leave of the room issued meanwhile. A Join recorded the room when its
// answer came, after a Leave issued later had forgotten it, and the
// reconnect that followed joined the room again (a reconnect audit).
type joinsInFlight struct {
	n    int
	left bool
}

// Leave removes the client from room and returns the member count. The
// client stops rejoining room at once, also when Leave fails: while the
// client is disconnected it returns ErrDisconnected, and the room, which
// the server dropped with the connection, is not rejoined. Unlike a Join,
// a Leave whose ctx has ended already is sent all the same, so that the
// server's membership follows the client's, and returns ctx's error.
func (c *Client) Leave(ctx context.Context, room string) (int, error) {
	c.memberMu.Lock()
	c.mu.Lock()
	delete(c.rooms, room)
	if j := c.joining[room]; j != nil {
		j.left = true
		delete(c.joining, room) // Joins issued from now on count anew
	}
	c.mu.Unlock()
	c.memberMu.Unlock()
	return c.membership(ctx, dispatch.KindLeave, room)
}

// membership sends a Join or Leave and waits for its answer.
func (c *Client) membership(ctx context.Context, kind dispatch.Kind, room string) (int, error) {
	if err := checkName("room", room); err != nil {
		return 0, err
	}
	if kind == dispatch.KindJoin && ctx.Err() != nil {
		// Sent, it would have made the client a member of a room it does
		// not know it is in: not recorded, not rejoined.
		return 0, ctxError(ctx)
	}
	cc, err := c.current()
	if err != nil {
		return 0, err
	}
	// CallTimeout bounds it as it bounds a call: a server that never
	// answered Joins held one with a ctx without deadline for as long as
	// the connection lived, whatever CallTimeout said (a client audit).
	deadline, hasDeadline := ctx.Deadline()
	if !hasDeadline && c.opts.CallTimeout > 0 {
		deadline, hasDeadline = time.Now().Add(c.opts.CallTimeout), true
	}
	if !cc.isReady() {
		if err := c.awaitReady(ctx, cc, deadline, hasDeadline); err != nil {
			return 0, err
		}
	}
	var ans joinAnswer
	pc := getPendingCall(&ans)
	c.mu.Lock()
	if err := c.stillCurrentLocked(cc); err != nil {
		c.mu.Unlock()
		putPendingCall(pc)
		return 0, err
	}
	pc.id = c.newID()
	if hasDeadline {
		// Armed under c.mu, as start arms a call's (see there).
		pc.handle = c.timeouts.Arm(deadline, callRef{pc, pc.id})
	}
	c.pending.add(pc)
	c.mu.Unlock()
	b := wire.Append(beginFrame(nil), &wire.Packet{Kind: kind, ID: pc.id, Room: []byte(room)})
	err = cc.enqueue(b, true)
	switch {
	case err == ErrDisconnected:
		c.settleRefused(cc, callRef{pc, pc.id})
	case err != nil:
		c.cancelCall(pc, err)
	}
	err = c.wait(ctx, cc, pc)
	return ans.Members, err
}

// Emit sends event with payload v to every member of room, the client
// included unless exceptSelf. The client must be a member of room (by
// its Join, or the server's Server.Join): the server drops an emit from a
// non-member, one Options.AllowEmit refuses, or one past the connection's
// Limits.MaxEmitRate, without an answer (it counts it in
// Metrics.DroppedEvents), and Emit returns nil once the
// packet is queued. A payload over the server's emit limit (its maxEmit
// capability, Limits.MaxEmitSize), which the server would drop likewise,
// is refused unsent with an error matching ErrMessageTooBig, as a packet
// over its maxMessage is. Event names starting with $ are the server's
// presence events: refused with ErrBadRequest.
func (c *Client) Emit(room, event string, v any, exceptSelf bool) error {
	if err := checkEmitNames(room, event); err != nil {
		return err
	}
	cc, err := c.current()
	if err != nil {
		return err
	}
	var flags uint8
	if exceptSelf {
		flags = wire.EmitExceptSender
	}
	head := wire.AppendEmit(beginFrame(nil), room, event, flags, nil)
	b, err := marshal(c.opts.Codec, head, v)
	if err != nil {
		return err
	}
	if err := cc.checkEmitSize(len(b) - len(head)); err != nil {
		return cc.refusedError(err)
	}
	return cc.refusedError(cc.enqueue(b, true))
}

// EmitUnreliable is Emit for events the room may miss without harm: on
// QUIC and WebTransport it goes as a datagram, on SCTP and WebRTC on the
// unordered stream or data channel that is never retransmitted, so it
// never waits behind other traffic, and the server relays it to the
// members the same way where their carriers allow (Server.EmitUnreliable);
// on WebSocket, or when it is too large for a datagram, it goes as Emit
// sends it. Like Emit, it fails with ErrMessageTooBig over the server's
// limits, and on a connection just reestablished first waits for the
// server's capabilities, which tell that limit.
func (c *Client) EmitUnreliable(room, event string, v any, exceptSelf bool) error {
	if err := checkEmitNames(room, event); err != nil {
		return err
	}
	cc, err := c.current()
	if err != nil {
		return err
	}
	var flags uint8
	if exceptSelf {
		flags = wire.EmitExceptSender
	}
	head := wire.AppendEmit(beginFrame(nil), room, event, flags, nil)
	b, err := marshal(c.opts.Codec, head, v)
	if err != nil {
		return err
	}
	// Held to the server's limits as Emit is: the server closes the
	// connection on a datagram over maxMessage (1009), and drops one over
	// maxEmit. The limits are known once the server's capabilities came
	// (checkEmitSize waits, as enqueue does): a reconnected connection is
	// current before, and its first datagrams went unchecked.
	if err := cc.checkEmitSize(len(b) - len(head)); err != nil {
		return err
	}
	if err := cc.checkSize(len(b) - frameHeadroom); err != nil {
		return err
	}
	if st, ok := cc.link.sendDatagram(b[frameHeadroom:]); ok {
		return cc.refusedError(cc.sendError(st))
	}
	return cc.refusedError(cc.enqueue(b, true))
}

// Event sends a fire-and-forget event to the server's event handlers.
// Names starting with $ are the protocol's: refused with ErrBadRequest.
func (c *Client) Event(name string, v any) error {
	if err := checkName("event", name); err != nil {
		return err
	}
	cc, err := c.current()
	if err != nil {
		return err
	}
	b, err := marshal(c.opts.Codec, wire.Append(beginFrame(nil), &wire.Packet{Kind: dispatch.KindEvent, Name: []byte(name)}), v)
	if err != nil {
		return err
	}
	return cc.refusedError(cc.enqueue(b, true))
}
