package client

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"github.com/gobwas/ws"
	"github.com/hotpath-go/hotpath/compat"
	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/wsframe"
)

// acceptMark in an input stands for the Sec-WebSocket-Accept value of the
// client's key, which the fuzzer cannot know.
const acceptMark = "{ACCEPT}"

// answerServer is one listener per fuzz process for FuzzUpgradeAnswer.
var answerServer = sync.OnceValue(func() net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	return ln
})

// answerUpgrade plays a server that answers the client's upgrade request
// with the input (acceptMark replaced), then a server Capabilities
// packet. It ends its side of the connection if end is set, else it
// answers the client's close frame; it reads what the client sends until
// the client closes. It returns the key the client sent.
func answerUpgrade(ln net.Listener, answer []byte, end bool) (key string, err error) {
	c, err := ln.Accept()
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil {
		return "", err
	}
	key = req.Header.Get("Sec-Websocket-Key")
	caps := wire.Append(nil, &wire.Packet{Kind: dispatch.KindCapabilities, Count: 1, Payload: wire.AppendPair(nil, "maxMessage", "4096")})
	out := bytes.ReplaceAll(answer, []byte(acceptMark), []byte(acceptOf(key)))
	out = wsframe.AppendFrame(out, wsframe.OpBinary, caps, wsframe.Fin)
	c.Write(out)
	if end {
		c.(*net.TCPConn).CloseWrite()
		io.Copy(io.Discard, c)
		return key, nil
	}
	for { // answers the client's close, which Close otherwise waits for
		f, err := ws.ReadFrame(c)
		if err != nil {
			return key, nil
		}
		if f.Header.OpCode == ws.OpClose {
			c.Write(wsframe.AppendCloseFrame(nil, wsframe.CloseNormal, ""))
			io.Copy(io.Discard, c)
			return key, nil
		}
	}
}

// served is what answerUpgrade did with one connection.
type served struct {
	key string // the key the client sent
	err error
}

// dialAnswered dials the fake server on ln, which answerUpgrade serves
// with answer (and end), and returns once the fake server has ended the
// connection: what it did, whether Dial returned only after its context
// (10 s, long enough for a loaded machine; an input ends in milliseconds)
// ended, and Dial's error. t fails if the connection lasts 20 s.
func dialAnswered(t *testing.T, ln net.Listener, answer []byte, end bool) (s served, late bool, err error) {
	t.Helper()
	done := make(chan served, 1)
	go func() {
		key, err := answerUpgrade(ln, answer, end)
		done <- served{key, err}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := compat.Dial(ctx, "ws://"+ln.Addr().String()+"/ws", compat.ClientOptions{
		Reconnect:   compat.Reconnect{Disabled: true},
		IdleTimeout: -1,
		Logger:      slog.New(slog.DiscardHandler),
	})
	late = ctx.Err() != nil
	if err == nil {
		c.Close()
	}
	select {
	case s = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the connection never ended")
	}
	return s, late, err
}

func acceptOf(key string) string {
	sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	return base64.StdEncoding.EncodeToString(sum[:])
}

// validAnswer reports whether answer, as net/http reads it, is one RFC
// 6455 §4.1 lets a client take for its request with key, which offered
// the subprotocol hotpath.v1 and no extension: status 101, Upgrade
// "websocket" in any case on every line, a Connection with the token
// "upgrade", the Sec-WebSocket-Accept of key, the subprotocol once
// (compat requires it; §11.3.4 allows it once), and no extension ("the
// client MUST _Fail the WebSocket Connection_" for an extension "not
// present in the client's handshake").
func validAnswer(answer []byte, key string) error {
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(answer)), nil)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		return errors.New("status not 101")
	}
	// RFC 6455 §4.1 item 2: the Upgrade value must be "an ASCII
	// case-insensitive match for the value "websocket"". §11.3 has a
	// server send the field once; a client that takes it twice, each line
	// right in any case, is no worse for it (gobwas/ws's Dialer checks
	// each line alone). Sec-WebSocket-Accept and -Protocol are held to one
	// line below.
	upgrades := resp.Header.Values("Upgrade")
	if len(upgrades) == 0 {
		return errors.New("no Upgrade: websocket")
	}
	for _, v := range upgrades {
		if !strings.EqualFold(strings.TrimSpace(v), "websocket") {
			return errors.New("no Upgrade: websocket")
		}
	}
	upgrade := false
	for _, v := range resp.Header.Values("Connection") {
		for t := range strings.SplitSeq(v, ",") {
			upgrade = upgrade || strings.EqualFold(strings.TrimSpace(t), "upgrade")
		}
	}
	if !upgrade {
		return errors.New("no Connection: upgrade")
	}
	// RFC 6455 §11.3.3: Sec-WebSocket-Accept "MUST NOT appear more than
	// once in an HTTP response" (b32ea3e).
	if v := resp.Header.Values("Sec-Websocket-Accept"); len(v) != 1 || strings.TrimSpace(v[0]) != acceptOf(key) {
		return errors.New("wrong Sec-WebSocket-Accept, or more than one")
	}
	// RFC 6455 §11.3.4: the subprotocol "MUST NOT appear more than once
	// in an HTTP response" (C1, fixed).
	if v := resp.Header.Values("Sec-Websocket-Protocol"); len(v) != 1 || strings.TrimSpace(v[0]) != compat.Subprotocol {
		return errors.New("wrong subprotocol, or more than one")
	}
	for _, v := range resp.Header.Values("Sec-Websocket-Extensions") {
		if strings.Trim(v, " \t,") != "" {
			return errors.New("an extension the client did not offer")
		}
	}
	return nil
}

