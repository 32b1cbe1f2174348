package compat

import (
	"errors"
	"maps"
	"slices"
	"sync"

	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/corkwriter"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/emitter"
)

// rooms is the server's in-memory room table. A room exists while it has
// members.
type rooms struct {
	srv     *Server
	mu      sync.RWMutex
	byName  map[string]*room
	onJoin  emitter.Emitter[RoomEvent]
	onLeave emitter.Emitter[RoomEvent]
	// now is the emit budgets' clock (clock), monoNow when nil. A test
	// stops it, so that what a budget lets through is up to the test and
	// not to how long its emits take on a loaded machine.
	now func() int64
}

// room keeps its members in a slice for the emit loop and an index for
// O(1) leave (swap with the last).
type room struct {
	name    string
	mu      sync.RWMutex
	members []*Peer
	index   map[*Peer]int

	// With Options.PresenceInterval: whether a presence event is
	// scheduled, and the count the last one carried.
	presenceDue  bool
	presenceSent int
	// changes numbers the room's joins and leaves (under mu).
	changes uint64

	// presenceMu orders the room's presence events: each is sent, to
	// every member's queue, with it held, so members see them in the
	// order they were sent. lastSent is the change whose event was sent
	// last, with one per change.
	presenceMu sync.Mutex
	lastSent   uint64
}

// peerRooms is a connection's side of its rooms, under Peer.roomsMu: the
// rooms it is in and its emit budget. Made at its first Join: a
// connection in no room cannot emit, and pays nothing.
type peerRooms struct {
	byName map[string]*room
	emit   emitBudget
}

// in returns the room called name if the connection is in it; pr may be
// nil, for a connection that never joined.
func (pr *peerRooms) in(name string) *room {
	if pr == nil {
		return nil
	}
	return pr.byName[name]
}

// RoomEvent is raised when a connection joins or leaves a room.
type RoomEvent struct {
	Room    string
	Peer    *Peer
	Members int // after the change
}

// Emit result of a room emit.
type EmitResult struct {
	Delivered int // members the event was queued or written for
	Dropped   int // members skipped: their outbox was full, or the event is over their message limit
}

var errTooManyRooms = &Error{Code: wire.CodeBadRequest, Message: "too many rooms on this connection"}

func (rs *rooms) init(s *Server) {
	rs.srv = s
	rs.byName = map[string]*room{}
}

func (rs *rooms) get(name string) *room {
	rs.mu.RLock()
	defer rs.mu.RUnlock()
	return rs.byName[name]
}

// join adds p to the room and returns the member count.
func (rs *rooms) join(p *Peer, name string) (int, error) {
	if err := checkName("room", name); err != nil {
		return 0, err // from Server.Join: the decoder checked a client's
	}
	p.roomsMu.Lock()
	if p.rooms == nil {
		p.rooms = &peerRooms{byName: map[string]*room{}}
	}
	if r, in := p.rooms.byName[name]; in {
		p.roomsMu.Unlock()
		return r.count(), nil
	}
	if len(p.rooms.byName) >= rs.srv.opts.Limits.MaxRooms {
		p.roomsMu.Unlock()
		return 0, errTooManyRooms
	}
	if p.closed.Load() {
		p.roomsMu.Unlock()
		return 0, ErrClosed
	}
	rs.mu.Lock()
	r := rs.byName[name]
	if r == nil {
		r = &room{name: name, index: map[*Peer]int{}}
		rs.byName[name] = r
	}
	r.mu.Lock()
	rs.mu.Unlock()
	r.index[p] = len(r.members)
	r.members = append(r.members, p)
	n := len(r.members)
	r.changes++
	change := r.changes
	r.mu.Unlock()
	p.rooms.byName[name] = r
	p.roomsMu.Unlock()

	rs.presence(r, "$join", n, change)
	rs.onJoin.Emit(RoomEvent{Room: name, Peer: p, Members: n})
	return n, nil
}

// leave removes p from the room and returns the member count.
func (rs *rooms) leave(p *Peer, name string) int {
	p.roomsMu.Lock()
	r := p.rooms.in(name)
	if r == nil {
		p.roomsMu.Unlock()
		if r := rs.get(name); r != nil {
			return r.count()
		}
		return 0
	}
	// Out of the room before p.roomsMu is released: a Join of p to the
	// same room in between would find r still in the table and add p to
	// it a second time, and this remove would take out one entry of two
	// and leave a member that no Leave or close removes.
	delete(p.rooms.byName, name)
	n, change := rs.remove(r, p)
	p.roomsMu.Unlock()
	rs.presence(r, "$leave", n, change)
	rs.onLeave.Emit(RoomEvent{Room: name, Peer: p, Members: n})
	return n
}

