package deflatecache

import (
	"bytes"
	stdflate "compress/flate"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/hotpath-go/hotpath/wsframe"
)

// FuzzNegotiate feeds arbitrary header values to both sides of the
// negotiation. Neither may panic; an error is always ErrMalformedHeader
// (or, for a response, ErrInvalidResponse); an accepted offer yields a
// response the client side accepts with the same agreed parameters, inside
// the policy.
func FuzzNegotiate(f *testing.F) {
	for _, h := range []string{
		"permessage-deflate; client_max_window_bits",
		"permessage-deflate",
		"x-webkit-deflate-frame, permessage-deflate; server_max_window_bits=10; client_max_window_bits=9",
		`permessage-deflate; server_max_window_bits="8"; server_no_context_takeover; client_no_context_takeover`,
		"permessage-deflate; server_max_window_bits=08, permessage-deflate;client_max_window_bits=15",
		"permessage-deflate; foo=\"a\\\"b\"",
		", ,permessage-deflate ;client_max_window_bits= 12 ,",
	} {
		f.Add(h, uint8(0), uint8(0), uint8(0), uint8(0))
		f.Add(h, uint8(9), uint8(12), uint8(10), uint8(3))
	}
	f.Fuzz(func(t *testing.T, header string, minBits, maxBits, clientBits, flags uint8) {
		policy := ServerPolicy{
			ServerContextTakeover: flags&1 != 0,
			ClientContextTakeover: flags&2 != 0,
			MinWindowBits:         int(minBits % 17),
			ServerMaxWindowBits:   int(maxBits % 17),
			ClientMaxWindowBits:   int(clientBits % 17),
		}
		p, resp, ok, err := Negotiate(header, policy)
		switch {
		case err != nil:
			if ok || resp != "" || !errors.Is(err, ErrMalformedHeader) {
				t.Fatalf("error %v with ok=%v response %q", err, ok, resp)
			}
		case ok:
			norm := policy.normalized()
			if p.ServerMaxWindowBits < norm.MinWindowBits || p.ServerMaxWindowBits > norm.ServerMaxWindowBits ||
				p.ClientMaxWindowBits < MinWindowBits || p.ClientMaxWindowBits > MaxWindowBits {
				t.Fatalf("params %+v outside policy %+v", p, norm)
			}
			if !policy.ServerContextTakeover && !p.ServerNoContextTakeover || !policy.ClientContextTakeover && !p.ClientNoContextTakeover {
				t.Fatalf("takeover %+v against policy %+v", p, policy)
			}
			// §7.1.2.2: the response names client_max_window_bits only if
			// some offer did.
			if strings.Contains(resp, clientMaxWindowBits) && !strings.Contains(strings.ToLower(header), clientMaxWindowBits) {
				t.Fatalf("response %q names client_max_window_bits, header %q does not", resp, header)
			}
			cp, cok, cerr := ParseResponse(resp, ClientOffer{})
			if !cok || cerr != nil {
				t.Fatalf("client refuses %q: %v", resp, cerr)
			}
			if cp.ServerNoContextTakeover != p.ServerNoContextTakeover || cp.ClientNoContextTakeover != p.ClientNoContextTakeover || cp.ServerMaxWindowBits != p.ServerMaxWindowBits {
				t.Fatalf("server agreed %+v, client read %+v from %q", p, cp, resp)
			}
			if strings.Contains(resp, clientMaxWindowBits) && cp.ClientMaxWindowBits != p.ClientMaxWindowBits {
				t.Fatalf("server agreed %+v, client read %+v from %q", p, cp, resp)
			}
			if _, err := NewConn(p, wsframe.Server, Options{}); err != nil {
				t.Fatal(err)
			}
		default:
			if resp != "" || p != (Params{}) {
				t.Fatalf("declined with %+v %q", p, resp)
			}
		}
		// The same bytes as a server's response.
		offer := ClientOffer{ServerNoContextTakeover: flags&4 != 0, ClientNoContextTakeover: flags&8 != 0, ServerMaxWindowBits: int(maxBits % 17), ClientMaxWindowBits: int(clientBits % 17)}
		cp, cok, cerr := ParseResponse(header, offer)
		switch {
		case cerr != nil:
			if cok || !(errors.Is(cerr, ErrMalformedHeader) || errors.Is(cerr, ErrInvalidResponse)) {
				t.Fatalf("response error %v, ok=%v", cerr, cok)
			}
		case cok:
			if _, err := NewConn(cp, wsframe.Client, Options{}); err != nil {
				t.Fatalf("accepted response %q gave %+v: %v", header, cp, err)
			}
			if offer.ServerMaxWindowBits != 0 && cp.ServerMaxWindowBits > clampBits(offer.ServerMaxWindowBits) {
				t.Fatalf("accepted a larger server window: %+v for %+v", cp, offer)
			}
			// RFC 7692 §7.1.1.1: a server that accepts an offer of
			// server_no_context_takeover includes it; §7.1.1.2: a client
			// that offered client_no_context_takeover keeps to it, named
			// in the response or not; §7.1.2.2: the client's window is at
			// most the one it offered.
			if offer.ServerNoContextTakeover && !cp.ServerNoContextTakeover || offer.ClientNoContextTakeover && !cp.ClientNoContextTakeover {
				t.Fatalf("accepted response %q gave %+v for offer %+v", header, cp, offer)
			}
			if offer.ClientMaxWindowBits != 0 && cp.ClientMaxWindowBits > clampBits(offer.ClientMaxWindowBits) {
				t.Fatalf("accepted a larger client window: %+v for %+v", cp, offer)
			}
			// The parameters the client uses are what the response says,
			// where it says them.
			if lower := strings.ToLower(header); !strings.Contains(lower, serverNoContextTakeover) && cp.ServerNoContextTakeover {
				t.Fatalf("response %q read as server_no_context_takeover", header)
			}
		}
	})
}

