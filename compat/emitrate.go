package compat

// emitBudget bounds how many member deliveries one connection's room
// emits cost a second (Limits.MaxEmitRate): a token bucket of rate
// deliveries a second holding one second's worth.
//
// Why: the server relays a client's emit to every member of the room, so
// one connection sending small emits as fast as it can to a room of a
// thousand members made a thousand deliveries (a queue append each, and
// a writev) per emit, an amplification no other limit bounded. The
// bucket is charged what is relayed, the room's members (less the
// sender for an except-sender emit), not the emits: an emit to a room of
// two and one to a room of ten thousand are not the same work.
//
// It is kept as what was spent, so that its zero value is a full bucket:
// it lives in the connection's room state (peerRooms, under
// Peer.roomsMu), made at its first Join, and costs no clock read until
// its first emit.
type emitBudget struct {
	// spent is what the bucket owes: 0 when full, the burst when empty,
	// above it after an emit larger than the burst.
	spent float64
	last  int64 // monoNow of the last charge; 0 (long ago) for a new bucket
}

// take charges an emit of n deliveries at now (monoNow) to a bucket of
// rate deliveries a second, the burst being rate, and reports whether
// it was paid: an emit that costs no more than what is left passes, and
// one larger than the whole burst passes from a full bucket and leaves
// it owing the rest, so that no room is too large to emit to while the
// rate over time still holds. One not paid is not charged.
func (b *emitBudget) take(n int, now int64, rate int) bool {
	burst := float64(rate)
	b.spent = max(0, b.spent-earned(&b.last, now, burst))
	if b.spent > 0 && b.spent+float64(n) > burst {
		return false
	}
	b.spent += float64(n)
	return true
}

// defaultMaxEmitRate is Limits.MaxEmitRate's default, in member
// deliveries a second: far above what a client's emits make (60 updates
// a second to a room of a thousand make 60,000), while a connection held
// to it costs about a tenth of a core. BenchmarkRoomEmit (`go test -run
// '^$' -bench 'BenchmarkRoomEmit$'`) takes 40-42 µs an emit to 200
// members on 2 cores, about 200 ns a delivery, the members' reads
// included (bench/results/room-emit-prepared-after-2026-12-06.txt).
const defaultMaxEmitRate = 500_000

// chargeEmit takes the deliveries of p's emit to r from p's emit budget
// (Limits.MaxEmitRate) and reports whether the emit may be relayed. One
// it cannot pay is counted in EmitThrottled and, the first time on the
// connection, logged; the caller drops it.
func (p *Peer) chargeEmit(r *room, exceptSender bool, event []byte) bool {
	rate := p.srv.opts.Limits.MaxEmitRate
	if rate < 0 {
		return true
	}
	n := r.count()
	if exceptSender {
		n-- // the sender is a member: it emitted to one of its rooms
	}
	if n <= 0 {
		return true
	}
	// Under roomsMu: the read loop and the datagram handler may both
	// charge. p.rooms is set, since r came from it, and never unset.
	p.roomsMu.Lock()
	ok := p.rooms.emit.take(n, p.srv.rooms.clock(), rate)
	p.roomsMu.Unlock()
	if ok {
		return true
	}
	p.srv.metrics.emitThrottled.Add(1)
	if p.setOnce(onceWarnedEmitRate) {
		p.srv.opts.Logger.Warn("hotpath: room emits past Limits.MaxEmitRate dropped (logged once per connection)",
			"peer", p.id, "room", r.name, "event", string(event), "deliveries", n, "rate", rate)
	}
	return false
}

// clock is the emit budgets' clock: monoNow, unless a test stopped it.
func (rs *rooms) clock() int64 {
	if rs.now != nil {
		return rs.now()
	}
	return monoNow()
}
