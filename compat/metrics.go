package compat

import (
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/hotpath-go/hotpath/wsframe"
)

// metrics are the server's counters: atomic, so the hot path pays one
// uncontended add per event.
type metrics struct {
	connections         atomic.Int64
	connectionsTotal    atomic.Uint64
	handshakeFailures   atomic.Uint64
	messagesIn          atomic.Uint64
	messagesOut         atomic.Uint64
	bytesIn             atomic.Uint64
	bytesOut            atomic.Uint64
	dictCompressed      atomic.Uint64
	compressionFailures atomic.Uint64
	inflateThrottled    atomic.Uint64
	malformed           atomic.Uint64
	unknownMethods      atomic.Uint64
	droppedEvents       atomic.Uint64
	overloaded          atomic.Uint64
	panics              atomic.Uint64
	lateAnswers         atomic.Uint64
	emits               atomic.Uint64
	emitDrops           atomic.Uint64
	emitThrottled       atomic.Uint64
	slowConsumers       atomic.Uint64
	idleTimeouts        atomic.Uint64
	refusedJoins        atomic.Uint64
	refusedConnections  atomic.Uint64
	refusedPerAddress   atomic.Uint64

	closesMu sync.Mutex
	closes   map[wsframe.CloseCode]uint64
}

// CloseOther is the key of Metrics.Closes, and the code label
// "other" of hotpath_closes_total, that counts the close codes a peer
// chose outside 1000-1015 (RFC 6455's) and 4000-4015, where browser
// clients carry the protocol's codes (PROTOCOL.md §7): the application
// codes 3000-4999, and the reserved 1016-2999, which a QUIC or
// WebTransport close carries though a WebSocket close frame may not. A
// peer could otherwise make some 4,000 counters, and as many metric
// series, by closing with each code in turn.
const CloseOther wsframe.CloseCode = 0

func (m *metrics) countClose(code wsframe.CloseCode) {
	switch {
	case code == 0:
		code = wsframe.CloseAbnormal
	case code > 1015 && (code < 4000 || code > 4015):
		code = CloseOther
	}
	m.closesMu.Lock()
	if m.closes == nil {
		m.closes = map[wsframe.CloseCode]uint64{}
	}
	m.closes[code]++
	m.closesMu.Unlock()
}

// Metrics is a snapshot of a server's counters since it started.
type Metrics struct {
	Connections         int64  // open now
	ConnectionsTotal    uint64 // accepted since start
	HandshakeFailures   uint64 // upgrades refused or failed
	MessagesIn          uint64 // carrier messages (a Batch of calls counts once); binary streams are not counted
	MessagesOut         uint64 // carrier messages; room emits count once per member reached
	BytesIn             uint64 // packet bytes, after decompression (streams not counted)
	BytesOut            uint64 // packet bytes, before compression (streams not counted)
	DictCompressed      uint64 // packets sent compressed with the dictionary
	CompressionFailures uint64 // dictionary-compressed packets that failed to decompress (permessage-deflate failures: Closes[1007])
	InflateThrottled    uint64 // times a connection's inflating passed Limits.MaxInflateRate: its reading paused, or a compressed datagram was dropped
	Malformed           uint64 // malformed packets and unknown kinds
	UnknownMethods      uint64 // calls and streams of unregistered methods, answered NotFound
	DroppedEvents       uint64 // client events and emits dropped (unknown, undecodable, not a member, refused by AllowEmit, over MaxEmitSize, past MaxEmitRate, datagrams while 256 KiB of them wait for their handlers on SCTP and WebRTC, or compressed datagrams past Limits.MaxInflateRate)
	Overloaded          uint64 // calls refused past MaxInFlight
	Panics              uint64 // recovered in handlers, hooks and room listeners
	LateAnswers         uint64 // answers to asks no longer pending
	Emits               uint64 // room emits
	EmitDrops           uint64 // members skipped by an emit: outbox full, or over their message limit
	EmitThrottled       uint64 // client emits dropped past their connection's Limits.MaxEmitRate (counted in DroppedEvents too)
	SlowConsumers       uint64 // connections dropped for not reading
	IdleTimeouts        uint64 // connections closed for silence (1001 HP_IDLE_TIMEOUT)
	RefusedJoins        uint64 // client Joins Options.AllowJoin refused
	RefusedConnections  uint64 // connections refused past Options.MaxConnections (counted in HandshakeFailures too)
	RefusedPerAddress   uint64 // connections refused past Options.MaxConnectionsPerAddress, the server below MaxConnections (counted in HandshakeFailures too, not in RefusedConnections; an SCTP client's resent INITs, and a QUIC ClientHello's two Initial packets, count once)
	// Closes counts ended connections by close code; 1006 when no close
	// frame was exchanged, CloseOther for most codes above 1015.
	Closes map[wsframe.CloseCode]uint64
}

