package compat

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotpath-go/hotpath/compat/internal/wstest"
	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/dictionary"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/wsframe"
)

type echoReq struct {
	Text string `json:"text"`
}

func testRouter() *Router {
	r := NewRouter()
	Handle(r, "echo/say", func(ctx context.Context, req echoReq) (echoReq, error) { return req, nil })
	Handle(r, "echo/raw", func(ctx context.Context, req []byte) ([]byte, error) { return req, nil })
	Handle(r, "test/fail", func(ctx context.Context, req echoReq) (echoReq, error) {
		return req, &Error{Code: 1001, Message: "quota", Data: []byte(`{"left":0}`)}
	})
	Handle(r, "test/panic", func(ctx context.Context, req echoReq) (echoReq, error) { panic("boom") })
	Handle(r, "test/sleep", func(ctx context.Context, ms int) (string, error) {
		select {
		case <-time.After(time.Duration(ms) * time.Millisecond):
			return "slept", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}, Async())
	return r
}

// startServer serves s on a loopback listener, raw (Serve) or through
// net/http, and returns the address.
func startServer(t testing.TB, s *Server, viaHTTP bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if viaHTTP {
		hs := &http.Server{Handler: s}
		go hs.Serve(ln)
		t.Cleanup(func() { hs.Close() })
	} else {
		go s.Serve(ln)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
		ln.Close()
	})
	return ln.Addr().String()
}

func newTestServer(t testing.TB, opts Options) (*Server, string) {
	t.Helper()
	if opts.Router == nil {
		opts.Router = testRouter()
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler) // handler panics are expected here
	}
	s, err := NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	return s, startServer(t, s, false)
}

func dial(t *testing.T, addr string, headers ...string) *wstest.Conn {
	t.Helper()
	c, err := wstest.Dial(addr, "/ws", headers...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.NC.Close() })
	return c
}

func readPacket(t *testing.T, c *wstest.Conn) wire.Packet {
	t.Helper()
	for {
		m, err := c.ReadMessage(5 * time.Second)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		if m.Opcode != wsframe.OpBinary {
			continue
		}
		p, err := wire.Decode(m.Payload)
		if err != nil {
			t.Fatalf("decode %x: %v", m.Payload, err)
		}
		return p
	}
}

func TestCallResult(t *testing.T) {
	for _, viaHTTP := range []bool{false, true} {
		s, err := NewServer(Options{Router: testRouter()})
		if err != nil {
			t.Fatal(err)
		}
		addr := startServer(t, s, viaHTTP)
		c := dial(t, addr, "Sec-WebSocket-Protocol: hotpath.v1")
		if got := c.Response.Header.Get("Sec-WebSocket-Protocol"); got != Subprotocol {
			t.Errorf("subprotocol = %q", got)
		}
		c.WriteMessage(wsframe.OpBinary, wire.AppendCall(nil, dispatch.KindCall, 7, "echo/say", 0, []byte(`{"text":"hi"}`)))
		p := readPacket(t, c)
		if p.Kind != dispatch.KindResult || p.ID != 7 || string(p.Payload) != `{"text":"hi"}` {
			t.Errorf("viaHTTP=%v: got %+v", viaHTTP, p)
		}
	}
}

func TestCallErrors(t *testing.T) {
	_, addr := newTestServer(t, Options{})
	c := dial(t, addr)
	cases := []struct {
		method  string
		payload string
		code    uint32
	}{
		{"no/such", `{}`, wire.CodeNotFound},
		{"echo/say", `{"text":`, wire.CodeInvalidParams},
		{"test/fail", `{}`, 1001},
		{"test/panic", `{}`, wire.CodeInternal},
	}
	for i, tc := range cases {
		c.WriteMessage(wsframe.OpBinary, wire.AppendCall(nil, dispatch.KindCall, uint32(i+1), tc.method, 0, []byte(tc.payload)))
		p := readPacket(t, c)
		if p.Kind != dispatch.KindError || p.ID != uint32(i+1) || p.Code != tc.code {
			t.Errorf("%s: got %+v", tc.method, p)
		}
	}
	// The connection lives on after a handler panic.
	c.WriteMessage(wsframe.OpBinary, wire.AppendCall(nil, dispatch.KindCall, 99, "echo/raw", 0, []byte("x")))
	if p := readPacket(t, c); p.Kind != dispatch.KindResult || string(p.Payload) != "x" {
		t.Errorf("after panic: %+v", p)
	}
}

func TestCallTimeout(t *testing.T) {
	_, addr := newTestServer(t, Options{})
	c := dial(t, addr)
	c.WriteMessage(wsframe.OpBinary, wire.AppendCall(nil, dispatch.KindCall, 5, "test/sleep", 50, []byte(`10000`)))
	p := readPacket(t, c)
	if p.Kind != dispatch.KindError || p.Code != wire.CodeTimeout {
		t.Fatalf("got %+v, want timeout error", p)
	}
}

func TestBatch(t *testing.T) {
	_, addr := newTestServer(t, Options{})
	c := dial(t, addr)
	var items []byte
	for i := 1; i <= 3; i++ {
		items = wire.AppendItem(items, wire.AppendCall(nil, dispatch.KindCall, uint32(i), "echo/raw", 0, []byte{byte('0' + i)}))
	}
	c.WriteMessage(wsframe.OpBinary, wire.Append(nil, &wire.Packet{Kind: dispatch.KindBatch, Count: 3, Payload: items}))
	p := readPacket(t, c)
	if p.Kind != dispatch.KindBatch || p.Count != 3 {
		t.Fatalf("got %+v", p)
	}
	n := 0
	for item := range p.Items() {
		r, err := wire.Decode(item)
		n++
		if err != nil || r.Kind != dispatch.KindResult || r.ID != uint32(n) || string(r.Payload) != string(rune('0'+n)) {
			t.Errorf("item %d: %+v %v", n, r, err)
		}
	}
}

