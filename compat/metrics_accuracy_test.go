package compat

import (
	"context"
	"errors"
	"io"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/hotpath-go/hotpath/compat/internal/wstest"
	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/wsframe"
	"github.com/quic-go/quic-go"
)

// rawCounter is a raw WebSocket client that counts what it sends and
// receives, to hold the server's counters against.
type rawCounter struct {
	c                    *wstest.Conn
	pmd                  bool // compress what it sends, inflate what it reads
	sent, recv           uint64
	sentBytes, recvBytes uint64
	compressedRecv       uint64
}

func (r *rawCounter) send(t *testing.T, pkt []byte) {
	t.Helper()
	var err error
	if r.pmd {
		err = r.c.WriteFrame(wsframe.OpBinary, deflateMessage(t, pkt), wsframe.Fin|wsframe.Rsv1)
	} else {
		err = r.c.WriteMessage(wsframe.OpBinary, pkt)
	}
	if err != nil {
		t.Fatal(err)
	}
	r.sent++
	r.sentBytes += uint64(len(pkt))
}

func (r *rawCounter) read(t *testing.T) wire.Packet {
	t.Helper()
	for {
		m, err := r.c.ReadMessage(5 * time.Second)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if m.Opcode != wsframe.OpBinary {
			continue
		}
		if m.Compressed {
			r.compressedRecv++
			m.Payload = inflateMessage(t, m.Payload)
		}
		r.recv++
		r.recvBytes += uint64(len(m.Payload))
		p, err := wire.Decode(m.Payload)
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		return p
	}
}

// TestMetricsMatchTraffic holds every message and byte counter against
// what raw WebSocket clients sent and read: calls, a Batch of 10 calls
// (one message in, one out), an unknown method, client emits to a room
// of 3 (one message in, one out per member reached), a server Emit and
// an emit to a room the sender is not in.
// With permessage-deflate, the bytes are counted as packets, before
// compression and after inflating.
func TestMetricsMatchTraffic(t *testing.T) {
	for _, pmd := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "permessage-deflate"}[pmd], func(t *testing.T) {
			testMetricsMatchTraffic(t, pmd)
		})
	}
}

func testMetricsMatchTraffic(t *testing.T, pmd bool) {
	s, addr := newTestServer(t, Options{NoPresence: true, Compression: Compression{Threshold: 16}})
	var cs []*rawCounter
	for i := range 3 {
		rc := &rawCounter{pmd: pmd}
		if pmd {
			rc.c = dialPMD(t, addr, "permessage-deflate")
		} else {
			rc.c = dial(t, addr)
		}
		cs = append(cs, rc)
		rc.send(t, wire.Append(nil, &wire.Packet{Kind: dispatch.KindJoin, ID: uint32(i + 1), Room: []byte("r")}))
		if p := rc.read(t); p.Kind != dispatch.KindResult {
			t.Fatalf("join: %+v", p)
		}
	}
	c := cs[0]
	c.send(t, wire.AppendCall(nil, dispatch.KindCall, 10, "echo/say", 0, []byte(`{"text":"hi"}`)))
	if p := c.read(t); p.Kind != dispatch.KindResult {
		t.Fatalf("call: %+v", p)
	}
	var items []byte
	for i := range 10 {
		items = wire.AppendItem(items, wire.AppendCall(nil, dispatch.KindCall, uint32(100+i), "echo/say", 0, []byte(`{"text":"b"}`)))
	}
	c.send(t, wire.Append(nil, &wire.Packet{Kind: dispatch.KindBatch, Count: 10, Payload: items}))
	if p := c.read(t); p.Kind != dispatch.KindBatch || p.Count != 10 {
		t.Fatalf("batch answer: %+v", p)
	}
	c.send(t, wire.AppendCall(nil, dispatch.KindCall, 11, "no/such", 0, nil))
	if p := c.read(t); p.Kind != dispatch.KindError {
		t.Fatalf("unknown method: %+v", p)
	}
	c.send(t, wire.AppendEmit(nil, "r", "chat", 0, []byte(`"x"`)))
	for _, rc := range cs {
		if p := rc.read(t); p.Kind != dispatch.KindEmit {
			t.Fatalf("emit: %+v", p)
		}
	}
	c.send(t, wire.AppendEmit(nil, "elsewhere", "chat", 0, []byte(`"x"`)))
	if _, err := s.Emit("r", "tick", 1); err != nil {
		t.Fatal(err)
	}
	for _, rc := range cs {
		if p := rc.read(t); p.Kind != dispatch.KindEmit {
			t.Fatalf("server emit: %+v", p)
		}
	}
	// A last round trip: everything before it has been counted.
	c.send(t, wire.Append(nil, &wire.Packet{Kind: dispatch.KindPing, Payload: []byte("p")}))
	if p := c.read(t); p.Kind != dispatch.KindPong {
		t.Fatalf("pong: %+v", p)
	}
	var sent, recv, sentBytes, recvBytes, compressed uint64
	for _, rc := range cs {
		compressed += rc.compressedRecv
		sent += rc.sent
		recv += rc.recv
		sentBytes += rc.sentBytes
		recvBytes += rc.recvBytes
	}
	if pmd && compressed == 0 {
		t.Fatal("nothing arrived compressed")
	}
	// A packet is counted once the link took it, which may be after the
	// client read it.
	waitFor(t, func() bool { return s.Metrics().MessagesOut >= recv })
	m := s.Metrics()
	if m.MessagesIn != sent || m.BytesIn != sentBytes {
		t.Errorf("in: %d messages, %d bytes counted; %d, %d sent", m.MessagesIn, m.BytesIn, sent, sentBytes)
	}
	if m.MessagesOut != recv || m.BytesOut != recvBytes {
		t.Errorf("out: %d messages, %d bytes counted; %d, %d read", m.MessagesOut, m.BytesOut, recv, recvBytes)
	}
	if m.UnknownMethods != 1 || m.DroppedEvents != 1 || m.Emits != 2 || m.EmitDrops != 0 {
		t.Errorf("unknown methods %d, dropped events %d, emits %d, emit drops %d; want 1, 1, 2, 0", m.UnknownMethods, m.DroppedEvents, m.Emits, m.EmitDrops)
	}
	if m.Connections != 3 || m.ConnectionsTotal != 3 {
		t.Errorf("connections %d, total %d; want 3, 3", m.Connections, m.ConnectionsTotal)
	}
}

