package compat

import (
	"bytes"
	"compress/flate"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/hotpath-go/hotpath/compat/internal/wstest"
	"github.com/hotpath-go/hotpath/deflatecache"
	"github.com/hotpath-go/hotpath/wsframe"
)

// deflateMessage compresses p as a permessage-deflate sender does (RFC
// 7692 §7.2.1): raw DEFLATE, flushed, the 00 00 ff ff tail removed.
func deflateMessage(t *testing.T, p []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	w, _ := flate.NewWriter(&b, flate.BestSpeed)
	w.Write(p)
	w.Flush()
	out := b.Bytes()
	if !bytes.HasSuffix(out, []byte{0, 0, 0xff, 0xff}) {
		t.Fatal("flush did not end with the empty stored block")
	}
	return out[:len(out)-4]
}

func inflateMessage(t *testing.T, p []byte) []byte {
	t.Helper()
	out, err := io.ReadAll(flate.NewReader(io.MultiReader(bytes.NewReader(p), bytes.NewReader([]byte{0, 0, 0xff, 0xff, 1, 0, 0, 0xff, 0xff}))))
	if err != nil {
		t.Fatalf("inflate: %v", err)
	}
	return out
}

func dialPMD(t *testing.T, addr string, offer string) *wstest.Conn {
	t.Helper()
	c := dial(t, addr, "Sec-WebSocket-Extensions: "+offer)
	if !strings.HasPrefix(c.Extensions(), "permessage-deflate") {
		t.Fatalf("offer %q: extensions answered %q", offer, c.Extensions())
	}
	return c
}

func TestPMDNegotiatedAndEchoCompressed(t *testing.T) {
	_, addr := newTestServer(t, Options{Echo: true, Compression: Compression{Threshold: 16}})
	// What Chromium offers.
	c := dialPMD(t, addr, "permessage-deflate; client_max_window_bits")
	ext := c.Extensions()
	for _, p := range []string{"server_no_context_takeover", "client_no_context_takeover"} {
		if !strings.Contains(ext, p) {
			t.Errorf("response %q lacks %s (the server keeps no window per connection by default)", ext, p)
		}
	}
	msg := []byte(strings.Repeat(`{"event":"tick","price":101.25}`, 20))
	c.WriteRaw(wsframe.AppendMaskedFrame(nil, wsframe.OpText, deflateMessage(t, msg), wsframe.Fin|wsframe.Rsv1, wsframe.NewMaskKey()))
	// The echo comes back compressed: read the raw frame to see RSV1.
	h, body := readRawFrame(t, c)
	if h.Flags&wsframe.Rsv1 == 0 {
		t.Fatal("echo was not compressed")
	}
	if got := inflateMessage(t, body); !bytes.Equal(got, msg) {
		t.Fatalf("echo inflates to %q", got)
	}
}

// readRawFrame reads the next frame from c as it came, header flags and
// compressed body included, within 5 s.
func readRawFrame(t *testing.T, c *wstest.Conn) (wsframe.Header, []byte) {
	t.Helper()
	c.NC.SetReadDeadline(time.Now().Add(5 * time.Second))
	var raw []byte
	buf := make([]byte, 64<<10)
	for {
		h, n, err := wsframe.ParseHeader(raw)
		if err == nil && len(raw) >= n+int(h.Length) {
			return h, raw[n : n+int(h.Length)]
		}
		k, err := c.NC.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		raw = append(raw, buf[:k]...)
	}
}