func TestBadInputCloseCodes(t *testing.T) {
	_, addr := newTestServer(t, Options{Limits: Limits{MaxMessageSize: 1024}})
	cases := []struct {
		name string
		send func(c *wstest.Conn)
		code wsframe.CloseCode
	}{
		{"text message (1003)", func(c *wstest.Conn) { c.WriteMessage(wsframe.OpText, []byte("hi")) }, wsframe.CloseUnsupportedData},
		{"unmasked frame (1002)", func(c *wstest.Conn) { c.WriteRaw(wsframe.AppendFrame(nil, wsframe.OpBinary, []byte{1}, wsframe.Fin)) }, wsframe.CloseProtocolError},
		{"invalid UTF-8 text (1007)", func(c *wstest.Conn) { c.WriteMessage(wsframe.OpText, []byte{0xff}) }, wsframe.CloseInvalidPayload},
		{"oversized message (1009)", func(c *wstest.Conn) { c.WriteMessage(wsframe.OpBinary, make([]byte, 2048)) }, wsframe.CloseMessageTooBig},
		{"malformed packet (1008)", func(c *wstest.Conn) { c.WriteMessage(wsframe.OpBinary, []byte{1}) }, wsframe.ClosePolicyViolation},
		{"unknown kind (1008)", func(c *wstest.Conn) { c.WriteMessage(wsframe.OpBinary, []byte{0x7f}) }, wsframe.ClosePolicyViolation},
		{"compressed before negotiation (1008)", func(c *wstest.Conn) { c.WriteMessage(wsframe.OpBinary, []byte{0x81, 0}) }, wsframe.ClosePolicyViolation},
		{"server-only kind (1008)", func(c *wstest.Conn) { c.WriteMessage(wsframe.OpBinary, wire.AppendResult(nil, 1, nil)) }, wsframe.ClosePolicyViolation},
	}
	for _, tc := range cases {
		c := dial(t, addr)
		tc.send(c)
		if code, reason := c.ReadClose(5 * time.Second); code != tc.code {
			t.Errorf("%s: close %d (%s), want %d", tc.name, code, reason, tc.code)
		}
	}
}

func TestCloseHandshake(t *testing.T) {
	s, addr := newTestServer(t, Options{})
	c := dial(t, addr)
	c.WriteFrame(wsframe.OpClose, wsframe.AppendClosePayload(nil, 4000, "bye"), wsframe.Fin)
	if code, _ := c.ReadClose(5 * time.Second); code != 4000 {
		t.Errorf("echoed close code %d, want 4000", code)
	}
	// RFC 6455 §7.1.1: the server closes the TCP connection first.
	c.NC.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.NC.Read(make([]byte, 1)); err == nil {
		t.Error("server did not close the TCP connection")
	}
	waitFor(t, func() bool { return s.Peers() == 0 })
}

func TestShutdownGoingAway(t *testing.T) {
	s, addr := newTestServer(t, Options{})
	c := dial(t, addr)
	waitFor(t, func() bool { return s.Peers() == 1 })
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done <- s.Shutdown(ctx)
	}()
	if code, _ := c.ReadClose(5 * time.Second); code != wsframe.CloseGoingAway {
		t.Errorf("close code %d, want 1001", code)
	}
	c.Close()
	if err := <-done; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if _, err := wstest.Dial(addr, "/ws"); err == nil {
		t.Error("dial after Shutdown succeeded")
	}
}

// Serve takes any net.Listener, and any net.Conn from it, whose dynamic
// type is not comparable (a struct value holding a func, as a
// middleware's wrapper may be): the server kept its listeners, and the
// connections in their upgrade, as map keys, and such a listener
// panicked Serve, such a connection the whole process. It serves, and
// Shutdown closes it.
func TestServeUncomparableListener(t *testing.T) {
	s, err := NewServer(Options{Router: testRouter()})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	served := make(chan error, 2)
	go func() {
		served <- s.Serve(wrappingListener{ln, func(c net.Conn) net.Conn { return funcConn{c, func() {}} }})
	}()
	sln, err := ListenSCTP("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer sln.Close()
	go func() {
		served <- s.ServeSCTP(wrappingListener{sln, func(c net.Conn) net.Conn { return funcConn{c, func() {}} }})
	}()
	c := dial(t, ln.Addr().String())
	waitFor(t, func() bool { return s.Peers() == 1 })
	c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sc, err := Dial(ctx, "sctp://"+sln.Addr().String(), ClientOptions{Reconnect: Reconnect{Disabled: true}})
	if err != nil {
		t.Fatalf("Dial over SCTP: %v", err)
	}
	sc.Close()
	if err := s.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	for range 2 {
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve or ServeSCTP returned %v, want http.ErrServerClosed", err)
		}
	}
}

// funcConn is a connection value that is not comparable.
type funcConn struct {
	net.Conn
	onClose func()
}

// Shutdown does not wait for an ask its client never answers: the asks
// pending fail at once with ErrCanceled joined with the shutdown's close
// (1001 HP_SHUTTING_DOWN), so the Async handler asking returns, its
// answer leaves, and Shutdown completes; an ask made during Shutdown
// fails likewise, unsent. Shutdown waited for the ask's AskTimeout (or its
// own ctx, here 20 s, then dropped the connection without a close).
func TestShutdownFailsPendingAsks(t *testing.T) {
	r := testRouter()
	asked := make(chan error, 2)
	Handle(r, "test/askforever", func(ctx context.Context, _ any) (string, error) {
		err := PeerFrom(ctx).Ask(ctx, "never/answered", nil, nil)
		asked <- err
		asked <- PeerFrom(ctx).Ask(ctx, "never/sent", nil, nil) // during Shutdown
		return "", err
	}, Async())
	s, addr := newTestServer(t, Options{Router: r, AskTimeout: time.Minute})
	c := dial(t, addr)
	c.WriteMessage(wsframe.OpBinary, wire.AppendCall(nil, dispatch.KindCall, 1, "test/askforever", 0, []byte("null")))
	if p := readPacket(t, c); p.Kind != dispatch.KindAsk {
		t.Fatalf("got %+v, want the ask", p)
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		done <- s.Shutdown(ctx)
	}()
	for _, what := range []string{"the pending ask", "an ask during Shutdown"} {
		select {
		case err := <-asked:
			if !errors.Is(err, ErrCanceled) || CloseStatus(err) != wsframe.CloseGoingAway || !strings.Contains(err.Error(), "HP_SHUTTING_DOWN") {
				t.Errorf("%s: %v, want ErrCanceled with close 1001 HP_SHUTTING_DOWN", what, err)
			}
		case <-time.After(hangBound):
			t.Fatalf("%s still waits %v into Shutdown", what, hangBound)
		}
	}
	// The handler's answer, then the close: no ask after the first.
	if p := readPacket(t, c); p.Kind != dispatch.KindError || p.ID != 1 || p.Code != wire.CodeCanceled {
		t.Errorf("got %+v, want the call's Canceled answer", p)
	}
	if code, _ := c.ReadClose(hangBound); code != wsframe.CloseGoingAway {
		t.Errorf("close code %d, want 1001", code)
	}
	c.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	case <-time.After(hangBound):
		t.Fatalf("Shutdown still waits %v after the asks failed", hangBound)
	}
}

