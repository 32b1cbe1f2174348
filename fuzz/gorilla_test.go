package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"
	"github.com/hotpath-go/hotpath/wsframe"
)

// memConn is a net.Conn whose reads return fixed input and whose writes are
// kept: what a peer library reads from and sends back on one connection.
type memConn struct {
	in  []byte
	out bytes.Buffer
}

func (c *memConn) Read(p []byte) (int, error) {
	if len(c.in) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.in)
	c.in = c.in[n:]
	return n, nil
}

func (c *memConn) Write(p []byte) (int, error)      { return c.out.Write(p) }
func (c *memConn) Close() error                     { return nil }
func (c *memConn) LocalAddr() net.Addr              { return memAddr{} }
func (c *memConn) RemoteAddr() net.Addr             { return memAddr{} }
func (c *memConn) SetDeadline(time.Time) error      { return nil }
func (c *memConn) SetReadDeadline(time.Time) error  { return nil }
func (c *memConn) SetWriteDeadline(time.Time) error { return nil }

type memAddr struct{}

func (memAddr) Network() string { return "mem" }
func (memAddr) String() string  { return "mem" }

// hijacker is the http.ResponseWriter gorilla's Upgrader needs: it hands
// over the memConn.
type hijacker struct {
	conn   *memConn
	header http.Header
}

func (h *hijacker) Header() http.Header         { return h.header }
func (h *hijacker) Write(p []byte) (int, error) { return len(p), nil }
func (h *hijacker) WriteHeader(int)             {}
func (h *hijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return h.conn, bufio.NewReadWriter(bufio.NewReader(h.conn), bufio.NewWriter(h.conn)), nil
}

// upgradeRequest is a valid RFC 6455 opening handshake (the sample nonce of
// §1.3), shared by every run: Upgrade only reads it.
var upgradeRequest = &http.Request{
	Method: http.MethodGet,
	URL:    &url.URL{Path: "/"},
	Host:   "fuzz",
	Header: http.Header{
		"Connection":            {"Upgrade"},
		"Upgrade":               {"websocket"},
		"Sec-Websocket-Version": {"13"},
		"Sec-Websocket-Key":     {"dGhlIHNhbXBsZSBub25jZQ=="},
	},
}

// gorillaUpgrader is gorilla in its most conformant server configuration:
// no compression (so RSV1 is a protocol error, as it is for wsframe
// without extensions).
var gorillaUpgrader = websocket.Upgrader{
	CheckOrigin:       func(*http.Request) bool { return true },
	EnableCompression: false,
}

// decodeGorilla reads in as a gorilla/websocket server connection with the
// given message limit. gorilla does not validate the UTF-8 of text
// messages (its own Autobahn server checks it in the application), so the
// harness does, as the bytes arrive, failing with 1007 as wsframe does.
func decodeGorilla(t *testing.T, in []byte, limit int64) outcome {
	conn := &memConn{in: in}
	c, err := gorillaUpgrader.Upgrade(&hijacker{conn: conn, header: http.Header{}}, upgradeRequest, nil)
	if err != nil {
		t.Fatalf("gorilla upgrade: %v", err)
	}
	conn.out.Reset()
	c.SetReadLimit(limit)
	var o outcome
	c.SetPingHandler(func(s string) error {
		o.events = append(o.events, event{op: wsframe.OpPing, payload: s})
		return nil
	})
	c.SetPongHandler(func(s string) error {
		o.events = append(o.events, event{op: wsframe.OpPong, payload: s})
		return nil
	})
	c.SetCloseHandler(func(code int, text string) error {
		o.events = append(o.events, event{op: wsframe.OpClose, code: wsframe.CloseCode(code), payload: text})
		return nil
	})
	var chunk [512]byte
	for {
		mt, r, err := c.NextReader()
		if err != nil {
			gorillaEnd(t, &o, conn, err)
			return o
		}
		var data []byte
		for {
			n, err := r.Read(chunk[:])
			data = append(data, chunk[:n]...)
			if mt == websocket.TextMessage && !completable(data) ||
				err == io.EOF && mt == websocket.TextMessage && !utf8.Valid(data) {
				o.end, o.code, o.err = failed, wsframe.CloseInvalidPayload, errors.New("harness: invalid UTF-8 in text")
				return o
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				gorillaEnd(t, &o, conn, err)
				return o
			}
		}
		o.events = append(o.events, event{op: wsframe.Opcode(mt), payload: string(data)})
	}
}

