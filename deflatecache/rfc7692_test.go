package deflatecache

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/hotpath-go/hotpath/wsframe"
	"github.com/klauspost/compress/flate"
)

// Tests named after the section of RFC 7692 whose MUST (or MAY, where a
// peer has to cope with it) they check.

func negotiate(t *testing.T, offers string, policy ServerPolicy) (Params, string, bool) {
	t.Helper()
	p, resp, ok, err := Negotiate(offers, policy)
	if err != nil {
		t.Fatalf("Negotiate(%q): %v", offers, err)
	}
	return p, resp, ok
}

// §5: "To offer use of a PMCE, a client MUST include the extension name of
// the PMCE in the Sec-WebSocket-Extensions header field of its opening
// handshake of the WebSocket connection."
func TestRFC7692_5_OfferIncludesExtensionName(t *testing.T) {
	for _, o := range []ClientOffer{{}, {ServerNoContextTakeover: true, ClientNoContextTakeover: true, ServerMaxWindowBits: 10, ClientMaxWindowBits: 9}} {
		h := string(AppendOffer(nil, o))
		if !strings.HasPrefix(h, "permessage-deflate") {
			t.Fatalf("offer %q does not name the extension", h)
		}
		if _, _, ok := negotiate(t, h, ServerPolicy{}); !ok {
			t.Fatalf("own offer %q declined", h)
		}
	}
}

// §5: "The order of elements is important as it specifies the client's
// preference. An element preceding another element has higher
// preference."
func TestRFC7692_5_FirstAcceptableOfferWins(t *testing.T) {
	p, resp, _ := negotiate(t, "permessage-deflate; server_max_window_bits=10, permessage-deflate; server_max_window_bits=12", ServerPolicy{})
	if p.ServerMaxWindowBits != 10 || !strings.Contains(resp, "server_max_window_bits=10") {
		t.Fatalf("got %+v %q, want the first offer", p, resp)
	}
	// The first offer is declined (window below the policy's minimum), the
	// second taken.
	p, resp, _ = negotiate(t, "permessage-deflate; server_max_window_bits=8, permessage-deflate; client_max_window_bits", ServerPolicy{MinWindowBits: 9})
	if p.ServerMaxWindowBits != 15 || strings.Contains(resp, "server_max_window_bits") {
		t.Fatalf("got %+v %q, want the second offer", p, resp)
	}
}

// §5: "A server MUST NOT accept a PMCE extension negotiation offer together
// with another extension if the PMCE will conflict with the extension on
// their use of the RSV1 bit. A client that received a response accepting
// a PMCE extension negotiation offer together with such an extension MUST
// _Fail the WebSocket Connection_."
func TestRFC7692_5_NoOtherExtensionBesideIt(t *testing.T) {
	_, resp, ok := negotiate(t, "x-webkit-deflate-frame, permessage-deflate, deflate-frame; max_window_bits=10", ServerPolicy{})
	if !ok || resp != "permessage-deflate; server_no_context_takeover; client_no_context_takeover" {
		t.Fatalf("response %q", resp)
	}
	for _, r := range []string{
		"permessage-deflate, x-webkit-deflate-frame",
		"x-webkit-deflate-frame",
		"permessage-deflate, permessage-deflate",
	} {
		if _, _, err := ParseResponse(r, ClientOffer{}); !errors.Is(err, ErrInvalidResponse) {
			t.Errorf("ParseResponse(%q) = %v, want ErrInvalidResponse", r, err)
		}
	}
}

// §6.1: "An endpoint MUST NOT set the "Per-Message Compressed" bit of
// control frames and non-first fragments of a data message."
func TestRFC7692_6_1_ControlFramesNeverCompressed(t *testing.T) {
	c := mustConn(t, Params{}, wsframe.Server, Options{MinSize: 1})
	payload := bytes.Repeat([]byte("ping"), 30)
	for _, op := range []wsframe.Opcode{wsframe.OpPing, wsframe.OpPong, wsframe.OpClose, wsframe.OpContinuation} {
		if f, ok := c.AppendCompressedFrame(nil, op, payload); ok || len(f) != 0 {
			t.Errorf("%v compressed", op)
		}
		if op == wsframe.OpContinuation {
			continue
		}
		body := payload
		if op == wsframe.OpClose {
			body = wsframe.AppendClosePayload(nil, wsframe.CloseGoingAway, string(payload[:100])) // a close body a peer accepts
		}
		pm, err := wsframe.NewPrepared(op, body)
		if err != nil {
			t.Fatal(err)
		}
		f, err := c.BroadcastFrame(pm)
		if err != nil || f[0]&byte(wsframe.Rsv1) != 0 || !bytes.Equal(f, pm.Frame()) {
			t.Errorf("%v broadcast as % x, %v", op, f[:2], err)
		}
	}
}