// A client that sent half an upgrade request to Serve's listener is
// dropped when Shutdown's ctx ends, as the handshakes of the other
// carriers are: its connection was left for the rest of handshakeTimeout
// (10 s), past Shutdown's return, with a goroutine and a descriptor, and
// Shutdown spent its whole shutdownDropGrace waiting for it.
// TestMixedLoadWithBadPeers's stalled upgrades led to it.
func TestShutdownDropsStalledUpgrade(t *testing.T) {
	s, addr := newTestServer(t, Options{})
	stalledUpgrade(t, s, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown = %v; want its ctx's deadline, passed while the upgrade stalled", err)
	}
	select {
	case <-s.conns.idle():
	default:
		t.Error("the stalled upgrade's goroutine still runs after Shutdown returned; want it dropped when Shutdown's ctx ended")
	}
}

// A stalled upgrade does not hold a graceful Shutdown either: with a ctx
// of a minute, Shutdown drops the half-sent request after
// handshakeShutdownGrace (1 s) and returns nil (shutdownCutsHandshakes).
// It used to wait out the request's handshakeTimeout (10 s).
func TestShutdownCutsStalledUpgradeAfterGrace(t *testing.T) {
	s, addr := newTestServer(t, Options{})
	nc := stalledUpgrade(t, s, addr)
	shutdownCutsHandshakes(t, s)
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := nc.Read(make([]byte, 64)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the stalled client read %d bytes, %v; want its connection closed", n, err)
	}
	if got := s.Metrics().HandshakeFailures; got != 1 {
		t.Errorf("HandshakeFailures = %d; want 1, the dropped upgrade", got)
	}
}

// An upgrade whose goroutine registers its handshake only after
// Shutdown's cut (accepted before the listener closed, scheduled late) is
// dropped all the same: it was missed by the cut and held a graceful
// Shutdown for the rest of handshakeTimeout (10 s), past this test's ctx
// of half that. The listener's connection holds upgradeRaw in its first
// SetDeadline, before the handshake is registered, until the cut has run.
func TestShutdownCutsUpgradeRegisteredAfterTheCut(t *testing.T) {
	s, err := NewServer(Options{Router: testRouter(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	ln := &heldListener{Listener: tcp, release: release}
	go s.Serve(ln)
	t.Cleanup(func() { tcp.Close() })
	stalledUpgrade(t, s, tcp.Addr().String())
	cut := func() bool {
		s.handshakes.mu.Lock()
		defer s.handshakes.mu.Unlock()
		return s.handshakes.closed
	}
	go func() {
		defer close(release)
		for deadline := time.Now().Add(hangBound); !cut() && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
	}()
	shutdownCutsHandshakes(t, s)
}

// heldListener's connections block in their first SetDeadline until
// release is closed.
type heldListener struct {
	net.Listener
	release chan struct{}
}

func (l *heldListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &heldConn{Conn: nc, release: l.release}, nil
}

type heldConn struct {
	net.Conn
	release chan struct{}
	once    sync.Once
}

func (c *heldConn) SetDeadline(d time.Time) error {
	c.once.Do(func() { <-c.release })
	return c.Conn.SetDeadline(d)
}

// stalledUpgrade connects to Serve's listener at addr and sends half an
// upgrade request, which s has accepted (counted among the connection
// goroutines Shutdown waits for) when it returns. The test's end closes
// the connection.
func stalledUpgrade(t *testing.T, s *Server, addr string) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	if _, err := io.WriteString(nc, "GET /ws HTTP/1.1\r\nHost: "+addr+"\r\n"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		select {
		case <-s.conns.idle():
			return false
		default:
			return true
		}
	})
	return nc
}

// A client whose TCP connection is reset, without a close frame, ends
// with 1006 at the server, as one that closes its socket does (an EOF),
// and as the Go client and the packet carriers read such an end: the
// socket's "connection reset by peer", with no close code, reached
// OnDisconnect.
func TestResetWithoutCloseFrameIs1006(t *testing.T) {
	ended := make(chan error, 1)
	s, addr := newTestServer(t, Options{OnDisconnect: func(_ *Peer, err error) { ended <- err }})
	c := dial(t, addr)
	waitFor(t, func() bool { return s.Peers() == 1 })
	tc, ok := c.NC.(*net.TCPConn)
	if !ok {
		t.Fatalf("the test client's connection is a %T, not a *net.TCPConn", c.NC)
	}
	tc.SetLinger(0) // Close sends a reset
	tc.Close()
	select {
	case err := <-ended:
		if CloseStatus(err) != wsframe.CloseAbnormal {
			t.Errorf("the server saw the connection end with %v, want 1006", err)
		}
	case <-time.After(hangBound):
		t.Fatal("the server never saw the connection end")
	}
}

// A close request that the read loop takes before the request's own
// wake-up lands (woken by its idle deadline, say; here by the hook) starts
// the closing handshake; the late wake-up must not then end the
// connection before the client's close: the server waits for it (RFC 6455
// §7.1.2). The conformance suite saw this race about once in 60 runs.
func TestCloseRequestTakenEarly(t *testing.T) {
	ended := make(chan error, 1)
	s, addr := newTestServer(t, Options{OnDisconnect: func(_ *Peer, err error) { ended <- err }})
	c := dial(t, addr)
	waitFor(t, func() bool { return s.Peers() == 1 })
	hook := func(wc *wsConn) {
		wc.nc.SetReadDeadline(time.Now())
		for deadline := time.Now().Add(5 * time.Second); !wc.isClosing() && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
	}
	testHookCloseRequested.Store(&hook)
	t.Cleanup(func() { testHookCloseRequested.Store(nil) })
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	}()
	if code, reason := c.ReadClose(5 * time.Second); code != wsframe.CloseGoingAway {
		t.Fatalf("close %d %q, want 1001", code, reason)
	}
	c.NC.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := c.NC.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the server did not wait for the client's close: %v", err)
	}
	c.WriteFrame(wsframe.OpClose, wsframe.AppendClosePayload(nil, wsframe.CloseGoingAway, ""), wsframe.Fin)
	// The client's close ends the handshake: the server closes TCP then,
	// well before the handshake's timeout (closeTimeout, 3 s).
	c.NC.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.NC.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Errorf("after the client's close: %v, want the server to close TCP", err)
	}
	var ce *CloseError
	if err := <-ended; !errors.As(err, &ce) || ce.Remote || ce.Code != wsframe.CloseGoingAway || ce.Reason != "HP_SHUTTING_DOWN" {
		t.Errorf("connection ended with %v, want the server's close 1001 HP_SHUTTING_DOWN", err)
	}
}

