package compat

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// dialAnswer dials a fake server on loopback that answers the upgrade
// with head (answerHead).
func dialAnswer(t *testing.T, head func(accept string) string) (*Client, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go answerHead(ln, head)
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()
	return Dial(ctx, "ws://"+ln.Addr().String()+"/ws", ClientOptions{Reconnect: Reconnect{Disabled: true}})
}

// readAnswer reads in through an answerReader, as gobwas/ws's Dialer
// does, and returns what it was handed.
func readAnswer(t *testing.T, in string) string {
	t.Helper()
	got, err := io.ReadAll(newAnswerReader(&scriptedConn{r: bytes.NewReader([]byte(in))}))
	if err != nil {
		t.Fatal(err)
	}
	return string(got)
}

// A refusal reaches OnStatusError as it came: the Connection lines that
// the answerReader rewrites in a 101 for gobwas/ws's Dialer (fixAnswerLine)
// are a refusal's own. They were rewritten in a refusal too: "Connection:
// close" dropped, "keep-alive, Upgrade" made "Upgrade".
func TestAnswerReaderKeepsRefusals(t *testing.T) {
	for _, refusal := range []string{
		"HTTP/1.1 403 Forbidden\r\nConnection: close\r\nContent-Length: 4\r\n\r\nnope",
		"HTTP/1.1 503 Service Unavailable\r\nConnection: keep-alive, Upgrade\r\nconnection: x-hop\r\nRetry-After: 5\r\n\r\nbusy",
		"HTTP/1.1 401 Unauthorized\nConnection:\tUpgrade \nContent-Length: 0\n\n",
		"HTTP/1.1 1010 x\r\nConnection: close\r\n\r\n",
	} {
		if got := readAnswer(t, refusal); got != refusal {
			t.Errorf("refusal %q handed on as %q", refusal, got)
		}
	}
	// A 101's are still rewritten, however its status line is written.
	for _, status := range []string{"HTTP/1.1 101 Switching Protocols\r\n", "HTTP/1.1 101\r\n", "HTTP/1.1 101 \r\n"} {
		got := readAnswer(t, status+"Connection: keep-alive, Upgrade\r\nConnection: close\r\nUpgrade: websocket\r\n\r\n")
		if _, headers, _ := strings.Cut(got, "\n"); headers != "Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n" {
			t.Errorf("101 (%q): headers handed on as %q", status, headers)
		}
	}
}

// A refusal's Connection line followed by a folded line (RFC 9112 §5.2,
// which net/http joins to it) reaches the user with its message and
// Retry-After. The answerReader dropped the Connection line, the folded
// line became the first, and net/http refused the head: Dial's
// *HTTPError had the status text for a message and no Retry-After.
func TestDialRefusalWithConnectionLine(t *testing.T) {
	_, err := dialAnswer(t, func(string) string {
		return "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\n x-more\r\nRetry-After: 7\r\nContent-Length: 4\r\n\r\nbusy"
	})
	var he *HTTPError
	if !errors.As(err, &he) {
		t.Fatalf("Dial = %v, want an *HTTPError", err)
	}
	if he.Status != 503 || he.Message != "busy" || he.RetryAfter != 7*time.Second {
		t.Fatalf("Dial's refusal: %+v, want 503, \"busy\", Retry-After 7s", he)
	}
}

// A status line without a reason phrase and without the space before it
// ("HTTP/1.1 101"), which net/http and browsers take, is taken: gobwas/ws's
// Dialer refused it as malformed (fixStatusLine). A refusal written so is
// an *HTTPError with its status and message, not a malformed answer.
func TestDialStatusLineWithoutReason(t *testing.T) {
	for _, eol := range []string{"\r\n", "\n"} {
		c, err := dialAnswer(t, func(accept string) string {
			return strings.ReplaceAll("HTTP/1.1 101\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Protocol: "+Subprotocol+
				"\r\nSec-WebSocket-Accept: "+accept+"\r\n\r\n", "\r\n", eol)
		})
		if err != nil {
			t.Fatalf("EOL %q: Dial refused a 101 without a reason phrase: %v", eol, err)
		}
		c.Close()
		_, err = dialAnswer(t, func(string) string {
			return strings.ReplaceAll("HTTP/1.1 403\r\nContent-Length: 2\r\n\r\nno", "\r\n", eol)
		})
		var he *HTTPError
		if !errors.As(err, &he) || he.Status != 403 || he.Message != "no" {
			t.Fatalf("EOL %q: Dial = %v, want an *HTTPError 403 \"no\"", eol, err)
		}
	}
	for status, want := range map[string]string{
		"HTTP/1.1 101\r\n":                     "HTTP/1.1 101 \r\n",
		"HTTP/1.1 101\n":                       "HTTP/1.1 101 \n",
		"HTTP/1.1 101 \r\n":                    "HTTP/1.1 101 \r\n",
		"HTTP/1.1 101 Switching Protocols\r\n": "HTTP/1.1 101 Switching Protocols\r\n",
		"HTTP/1.1  101\r\n":                    "HTTP/1.1  101\r\n",
	} {
		if got, _, _ := strings.Cut(readAnswer(t, status+"\r\n"), "\n"); got+"\n" != want {
			t.Errorf("status line %q handed on as %q, want %q", status, got+"\n", want)
		}
	}
}

// A refusal whose status line net/http reads, but gobwas/ws's Dialer did
// not, is an *HTTPError with its status, message and Retry-After
// (refusalLine): the Dialer refused a version below 1.1 before it read the
// status, and read the code between the line's first two spaces only, so
// Dial failed with a plain error and a caller looking for 401, 403 or 503
// missed it. A 101 of HTTP/1.0 is still refused (RFC 6455 §4.1).
func TestDialRefusalStatusLinesNetHTTPReads(t *testing.T) {
	for _, tc := range []struct {
		status string
		code   int
	}{
		{"HTTP/1.0 403 Forbidden", 403},
		{"HTTP/1.0 503", 503},
		{"HTTP/1.1  401 Unauthorized", 401},
		{"HTTP/1.1   503 Service Unavailable", 503},
		{"HTTP/1.0  429 Too Many Requests", 429},
		{"HTTP/2.0 503 Service Unavailable", 503},
		{"HTTP/1.1 +03 x", 3},
	} {
		for _, eol := range []string{"\r\n", "\n"} {
			_, err := dialAnswer(t, func(string) string {
				return strings.ReplaceAll(tc.status+"\r\nRetry-After: 9\r\nContent-Length: 4\r\n\r\nnope", "\r\n", eol)
			})
			var he *HTTPError
			if !errors.As(err, &he) {
				t.Errorf("%q (EOL %q): Dial = %v, want an *HTTPError", tc.status, eol, err)
				continue
			}
			if he.Status != tc.code || he.Message != "nope" || he.RetryAfter != 9*time.Second {
				t.Errorf("%q (EOL %q): Dial's refusal %+v, want %d, \"nope\", Retry-After 9s", tc.status, eol, he, tc.code)
			}
		}
	}
	_, err := dialAnswer(t, func(accept string) string {
		return "HTTP/1.0 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Protocol: " + Subprotocol +
			"\r\nSec-WebSocket-Accept: " + accept + "\r\n\r\n"
	})
	var he *HTTPError
	if err == nil || errors.As(err, &he) {
		t.Errorf("a 101 of HTTP/1.0: Dial = %v, want a refused upgrade, not an *HTTPError", err)
	}
}