// §7: "A server MUST decline an extension negotiation offer for this
// extension if any of the following conditions are met: The negotiation
// offer contains an extension parameter not defined for use in an offer.
// The negotiation offer contains an extension parameter with an invalid
// value. The negotiation offer contains multiple extension parameters with
// the same name. The server doesn't support the offered configuration."
func TestRFC7692_7_ServerDeclines(t *testing.T) {
	for _, offer := range []string{
		"permessage-deflate; foo",
		"permessage-deflate; max_window_bits=10",
		"permessage-deflate; server_max_window_bits",
		"permessage-deflate; server_max_window_bits=7",
		"permessage-deflate; server_max_window_bits=16",
		"permessage-deflate; server_max_window_bits=08",
		"permessage-deflate; server_max_window_bits=+9",
		"permessage-deflate; server_max_window_bits=9a",
		`permessage-deflate; server_max_window_bits="7"`,
		"permessage-deflate; client_max_window_bits=0",
		"permessage-deflate; client_max_window_bits=100",
		"permessage-deflate; server_no_context_takeover=1",
		"permessage-deflate; client_no_context_takeover=true",
		"permessage-deflate; server_no_context_takeover; server_no_context_takeover",
		"permessage-deflate; client_no_context_takeover; client_no_context_takeover",
		"permessage-deflate; server_max_window_bits=10; server_max_window_bits=10",
		"permessage-deflate; client_max_window_bits; client_max_window_bits=10",
		"permessage-deflate; server_max_window_bits=8", // with MinWindowBits 9 below
	} {
		p, resp, ok := negotiate(t, offer, ServerPolicy{MinWindowBits: 9})
		if ok || resp != "" || p != (Params{}) {
			t.Errorf("offer %q accepted: %q", offer, resp)
		}
		// Declining one offer leaves the next one of the list.
		if _, _, ok := negotiate(t, offer+", permessage-deflate", ServerPolicy{MinWindowBits: 9}); !ok {
			t.Errorf("offer %q followed by a valid one: declined both", offer)
		}
	}
}

// §7: "A client MUST _Fail the WebSocket Connection_ if the peer server
// accepted an extension negotiation offer for this extension with an
// extension negotiation response meeting any of the following conditions:
// The negotiation response contains an extension parameter not defined for
// use in a response. The negotiation response contains an extension
// parameter with an invalid value. The negotiation response contains
// multiple extension parameters with the same name. The client does not
// support the configuration that the response represents."
func TestRFC7692_7_ClientFailsOnBadResponse(t *testing.T) {
	for _, resp := range []string{
		"permessage-deflate; foo",
		"permessage-deflate; server_max_window_bits",
		"permessage-deflate; server_max_window_bits=16",
		"permessage-deflate; server_max_window_bits=010",
		"permessage-deflate; client_max_window_bits",
		"permessage-deflate; client_max_window_bits=7",
		"permessage-deflate; server_no_context_takeover=x",
		"permessage-deflate; server_no_context_takeover; server_no_context_takeover",
		"permessage-deflate; client_max_window_bits=10; client_max_window_bits=10",
	} {
		if _, ok, err := ParseResponse(resp, ClientOffer{}); ok || !errors.Is(err, ErrInvalidResponse) {
			t.Errorf("ParseResponse(%q) = %v, %v; want ErrInvalidResponse", resp, ok, err)
		}
	}
	if p, ok, err := ParseResponse("", ClientOffer{}); ok || err != nil || p != (Params{}) {
		t.Errorf("empty response: %+v %v %v, want no extension and no error", p, ok, err)
	}
}

