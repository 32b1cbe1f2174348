package compat

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hotpath-go/hotpath/compat/internal/wstest"
	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/wsframe"
)

func TestOversizedFrameRefusedBeforeBuffering(t *testing.T) {
	_, addr := newTestServer(t, Options{Limits: Limits{MaxMessageSize: 64 << 10}})
	c := dial(t, addr)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	// A header announcing 1 GiB, then a little of the payload.
	h := wsframe.AppendHeader(nil, wsframe.Header{Flags: wsframe.Fin, Opcode: wsframe.OpBinary, Masked: true, Length: 1 << 30})
	c.WriteRaw(append(h, make([]byte, 4096)...))
	if code, _ := c.ReadClose(5 * time.Second); code != wsframe.CloseMessageTooBig {
		t.Fatalf("close %d, want 1009", code)
	}
	runtime.ReadMemStats(&after)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 8<<20 {
		t.Errorf("server allocated %d bytes for a refused 1 GiB frame", grew)
	}
}

func TestFragmentFloodRefused(t *testing.T) {
	_, addr := newTestServer(t, Options{Limits: Limits{MaxFragments: 16}})
	c := dial(t, addr)
	c.WriteFrame(wsframe.OpBinary, []byte{1}, 0)
	for range 20 {
		c.WriteFrame(wsframe.OpContinuation, []byte{1}, 0)
	}
	if code, _ := c.ReadClose(5 * time.Second); code != wsframe.CloseMessageTooBig {
		t.Fatalf("close %d, want 1009", code)
	}
}

func TestBatchTooLarge(t *testing.T) {
	_, addr := newTestServer(t, Options{Limits: Limits{MaxBatch: 2}})
	c := dial(t, addr)
	var items []byte
	for i := 1; i <= 3; i++ {
		items = wire.AppendItem(items, wire.AppendCall(nil, dispatch.KindCall, uint32(i), "echo/raw", 0, nil))
	}
	c.WriteMessage(wsframe.OpBinary, wire.Append(nil, &wire.Packet{Kind: dispatch.KindBatch, Count: 3, Payload: items}))
	if code, _ := c.ReadClose(5 * time.Second); code != wsframe.CloseMessageTooBig {
		t.Fatalf("close %d, want 1009", code)
	}
}

func TestInFlightLimit(t *testing.T) {
	r := testRouter()
	release := make(chan struct{})
	Handle(r, "test/block", func(ctx context.Context, _ struct{}) (string, error) {
		<-release
		return "done", nil
	}, Async())
	s, addr := newTestServer(t, Options{Router: r, Limits: Limits{MaxInFlight: 2}})
	c := dial(t, addr)
	for id := uint32(1); id <= 3; id++ {
		c.WriteMessage(wsframe.OpBinary, wire.AppendCall(nil, dispatch.KindCall, id, "test/block", 0, nil))
	}
	p := readPacket(t, c)
	if p.Kind != dispatch.KindError || p.ID != 3 || p.Code != wire.CodeOverloaded {
		t.Fatalf("third call: %+v, want Overloaded", p)
	}
	close(release)
	for range 2 {
		if p := readPacket(t, c); p.Kind != dispatch.KindResult {
			t.Errorf("blocked call: %+v", p)
		}
	}
	if s.Metrics().Overloaded != 1 {
		t.Errorf("Overloaded counter = %d", s.Metrics().Overloaded)
	}
}

func TestKeepalivePingsAndIdleTimeout(t *testing.T) {
	s, addr := newTestServer(t, Options{KeepaliveInterval: 100 * time.Millisecond, IdleTimeout: time.Second})
	// A peer that never answers: pinged, then dropped with 1001.
	silent := dial(t, addr)
	sawPing := false
	for {
		m, err := silent.ReadMessage(5 * time.Second)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if m.Opcode == wsframe.OpPing {
			sawPing = true
			continue
		}
		if m.Opcode == wsframe.OpClose {
			if m.CloseCode != wsframe.CloseGoingAway || !sawPing {
				t.Fatalf("close %d after ping=%v, want 1001 after a ping", m.CloseCode, sawPing)
			}
			break
		}
	}
	// A client that answers pings stays connected well past IdleTimeout.
	c := dialClient(t, addr, ClientOptions{Reconnect: Reconnect{Disabled: true}})
	time.Sleep(2500 * time.Millisecond) // more than twice IdleTimeout: pings were answered
	var out echoReq
	if err := c.Call(context.Background(), "echo/say", echoReq{Text: "still here"}, &out); err != nil {
		t.Fatalf("call after idle period: %v", err)
	}
	if s.Metrics().IdleTimeouts != 1 {
		t.Errorf("IdleTimeouts = %d, want 1", s.Metrics().IdleTimeouts)
	}
}