// remove takes p out of r, and r out of the table when it empties, and
// returns the member count and the change's number.
func (rs *rooms) remove(r *room, p *Peer) (members int, change uint64) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	i, ok := r.index[p]
	if !ok {
		return len(r.members), r.changes
	}
	last := len(r.members) - 1
	r.members[i] = r.members[last]
	r.index[r.members[i]] = i
	r.members[last] = nil
	r.members = r.members[:last]
	delete(r.index, p)
	if len(r.members) == 0 && rs.byName[r.name] == r {
		delete(rs.byName, r.name)
	}
	r.changes++
	return len(r.members), r.changes
}

// leaveAll removes a closed connection from every room it was in.
func (rs *rooms) leaveAll(p *Peer) {
	p.roomsMu.Lock()
	var names []string
	if p.rooms != nil {
		names = slices.Collect(maps.Keys(p.rooms.byName))
	}
	p.roomsMu.Unlock()
	for _, name := range names {
		rs.leave(p, name)
	}
}

func (r *room) count() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.members)
}

type presencePayload struct {
	Members int `json:"members"`
}

// presence tells the room's members its new size after change (PROTOCOL.md
// §4.5): in the room's next coalesced presence event
// (Options.PresenceInterval, never 0 after the defaults), or at once when
// the interval is negative. At once, two changes made together race to
// send their events; the later change's event is sent and the earlier's
// is dropped if it comes second, since its count is out of date: the
// last event a member gets carries the room's size.
func (rs *rooms) presence(r *room, event string, members int, change uint64) {
	if rs.srv.opts.NoPresence {
		return
	}
	interval := rs.srv.opts.PresenceInterval
	if interval < 0 {
		r.presenceMu.Lock()
		defer r.presenceMu.Unlock()
		if change > r.lastSent {
			r.lastSent = change
			rs.sendPresence(r, event, members)
		}
		return
	}
	r.mu.Lock()
	due := r.presenceDue
	r.presenceDue = true
	r.mu.Unlock()
	if !due {
		rs.srv.timeouts.ArmAfter(interval, &presenceDue{rs: rs, r: r})
	}
}

// presenceDue is a room's coalesced presence event, fired by the server's
// timeout scheduler.
type presenceDue struct {
	rs *rooms
	r  *room
}

func (d *presenceDue) timeout() {
	r := d.r
	r.presenceMu.Lock()
	defer r.presenceMu.Unlock()
	r.mu.Lock()
	n, last := len(r.members), r.presenceSent
	r.presenceDue, r.presenceSent = false, n
	r.mu.Unlock()
	switch {
	case n > last:
		d.rs.sendPresence(r, "$join", n)
	case n < last:
		d.rs.sendPresence(r, "$leave", n)
	}
}

// sendPresence sends the presence event to every member of r.
func (rs *rooms) sendPresence(r *room, event string, members int) {
	if members == 0 {
		return
	}
	b := wire.AppendEmit(beginEmit(len(r.name)+len(event), 16), r.name, event, 0, nil)
	b, err := marshal(rs.srv.opts.Codec, b, presencePayload{Members: members})
	if err == nil {
		rs.emitPacket(r, nil, b, false)
	}
}

// emitPacket sends one Emit packet to every member of r but except. The
// packet is framed once (wsframe.Prepared) and, for members that
// negotiated permessage-deflate, compressed once per distinct window
// (deflatecache); each member's outbox references the shared frame.
// Unreliable, it goes as a datagram to the members whose carrier has them
// and reliably to the others. framed is the packet after a frame's
// headroom (beginEmit).
func (rs *rooms) emitPacket(r *room, except *Peer, framed []byte, unreliable bool) EmitResult {
	var res EmitResult
	bc, err := newBroadcast(framed)
	if err != nil {
		return res
	}
	pkt := bc.pkt
	m := &rs.srv.metrics
	m.emits.Add(1)
	var slow []*Peer
	r.mu.RLock()
	for _, p := range r.members {
		if p == except {
			continue
		}
		if p.overClientLimit(len(pkt)) {
			res.Dropped++ // not sent: the member would close its connection (1009)
			continue
		}
		var st corkwriter.Status
		sent := false
		if unreliable {
			st, sent = p.link.sendDatagram(pkt)
		}
		switch {
		case sent:
		case p.answersWaiting.Load() > 0 && rs.srv.opts.SlowConsumer != Disconnect:
			// Its outbox is kept for an answer waiting for room, as
			// from its events (Peer.send). Under Disconnect the emit
			// goes in if it fits: a member is not disconnected for
			// the wait of an answer.
			st = corkwriter.Dropped
		default:
			st = p.link.sendPrepared(bc)
		}
		switch st {
		case corkwriter.Sent, corkwriter.Queued:
			res.Delivered++
		case corkwriter.Dropped:
			res.Dropped++
			// A datagram queue that is full drops an unreliable emit,
			// which may be lost anyway: that is no slow consumer.
			if rs.srv.opts.SlowConsumer == Disconnect && !sent {
				slow = append(slow, p)
			}
		}
	}
	r.mu.RUnlock()
	m.messagesOut.Add(uint64(res.Delivered))
	m.bytesOut.Add(uint64(res.Delivered * len(pkt)))
	m.emitDrops.Add(uint64(res.Dropped))
	for _, p := range slow {
		// A close frame cannot pass a full outbox: the member's socket is
		// closed and it sees the connection drop (1006 on its side).
		p.dropSlow()
	}
	return res
}

