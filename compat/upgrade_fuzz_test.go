package compat

import (
	"bufio"
	"bytes"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// requestLine is a request line both paths read alike, whatever its
// method (both answer 405 to any but GET, after 505 for the version) and
// version (checkHeaders reads it as net/http does); gobwas/ws's own
// reading of other targets (absolute URIs) differs from net/http's.
var requestLine = regexp.MustCompile(`^[A-Z]+ /[!-~]* [!-~]*\r?\n`)

// FuzzUpgradePaths is a differential of the two ways a server takes a
// WebSocket upgrade: Serve (gobwas/ws's Upgrader on the raw connection,
// with checkHeaders) and ServeHTTP under net/http (gobwas/ws's
// HTTPUpgrader). For a request with a plain request line, neither of
// them may switch protocols where the other refuses, and when both do
// they answer with the same accept value, subprotocol and extensions.
// Serve may not switch for a request with a folded line, which ServeHTTP
// is not compared on (folded); neither path may switch for one with Host,
// Sec-WebSocket-Key or -Version twice (repeatedOnce), or with content
// (hasContent).
//
// A second server, whose Authenticate refuses every request with 401,
// compares the refusals: for every request ServeHTTP's handler sees
// (net/http answers the ones it cannot parse itself), both paths answer
// with the same status, so the hooks run on neither or on both, and 400
// and 426 come from the same rule (checkRequest, checkHeaders), with the
// same Sec-WebSocket-Version (426) and Allow (405) headers.
func FuzzUpgradePaths(f *testing.F) {
	valid := "GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n" +
		"Sec-WebSocket-Protocol: " + Subprotocol + "\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
	f.Add([]byte(valid))
	for _, r := range [][2]string{
		{"Upgrade: websocket\r\n", "Upgrade: websocket\r\nUpgrade: h2c\r\n"},
		{"Upgrade: websocket\r\n", "Upgrade: h2c\r\nUpgrade: websocket\r\n"},
		{"Upgrade: websocket\r\n", "Upgrade: h2c, WebSocket\r\n"},
		{"Connection: Upgrade\r\n", "Connection: keep-alive\r\nConnection: close\r\n"},
		{"Connection: Upgrade\r\n", "Connection: keep-alive, Upgrade\r\n"},
		{"Connection: Upgrade\r\n", "Connection: keep-alive\r\nConnection: Upgrade\r\n"},
		{"Connection: Upgrade\r\n", "Connection: Upgrade\r\n Upgrade\r\n"},
		{"\r\n\r\n", "\r\nX-A: b\r\n c: d\r\n\r\n"},
		{"Sec-WebSocket-Version: 13\r\n", "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Version: 8\r\n"},
		{"Sec-WebSocket-Version: 13\r\n", "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Version: 13\r\n"},
		{"Sec-WebSocket-Key: ", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Key: "},
		{"Host: a\r\n", "Host: a\r\nHost: a\r\n"},
		{"\r\n\r\n", "\r\nSec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n\r\n"},
		{"\r\n\r\n", "\r\nSec-WebSocket-Extensions: permessage-deflate; x=\r\n\r\n"},
		{"\r\n\r\n", "\r\nSec-WebSocket-Extensions: permessage-deflate\r\nSec-WebSocket-Extensions: permessage-deflate; server_max_window_bits=7\r\n\r\n"},
		{"Sec-WebSocket-Protocol: " + Subprotocol, "Sec-WebSocket-Protocol: x, " + Subprotocol},
		{"Sec-WebSocket-Protocol: " + Subprotocol, "Sec-WebSocket-Protocol: x\r\nSec-WebSocket-Protocol: " + Subprotocol},
		{"Sec-WebSocket-Protocol: " + Subprotocol, `Sec-WebSocket-Protocol: "x", ` + Subprotocol},
		{"Sec-WebSocket-Protocol: " + Subprotocol, "Sec-WebSocket-Protocol: " + Subprotocol + ", a b"},
		{"Host: a\r\n", ""},
		{"\r\n\r\n", "\r\nContent-Length: 3\r\n\r\nabc"},
		{"\r\n\r\n", "\r\nTransfer-Encoding: chunked\r\n\r\n"},
		{"\r\n\r\n", "\r\nContent-Length: 0\r\n\r\n"},
		{"\r\n\r\n", "\r\nContent-Length: 00\r\nContent-Length: 00\r\n\r\n"},
		{"HTTP/1.1\r\n", "HTTP/1.<\r\n"},
		{"HTTP/1.1\r\n", "HTTP/1.0\r\n"},
		{"HTTP/1.1\r\n", "HTTP/1.2\r\n"},
		{"HTTP/1.1\r\n", "HTTP/2.0\r\n"},
		{"GET /ws HTTP/1.1\r\n", "POST /ws HTTP/1.1\r\n"},
		{"GET /ws HTTP/1.1\r\n", "POST /ws HTTP/1.0\r\n"},
		{"Upgrade: websocket\r\n", ""},
		{"Connection: Upgrade\r\n", ""},
		{"Sec-WebSocket-Version: 13\r\n", ""},
		{"Sec-WebSocket-Version: 13\r\n", "Sec-WebSocket-Version: 8\r\n"},
		{"Sec-WebSocket-Version: 13\r\n", "Sec-WebSocket-Version:\r\n"},
		{"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n", "Sec-WebSocket-Version: 8\r\nConnection: Upgrade\r\n"},
		{"Host: a\r\n", "Host:\r\n"},
	} {
		f.Add([]byte(strings.Replace(valid, r[0], r[1], 1)))
	}
	s, err := NewServer(Options{Router: testRouter(), Logger: slog.New(slog.DiscardHandler), CheckOrigin: func(*http.Request) bool { return true }})
	if err != nil {
		f.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	hs := &http.Server{Handler: s, ErrorLog: log.New(io.Discard, "", 0)}
	go hs.Serve(ln)
	f.Cleanup(func() { hs.Close() })
	deny, err := NewServer(Options{Router: testRouter(), Logger: slog.New(slog.DiscardHandler), CheckOrigin: func(*http.Request) bool { return true },
		Authenticate: func(*http.Request) (any, error) {
			return nil, &HTTPError{Status: http.StatusUnauthorized, Message: "refused"}
		}})
	if err != nil {
		f.Fatal(err)
	}
	denyLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	denyHS := &http.Server{ErrorLog: log.New(io.Discard, "", 0), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Handler", "ran") // net/http did not refuse it itself
		deny.ServeHTTP(w, r)
	})}
	go denyHS.Serve(denyLn)
	f.Cleanup(func() { denyHS.Close() })
	f.Fuzz(func(t *testing.T, req []byte) {
		if !requestLine.Match(req) {
			return
		}
		c := &scriptedConn{r: bytes.NewReader(req)}
		_, rawErr := s.upgradeConn(c, nil)
		raw := rawErr == nil && bytes.HasPrefix(c.w.Bytes(), []byte("HTTP/1.1 101 "))
		if folded(req) {
			if raw {
				t.Fatalf("Serve switched protocols for a request with a folded line: %q", req)
			}
			return
		}

		resp, err := sendRequest(t, ln.Addr().String(), req)
		viaHTTP := err == nil && resp.StatusCode == http.StatusSwitchingProtocols
		switch {
		case (raw || viaHTTP) && repeatedOnce(req):
			t.Fatalf("switched protocols (Serve %v, ServeHTTP %v) for a request with a field it may have once twice: %q", raw, viaHTTP, req)
		case (raw || viaHTTP) && hasContent(req):
			t.Fatalf("switched protocols (Serve %v, ServeHTTP %v) for a request with content: %q", raw, viaHTTP, req)
		case raw && !viaHTTP:
			st := 0
			if resp != nil {
				st = resp.StatusCode
			}
			t.Fatalf("Serve switched protocols, ServeHTTP answered %d (%v): %q", st, err, req)
		case viaHTTP && !raw:
			t.Fatalf("ServeHTTP switched protocols, Serve refused (%v): %q", rawErr, req)
		case raw && viaHTTP:
			rawResp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(c.w.Bytes())), nil)
			if err != nil {
				t.Fatalf("Serve's answer %q: %v", c.w.Bytes(), err)
			}
			for _, h := range []string{"Sec-Websocket-Protocol", "Sec-Websocket-Extensions", "Sec-Websocket-Accept"} {
				if a, b := rawResp.Header.Values(h), resp.Header.Values(h); strings.Join(a, "\n") != strings.Join(b, "\n") {
					t.Fatalf("%s: Serve %q, ServeHTTP %q: %q", h, a, b, req)
				}
			}
		}

		c = &scriptedConn{r: bytes.NewReader(req)}
		deny.upgradeConn(c, nil)
		rawResp, rawErr := http.ReadResponse(bufio.NewReader(bytes.NewReader(c.w.Bytes())), nil)
		resp, err = sendRequest(t, denyLn.Addr().String(), req)
		if err != nil || resp.Header.Get("X-Handler") == "" {
			return // net/http's own refusal, or none
		}
		if rawErr != nil {
			t.Fatalf("with Authenticate refusing, ServeHTTP answered %d, Serve %q (%v): %q", resp.StatusCode, c.w.Bytes(), rawErr, req)
		}
		if rawResp.StatusCode != resp.StatusCode {
			t.Fatalf("with Authenticate refusing, Serve answered %d, ServeHTTP %d: %q", rawResp.StatusCode, resp.StatusCode, req)
		}
		for _, h := range []string{"Sec-Websocket-Version", "Allow"} {
			if a, b := rawResp.Header.Values(h), resp.Header.Values(h); !slices.Equal(a, b) {
				t.Fatalf("with Authenticate refusing, %s: Serve %q, ServeHTTP %q: %q", h, a, b, req)
			}
		}
	})
}

