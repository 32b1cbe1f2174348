package compat

import "sync/atomic"

// ClientMetrics is a snapshot of a Client's counters since Dial, over all
// its connections: what the client held back or dropped on its own,
// which no error returns and a server's Metrics cannot see.
type ClientMetrics struct {
	// Reconnects counts the connections re-established after one
	// dropped (the server's capabilities received again).
	Reconnects uint64
	// InflateThrottled counts the times the client's inflating passed
	// its Limits.MaxInflateRate: its reading paused, or a compressed
	// datagram was dropped (counted in DroppedDatagrams too).
	InflateThrottled uint64
	// DroppedDatagrams counts the server's datagrams the client dropped
	// unhandled: compressed past Limits.MaxInflateRate, or, on SCTP and
	// WebRTC, with 256 KiB of them already waiting for their listeners.
	// Datagrams lost on the way, or dropped by quic-go while unread, are
	// not seen, so not counted.
	DroppedDatagrams uint64
	// OverloadedAsks counts the server's asks the client answered
	// ErrOverloaded at once, without running their handler, because
	// Limits.MaxInFlight of its ask handlers were running (handlers of
	// an earlier connection that still run count), as the server's
	// Metrics.Overloaded counts the calls it refuses. A count that grows
	// says the server asks faster than the handlers answer, or that
	// handlers hang.
	OverloadedAsks uint64
	// DroppedAnswers counts the answers to the server's asks that the
	// client made and could not send because its outbound queue
	// (Limits.MaxOutboxBytes) stayed full: an answer waits up to 3 s for
	// room, an ask's ErrOverloaded answer (counted in OverloadedAsks too)
	// none. The server's Ask waits for its timeout instead, so a count
	// that grows says the connection carries more than it can, or the
	// server reads too slowly. Answers lost because the connection ended are
	// not counted: the server's Ask fails with the connection.
	DroppedAnswers uint64
}

// clientMetrics are a Client's counters. Each counts an event that is
// rare on a healthy connection, so none costs anything per call.
type clientMetrics struct {
	reconnects       atomic.Uint64
	inflateThrottled atomic.Uint64
	droppedDatagrams atomic.Uint64
	overloadedAsks   atomic.Uint64
	droppedAnswers   atomic.Uint64
}

// Metrics returns a snapshot of the client's counters.
func (c *Client) Metrics() ClientMetrics {
	m := &c.metrics
	return ClientMetrics{
		Reconnects:       m.reconnects.Load(),
		InflateThrottled: m.inflateThrottled.Load(),
		DroppedDatagrams: m.droppedDatagrams.Load(),
		OverloadedAsks:   m.overloadedAsks.Load(),
		DroppedAnswers:   m.droppedAnswers.Load(),
	}
}

// throttled counts a pause of the reading for Limits.MaxInflateRate
// (inflatePacer).
func (cc *clientConn) throttled() { cc.c.metrics.inflateThrottled.Add(1) }

// datagramDropped counts a datagram a full inbox dropped
// (datagramDropCounter).
func (cc *clientConn) datagramDropped() { cc.c.metrics.droppedDatagrams.Add(1) }