// §7.1.1.1: "A server accepts an extension negotiation offer that includes
// the "server_no_context_takeover" extension parameter by including the
// "server_no_context_takeover" extension parameter in the corresponding
// extension negotiation response" and "A server MAY include the
// "server_no_context_takeover" extension parameter in an extension
// negotiation response even if the extension negotiation offer being
// accepted by the extension negotiation response didn't include" it.
func TestRFC7692_7_1_1_1_ServerNoContextTakeover(t *testing.T) {
	takeover := ServerPolicy{ServerContextTakeover: true}
	p, resp, _ := negotiate(t, "permessage-deflate; server_no_context_takeover", takeover)
	if !p.ServerNoContextTakeover || !strings.Contains(resp, "server_no_context_takeover") {
		t.Fatalf("offered and allowed: %+v %q", p, resp)
	}
	p, resp, _ = negotiate(t, "permessage-deflate", takeover)
	if p.ServerNoContextTakeover || strings.Contains(resp, "server_no_context_takeover") {
		t.Fatalf("not offered, takeover allowed: %+v %q", p, resp)
	}
	p, resp, _ = negotiate(t, "permessage-deflate", ServerPolicy{})
	if !p.ServerNoContextTakeover || !strings.Contains(resp, "server_no_context_takeover") {
		t.Fatalf("not offered, takeover refused: %+v %q", p, resp)
	}
	// The client copes with the unsolicited parameter...
	if p, ok, err := ParseResponse("permessage-deflate; server_no_context_takeover", ClientOffer{}); !ok || err != nil || !p.ServerNoContextTakeover {
		t.Fatalf("unsolicited server_no_context_takeover: %+v %v", p, err)
	}
	// ...and fails when its own request was not accepted.
	if _, _, err := ParseResponse("permessage-deflate", ClientOffer{ServerNoContextTakeover: true}); !errors.Is(err, ErrInvalidResponse) {
		t.Fatalf("missing requested server_no_context_takeover: %v", err)
	}
}

// §7.1.1.2: "A server MAY include the "client_no_context_takeover"
// extension parameter in an extension negotiation response." — with no
// condition on the offer, so the server adds it to what Chromium sends.
// "A client MUST support the "client_no_context_takeover" extension
// parameter in an extension negotiation response."
func TestRFC7692_7_1_1_2_ClientNoContextTakeover(t *testing.T) {
	const chromium = "permessage-deflate; client_max_window_bits"
	p, resp, ok := negotiate(t, chromium, ServerPolicy{})
	want := Params{ServerNoContextTakeover: true, ClientNoContextTakeover: true, ServerMaxWindowBits: 15, ClientMaxWindowBits: 15}
	if !ok || p != want || resp != "permessage-deflate; server_no_context_takeover; client_no_context_takeover" {
		t.Fatalf("Chromium's offer: %+v %q", p, resp)
	}
	// The hint in an offer is taken: the server keeps no window for a
	// client that will not use it.
	p, resp, _ = negotiate(t, "permessage-deflate; client_no_context_takeover", ServerPolicy{ClientContextTakeover: true})
	if !p.ClientNoContextTakeover || !strings.Contains(resp, "client_no_context_takeover") {
		t.Fatalf("hint ignored: %+v %q", p, resp)
	}
	p, resp, _ = negotiate(t, "permessage-deflate", ServerPolicy{ClientContextTakeover: true})
	if p.ClientNoContextTakeover || strings.Contains(resp, "client_no_context_takeover") {
		t.Fatalf("client takeover allowed: %+v %q", p, resp)
	}
	if p, ok, err := ParseResponse("permessage-deflate; client_no_context_takeover", ClientOffer{}); !ok || err != nil || !p.ClientNoContextTakeover {
		t.Fatalf("client must support client_no_context_takeover: %+v %v", p, err)
	}
	// A client that offered the hint keeps it even when the server did
	// not answer it: it promised not to take over.
	if p, _, _ := ParseResponse("permessage-deflate", ClientOffer{ClientNoContextTakeover: true}); !p.ClientNoContextTakeover {
		t.Fatal("client's own promise dropped")
	}
}