// sendRequest writes req to a server on addr and reads its answer.
func sendRequest(t *testing.T, addr string, req []byte) (*http.Response, error) {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	go func() {
		nc.Write(req)
		nc.(*net.TCPConn).CloseWrite()
	}()
	nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	return http.ReadResponse(bufio.NewReader(nc), nil)
}

// headerCounts counts a request's header lines by canonical name, and
// reports whether one is folded onto the line before.
func headerCounts(req []byte) (counts map[string]int, folded bool) {
	counts = map[string]int{}
	first := true
	for line := range bytes.Lines(req) {
		if first {
			first = false
			continue
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			folded = true
			continue
		}
		name, _, _ := bytes.Cut(line, []byte(":"))
		counts[http.CanonicalHeaderKey(string(bytes.TrimSpace(name)))]++
	}
	return counts, folded
}

// folded reports whether a request has a header line folded onto the
// one before (obs-fold). RFC 9112 §5.2 lets a server refuse it with 400
// or replace each fold with spaces: Serve refuses it (checkHeaders), and
// net/http joins it to the line before with one space before ServeHTTP
// runs, so ServeHTTP cannot tell "Connection: keep-alive,\r\n Upgrade"
// from "Connection: keep-alive, Upgrade" and is not compared on it. The
// paths would agree only if Serve joined folds too, which needs a line of
// look-ahead in headReader and checkHeaders, for a form that RFC 9112
// forbids senders to generate and that no browser sends; refusing it is
// the narrower of the two. Repeated lines of a list field (Upgrade,
// Connection, Sec-WebSocket-Protocol, -Extensions) are compared: both
// paths read all their values (fixRequestLine, withTokens).
func folded(req []byte) bool {
	_, folded := headerCounts(req)
	return folded
}

