package compat

import (
	"bytes"
	"compress/flate"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"github.com/hotpath-go/hotpath/compat/internal/wstest"
	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/dictionary"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/wsframe"
)

var (
	soakRounds   = flag.Int("soak.rounds", 3, "TestSoakRounds: how many rounds to run")
	soakDuration = flag.Duration("soak.duration", 0, "TestSoakRounds: run rounds until this much time has passed, instead of -soak.rounds")
)

// TestSoakRounds looks for what a long-running server would leak: one
// server lives through rounds of ordinary and bad traffic on every
// carrier, and every round must leave it as the first one did. In a
// round, Go clients on every carrier (half with the dictionary) join the
// shared room and a room of their own, call, get asked, emit, fail and
// cancel calls, stream and abort streams (QUIC, WebTransport), and close,
// half of them leaving their room first; three are closed by the server
// once and reconnect. The browser client (compat/js) does the same but
// streams, under Node, where there is a node (testdata/soakclient.mjs).
// The server emits to the shared room, reliably and as datagrams. Beside
// them bad peers send a malformed packet, a frame over the limit or a
// compression bomb, stop reading until they are dropped, vanish mid-frame
// or in their handshake, and put garbage on QUIC, SCTP and WebTransport;
// in one round of ten (the first included) a member goes silent and is
// left to keepalive. After each round the server must be empty (no
// connection, room, keepalive or timeout entry, handshake in progress),
// the process's goroutines and descriptors back to what they were after
// the first round, its live heap under twice that round's (plus 8 MiB;
// one round over it is let pass), and every Go client it closed collected
// within 10 s. Each round's figures, with how many closed clients were
// still reachable and for how long, are logged (-test.v).
//
// CI runs 3 rounds; a soak is `go test ./compat -run TestSoakRounds -v
// -timeout 30m -soak.duration 20m` (or -soak.rounds N), whose log shows
// the trend: go test's own -timeout is 10 minutes unless given, and the
// soak's flags go after the package.
func TestSoakRounds(t *testing.T) {
	if testing.Short() {
		t.Skip("soak: some seconds per round on every carrier")
	}
	r := streamRouter()
	Handle(r, "soak/ask", func(ctx context.Context, n int) (int, error) {
		var doubled int
		err := PeerFrom(ctx).Ask(ctx, "client/double", n, &doubled)
		return doubled, err
	}, Async())
	e := newCarrierEnv(t, Options{
		Router:       r,
		Limits:       Limits{MaxMessageSize: soakMaxMessage, MaxOutboxBytes: soakOutbox},
		SlowConsumer: Disconnect,
		Compression:  Compression{ContextTakeover: true},
		// A silent peer is given up 3 s after its last packet (see
		// soakBadPeers); the good clients talk all the while.
		KeepaliveInterval: time.Second,
		IdleTimeout:       3 * time.Second,
	})
	dict, err := RouterDictionary(r)
	if err != nil {
		t.Fatal(err)
	}
	bomb := deflateBomb(t, soakMaxMessage)
	if soakNode() == nil {
		t.Log("no node with a WebSocket: the browser client sits the soak out")
	}

	began := time.Now()
	var first soakSample
	var over int // rounds in a row with the heap over its bound
	for round := 1; ; round++ {
		if *soakDuration > 0 && time.Since(began) > *soakDuration || *soakDuration <= 0 && round > *soakRounds {
			break
		}
		roundBegan := time.Now()
		soakRound(t, e, round, dict, bomb)
		if t.Failed() {
			return
		}
		s := soakSettle(t, e, round, first)
		if t.Failed() {
			return
		}
		t.Logf("round %d (%v): %d goroutines, %d descriptors, %d KiB live heap; %d connections so far; %d closed clients reachable, for %v more",
			round, time.Since(roundBegan).Round(time.Millisecond), s.goroutines, s.fds, s.heap>>10, e.srv.Metrics().ConnectionsTotal, s.held, s.heldFor.Round(time.Millisecond))
		if round == 1 {
			first = s
			continue
		}
		// One round over the bound is let pass: a 20-minute soak saw a
		// few rounds 4-8 MiB over the usual 3-4 MiB, never two in a row
		// (bench/results/soak-2026-12-06.txt). A leak stays.
		if s.heap > 2*first.heap+(8<<20) {
			over++
		} else {
			over = 0
		}
		if over == 2 {
			t.Fatalf("rounds %d and %d: %d KiB live heap at the last, %d KiB after round 1; want at most twice as much (and 8 MiB)", round-1, round, s.heap>>10, first.heap>>10)
		}
	}
}