// §7.1.2.1: the server "accepts an extension negotiation offer with this
// parameter by including the "server_max_window_bits" extension parameter
// in the extension negotiation response to send back to the client with
// the same or smaller value as the offer", "declines an extension
// negotiation offer with this parameter if the server doesn't support it",
// and "MAY include the "server_max_window_bits" extension parameter in an
// extension negotiation response even if the extension negotiation offer
// being accepted by the response didn't include" it.
func TestRFC7692_7_1_2_1_ServerMaxWindowBits(t *testing.T) {
	for bits := MinWindowBits; bits <= MaxWindowBits; bits++ {
		offer := string(AppendOffer(nil, ClientOffer{ServerMaxWindowBits: bits}))
		p, resp, ok := negotiate(t, offer, ServerPolicy{})
		if !ok || p.ServerMaxWindowBits != bits {
			t.Fatalf("window %d: %+v %q", bits, p, resp)
		}
		got, ok, err := ParseResponse(resp, ClientOffer{ServerMaxWindowBits: bits})
		if !ok || err != nil || got != p {
			t.Fatalf("window %d: client parsed %q as %+v, %v; server agreed %+v", bits, resp, got, err, p)
		}
	}
	// Window 8 honoured, never answered with 9 (what zlib-based servers
	// do, and what strict clients fail on).
	if _, resp, _ := negotiate(t, "permessage-deflate; server_max_window_bits=8", ServerPolicy{}); !strings.Contains(resp, "server_max_window_bits=8") {
		t.Fatalf("window 8: %q", resp)
	}
	// Answered smaller when the server caps its window.
	if p, resp, _ := negotiate(t, "permessage-deflate; server_max_window_bits=14", ServerPolicy{ServerMaxWindowBits: 11}); p.ServerMaxWindowBits != 11 || !strings.Contains(resp, "server_max_window_bits=11") {
		t.Fatalf("capped: %+v %q", p, resp)
	}
	// Named although not offered.
	if p, resp, _ := negotiate(t, "permessage-deflate", ServerPolicy{ServerMaxWindowBits: 12}); p.ServerMaxWindowBits != 12 || !strings.Contains(resp, "server_max_window_bits=12") {
		t.Fatalf("unsolicited: %+v %q", p, resp)
	}
	// The client refuses a larger window than it offered, and an offer
	// left unanswered.
	for _, resp := range []string{"permessage-deflate; server_max_window_bits=11", "permessage-deflate"} {
		if _, _, err := ParseResponse(resp, ClientOffer{ServerMaxWindowBits: 10}); !errors.Is(err, ErrInvalidResponse) {
			t.Errorf("ParseResponse(%q) after offering 10: %v", resp, err)
		}
	}
	// Values: 1*DIGIT, no leading zero, 8 to 15, quoted-string allowed
	// (RFC 6455 §9.1).
	for v, want := range map[string]int{"8": 8, "15": 15, `"9"`: 9, `"1\0"`: 10, "08": 0, "1": 0, "016": 0, "": 0} {
		o := "permessage-deflate; server_max_window_bits"
		if v != "" {
			o += "=" + v
		}
		p, _, ok := negotiate(t, o, ServerPolicy{})
		if ok != (want != 0) || p.ServerMaxWindowBits != want {
			t.Errorf("value %s: %+v %v, want window %d", v, p, ok, want)
		}
	}
}

// §7.1.2.2: "If a received extension negotiation offer doesn't have the
// "client_max_window_bits" extension parameter, the corresponding extension
// negotiation response to the offer MUST NOT include the
// "client_max_window_bits" extension parameter." With it, the server may
// answer "with a value equal to or smaller than the received value", and
// in a response the parameter "has a decimal integer value".
func TestRFC7692_7_1_2_2_ClientMaxWindowBits(t *testing.T) {
	policy := ServerPolicy{ClientContextTakeover: true, ClientMaxWindowBits: 10}
	// Not offered: the window cannot be limited, so the client's takeover
	// is refused instead.
	p, resp, _ := negotiate(t, "permessage-deflate", policy)
	if strings.Contains(resp, "client_max_window_bits") || !p.ClientNoContextTakeover || p.ClientMaxWindowBits != 15 {
		t.Fatalf("not offered: %+v %q", p, resp)
	}
	// Offered without a value: the server's cap.
	p, resp, _ = negotiate(t, "permessage-deflate; client_max_window_bits", policy)
	if p.ClientNoContextTakeover || p.ClientMaxWindowBits != 10 || !strings.Contains(resp, "client_max_window_bits=10") {
		t.Fatalf("offered bare: %+v %q", p, resp)
	}
	// Offered with a value: never more than it.
	p, resp, _ = negotiate(t, "permessage-deflate; client_max_window_bits=9", policy)
	if p.ClientMaxWindowBits != 9 || !strings.Contains(resp, "client_max_window_bits=9") {
		t.Fatalf("offered 9: %+v %q", p, resp)
	}
	// The client's side: a value is required, and no larger than offered.
	if _, _, err := ParseResponse("permessage-deflate; client_max_window_bits=12", ClientOffer{ClientMaxWindowBits: 11}); !errors.Is(err, ErrInvalidResponse) {
		t.Fatalf("larger than offered: %v", err)
	}
	if p, ok, err := ParseResponse("permessage-deflate; client_max_window_bits=9", ClientOffer{}); !ok || err != nil || p.ClientMaxWindowBits != 9 {
		t.Fatalf("set by the server: %+v %v", p, err)
	}
}