// OnConnect and OnDisconnect are user code on the connection's goroutine:
// a panic there is logged and counted instead of ending the process. A
// connection whose OnConnect panicked is closed with 1011 (what the hook
// set up for it is unknown); the server serves the next one. Without the
// recover, the panic kills the test binary.
func TestConnectionHookPanics(t *testing.T) {
	var connects atomic.Int32
	s, addr := newTestServer(t, Options{
		OnConnect: func(*Peer) {
			if connects.Add(1) == 1 {
				panic("boom")
			}
		},
		OnDisconnect: func(*Peer, error) { panic("boom") },
	})
	ctx := context.Background()
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if first, err := Dial(dctx, "ws://"+addr+"/ws", ClientOptions{}); !errors.Is(err, ErrDisconnected) || CloseStatus(err) != wsframe.CloseInternalError {
		if first != nil {
			first.Close()
		}
		t.Fatalf("Dial of the connection whose OnConnect panicked: %v, want ErrDisconnected with close 1011", err)
	}
	second := dialClient(t, addr, ClientOptions{Reconnect: Reconnect{Disabled: true}})
	var out echoReq
	if err := callWithin(t, second, ctx, "echo/say", echoReq{Text: "hi"}, &out); err != nil || out.Text != "hi" {
		t.Fatalf("the next connection: %+v, %v", out, err)
	}
	second.Close()
	waitFor(t, func() bool { return s.Metrics().Panics == 2 && s.Peers() == 0 })
}

