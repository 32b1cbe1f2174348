package compat

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/hotpath-go/hotpath/compat/internal/wstest"
	"github.com/hotpath-go/hotpath/compat/wire"
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