// §7.2.1: "If the "agreed parameters" contain the
// "server_no_context_takeover" extension parameter, the server MUST start
// compressing each new message with an empty LZ77 sliding window." So each
// message inflates alone, and the same message compresses to the same
// bytes every time.
func TestRFC7692_7_2_1_NoContextTakeoverStartsEmpty(t *testing.T) {
	for _, role := range []wsframe.Role{wsframe.Server, wsframe.Client} {
		c := mustConn(t, Params{ServerNoContextTakeover: true, ClientNoContextTakeover: true}, role, Options{})
		msg := document(1, 2000)
		first, _ := c.AppendCompressed(nil, msg)
		second, _ := c.AppendCompressed(nil, msg)
		if !bytes.Equal(first, second) {
			t.Fatalf("role %d: the second copy used the first as history", role)
		}
		if !bytes.Equal(stdInflate(t, second, nil), msg) {
			t.Fatalf("role %d: message does not inflate alone", role)
		}
	}
}

// §7.2.1: compress, append an empty stored block if the data does not end
// with one, then "Remove 4 octets (that are 0x00 0x00 0xff 0xff) from the
// tail end." The payload is a sync-flushed stream less exactly those four
// bytes, and appending them back gives a stream any inflater reads.
func TestRFC7692_7_2_1_TailRemoved(t *testing.T) {
	c := mustConn(t, Params{ServerNoContextTakeover: true}, wsframe.Server, Options{})
	msg := document(2, 1000)
	out, ok := c.AppendCompressed(nil, msg)
	if !ok {
		t.Fatal("not compressed")
	}
	var w appendWriter
	fw, _ := flate.NewWriter(&w, DefaultLevel)
	fw.Write(msg)
	fw.Flush()
	if !bytes.HasSuffix(w.b, tail) || !bytes.Equal(out, w.b[:len(w.b)-len(tail)]) {
		t.Fatalf("payload % x is not the sync-flushed stream % x less its tail", out, w.b)
	}
	got, _, err := traceInflate(append(out, tail...), nil)
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("payload plus tail does not inflate: %v", err)
	}
}

// §7.2.1: "If the "agreed parameters" contain the "server_max_window_bits"
// extension parameter with a value of w, the server MUST NOT use an LZ77
// sliding window longer than the w-th power of 2 bytes to compress messages
// to send" (and the same for the client). Checked by decoding every
// message with a decoder that reports the longest distance, on data whose
// repeats lie both inside and far outside each window, with and without
// context takeover.
func TestRFC7692_7_2_1_WindowNeverExceeded(t *testing.T) {
	// Blocks of noise each repeated once, at distances from 100 bytes to
	// 40 KiB: a compressor free to use 32 KiB finds them all. JSON in
	// front makes the whole shrink at every window.
	msg := document(5, 20000)
	for i, d := range []int{100, 300, 700, 1500, 3000, 6000, 12000, 20000, 40000} {
		blk := noise(uint64(i), 64)
		msg = append(msg, blk...)
		msg = append(msg, noise(uint64(100+i), d)...)
		msg = append(msg, blk...)
	}
	maxSeen := map[int]int{}
	for bits := MinWindowBits; bits <= MaxWindowBits; bits++ {
		for _, takeover := range []bool{false, true} {
			p := Params{ServerNoContextTakeover: !takeover, ServerMaxWindowBits: bits}
			c := mustConn(t, p, wsframe.Server, Options{TakeoverHistory: 1 << 15})
			var history []byte
			for round := range 3 {
				m := msg
				if round > 0 {
					m = msg[:20000+8000*round] // repeats earlier messages
				}
				out, ok := c.AppendCompressed(nil, m)
				if !ok {
					t.Fatalf("bits=%d: not compressed", bits)
				}
				got, dist, err := traceInflate(append(out, tail...), history)
				if err != nil || !bytes.Equal(got, m) {
					t.Fatalf("bits=%d takeover=%v round %d: %v", bits, takeover, round, err)
				}
				maxSeen[bits] = max(maxSeen[bits], dist)
				if dist > 1<<bits {
					t.Fatalf("bits=%d takeover=%v round %d: distance %d beyond the %d-byte window", bits, takeover, round, dist, 1<<bits)
				}
				if takeover {
					history = append(history, m...)
				}
			}
		}
		// The data has repeats just inside every window: a compressor
		// that stopped well short of its window would pass unnoticed.
		if maxSeen[bits] < 1<<(bits-1) {
			t.Fatalf("bits=%d: longest distance %d, the test data does not reach the window", bits, maxSeen[bits])
		}
	}
	t.Logf("longest distance per window: %v", maxSeen)
}