// hello is the first message of RFC 7692 §7.2.3.2, inflated to build a
// history before the fuzzed payload on a connection with takeover.
var hello = []byte{0xf2, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00}

// FuzzInflate inflates arbitrary bytes under a cap. It must never panic,
// never return more than the cap nor grow dst past it, fail only with
// ErrCorrupt or ErrTooLarge, and agree on every input with a fresh
// compress/flate reader: the pooled decoder, which has inflated earlier
// inputs (other connections' messages, in a server), must carry nothing
// from them. The two inputs in testdata/fuzz/FuzzInflate are what found
// that klauspost/compress's decoder does carry its Huffman tables over.
func FuzzInflate(f *testing.F) {
	f.Add([]byte{0xf2, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00}, uint16(100), false)
	f.Add([]byte{0xf2, 0x00, 0x11, 0x00, 0x00}, uint16(100), true)
	f.Add([]byte{0xf3, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00, 0x00}, uint16(5), false)
	f.Add(bomb(50), uint16(1000), false)
	f.Add(farDistance(), uint16(100), true)
	f.Add([]byte{0x00, 0x05, 0x00, 0xfa, 0xff, 0x48, 0x65, 0x6c, 0x6c, 0x6f, 0x00}, uint16(4), false)
	f.Fuzz(func(t *testing.T, payload []byte, limit uint16, takeover bool) {
		c := mustConn(t, Params{ClientNoContextTakeover: !takeover}, wsframe.Server, Options{})
		var history []byte
		if takeover {
			history, _ = c.Inflate(nil, hello, 0)
		}
		max := int64(limit) + 1
		out, err := c.Inflate(nil, payload, max)
		if int64(len(out)) > max || int64(cap(out)) > max {
			t.Fatalf("%d bytes (capacity %d) for a cap of %d", len(out), cap(out), max)
		}
		if err != nil && err != ErrCorrupt && err != ErrTooLarge {
			t.Fatalf("untyped error %v", err)
		}
		if len(payload) == 0 {
			return
		}
		// The standard library, reading at most one byte past the cap.
		in := append(append([]byte(nil), payload...), trailer...)
		fr := stdflate.NewReaderDict(bytes.NewReader(in), history)
		std, stdErr := io.ReadAll(io.LimitReader(fr, max+1))
		if stdErr == nil && int64(len(std)) <= max {
			// A complete stream within the cap: LimitReader stopped at EOF.
			if err != nil || !bytes.Equal(out, std) {
				t.Fatalf("compress/flate inflates %d bytes, this package %d bytes and %v", len(std), len(out), err)
			}
		}
		switch err {
		case nil:
			if stdErr != nil || !bytes.Equal(out, std) {
				t.Fatalf("this package inflates %d bytes, compress/flate %d bytes and %v", len(out), len(std), stdErr)
			}
		case ErrTooLarge:
			if int64(len(std)) <= max {
				t.Fatalf("too large, but compress/flate stops at %d bytes: %v", len(std), stdErr)
			}
		}
	})
}

// FuzzRoundTrip compresses arbitrary data, cut into two messages, at every
// window, level and takeover mode, and checks that the peer inflates it
// back, that the standard library agrees, and that no back-reference
// reaches further than the window.
func FuzzRoundTrip(f *testing.F) {
	f.Add([]byte(`{"t":"msg","room":"lobby","seq":1,"text":"hello"}{"t":"msg","room":"lobby","seq":2,"text":"hello"}`), uint8(0), uint8(0), true, uint16(50))
	f.Add(document(1, 3000), uint8(7), uint8(8), false, uint16(1500))
	f.Add(bytes.Repeat([]byte{0}, 5000), uint8(2), uint8(3), true, uint16(0))
	f.Add(noise(1, 600), uint8(4), uint8(1), true, uint16(300))
	f.Fuzz(func(t *testing.T, data []byte, bitsSel, levelSel uint8, takeover bool, split uint16) {
		bits := MinWindowBits + int(bitsSel%8)
		level := 1 + int(levelSel%9)
		p := Params{
			ServerNoContextTakeover: !takeover, ClientNoContextTakeover: !takeover,
			ServerMaxWindowBits: bits, ClientMaxWindowBits: bits,
		}
		opts := Options{Level: level, MinSize: 1, TakeoverMinSize: 1, TakeoverHistory: 1 << 15}
		server, client := pair(t, p, opts)
		cut := int(split) % (len(data) + 1)
		var history []byte
		for _, msg := range [][]byte{data[:cut], data[cut:]} {
			comp, ok := server.AppendCompressed(nil, msg)
			if !ok {
				continue
			}
			got, err := client.Inflate(nil, comp, int64(len(msg))+1)
			if err != nil || !bytes.Equal(got, msg) {
				t.Fatalf("bits=%d level=%d takeover=%v: %v", bits, level, takeover, err)
			}
			if !bytes.Equal(stdInflate(t, comp, history), msg) {
				t.Fatal("compress/flate disagrees")
			}
			traced, dist, err := traceInflate(append(comp, tail...), history)
			if err != nil || !bytes.Equal(traced, msg) {
				t.Fatalf("trace: %v", err)
			}
			if dist > 1<<bits {
				t.Fatalf("bits=%d: back-reference of %d bytes", bits, dist)
			}
			if takeover {
				history = append(history, msg...)
			}
		}
	})
}