const (
	soakMaxMessage = 64 << 10
	soakOutbox     = 256 << 10
)

// soakRound runs one round's clients and bad peers at once and returns
// when all of them are done.
func soakRound(t *testing.T, e *carrierEnv, round int, dict *dictionary.Dictionary, bomb []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	carriers := []Carrier{CarrierWebSocket, CarrierWebSocket, CarrierQUIC, CarrierWebTransport, CarrierSCTP, carrierSCTPDTLS, CarrierWebRTC}
	for i, carrier := range carriers {
		wg.Go(func() {
			var d *dictionary.Dictionary
			if i%2 == 1 {
				d = dict
			}
			name := fmt.Sprintf("round %d, %s client #%d", round, carrierName(carrier), i)
			if err := soakClient(ctx, e, carrier, fmt.Sprintf("own-%d-%d", round, i), i%2 == 0, i < 3, d); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		})
	}
	if node := soakNode(); node != nil {
		wg.Go(func() {
			// It leaves its room every other round, and is closed by the
			// server once every third, the first included.
			if err := soakJSClient(ctx, node, e.urls[CarrierWebSocket], fmt.Sprintf("own-%d-js", round), round%2 == 0, round%3 == 1); err != nil {
				t.Errorf("round %d, browser client: %v", round, err)
			}
		})
	}
	wg.Go(func() { // the server's own emits, reliable and not, to the shared room
		for i := range 20 {
			e.srv.Emit("soak", "s", i)
			e.srv.EmitUnreliable("soak", "u", i)
			time.Sleep(time.Millisecond)
		}
	})
	for _, bad := range soakBadPeers(e, bomb, round%10 == 1) {
		wg.Go(func() {
			if err := bad.run(); err != nil {
				t.Errorf("round %d, %s: %v", round, bad.name, err)
			}
		})
	}
	wg.Wait()
}