// In echo mode any subprotocol is accepted, and the first one offered is
// selected: a client that offers subprotocols fails a handshake that
// selects none (RFC 6455 §4.1; Node's ws did against the echo server).
func TestEchoSelectsTheFirstSubprotocolOffered(t *testing.T) {
	for _, viaHTTP := range []bool{false, true} {
		s, err := NewServer(Options{Router: NewRouter(), Echo: true, NoDictionary: true, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		addr := startServer(t, s, viaHTTP)
		for offer, want := range map[string]string{"chat, superchat": "chat", "x": "x", Subprotocol: Subprotocol, "": ""} {
			var headers []string
			if offer != "" {
				headers = append(headers, "Sec-WebSocket-Protocol: "+offer)
			}
			c, err := wstest.Dial(addr, "/ws", headers...)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Response.Header.Get("Sec-WebSocket-Protocol"); got != want {
				t.Errorf("via net/http %v, offered %q: selected %q, want %q", viaHTTP, offer, got, want)
			}
			c.Close()
		}
	}
}

func TestPMDBombClosed1009(t *testing.T) {
	_, addr := newTestServer(t, Options{Echo: true, Limits: Limits{MaxMessageSize: 64 << 10}})
	c := dialPMD(t, addr, "permessage-deflate")
	bomb := deflateMessage(t, make([]byte, 16<<20)) // 16 MiB of zeros in a few KiB
	c.WriteRaw(wsframe.AppendMaskedFrame(nil, wsframe.OpBinary, bomb, wsframe.Fin|wsframe.Rsv1, wsframe.NewMaskKey()))
	if code, reason := c.ReadClose(5 * time.Second); code != wsframe.CloseMessageTooBig {
		t.Fatalf("bomb: close %d (%s), want 1009", code, reason)
	}
}

func TestPMDProtocolErrors(t *testing.T) {
	_, addr := newTestServer(t, Options{Echo: true})
	cases := []struct {
		name  string
		frame []byte
		code  wsframe.CloseCode
	}{
		// RFC 7692 §6.1: "An endpoint MUST NOT set the "Per-Message
		// Compressed" bit of control frames".
		{"compressed ping", wsframe.AppendMaskedFrame(nil, wsframe.OpPing, nil, wsframe.Fin|wsframe.Rsv1, wsframe.NewMaskKey()), wsframe.CloseProtocolError},
		// §6.1: RSV1 only on the first frame of a message.
		{"RSV1 on a continuation", append(
			wsframe.AppendMaskedFrame(nil, wsframe.OpBinary, []byte{1}, 0, wsframe.NewMaskKey()),
			wsframe.AppendMaskedFrame(nil, wsframe.OpContinuation, []byte{1}, wsframe.Fin|wsframe.Rsv1, wsframe.NewMaskKey())...), wsframe.CloseProtocolError},
		{"corrupt DEFLATE", wsframe.AppendMaskedFrame(nil, wsframe.OpBinary, []byte{0xff, 0xff, 0xff}, wsframe.Fin|wsframe.Rsv1, wsframe.NewMaskKey()), wsframe.CloseInvalidPayload},
	}
	for _, tc := range cases {
		c := dialPMD(t, addr, "permessage-deflate")
		c.WriteRaw(tc.frame)
		if code, reason := c.ReadClose(5 * time.Second); code != tc.code {
			t.Errorf("%s: close %d (%s), want %d", tc.name, code, reason, tc.code)
		}
	}
	// Without the extension, RSV1 is a protocol error (RFC 6455 §5.2).
	c := dial(t, addr)
	c.WriteRaw(wsframe.AppendMaskedFrame(nil, wsframe.OpBinary, deflateMessage(t, []byte("hi")), wsframe.Fin|wsframe.Rsv1, wsframe.NewMaskKey()))
	if code, _ := c.ReadClose(5 * time.Second); code != wsframe.CloseProtocolError {
		t.Errorf("RSV1 without the extension: close %d, want 1002", code)
	}
}

func TestPMDRoomEmitSharedPerWindow(t *testing.T) {
	s, addr := newTestServer(t, Options{Compression: Compression{Threshold: 200}})
	offers := []string{"permessage-deflate; server_max_window_bits=10", "permessage-deflate", "permessage-deflate; server_max_window_bits=10"}
	var conns []*wstest.Conn
	for _, o := range offers {
		c := dialPMD(t, addr, o)
		c.WriteMessage(wsframe.OpBinary, []byte{10, 1, 1, 'r'}) // Join id 1 room "r"
		conns = append(conns, c)
	}
	waitFor(t, func() bool { return s.Members("r") == 3 })
	before := deflatesSoFar()
	payload := map[string]string{"text": strings.Repeat("the same broadcast for everyone ", 10)}
	if res, err := s.Emit("r", "say", payload); err != nil || res.Delivered != 3 {
		t.Fatalf("Emit = %+v, %v", res, err)
	}
	if n := deflatesSoFar() - before; n != 2 {
		t.Errorf("%d deflates for one emit to members on two windows, want 2", n)
	}
	for i, c := range conns {
		for {
			m, err := c.ReadMessage(5 * time.Second)
			if err != nil {
				t.Fatalf("member %d: %v", i, err)
			}
			if m.Compressed {
				if got := inflateMessage(t, m.Payload); !bytes.Contains(got, []byte("the same broadcast")) {
					t.Errorf("member %d got %q", i, got)
				}
				break
			}
		}
	}
}

func deflatesSoFar() uint64 { return deflatecache.Deflates() }

// With context takeover, the first message the server compresses may come
// out longer than it went in, and an incompressible one of 65,530-65,535
// bytes then needs a longer frame header: deflatecache cut the end of
// its body, and the client inflated other bytes without an error (a
// modules audit; deflatecache's TestCompressedFrameHeaderGrowth).
func TestPMDTakeoverEchoesAnIncompressibleMessage(t *testing.T) {
	_, addr := newTestServer(t, Options{Echo: true, Compression: Compression{ContextTakeover: true}})
	c := dialPMD(t, addr, "permessage-deflate")
	if strings.Contains(c.Extensions(), "server_no_context_takeover") {
		t.Fatalf("the server keeps no window: %q", c.Extensions())
	}
	msg := make([]byte, 65_533)
	rand.NewChaCha8([32]byte{7}).Read(msg)
	c.WriteRaw(wsframe.AppendMaskedFrame(nil, wsframe.OpBinary, msg, wsframe.Fin, wsframe.NewMaskKey()))
	h, body := readRawFrame(t, c)
	if h.Flags&wsframe.Rsv1 == 0 {
		t.Fatal("the echo was not compressed: the case is not tested")
	}
	if got := inflateMessage(t, body); !bytes.Equal(got, msg) {
		t.Fatalf("the echo of %d random bytes came back as %d other bytes", len(msg), len(got))
	}
}