// Metrics returns a snapshot of the server's counters.
func (s *Server) Metrics() Metrics {
	m := &s.metrics
	snap := Metrics{
		Connections: m.connections.Load(), ConnectionsTotal: m.connectionsTotal.Load(),
		HandshakeFailures: m.handshakeFailures.Load(),
		MessagesIn:        m.messagesIn.Load(), MessagesOut: m.messagesOut.Load(),
		BytesIn: m.bytesIn.Load(), BytesOut: m.bytesOut.Load(),
		DictCompressed: m.dictCompressed.Load(), CompressionFailures: m.compressionFailures.Load(),
		InflateThrottled: m.inflateThrottled.Load(),
		Malformed:        m.malformed.Load(), UnknownMethods: m.unknownMethods.Load(),
		DroppedEvents: m.droppedEvents.Load(), Overloaded: m.overloaded.Load(),
		Panics: m.panics.Load(), LateAnswers: m.lateAnswers.Load(),
		Emits: m.emits.Load(), EmitDrops: m.emitDrops.Load(), EmitThrottled: m.emitThrottled.Load(),
		SlowConsumers: m.slowConsumers.Load(), IdleTimeouts: m.idleTimeouts.Load(),
		RefusedJoins: m.refusedJoins.Load(), RefusedConnections: m.refusedConnections.Load(),
		RefusedPerAddress: m.refusedPerAddress.Load(),
		Closes:            map[wsframe.CloseCode]uint64{},
	}
	m.closesMu.Lock()
	for c, n := range m.closes {
		snap.Closes[c] = n
	}
	m.closesMu.Unlock()
	return snap
}

// MetricsHandler serves the counters in the Prometheus text exposition
// format. Mount it where you choose; the server does not expose it by
// itself.
func (s *Server) MetricsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		s.Metrics().WritePrometheus(w)
	})
}