// soakClient is one good client's round: it must get every answer and
// every emit of its own room, and end without an error. With reconnect,
// the server closes its first connection once it has joined its rooms,
// and it goes on on the next.
func soakClient(ctx context.Context, e *carrierEnv, carrier Carrier, own string, leave, reconnect bool, dict *dictionary.Dictionary) error {
	handlers := NewRouter()
	Handle(handlers, "client/double", func(ctx context.Context, n int) (int, error) { return 2 * n, nil })
	policy := Reconnect{Disabled: true}
	if reconnect {
		policy = Reconnect{MinDelay: 5 * time.Millisecond, MaxDelay: 20 * time.Millisecond}
	}
	states := make(chan State, 8)
	c, err := Dial(ctx, e.urls[carrier], ClientOptions{
		TLSConfig:  e.cert.ClientTLSConfig(),
		DTLSConfig: e.cert.ClientDTLSConfig(),
		WebRTC:     WebRTCOptions{LoopbackOnly: true},
		Dictionary: dict,
		Handlers:   handlers,
		Reconnect:  policy,
		OnState:    sendState(states),
	})
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	soakDialed.add(c, fmt.Sprintf("%s on %s (reconnect %v, dictionary %v)", own, carrierName(carrier), reconnect, dict != nil))
	defer c.Close()

	const emits = 10
	var received atomic.Int32
	all := make(chan struct{})
	c.OnRoom(own, "n", func(Message) {
		if received.Add(1) == emits {
			close(all)
		}
	})
	for _, room := range []string{"soak", own} {
		if _, err := c.Join(ctx, room); err != nil {
			return fmt.Errorf("join %s: %w", room, err)
		}
	}
	if reconnect {
		if err := c.Event("conn/close", nil); err != nil {
			return fmt.Errorf("conn/close: %w", err)
		}
		for s := State(0); s != Connected; {
			select {
			case s = <-states:
			case <-ctx.Done():
				return errors.New("not connected again after the server closed its connection")
			}
		}
	}
	for i := range 20 {
		payload := bytes.Repeat([]byte{byte('a' + i)}, i*997%(8<<10)) // some past the compression threshold
		var got []byte
		if err := c.Call(ctx, "echo/raw", payload, &got); err != nil || !bytes.Equal(got, payload) {
			return fmt.Errorf("echo/raw of %d bytes: %d bytes back, %v", len(payload), len(got), err)
		}
	}
	var doubled int
	if err := c.Call(ctx, "soak/ask", 21, &doubled); err != nil || doubled != 42 {
		return fmt.Errorf("soak/ask (the server asks the client): %d, %v; want 42", doubled, err)
	}
	var e1001 *Error
	if err := c.Call(ctx, "test/fail", echoReq{Text: "x"}, nil); !errors.As(err, &e1001) || e1001.Code != 1001 {
		return fmt.Errorf("test/fail: %v; want the handler's error 1001", err)
	}
	short, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
	err = c.Call(short, "test/sleep", 10_000, nil)
	cancel()
	if !errors.Is(err, ErrTimeout) {
		return fmt.Errorf("test/sleep past its caller's deadline: %v; want ErrTimeout", err)
	}
	for i := range emits {
		if err := c.Emit(own, "n", i, false); err != nil {
			return fmt.Errorf("emit %d: %w", i, err)
		}
	}
	if err := c.Emit("soak", "n", 0, true); err != nil {
		return fmt.Errorf("emit to the shared room: %w", err)
	}
	select {
	case <-all:
	case <-ctx.Done():
		return fmt.Errorf("%d of %d emits to its own room arrived", received.Load(), emits)
	}
	if carrier == CarrierQUIC || carrier == CarrierWebTransport {
		if err := soakStreams(ctx, c); err != nil {
			return err
		}
	}
	if leave {
		if _, err := c.Leave(ctx, own); err != nil {
			return fmt.Errorf("leave %s: %w", own, err)
		}
	}
	return c.Close()
}

// soakNode is the command that runs the browser client under Node: node,
// with the flag Node 20 needs for its WebSocket; nil without a node.
var soakNode = sync.OnceValue(func() []string {
	node, err := exec.LookPath("node")
	if err != nil {
		return nil
	}
	wsFlag, err := exec.Command(node, "-e", `process.stdout.write(typeof WebSocket > "u" ? "--experimental-websocket" : "")`).Output()
	if err != nil {
		return nil
	}
	if len(wsFlag) > 0 {
		return []string{node, string(wsFlag)}
	}
	return []string{node}
})

// soakJSClient runs testdata/soakclient.mjs, the browser client's part of
// a round, which exits 0 once it got every answer and emit it waited for.
// Its process must end too: a timer or socket the client left behind
// after its close would keep it running.
func soakJSClient(ctx context.Context, node []string, url, own string, leave, reconnect bool) error {
	args := append(node[1:len(node):len(node)], "testdata/soakclient.mjs", url, own, strconv.FormatBool(leave), strconv.FormatBool(reconnect))
	if out, err := exec.CommandContext(ctx, node[0], args...).CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	return nil
}

// soakStreams echoes 64 KiB on a stream ended with CloseWrite, and
// aborts an upload part way.
func soakStreams(ctx context.Context, c *Client) error {
	s, err := c.OpenStream(ctx, "file/echo", "p:")
	if err != nil {
		return fmt.Errorf("open file/echo: %w", err)
	}
	payload := bytes.Repeat([]byte("stream "), 64<<10/7)
	read := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(s)
		read <- b
	}()
	if _, err := s.Write(payload); err != nil {
		s.Abort()
		return fmt.Errorf("file/echo: write: %w", err)
	}
	if err := s.CloseWrite(); err != nil {
		s.Abort()
		return fmt.Errorf("file/echo: CloseWrite: %w", err)
	}
	select {
	case got := <-read:
		if !bytes.Equal(got, append([]byte("p:"), payload...)) {
			return fmt.Errorf("file/echo: %d bytes back, want %d", len(got), 2+len(payload))
		}
	case <-ctx.Done():
		s.Abort()
		return errors.New("file/echo: no end of the echo")
	}
	s.Close()
	up, err := c.OpenStream(ctx, "file/sink", "")
	if err != nil {
		return fmt.Errorf("open file/sink: %w", err)
	}
	if _, err := up.Write(make([]byte, 16<<10)); err != nil {
		return fmt.Errorf("file/sink: write: %w", err)
	}
	up.Abort()
	return nil
}