// On every carrier the message counters count packets: sequential calls
// one in and one out each, a room emit one in and one out per member
// reached, reliable or as a datagram.
func TestMetricsCountPacketsOnEveryCarrier(t *testing.T) {
	r := testRouter()
	HandleStream(r, "m/sink", func(ctx context.Context, _ string, s *Stream) error {
		_, err := io.Copy(io.Discard, s)
		return err
	})
	e := newCarrierEnv(t, Options{Router: r, NoPresence: true})
	for _, carrier := range goCarriers {
		t.Run(carrierName(carrier), func(t *testing.T) {
			ctx := context.Background()
			room := "m-" + carrierName(carrier)
			got := make(chan string, 16)
			var cls []*Client
			for range 2 {
				cl := e.dial(t, carrier, ClientOptions{Reconnect: Reconnect{Disabled: true}})
				cl.OnRoom(room, "chat", func(m Message) { got <- string(m.Data) })
				if _, err := cl.Join(ctx, room); err != nil {
					t.Fatal(err)
				}
				cls = append(cls, cl)
			}
			a := cls[0]
			before := settledMetrics(t, e.srv)
			const calls = 5
			text := strings.Repeat("x", 100)
			for range calls {
				if err := a.Call(ctx, "echo/say", echoReq{Text: text}, nil); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, func() bool { return e.srv.Metrics().MessagesOut-before.MessagesOut >= calls })
			m := settledMetrics(t, e.srv)
			if in, out := m.MessagesIn-before.MessagesIn, m.MessagesOut-before.MessagesOut; in != calls || out != calls {
				t.Errorf("%d calls counted %d messages in, %d out", calls, in, out)
			}
			if in := m.BytesIn - before.BytesIn; in < calls*100 || in > calls*150 {
				t.Errorf("%d calls of ~115 bytes counted %d bytes in", calls, in)
			}
			if out := m.BytesOut - before.BytesOut; out < calls*100 || out > calls*150 {
				t.Errorf("%d answers of ~115 bytes counted %d bytes out", calls, out)
			}
			wait2 := func() bool {
				for range 2 {
					select {
					case <-got:
					case <-time.After(3 * time.Second):
						return false
					}
				}
				return true
			}
			before = settledMetrics(t, e.srv)
			if err := a.Emit(room, "chat", "hi", false); err != nil {
				t.Fatal(err)
			}
			if !wait2() {
				t.Fatal("emit not received by both members")
			}
			waitFor(t, func() bool { return e.srv.Metrics().MessagesOut-before.MessagesOut >= 2 })
			m = settledMetrics(t, e.srv)
			if in, out, emits := m.MessagesIn-before.MessagesIn, m.MessagesOut-before.MessagesOut, m.Emits-before.Emits; in != 1 || out != 2 || emits != 1 {
				t.Errorf("an emit to 2 members counted %d in, %d out, %d emits; want 1, 2, 1", in, out, emits)
			}
			if carrier != CarrierWebSocket {
				before = settledMetrics(t, e.srv)
				if err := a.EmitUnreliable(room, "chat", "dg", false); err != nil {
					t.Fatal(err)
				}
				if wait2() {
					waitFor(t, func() bool { return e.srv.Metrics().MessagesOut-before.MessagesOut >= 2 })
					m = settledMetrics(t, e.srv)
					if in, out := m.MessagesIn-before.MessagesIn, m.MessagesOut-before.MessagesOut; in != 1 || out != 2 {
						t.Errorf("an unreliable emit to 2 members counted %d in, %d out; want 1, 2", in, out)
					}
				} else {
					t.Log("datagram lost")
				}
			}
			if carrier == CarrierQUIC || carrier == CarrierWebTransport {
				before = settledMetrics(t, e.srv)
				st, err := a.OpenStream(ctx, "m/sink", "")
				if err != nil {
					t.Fatal(err)
				}
				st.Write(make([]byte, 10000))
				st.CloseWrite()
				io.Copy(io.Discard, st)
				// Binary streams are not counted, as the HELP texts say.
				m = settledMetrics(t, e.srv)
				if m.MessagesIn != before.MessagesIn || m.BytesIn != before.BytesIn || m.MessagesOut != before.MessagesOut || m.BytesOut != before.BytesOut {
					t.Errorf("a stream of 10000 bytes counted %d messages in, %d bytes in, %d out, %d bytes out; the documentation says streams are not counted", m.MessagesIn-before.MessagesIn, m.BytesIn-before.BytesIn, m.MessagesOut-before.MessagesOut, m.BytesOut-before.BytesOut)
				}
			}
		})
	}
}

