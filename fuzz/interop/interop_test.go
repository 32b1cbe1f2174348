package interop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	coder "github.com/coder/websocket"
	"github.com/gorilla/websocket"

	"github.com/hotpath-go/hotpath/compat"
)

// maxMessage is the largest test message and the servers' limit: past the
// 16-bit length and many reads, small enough to keep the race detector
// quick. Random messages of exactly the limit go compressed too, a few
// bytes longer on the wire than the limit.
const maxMessage = 256 << 10

type echoRequest struct {
	Text string `json:"text"`
}

// newServer serves opts (an echo server, or the RPC router when opts has
// none) over net/http on a loopback port, as `hotpath` does, and returns
// its ws:// URL.
func newServer(t *testing.T, opts compat.Options) string {
	t.Helper()
	if opts.Router == nil {
		r := compat.NewRouter()
		compat.Handle(r, "echo/say", func(ctx context.Context, req echoRequest) (echoRequest, error) { return req, nil })
		opts.Router = r
	}
	opts.Limits.MaxMessageSize = maxMessage
	srv, err := compat.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ws", srv)
	hs := &http.Server{Handler: mux}
	go hs.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		hs.Shutdown(ctx)
		srv.Shutdown(ctx)
	})
	return "ws://" + ln.Addr().String() + "/ws"
}

// payload returns n bytes: JSON-like text (compressible, so the server
// compresses its echo past its 256-byte threshold) or random bytes.
func payload(n int, compressible bool) []byte {
	if compressible {
		return bytes.Repeat([]byte(`{"symbol":"HOT","price":101.25},`), n/32+1)[:n]
	}
	r := rand.New(rand.NewPCG(uint64(n), 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

var sizes = []int{0, 1, 125, 126, 4096, 65535, 65536, maxMessage}

// chunk is the size of the writes that make a fragmented message.
const chunk = 4000

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// checkWire asserts what the taps saw: compressed frames both ways when
// compression was negotiated, none otherwise.
func checkWire(t *testing.T, ts *taps, compressed bool) {
	t.Helper()
	in, out := ts.counts()
	t.Logf("on the wire: client→server %d data frames, %d compressed; server→client %d, %d compressed", out.data, out.compressed, in.data, in.compressed)
	switch {
	case compressed && (in.compressed == 0 || out.compressed == 0):
		t.Errorf("compression negotiated but frames compressed: %d client→server, %d server→client", out.compressed, in.compressed)
	case !compressed && (in.compressed != 0 || out.compressed != 0):
		t.Errorf("no compression negotiated but RSV1 seen: %d client→server, %d server→client", out.compressed, in.compressed)
	}
}

// TestGorillaEcho: gorilla/websocket as a client of the echo server, with
// and without permessage-deflate (gorilla offers it without context
// takeover), text and binary from 0 B to 256 KiB, whole and fragmented.
func TestGorillaEcho(t *testing.T) {
	url := newServer(t, compat.Options{Echo: true, NoDictionary: true, Router: compat.NewRouter()})
	for _, compress := range []bool{false, true} {
		t.Run(fmt.Sprintf("compression=%t", compress), func(t *testing.T) {
			ts := &taps{}
			d := websocket.Dialer{EnableCompression: compress, NetDialContext: ts.dial, WriteBufferSize: 4096}
			c, resp, err := d.DialContext(ctxT(t), url, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if got := resp.Header.Get("Sec-WebSocket-Extensions"); compress != strings.HasPrefix(got, "permessage-deflate") {
				t.Fatalf("extensions answered %q", got)
			}
			c.SetReadLimit(2 * maxMessage)
			for _, n := range sizes {
				for _, typ := range []int{websocket.TextMessage, websocket.BinaryMessage} {
					p := payload(n, typ == websocket.TextMessage)
					// WriteMessage sends one frame; NextWriter with a
					// 4 KiB buffer sends a message of many frames.
					if err := c.WriteMessage(typ, p); err != nil {
						t.Fatal(err)
					}
					gorillaExpect(t, c, typ, p)
					w, err := c.NextWriter(typ)
					if err != nil {
						t.Fatal(err)
					}
					for rest := p; len(rest) > 0; rest = rest[min(chunk, len(rest)):] {
						w.Write(rest[:min(chunk, len(rest))])
					}
					if err := w.Close(); err != nil {
						t.Fatal(err)
					}
					gorillaExpect(t, c, typ, p)
				}
			}
			// Control frames: ping answered by a pong with its data.
			pong := make(chan string, 1)
			c.SetPongHandler(func(s string) error { pong <- s; return nil })
			c.WriteControl(websocket.PingMessage, []byte("are you there"), time.Now().Add(5*time.Second))
			c.WriteMessage(websocket.TextMessage, []byte("after ping"))
			gorillaExpect(t, c, websocket.TextMessage, []byte("after ping"))
			// The pong came before the echo, if at all: a server that
			// ignored the ping fails here, not at go test's timeout.
			select {
			case got := <-pong:
				if got != "are you there" {
					t.Errorf("pong %q", got)
				}
			case <-time.After(10 * time.Second):
				t.Errorf("no pong to the ping")
			}
			gorillaClose(t, c)
			checkWire(t, ts, compress)
		})
	}
}

func gorillaExpect(t *testing.T, c *websocket.Conn, typ int, want []byte) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	gt, got, err := c.ReadMessage()
	if err != nil {
		t.Fatalf("reading the echo of %d bytes: %v", len(want), err)
	}
	if gt != typ || !bytes.Equal(got, want) {
		t.Fatalf("echo of %d bytes (type %d): got %d bytes (type %d)", len(want), typ, len(got), gt)
	}
}

// gorillaClose runs the closing handshake: close 1000 sent, close 1000
// back (RFC 6455 §5.5.1).
func gorillaClose(t *testing.T, c *websocket.Conn) {
	t.Helper()
	c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "bye"), time.Now().Add(5*time.Second))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, _, err := c.ReadMessage()
	if !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
		t.Errorf("after close 1000: %v, want the server's close 1000", err)
	}
}