// Emit sends event with payload v to every member of room and reports how
// many members it reached. Members whose outbound queue is full miss it
// (or are disconnected, by Options.SlowConsumer): the room never waits.
// An event or room name the protocol cannot carry, or an event name
// starting with $ (presence events), fails with ErrBadRequest and reaches
// no one.
func (s *Server) Emit(room, event string, v any) (EmitResult, error) {
	return s.EmitExcept(room, nil, event, v)
}

// EmitUnreliable is Emit for events a member may miss without harm
// (positions, cursors, levels): to members on QUIC and WebTransport it
// goes as a datagram, to members on SCTP and WebRTC on the unordered
// stream or data channel that is never retransmitted, so it never waits
// behind other traffic; members on WebSocket, and events too large for a
// datagram, get it as Emit sends it. Delivered counts datagrams handed to
// the carrier, not datagrams that arrived.
func (s *Server) EmitUnreliable(room, event string, v any) (EmitResult, error) {
	return s.emit(room, nil, event, v, true)
}

// EmitExcept is Emit skipping one member, typically the sender.
func (s *Server) EmitExcept(room string, except *Peer, event string, v any) (EmitResult, error) {
	return s.emit(room, except, event, v, false)
}

func (s *Server) emit(room string, except *Peer, event string, v any, unreliable bool) (EmitResult, error) {
	if err := checkEmitNames(room, event); err != nil {
		return EmitResult{}, err
	}
	r := s.rooms.get(room)
	if r == nil {
		return EmitResult{}, nil
	}
	b := wire.AppendEmit(beginEmit(len(room)+len(event), payloadHint(v)), room, event, 0, nil)
	b, err := marshal(s.opts.Codec, b, v)
	if err != nil {
		return EmitResult{}, err
	}
	return s.rooms.emitPacket(r, except, b, unreliable), nil
}

// Join adds p to room and returns the room's member count, as a client's
// Join does but without asking Options.AllowJoin. It fails with
// ErrBadRequest (errors.Is) for a room name the protocol cannot carry or
// past Limits.MaxRooms, and with ErrClosed once p's connection has ended.
// The Go client rejoins after a reconnect only the rooms it joined itself:
// a server that joins its peers (from OnConnect, say) does it again for
// the new connection, which is a new Peer.
func (s *Server) Join(p *Peer, room string) (int, error) { return s.rooms.join(p, room) }

// Leave removes p from room and returns the room's member count.
func (s *Server) Leave(p *Peer, room string) int { return s.rooms.leave(p, room) }

// Members returns the number of connections in room.
func (s *Server) Members(room string) int {
	if r := s.rooms.get(room); r != nil {
		return r.count()
	}
	return 0
}

// OnJoin registers fn to run whenever a connection joins a room; the
// returned function unregisters it. fn runs on the joining goroutine,
// often the connection's read loop: a panic in fn is logged and counted,
// as a handler's is, and the join stands.
func (s *Server) OnJoin(fn func(RoomEvent)) (off func()) {
	return s.rooms.onJoin.On(s.guardRoomListener("OnJoin", fn))
}

// OnLeave registers fn to run whenever a connection leaves a room,
// including when it closes. fn runs as OnJoin's does.
func (s *Server) OnLeave(fn func(RoomEvent)) (off func()) {
	return s.rooms.onLeave.On(s.guardRoomListener("OnLeave", fn))
}

// guardRoomListener wraps a room listener so that its panic is logged
// and counted instead of ending the process: a client's join would
// otherwise bring the server down.
func (s *Server) guardRoomListener(name string, fn func(RoomEvent)) func(RoomEvent) {
	if fn == nil {
		return nil
	}
	return func(ev RoomEvent) { s.runHook(name, func() { fn(ev) }) }
}

