package compat

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// The bucket's arithmetic on a fake clock: a full bucket pays its burst
// (one second of the rate), an emit it cannot pay is refused and not
// charged, time earns deliveries back at the rate up to the burst, and an
// emit larger than the burst passes from a full bucket only, leaving it
// owing the rest.
func TestEmitBudgetArithmetic(t *testing.T) {
	const rate = 10 // deliveries a second; the burst is 10
	sec := int64(time.Second)
	var b emitBudget // the zero value is a full bucket
	take := func(n int, now int64, want bool) {
		t.Helper()
		if got := b.take(n, now, rate); got != want {
			t.Fatalf("take(%d) at %v with %.2f spent: %v, want %v", n, time.Duration(now), b.spent, got, want)
		}
	}
	take(4, 0, true)
	take(4, 0, true)
	take(4, 0, false) // 8 spent: 2 left
	take(2, 0, true)
	take(1, 0, false)
	if b.spent != rate {
		t.Fatalf("%.2f spent after refusals, want %d: a refused emit was charged", b.spent, rate)
	}
	// A tenth of a second earns one delivery back.
	take(1, sec/10, true)
	take(1, sec/10, false)
	// The clock going back (it does not, monoNow is monotonic) earns
	// nothing.
	take(1, 0, false)
	// An hour later the bucket holds its burst, not an hour's deliveries.
	take(rate, 3600*sec, true)
	take(1, 3600*sec, false)
	// Larger than the burst: refused from a bucket not full, though it
	// has something left, and passed from a full one, which then owes
	// 15 past empty: a second and a half to be back at empty, and a
	// tenth more for the next delivery.
	take(5, 3601*sec, true)
	take(25, 3601*sec+sec/10, false)
	take(25, 3603*sec, true)
	take(1, 3604*sec, false)
	take(1, 3604*sec+sec/2, false)
	take(1, 3604*sec+6*sec/10, true)
}

// emitRateRoom is a room "r" of four members on a server whose emit
// budgets' clock is stopped, over WebSocket: the sender a (dialled by the
// caller's carrier), the receivers b and c, and another sender d. What b
// and c receive from a and d is in their channels, by event name, in
// order.
type emitRateRoom struct {
	srv        *Server
	log        *lockedBuffer
	a, d       *Client
	gotB, gotC chan string
}