// Settings that would fail later, on every connection, fail NewServer,
// with an *OptionError that names the field refused (for a program to
// name its own setting of it, as cmd/hotpath names its flag): every
// refusal of a value, the Router's names included, with its message as
// it was.
func TestNewServerRefusesBadOptions(t *testing.T) {
	ok := func(ctx context.Context, req int) (int, error) { return req, nil }
	routes := func(register func(r *Router)) *Router {
		r := NewRouter()
		register(r)
		return r
	}
	// Messages as they were before the refusals became *OptionErrors.
	messages := map[string]string{
		"no router":         "compat: Options.Router is nil",
		"empty method name": `compat: route: method name "" (0 bytes) is not 1-255 bytes of UTF-8`,
		"duplicate method":  `compat: methods: dispatch: method "a/b" registered twice, as routes 0 and 1`,
	}
	for name, tc := range map[string]struct {
		opts  Options
		field string
	}{
		"keepalive equal to idle": {Options{KeepaliveInterval: time.Second, IdleTimeout: time.Second}, "KeepaliveInterval"},
		"keepalive over idle":     {Options{KeepaliveInterval: time.Minute, IdleTimeout: time.Second}, "KeepaliveInterval"},
		"compression level -1":    {Options{Compression: Compression{Level: -1}}, "Compression.Level"},
		"compression level 10":    {Options{Compression: Compression{Level: 10}}, "Compression.Level"},
		// The client reads a negative value as "off"; the server took
		// its default, silently.
		"negative idle timeout":          {Options{IdleTimeout: -1}, "IdleTimeout"},
		"negative keepalive":             {Options{KeepaliveInterval: -1}, "KeepaliveInterval"},
		"both negative":                  {Options{IdleTimeout: -1, KeepaliveInterval: -1}, "IdleTimeout"},
		"inflate rate below max message": {Options{Limits: Limits{MaxInflateRate: 1000}}, "Limits.MaxInflateRate"},
		"sctp rto max below rto min":     {Options{SCTPRTOMax: time.Millisecond}, "SCTPRTOMax"},
		"no router":                      {Options{}, "Router"},
		// The Router's names: each would make a route no packet reaches,
		// or a lookup table that cannot tell two routes apart.
		"empty method name":    {Options{Router: routes(func(r *Router) { Handle(r, "", ok) })}, "Router"},
		"method name too long": {Options{Router: routes(func(r *Router) { Handle(r, strings.Repeat("n", wire.MaxNameLen+1), ok) })}, "Router"},
		"event name not utf-8": {Options{Router: routes(func(r *Router) { HandleEvent(r, "bad\xff", func(context.Context, int) {}) })}, "Router"},
		"reserved event name":  {Options{Router: routes(func(r *Router) { HandleEvent(r, "$close", func(context.Context, int) {}) })}, "Router"},
		"empty stream name": {Options{Router: routes(func(r *Router) {
			HandleStream(r, "", func(context.Context, int, *Stream) error { return nil })
		})}, "Router"},
		"duplicate method": {Options{Router: routes(func(r *Router) { Handle(r, "a/b", ok); Handle(r, "a/b", ok) })}, "Router"},
		"duplicate event": {Options{Router: routes(func(r *Router) {
			HandleEvent(r, "ev", func(context.Context, int) {})
			HandleEvent(r, "ev", func(context.Context, int) {})
		})}, "Router"},
		"duplicate stream": {Options{Router: routes(func(r *Router) {
			for range 2 {
				HandleStream(r, "up", func(context.Context, int, *Stream) error { return nil })
			}
		})}, "Router"},
		"too many methods": {Options{Router: routes(func(r *Router) {
			for i := range dispatch.MaxRoutes + 1 {
				Handle(r, fmt.Sprintf("m%d", i), ok)
			}
		})}, "Router"},
	} {
		if tc.opts.Router == nil && name != "no router" {
			tc.opts.Router = testRouter()
		}
		_, err := NewServer(tc.opts)
		var oe *OptionError
		if !errors.As(err, &oe) || oe.Option != tc.field {
			t.Errorf("%s: NewServer: %v (%#v), want an *OptionError for %s", name, err, oe, tc.field)
		} else if want, ok := messages[name]; ok && err.Error() != want {
			t.Errorf("%s: NewServer: %q, want %q", name, err, want)
		}
	}
	if _, err := NewServer(Options{Router: testRouter(), Compression: Compression{Level: 9}, IdleTimeout: time.Second}); err != nil {
		t.Errorf("level 9, idle 1 s: %v", err)
	}
}