// TestGorillaDeclined: a server with compression off declines gorilla's
// offer and both ends run plain.
func TestGorillaDeclined(t *testing.T) {
	url := newServer(t, compat.Options{Echo: true, NoDictionary: true, Router: compat.NewRouter(), Compression: compat.Compression{Disabled: true}})
	ts := &taps{}
	d := websocket.Dialer{EnableCompression: true, NetDialContext: ts.dial}
	c, resp, err := d.DialContext(ctxT(t), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := resp.Header.Get("Sec-WebSocket-Extensions"); got != "" {
		t.Fatalf("extensions answered %q by a server with compression off", got)
	}
	p := payload(10000, true)
	c.WriteMessage(websocket.TextMessage, p)
	gorillaExpect(t, c, websocket.TextMessage, p)
	gorillaClose(t, c)
	checkWire(t, ts, false)
}

var coderModes = []struct {
	name string
	mode coder.CompressionMode
}{
	{"disabled", coder.CompressionDisabled},
	{"no-context-takeover", coder.CompressionNoContextTakeover},
	{"context-takeover", coder.CompressionContextTakeover},
}

// TestCoderEcho: coder/websocket as a client of the echo server in each of
// its compression modes, against a server without context takeover (the
// default: it answers no_context_takeover both ways, RFC 7692 §7.1.1) and
// one that allows it.
func TestCoderEcho(t *testing.T) {
	for _, takeover := range []bool{false, true} {
		url := newServer(t, compat.Options{Echo: true, NoDictionary: true, Router: compat.NewRouter(),
			Compression: compat.Compression{ContextTakeover: takeover}})
		for _, m := range coderModes {
			t.Run(fmt.Sprintf("server-takeover=%t/%s", takeover, m.name), func(t *testing.T) {
				ts := &taps{}
				ctx := ctxT(t)
				c, resp, err := coder.Dial(ctx, url, &coder.DialOptions{
					CompressionMode: m.mode,
					HTTPClient:      &http.Client{Transport: &http.Transport{DialContext: ts.dial}},
				})
				if err != nil {
					t.Fatal(err)
				}
				defer c.CloseNow()
				ext := resp.Header.Get("Sec-WebSocket-Extensions")
				compressed := m.mode != coder.CompressionDisabled
				if compressed != strings.HasPrefix(ext, "permessage-deflate") {
					t.Fatalf("extensions answered %q", ext)
				}
				t.Logf("extensions answered %q", ext)
				c.SetReadLimit(2 * maxMessage)
				for _, n := range sizes {
					for _, typ := range []coder.MessageType{coder.MessageText, coder.MessageBinary} {
						p := payload(n, typ == coder.MessageText)
						if err := c.Write(ctx, typ, p); err != nil {
							t.Fatal(err)
						}
						coderExpect(t, ctx, c, typ, p)
						// A Writer sends a frame per Write: a fragmented
						// message.
						w, err := c.Writer(ctx, typ)
						if err != nil {
							t.Fatal(err)
						}
						for rest := p; len(rest) > 0; rest = rest[min(chunk, len(rest)):] {
							w.Write(rest[:min(chunk, len(rest))])
						}
						if err := w.Close(); err != nil {
							t.Fatal(err)
						}
						coderExpect(t, ctx, c, typ, p)
					}
				}
				// coder's Ping waits for a Read to see the pong: ping
				// aside, and read echoes until the pong has come.
				pinged := make(chan error, 1)
				go func() { pinged <- c.Ping(ctx) }()
				for done := false; !done; {
					c.Write(ctx, coder.MessageText, []byte("while pinging"))
					coderExpect(t, ctx, c, coder.MessageText, []byte("while pinging"))
					select {
					case err := <-pinged:
						if err != nil {
							t.Errorf("ping: %v", err)
						}
						done = true
					case <-time.After(10 * time.Millisecond):
					}
				}
				if err := c.Close(coder.StatusNormalClosure, "bye"); err != nil {
					t.Errorf("closing handshake: %v", err)
				}
				checkWire(t, ts, compressed)
			})
		}
	}
}

func coderExpect(t *testing.T, ctx context.Context, c *coder.Conn, typ coder.MessageType, want []byte) {
	t.Helper()
	gt, got, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("reading the echo of %d bytes: %v", len(want), err)
	}
	if gt != typ || !bytes.Equal(got, want) {
		t.Fatalf("echo of %d bytes (type %v): got %d bytes (type %v)%s", len(want), typ, len(got), gt, firstDifference(got, want))
	}
}