// The examples of §7.2.3, inflated. §7.2.2: "An endpoint uses the
// following algorithm to decompress a message. 1. Append 4 octets of 0x00
// 0x00 0xff 0xff to the tail end of the payload of the message. 2.
// Decompress the resulting data using DEFLATE."
func TestRFC7692_7_2_2_Examples(t *testing.T) {
	for _, ex := range []struct {
		section string
		payload []byte
	}{
		{"7.2.3.1 one compressed block", []byte{0xf2, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00}},
		{"7.2.3.3 a block with no compression", []byte{0x00, 0x05, 0x00, 0xfa, 0xff, 0x48, 0x65, 0x6c, 0x6c, 0x6f, 0x00}},
		{"7.2.3.4 a block with BFINAL set", []byte{0xf3, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00, 0x00}},
		{"7.2.3.5 two blocks in one message", []byte{0xf2, 0x48, 0x05, 0x00, 0x00, 0x00, 0xff, 0xff, 0xca, 0xc9, 0xc9, 0x07, 0x00}},
	} {
		c := mustConn(t, Params{}, wsframe.Client, Options{})
		got, err := c.Inflate(nil, ex.payload, 0)
		if err != nil || string(got) != "Hello" {
			t.Errorf("§%s: %q, %v", ex.section, got, err)
		}
	}
	// The whole frame of §7.2.3.1, through wsframe's decoder.
	var d wsframe.Decoder
	d.Reset(wsframe.Config{Role: wsframe.Client, Extensions: wsframe.Rsv1})
	m, _, err := d.DecodeMessage([]byte{0xc1, 0x07, 0xf2, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00}, nil)
	if err != nil || !m.Compressed {
		t.Fatalf("§7.2.3.1 frame: %+v %v", m, err)
	}
	if got, err := mustConn(t, Params{}, wsframe.Client, Options{}).Inflate(nil, m.Payload, 0); err != nil || string(got) != "Hello" {
		t.Fatalf("§7.2.3.1 frame: %q %v", got, err)
	}
}

// §7.2.2: "If the "agreed parameters" contain the
// "server_no_context_takeover" extension parameter, the client MAY
// decompress each new message with an empty LZ77 sliding window.
// Otherwise, the client MUST decompress each new message using the LZ77
// sliding window used to process the last compressed message." §7.2.3.2
// is the example: a second "Hello" that refers to the first.
func TestRFC7692_7_2_2_SharedWindow(t *testing.T) {
	first := []byte{0xf2, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00}
	second := []byte{0xf2, 0x00, 0x11, 0x00, 0x00}
	c := mustConn(t, Params{}, wsframe.Client, Options{})
	for i, payload := range [][]byte{first, second} {
		if got, err := c.Inflate(nil, payload, 0); err != nil || string(got) != "Hello" {
			t.Fatalf("message %d with takeover: %q %v", i, got, err)
		}
	}
	// Without takeover the second message refers to nothing: an error,
	// never a panic or made-up bytes.
	c = mustConn(t, Params{ServerNoContextTakeover: true}, wsframe.Client, Options{})
	c.Inflate(nil, first, 0)
	if _, err := c.Inflate(nil, second, 0); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("second message without takeover: %v", err)
	}
	// The server's side, for client_no_context_takeover absent from the
	// agreed parameters.
	s := mustConn(t, Params{ServerNoContextTakeover: true}, wsframe.Server, Options{})
	for i, payload := range [][]byte{first, second} {
		if got, err := s.Inflate(nil, payload, 0); err != nil || string(got) != "Hello" {
			t.Fatalf("server, message %d: %q %v", i, got, err)
		}
	}
}
