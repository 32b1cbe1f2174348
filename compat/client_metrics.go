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
}

// clientMetrics are a Client's counters. Each counts an event that is
// rare on a healthy connection, so none costs anything per call.
type clientMetrics struct {
	reconnects       atomic.Uint64
	inflateThrottled atomic.Uint64
	droppedDatagrams atomic.Uint64
}

// Metrics returns a snapshot of the client's counters.
func (c *Client) Metrics() ClientMetrics {
	m := &c.metrics
	return ClientMetrics{
		Reconnects:       m.reconnects.Load(),
		InflateThrottled: m.inflateThrottled.Load(),
		DroppedDatagrams: m.droppedDatagrams.Load(),
	}
}

// throttled counts a pause of the reading for Limits.MaxInflateRate
// (inflatePacer).
func (cc *clientConn) throttled() { cc.c.metrics.inflateThrottled.Add(1) }

// datagramDropped counts a datagram a full inbox dropped
// (datagramDropCounter).
func (cc *clientConn) datagramDropped() { cc.c.metrics.droppedDatagrams.Add(1) }