// settledMetrics returns s's metrics once its traffic counters have
// stopped moving: a packet is counted after its write returns, so its
// peer may have read it, and the test gone on, before the count moved
// (a Join's answer counted among the calls that followed, 1 time in
// about 500 under -race; an emit's bytes a snapshot after its messages).
func settledMetrics(t *testing.T, s *Server) Metrics {
	t.Helper()
	traffic := func(m Metrics) [5]uint64 {
		return [5]uint64{m.MessagesIn, m.MessagesOut, m.BytesIn, m.BytesOut, m.Emits}
	}
	m := s.Metrics()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		time.Sleep(25 * time.Millisecond)
		next := s.Metrics()
		if traffic(next) == traffic(m) {
			return next
		}
		m = next
	}
	t.Fatal("the server's traffic counters still moved after 5 s")
	return m
}

// Peer.Event refused (ErrOverloaded: the outbox is full; ErrClosed) sent
// nothing: hotpath_messages_out_total, bytes out and the dictionary
// count do not count it, as room emits count only the members reached.
func TestMetricsOutCountsOnlyWhatWasSent(t *testing.T) {
	peers := make(chan *Peer, 1)
	s, addr := newTestServer(t, Options{Limits: Limits{MaxOutboxBytes: 64 << 10}, OnConnect: func(p *Peer) { peers <- p }})
	c := dial(t, addr) // never reads
	p := <-peers
	payload := strings.Repeat("e", 16<<10)
	var sent, refused uint64
	for i := 0; i < 2000 && refused < 3; i++ {
		switch err := p.Event("big", payload); {
		case err == nil:
			sent++
		case errors.Is(err, ErrOverloaded):
			refused++
		default:
			t.Fatal(err)
		}
	}
	if refused == 0 {
		t.Fatalf("%d events sent and none refused", sent)
	}
	if m := s.Metrics(); m.MessagesOut != sent {
		t.Errorf("%d events sent, %d refused: messages out %d", sent, refused, m.MessagesOut)
	}
	c.NC.Close()
	waitFor(t, func() bool { return s.Metrics().Connections == 0 })
	before := s.Metrics()
	if err := p.Event("late", 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Event after the close: %v", err)
	}
	if m := s.Metrics(); m.MessagesOut != before.MessagesOut || m.BytesOut != before.BytesOut {
		t.Errorf("an event refused with ErrClosed counted %d messages, %d bytes out", m.MessagesOut-before.MessagesOut, m.BytesOut-before.BytesOut)
	}
}