type joinAnswer struct {
	Room    string `json:"room"`
	Members int    `json:"members"`
}

func (p *Peer) onJoin(body []byte) error  { return p.onMembership(dispatch.KindJoin, body) }
func (p *Peer) onLeave(body []byte) error { return p.onMembership(dispatch.KindLeave, body) }

func (p *Peer) onMembership(kind dispatch.Kind, body []byte) error {
	pk, err := decode(kind, body)
	if err != nil {
		return err
	}
	name := string(pk.Room)
	var n int
	if kind == dispatch.KindJoin {
		if err = p.srv.allowJoin(p, name); err == nil {
			n, err = p.srv.rooms.join(p, name)
		}
	} else {
		n = p.srv.rooms.leave(p, name)
	}
	if err != nil {
		p.answerError(pk.ID, err, true)
		return nil
	}
	if pk.ID == 0 {
		return nil
	}
	bp := scratchBufs.Get().(*[]byte)
	defer scratchBufs.Put(bp)
	b := wire.AppendResult(beginFrame(*bp), pk.ID, nil)
	b, err = marshal(p.codec, b, joinAnswer{Room: name, Members: n})
	*bp = b[:0]
	if err != nil {
		p.answerError(pk.ID, err, true)
		return nil
	}
	p.sendAnswer(b, true)
	return nil
}

// allowJoin asks Options.AllowJoin whether p may join room: nil, or the
// error to answer (an *Error).
func (s *Server) allowJoin(p *Peer, room string) (err error) {
	allow := s.opts.AllowJoin
	if allow == nil {
		return nil
	}
	if !s.runHook("AllowJoin", func() { err = allow(p, room) }) {
		err = ErrInternal
	}
	if err == nil {
		return nil
	}
	s.metrics.refusedJoins.Add(1)
	if e := (*Error)(nil); !errors.As(err, &e) {
		err = ErrUnauthorized
	}
	return err
}

// allowEmit asks Options.AllowEmit whether p's emit of event may reach
// room; a panic refuses it.
func (s *Server) allowEmit(p *Peer, room string, event []byte) (ok bool) {
	allow := s.opts.AllowEmit
	if allow == nil {
		return true
	}
	return s.runHook("AllowEmit", func() { ok = allow(p, room, string(event)) }) && ok
}

// onEmit relays a client's room event to the room (PROTOCOL.md §4.6). The
// payload is passed through as the client encoded it.
func (p *Peer) onEmit(body []byte) error { return p.relayEmit(body, false) }

// relayEmit relays a client's emit; one that arrived as a datagram leaves
// as datagrams too, and is held to the same limits.
func (p *Peer) relayEmit(body []byte, unreliable bool) error {
	pk, err := decode(dispatch.KindEmit, body)
	if err != nil {
		return err
	}
	var r *room
	p.roomsMu.Lock()
	if p.rooms != nil {
		r = p.rooms.byName[string(pk.Room)] // no allocation: the conversion is only a lookup key
	}
	p.roomsMu.Unlock()
	var except *Peer
	if pk.Flags&wire.EmitExceptSender != 0 {
		except = p
	}
	// Charged last: what the other checks drop is not relayed, and costs
	// the budget nothing.
	if r == nil || pk.Name[0] == '$' || p.emitTooBig(r.name, pk.Name, len(pk.Payload)) || !p.srv.allowEmit(p, r.name, pk.Name) ||
		!p.chargeEmit(r, except != nil, pk.Name) {
		p.srv.metrics.droppedEvents.Add(1)
		return nil
	}
	b := beginEmit(len(pk.Room)+len(pk.Name), len(pk.Payload))
	b = wire.Append(b, &wire.Packet{Kind: dispatch.KindEmit, Room: pk.Room, Name: pk.Name, Payload: pk.Payload})
	p.srv.rooms.emitPacket(r, except, b, unreliable)
	return nil
}

// emitTooBig reports whether a client's emit is over Limits.MaxEmitSize,
// and logs the first such emit of the connection.
func (p *Peer) emitTooBig(room string, event []byte, size int) bool {
	limit := p.srv.opts.Limits.MaxEmitSize
	if limit <= 0 || size <= limit {
		return false
	}
	if p.setOnce(onceWarnedEmit) {
		p.srv.opts.Logger.Warn("hotpath: room emit over Limits.MaxEmitSize dropped (logged once per connection)",
			"peer", p.id, "room", room, "event", string(event), "bytes", size, "limit", limit)
	}
	return true
}