// repeatedOnce reports whether a request has more than one line of a
// field it may have once: Host (RFC 9112 §3.2), Sec-WebSocket-Key (RFC
// 6455 §11.3.1), Sec-WebSocket-Version (§11.3.5). Neither path may switch
// protocols for it.
func repeatedOnce(req []byte) bool {
	counts, _ := headerCounts(req)
	return counts["Host"] > 1 || counts["Sec-Websocket-Key"] > 1 || counts["Sec-Websocket-Version"] > 1
}

// hasContent reports whether a request has a header that frames content
// (RFC 9112 §6): a Transfer-Encoding, or a Content-Length other than 0.
// Both paths refuse it (errRequestContent).
func hasContent(req []byte) bool {
	head, _, _ := bytes.Cut(req, []byte("\n\n"))
	head, _, _ = bytes.Cut(head, []byte("\r\n\r\n"))
	var lengths []string
	for line := range bytes.Lines(head) {
		name, value, _ := bytes.Cut(bytes.TrimRight(line, "\r\n"), []byte(":"))
		switch http.CanonicalHeaderKey(string(bytes.TrimSpace(name))) {
		case "Transfer-Encoding":
			return true
		case "Content-Length":
			lengths = append(lengths, string(bytes.Trim(value, " \t")))
		}
	}
	return !zeroLength(lengths)
}