// soakPeer is a bad peer of a round; run returns an error when the
// server did not answer it as it should.
type soakPeer struct {
	name string
	run  func() error
}

// soakBadPeers are a round's bad peers; with silent, one more that goes
// quiet, left to keepalive: it makes the round last IdleTimeout and the
// closing handshake's bound, about 6 s, so one round in ten has it.
func soakBadPeers(e *carrierEnv, bomb []byte, silent bool) []soakPeer {
	wsAddr := strings.TrimSuffix(strings.TrimPrefix(e.urls[CarrierWebSocket], "ws://"), "/ws")
	closes := func(send func(c *wstest.Conn) error, want wsframe.CloseCode, headers ...string) func() error {
		return func() error {
			c, err := wstest.Dial(wsAddr, "/ws", headers...)
			if err != nil {
				return fmt.Errorf("upgrade: %w", err)
			}
			defer c.NC.Close()
			chaosMemberWithCallInFlight(c) // "mix": a room only bad peers are in
			if err := send(c); err != nil {
				return fmt.Errorf("sending: %w", err)
			}
			if code, reason := c.ReadClose(10 * time.Second); code != want {
				return fmt.Errorf("close %d %q; want %d", code, reason, want)
			}
			return nil
		}
	}
	peers := []soakPeer{
		{"malformed packet", closes(func(c *wstest.Conn) error {
			return c.WriteMessage(wsframe.OpBinary, []byte{1})
		}, wsframe.ClosePolicyViolation)},
		{"frame over the limit", closes(func(c *wstest.Conn) error {
			return c.WriteMessage(wsframe.OpBinary, make([]byte, soakMaxMessage+1))
		}, wsframe.CloseMessageTooBig)},
		{"permessage-deflate bomb", closes(func(c *wstest.Conn) error {
			return c.WriteRaw(wsframe.AppendMaskedFrame(nil, wsframe.OpBinary, bomb, wsframe.Fin|wsframe.Rsv1, wsframe.NewMaskKey()))
		}, wsframe.CloseMessageTooBig, "Sec-WebSocket-Extensions: permessage-deflate")},
		{"cut mid-frame", func() error {
			c, err := wstest.Dial(wsAddr, "/ws")
			if err != nil {
				return fmt.Errorf("upgrade: %w", err)
			}
			chaosMemberWithCallInFlight(c)
			c.WriteRaw(append(wsframe.AppendHeader(nil, wsframe.Header{Flags: wsframe.Fin, Opcode: wsframe.OpBinary, Masked: true, Length: 1000}), make([]byte, 100)...))
			return c.NC.Close()
		}},
		{"slow consumer", func() error {
			c, err := wstest.Dial(wsAddr, "/ws")
			if err != nil {
				return fmt.Errorf("upgrade: %w", err)
			}
			defer c.NC.Close()
			room := fmt.Sprintf("flood-%p", c)
			c.WriteMessage(wsframe.OpBinary, wire.Append(nil, &wire.Packet{Kind: dispatch.KindJoin, ID: 1, Room: []byte(room)}))
			if msg, err := c.ReadMessage(10 * time.Second); err != nil {
				return fmt.Errorf("reading its Join's answer: %v", err)
			} else if p, err := wire.Decode(msg.Payload); err != nil || p.Kind != dispatch.KindResult {
				return fmt.Errorf("its Join answered %+v, %v", p, err)
			}
			payload := make([]byte, 16<<10)
			for range 4000 { // stops reading: its outbox fills, and it is dropped
				res, err := e.srv.Emit(room, "flood", payload)
				if err != nil || res.Dropped > 0 {
					return err
				}
			}
			return fmt.Errorf("4000 emits of 16 KiB all taken; want its %d KiB outbox full and the member dropped", soakOutbox>>10)
		}},
		{"half an upgrade request", func() error {
			nc, err := net.Dial("tcp", wsAddr)
			if err != nil {
				return err
			}
			io.WriteString(nc, "GET /ws HTTP/1.1\r\nHost: "+wsAddr+"\r\n")
			return nc.Close()
		}},
		{"QUIC without a control stream", func() error {
			qc, _, err := chaosRawQUIC(e, false)
			if err != nil {
				return err
			}
			return qc.CloseWithError(0, "")
		}},
		{"QUIC malformed packet", func() error {
			qc, str, err := chaosRawQUIC(e, true)
			if err != nil {
				return err
			}
			defer qc.CloseWithError(0, "")
			str.Write(framed([]byte{1}))
			if code, reason, err := chaosQUICEnd(qc, str); err != nil || code != wsframe.ClosePolicyViolation {
				return fmt.Errorf("close %d %q, %v; want 1008", code, reason, err)
			}
			return nil
		}},
		{"SCTP malformed packet", func() error {
			return chaosInject(e, CarrierSCTP, []byte{1}, wsframe.ClosePolicyViolation)
		}},
		{"WebTransport malformed packet", func() error {
			return chaosInject(e, CarrierWebTransport, []byte{1}, wsframe.ClosePolicyViolation)
		}},
	}
	if silent {
		peers = append(peers, soakPeer{"silent member", func() error {
			c, err := wstest.Dial(wsAddr, "/ws")
			if err != nil {
				return fmt.Errorf("upgrade: %w", err)
			}
			defer c.NC.Close()
			c.WriteMessage(wsframe.OpBinary, wire.Append(nil, &wire.Packet{Kind: dispatch.KindJoin, ID: 1, Room: []byte("soak")}))
			// It reads what comes, pings included, and answers nothing:
			// the server must give it up (IdleTimeout), with a close it
			// does not answer either, and end the connection.
			closed := false
			for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
				m, err := c.ReadMessage(time.Until(deadline))
				if err != nil {
					if !closed {
						return fmt.Errorf("the connection ended (%v) without the idle timeout's close", err)
					}
					return nil
				}
				if m.Opcode == wsframe.OpClose {
					if m.CloseCode != wsframe.CloseGoingAway || string(m.CloseReason()) != idleTimeoutReason {
						return fmt.Errorf("close %d %q; want 1001 %s", m.CloseCode, m.CloseReason(), idleTimeoutReason)
					}
					closed = true
				}
			}
			return errors.New("still connected 30 s after it went silent; want it given up after IdleTimeout (3 s)")
		}})
	}
	return peers
}

