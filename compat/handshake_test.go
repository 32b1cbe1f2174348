package compat

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/textproto"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/gobwas/ws/wsutil"
	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/wsframe"
	"github.com/quic-go/quic-go/http3"
)

// rawUpgrade sends an upgrade request with the given Sec-WebSocket-Key
// lines to addr and returns the status of the answer.
func rawUpgrade(t *testing.T, addr string, keys ...string) int {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	req := "GET /ws HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: " + Subprotocol + "\r\n"
	for _, k := range keys {
		req += "Sec-WebSocket-Key: " + k + "\r\n"
	}
	if _, err := nc.Write([]byte(req + "\r\n")); err != nil {
		t.Fatal(err)
	}
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
	if err != nil {
		t.Fatalf("answer to keys %q: %v", keys, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// RFC 6455 §4.2.1 item 5: the request has "a |Sec-WebSocket-Key| header
// field with a base64-encoded value that, when decoded, is 16 bytes in
// length"; §11.3.1: it "MUST NOT appear more than once". A request that
// does not match, the server "MUST stop processing" and answer with an
// error such as 400. gobwas/ws, under both ways of serving, checks only
// that the key is 24 characters long.
func TestRFC6455_4_2_1_SecWebSocketKey(t *testing.T) {
	const valid = "dGhlIHNhbXBsZSBub25jZQ==" // the RFC's own example
	cases := []struct {
		name string
		keys []string
		want int
	}{
		{"the RFC's example", []string{valid}, http.StatusSwitchingProtocols},
		{"not base64", []string{"########################"}, http.StatusBadRequest},
		{"18 bytes", []string{"AAAAAAAAAAAAAAAAAAAAAAAA"}, http.StatusBadRequest},
		{"twice", []string{valid, valid}, http.StatusBadRequest},
		{"none", nil, http.StatusBadRequest},
	}
	for _, viaHTTP := range []bool{false, true} {
		s, err := NewServer(Options{Router: testRouter()})
		if err != nil {
			t.Fatal(err)
		}
		addr := startServer(t, s, viaHTTP)
		for _, tc := range cases {
			if got := rawUpgrade(t, addr, tc.keys...); got != tc.want {
				t.Errorf("viaHTTP=%v, %s: status %d, want %d", viaHTTP, tc.name, got, tc.want)
			}
		}
		// Counted once the answer is written.
		waitFor(t, func() bool { return s.Metrics().HandshakeFailures == 4 })
	}
}

// RFC 6455 §11.3.5: Sec-WebSocket-Version "MUST NOT appear more than
// once in an HTTP request"; §4.2.1 item 6 wants one, of 13. Serve
// (gobwas/ws's Upgrader, which checks each line) switched protocols for
// two lines of 13, and ServeHTTP (its HTTPUpgrader, which reads the first
// only) for 13 followed by anything. Both refuse a repeated field: 400,
// or the Upgrader's own 426 for a later line that is not 13.
func TestRFC6455_11_3_5_SecWebSocketVersionOnce(t *testing.T) {
	cases := []struct {
		name     string
		versions []string
		want     []int // any of
	}{
		{"13", []string{"13"}, []int{http.StatusSwitchingProtocols}},
		{"13 twice", []string{"13", "13"}, []int{http.StatusBadRequest}},
		{"13, then 8", []string{"13", "8"}, []int{http.StatusBadRequest, http.StatusUpgradeRequired}},
		{"13, then empty", []string{"13", ""}, []int{http.StatusBadRequest, http.StatusUpgradeRequired}},
	}
	for _, viaHTTP := range []bool{false, true} {
		s, err := NewServer(Options{Router: testRouter(), Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		addr := startServer(t, s, viaHTTP)
		for _, tc := range cases {
			req := "GET /ws HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
				"Sec-WebSocket-Protocol: " + Subprotocol + "\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
			for _, v := range tc.versions {
				req += "Sec-WebSocket-Version: " + v + "\r\n"
			}
			resp := rawRequest(t, addr, req+"\r\n")
			if !slices.Contains(tc.want, resp.StatusCode) {
				t.Errorf("viaHTTP=%v, %s: status %d, want one of %v", viaHTTP, tc.name, resp.StatusCode, tc.want)
			}
		}
	}
}

// An upgrade request that frames content is refused under both ways of
// serving (errRequestContent): RFC 6455 §4.1's handshake has none, and
// taken, it was read as the first frames. "Content-Length: 0" (or 00, as
// net/http reads it) frames none and is taken.
func TestUpgradeWithContentIsRefused(t *testing.T) {
	cases := []struct {
		name  string
		lines string
		want  int
	}{
		{"none", "", http.StatusSwitchingProtocols},
		{"Content-Length: 0", "Content-Length: 0\r\n", http.StatusSwitchingProtocols},
		{"Content-Length: 00", "Content-Length: 00\r\n", http.StatusSwitchingProtocols},
		{"Content-Length: 3", "Content-Length: 3\r\n", http.StatusBadRequest},
		{"Content-Length: 0, then 1", "Content-Length: 0\r\nContent-Length: 1\r\n", http.StatusBadRequest},
		{"chunked", "Transfer-Encoding: chunked\r\n", http.StatusBadRequest},
	}
	for _, viaHTTP := range []bool{false, true} {
		s, err := NewServer(Options{Router: testRouter(), Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		addr := startServer(t, s, viaHTTP)
		for _, tc := range cases {
			req := "GET /ws HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
				"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: " + Subprotocol + "\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" +
				tc.lines + "\r\n"
			if strings.Contains(tc.lines, "chunked") {
				req += "3\r\nabc\r\n0\r\n\r\n"
			} else if strings.Contains(tc.lines, "Length: 3") {
				req += "abc"
			}
			resp := rawRequest(t, addr, req)
			if resp.StatusCode != tc.want {
				t.Errorf("viaHTTP=%v, %s: status %d, want %d", viaHTTP, tc.name, resp.StatusCode, tc.want)
			}
		}
	}
}

// An upgrade request on a raw listener ends at 64 KiB: headers that keep
// coming are not read (and kept) until the handshake's timeout. The test
// writes until the server's close breaks the connection; without the
// bound the server read on, and 64 MiB went through.
func TestRawUpgradeRequestBounded(t *testing.T) {
	_, addr := newTestServer(t, Options{})
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	header := "X-Filler: " + strings.Repeat("a", 1000) + "\r\n"
	written := 0
	if n, err := nc.Write([]byte("GET /ws HTTP/1.1\r\nHost: " + addr + "\r\n")); err == nil {
		written += n
	}
	for written < 64<<20 {
		nc.SetWriteDeadline(time.Now().Add(5 * time.Second))
		n, err := nc.Write([]byte(strings.Repeat(header, 64)))
		written += n
		if err != nil {
			return // the server closed it
		}
	}
	t.Fatalf("the server read %d bytes of upgrade request", written)
}

// answerUpgrade accepts one connection on ln, reads its upgrade request,
// answers 101 with the headers resp returns for the request's key, then
// sends the server's capabilities.
func answerUpgrade(ln net.Listener, resp func(accept string) string) {
	answerHead(ln, func(accept string) string { return "HTTP/1.1 101 Switching Protocols\r\n" + resp(accept) + "\r\n" })
}

// answerHead accepts one connection on ln, reads its upgrade request and
// writes head(accept), accept being the request key's
// Sec-WebSocket-Accept. After a 101 status line it sends the server's
// capabilities and reads until the client gives up or closes; after any
// other it closes the connection.
func answerHead(ln net.Listener, head func(accept string) string) {
	nc, err := ln.Accept()
	if err != nil {
		return
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	req, err := http.ReadRequest(bufio.NewReader(nc))
	if err != nil {
		return
	}
	sum := sha1.Sum([]byte(req.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	out := []byte(head(base64.StdEncoding.EncodeToString(sum[:])))
	if !bytes.HasPrefix(out, []byte("HTTP/1.1 101")) {
		nc.Write(out)
		return
	}
	// One write: the client reads the capabilities with the answer, and
	// must keep them.
	caps := wire.Append(nil, &wire.Packet{Kind: dispatch.KindCapabilities, Count: 1, Payload: wire.AppendPair(nil, "codec", "json")})
	nc.Write(wsframe.AppendFrame(out, wsframe.OpBinary, caps, wsframe.Fin))
	for { // until the client gives up or closes
		if f, err := ws.ReadFrame(nc); err != nil || f.Header.OpCode == ws.OpClose {
			return
		}
	}
}

// RFC 6455 §4.1: the client MUST fail the connection when the server's
// answer lacks Upgrade: websocket or Connection: Upgrade, when its
// Sec-WebSocket-Accept is not the one its key calls for, or when it names
// an extension or a subprotocol the client did not offer. Dial fails in
// each case instead of returning a client; the same server with the
// answer the RFC asks for is taken, and so is one whose Upgrade is
// "websocket" in another case (item 2: "ASCII case-insensitive") or whose
// Connection holds the token Upgrade among others, in one line or two
// (item 3: the client fails the connection if it "doesn't contain a
// token" Upgrade); gobwas/ws's Dialer refused those Connections.
func TestRFC6455_4_1_ClientChecksTheAnswer(t *testing.T) {
	const good = "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Protocol: " + Subprotocol + "\r\n"
	const rest = "Sec-WebSocket-Protocol: " + Subprotocol + "\r\nSec-WebSocket-Accept: "
	cases := []struct {
		name string
		resp func(accept string) string
		take bool
	}{
		{"the RFC's answer", func(a string) string { return good + "Sec-WebSocket-Accept: " + a + "\r\n" }, true},
		{"Upgrade in mixed case", func(a string) string {
			return "Upgrade: WebSocket\r\nConnection: Upgrade\r\n" + rest + a + "\r\n"
		}, true},
		{"Connection token list", func(a string) string {
			return "Upgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n" + rest + a + "\r\n"
		}, true},
		{"Connection over two lines, lower case", func(a string) string {
			return "Upgrade: websocket\r\nconnection: keep-alive\r\nConnection:\tupgrade \r\n" + rest + a + "\r\n"
		}, true},
		{"Connection without the token", func(a string) string {
			return "Upgrade: websocket\r\nConnection: keep-alive, Upgrades\r\n" + rest + a + "\r\n"
		}, false},
		{"Connection over two lines without the token", func(a string) string {
			return "Upgrade: websocket\r\nConnection: keep-alive\r\nConnection: close\r\n" + rest + a + "\r\n"
		}, false},
		{"Upgrade with a value other than websocket", func(a string) string {
			return "Upgrade: websocket, h2c\r\nConnection: Upgrade\r\n" + rest + a + "\r\n"
		}, false},
		{"no Upgrade header", func(a string) string {
			return "Connection: Upgrade\r\nSec-WebSocket-Protocol: " + Subprotocol + "\r\nSec-WebSocket-Accept: " + a + "\r\n"
		}, false},
		{"no Connection header", func(a string) string {
			return "Upgrade: websocket\r\nSec-WebSocket-Protocol: " + Subprotocol + "\r\nSec-WebSocket-Accept: " + a + "\r\n"
		}, false},
		{"wrong Sec-WebSocket-Accept", func(string) string {
			return good + "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"
		}, false},
		{"an extension not offered", func(a string) string {
			return good + "Sec-WebSocket-Accept: " + a + "\r\nSec-WebSocket-Extensions: x-webkit-deflate-frame\r\n"
		}, false},
		{"a subprotocol not offered", func(a string) string {
			return "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Protocol: chat\r\nSec-WebSocket-Accept: " + a + "\r\n"
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go answerUpgrade(ln, tc.resp)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			c, err := Dial(ctx, "ws://"+ln.Addr().String()+"/ws", ClientOptions{Reconnect: Reconnect{Disabled: true}})
			if tc.take {
				if err != nil {
					t.Fatalf("Dial refused the answer: %v", err)
				}
				c.Close()
				return
			}
			if err == nil {
				c.Close()
				t.Fatal("Dial took the answer")
			}
			if errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Dial waited for the capabilities instead of refusing the answer: %v", err)
			}
		})
	}
}

// RFC 6455 §11.3.4: Sec-WebSocket-Protocol "MUST NOT appear more than
// once in an HTTP response"; §4.1: the client MUST fail the connection if
// the answer names a subprotocol it did not offer. gobwas/ws's Dialer
// stopped checking the field once one line named hotpath.v1, so a second
// line, with any value, connected (fuzz C1); it also trimmed names, so
// lines net/http refuses (a space before the colon, a folded line)
// passed. Dial fails on each, over ws:// and wss://, and takes the
// answer with the field once.
func TestRFC6455_11_3_4_ClientRefusesRepeatedSubprotocol(t *testing.T) {
	const head = "Upgrade: websocket\r\nConnection: Upgrade\r\n"
	const once = "Sec-WebSocket-Protocol: " + Subprotocol + "\r\n"
	cases := []struct {
		name  string
		lines string
		want  error // nil: Dial takes the answer
	}{
		{"once", once, nil},
		{"twice, the same", once + once, errRepeatedField},
		{"twice, then a protocol not offered", once + "Sec-WebSocket-Protocol: chat\r\n", errRepeatedField},
		{"twice, lower case", once + "sec-websocket-protocol: " + Subprotocol + "\r\n", errRepeatedField},
		{"twice, then empty", once + "Sec-WebSocket-Protocol:\r\n", errRepeatedField},
		{"twice, then a control character", once + "Sec-WebSocket-Protocol: \x02\r\n", errMalformedAnswer},
		{"a space before the colon", "Sec-WebSocket-Protocol : " + Subprotocol + "\r\n", errMalformedAnswer},
		{"a folded line", once + " Foo: bar\r\n", errMalformedAnswer},
		// §11.3.3: the same for Sec-WebSocket-Accept, even when both
		// are right.
		{"the accept twice", once + "Sec-WebSocket-Accept: {ACCEPT}\r\n", errRepeatedField},
	}
	for _, scheme := range []string{"ws", "wss"} {
		for _, tc := range cases {
			t.Run(scheme+"/"+tc.name, func(t *testing.T) {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				defer ln.Close()
				opts := ClientOptions{Reconnect: Reconnect{Disabled: true}}
				if scheme == "wss" {
					ln = tls.NewListener(ln, testCert().ServerTLSConfig())
					opts.TLSConfig = testCert().ClientTLSConfig()
				}
				go answerUpgrade(ln, func(a string) string {
					return head + "Sec-WebSocket-Accept: " + a + "\r\n" + strings.ReplaceAll(tc.lines, "{ACCEPT}", a)
				})
				ctx, cancel := context.WithTimeout(context.Background(), hangBound)
				defer cancel()
				c, err := Dial(ctx, scheme+"://"+ln.Addr().String()+"/ws", opts)
				if err == nil {
					c.Close()
				}
				if tc.want == nil {
					if err != nil {
						t.Fatalf("Dial refused the answer: %v", err)
					}
					return
				}
				if !errors.Is(err, tc.want) {
					t.Fatalf("Dial: %v, want %v", err, tc.want)
				}
			})
		}
	}
}

// RFC 6455 §5.1: "a client MUST mask all frames that it sends to the
// server"; §5.5.1: after sending a Close frame, an endpoint "MUST NOT send
// any more data frames". A hand-made server records every frame compat's
// client sends while calls, batches and pings go on from four goroutines
// and Close ends it: all masked, none after the close frame.
func TestRFC6455_5_1_5_5_1_ClientFrames(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type record struct {
		ops             map[ws.OpCode]int
		unmasked, after int
	}
	seen := make(chan record, 1)
	go func() {
		r := record{ops: map[ws.OpCode]int{}}
		defer func() { seen <- r }()
		nc, err := acceptRaw(ln, "json")
		if err != nil {
			return
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		closed := false
		for {
			f, err := ws.ReadFrame(nc)
			if err != nil {
				return
			}
			if !f.Header.Masked {
				r.unmasked++
			}
			if closed {
				r.after++
				continue
			}
			r.ops[f.Header.OpCode]++
			f = ws.UnmaskFrameInPlace(f)
			switch f.Header.OpCode {
			case ws.OpPing:
				wsutil.WriteServerMessage(nc, ws.OpPong, f.Payload)
			case ws.OpClose:
				closed = true
				ws.WriteFrame(nc, ws.NewCloseFrame(f.Payload))
			case ws.OpBinary:
				answerCalls(nc, f.Payload)
			}
		}
	}()
	c := dialClient(t, ln.Addr().String(), ClientOptions{Reconnect: Reconnect{Disabled: true}, KeepaliveInterval: 5 * time.Millisecond, IdleTimeout: 5 * time.Second})
	time.Sleep(50 * time.Millisecond) // silent: the client pings
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c.Call(context.Background(), "echo/raw", []byte("x"), nil) == nil {
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	c.Close()
	wg.Wait()
	r := <-seen
	if r.unmasked != 0 {
		t.Errorf("%d unmasked frames", r.unmasked)
	}
	if r.after != 0 {
		t.Errorf("%d frames after the close frame", r.after)
	}
	if r.ops[ws.OpBinary] == 0 || r.ops[ws.OpPing] == 0 || r.ops[ws.OpClose] != 1 {
		t.Errorf("frames seen %v: want binary ones, pings and one close", r.ops)
	}
}

// answerCalls answers the calls of a message from the client, alone or in
// a batch, with their payloads.
func answerCalls(nc net.Conn, msg []byte) {
	p, err := wire.Decode(msg)
	if err != nil {
		return
	}
	if p.Kind == dispatch.KindCall {
		wsutil.WriteServerBinary(nc, wire.AppendResult(nil, p.ID, p.Payload))
		return
	}
	if p.Kind == dispatch.KindBatch {
		for item := range p.Items() {
			answerCalls(nc, item)
		}
	}
}

// scriptedConn is a net.Conn that reads a fixed request, then io.EOF, and
// keeps what is written to it.
type scriptedConn struct {
	net.Conn // nil: only the methods below are called
	r        *bytes.Reader
	w        bytes.Buffer
}

func (c *scriptedConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c *scriptedConn) Write(p []byte) (int, error) { return c.w.Write(p) }
func (c *scriptedConn) RemoteAddr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
}
func (c *scriptedConn) SetDeadline(time.Time) error      { return nil }
func (c *scriptedConn) SetReadDeadline(time.Time) error  { return nil }
func (c *scriptedConn) SetWriteDeadline(time.Time) error { return nil }

// FuzzUpgradeRequest sends any bytes as an upgrade request to Serve's
// upgrader: it never panics, and it switches protocols only for a request
// whose HTTP version and headers net/http also reads, within 64 KiB, with
// at most one Host line, one Sec-WebSocket-Version line (RFC 6455
// §11.3.5), one Sec-WebSocket-Key of 16 bytes in base64, no content
// (hasContent), and Upgrade and Connection lines whose lists hold the
// tokens "websocket" and "upgrade" (§4.2.1 items 3 and 4), answered with
// that key's Sec-WebSocket-Accept (RFC 6455 §4.2.1, §4.2.2); and the
// bytes it read past the headers, as net/http ends them, are the
// connection's first (upgrade.early), none lost or added.
func FuzzUpgradeRequest(f *testing.F) {
	valid := "GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n" +
		"Sec-WebSocket-Protocol: " + Subprotocol + "\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
	f.Add([]byte(valid))
	f.Add([]byte(strings.Replace(valid, "dGhlIHNhbXBsZSBub25jZQ==", "AAAAAAAAAAAAAAAAAAAAAAAA", 1)))
	f.Add([]byte(strings.Replace(valid, "Sec-WebSocket-Key: ", "Sec-WebSocket-Key: x\r\nSec-WebSocket-Key: ", 1)))
	f.Add([]byte(strings.Replace(valid, "\r\n\r\n", "\r\nSec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n\r\n", 1)))
	f.Add([]byte(strings.Replace(valid, "Host: a\r\n", "Host: a\r\nHost: b\r\n", 1)))
	f.Add([]byte(strings.Replace(valid, "Sec-WebSocket-Version: 13\r\n", "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Version: 13\r\n", 1)))
	frame := wsframe.AppendMaskedFrame(nil, wsframe.OpBinary, []byte("\r\n\r\nfirst"), wsframe.Fin, [4]byte{})
	f.Add(append([]byte(valid), frame...))
	f.Add(append([]byte(strings.ReplaceAll(valid, "\r\n", "\n")), frame...))
	f.Add([]byte(valid + "\r\n\n"))
	f.Add([]byte(strings.Replace(valid, "\r\n\r\n", "\r\nContent-Length: 5\r\n\r\nabcde", 1)))
	f.Add([]byte(strings.Replace(valid, "HTTP/1.1", "HTTP/1.<", 1)))
	f.Add([]byte(strings.Replace(valid, "Upgrade: websocket\r\n", "Upgrade: h2c\r\nupgrade: h2c, WebSocket\r\n", 1)))
	f.Add([]byte(strings.Replace(valid, "Connection: Upgrade\r\n", "Connection: keep-alive\r\nConnection: x, upgrade\r\n", 1)))
	f.Add([]byte(strings.Replace(valid, "Connection: Upgrade\r\n", "Connection: keep-alive\r\nConnection: close\r\n", 1)))
	s, err := NewServer(Options{Router: testRouter(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, req []byte) {
		c := &scriptedConn{r: bytes.NewReader(req)}
		up, err := s.upgradeConn(c, nil)
		answer := c.w.Bytes()
		if err != nil || !bytes.HasPrefix(answer, []byte("HTTP/1.1 101 ")) {
			return
		}
		if len(req) > maxHandshakeBytes {
			t.Fatalf("switched protocols for a request of %d bytes", len(req))
		}
		if hasContent(req) {
			t.Fatalf("switched protocols for a request with content: %q", req)
		}
		// The request line's method and target are gobwas/ws's to check;
		// its version and the headers are read as net/http reads them.
		line, headers, _ := bytes.Cut(req, []byte("\n"))
		_, target, _ := bytes.Cut(bytes.TrimSuffix(line, []byte("\r")), []byte(" "))
		if _, proto, _ := bytes.Cut(target, []byte(" ")); !validHTTPVersion(proto) {
			t.Fatalf("switched protocols for HTTP version %q: %q", proto, req)
		}
		br := bufio.NewReaderSize(bytes.NewReader(headers), len(headers)+16) // holds them all
		parsed, err := textproto.NewReader(br).ReadMIMEHeader()
		if err != nil {
			t.Fatalf("switched protocols for headers net/http refuses (%v): %q", err, req)
		}
		// What the upgrade read past the headers, as net/http ends them,
		// is the connection's first bytes (upgrade.early, 33098ab): from
		// the byte after the blank line to the last byte read.
		read := len(req) - c.r.Len()
		if end := len(req) - br.Buffered(); end > read || !bytes.Equal(up.early, req[end:read]) {
			t.Fatalf("the upgrade read %d bytes and kept %q after the headers, which end at byte %d: %q", read, up.early, end, req)
		}
		for name, token := range map[string]string{"Upgrade": "websocket", "Connection": "upgrade"} {
			if !listHolds(parsed.Values(name), token) {
				t.Fatalf("switched protocols for %s lines %q, without the token %s: %q", name, parsed.Values(name), token, req)
			}
		}
		if hosts := parsed.Values("Host"); len(hosts) > 1 {
			t.Fatalf("switched protocols for a request with Host lines %q (RFC 9112 §3.2)", hosts)
		}
		if versions := parsed.Values("Sec-Websocket-Version"); len(versions) != 1 {
			t.Fatalf("switched protocols for a request with Sec-WebSocket-Version lines %q (RFC 6455 §11.3.5)", versions)
		}
		keys := parsed.Values("Sec-Websocket-Key")
		if len(keys) != 1 {
			t.Fatalf("switched protocols for a request with keys %q", keys)
		}
		if b, err := base64.StdEncoding.DecodeString(keys[0]); err != nil || len(b) != 16 {
			t.Fatalf("switched protocols for key %q", keys[0])
		}
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(answer)), nil)
		if err != nil {
			t.Fatalf("answer %q: %v", answer, err)
		}
		sum := sha1.Sum([]byte(keys[0] + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
		if got, want := resp.Header.Get("Sec-Websocket-Accept"), base64.StdEncoding.EncodeToString(sum[:]); got != want {
			t.Fatalf("Sec-WebSocket-Accept %q for key %q, want %q", got, keys[0], want)
		}
	})
}

// listHolds reports whether the comma-separated values of a header's
// lines, as net/http reads them, hold token, in any case (RFC 9110
// §5.6.1).
func listHolds(values []string, token string) bool {
	for _, v := range values {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// validHTTPVersion reports whether proto is "HTTP/" DIGIT "." DIGIT (RFC
// 9112 §2.3).
func validHTTPVersion(proto []byte) bool {
	return len(proto) == 8 && string(proto[:5]) == "HTTP/" && proto[6] == '.' &&
		'0' <= proto[5] && proto[5] <= '9' && '0' <= proto[7] && proto[7] <= '9'
}

// A server's answer to the upgrade is read within a bound, as the server
// reads the request within one (TestRawUpgradeRequestBounded): a server
// that answers with headers that never end, or a line that never ends,
// fails Dial once the bound is passed, instead of making the client
// buffer all it sends until ConnectTimeout (gobwas/ws reads a line whole,
// and http.ReadResponse every header line, without a limit).
func TestUpgradeAnswerBounded(t *testing.T) {
	cases := []struct {
		name       string
		head, fill string
	}{
		{"a refusal whose headers never end", "HTTP/1.1 403 Forbidden\r\n", "X-Pad: " + strings.Repeat("a", 1000) + "\r\n"},
		{"a 101 whose header line never ends", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nX-Pad: ", strings.Repeat("a", 1024)},
		{"a status line that never ends", "HTTP/1.1 101 ", strings.Repeat("a", 1024)},
	}
	const flood = 64 << 20
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			wrote := make(chan int, 1)
			go func() {
				written := 0
				defer func() { wrote <- written }()
				nc, err := ln.Accept()
				if err != nil {
					return
				}
				defer nc.Close()
				nc.SetReadDeadline(time.Now().Add(hangBound))
				if _, err := http.ReadRequest(bufio.NewReader(nc)); err != nil {
					return
				}
				chunk := []byte(strings.Repeat(tc.fill, (64<<10)/len(tc.fill)))
				nc.SetWriteDeadline(time.Now().Add(hangBound))
				n, err := nc.Write([]byte(tc.head))
				written += n
				for err == nil && written < flood {
					n, err = nc.Write(chunk)
					written += n
				}
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 2*hangBound)
			defer cancel()
			dialed := make(chan error, 1)
			go func() {
				c, err := Dial(ctx, "ws://"+ln.Addr().String()+"/ws", ClientOptions{Reconnect: Reconnect{Disabled: true}, ConnectTimeout: 2 * hangBound})
				if err == nil {
					c.Close()
				}
				dialed <- err
			}()
			if n := <-wrote; n >= flood/2 {
				t.Errorf("the client read %d bytes of the upgrade's answer", n)
			}
			select {
			case err := <-dialed:
				if err == nil {
					t.Error("Dial took the answer")
				}
			case <-time.After(hangBound):
				t.Fatal("Dial still waits for the end of the answer")
			}
		})
	}
}

// RFC 6455 §4.2.1: the server reads the client's opening handshake, and
// "If the server, while reading the handshake, finds that the client did
// not send a handshake that matches the description below [...], the
// server MUST stop processing the client's handshake and return an HTTP
// response with an appropriate error code (such as 400 Bad Request)": an
// HTTP/1.1 (or higher) GET (item 1), a Host (item 2), an Upgrade header
// with "websocket", compared case-insensitively (item 3), a Connection
// header with an "Upgrade" token, also case-insensitive (item 4), and
// Sec-WebSocket-Version 13 (item 6; TestRFC6455_4_2_1_SecWebSocketKey has
// item 5). §4.2.2 item 4 and §4.4: a version the server does not speak
// gets "an appropriate HTTP error code (such as 426 Upgrade Required) and
// a |Sec-WebSocket-Version| header field indicating the version(s) the
// server is capable of understanding". The same under Serve and under
// ServeHTTP.
func TestRFC6455_4_2_1_OpeningHandshake(t *testing.T) {
	const key = "dGhlIHNhbXBsZSBub25jZQ=="
	request := func(reqLine string, headers ...string) string {
		return reqLine + "\r\n" + strings.Join(headers, "\r\n") + "\r\nSec-WebSocket-Key: " + key +
			"\r\nSec-WebSocket-Protocol: " + Subprotocol + "\r\n\r\n"
	}
	const (
		get     = "GET /ws HTTP/1.1"
		host    = "Host: localhost"
		upgrade = "Upgrade: websocket"
		conn    = "Connection: Upgrade"
		version = "Sec-WebSocket-Version: 13"
	)
	refused := func(status int) bool { return status >= 400 && status < 500 }
	cases := []struct {
		name string
		req  string
		ok   func(status int) bool // nil: 101
	}{
		{"a valid request", request(get, host, upgrade, conn, version), nil},
		{"Upgrade in capitals (item 3: case-insensitive)", request(get, host, "Upgrade: WEBSOCKET", conn, version), nil},
		{"Upgrade in mixed case", request(get, host, "Upgrade: WebSocket", conn, version), nil},
		{"Connection token list (item 4)", request(get, host, upgrade, "Connection: keep-alive, Upgrade", version), nil},
		{"Connection token in lower case", request(get, host, upgrade, "Connection: keep-alive, upgrade", version), nil},
		// RFC 9110 §7.8 makes Upgrade a list, and RFC 9110 §5.3 (RFC 7230
		// §3.2.2) a list field split over several lines the same as its
		// values joined with commas: item 3's Upgrade "containing the value
		// websocket" may hold other protocols, and item 4's Connection
		// may come in two lines. Both paths refused these (gobwas/ws's
		// Upgrader checks every line alone, its HTTPUpgrader the first).
		{"Upgrade token list (item 3)", request(get, host, "Upgrade: h2c, websocket", conn, version), nil},
		{"Upgrade token list, no spaces", request(get, host, "Upgrade: websocket,h2c", conn, version), nil},
		{"Upgrade over two lines (item 3)", request(get, host, "Upgrade: h2c", "upgrade:\tWebSocket ", conn, version), nil},
		{"Connection over two lines (item 4)", request(get, host, upgrade, "Connection: keep-alive", "connection: UPGRADE", version), nil},
		{"Connection over two lines, Upgrade first", request(get, host, upgrade, conn, "Connection: keep-alive", version), nil},
		{"Upgrade list without websocket", request(get, host, "Upgrade: h2c, websocket2", conn, version), refused},
		{"Upgrade over two lines without websocket", request(get, host, "Upgrade: h2c", "Upgrade: ws", conn, version), refused},
		{"Connection over two lines without Upgrade", request(get, host, upgrade, "Connection: keep-alive", "Connection: close", version), refused},
		{"Connection: Upgrades", request(get, host, upgrade, "Connection: Upgrades", version), refused},
		// Not a token: gobwas/ws's list reader took it for "Upgrade".
		{`Connection: Upgrade"`, request(get, host, upgrade, `Connection: Upgrade"`, version), refused},
		// §9.1 and §11.3.2 let Sec-WebSocket-Extensions, §11.3.4
		// Sec-WebSocket-Protocol (in a request), come in several lines.
		{"Sec-WebSocket-Protocol over two lines", request(get, host, upgrade, conn, version, "Sec-WebSocket-Protocol: chat"), nil},
		{"Sec-WebSocket-Protocol with empty elements", request(get, host, upgrade, conn, version, "Sec-WebSocket-Protocol: , chat ,"), nil},
		// §4.3: Sec-WebSocket-Protocol-Client = 1#token. ServeHTTP
		// refused these two, Serve took them.
		{"Sec-WebSocket-Protocol with a quoted string", request(get, host, upgrade, conn, version, `Sec-WebSocket-Protocol: "chat"`), refused},
		{"Sec-WebSocket-Protocol with a parameter", request(get, host, upgrade, conn, version, "Sec-WebSocket-Protocol: chat;v=1"), refused},
		{"Sec-WebSocket-Protocol with a space inside", request(get, host, upgrade, conn, version, "Sec-WebSocket-Protocol: chat v1"), refused},
		{"Sec-WebSocket-Extensions over two lines", request(get, host, upgrade, conn, version,
			"Sec-WebSocket-Extensions: x-webkit-deflate-frame", "Sec-WebSocket-Extensions: permessage-deflate"), nil},
		{"POST (item 1)", request("POST /ws HTTP/1.1", host, upgrade, conn, version, "Content-Length: 0"), refused},
		{"HTTP/1.0 (item 1)", request("GET /ws HTTP/1.0", host, upgrade, conn, version), func(s int) bool { return refused(s) || s == 505 }},
		// The version's grammar (RFC 9112 §2.3: "HTTP/" DIGIT "." DIGIT):
		// gobwas/ws's Upgrader read '<' as the digit 12.
		{"HTTP/1.< (item 1)", request("GET /ws HTTP/1.<", host, upgrade, conn, version), refused},
		{"HTTP/1.10 (item 1)", request("GET /ws HTTP/1.10", host, upgrade, conn, version), refused},
		{"no Host (item 2)", request(get, upgrade, conn, version), refused},
		{"no Upgrade (item 3)", request(get, host, conn, version), refused},
		{"Upgrade: h2c (item 3)", request(get, host, "Upgrade: h2c", conn, version), refused},
		{"no Connection (item 4)", request(get, host, upgrade, version), refused},
		{"Connection without Upgrade (item 4)", request(get, host, upgrade, "Connection: keep-alive", version), refused},
		{"no Sec-WebSocket-Version (item 6)", request(get, host, upgrade, conn), refused},
	}
	versions := []string{"8", "12", "14", "130"}
	for _, viaHTTP := range []bool{false, true} {
		_, addr := newTestServer(t, Options{})
		if viaHTTP {
			s, err := NewServer(Options{Router: testRouter(), Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			addr = startServer(t, s, true)
		}
		for _, tc := range cases {
			resp := rawRequest(t, addr, tc.req)
			switch {
			case tc.ok == nil && resp.StatusCode != http.StatusSwitchingProtocols:
				t.Errorf("viaHTTP=%v, %s: status %d, want 101", viaHTTP, tc.name, resp.StatusCode)
			case tc.ok != nil && !tc.ok(resp.StatusCode):
				t.Errorf("viaHTTP=%v, %s: status %d, want a refusal", viaHTTP, tc.name, resp.StatusCode)
			case tc.ok == nil:
				// §4.2.2 item 5: the answer.
				sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
				if got, want := resp.Header.Get("Sec-Websocket-Accept"), base64.StdEncoding.EncodeToString(sum[:]); got != want {
					t.Errorf("viaHTTP=%v, %s: Sec-WebSocket-Accept %q, want %q", viaHTTP, tc.name, got, want)
				}
				if !strings.EqualFold(resp.Header.Get("Upgrade"), "websocket") || !headerHasToken(resp.Header.Values("Connection"), "Upgrade") {
					t.Errorf("viaHTTP=%v, %s: answered Upgrade %q, Connection %q", viaHTTP, tc.name, resp.Header.Get("Upgrade"), resp.Header.Get("Connection"))
				}
				if got := resp.Header.Values("Sec-Websocket-Protocol"); len(got) != 1 || got[0] != Subprotocol {
					t.Errorf("viaHTTP=%v, %s: answered Sec-WebSocket-Protocol %q, want %s", viaHTTP, tc.name, got, Subprotocol)
				}
				ext := resp.Header.Get("Sec-Websocket-Extensions")
				if offered := strings.Contains(tc.req, "permessage-deflate"); offered != strings.HasPrefix(ext, "permessage-deflate") {
					t.Errorf("viaHTTP=%v, %s: answered Sec-WebSocket-Extensions %q", viaHTTP, tc.name, ext)
				}
			}
		}
		for _, v := range versions {
			resp := rawRequest(t, addr, request(get, host, upgrade, conn, "Sec-WebSocket-Version: "+v))
			if resp.StatusCode != http.StatusUpgradeRequired || resp.Header.Get("Sec-Websocket-Version") != "13" {
				t.Errorf("viaHTTP=%v, version %s: status %d, Sec-WebSocket-Version %q; want 426 with 13 (§4.2.2, §4.4)",
					viaHTTP, v, resp.StatusCode, resp.Header.Values("Sec-Websocket-Version"))
			}
		}
	}
}

// RFC 6455 §4.2.1: a request that is not a valid upgrade (item 1: a GET
// of HTTP/1.1 or above; 2: a Host; 3: an Upgrade holding websocket; 4: a
// Connection holding Upgrade; 5: one key of 16 bytes) gets an error such
// as 400; §4.2.2 item 4: a version other than 13 gets 426 with
// Sec-WebSocket-Version: 13. The hooks (CheckOrigin, Authenticate) run
// only for a valid upgrade, and the status is the same under Serve and
// ServeHTTP. ServeHTTP ran the hooks first: a request without the
// Upgrade token got Authenticate's 401, not 400. Serve's Upgrader
// answered 426 or 400 for a wrong version and another fault by the order
// of the lines: 400 wins. RFC 9110 §15.5.6: the 405 for a method other
// than GET carries Allow: GET; neither path sent it.
func TestRFC6455_4_2_1_4_2_2_ChecksBeforeHooks(t *testing.T) {
	const (
		get     = "GET /ws HTTP/1.1"
		host    = "Host: localhost"
		upgrade = "Upgrade: websocket"
		conn    = "Connection: Upgrade"
		key     = "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="
		version = "Sec-WebSocket-Version: 13"
		v8      = "Sec-WebSocket-Version: 8"
	)
	request := func(lines ...string) string { return strings.Join(lines, "\r\n") + "\r\n\r\n" }
	cases := []struct {
		name string
		req  string
		want int
	}{
		{"a valid request (the hooks run)", request(get, host, upgrade, conn, key, version), http.StatusUnauthorized},
		{"HTTP/1.0 (§4.2.1 item 1)", request("GET /ws HTTP/1.0", host, upgrade, conn, key, version), http.StatusHTTPVersionNotSupported},
		{"POST (§4.2.1 item 1)", request("POST /ws HTTP/1.1", host, upgrade, conn, key, version, "Content-Length: 0"), http.StatusMethodNotAllowed},
		{"DELETE (§4.2.1 item 1)", request("DELETE /ws HTTP/1.1", host, upgrade, conn, key, version), http.StatusMethodNotAllowed},
		{"POST of HTTP/1.0 (§4.2.1 item 1)", request("POST /ws HTTP/1.0", host, upgrade, conn, key, version), http.StatusHTTPVersionNotSupported},
		{"an empty Host (§4.2.1 item 2)", request(get, "Host:", upgrade, conn, key, version), http.StatusBadRequest},
		{"no Upgrade (§4.2.1 item 3)", request(get, host, conn, key, version), http.StatusBadRequest},
		{"Upgrade: h2c (§4.2.1 item 3)", request(get, host, "Upgrade: h2c", conn, key, version), http.StatusBadRequest},
		{"no Connection (§4.2.1 item 4)", request(get, host, upgrade, key, version), http.StatusBadRequest},
		{"Connection: keep-alive (§4.2.1 item 4)", request(get, host, upgrade, "Connection: keep-alive", key, version), http.StatusBadRequest},
		{"no key (§4.2.1 item 5)", request(get, host, upgrade, conn, version), http.StatusBadRequest},
		{"a key of 18 bytes (§4.2.1 item 5)", request(get, host, upgrade, conn, "Sec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAAAA", version), http.StatusBadRequest},
		{"no version (§4.2.1 item 6)", request(get, host, upgrade, conn, key), http.StatusBadRequest},
		{"an empty version (§4.2.1 item 6)", request(get, host, upgrade, conn, key, "Sec-WebSocket-Version:"), http.StatusBadRequest},
		{"version 8 (§4.2.2 item 4)", request(get, host, upgrade, conn, key, v8), http.StatusUpgradeRequired},
		{"version 13 twice (§11.3.5)", request(get, host, upgrade, conn, key, version, version), http.StatusBadRequest},
		{"version 13, then 8 (§11.3.5)", request(get, host, upgrade, conn, key, version, v8), http.StatusBadRequest},
		{"version 8, no Upgrade", request(get, host, v8, conn, key), http.StatusBadRequest},
		{"version 8, no Connection", request(get, host, v8, upgrade, key), http.StatusBadRequest},
		{"version 8, then a key of 18 bytes", request(get, host, upgrade, conn, v8, "Sec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAAAA"), http.StatusBadRequest},
		{"version 8, then an empty Host", request(get, v8, "Host:", upgrade, conn, key), http.StatusBadRequest},
		{"version 8, with content", request(get, host, upgrade, conn, key, v8, "Content-Length: 3") + "abc", http.StatusBadRequest},
	}
	for _, viaHTTP := range []bool{false, true} {
		var origins, auths atomic.Int32
		s, err := NewServer(Options{
			Router: testRouter(),
			Logger: slog.New(slog.DiscardHandler),
			CheckOrigin: func(*http.Request) bool {
				origins.Add(1)
				return true
			},
			Authenticate: func(*http.Request) (any, error) {
				auths.Add(1)
				return nil, &HTTPError{Status: http.StatusUnauthorized, Message: "no"}
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		addr := startServer(t, s, viaHTTP)
		for _, tc := range cases {
			origins.Store(0)
			auths.Store(0)
			resp := rawRequest(t, addr, tc.req)
			if resp.StatusCode != tc.want {
				t.Errorf("viaHTTP=%v, %s: status %d, want %d", viaHTTP, tc.name, resp.StatusCode, tc.want)
			}
			hooks := int32(0)
			if tc.want == http.StatusUnauthorized {
				hooks = 1
			}
			if o, a := origins.Load(), auths.Load(); o != hooks || a != hooks {
				t.Errorf("viaHTTP=%v, %s: CheckOrigin ran %d times, Authenticate %d, want %d", viaHTTP, tc.name, o, a, hooks)
			}
			if v := resp.Header.Values("Sec-Websocket-Version"); (tc.want == http.StatusUpgradeRequired) != slices.Equal(v, []string{"13"}) {
				t.Errorf("viaHTTP=%v, %s: %d with Sec-WebSocket-Version %q (§4.2.2 item 4: 426 names 13)", viaHTTP, tc.name, resp.StatusCode, v)
			}
			// RFC 9110 §15.5.6: "The origin server MUST generate an Allow
			// header field in a 405 response"; no other answer has one.
			if a := resp.Header.Values("Allow"); (tc.want == http.StatusMethodNotAllowed) != slices.Equal(a, []string{"GET"}) {
				t.Errorf("viaHTTP=%v, %s: %d with Allow %q (RFC 9110 §15.5.6: 405 names GET)", viaHTTP, tc.name, resp.StatusCode, a)
			}
		}
	}
}

// rawRequest writes req to addr and reads the answer's status and headers.
func rawRequest(t *testing.T, addr, req string) *http.Response {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(hangBound))
	if _, err := nc.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
	if err != nil {
		t.Fatalf("answer to %q: %v", req, err)
	}
	resp.Body.Close()
	return resp
}

// Frames that arrive in the same read as the upgrade request are the
// connection's first frames, under Serve as under ServeHTTP (which hands
// net/http's buffered bytes to the engine). RFC 6455 §4.1 has a client
// wait for the 101 before it sends, but TCP may still deliver a hasty
// client's first frame with its request, and bytes dropped there put the
// reader in the middle of the stream: Serve's upgrade read them into
// gobwas/ws's buffer and lost them, and the echo never came.
func TestFramesWithTheUpgradeRequest(t *testing.T) {
	for _, viaHTTP := range []bool{false, true} {
		s, err := NewServer(Options{Router: NewRouter(), Echo: true, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		addr := startServer(t, s, viaHTTP)
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(hangBound))
		var b bytes.Buffer
		b.WriteString("GET /ws HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
			"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
		for _, msg := range []string{"first", "second"} {
			f := ws.MaskFrame(ws.NewTextFrame([]byte(msg)))
			if err := ws.WriteFrame(&b, f); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := nc.Write(b.Bytes()); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(nc)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("viaHTTP=%v: upgrade answered %v, %v", viaHTTP, resp, err)
		}
		for _, want := range []string{"first", "second"} {
			f, err := ws.ReadFrame(br)
			if err != nil {
				t.Fatalf("viaHTTP=%v: waiting for the echo of %q: %v", viaHTTP, want, err)
			}
			if f.Header.OpCode != ws.OpText || string(f.Payload) != want {
				t.Fatalf("viaHTTP=%v: got %v %q, want the echo of %q", viaHTTP, f.Header.OpCode, f.Payload, want)
			}
		}
	}
}

// checkAnswer reads a 101's status line as RFC 9112 §4 and net/http do.
// gobwas/ws's Dialer reads a digit as any byte from '0' to '?', and a
// number as any count of them, so it took "HTTP/1.< 101" (minor version
// 12) and "HTTP/1.1 0:1" (status 101), which net/http refuses (fuzz:
// client/FuzzUpgradeAnswer/a973faf846cfb6c0). Dial then connected.
func TestCheckAnswerStatusLine(t *testing.T) {
	const headers = "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
	for _, tc := range []struct {
		status string
		ok     bool
	}{
		{"HTTP/1.1 101 Switching Protocols", true},
		{"HTTP/1.1 101 ", true},
		{"HTTP/1.1 101", true}, // net/http takes it, reason and all left out
		{"HTTP/1.2 101 Switching Protocols", true},
		{"HTTP/1.< 101 ", false},
		{"HTTP/1.1 0:1 Switching Protocols", false},
		{"HTTP/1.10 101 Switching Protocols", false},
		{"HTTP/01.1 101 Switching Protocols", false},
		{"HTTP/1.1 0101 Switching Protocols", false},
		{"HTTP/1.1  101 Switching Protocols", false},
	} {
		err := checkAnswer([]byte(tc.status + headers))
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, errMalformedStatusLine)) {
			t.Errorf("%q: %v, want ok %v", tc.status, err, tc.ok)
		}
	}
}

// A WebTransport server checks that an HTTP/3 request is an extended
// CONNECT for WebTransport before CheckOrigin and Authenticate see it, as
// ServeHTTP checks a WebSocket upgrade (checkRequest): a GET got the
// hooks' refusal (here Authenticate's 401) where, with hooks that passed,
// webtransport-go answered it 400. A real WebTransport Dial is the
// control: the hooks run, and it is refused with their status.
func TestWebTransportChecksConnectBeforeHooks(t *testing.T) {
	var origins, auths atomic.Int32
	e := newCarrierEnv(t, Options{
		CheckOrigin: func(*http.Request) bool { origins.Add(1); return true },
		Authenticate: func(*http.Request) (any, error) {
			auths.Add(1)
			return nil, &HTTPError{Status: http.StatusUnauthorized, Message: "no"}
		},
	})
	url := e.urls[CarrierWebTransport]
	rt := &http3.Transport{TLSClientConfig: e.cert.ClientTLSConfig()}
	defer rt.Close()
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		ctx, cancel := context.WithTimeout(context.Background(), hangBound)
		req, err := http.NewRequestWithContext(ctx, method, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		rsp, err := rt.RoundTrip(req)
		cancel()
		if err != nil {
			t.Fatalf("%s over HTTP/3: %v", method, err)
		}
		rsp.Body.Close()
		if rsp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s over HTTP/3: status %d, want 400", method, rsp.StatusCode)
		}
	}
	if n, m := origins.Load(), auths.Load(); n != 0 || m != 0 {
		t.Errorf("CheckOrigin ran %d times and Authenticate %d for requests that are no CONNECT, want 0", n, m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()
	c, err := Dial(ctx, url, ClientOptions{TLSConfig: e.cert.ClientTLSConfig(), Reconnect: Reconnect{Disabled: true}})
	if err == nil {
		c.Close()
	}
	if he, ok := errors.AsType[*HTTPError](err); !ok || he.Status != http.StatusUnauthorized {
		t.Errorf("a WebTransport Dial: %v, want Authenticate's 401", err)
	}
	if origins.Load() == 0 || auths.Load() == 0 {
		t.Error("the hooks did not run for a WebTransport CONNECT")
	}
}