// Options.WithDefaults is what NewServer runs with, so that a program
// stating the server's defaults from it (cmd/hotpath's help) states the
// ones in force; and NewServer takes its result as the options it came
// from, with a default that follows another field (the keepalive, the
// inflate rate) still following it.
func TestWithDefaultsIsWhatNewServerRuns(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	for _, opts := range []Options{
		{},
		{IdleTimeout: 10 * time.Second, Limits: Limits{MaxMessageSize: 100 << 20, MaxRooms: 3}},
		{KeepaliveInterval: time.Second, Limits: Limits{MaxEmitRate: -1, MaxInflateRate: -1}},
	} {
		opts.Router, opts.Logger = testRouter(), logger
		want := opts.WithDefaults()
		for _, in := range []Options{opts, want} {
			s, err := NewServer(in)
			if err != nil {
				t.Fatal(err)
			}
			got := s.opts
			s.Shutdown(context.Background())
			if !reflect.DeepEqual(got, want) {
				t.Errorf("NewServer(%+v) runs with\n%+v\nwant WithDefaults'\n%+v", in, got, want)
			}
		}
	}
	if d := (Options{}).WithDefaults(); d.IdleTimeout <= 0 || d.KeepaliveInterval <= 0 || d.KeepaliveInterval >= d.IdleTimeout || d.Limits.MaxRooms <= 0 || d.Limits.MaxInflateRate < d.Limits.MaxMessageSize {
		t.Errorf("Options{}.WithDefaults() = %+v: a default missing", d)
	}
}