// gorillaEnd classifies the error that ended a gorilla read: a close frame
// gorilla wrote says it failed the connection and with which code; a
// CloseError is the peer's close; ErrReadLimit without a close frame is a
// length gorilla refuses silently; the rest is the input running out.
func gorillaEnd(t *testing.T, o *outcome, conn *memConn, err error) {
	var ce *websocket.CloseError
	switch sent := conn.out.Bytes(); {
	case len(sent) >= 4 && sent[0] == 0x88:
		o.end, o.code, o.err = failed, wsframe.CloseCode(binary.BigEndian.Uint16(sent[2:4])), err
	case errors.As(err, &ce) && ce.Code != websocket.CloseAbnormalClosure:
		o.end = closed
	case errors.Is(err, websocket.ErrReadLimit):
		o.end, o.err = failed, err
	case ce != nil, errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		// gorilla reports the end of its input as a CloseError with
		// 1006, the code for "no close frame".
		o.end = ranOut
	default:
		t.Fatalf("gorilla: unexpected error %v, wrote % x", err, sent)
	}
}

// gorillaLimits are the message limits the fuzzer picks from.
var gorillaLimits = []int64{1, 10, 125, 126, 1000, 65535, 65536, 1 << 20}

// FuzzFramesGorilla: wsframe's Decoder (server role, no extensions) and a
// gorilla/websocket server connection, given the same bytes and the same
// message limit, deliver the same messages and control frames and end the
// same way, but for the differences README.md lists (rules G1-G6 below).
func FuzzFramesGorilla(f *testing.F) {
	for _, s := range frameSeeds(true) {
		f.Add(s.in, s.mode)
	}
	f.Fuzz(func(t *testing.T, in []byte, mode byte) {
		if mode&1 != 0 {
			in = structured(in, true)
		}
		limit := gorillaLimits[int(mode>>1)%len(gorillaLimits)]
		cfg := wsframe.Config{Role: wsframe.Server, MaxMessageSize: limit, MaxFragments: 1 << 30}
		o := decodeOurs(t, cfg, bytes.Clone(in))
		p := decodeGorilla(t, bytes.Clone(in), limit)
		checkGorilla(t, in, o, p)
	})
}

func checkGorilla(t *testing.T, in []byte, o ours, p outcome) {
	t.Helper()
	switch {
	case o.end == failed && errors.Is(o.err, wsframe.ErrNonMinimalLength):
		// G1: gorilla accepts a length in a longer encoding than needed.
		// It delivers what wsframe did, then goes on reading.
		if !prefixOf(o.events, p.events) {
			diff(t, "gorilla (G1)", in, o, p)
		}
	case o.end == failed && errors.Is(o.err, wsframe.ErrInvalidClosePayload):
		// G2: gorilla reads a one-byte close body as a close without status.
		want := append(o.events, event{op: wsframe.OpClose, code: wsframe.CloseNoStatus})
		if !sameEvents(want, p.events) || p.end != closed {
			diff(t, "gorilla (G2)", in, o, p)
		}
	case o.end == closed && o.events[len(o.events)-1].code == wsframe.CloseBadGateway:
		// G3: gorilla refuses close code 1014 (Bad Gateway, registered with
		// IANA after RFC 6455) with 1002.
		if !sameEvents(o.events[:len(o.events)-1], p.events) || p.end != failed || p.code != wsframe.CloseProtocolError {
			diff(t, "gorilla (G3)", in, o, p)
		}
	case o.end == failed && errors.Is(o.err, wsframe.ErrInvalidUTF8) && o.tailOpcode() == wsframe.OpClose:
		// G4: gorilla fails a close reason that is not UTF-8 with 1002,
		// wsframe with 1007 (RFC 6455 §8.1).
		if !sameEvents(o.events, p.events) || p.end != failed || p.code != wsframe.CloseProtocolError {
			diff(t, "gorilla (G4)", in, o, p)
		}
	case o.end == failed && errors.Is(o.err, wsframe.ErrLengthMSB):
		// G5: gorilla refuses a 64-bit length with its top bit set with
		// ErrReadLimit and no close frame, unless the frame's first two
		// bytes broke a rule already (1002).
		if !sameEvents(o.events, p.events) || p.end != failed || p.code != 0 && p.code != wsframe.CloseProtocolError {
			diff(t, "gorilla (G5)", in, o, p)
		}
	case o.headerIncomplete():
		// G6: gorilla checks a header's first two bytes, and the top bit of
		// a 64-bit length, as soon as they arrive; wsframe waits for the
		// whole header (at most 14 bytes). When the input ends inside a
		// header, gorilla may have failed already.
		want := outcome{events: o.events, end: ranOut}
		switch {
		case o.firstTwoBytesFail():
			want.end, want.code = failed, wsframe.CloseProtocolError
		case len(o.tail) >= 10 && o.tail[1]&0x7F == 127 && o.tail[2]&0x80 != 0:
			want.end = failed
		}
		if !equalOutcomes(want, p) {
			diff(t, "gorilla (G6)", in, o, p)
		}
	default:
		if !equalOutcomes(o.outcome, p) {
			diff(t, "gorilla", in, o, p)
		}
	}
}