// deflateBomb is a permessage-deflate payload (RFC 7692 §7.2.1) of 4 MiB
// of zeros, compressed to a few KiB: under limit, the message limit, on
// the wire, far over it inflated.
func deflateBomb(t *testing.T, limit int) []byte {
	var b bytes.Buffer
	fw, _ := flate.NewWriter(&b, flate.BestCompression)
	fw.Write(make([]byte, 4<<20))
	fw.Flush()
	body := bytes.TrimSuffix(b.Bytes(), []byte{0, 0, 0xff, 0xff})
	if len(body) >= limit {
		t.Fatalf("the bomb compressed to %d bytes, want under the message limit %d", len(body), limit)
	}
	return body
}

// soakSample is what a round left behind.
type soakSample struct {
	goroutines, fds int // fds: -1 where /proc/self/fd cannot be read
	heap            uint64
	// held closed clients were still reachable once the round settled,
	// for heldFor more (awaitCollected).
	held    int
	heldFor time.Duration
}

// soakSettle waits until the server holds nothing of the round, then
// until the process's goroutines and descriptors are back to first's
// (after round 1: until they stop falling), and samples them.
func soakSettle(t *testing.T, e *carrierEnv, round int, first soakSample) soakSample {
	t.Helper()
	var left string
	for deadline := time.Now().Add(20 * time.Second); ; {
		if left = soakServerLeft(e.srv); left == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("round %d: 20 s after its last client closed, the server still holds %s", round, left)
		}
		time.Sleep(10 * time.Millisecond)
	}
	s := soakSample{goroutines: runtime.NumGoroutine(), fds: openFDs()}
	for deadline := time.Now().Add(15 * time.Second); ; {
		time.Sleep(100 * time.Millisecond)
		now := soakSample{goroutines: runtime.NumGoroutine(), fds: openFDs()}
		if round == 1 && now == s || round > 1 && now.goroutines <= first.goroutines && now.fds <= first.fds {
			s = now
			break
		}
		s = now
		if time.Now().After(deadline) {
			if round == 1 {
				t.Fatalf("round 1: goroutines and descriptors still falling 15 s after the server emptied (%d, %d)", s.goroutines, s.fds)
			}
			buf := make([]byte, 1<<20)
			t.Fatalf("round %d: %d goroutines and %d descriptors 15 s after the server emptied; %d and %d after round 1:\n%s",
				round, s.goroutines, s.fds, first.goroutines, first.fds, buf[:runtime.Stack(buf, true)])
		}
	}
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s.heap = ms.HeapAlloc
	s.held, s.heldFor = soakDialed.awaitCollected(t, round)
	return s
}

