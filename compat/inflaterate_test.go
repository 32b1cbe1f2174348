package compat

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/wsframe"
)

// inflateRateRouter counts the bytes of "bomb" events and answers "ping"
// calls.
func inflateRateRouter(got *atomic.Int64, events *atomic.Int32) *Router {
	r := NewRouter()
	HandleEvent(r, "bomb", func(_ context.Context, v []byte) {
		got.Add(int64(len(v)))
		events.Add(1)
	})
	Handle(r, "ping", func(_ context.Context, v []byte) ([]byte, error) { return v, nil })
	return r
}

// waitLong polls cond every 5 ms for up to 10 s.
func waitLong(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 10 s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A client sending permessage-deflate bombs (a few hundred bytes each,
// inflating to MaxMessageSize) is held to Limits.MaxInflateRate: the
// server inflates at most about the rate plus one burst over the time
// taken, its reading paused, and yet delivers every message, keeps the
// connection, and answers another connection meanwhile.
func TestInflateRatePMDBombsPaused(t *testing.T) {
	const (
		size = 256 << 10 // MaxMessageSize, the burst
		rate = 1 << 20   // MaxInflateRate: 1 MiB/s
		n    = 12        // 3 MiB: some 2.75 s at the rate
	)
	var got atomic.Int64
	var events atomic.Int32
	s, addr := newTestServer(t, Options{
		Router:       inflateRateRouter(&got, &events),
		NoDictionary: true,
		Limits:       Limits{MaxMessageSize: size, MaxInflateRate: rate},
	})
	bomber := dialPMD(t, addr, "permessage-deflate")
	plain := dial(t, addr)
	pkt := wire.Append(nil, &wire.Packet{Kind: dispatch.KindEvent, Name: []byte("bomb"), Payload: make([]byte, size-16)})
	bomb := wsframe.AppendMaskedFrame(nil, wsframe.OpBinary, deflateMessage(t, pkt), wsframe.Fin|wsframe.Rsv1, wsframe.NewMaskKey())
	t.Logf("a bomb of %d bytes inflates to %d", len(bomb), len(pkt))

	start := time.Now()
	var frames []byte
	for range n {
		frames = append(frames, bomb...)
	}
	if err := bomber.WriteRaw(frames); err != nil {
		t.Fatal(err)
	}
	waitLong(t, "throttling", func() bool { return s.Metrics().InflateThrottled > 0 })
	// Another connection is answered while the bombs are held back.
	for i := range 3 {
		plain.WriteMessage(wsframe.OpBinary, wire.AppendCall(nil, dispatch.KindCall, uint32(i+1), "ping", 0, []byte("1")))
		if p := readPacket(t, plain); p.Kind != dispatch.KindResult {
			t.Fatalf("the plain connection's call %d answered %v", i+1, p.Kind)
		}
	}
	if k := events.Load(); k >= n {
		t.Errorf("all %d bombs were inflated before the plain connection's calls were answered", k)
	}
	waitLong(t, "delivery of every bomb", func() bool { return events.Load() == n })
	elapsed := time.Since(start)
	inflated := int64(n) * int64(len(pkt))
	allowed := int64(rate*elapsed.Seconds()) + size
	t.Logf("%d bytes inflated in %v; the rate allows %d", inflated, elapsed, allowed)
	if inflated > 2*allowed {
		t.Errorf("%d bytes inflated in %v: more than twice the %d the rate allows", inflated, elapsed, allowed)
	}
	if got.Load() == 0 {
		t.Error("the events carried nothing")
	}
	// Nothing lost, the connection still open and answering.
	bomber.WriteMessage(wsframe.OpBinary, wire.AppendCall(nil, dispatch.KindCall, 9, "ping", 0, []byte("2")))
	if p := readPacket(t, bomber); p.Kind != dispatch.KindResult {
		t.Fatalf("the bombing connection's call answered %v", p.Kind)
	}
	if m := s.Metrics(); m.InflateThrottled == 0 || m.Closes[wsframe.CloseMessageTooBig] != 0 {
		t.Errorf("metrics: %d throttled, closes %v", m.InflateThrottled, m.Closes)
	}
}

// The dictionary path (PROTOCOL.md §6) is held to the same rate: a Go
// client sending highly compressible events with the router dictionary
// has them all delivered, at about the rate, and its connection lives.
func TestInflateRateDictionaryPaused(t *testing.T) {
	const (
		size = 256 << 10
		rate = 1 << 20
		n    = 12
	)
	var got atomic.Int64
	var events atomic.Int32
	r := inflateRateRouter(&got, &events)
	s, addr := newTestServer(t, Options{Router: r, Limits: Limits{MaxMessageSize: size, MaxInflateRate: rate}})
	d, err := RouterDictionary(inflateRateRouter(new(atomic.Int64), new(atomic.Int32)))
	if err != nil {
		t.Fatal(err)
	}
	c := dialClient(t, addr, ClientOptions{Dictionary: d, Reconnect: Reconnect{Disabled: true}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []byte
	if err := c.Call(ctx, "ping", []byte("1"), &out); err != nil { // after the capabilities: the dictionary is on
		t.Fatal(err)
	}
	payload := []byte(`"` + strings.Repeat("a", size-64) + `"`)
	start := time.Now()
	for range n {
		if err := c.Event("bomb", payload); err != nil {
			t.Fatal(err)
		}
	}
	waitLong(t, "delivery of every event", func() bool { return events.Load() == n })
	elapsed := time.Since(start)
	inflated := got.Load()
	allowed := int64(rate*elapsed.Seconds()) + size
	t.Logf("%d bytes inflated in %v; the rate allows %d", inflated, elapsed, allowed)
	if inflated > 2*allowed {
		t.Errorf("%d bytes inflated in %v: more than twice the %d the rate allows", inflated, elapsed, allowed)
	}
	if err := c.Call(ctx, "ping", []byte("2"), &out); err != nil {
		t.Fatalf("the client's call after its events: %v", err)
	}
	if s.Metrics().InflateThrottled == 0 {
		t.Error("no throttling counted")
	}
}

// NewServer refuses a rate under which one message of MaxMessageSize
// would pause the reading for more than a second; the default follows a
// MaxMessageSize above it.
func TestInflateRateOptions(t *testing.T) {
	if _, err := NewServer(Options{Router: NewRouter(), Limits: Limits{MaxMessageSize: 1 << 20, MaxInflateRate: 1<<20 - 1}}); err == nil || !strings.Contains(err.Error(), "MaxInflateRate") {
		t.Errorf("a rate below MaxMessageSize a second: %v", err)
	}
	for _, l := range []Limits{{MaxInflateRate: -1}, {MaxMessageSize: 128 << 20}, {MaxInflateRate: 1 << 20}} {
		s, err := NewServer(Options{Router: NewRouter(), Limits: l})
		if err != nil {
			t.Errorf("%+v: %v", l, err)
			continue
		}
		if r := s.opts.Limits.MaxInflateRate; r > 0 && r < s.opts.Limits.MaxMessageSize {
			t.Errorf("%+v: rate %d", l, r)
		}
	}
}

// A compressed datagram, handled off the read loop, cannot pause it: one
// that finds the connection's budget spent is dropped before it is
// inflated, and counted; once the budget is back, one is inflated,
// delivered and charged.
func TestInflateRateDatagramDropped(t *testing.T) {
	const size, rate = 64 << 10, 1 << 20
	var got atomic.Int64
	var events atomic.Int32
	s, err := NewServer(Options{Router: inflateRateRouter(&got, &events), Logger: slog.New(slog.DiscardHandler), Limits: Limits{MaxMessageSize: size, MaxInflateRate: rate}})
	if err != nil {
		t.Fatal(err)
	}
	p := s.newPeer(nil, &upgrade{})
	defer p.cancel()
	p.dict.Store(s.dict.deflate)
	pkt := wire.Append(nil, &wire.Packet{Kind: dispatch.KindEvent, Name: []byte("bomb"), Payload: []byte(`"` + strings.Repeat("a", size/2) + `"`)})
	cb, release, ok := s.dict.deflate.compressPacket(pkt)
	if !ok {
		t.Fatal("the event did not compress")
	}
	dg := append([]byte(nil), cb[frameHeadroom:]...)
	release()

	spent := newInflateBudget(rate, size, monoNow())
	spent.tokens = -size // a second's worth owed: no refill meanwhile
	p.inflate.Store(spent)
	if err := p.handleDatagram(dg); err != nil {
		t.Fatal(err)
	}
	m := s.Metrics()
	if events.Load() != 0 || m.InflateThrottled != 1 || m.DroppedEvents != 1 {
		t.Fatalf("a datagram past the budget: %d delivered, %d throttled, %d dropped; want 0, 1, 1", events.Load(), m.InflateThrottled, m.DroppedEvents)
	}
	spent.mu.Lock()
	spent.tokens = size
	spent.mu.Unlock()
	if err := p.handleDatagram(dg); err != nil {
		t.Fatal(err)
	}
	if events.Load() != 1 || spent.tokens > size-size/2 {
		t.Fatalf("a datagram within the budget: %d delivered, %v tokens left of %d", events.Load(), spent.tokens, size)
	}
}

// A dictionary packet in a permessage-deflate message is charged for
// both inflations, not only for the body it finally decodes to: each
// costs CPU for what it produces. Charged for the body alone, a message
// inflating to a quarter megabyte of empty stored blocks that end in a
// tiny event would inflate for free, at any rate. Three such messages,
// each inflating to nearly the burst, pause the reading; their events,
// valid, are all delivered.
func TestInflateRateChargesBothInflations(t *testing.T) {
	const size = 256 << 10
	var events atomic.Int32
	s, addr := newTestServer(t, Options{
		Router: inflateRateRouter(new(atomic.Int64), &events),
		Limits: Limits{MaxMessageSize: size, MaxInflateRate: size},
	})
	c := dialPMD(t, addr, "permessage-deflate")
	caps := wire.Append(nil, &wire.Packet{Kind: dispatch.KindCapabilities, Count: 2,
		Payload: wire.AppendPair(wire.AppendPair(nil, "codec", "json"), "dict", s.dict.deflate.name)})
	ev := wire.Append(nil, &wire.Packet{Kind: dispatch.KindEvent, Name: []byte("bomb"), Payload: []byte("1")})
	cb, release, ok := s.dict.deflate.compressPacket(append(ev, make([]byte, 64)...)) // long enough to compress
	if !ok {
		t.Fatal("the event did not compress")
	}
	small := append([]byte(nil), cb[frameHeadroom:]...)
	release()
	// Raw deflate: empty stored blocks (BFINAL 0, LEN 0) decode to
	// nothing, and the packet's own blocks follow byte-aligned.
	pkt := []byte{small[0]}
	for len(pkt) < size-1024 {
		pkt = append(pkt, 0, 0, 0, 0xff, 0xff)
	}
	pkt = append(pkt, small[1:]...)
	msg := wsframe.AppendMaskedFrame(nil, wsframe.OpBinary, deflateMessage(t, pkt), wsframe.Fin|wsframe.Rsv1, wsframe.NewMaskKey())
	t.Logf("a message of %d bytes inflates to a packet of %d, whose body decodes to %d", len(msg), len(pkt), len(ev)+64-1)

	frames := wsframe.AppendMaskedFrame(nil, wsframe.OpBinary, caps, wsframe.Fin, wsframe.NewMaskKey())
	for range 3 {
		frames = append(frames, msg...)
	}
	if err := c.WriteRaw(frames); err != nil {
		t.Fatal(err)
	}
	waitLong(t, "delivery of every event", func() bool { return events.Load() == 3 })
	m := s.Metrics()
	if m.InflateThrottled == 0 {
		t.Error("three messages inflating to nearly the burst each, as dictionary packets, were not held back")
	}
	if m.CompressionFailures != 0 || len(m.Closes) != 0 {
		t.Errorf("compression failures %d, closes %v", m.CompressionFailures, m.Closes)
	}
}