// A server with no methods (rooms only, or Echo) has no names to build a
// dictionary from: NewServer failed with the dictionary's "no bytes to
// build a dictionary from" (a first-user audit). It now serves without
// one.
func TestNewServerWithoutMethods(t *testing.T) {
	if _, err := NewServer(Options{Router: NewRouter(), Echo: true}); err != nil {
		t.Fatalf("Echo with an empty router: %v", err)
	}
	_, addr := newTestServer(t, Options{Router: NewRouter()})
	ctx := context.Background()
	a := dialClient(t, addr, ClientOptions{Reconnect: Reconnect{Disabled: true}})
	b := dialClient(t, addr, ClientOptions{Reconnect: Reconnect{Disabled: true}})
	got := make(chan string, 1)
	b.OnRoom("lobby", "say", func(m Message) { got <- string(m.Data) })
	for _, c := range []*Client{a, b} {
		if _, err := c.Join(ctx, "lobby"); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Emit("lobby", "say", "hi", true); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if m != `"hi"` {
			t.Fatalf("got %s, want \"hi\"", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no emit through a server without methods")
	}
}

// With only IdleTimeout set, and shorter than the default interval, the
// interval is half of it: a silent peer is pinged before it is given up
// (with 25 s it was checked, and dropped unpinged, only after 25 s). An
// interval not shorter than IdleTimeout, which would drop a silent peer
// before pinging it, is refused by NewServer and by Dial.
func TestKeepaliveFollowsIdleTimeout(t *testing.T) {
	s, addr := newTestServer(t, Options{IdleTimeout: 400 * time.Millisecond})
	if _, err := Dial(context.Background(), "ws://"+addr+"/", ClientOptions{KeepaliveInterval: 2 * time.Second, IdleTimeout: time.Second}); err == nil {
		t.Error("Dial took a KeepaliveInterval over IdleTimeout")
	}
	silent := dial(t, addr)
	m, err := silent.ReadMessage(3 * time.Second)
	if err != nil || m.Opcode != wsframe.OpPing {
		t.Fatalf("first message to a silent peer: %+v, %v; want a ping", m, err)
	}
	c := dialClient(t, addr, ClientOptions{IdleTimeout: 400 * time.Millisecond, Reconnect: Reconnect{Disabled: true}})
	time.Sleep(1200 * time.Millisecond) // three times IdleTimeout, both ends silent
	var out echoReq
	if err := c.Call(context.Background(), "echo/say", echoReq{Text: "still here"}, &out); err != nil {
		t.Fatalf("call after a quiet period: %v", err)
	}
	if n := s.Metrics().IdleTimeouts; n > 1 { // the silent peer's, if its turn came
		t.Errorf("IdleTimeouts = %d, want at most 1", n)
	}
}

// An ask the client never answers fails with ErrTimeout, whether the
// handler's ctx has a deadline or Options.AskTimeout applies (the
// scheduler's timeout); the late answer is ignored and counted.
func TestAskTimeout(t *testing.T) {
	r := testRouter()
	result := make(chan error, 1)
	Handle(r, "test/askslow", func(ctx context.Context, withDeadline bool) (string, error) {
		if withDeadline {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
		} else {
			ctx = context.WithoutCancel(ctx)
		}
		var s string
		err := PeerFrom(ctx).Ask(ctx, "never/answered", nil, &s)
		result <- err
		return s, nil
	}, Async())
	s, addr := newTestServer(t, Options{Router: r, AskTimeout: 50 * time.Millisecond})
	for i, withDeadline := range []bool{true, false} {
		c := dial(t, addr)
		c.WriteMessage(wsframe.OpBinary, wire.AppendCall(nil, dispatch.KindCall, 1, "test/askslow", 0, []byte(fmt.Sprint(withDeadline))))
		p := readPacket(t, c)
		if p.Kind != dispatch.KindAsk || string(p.Name) != "never/answered" || p.Timeout == 0 || p.Timeout > 50 {
			t.Fatalf("got %+v, want the ask with a timeout of at most 50 ms", p)
		}
		select {
		case err := <-result:
			if !errors.Is(err, ErrTimeout) {
				t.Fatalf("ctx deadline %v: Ask = %v, want ErrTimeout", withDeadline, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Ask never returned")
		}
		// A late answer is ignored and counted.
		c.WriteMessage(wsframe.OpBinary, wire.Append(nil, &wire.Packet{Kind: dispatch.KindAnswer, ID: p.ID, Payload: []byte(`"late"`)}))
		waitFor(t, func() bool { return s.Metrics().LateAnswers == uint64(i+1) })
	}
}

func TestSlowConsumer(t *testing.T) {
	for _, policy := range []SlowConsumerPolicy{DropEvent, Disconnect} {
		// 1 MiB of outbox: the fast member, at most one 16 KiB emit behind,
		// never comes near it however the machine schedules the flusher;
		// the slow member passes it once the kernel's socket buffers
		// (a few MiB on loopback) are full.
		s, addr := newTestServer(t, Options{SlowConsumer: policy, Limits: Limits{MaxOutboxBytes: 1 << 20}})
		slow := dial(t, addr) // joins and never reads again
		slow.WriteMessage(wsframe.OpBinary, wire.Append(nil, &wire.Packet{Kind: dispatch.KindJoin, ID: 1, Room: []byte("r")}))
		readPacket(t, slow)
		fast := dialClient(t, addr, ClientOptions{})
		got := make(chan struct{}, 4096)
		fast.OnRoom("r", "big", func(Message) { got <- struct{}{} })
		if _, err := fast.Join(context.Background(), "r"); err != nil {
			t.Fatal(err)
		}
		payload := make([]byte, 16<<10)
		dropped := 0
		const emits = 1000 // 16 MiB in all: far past the kernel's socket buffers
		received := 0
		for i := 0; i < emits; i++ {
			res, err := s.Emit("r", "big", payload)
			if err != nil {
				t.Fatal(err)
			}
			dropped += res.Dropped
			// Let the fast member keep up, at most one emit behind; the
			// room itself never waits.
			for ; received < i; received++ {
				select {
				case <-got:
				case <-time.After(5 * time.Second):
					t.Fatalf("fast member stuck at %d of %d", received, i)
				}
			}
		}
		for ; received < emits; received++ {
			select {
			case <-got:
			case <-time.After(5 * time.Second):
				t.Fatalf("fast member stuck at %d of %d", received, emits)
			}
		}
		switch policy {
		case DropEvent:
			if dropped == 0 {
				t.Errorf("DropEvent: no emit was dropped for the slow member")
			}
			if s.Members("r") != 2 {
				t.Errorf("DropEvent: members = %d, want 2", s.Members("r"))
			}
		case Disconnect:
			waitFor(t, func() bool { return s.Members("r") == 1 })
			if s.Metrics().SlowConsumers == 0 {
				t.Error("Disconnect: no slow consumer counted")
			}
		}
	}
}

// A slow consumer dropped under Disconnect is reset, not closed with a
// FIN: after a FIN the kernel keeps the socket and what was queued for a
// peer that does not read (up to the send buffer, some MiB), probing its
// closed window for minutes as an orphan. The peer reads the reset once
// it reads again.
func TestSlowConsumerIsReset(t *testing.T) {
	s, addr := newTestServer(t, Options{SlowConsumer: Disconnect, Limits: Limits{MaxOutboxBytes: 256 << 10}})
	slow := dial(t, addr) // joins and never reads again
	slow.WriteMessage(wsframe.OpBinary, wire.Append(nil, &wire.Packet{Kind: dispatch.KindJoin, ID: 1, Room: []byte("r")}))
	readPacket(t, slow)
	payload := make([]byte, 16<<10)
	for i := 0; s.Members("r") > 0; i++ {
		if i == 4096 {
			t.Fatal("64 MiB of emits, and the member that reads nothing is still in the room")
		}
		if _, err := s.Emit("r", "big", payload); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, func() bool { return s.Metrics().Connections == 0 })
	if s.Metrics().SlowConsumers != 1 {
		t.Fatalf("SlowConsumers = %d, want 1", s.Metrics().SlowConsumers)
	}
	slow.NC.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := io.Copy(io.Discard, slow.NC)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the dropped member read %d bytes, then %v; want the connection reset (ECONNRESET), not closed after what was queued", n, err)
	}
}

func TestNoGoroutineLeakAfterShutdown(t *testing.T) {
	before := runtime.NumGoroutine()
	s, err := NewServer(Options{Router: testRouter()})
	if err != nil {
		t.Fatal(err)
	}
	addr := startServer(t, s, false)
	var clients []*Client
	for range 5 {
		c, err := Dial(context.Background(), "ws://"+addr+"/ws", ClientOptions{Reconnect: Reconnect{Disabled: true}})
		if err != nil {
			t.Fatal(err)
		}
		c.Join(context.Background(), "room")
		clients = append(clients, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range clients {
		c.Close()
	}
	checkGoroutinesBack(t, before, 5*time.Second, "after Shutdown")
}

// A client that sends calls and never reads their answers: the server
// stops reading it once the socket is full (a turn's answers wait for the
// socket), the silence trips IdleTimeout, and the answers still waiting get
// closeTimeout to leave before the connection is dropped; memory stays
// bounded by the outbox and the socket buffers, and other connections are
// served. The connection used to stay open as long as the peer did.
func TestCallerThatNeverReads(t *testing.T) {
	t.Parallel()
	s, addr := newTestServer(t, Options{KeepaliveInterval: 100 * time.Millisecond, IdleTimeout: 500 * time.Millisecond, Limits: Limits{MaxOutboxBytes: 1 << 20}})
	slow := dial(t, addr)
	payload := make([]byte, 256<<10)
	// Writes block once the server stops reading; they fail when it drops
	// the connection (the deadline only bounds a failing test).
	slow.NC.SetWriteDeadline(time.Now().Add(30 * time.Second))
	for i := 1; i <= 256; i++ { // 64 MiB at most, far past the socket buffers
		if err := slow.WriteMessage(wsframe.OpBinary, wire.AppendCall(nil, dispatch.KindCall, uint32(i), "echo/raw", 0, payload)); err != nil {
			break
		}
	}
	waitFor(t, func() bool { return s.Metrics().Connections == 0 })
	if m := s.Metrics(); m.IdleTimeouts != 1 {
		t.Errorf("IdleTimeouts = %d, want 1", m.IdleTimeouts)
	}
	c := dialClient(t, addr, ClientOptions{})
	if err := c.Call(context.Background(), "echo/raw", []byte("x"), nil); err != nil {
		t.Fatalf("another client: %v", err)
	}
}

// The answers of one turn that the outbox cannot take wait up to
// closeTimeout for room, as the others do, and then the connection is
// dropped as a slow consumer. In a turn, the wait used to begin by writing
// the turn's answers so far inline, which for a peer that reads nothing
// blocked until IdleTimeout had passed and closeTimeout after it (63 s
// here); the 3 s held only when a flusher was writing already. The bound
// below is a hang bound, ten times the 3 s.
func TestAnswersOfOneTurnWaitForRoomAsOthersDo(t *testing.T) {
	r := testRouter()
	big := make([]byte, 256<<10)
	Handle(r, "test/big", func(ctx context.Context, _ struct{}) ([]byte, error) { return big, nil })
	s, addr := newTestServer(t, Options{Router: r, IdleTimeout: time.Minute, Limits: Limits{MaxOutboxBytes: 1 << 20}})
	slow := dial(t, addr)
	// 96 calls in one write, read in one turn: 24 MiB of answers, far past
	// the outbox and the socket buffers.
	var calls []byte
	for i := uint32(1); i <= 96; i++ {
		calls = wsframe.AppendMaskedFrame(calls, wsframe.OpBinary, wire.AppendCall(nil, dispatch.KindCall, i, "test/big", 0, []byte("{}")), wsframe.Fin, wsframe.NewMaskKey())
	}
	if _, err := slow.NC.Write(calls); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * closeTimeout)
	for m := s.Metrics(); m.ConnectionsTotal != 1 || m.Connections != 0; m = s.Metrics() {
		if time.Now().After(deadline) {
			t.Fatalf("the connection was not dropped within %v: %+v", 10*closeTimeout, m)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if m := s.Metrics(); m.SlowConsumers != 1 || m.IdleTimeouts != 0 {
		t.Errorf("SlowConsumers = %d, IdleTimeouts = %d; want 1, 0", m.SlowConsumers, m.IdleTimeouts)
	}
}

// An answer is never dropped: when the outbox cannot take the answer of an
// Async call (the peer reads nothing while the answers pile up past the
// socket buffers and MaxOutboxBytes), the connection is dropped as a slow
// consumer (1006 for the peer, hotpath_slow_consumers_total), and other
// connections are served.
func TestSlowCallerOfAsyncMethodsIsDropped(t *testing.T) {
	r := testRouter()
	big := make([]byte, 256<<10)
	Handle(r, "test/big", func(ctx context.Context, _ struct{}) ([]byte, error) { return big, nil }, Async())
	s, addr := newTestServer(t, Options{Router: r, Limits: Limits{MaxOutboxBytes: 1 << 20}})
	slow := dial(t, addr)
	for i := uint32(1); i <= 96; i++ { // 24 MiB of answers, far past the socket buffers
		if err := slow.WriteMessage(wsframe.OpBinary, wire.AppendCall(nil, dispatch.KindCall, i, "test/big", 0, []byte("{}"))); err != nil {
			break
		}
	}
	// The server counts a connection after writing its upgrade response,
	// which is all dial waits for, and the calls fit in the socket
	// buffers: wait for the connection to be counted, then to be gone.
	waitFor(t, func() bool { m := s.Metrics(); return m.ConnectionsTotal == 1 && m.Connections == 0 })
	if n := s.Metrics().SlowConsumers; n != 1 {
		t.Errorf("SlowConsumers = %d, want 1: one connection dropped", n)
	}
	c := dialClient(t, addr, ClientOptions{})
	if err := c.Call(context.Background(), "echo/raw", []byte("x"), nil); err != nil {
		t.Fatalf("another client: %v", err)
	}
}

// TestOversizedMessageCloseFrameArrives: a peer still sending a message
// over the limit when the server refuses it can finish sending it and read
// the close frame (1009). The server closed its socket with the rest of
// the message unread, which answers the rest with a TCP reset: Chromium's
// write failed and it reported 1006 (carriertest's "the page sees 1009 on
// WebSocket"). The server now lingers (lingerClose).
func TestOversizedMessageCloseFrameArrives(t *testing.T) {
	_, addr := newTestServer(t, Options{Limits: Limits{MaxMessageSize: 64 << 10}})
	c := dial(t, addr)
	const n = 2 << 20
	h := wsframe.AppendHeader(nil, wsframe.Header{Flags: wsframe.Fin, Opcode: wsframe.OpBinary, Masked: true, Length: n})
	if err := c.WriteRaw(h); err != nil {
		t.Fatal(err)
	}
	// The rest comes after the server refused the header, as a browser's
	// does, and then the answer to the server's close frame.
	time.Sleep(200 * time.Millisecond)
	if err := c.WriteRaw(make([]byte, n)); err != nil {
		t.Fatalf("writing the rest of the message: %v (the server reset the connection)", err)
	}
	if code, err := c.ReadClose(5 * time.Second); code != wsframe.CloseMessageTooBig {
		t.Fatalf("close %d (%v), want 1009", code, err)
	}
}

// checkGoroutinesBack fails t unless the process's goroutines are back to
// at most before within d, with every goroutine's stack in the failure.
func checkGoroutinesBack(t testing.TB, before int, d time.Duration, after string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines %s, %d before:\n%s", n, after, before, buf[:runtime.Stack(buf, true)])
	}
}

// Asks to one peer that await their answers are bounded by
// Limits.MaxPendingAsks: one more fails at once with ErrTooManyAsks,
// unsent; the connection lives on, and an answer makes room again.
func TestAskPendingBound(t *testing.T) {
	const limit = 4
	peers := make(chan *Peer, 1)
	_, addr := newTestServer(t, Options{Limits: Limits{MaxPendingAsks: limit}, OnConnect: func(p *Peer) { peers <- p }})
	c := dial(t, addr) // reads the asks, answers one only
	p := <-peers
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	results := make(chan error, limit+1)
	ask := func() { results <- p.Ask(ctx, "never/answered", nil, nil) }
	var ids []uint32
	for range limit {
		go ask()
		pk := readPacket(t, c)
		if pk.Kind != dispatch.KindAsk {
			t.Fatalf("got %+v, want an ask", pk)
		}
		ids = append(ids, pk.ID)
	}
	// Without the bound it would be sent and wait: a hang bound of 2 s.
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	defer cancelShort()
	if err := p.Ask(short, "never/answered", nil, nil); !errors.Is(err, ErrTooManyAsks) {
		t.Fatalf("ask past the bound: %v, want ErrTooManyAsks", err)
	}
	// An answer frees a slot: the next ask is sent.
	c.WriteMessage(wsframe.OpBinary, wire.Append(nil, &wire.Packet{Kind: dispatch.KindAnswer, ID: ids[0], Payload: []byte(`null`)}))
	if err := <-results; err != nil {
		t.Fatalf("answered ask: %v", err)
	}
	go ask()
	if pk := readPacket(t, c); pk.Kind != dispatch.KindAsk {
		t.Fatalf("got %+v, want the ask sent once a slot was free", pk)
	}
	// The connection lives on.
	c.WriteMessage(wsframe.OpBinary, wire.AppendCall(nil, dispatch.KindCall, 1, "echo/raw", 0, []byte(`"x"`)))
	if pk := readPacket(t, c); pk.Kind != dispatch.KindResult || pk.ID != 1 {
		t.Fatalf("got %+v, want the call's result", pk)
	}
	c.Close()
	for range limit {
		if err := <-results; !errors.Is(err, ErrCanceled) {
			t.Errorf("pending ask at the end of the connection: %v, want ErrCanceled", err)
		}
	}
}

// A client's room emit over Limits.MaxEmitSize is dropped and counted,
// not relayed, and logged once per connection; one within it is relayed,
// and the connection lives on.
func TestEmitSizeBound(t *testing.T) {
	var log lockedBuffer
	s, addr := newTestServer(t, Options{
		Limits: Limits{MaxEmitSize: 16},
		Logger: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	a, b := dial(t, addr), dial(t, addr)
	for i, c := range []*wstest.Conn{a, b} {
		id := uint32(i + 1)
		c.WriteMessage(wsframe.OpBinary, wire.Append(nil, &wire.Packet{Kind: dispatch.KindJoin, ID: id, Room: []byte("r")}))
		for p := readPacket(t, c); p.Kind != dispatch.KindResult || p.ID != id; p = readPacket(t, c) {
		}
	}
	dropped := s.Metrics().DroppedEvents
	emit := func(event, payload string) {
		a.WriteMessage(wsframe.OpBinary, wire.Append(nil, &wire.Packet{Kind: dispatch.KindEmit, Room: []byte("r"), Name: []byte(event), Payload: []byte(payload)}))
	}
	emit("big", `"`+strings.Repeat("x", 15)+`"`) // 17 bytes
	emit("big", `"`+strings.Repeat("x", 100)+`"`)
	emit("small", `"`+strings.Repeat("x", 14)+`"`) // 16 bytes
	for {
		p := readPacket(t, b)
		if p.Kind != dispatch.KindEmit || p.Name[0] == '$' {
			continue
		}
		if string(p.Name) != "small" {
			t.Fatalf("the other member received %q, want only the emit within the bound", p.Name)
		}
		break
	}
	if n := s.Metrics().DroppedEvents - dropped; n != 2 {
		t.Errorf("%d emits dropped, want 2", n)
	}
	if n := strings.Count(log.String(), "MaxEmitSize"); n != 1 {
		t.Errorf("%d log lines about MaxEmitSize, want 1:\n%s", n, log.String())
	}
}

// The server announces Limits.MaxEmitSize (maxEmit, PROTOCOL.md §4.9), and
// the Go client holds Emit and EmitUnreliable to it, measuring the payload
// as the server does (the codec's bytes): over it, an error matching
// ErrMessageTooBig that names the limit, and nothing sent, where the
// server dropped it unseen and Emit returned nil; at it, delivered.
func TestClientHoldsEmitsToMaxEmitSize(t *testing.T) {
	const limit = 16
	e := newCarrierEnv(t, Options{Limits: Limits{MaxEmitSize: limit}})
	fits := `"` + strings.Repeat("x", limit-2) + `"` // raw JSON, 16 bytes
	over := strings.Repeat("x", limit-1)             // JSON-encoded: 17 bytes
	for _, carrier := range append([]Carrier{CarrierWebSocket}, goCarriers...) {
		t.Run(carrierName(carrier), func(t *testing.T) {
			room := "r-" + carrierName(carrier)
			a := e.dial(t, carrier, ClientOptions{})
			b := e.dial(t, carrier, ClientOptions{})
			got := make(chan string, 64)
			b.OnRoom(room, "e", func(m Message) {
				select {
				case got <- string(m.Data):
				default:
				}
			})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for _, c := range []*Client{a, b} {
				if _, err := c.Join(ctx, room); err != nil {
					t.Fatal(err)
				}
			}
			dropped := e.srv.Metrics().DroppedEvents
			for name, emit := range map[string]func(string, string, any, bool) error{"Emit": a.Emit, "EmitUnreliable": a.EmitUnreliable} {
				err := emit(room, "e", over, true)
				if !errors.Is(err, ErrMessageTooBig) || !strings.Contains(err.Error(), fmt.Sprint(limit)) {
					t.Errorf("%s of a %d-byte payload: %v, want ErrMessageTooBig naming the limit %d", name, limit+1, err, limit)
				}
			}
			if err := a.Emit(room, "e", []byte(fits), true); err != nil {
				t.Fatalf("Emit at the limit: %v", err)
			}
			select {
			case m := <-got:
				if m != fits {
					t.Fatalf("the other member received %q, want %q", m, fits)
				}
			case <-ctx.Done():
				t.Fatal("an Emit at the limit never arrived")
			}
			// A datagram may be lost: sent again until one arrives.
			resend := time.NewTicker(50 * time.Millisecond)
			defer resend.Stop()
		unreliable:
			for {
				if err := a.EmitUnreliable(room, "e", []byte(fits), true); err != nil {
					t.Fatalf("EmitUnreliable at the limit: %v", err)
				}
				select {
				case <-got:
					break unreliable
				case <-ctx.Done():
					t.Fatal("no EmitUnreliable at the limit arrived")
				case <-resend.C:
				}
			}
			if n := e.srv.Metrics().DroppedEvents - dropped; n != 0 {
				t.Errorf("the server dropped %d emits: the client sent what it should have refused", n)
			}
		})
	}
}

// Dial refuses, before dialling, the ClientOptions it cannot use with an
// *OptionError that names the field as ClientOptions spells it, as
// NewServer does its Options', the messages as they were. Nothing listens
// at the URLs: a refusal that let the dial go on fails there.
func TestDialRefusesBadOptions(t *testing.T) {
	ok := func(ctx context.Context, req int) (int, error) { return req, nil }
	handlers := func(register func(r *Router)) *Router {
		r := NewRouter()
		register(r)
		return r
	}
	const ws, dtls = "ws://127.0.0.1:1/ws", "sctp+dtls://127.0.0.1:9"
	// Messages as they were before the refusals became *OptionErrors.
	messages := map[string]string{
		"inflate rate below max message": "compat: ClientOptions.Limits.MaxInflateRate 524288 is below MaxMessageSize (1048576) a second; set it higher, or negative for no limit",
		"max delay below min delay":      "compat: Reconnect.MaxDelay 1ms is below MinDelay 1s",
		"keepalive equal to idle":        "compat: KeepaliveInterval 1s is not shorter than IdleTimeout 1s: a silent peer would be dropped before it is pinged",
		"duplicate handler":              `compat: methods: dispatch: method "a/b" registered twice, as routes 0 and 1`,
		"sctp+dtls without DTLSConfig":   "compat: sctp+dtls needs ClientOptions.DTLSConfig",
	}
	for name, tc := range map[string]struct {
		url   string
		opts  ClientOptions
		field string
	}{
		"keepalive equal to idle":        {ws, ClientOptions{KeepaliveInterval: time.Second, IdleTimeout: time.Second}, "KeepaliveInterval"},
		"keepalive over idle":            {ws, ClientOptions{KeepaliveInterval: time.Minute, IdleTimeout: time.Second}, "KeepaliveInterval"},
		"inflate rate below max message": {ws, ClientOptions{Limits: Limits{MaxMessageSize: 1 << 20, MaxInflateRate: 1 << 19}}, "Limits.MaxInflateRate"},
		"sctp rto max negative":          {ws, ClientOptions{SCTPRTOMax: -time.Second}, "SCTPRTOMax"},
		"sctp rto max below rto min":     {ws, ClientOptions{SCTPRTOMax: time.Millisecond}, "SCTPRTOMax"},
		"sctp rto max above rto max":     {ws, ClientOptions{SCTPRTOMax: maxSCTPRTOMax + time.Millisecond}, "SCTPRTOMax"},
		"max delay below min delay":      {ws, ClientOptions{Reconnect: Reconnect{MinDelay: time.Second, MaxDelay: time.Millisecond}}, "Reconnect.MaxDelay"},
		"empty handler name":             {ws, ClientOptions{Handlers: handlers(func(r *Router) { Handle(r, "", ok) })}, "Handlers"},
		"reserved event name":            {ws, ClientOptions{Handlers: handlers(func(r *Router) { HandleEvent(r, "$close", func(context.Context, int) {}) })}, "Handlers"},
		"duplicate handler":              {ws, ClientOptions{Handlers: handlers(func(r *Router) { Handle(r, "a/b", ok); Handle(r, "a/b", ok) })}, "Handlers"},
		"sctp+dtls without DTLSConfig":   {dtls, ClientOptions{}, "DTLSConfig"},
		// Refused before the address is resolved, whose error it was.
		"sctp+dtls without DTLSConfig, bad port": {"sctp+dtls://127.0.0.1:99999", ClientOptions{}, "DTLSConfig"},
	} {
		tc.opts.ConnectTimeout = 2 * time.Second
		tc.opts.Reconnect.Disabled = true
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, err := Dial(ctx, tc.url, tc.opts)
		cancel()
		if err == nil {
			c.Close()
		}
		var oe *OptionError
		if !errors.As(err, &oe) || oe.Option != tc.field {
			t.Errorf("%s: Dial: %v (%#v), want an *OptionError for %s", name, err, oe, tc.field)
		} else if want, ok := messages[name]; ok && err.Error() != want {
			t.Errorf("%s: Dial: %q, want %q", name, err, want)
		}
	}
	// A URL's fault is not an option's.
	if _, err := Dial(context.Background(), "gopher://127.0.0.1:1/", ClientOptions{}); err == nil || errors.As(err, new(*OptionError)) {
		t.Errorf("Dial with a bad scheme: %v, want an error that is no *OptionError", err)
	}
}