// FuzzUpgradeAnswer feeds compat's Go client any bytes as the server's
// answer to its WebSocket upgrade (acceptMark stands for the right
// Sec-WebSocket-Accept), followed by a Capabilities packet: Dial must
// return before its context ends, and may succeed only for an answer
// validAnswer takes. A refusal with a status other than 101 that net/http
// reads is an *HTTPError with that status, whatever its HTTP version and
// the spaces before its code (compat's refusalLine hands gobwas/ws's
// Dialer such a line as it reads it).
func FuzzUpgradeAnswer(f *testing.F) {
	valid := "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Accept: " + acceptMark + "\r\nSec-WebSocket-Protocol: " + compat.Subprotocol + "\r\n\r\n"
	f.Add([]byte(valid))
	f.Add([]byte(strings.Replace(valid, acceptMark, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", 1)))
	f.Add([]byte(strings.Replace(valid, "\r\n\r\n", "\r\nSec-WebSocket-Extensions: permessage-deflate\r\n\r\n", 1)))
	f.Add([]byte(strings.Replace(valid, "Sec-WebSocket-Protocol: ", "Sec-WebSocket-Protocol: x\r\nSec-WebSocket-Protocol: ", 1)))
	f.Add([]byte(strings.Replace(valid, "Sec-WebSocket-Accept: ", "Sec-WebSocket-Accept: x\r\nSec-WebSocket-Accept: ", 1)))
	f.Add([]byte(strings.Replace(valid, "\r\n\r\n", "\r\nSec-WebSocket-Accept: "+acceptMark+"\r\n\r\n", 1)))
	f.Add([]byte(strings.ReplaceAll(valid, "\r\n", "\n")))
	f.Add([]byte(strings.Replace(valid, "\r\n\r\n", "\r\nSec-WebSocket-Protocol: "+compat.Subprotocol+"\r\n\r\n", 1)))
	f.Add([]byte(strings.Replace(valid, "Sec-WebSocket-Protocol: ", "Sec-WebSocket-Protocol : ", 1)))
	f.Add([]byte(strings.Replace(valid, "\r\n\r\n", "\r\n X-Folded: x\r\n\r\n", 1)))
	f.Add([]byte("HTTP/1.1 403 Forbidden\r\nContent-Length: 4\r\n\r\nnope"))
	f.Add([]byte("HTTP/1.1 403\r\nConnection: close\r\nContent-Length: 4\r\n\r\nnope"))
	f.Add([]byte("HTTP/1.0 403 Forbidden\r\nContent-Length: 4\r\n\r\nnope"))
	f.Add([]byte("HTTP/1.1  503 Service Unavailable\r\nRetry-After: 5\r\n\r\nbusy"))
	f.Add([]byte(strings.Replace(valid, "HTTP/1.1", "HTTP/1.0", 1)))
	f.Add([]byte(strings.Replace(valid, "101 Switching Protocols", "101", 1)))
	f.Add([]byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"))
	ln := answerServer()
	f.Fuzz(func(t *testing.T, answer []byte) {
		s, late, err := dialAnswered(t, ln, answer, true)
		if late {
			t.Fatalf("Dial returned after its context ended: %v", err)
		}
		if s.err != nil {
			t.Fatalf("fake server: %v", s.err)
		}
		sent := bytes.ReplaceAll(answer, []byte(acceptMark), []byte(acceptOf(s.key)))
		if err == nil {
			if why := validAnswer(sent, s.key); why != nil {
				t.Fatalf("Dial took an answer RFC 6455 §4.1 fails (%v): %q", why, sent)
			}
			return
		}
		resp, rerr := http.ReadResponse(bufio.NewReader(bytes.NewReader(sent)), nil)
		var he *compat.HTTPError
		switch {
		case errors.As(err, &he):
			if rerr == nil && resp.StatusCode != he.Status {
				t.Fatalf("answer with status %d refused as %d: %q", resp.StatusCode, he.Status, sent)
			}
		case rerr == nil && resp.StatusCode != http.StatusSwitchingProtocols:
			t.Fatalf("answer with status %d failed Dial as %v, not as an *HTTPError: %q", resp.StatusCode, err, sent)
		}
	})
}

// takenAnswer builds from the fuzzer's choices a 101 answer that RFC 6455
// §4.1 lets the client take (acceptMark stands for the accept value), in
// any of the ways a server may write it: the header names in any case
// (RFC 9110 §5.1), the fields in any order with other fields among them,
// whitespace around the values (§5.5), lines ending in CRLF or a bare LF
// (RFC 9112 §2.2), any reason phrase or none, "websocket" in any case
// (§4.1 item 2), a Connection that lists other tokens around "Upgrade",
// in any case, in one line or two (item 3; RFC 9110 §5.3), and Upgrade
// repeated, each line in any case (validAnswer takes it).
func takenAnswer(choices []byte) []byte {
	pick := func(n int) int {
		if len(choices) == 0 {
			return 0
		}
		c := int(choices[0]) % n
		choices = choices[1:]
		return c
	}
	anyCase := func(s string) string {
		b := []byte(s)
		for i, c := range b {
			if pick(2) == 1 {
				b[i] = byte(unicode.ToUpper(rune(c)))
			} else {
				b[i] = byte(unicode.ToLower(rune(c)))
			}
		}
		return string(b)
	}
	ows := []string{"", " ", "\t", "  ", " \t"}
	eol := []string{"\r\n", "\n"}[pick(2)]
	field := func(name, value string) string {
		return anyCase(name) + ":" + ows[pick(len(ows))] + value + ows[pick(len(ows))] + eol
	}
	// Not "close": net/http drops a Connection that holds it, and a 101
	// that asks for its connection to close makes little sense.
	others := []string{"keep-alive", "x-hop", "TE", "Keep-Alive"}
	conn := []string{anyCase("upgrade")}
	for range pick(3) {
		conn = slices.Insert(conn, pick(len(conn)+1), others[pick(len(others))])
	}
	var lines []string
	if pick(3) == 0 && len(conn) > 1 { // in two lines
		cut := 1 + pick(len(conn)-1)
		lines = append(lines, field("Connection", strings.Join(conn[:cut], ","+ows[pick(len(ows))])),
			field("Connection", strings.Join(conn[cut:], ","+ows[pick(len(ows))])))
	} else {
		lines = append(lines, field("Connection", strings.Join(conn, ","+ows[pick(len(ows))])))
	}
	for range 1 + pick(2) {
		lines = append(lines, field("Upgrade", anyCase("websocket")))
	}
	lines = append(lines,
		field("Sec-WebSocket-Accept", acceptMark),
		field("Sec-WebSocket-Protocol", compat.Subprotocol))
	extras := []string{"Server: hotpath", "Date: Mon, 07 Dec 2026 08:00:00 GMT", "Cache-Control: no-store", "Set-Cookie: a=b; Path=/", "X-Empty:", "Vary: Origin, Accept-Encoding"}
	for range pick(4) {
		name, value, _ := strings.Cut(extras[pick(len(extras))], ":")
		lines = append(lines, field(name, strings.TrimSpace(value)))
	}
	for i := len(lines) - 1; i > 0; i-- { // any order
		j := pick(i + 1)
		lines[i], lines[j] = lines[j], lines[i]
	}
	// RFC 9112 §4: status-line = HTTP-version SP status-code SP
	// [reason-phrase]. net/http and browsers also take "HTTP/1.1 101"
	// without the second SP, and so does the client (compat's
	// fixStatusLine; gobwas/ws's Dialer refused it).
	status := []string{"HTTP/1.1 101 Switching Protocols", "HTTP/1.1 101 ", "HTTP/1.1 101 OK", "HTTP/1.1 101 switching protocols", "HTTP/1.1 101"}[pick(5)]
	return []byte(status + eol + strings.Join(lines, "") + eol)
}

// FuzzUpgradeAnswerTaken is FuzzUpgradeAnswer's other direction: the
// client must take every answer takenAnswer builds from the fuzzer's
// bytes, an answer validAnswer (net/http's reading) also takes. gobwas/ws's
// Dialer refused a Connection that listed other tokens besides Upgrade,
// which §4.1 item 3 allows. The fake server keeps the connection open
// until the client closes it: Dial fails at random when the connection
// ends right after the capabilities (see fuzz/README.md).
func FuzzUpgradeAnswerTaken(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1})
	f.Add([]byte("connection: keep-alive, upgrade"))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 2, 1, 0, 1, 0, 0, 0, 2, 1, 1, 1})
	// Every choice 4: a status line without a reason phrase or the space
	// before it, and CRLF.
	f.Add(bytes.Repeat([]byte{4}, 512))
	ln := answerServer()
	f.Fuzz(func(t *testing.T, choices []byte) {
		answer := takenAnswer(choices)
		s, _, err := dialAnswered(t, ln, answer, false)
		sent := bytes.ReplaceAll(answer, []byte(acceptMark), []byte(acceptOf(s.key)))
		if why := validAnswer(sent, s.key); why != nil {
			t.Fatalf("takenAnswer built an answer net/http's reading refuses (%v): %q", why, sent)
		}
		if err != nil {
			t.Fatalf("Dial refused an answer RFC 6455 §4.1 lets it take: %v: %q", err, sent)
		}
	})
}