// soakDialed holds a weak pointer to every Go client a round dialed, all
// closed by the time the round settles.
var soakDialed soakClients

type soakClients struct {
	mu      sync.Mutex
	clients []weak.Pointer[Client]
	names   []string
}

func (sc *soakClients) add(c *Client, name string) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.clients = append(sc.clients, weak.Make(c))
	sc.names = append(sc.names, name)
}

// awaitCollected reports how many of the round's closed clients were
// still reachable after the settle's collections, and how long they took
// to go, polling the collector; it fails the round if one is still there
// after 10 s, a leak. The runtime keeps a stopped timer's function until
// its P cleans its timer heap (go.dev/issue/75935): before 8dd608d,
// 73ffa4c and 5975d40, timers held closed clients (4 MB each with the
// dictionary's encoders) for up to 2.5 s.
func (sc *soakClients) awaitCollected(t *testing.T, round int) (held int, took time.Duration) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	defer func() { sc.clients, sc.names = nil, nil }()
	reachable := func() (n int, which string) {
		for i, w := range sc.clients {
			if w.Value() != nil {
				n++
				which = sc.names[i]
			}
		}
		return n, which
	}
	held, _ = reachable()
	began := time.Now()
	for {
		n, which := reachable()
		if n == 0 {
			return held, time.Since(began)
		}
		if time.Since(began) > 10*time.Second {
			t.Fatalf("round %d: %d closed clients still reachable 10 s after the round settled, among them %s", round, n, which)
			return held, time.Since(began)
		}
		time.Sleep(5 * time.Millisecond)
		runtime.GC()
	}
}

// soakServerLeft describes what s still holds of connections that have
// ended, "" when nothing: peers (and the count of open connections),
// rooms, keepalive and timeout entries, handshakes in progress, pending
// QUIC connections.
func soakServerLeft(s *Server) string {
	var left []string
	count := func(what string, n int) {
		if n != 0 {
			left = append(left, fmt.Sprintf("%d %s", n, what))
		}
	}
	count("peers", s.Peers())
	count("connections counted open", int(s.Metrics().Connections))
	s.rooms.mu.RLock()
	count("rooms", len(s.rooms.byName))
	s.rooms.mu.RUnlock()
	count("keepalive entries", s.keepalive.Len())
	count("timeout entries", s.timeouts.Len())
	count("handshakes", handshakesInProgress(s))
	s.quicPending.mu.Lock()
	count("pending QUIC connections", len(s.quicPending.queue))
	s.quicPending.mu.Unlock()
	h3 := 0
	s.h3Pending.Range(func(any, any) bool { h3++; return true })
	count("pending HTTP/3 connections", h3)
	return strings.Join(left, ", ")
}

// openFDs counts the process's open descriptors, -1 where it cannot.
func openFDs() int {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(entries)
}