// OnJoin and OnLeave listeners run on the joining connection's read loop
// (and OnLeave on a closing connection's goroutine): a panic there is
// logged and counted, the join and the leave stand, and the connection
// lives on. Without the recover the first join kills the test binary.
func TestRoomListenerPanics(t *testing.T) {
	s, addr := newTestServer(t, Options{})
	s.OnJoin(func(RoomEvent) { panic("boom in OnJoin") })
	s.OnLeave(func(RoomEvent) { panic("boom in OnLeave") })
	c := dialClient(t, addr, ClientOptions{Reconnect: Reconnect{Disabled: true}})
	ctx := context.Background()
	if n, err := c.Join(ctx, "lobby"); err != nil || n != 1 {
		t.Fatalf("Join = %d, %v, want 1 member", n, err)
	}
	if n, err := c.Leave(ctx, "lobby"); err != nil || n != 0 {
		t.Fatalf("Leave = %d, %v, want 0 members", n, err)
	}
	if _, err := c.Join(ctx, "lobby"); err != nil {
		t.Fatal(err)
	}
	var out echoReq
	if err := callWithin(t, c, ctx, "echo/say", echoReq{Text: "after"}, &out); err != nil || out.Text != "after" {
		t.Fatalf("a call after the panics: %+v, %v", out, err)
	}
	c.Close() // leaves lobby on the closing connection's goroutine
	waitFor(t, func() bool { return s.Metrics().Panics == 4 && s.Peers() == 0 && s.Members("lobby") == 0 })
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var _ = errors.Is

// The origin check (Options.CheckOrigin) runs before the upgrade, on the
// raw listener and through net/http alike: by default a browser page may
// connect only from the host it was served by (same host and port), and a
// request with no Origin (not from a browser) passes; SameHost allows any
// port of the same host; a refused upgrade is answered 403 and counted.
func TestOriginCheck(t *testing.T) {
	for _, tc := range []struct {
		name   string
		check  func(*http.Request) bool
		origin func(addr string) string // "" sends no Origin
		want   int
	}{
		{"no origin", nil, func(string) string { return "" }, http.StatusSwitchingProtocols},
		{"same origin", nil, func(addr string) string { return "http://" + addr }, http.StatusSwitchingProtocols},
		{"other host", nil, func(string) string { return "http://evil.example" }, http.StatusForbidden},
		{"same host, other port", nil, func(string) string { return "http://127.0.0.1:1" }, http.StatusForbidden},
		{"same host, other port, SameHost", SameHost, func(string) string { return "http://127.0.0.1:1" }, http.StatusSwitchingProtocols},
		{"other host, SameHost", SameHost, func(string) string { return "https://evil.example:443" }, http.StatusForbidden},
		{"malformed origin", nil, func(string) string { return "http://[::1" }, http.StatusForbidden},
		{"custom check", func(r *http.Request) bool { return r.Header.Get("Origin") == "https://app.example" }, func(string) string { return "https://app.example" }, http.StatusSwitchingProtocols},
	} {
		for _, viaHTTP := range []bool{false, true} {
			s, err := NewServer(Options{Router: testRouter(), CheckOrigin: tc.check, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			addr := startServer(t, s, viaHTTP)
			var headers []string
			if o := tc.origin(addr); o != "" {
				headers = append(headers, "Origin: "+o)
			}
			c, err := wstest.Dial(addr, "/ws", headers...)
			if c == nil {
				t.Fatalf("%s (net/http %v): %v", tc.name, viaHTTP, err)
			}
			c.NC.Close()
			if got := c.Response.StatusCode; got != tc.want {
				t.Errorf("%s (net/http %v): status %d, want %d", tc.name, viaHTTP, got, tc.want)
			}
			if tc.want == http.StatusForbidden {
				// On the raw listener the refusal is counted once gobwas/ws
				// has written it, so the count may trail the answer.
				deadline := time.Now().Add(5 * time.Second)
				for s.Metrics().HandshakeFailures == 0 && time.Now().Before(deadline) {
					time.Sleep(time.Millisecond)
				}
				if s.Metrics().HandshakeFailures == 0 {
					t.Errorf("%s (net/http %v): refused upgrade not counted", tc.name, viaHTTP)
				}
			}
		}
	}
}

// Closes count by code, except the application codes (3000-4999) a peer
// picks, which count as CloseOther ("other" in the metrics) unless they
// are 4000-4015, the browser client's: a peer closing with each in turn
// made some 2,000 counters and metric series (a soak audit).
func TestClosesByCode(t *testing.T) {
	s, addr := newTestServer(t, Options{})
	for _, code := range []wsframe.CloseCode{1000, 3001, 3999, 4008, 4500} {
		c := dial(t, addr)
		c.WriteMessage(wsframe.OpClose, wsframe.AppendClosePayload(nil, code, ""))
		c.ReadClose(5 * time.Second)
	}
	want := map[wsframe.CloseCode]uint64{1000: 1, 4008: 1, CloseOther: 3}
	waitFor(t, func() bool { return maps.Equal(s.Metrics().Closes, want) })
	rec := httptest.NewRecorder()
	s.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if !strings.Contains(rec.Body.String(), "hotpath_closes_total{code=\"other\"} 3\n") {
		t.Errorf("metrics without the 3 other closes:\n%s", rec.Body.String())
	}
}

// MetricsHandler serves the counters in the Prometheus text format: every
// sample after its HELP and TYPE lines, a well-formed name and value, and
// the figures of what happened (one open connection, the calls it made,
// the closes by code).
func TestMetricsHandler(t *testing.T) {
	s, addr := newTestServer(t, Options{})
	gone := dialClient(t, addr, ClientOptions{})
	if err := gone.Call(context.Background(), "echo/raw", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	gone.Close() // 1000
	waitFor(t, func() bool { return s.Metrics().Connections == 0 })
	c := dialClient(t, addr, ClientOptions{})
	for range 3 {
		if err := c.Call(context.Background(), "echo/raw", []byte("x"), nil); err != nil {
			t.Fatal(err)
		}
	}
	rec := httptest.NewRecorder()
	s.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("Content-Type %q", ct)
	}
	sample := regexp.MustCompile(`^(hotpath_[a-z_]+)(\{code="(?:[0-9]+|other)"\})? ([0-9]+)$`)
	typed := map[string]bool{}
	values := map[string]string{}
	for _, line := range strings.Split(strings.TrimSuffix(rec.Body.String(), "\n"), "\n") {
		if f := strings.Fields(line); len(f) >= 4 && f[0] == "#" && f[1] == "TYPE" {
			if f[3] != "counter" && f[3] != "gauge" {
				t.Errorf("type %q in %q", f[3], line)
			}
			typed[f[2]] = true
			continue
		}
		if strings.HasPrefix(line, "# HELP ") {
			continue
		}
		m := sample.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("malformed line %q", line)
			continue
		}
		if !typed[m[1]] {
			t.Errorf("sample before its TYPE line: %q", line)
		}
		values[m[1]+m[2]] = m[3]
	}
	for name, want := range map[string]string{
		"hotpath_connections":                 "1",
		"hotpath_connections_total":           "2",
		"hotpath_closes_total{code=\"1000\"}": "1",
	} {
		if values[name] != want {
			t.Errorf("%s = %q, want %s", name, values[name], want)
		}
	}
	if n, _ := strconv.Atoi(values["hotpath_messages_in_total"]); n < 4 {
		t.Errorf("hotpath_messages_in_total = %q, want at least the 4 calls", values["hotpath_messages_in_total"])
	}
}

// PROTOCOL.md §4.8: a receiver of Ping answers Pong with the same data; a
// Pong is taken silently.
func TestPingPacketAnsweredWithPong(t *testing.T) {
	_, addr := newTestServer(t, Options{})
	c := dial(t, addr)
	c.WriteMessage(wsframe.OpBinary, wire.Append(nil, &wire.Packet{Kind: dispatch.KindPong, Payload: []byte("unasked")}))
	c.WriteMessage(wsframe.OpBinary, wire.Append(nil, &wire.Packet{Kind: dispatch.KindPing, Payload: []byte("t=1")}))
	if p := readPacket(t, c); p.Kind != dispatch.KindPong || string(p.Payload) != "t=1" {
		t.Fatalf("got %+v, want a Pong with t=1", p)
	}
}

// PROTOCOL.md §4.8, §4.9: a Pong is as long as its Ping, so a Ping whose
// Pong would be over the client's announced maxMessage closes the
// connection with 1009 HP_ERR_MESSAGE_TOO_BIG. The server sent the Pong,
// over the limit it keeps every other packet within.
func TestPingWhosePongPassesTheClientLimit(t *testing.T) {
	const limit = 100
	_, addr := newTestServer(t, Options{})
	c := dial(t, addr)
	pairs := wire.AppendPair(nil, "maxMessage", strconv.Itoa(limit))
	c.WriteMessage(wsframe.OpBinary, wire.Append(nil, &wire.Packet{Kind: dispatch.KindCapabilities, Count: 1, Payload: pairs}))
	if p := readPacket(t, c); p.Kind != dispatch.KindCapabilities {
		t.Fatalf("first packet %v, want Capabilities", p.Kind)
	}
	data := strings.Repeat("p", limit-1) // a Pong of exactly the limit
	c.WriteMessage(wsframe.OpBinary, wire.Append(nil, &wire.Packet{Kind: dispatch.KindPing, Payload: []byte(data)}))
	if p := readPacket(t, c); p.Kind != dispatch.KindPong || string(p.Payload) != data {
		t.Fatalf("a Ping whose Pong is %d bytes: got %v, want its Pong", limit, p.Kind)
	}
	c.WriteMessage(wsframe.OpBinary, wire.Append(nil, &wire.Packet{Kind: dispatch.KindPing, Payload: []byte(data + "p")}))
	if code, reason := c.ReadClose(hangBound); code != wsframe.CloseMessageTooBig || reason != errMessageTooBig.Reason {
		t.Errorf("a Ping whose Pong is %d bytes, over the client's %d: close %d (%s), want 1009 %s", limit+1, limit, code, reason, errMessageTooBig.Reason)
	}
}

// Options.Compress decides per upgrade request whether permessage-deflate
// may be negotiated (RFC 7692): declined, the response carries no
// extension and the connection works uncompressed.
func TestCompressFilter(t *testing.T) {
	_, addr := newTestServer(t, Options{Compress: func(r *http.Request) bool { return r.Header.Get("X-Local") == "" }})
	offer := "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits"
	for _, tc := range []struct {
		headers []string
		want    bool
	}{{[]string{offer}, true}, {[]string{offer, "X-Local: 1"}, false}} {
		c, err := wstest.Dial(addr, "/ws", tc.headers...)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.HasPrefix(c.Extensions(), "permessage-deflate"); got != tc.want {
			t.Errorf("headers %q: extensions %q, want deflate %v", tc.headers, c.Extensions(), tc.want)
		}
		c.WriteMessage(wsframe.OpBinary, wire.Append(nil, &wire.Packet{Kind: dispatch.KindPing, Payload: []byte("p")}))
		if p := readPacket(t, c); p.Kind != dispatch.KindPong {
			t.Errorf("headers %q: got %+v, want a Pong", tc.headers, p)
		}
		c.NC.Close()
	}
}

// PROTOCOL.md §4.1: only a call with a non-zero id is answered; one with
// id 0 runs and gets no answer, whether it succeeds, fails or names no
// method.
func TestCallWithIDZeroIsNotAnswered(t *testing.T) {
	r := testRouter()
	ran := make(chan string, 1)
	Handle(r, "test/note", func(ctx context.Context, s string) (string, error) { ran <- s; return s, nil })
	_, addr := newTestServer(t, Options{Router: r})
	c := dial(t, addr)
	c.WriteMessage(wsframe.OpBinary, wire.AppendCall(nil, dispatch.KindCall, 0, "test/note", 0, []byte(`"noted"`)))
	c.WriteMessage(wsframe.OpBinary, wire.AppendCall(nil, dispatch.KindCall, 0, "test/fail", 0, []byte(`{}`)))
	c.WriteMessage(wsframe.OpBinary, wire.AppendCall(nil, dispatch.KindCall, 0, "no/such", 0, nil))
	c.WriteMessage(wsframe.OpBinary, wire.AppendCall(nil, dispatch.KindCall, 7, "echo/raw", 0, []byte("x")))
	if p := readPacket(t, c); p.Kind != dispatch.KindResult || p.ID != 7 {
		t.Fatalf("first answer %+v, want the Result of call 7", p)
	}
	select {
	case s := <-ran:
		if s != "noted" {
			t.Errorf("the id-0 call ran with %q", s)
		}
	default:
		t.Error("the id-0 call did not run before the next one was answered")
	}
}

// A QUIC or SCTP connection refused by the upgrade checks is closed with
// 1008 and the refusal's message, or with 1001 while the server shuts
// down, as its open connections are.
func TestCarrierRefusal(t *testing.T) {
	if code, reason := carrierRefusal(errShutting); code != wsframe.CloseGoingAway || reason != "HP_SHUTTING_DOWN" {
		t.Errorf("shutting down: %d %q", code, reason)
	}
	if code, reason := carrierRefusal(errBadOrigin); code != wsframe.ClosePolicyViolation || reason != errBadOrigin.Message {
		t.Errorf("bad origin: %d %q", code, reason)
	}
}

// A connection whose write failed ends with that write's error, not with
// the "use of closed network connection" of the read its close fails.
func TestWriteFailureIsWhyTheConnectionEnded(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	c := newWSConn(server, false, Limits{}.withDefaults(), nil, nil)
	writeFailed := errors.New("write: broken pipe")
	c.onWriteError(writeFailed)
	_, err = server.Read(make([]byte, 1))
	if got := c.readError(err); got != writeFailed {
		t.Fatalf("ended with %v, want the write's error", got)
	}
}

// PROTOCOL.md §1: the server MUST refuse an upgrade that offers
// subprotocols but not hotpath.v1, selects hotpath.v1 among others, and
// accepts an upgrade that offers none (a plain WebSocket client).
func TestSubprotocolOfferedOrNone(t *testing.T) {
	_, addr := newTestServer(t, Options{})
	for offer, want := range map[string]string{"chat, superchat": "refused", "chat, " + Subprotocol: Subprotocol, Subprotocol: Subprotocol, "": ""} {
		var headers []string
		if offer != "" {
			headers = append(headers, "Sec-WebSocket-Protocol: "+offer)
		}
		c, err := wstest.Dial(addr, "/ws", headers...)
		switch {
		case want == "refused":
			if err == nil {
				c.Close()
				t.Errorf("offered %q: upgrade accepted, selecting %q; want it refused", offer, c.Response.Header.Get("Sec-WebSocket-Protocol"))
			}
			continue
		case err != nil:
			t.Errorf("offered %q: %v", offer, err)
			continue
		}
		if got := c.Response.Header.Get("Sec-WebSocket-Protocol"); got != want {
			t.Errorf("offered %q: selected %q, want %q", offer, got, want)
		}
		c.Close()
	}
}

// PROTOCOL.md §4.6, at the wire: a client's emit to a room it is not in,
// and one of an event named $…, are dropped and counted; except-sender
// (flags 0x01) keeps the emit from its sender; and the server's Emit
// carries flags 0, whatever flags the client's had.
func TestClientEmitRulesOnTheWire(t *testing.T) {
	s, addr := newTestServer(t, Options{})
	a, b := dial(t, addr), dial(t, addr)
	send := func(c *wstest.Conn, p *wire.Packet) {
		t.Helper()
		if err := c.WriteMessage(wsframe.OpBinary, wire.Append(nil, p)); err != nil {
			t.Fatal(err)
		}
	}
	// a joins r; b joins r and other.
	for i, j := range []struct {
		c    *wstest.Conn
		room string
	}{{a, "r"}, {b, "r"}, {b, "other"}} {
		id := uint32(i + 1)
		send(j.c, &wire.Packet{Kind: dispatch.KindJoin, ID: id, Room: []byte(j.room)})
		for p := readPacket(t, j.c); p.Kind != dispatch.KindResult || p.ID != id; p = readPacket(t, j.c) {
		}
	}
	dropped := s.Metrics().DroppedEvents
	emit := func(room, event string, flags uint8) {
		send(a, &wire.Packet{Kind: dispatch.KindEmit, Room: []byte(room), Name: []byte(event), Flags: flags, Payload: []byte(`"fake"`)})
	}
	emit("other", "m0", 0) // a is not in room other
	emit("r", "$join", 0)  // a protocol event
	emit("r", "m1", wire.EmitExceptSender)
	emit("r", "m2", 0)
	// readEmits returns the emits c receives up to m2, skipping the
	// server's presence (its payload is no "fake").
	readEmits := func(c *wstest.Conn) (got []string) {
		t.Helper()
		for {
			p := readPacket(t, c)
			if p.Kind != dispatch.KindEmit || p.Name[0] == '$' && string(p.Payload) != `"fake"` {
				continue
			}
			got = append(got, string(p.Room)+"/"+string(p.Name)+"/"+strconv.Itoa(int(p.Flags)))
			if string(p.Name) == "m2" {
				return got
			}
		}
	}
	if got, want := strings.Join(readEmits(b), " "), "r/m1/0 r/m2/0"; got != want {
		t.Errorf("the other member received %s, want %s", got, want)
	}
	if got, want := strings.Join(readEmits(a), " "), "r/m2/0"; got != want {
		t.Errorf("the sender received %s, want %s", got, want)
	}
	if n := s.Metrics().DroppedEvents - dropped; n != 2 {
		t.Errorf("%d emits dropped, want 2 (to a room not joined, of a $ event)", n)
	}
}

// PROTOCOL.md §6 at the wire: the server names the first dictionary offer
// whose codec it has and whose id is its own, none when the ids differ (a
// rolling deploy; the compressed bit then closes with 1008, §3), and a
// compressed body that does not decompress closes with 1007.
func TestDictionaryChoiceOnTheWire(t *testing.T) {
	_, addr := newTestServer(t, Options{})
	d, err := RouterDictionary(testRouter())
	if err != nil {
		t.Fatal(err)
	}
	id := d.ID()
	for _, tc := range []struct {
		offer, want string
		close       wsframe.CloseCode
	}{
		{"zstd:" + id + ",deflate:" + id, "zstd:" + id, wsframe.CloseInvalidPayload},
		{"deflate:other, deflate:" + id + ",zstd:" + id, "deflate:" + id, wsframe.CloseInvalidPayload},
		{"deflate:other,zstd:other", "", wsframe.ClosePolicyViolation},
	} {
		c := dial(t, addr)
		pairs := wire.AppendPair(nil, "dict", tc.offer)
		c.WriteMessage(wsframe.OpBinary, wire.Append(nil, &wire.Packet{Kind: dispatch.KindCapabilities, Count: 1, Payload: pairs}))
		p := readPacket(t, c)
		if p.Kind != dispatch.KindCapabilities {
			t.Fatalf("offer %q: first packet %v, want Capabilities", tc.offer, p.Kind)
		}
		got := ""
		for k, v := range p.Pairs() {
			if string(k) == "dict" {
				got = string(v)
			}
		}
		if got != tc.want {
			t.Errorf("offer %q: server chose %q, want %q", tc.offer, got, tc.want)
		}
		// A Call whose "compressed" body is no codec's output.
		c.WriteMessage(wsframe.OpBinary, []byte{byte(dispatch.KindCall) | wire.CompressedBit, 0xde, 0xad, 0xbe, 0xef, 0x00, 0x11})
		if code, reason := c.ReadClose(5 * time.Second); code != tc.close {
			t.Errorf("offer %q, then a body that does not decompress: close %d (%s), want %d", tc.offer, code, reason, tc.close)
		}
	}
}

// An unknown kind closes with 1008 HP_ERR_UNKNOWN_KIND (PROTOCOL.md §3)
// also when the compressed bit is set and the body would not inflate: the
// kind is read from the head byte first, as the Go and browser clients
// read it. The server inflated first and closed with 1007.
func TestCompressedUnknownKindOnTheWire(t *testing.T) {
	_, addr := newTestServer(t, Options{})
	d, err := RouterDictionary(testRouter())
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, addr)
	pairs := wire.AppendPair(nil, "dict", "deflate:"+d.ID())
	c.WriteMessage(wsframe.OpBinary, wire.Append(nil, &wire.Packet{Kind: dispatch.KindCapabilities, Count: 1, Payload: pairs}))
	if p := readPacket(t, c); p.Kind != dispatch.KindCapabilities {
		t.Fatalf("first packet %v, want Capabilities", p.Kind)
	}
	c.WriteMessage(wsframe.OpBinary, []byte{0x7f | wire.CompressedBit, 0xde, 0xad, 0xbe, 0xef})
	if code, reason := c.ReadClose(hangBound); code != wsframe.ClosePolicyViolation || reason != errUnknownKind.Reason {
		t.Errorf("a compressed packet of kind 127: close %d (%s), want 1008 %s", code, reason, errUnknownKind.Reason)
	}
}

// A kind that travels only the other way closes with 1008
// HP_ERR_UNKNOWN_KIND (PROTOCOL.md §3) at either end also when the
// compressed bit is set and the body would not inflate: the kind and its
// direction are read from the head byte first, as for an unknown kind.
// Both Go ends inflated first and closed with 1007.
func TestCompressedKindOfTheOtherDirection(t *testing.T) {
	_, addr := newTestServer(t, Options{})
	d, err := RouterDictionary(testRouter())
	if err != nil {
		t.Fatal(err)
	}
	garbage := []byte{0xde, 0xad, 0xbe, 0xef}
	for _, k := range []dispatch.Kind{dispatch.KindResult, dispatch.KindError, dispatch.KindAsk} {
		c := dial(t, addr)
		pairs := wire.AppendPair(nil, "dict", "deflate:"+d.ID())
		c.WriteMessage(wsframe.OpBinary, wire.Append(nil, &wire.Packet{Kind: dispatch.KindCapabilities, Count: 1, Payload: pairs}))
		if p := readPacket(t, c); p.Kind != dispatch.KindCapabilities {
			t.Fatalf("first packet %v, want Capabilities", p.Kind)
		}
		c.WriteMessage(wsframe.OpBinary, wire.AppendCompressed(nil, k, garbage))
		if code, reason := c.ReadClose(hangBound); code != wsframe.ClosePolicyViolation || reason != errUnknownKind.Reason {
			t.Errorf("server: a compressed %v: close %d (%s), want 1008 %s", k, code, reason, errUnknownKind.Reason)
		}
	}
	cc := &clientConn{c: &Client{}}
	cc.dict.Store(&dictCodec{name: "deflate:" + d.ID(), codec: dictionary.NewDeflate(d, dictionary.CodecOptions{})})
	for _, k := range []dispatch.Kind{dispatch.KindCall, dispatch.KindAnswer, dispatch.KindJoin, dispatch.KindLeave} {
		if err := cc.handleMessage(wsframe.OpBinary, wire.AppendCompressed(nil, k, garbage)); err != errUnknownKind {
			t.Errorf("client: a compressed %v: %v, want close 1008 %s", k, err, errUnknownKind.Reason)
		}
	}
}

// PROTOCOL.md §4.5 at the wire: Join and Leave are answered with
// {"room", "members"}; joining a room twice, or leaving a room one is not
// in, succeeds and changes nothing: no count, no presence event.
func TestJoinTwiceLeaveNotInOnTheWire(t *testing.T) {
	_, addr := newTestServer(t, Options{PresenceInterval: -1}) // one per change, at once
	a, b := dial(t, addr), dial(t, addr)
	nextID := uint32(0)
	member := func(c *wstest.Conn, kind dispatch.Kind, room string) string {
		t.Helper()
		nextID++
		c.WriteMessage(wsframe.OpBinary, wire.Append(nil, &wire.Packet{Kind: kind, ID: nextID, Room: []byte(room)}))
		for {
			p := readPacket(t, c)
			if p.Kind == dispatch.KindError && p.ID == nextID {
				t.Fatalf("%v %s: error %d %s", kind, room, p.Code, p.Message)
			}
			if p.Kind == dispatch.KindResult && p.ID == nextID {
				return string(p.Payload)
			}
		}
	}
	for _, step := range []struct {
		c          *wstest.Conn
		kind       dispatch.Kind
		room, want string
	}{
		{b, dispatch.KindJoin, "r", `{"room":"r","members":1}`},
		{b, dispatch.KindLeave, "elsewhere", `{"room":"elsewhere","members":0}`},
		// From here on b reads nothing until the mark below.
		{a, dispatch.KindJoin, "r", `{"room":"r","members":2}`},
		{a, dispatch.KindJoin, "r", `{"room":"r","members":2}`},
		{a, dispatch.KindLeave, "elsewhere", `{"room":"elsewhere","members":0}`},
	} {
		if got := member(step.c, step.kind, step.room); got != step.want {
			t.Errorf("%v %s: %s, want %s", step.kind, step.room, got, step.want)
		}
	}
	a.WriteMessage(wsframe.OpBinary, wire.Append(nil, &wire.Packet{Kind: dispatch.KindEmit, Room: []byte("r"), Name: []byte("mark")}))
	// b saw a's join, nothing after.
	var presence []string
	for p := readPacket(t, b); p.Kind != dispatch.KindEmit || string(p.Name) != "mark"; p = readPacket(t, b) {
		if p.Kind == dispatch.KindEmit && p.Name[0] == '$' {
			presence = append(presence, string(p.Name)+string(p.Payload))
		}
	}
	if got, want := strings.Join(presence, " "), `$join{"members":2}`; got != want {
		t.Errorf("b's presence events: %s, want %s", got, want)
	}
}

// An Async call that Shutdown does not refuse is waited for, so its
// caller gets its answer. The call was admitted by a check of shutting,
// then counted: a Shutdown between the two found no call to wait for and
// closed the connection, and the call ran with its answer lost (the
// caller saw 1001). The hook runs Shutdown in that window, and waits
// (a second at most) for it to close the connection.
func TestShutdownWaitsForTheAsyncCallItAdmits(t *testing.T) {
	s, addr := newTestServer(t, Options{})
	c := dialClient(t, addr, ClientOptions{Reconnect: Reconnect{Disabled: true}})
	closing := make(chan struct{}, 1)
	onClose := func(*wsConn) {
		select {
		case closing <- struct{}{}:
		default:
		}
	}
	testHookCloseRequested.Store(&onClose)
	t.Cleanup(func() { testHookCloseRequested.Store(nil) })
	var once sync.Once
	shut := make(chan error, 1)
	inWindow := func() {
		once.Do(func() {
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				shut <- s.Shutdown(ctx)
			}()
			select {
			case <-closing:
			case <-time.After(time.Second):
			}
		})
	}
	testHookAdmitAsync.Store(&inWindow)
	t.Cleanup(func() { testHookAdmitAsync.Store(nil) })
	var out string
	err := c.Call(context.Background(), "test/sleep", 0, &out)
	if err != nil && !errors.Is(err, ErrUnavailable) {
		t.Errorf("an Async call as Shutdown began: %v, want its answer or Unavailable", err)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}