// WritePrometheus writes m in the Prometheus text exposition format.
func (m Metrics) WritePrometheus(w io.Writer) {
	gauge := func(name, help string, v int64) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n%s %d\n", name, help, name, name, v)
	}
	counter := func(name, help string, v uint64) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s counter\n%s %d\n", name, help, name, name, v)
	}
	gauge("hotpath_connections", "Open connections.", m.Connections)
	counter("hotpath_connections_total", "Connections accepted.", m.ConnectionsTotal)
	counter("hotpath_handshake_failures_total", "Upgrade requests refused or failed.", m.HandshakeFailures)
	counter("hotpath_messages_in_total", "Messages received (WebSocket messages, or packets on the other carriers, binary streams not counted); a Batch counts once.", m.MessagesIn)
	counter("hotpath_messages_out_total", "Messages sent (WebSocket messages, or packets on the other carriers, binary streams not counted); a Batch counts once, a room emit once per member reached.", m.MessagesOut)
	counter("hotpath_bytes_in_total", "Packet bytes received, after decompression; binary streams not counted.", m.BytesIn)
	counter("hotpath_bytes_out_total", "Packet bytes sent, before compression; binary streams not counted.", m.BytesOut)
	counter("hotpath_dictionary_compressed_total", "Packets sent compressed with the router dictionary.", m.DictCompressed)
	counter("hotpath_compression_failures_total", "Packets compressed with the router dictionary that failed to decompress (a permessage-deflate message that does not inflate closes the connection with 1007, counted by code).", m.CompressionFailures)
	counter("hotpath_inflate_throttled_total", "Times a connection's inflating passed Limits.MaxInflateRate: its reading paused, or a compressed datagram was dropped.", m.InflateThrottled)
	counter("hotpath_malformed_total", "Malformed packets and unknown kinds.", m.Malformed)
	counter("hotpath_unknown_methods_total", "Calls of unknown methods.", m.UnknownMethods)
	counter("hotpath_dropped_events_total", "Client events and emits dropped: unknown, undecodable, not a member, refused by Options.AllowEmit, over Limits.MaxEmitSize, past Limits.MaxEmitRate, datagrams past a full inbox (SCTP, WebRTC), or compressed datagrams past Limits.MaxInflateRate.", m.DroppedEvents)
	counter("hotpath_overloaded_total", "Calls refused past MaxInFlight.", m.Overloaded)
	counter("hotpath_panics_total", "Panics recovered in handlers, hooks and room listeners.", m.Panics)
	counter("hotpath_late_answers_total", "Answers to asks no longer pending.", m.LateAnswers)
	counter("hotpath_emits_total", "Room emits.", m.Emits)
	counter("hotpath_emit_drops_total", "Room members skipped: outbox full, or the event over their message limit.", m.EmitDrops)
	counter("hotpath_emit_throttled_total", "Client room emits dropped past their connection's Limits.MaxEmitRate (also counted in hotpath_dropped_events_total).", m.EmitThrottled)
	counter("hotpath_slow_consumers_total", "Connections dropped for not reading.", m.SlowConsumers)
	counter("hotpath_idle_timeouts_total", "Connections closed for silence.", m.IdleTimeouts)
	counter("hotpath_refused_joins_total", "Client joins Options.AllowJoin refused.", m.RefusedJoins)
	counter("hotpath_refused_connections_total", "Connections refused past Options.MaxConnections (also counted in hotpath_handshake_failures_total).", m.RefusedConnections)
	counter("hotpath_refused_per_address_total", "Connections refused past Options.MaxConnectionsPerAddress, the server below Options.MaxConnections (also counted in hotpath_handshake_failures_total, not in hotpath_refused_connections_total); an SCTP client's resent INITs count once.", m.RefusedPerAddress)
	fmt.Fprintf(w, "# HELP hotpath_closes_total Connections ended, by close code.\n# TYPE hotpath_closes_total counter\n")
	codes := make([]int, 0, len(m.Closes))
	for c := range m.Closes {
		codes = append(codes, int(c))
	}
	sort.Ints(codes)
	for _, c := range codes {
		label := strconv.Itoa(c)
		if wsframe.CloseCode(c) == CloseOther {
			label = "other"
		}
		fmt.Fprintf(w, "hotpath_closes_total{code=\"%s\"} %d\n", label, m.Closes[wsframe.CloseCode(c)])
	}
}

// tracker counts work in progress and lets Shutdown wait for it to reach
// zero; unlike a sync.WaitGroup it may be added to while someone waits.
type tracker struct {
	mu   sync.Mutex
	n    int
	zero chan struct{}
}

func (t *tracker) add() {
	t.mu.Lock()
	t.n++
	t.mu.Unlock()
}

func (t *tracker) done() {
	t.mu.Lock()
	t.n--
	if t.n == 0 && t.zero != nil {
		close(t.zero)
		t.zero = nil
	}
	t.mu.Unlock()
}

// idle returns a channel closed when the count is zero.
func (t *tracker) idle() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == 0 {
		c := make(chan struct{})
		close(c)
		return c
	}
	if t.zero == nil {
		t.zero = make(chan struct{})
	}
	return t.zero
}