// A QUIC peer's close carries any code from 1000 to 4999, the reserved
// 1016-2999 included, which a WebSocket close frame may not: those read
// as 1002 (carrierCloseCode), and a code an application may use past
// 4015 counts under CloseOther, or a peer could make some 2,000 series of
// hotpath_closes_total by closing with each in turn (CloseOther's doc).
func TestMetricsClosesBoundedOverQUIC(t *testing.T) {
	e := newCarrierEnv(t, Options{})
	tlsConf := e.cert.ClientTLSConfig()
	tlsConf.NextProtos = []string{ALPN}
	addr := strings.TrimPrefix(e.urls[CarrierQUIC], "quic://")
	codes := []uint64{1016, 2000, 2999, 3001, 4001}
	for _, code := range codes {
		qc, err := quic.DialAddr(context.Background(), addr, tlsConf, QUICConfig(0))
		if err != nil {
			t.Fatal(err)
		}
		str, err := qc.OpenStreamSync(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		ping := wire.Append(nil, &wire.Packet{Kind: dispatch.KindPing, Payload: []byte("p")})
		str.Write(append([]byte{byte(len(ping))}, ping...))
		str.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(str, make([]byte, 1+len(ping))); err != nil { // the Pong: the peer is registered
			t.Fatal(err)
		}
		qc.CloseWithError(quic.ApplicationErrorCode(code), "")
	}
	waitFor(t, func() bool {
		return e.srv.Metrics().ConnectionsTotal == uint64(len(codes)) && e.srv.Metrics().Connections == 0
	})
	closes := e.srv.Metrics().Closes
	want := map[wsframe.CloseCode]uint64{wsframe.CloseProtocolError: 3, CloseOther: 1, 4001: 1}
	if !maps.Equal(closes, want) {
		t.Errorf("closes by code %v, want %v", closes, want)
	}
}

// hotpath_compression_failures_total counts packets compressed with the
// dictionary; a permessage-deflate message that does not inflate closes
// the connection with 1007, counted under hotpath_closes_total{code="1007"},
// as the HELP text says.
func TestMetricsCorruptDeflateCountedByClose(t *testing.T) {
	s, addr := newTestServer(t, Options{})
	c := dialPMD(t, addr, "permessage-deflate")
	c.WriteFrame(wsframe.OpBinary, []byte{0xff, 0xff, 0xff, 0xff}, wsframe.Fin|wsframe.Rsv1) // no DEFLATE stream
	if code, _ := c.ReadClose(5 * time.Second); code != wsframe.CloseInvalidPayload {
		t.Fatalf("close %d, want 1007", code)
	}
	waitFor(t, func() bool { return s.Metrics().Connections == 0 })
	if m := s.Metrics(); m.Closes[wsframe.CloseInvalidPayload] != 1 || m.CompressionFailures != 0 {
		t.Errorf("closes %v, compression failures %d; want 1007 once and no dictionary failure", m.Closes, m.CompressionFailures)
	}
}

// BytesIn counts packets after decompression, as its documentation says:
// a call compressed with the router dictionary counts what it inflated
// to, not the few bytes it took on the wire (BytesOut counts before
// compression alike).
func TestMetricsBytesInAfterDictionary(t *testing.T) {
	r := testRouter()
	s, addr := newTestServer(t, Options{Router: r})
	d, err := RouterDictionary(testRouter())
	if err != nil {
		t.Fatal(err)
	}
	c := dialClient(t, addr, ClientOptions{Dictionary: d, Reconnect: Reconnect{Disabled: true}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Call(ctx, "echo/say", echoReq{Text: "warm"}, nil); err != nil { // after the capabilities: the dictionary is on
		t.Fatal(err)
	}
	before := settledMetrics(t, s)
	text := strings.Repeat("x", 4000)
	if err := c.Call(ctx, "echo/say", echoReq{Text: text}, nil); err != nil {
		t.Fatal(err)
	}
	m := settledMetrics(t, s)
	if m.DictCompressed == before.DictCompressed {
		t.Fatal("the answer was not compressed: the dictionary is off, and the test shows nothing")
	}
	if in := m.BytesIn - before.BytesIn; in < 4000 || in > 4200 {
		t.Errorf("a call of ~4,030 bytes, compressed on the wire, counted %d bytes in", in)
	}
}