func newEmitRateRoom(t *testing.T, rate int, quic bool) *emitRateRoom {
	t.Helper()
	e := &emitRateRoom{log: &lockedBuffer{}, gotB: make(chan string, 64), gotC: make(chan string, 64)}
	s, err := NewServer(Options{
		Router: testRouter(), NoPresence: true, Limits: Limits{MaxEmitRate: rate},
		Logger: slog.New(slog.NewTextHandler(e.log, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	// Stopped before the server serves: no refill while the test runs,
	// however long it takes.
	s.rooms.now = func() int64 { return int64(time.Hour) }
	e.srv = s
	addr := startServer(t, s, false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if quic {
		qln, err := s.ListenQUIC("127.0.0.1:0", testCert().ServerTLSConfig())
		if err != nil {
			t.Fatal(err)
		}
		go s.ServeQUIC(qln)
		t.Cleanup(func() { qln.Close() })
		e.a, err = Dial(ctx, "quic://"+qln.Addr().String(), ClientOptions{TLSConfig: testCert().ClientTLSConfig()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.a.Close() })
	} else {
		e.a = dialClient(t, addr, ClientOptions{})
	}
	b, c := dialClient(t, addr, ClientOptions{}), dialClient(t, addr, ClientOptions{})
	e.d = dialClient(t, addr, ClientOptions{})
	for member, got := range map[*Client]chan string{b: e.gotB, c: e.gotC} {
		for _, event := range []string{"a", "d"} {
			member.OnRoom("r", event, func(Message) {
				select {
				case got <- event:
				default:
					t.Error("a member received more than its channel holds")
				}
			})
		}
	}
	for _, cl := range []*Client{e.a, b, c, e.d} {
		if _, err := cl.Join(ctx, "r"); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// received reads got up to d's next mark and returns how many of a's
// emits came before it.
// emitsFromA has a send n except-sender emits to the room, then a call,
// answered (the sender's connection stays), then d its mark. a's emits
// were handled before its call, on its read loop, and d's mark leaves
// after the answer: b and c have every emit of a that was relayed before
// the mark (received).
func (e *emitRateRoom) emitsFromA(t *testing.T, n int) {
	t.Helper()
	for range n {
		if err := e.a.Emit("r", "a", "x", true); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out echoReq
	if err := e.a.Call(ctx, "echo/say", echoReq{Text: "still here"}, &out); err != nil || out.Text != "still here" {
		t.Fatalf("the sender's call after its emits: %+v, %v", out, err)
	}
	if err := e.d.Emit("r", "d", "mark", true); err != nil {
		t.Fatal(err)
	}
}

func received(t *testing.T, got chan string) (fromA int) {
	t.Helper()
	for {
		select {
		case ev := <-got:
			if ev == "d" {
				return fromA
			}
			fromA++
		case <-time.After(10 * time.Second):
			t.Fatalf("no mark from d after %d emits from a", fromA)
		}
	}
}

// A client's emits past Limits.MaxEmitRate are dropped and counted
// (PROTOCOL.md §4.6: emits the server refuses by its own rules): a burst
// of ten except-sender emits to a room of four (3 deliveries each) at 6
// deliveries a second, the clock stopped, relays two, the bucket's
// burst; the eight others are counted in EmitThrottled and DroppedEvents
// and logged once. The sender's connection stays and its call is
// answered, and another member's emits into the room, on a budget of its
// own, are relayed.
func TestEmitRateDropsPastTheBudget(t *testing.T) {
	e := newEmitRateRoom(t, 6, false)
	const burst = 10
	e.emitsFromA(t, burst)
	for name, got := range map[string]chan string{"b": e.gotB, "c": e.gotC} {
		if n := received(t, got); n != 2 {
			t.Errorf("%s received %d of a's %d emits, want 2 (6 deliveries a second, 3 an emit, the clock stopped)", name, n, burst)
		}
	}
	m := e.srv.Metrics()
	if m.EmitThrottled != burst-2 || m.DroppedEvents != burst-2 {
		t.Errorf("%d emits throttled, %d dropped events; want %d each", m.EmitThrottled, m.DroppedEvents, burst-2)
	}
	var prom strings.Builder
	m.WritePrometheus(&prom)
	if want := fmt.Sprintf("\nhotpath_emit_throttled_total %d\n", burst-2); !strings.Contains(prom.String(), want) {
		t.Errorf("Prometheus output has no %q", strings.TrimSpace(want))
	}
	if n := strings.Count(e.log.String(), "MaxEmitRate"); n != 1 {
		t.Errorf("%d log lines about MaxEmitRate, want 1:\n%s", n, e.log.String())
	}
	// d's budget is its own: its mark passed while a's was spent, and a
	// second, the rest of its burst, passes too.
	if err := e.d.Emit("r", "d", "mark", true); err != nil {
		t.Fatal(err)
	}
	if n := received(t, e.gotB); n != 0 {
		t.Errorf("b received %d more emits of a", n)
	}
}

// A negative Limits.MaxEmitRate relays every emit; 0 takes the default.
func TestEmitRateOff(t *testing.T) {
	e := newEmitRateRoom(t, -1, false)
	const burst = 10
	e.emitsFromA(t, burst)
	if n := received(t, e.gotB); n != burst {
		t.Errorf("b received %d of a's %d emits with the limit off", n, burst)
	}
	if m := e.srv.Metrics(); m.EmitThrottled != 0 || m.DroppedEvents != 0 {
		t.Errorf("%d emits throttled, %d dropped events with the limit off", m.EmitThrottled, m.DroppedEvents)
	}
	for rate, want := range map[int]int{0: defaultMaxEmitRate, -1: -1, 7: 7} {
		if got := (Limits{MaxEmitRate: rate}).withDefaults().MaxEmitRate; got != want {
			t.Errorf("MaxEmitRate %d reads as %d, want %d", rate, got, want)
		}
	}
}

// Emits that arrive as datagrams (PROTOCOL.md §4.6, §8.4; the Go
// client's EmitUnreliable over native QUIC, handled off the read loop)
// are charged as the others: of ten to a room of four, except-sender, at
// 6 deliveries a second, two are relayed (to the WebSocket members,
// reliably) and eight dropped.
func TestEmitRateChargesDatagrams(t *testing.T) {
	e := newEmitRateRoom(t, 6, true)
	if c := e.srv.snapshotPeers(); len(c) != 4 {
		t.Fatalf("%d peers, want 4", len(c))
	}
	const burst = 10
	before := e.srv.Metrics()
	for range burst {
		if err := e.a.EmitUnreliable("r", "a", "x", true); err != nil {
			t.Fatal(err)
		}
	}
	// Datagrams are handled off the read loop, in no order with a's
	// calls: wait for every one to be relayed or dropped.
	handled := func() uint64 {
		m := e.srv.Metrics()
		return m.Emits - before.Emits + m.EmitThrottled
	}
	deadline := time.Now().Add(5 * time.Second)
	for handled() < burst && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := handled(); n < burst {
		t.Skipf("%d of %d datagrams reached the server: lost on loopback", n, burst)
	}
	for name, got := range map[string]chan string{"b": e.gotB, "c": e.gotC} {
		for range 2 {
			select {
			case <-got:
			case <-time.After(10 * time.Second):
				t.Fatalf("%s did not receive a's first two emits", name)
			}
		}
	}
	if err := e.d.Emit("r", "d", "mark", true); err != nil {
		t.Fatal(err)
	}
	if n := received(t, e.gotB); n != 0 {
		t.Errorf("b received %d more than 2 of a's emits", n)
	}
	m := e.srv.Metrics()
	if emits := m.Emits - before.Emits; emits != 3 || m.EmitThrottled != burst-2 || m.DroppedEvents != burst-2 {
		t.Errorf("%d emits relayed (a's and d's mark), %d throttled, %d dropped events; want 3, %d, %d", emits, m.EmitThrottled, m.DroppedEvents, burst-2, burst-2)
	}
}
