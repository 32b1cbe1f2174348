package compat

// The dictionary compression of PROTOCOL.md §6 at its limits, on the
// server and on the Go client.

import (
	"bytes"
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/gobwas/ws/wsutil"
	"github.com/hotpath-go/hotpath/compat/internal/wstest"
	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/dictionary"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/wsframe"
)

// negotiateDictionary sends capabilities offering the test router's
// dictionary with codec and returns the codec, for a connection on
// which the server compresses from then on (PROTOCOL.md §6).
func negotiateDictionary(t *testing.T, c *wstest.Conn, codec string) dictionary.Codec {
	t.Helper()
	d, err := RouterDictionary(testRouter())
	if err != nil {
		t.Fatal(err)
	}
	offer := codec + ":" + d.ID()
	c.WriteMessage(wsframe.OpBinary, wire.Append(nil, &wire.Packet{Kind: dispatch.KindCapabilities, Count: 1, Payload: wire.AppendPair(nil, "dict", offer)}))
	p := readPacket(t, c)
	chosen := ""
	for k, v := range p.Pairs() {
		if string(k) == "dict" {
			chosen = string(v)
		}
	}
	if p.Kind != dispatch.KindCapabilities || chosen != offer {
		t.Fatalf("capabilities answered with %v choosing %q, want %q", p.Kind, chosen, offer)
	}
	if codec == "zstd" {
		z, err := dictionary.NewZstd(d, dictionary.CodecOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return z
	}
	return dictionary.NewDeflate(d, dictionary.CodecOptions{})
}

// PROTOCOL.md §6: after the negotiation, a compressed body that does not
// decompress closes the connection with 1007, and one that inflates past
// the receiver's message limit with 1009; one that does is taken as its
// plain packet, on its own and as a batch.
func TestProtocolCompressedBodies(t *testing.T) {
	const limit = 4096
	_, addr := newTestServer(t, Options{Limits: Limits{MaxMessageSize: limit}})
	for _, codec := range []string{"deflate", "zstd"} {
		c := dial(t, addr)
		enc := negotiateDictionary(t, c, codec)
		compressed := func(plain []byte) []byte {
			body, ok := enc.AppendCompress(nil, plain[1:])
			if !ok {
				t.Fatalf("%s: %d bytes do not compress", codec, len(plain))
			}
			return wire.AppendCompressed(nil, dispatch.Kind(plain[0]), body)
		}
		payload := bytes.Repeat([]byte("abcd"), 64)
		c.WriteMessage(wsframe.OpBinary, compressed(wire.AppendCall(nil, dispatch.KindCall, 3, "echo/raw", 0, payload)))
		// The answer may come compressed: its kind is all that is read.
		if p := readPacket(t, c); p.Kind != dispatch.KindResult {
			t.Errorf("%s: a compressed call answered with %+v", codec, p)
		}
		c.WriteMessage(wsframe.OpBinary, compressed(batchOf(wire.AppendCall(nil, dispatch.KindCall, 4, "echo/raw", 0, payload))))
		if p := readPacket(t, c); p.Kind != dispatch.KindResult && p.Kind != dispatch.KindBatch {
			t.Errorf("%s: a compressed batch answered with %+v", codec, p)
		}
		// A body that inflates one byte past the limit (4096 bytes of
		// packet: the head byte and 4096 of body).
		c.WriteMessage(wsframe.OpBinary, compressed(wire.AppendCall(nil, dispatch.KindCall, 5, "echo/raw", 0, make([]byte, limit-len(wire.AppendCall(nil, dispatch.KindCall, 5, "echo/raw", 0, nil))+1))))
		if code, reason := c.ReadClose(10 * time.Second); code != wsframe.CloseMessageTooBig || reason != "HP_ERR_INFLATED_TOO_LARGE" {
			t.Errorf("%s: a body inflating past the limit: close %d %q, want 1009 HP_ERR_INFLATED_TOO_LARGE", codec, code, reason)
		}
		c.NC.Close()

		c = dial(t, addr)
		negotiateDictionary(t, c, codec)
		c.WriteMessage(wsframe.OpBinary, wire.AppendCompressed(nil, dispatch.KindCall, []byte{0xde, 0xad, 0xbe, 0xef, 0, 0x11}))
		if code, reason := c.ReadClose(10 * time.Second); code != wsframe.CloseInvalidPayload || reason != "HP_ERR_BAD_COMPRESSED_BODY" {
			t.Errorf("%s: a body that does not decompress: close %d %q, want 1007 HP_ERR_BAD_COMPRESSED_BODY", codec, code, reason)
		}
		c.NC.Close()
	}
}

// PROTOCOL.md §6 at the Go client: a compressed packet that inflates to
// the client's message limit is taken; one that inflates one byte past
// it closes the connection with 1009 HP_ERR_INFLATED_TOO_LARGE, as the
// same packet sent plain would close it with 1009. The limit is the
// packet's, its head byte included: the body may inflate to one byte
// less.
func TestProtocolClientInflateLimit(t *testing.T) {
	const limit = 4096
	d, err := RouterDictionary(testRouter())
	if err != nil {
		t.Fatal(err)
	}
	enc := dictionary.NewDeflate(d, dictionary.CodecOptions{})
	event := func(size int) []byte { // a compressed Event packet of size bytes plain
		plain := wire.Append(nil, &wire.Packet{Kind: dispatch.KindEvent, Name: []byte("big"), Payload: make([]byte, size-5)})
		body, ok := enc.AppendCompress(nil, plain[1:])
		if !ok || len(plain) != size {
			t.Fatalf("an event of %d bytes: %d bytes, compressed %v", size, len(plain), ok)
		}
		return wire.AppendCompressed(nil, dispatch.KindEvent, body)
	}
	ln := listenLoopback(t)
	got := make(chan rawClose, 1)
	go func() {
		got <- rawServer(ln, "", func(nc net.Conn, p wire.Packet) {
			switch p.Kind {
			case dispatch.KindCapabilities: // choose the client's dictionary
				wsutil.WriteServerBinary(nc, capsOf("codec", "json", "dict", "deflate:"+d.ID()))
			case dispatch.KindCall: // the events instead of its answer
				wsutil.WriteServerBinary(nc, event(limit))
				wsutil.WriteServerBinary(nc, event(limit+1))
			}
		})
	}()
	c := dialClient(t, ln.Addr().String(), ClientOptions{Dictionary: d, Limits: Limits{MaxMessageSize: limit}, Reconnect: Reconnect{Disabled: true}})
	sizes := make(chan int, 2)
	c.On("big", func(m Message) { sizes <- len(m.Data) })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = c.Call(ctx, "echo/raw", []byte("x"), nil)
	if !errors.Is(err, ErrDisconnected) || CloseStatus(err) != wsframe.CloseMessageTooBig {
		t.Errorf("the call: %v, want ErrDisconnected with 1009", err)
	}
	wantClientClose(t, got, wsframe.CloseMessageTooBig, "HP_ERR_INFLATED_TOO_LARGE")
	select {
	case n := <-sizes:
		if n != limit-5 {
			t.Errorf("the event at the limit delivered %d bytes, want %d", n, limit-5)
		}
	default:
		t.Error("the event at the limit was not delivered")
	}
	select {
	case n := <-sizes:
		t.Errorf("the event over the limit was delivered (%d bytes)", n)
	default:
	}
}
