package compat

import (
	"bufio"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
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