func firstDifference(got, want []byte) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf(", first difference at byte %d", i)
		}
	}
	return ""
}

// TestCoderTakeoverStream: with context takeover both ways, a run of
// messages that refer back into each other must come back intact; each
// reply's compression refers into the replies before it.
func TestCoderTakeoverStream(t *testing.T) {
	url := newServer(t, compat.Options{Echo: true, NoDictionary: true, Router: compat.NewRouter(),
		Compression: compat.Compression{ContextTakeover: true}})
	ctx := ctxT(t)
	ts := &taps{}
	c, _, err := coder.Dial(ctx, url, &coder.DialOptions{
		CompressionMode: coder.CompressionContextTakeover,
		HTTPClient:      &http.Client{Transport: &http.Transport{DialContext: ts.dial}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	c.SetReadLimit(2 * maxMessage)
	base := payload(40000, false)
	for i := range 40 {
		// Messages share long runs, so each compresses against the ones
		// before it.
		msg := append(payload(300+i*50, true), base[:(i%7+1)*5000]...)
		if err := c.Write(ctx, coder.MessageBinary, msg); err != nil {
			t.Fatal(err)
		}
		coderExpect(t, ctx, c, coder.MessageBinary, msg)
	}
	c.Close(coder.StatusNormalClosure, "")
	checkWire(t, ts, true)
}

// The hotpath.v1 packets the RPC tests use, written by hand from
// compat/PROTOCOL.md so that compat's own codec is not what checks them.
const (
	kindCall   = 1
	kindResult = 2
	kindError  = 3
	kindJoin   = 10
	kindEmit   = 12
)

func appendStr(b []byte, s string) []byte {
	b = appendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendUvarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func callPacket(id uint64, method string, params []byte) []byte {
	b := appendUvarint([]byte{kindCall}, id)
	b = appendStr(b, method)
	b = appendUvarint(b, 5000) // timeout, ms
	return append(b, params...)
}

func joinPacket(id uint64, room string) []byte {
	return appendStr(appendUvarint([]byte{kindJoin}, id), room)
}

func emitPacket(room, event string, data []byte) []byte {
	b := appendStr([]byte{kindEmit}, room)
	b = appendStr(b, event)
	b = append(b, 0) // flags: to every member
	return append(b, data...)
}

// packet is a decoded server packet: a Result (id, data), an Error (id,
// code, message), or an Emit (room, event, data).
type packet struct {
	kind        byte
	id, code    uint64
	room, event string
	data        []byte
}

func readUvarint(b []byte) (uint64, []byte, error) {
	var v uint64
	for i := 0; i < len(b) && i < 10; i++ {
		v |= uint64(b[i]&0x7F) << (7 * i)
		if b[i] < 0x80 {
			return v, b[i+1:], nil
		}
	}
	return 0, nil, errors.New("bad uvarint")
}

func readStr(b []byte) (string, []byte, error) {
	n, b, err := readUvarint(b)
	if err != nil || uint64(len(b)) < n {
		return "", nil, errors.New("bad str")
	}
	return string(b[:n]), b[n:], nil
}

func decodePacket(b []byte) (packet, error) {
	if len(b) == 0 {
		return packet{}, errors.New("empty packet")
	}
	p := packet{kind: b[0]}
	var err error
	b = b[1:]
	switch p.kind {
	case kindResult:
		p.id, b, err = readUvarint(b)
		p.data = b
	case kindError:
		if p.id, b, err = readUvarint(b); err == nil {
			if p.code, b, err = readUvarint(b); err == nil {
				p.event, _, err = readStr(b) // the message
			}
		}
	case kindEmit:
		if p.room, b, err = readStr(b); err == nil {
			if p.event, b, err = readStr(b); err == nil && len(b) > 0 {
				p.data = b[1:]
			}
		}
	default:
		err = fmt.Errorf("unexpected packet kind %d", p.kind)
	}
	return p, err
}

// rpcClient is the little each library needs to speak hotpath.v1.
type rpcClient interface {
	send(t *testing.T, b []byte)
	recv(t *testing.T) packet
}

type gorillaRPC struct{ c *websocket.Conn }

func (g gorillaRPC) send(t *testing.T, b []byte) {
	if err := g.c.WriteMessage(websocket.BinaryMessage, b); err != nil {
		t.Fatal(err)
	}
}

func (g gorillaRPC) recv(t *testing.T) packet {
	g.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	typ, b, err := g.c.ReadMessage()
	if err != nil || typ != websocket.BinaryMessage {
		t.Fatalf("read: type %d, %v", typ, err)
	}
	p, err := decodePacket(b)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

type coderRPC struct {
	ctx context.Context
	c   *coder.Conn
}

func (k coderRPC) send(t *testing.T, b []byte) {
	if err := k.c.Write(k.ctx, coder.MessageBinary, b); err != nil {
		t.Fatal(err)
	}
}

func (k coderRPC) recv(t *testing.T) packet {
	typ, b, err := k.c.Read(k.ctx)
	if err != nil || typ != coder.MessageBinary {
		t.Fatalf("read: type %v, %v", typ, err)
	}
	p, err := decodePacket(b)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// recvUntil reads packets until one satisfies ok, skipping presence
// emits ($join, $leave).
func recvUntil(t *testing.T, c rpcClient, what string, ok func(packet) bool) packet {
	t.Helper()
	for range 20 {
		p := c.recv(t)
		if ok(p) {
			return p
		}
		if p.kind != kindEmit || !strings.HasPrefix(p.event, "$") {
			t.Fatalf("waiting for %s: got packet kind %d %+v", what, p.kind, p)
		}
	}
	t.Fatalf("no %s in 20 packets", what)
	return packet{}
}

// TestRPC: gorilla and coder clients call echo/say, join a room, and
// receive each other's room emits, over the hotpath.v1 subprotocol, with
// and without permessage-deflate.
func TestRPC(t *testing.T) {
	url := newServer(t, compat.Options{NoDictionary: true})
	for _, compress := range []bool{false, true} {
		t.Run(fmt.Sprintf("compression=%t", compress), func(t *testing.T) {
			ctx := ctxT(t)
			ts := &taps{}
			d := websocket.Dialer{EnableCompression: compress, NetDialContext: ts.dial, Subprotocols: []string{compat.Subprotocol}}
			gc, resp, err := d.DialContext(ctx, url, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer gc.Close()
			if got := resp.Header.Get("Sec-WebSocket-Protocol"); got != compat.Subprotocol {
				t.Fatalf("subprotocol answered %q", got)
			}
			mode := coder.CompressionDisabled
			if compress {
				mode = coder.CompressionNoContextTakeover
			}
			cc, _, err := coder.Dial(ctx, url, &coder.DialOptions{Subprotocols: []string{compat.Subprotocol}, CompressionMode: mode,
				CompressionThreshold: 64, HTTPClient: &http.Client{Transport: &http.Transport{DialContext: ts.dial}}})
			if err != nil {
				t.Fatal(err)
			}
			defer cc.CloseNow()
			g, k := gorillaRPC{gc}, coderRPC{ctx, cc}

			long := strings.Repeat("hotpath ", 500)
			for i, c := range []rpcClient{g, k} {
				params := fmt.Appendf(nil, `{"text":%q}`, long)
				c.send(t, callPacket(uint64(i+1), "echo/say", params))
				p := recvUntil(t, c, "the echo/say result", func(p packet) bool { return p.kind == kindResult })
				// echo/say answers its params: the same JSON, byte for byte.
				if p.id != uint64(i+1) || !bytes.Equal(p.data, params) {
					t.Errorf("client %d: result id %d, %d bytes, want id %d, %d bytes%s", i, p.id, len(p.data), i+1, len(params), firstDifference(p.data, params))
				}
				c.send(t, callPacket(uint64(i+10), "no/such", nil))
				if p := recvUntil(t, c, "the NotFound error", func(p packet) bool { return p.kind == kindError }); p.code != 3 {
					t.Errorf("client %d: unknown method answered code %d, want 3 (NotFound)", i, p.code)
				}
			}
			for i, c := range []rpcClient{g, k} {
				c.send(t, joinPacket(uint64(20+i), "lobby"))
				recvUntil(t, c, "the join result", func(p packet) bool { return p.kind == kindResult && p.id == uint64(20+i) })
			}
			// Each emits to the room; the other receives it (and so does
			// the sender: the emit goes to every member).
			for i, from := range []rpcClient{g, k} {
				to := []rpcClient{k, g}[i]
				msg := fmt.Appendf(nil, `{"from":%d,"text":%q}`, i, long)
				from.send(t, emitPacket("lobby", "message", msg))
				for _, c := range []rpcClient{to, from} {
					p := recvUntil(t, c, "the room emit", func(p packet) bool { return p.kind == kindEmit && p.event == "message" })
					if p.room != "lobby" || !bytes.Equal(p.data, msg) {
						t.Errorf("emit from %d: room %q, %d bytes", i, p.room, len(p.data))
					}
				}
			}
			gorillaClose(t, gc)
			if err := cc.Close(coder.StatusNormalClosure, ""); err != nil {
				t.Errorf("coder close: %v", err)
			}
			checkWire(t, ts, compress)
		})
	}
}
