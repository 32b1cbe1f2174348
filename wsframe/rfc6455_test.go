package wsframe

import (
	"bytes"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// One test per MUST of RFC 6455 (and RFC 7692 §6.1 for RSV1) that this
// package implements, named by section.

// §5.1: "The server MUST close the connection upon receiving a frame that is
// not masked."
func TestRFC6455_5_1_ServerRejectsUnmaskedFrame(t *testing.T) {
	_, err := decodeAll(Config{Role: Server}, serverFrame(OpText, "hi", Fin))
	wantCode(t, err, ErrUnmaskedFrame)
	if _, err := decodeAll(Config{Role: Server}, clientFrame(OpText, "hi", Fin)); err != nil {
		t.Fatalf("masked client frame: %v", err)
	}
}

// §5.1: "A client MUST close a connection if it detects a masked frame."
func TestRFC6455_5_1_ClientRejectsMaskedFrame(t *testing.T) {
	_, err := decodeAll(Config{Role: Client}, clientFrame(OpText, "hi", Fin))
	wantCode(t, err, ErrMaskedFrame)
	if _, err := decodeAll(Config{Role: Client}, serverFrame(OpText, "hi", Fin)); err != nil {
		t.Fatalf("unmasked server frame: %v", err)
	}
}

// §5.1: "a client MUST mask all frames that it sends to the server" and "A
// server MUST NOT mask any frames that it sends to the client."
func TestRFC6455_5_1_EncodersMaskOnlyClientFrames(t *testing.T) {
	srv := [][]byte{serverFrame(OpText, "x", Fin), AppendCloseFrame(nil, CloseNormal, "bye"), FramePing, FramePong}
	for _, f := range srv {
		if f[1]&0x80 != 0 {
			t.Errorf("server frame % x has the mask bit set", f)
		}
	}
	if f := clientFrame(OpBinary, "x", Fin); f[1]&0x80 == 0 {
		t.Errorf("client frame % x lacks the mask bit", f)
	}
	p, _ := NewPrepared(OpText, []byte("x"))
	if p.Frame()[1]&0x80 != 0 {
		t.Error("prepared frame has the mask bit set")
	}
}

// §5.2: RSV1-3 "MUST be 0 unless an extension is negotiated that defines
// meanings for non-zero values".
func TestRFC6455_5_2_ReservedBitsFailConnection(t *testing.T) {
	for _, rsv := range []Flags{Rsv1, Rsv2, Rsv3} {
		_, err := decodeAll(Config{}, clientFrame(OpText, "a", Fin|rsv))
		wantCode(t, err, ErrReservedBits)
	}
	// With permessage-deflate negotiated, RSV1 marks a compressed message;
	// RSV2 and RSV3 still fail.
	cfg := Config{Extensions: Rsv1}
	msgs, err := decodeAll(cfg, clientFrame(OpText, "\xff compressed bytes", Fin|Rsv1))
	if err != nil || len(msgs) != 1 || !msgs[0].compressed {
		t.Fatalf("RSV1 with deflate: %v %+v", err, msgs)
	}
	_, err = decodeAll(cfg, clientFrame(OpText, "a", Fin|Rsv2))
	wantCode(t, err, ErrReservedBits)
}

// RFC 7692 §6.1: "An endpoint MUST NOT set the "Per-Message Compressed" bit
// of control frames and non-first fragments of a data message. An endpoint
// receiving such a frame MUST _Fail the WebSocket Connection_."
func TestRFC7692_6_1_Rsv1OnlyOnFirstFragment(t *testing.T) {
	cfg := Config{Extensions: Rsv1}
	ok := cat(clientFrame(OpText, "ab", Rsv1), clientFrame(OpContinuation, "cd", Fin))
	msgs, err := decodeAll(cfg, ok)
	if err != nil || len(msgs) != 1 || !msgs[0].compressed || msgs[0].payload != "abcd" {
		t.Fatalf("compressed fragmented message: %v %+v", err, msgs)
	}
	_, err = decodeAll(cfg, cat(clientFrame(OpText, "ab", Rsv1), clientFrame(OpContinuation, "cd", Fin|Rsv1)))
	wantCode(t, err, ErrMisplacedRsv1)
	_, err = decodeAll(cfg, clientFrame(OpPing, "", Fin|Rsv1))
	wantCode(t, err, ErrMisplacedRsv1)
}

// §5.2: "If an unknown opcode is received, the receiving endpoint MUST
// _Fail the WebSocket Connection_."
func TestRFC6455_5_2_ReservedOpcodesFailConnection(t *testing.T) {
	for op := Opcode(0); op <= 0xF; op++ {
		_, err := decodeAll(Config{}, clientFrame(op, "", Fin))
		if op.IsReserved() {
			wantCode(t, err, ErrReservedOpcode)
			continue
		}
		if errors.Is(err, ErrReservedOpcode) {
			t.Errorf("opcode %v rejected as reserved", op)
		}
	}
}

// §5.2: the 64-bit length's "most significant bit MUST be 0".
func TestRFC6455_5_2_LengthMSBMustBeZero(t *testing.T) {
	in := []byte{0x82, 0xFF, 0x80, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4}
	_, _, err := ParseHeader(in)
	wantCode(t, err, ErrLengthMSB)
	_, err = decodeAll(Config{}, in)
	wantCode(t, err, ErrLengthMSB)
}

// §5.2: "in all cases, the minimal number of bytes MUST be used to encode
// the length, for example, the length of a 124-byte-long string can't be
// encoded as the sequence 126, 0, 124."
func TestRFC6455_5_2_MinimalLengthEncoding(t *testing.T) {
	_, _, err := ParseHeader([]byte{0x81, 126, 0, 124})
	wantCode(t, err, ErrNonMinimalLength)
	_, _, err = ParseHeader([]byte{0x81, 127, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF})
	wantCode(t, err, ErrNonMinimalLength)
	for _, c := range []struct {
		length int64
		size   int
	}{{0, 2}, {125, 2}, {126, 4}, {0xFFFF, 4}, {0x10000, 10}, {1 << 40, 10}} {
		b := AppendHeader(nil, Header{Flags: Fin, Opcode: OpBinary, Length: c.length})
		if len(b) != c.size || HeaderSize(c.length, false) != c.size {
			t.Errorf("length %d: header % x, want %d bytes", c.length, b, c.size)
		}
		if h, _, err := ParseHeader(b); err != nil || h.Length != c.length {
			t.Errorf("length %d: parsed %+v, %v", c.length, h, err)
		}
	}
}

// §5.3: "Octet i of the transformed data ("transformed-octet-i") is the XOR
// of octet i of the original data ("original-octet-i") with octet at index
// i modulo 4 of the masking key".
func TestRFC6455_5_3_MaskingTransform(t *testing.T) {
	data := make([]byte, 200)
	for i := range data {
		data[i] = byte(i * 7)
	}
	for n := 0; n <= len(data); n++ {
		for off := 0; off < 8; off++ {
			got := append([]byte(nil), data[:n]...)
			next := Mask(got, testKey, off)
			for i := range got {
				if want := data[i] ^ testKey[(off+i)%4]; got[i] != want {
					t.Fatalf("n=%d off=%d: octet %d = %#x, want %#x", n, off, i, got[i], want)
				}
			}
			if next != (off+n)%4 {
				t.Fatalf("n=%d off=%d: next offset %d", n, off, next)
			}
			Mask(got, testKey, off) // the same algorithm unmasks
			if !bytes.Equal(got, data[:n]) {
				t.Fatalf("n=%d off=%d: masking twice is not the identity", n, off)
			}
		}
	}
}

// §5.3: "When preparing a masked frame, the client MUST pick a fresh
// masking key from the set of allowed 32-bit values." NewMaskKey draws from
// ChaCha8 seeded from crypto/rand: 1000 keys from a 2^32 space collide with probability ~1e-4,
// so more than two repeats means the keys are not fresh.
func TestRFC6455_5_3_FreshMaskKeys(t *testing.T) {
	seen := make(map[[4]byte]bool)
	repeats := 0
	for range 1000 {
		k := NewMaskKey()
		if seen[k] {
			repeats++
		}
		seen[k] = true
	}
	if repeats > 2 {
		t.Fatalf("%d repeated keys in 1000", repeats)
	}
}

// §5.4: "Clients and servers MUST support receiving both fragmented and
// unfragmented messages."
func TestRFC6455_5_4_FragmentedAndUnfragmentedMessages(t *testing.T) {
	in := cat(
		clientFrame(OpText, "whole", Fin),
		clientFrame(OpBinary, "fr", 0),
		clientFrame(OpContinuation, "", 0),
		clientFrame(OpContinuation, "ag", 0),
		clientFrame(OpContinuation, "ments", Fin),
	)
	msgs, err := decodeAll(Config{}, in)
	want := []got{{op: OpText, payload: "whole"}, {op: OpBinary, payload: "fragments"}}
	if err != nil || len(msgs) != 2 || msgs[0] != want[0] || msgs[1] != want[1] {
		t.Fatalf("got %+v, %v; want %+v", msgs, err, want)
	}
}

// §5.4: "An endpoint MUST be capable of handling control frames in the
// middle of a fragmented message."
func TestRFC6455_5_4_ControlFramesInsideFragmentedMessage(t *testing.T) {
	in := cat(
		clientFrame(OpText, "Hel", 0),
		clientFrame(OpPing, "p1", Fin),
		clientFrame(OpContinuation, "lo", 0),
		clientFrame(OpPong, "p2", Fin),
		clientFrame(OpContinuation, "!", Fin),
		clientFrame(OpClose, "\x03\xe8bye", Fin),
	)
	msgs, err := decodeAll(Config{}, in)
	want := []got{
		{op: OpPing, payload: "p1"},
		{op: OpPong, payload: "p2"},
		{op: OpText, payload: "Hello!"},
		{op: OpClose, code: CloseNormal, payload: "\x03\xe8bye"},
	}
	if err != nil || len(msgs) != len(want) {
		t.Fatalf("got %+v, %v", msgs, err)
	}
	for i := range want {
		if msgs[i] != want[i] {
			t.Errorf("message %d = %+v, want %+v", i, msgs[i], want[i])
		}
	}
}

// §5.4: a fragmented message starts with "a single frame with the FIN bit
// clear and an opcode other than 0": a continuation with no message to
// continue fails.
func TestRFC6455_5_4_ContinuationWithoutStart(t *testing.T) {
	_, err := decodeAll(Config{}, clientFrame(OpContinuation, "x", Fin))
	wantCode(t, err, ErrUnexpectedContinuation)
	_, err = decodeAll(Config{}, cat(clientFrame(OpText, "a", Fin), clientFrame(OpContinuation, "b", 0)))
	wantCode(t, err, ErrUnexpectedContinuation)
}

// §5.4: "The fragments of one message MUST NOT be interleaved between the
// fragments of another message unless an extension has been negotiated that
// can interpret the interleaving."
func TestRFC6455_5_4_NoInterleavedMessages(t *testing.T) {
	for _, op := range []Opcode{OpText, OpBinary} {
		_, err := decodeAll(Config{}, cat(clientFrame(OpText, "a", 0), clientFrame(op, "b", Fin)))
		wantCode(t, err, ErrExpectedContinuation)
	}
}

// §5.5: "All control frames MUST have a payload length of 125 bytes or
// less".
func TestRFC6455_5_5_ControlFrameMax125(t *testing.T) {
	for _, op := range []Opcode{OpPing, OpPong, OpClose} {
		body := strings.Repeat("a", 125)
		if op == OpClose {
			body = "\x03\xe8" + strings.Repeat("a", 123)
		}
		if _, err := decodeAll(Config{}, clientFrame(op, body, Fin)); err != nil {
			t.Errorf("%v of 125 bytes: %v", op, err)
		}
		_, err := decodeAll(Config{}, clientFrame(op, body+"a", Fin))
		wantCode(t, err, ErrControlTooLong)
	}
}

// §5.5: control frames "MUST NOT be fragmented".
func TestRFC6455_5_5_ControlFramesNotFragmented(t *testing.T) {
	for _, op := range []Opcode{OpPing, OpPong, OpClose} {
		_, err := decodeAll(Config{}, clientFrame(op, "", 0))
		wantCode(t, err, ErrFragmentedControl)
	}
}

// §5.5, on the sending side: the frame encoders build no control frame
// over 125 bytes or fragmented; asked to, they panic (a bug in the caller,
// which the peer would answer by failing the connection).
func TestRFC6455_5_5_EncodersBuildNoInvalidControlFrame(t *testing.T) {
	encoders := map[string]func(op Opcode, payload []byte, flags Flags) []byte{
		"AppendFrame": func(op Opcode, payload []byte, flags Flags) []byte { return AppendFrame(nil, op, payload, flags) },
		"AppendMaskedFrame": func(op Opcode, payload []byte, flags Flags) []byte {
			return AppendMaskedFrame(nil, op, payload, flags, testKey)
		},
	}
	panics := func(f func()) (p any) {
		defer func() { p = recover() }()
		f()
		return nil
	}
	for name, encode := range encoders {
		for _, op := range []Opcode{OpPing, OpPong, OpClose} {
			if p := panics(func() { encode(op, make([]byte, 125), Fin) }); p != nil {
				t.Errorf("%s: %v of 125 bytes: %v", name, op, p)
			}
			if p := panics(func() { encode(op, make([]byte, 126), Fin) }); p == nil {
				t.Errorf("%s built a %v frame of 126 bytes", name, op)
			}
			if p := panics(func() { encode(op, nil, 0) }); p == nil {
				t.Errorf("%s built a %v frame without FIN", name, op)
			}
		}
		// Data frames of any length and fragments are theirs to build.
		if p := panics(func() { encode(OpBinary, make([]byte, 126), 0) }); p != nil {
			t.Errorf("%s: a binary fragment of 126 bytes: %v", name, p)
		}
	}
}

// §5.5.1: "If there is a body, the first two bytes of the body MUST be a
// 2-byte unsigned integer (in network byte order) representing a status
// code with value /code/ defined in Section 7.4."
func TestRFC6455_5_5_1_CloseBody(t *testing.T) {
	cases := []struct {
		body string
		code CloseCode
		err  *ProtocolError
	}{
		{"", CloseNoStatus, nil},
		{"\x03", 0, ErrInvalidClosePayload},
		{"\x03\xe8", CloseNormal, nil},
		{"\x03\xe8fine", CloseNormal, nil},
		{"\x0f\xa0", 4000, nil},
		{"\x03\xed", 0, ErrInvalidCloseCode},        // 1005
		{"\x03\xe7", 0, ErrInvalidCloseCode},        // 999
		{"\x03\xe8\xff", 0, ErrInvalidUTF8},         // reason not UTF-8
		{"\x03\xe8\xce\xba\xe1", 0, ErrInvalidUTF8}, // reason cut mid-character
	}
	for _, c := range cases {
		msgs, err := decodeAll(Config{}, clientFrame(OpClose, c.body, Fin))
		if c.err != nil {
			wantCode(t, err, c.err)
			continue
		}
		if err != nil || len(msgs) != 1 || msgs[0].code != c.code {
			t.Errorf("body %q: %+v, %v; want code %d", c.body, msgs, err, c.code)
		}
	}
	m := Message{Opcode: OpClose, Payload: []byte("\x03\xe8bye")}
	if string(m.CloseReason()) != "bye" {
		t.Errorf("CloseReason = %q", m.CloseReason())
	}
}

// §5.5.1: "The application MUST NOT send any more data frames after
// sending a Close frame": after the peer's close the decoder reports the end
// of its stream and ignores whatever follows.
func TestRFC6455_5_5_1_NothingAfterClose(t *testing.T) {
	in := cat(clientFrame(OpClose, "\x03\xe8", Fin), clientFrame(OpText, "late", Fin))
	d := NewDecoder(Config{})
	m, n, err := d.DecodeMessage(in, nil)
	if err != nil || m.Opcode != OpClose {
		t.Fatalf("first message: %+v, %v", m, err)
	}
	if _, _, err := d.DecodeMessage(in[n:], nil); err != io.EOF {
		t.Fatalf("after close: %v, want io.EOF", err)
	}
}

// §5.5.2: "Upon receipt of a Ping frame, an endpoint MUST send a Pong frame
// in response" and §5.5.3: "A Pong frame sent in response to a Ping frame
// must have identical "Application data"". The decoder hands the ping's
// payload to the application, which answers with it.
func TestRFC6455_5_5_2_PongEchoesPing(t *testing.T) {
	d := NewDecoder(Config{})
	m, _, err := d.DecodeMessage(clientFrame(OpPing, "are you there?", Fin), nil)
	if err != nil || m.Opcode != OpPing {
		t.Fatalf("ping: %+v, %v", m, err)
	}
	pong := AppendFrame(nil, OpPong, m.Payload, Fin)
	msgs, err := decodeAll(Config{Role: Client}, pong)
	if err != nil || len(msgs) != 1 || msgs[0].op != OpPong || msgs[0].payload != "are you there?" {
		t.Fatalf("pong: %+v, %v", msgs, err)
	}
}

// §5.6: "a particular text frame might include a partial UTF-8 sequence;
// however, the whole message MUST contain valid UTF-8."
func TestRFC6455_5_6_TextMessageMustBeValidUTF8(t *testing.T) {
	// "κόσμε" split inside its characters across three fragments.
	in := cat(clientFrame(OpText, "\xce", 0), clientFrame(OpContinuation, "\xba\xe1\xbd", 0), clientFrame(OpContinuation, "\xb9\xcf\x83\xce\xbc\xce\xb5", Fin))
	msgs, err := decodeAll(Config{}, in)
	if err != nil || len(msgs) != 1 || msgs[0].payload != "\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5" {
		t.Fatalf("split characters: %+v, %v", msgs, err)
	}
	// A message that ends inside a character is invalid.
	_, err = decodeAll(Config{}, cat(clientFrame(OpText, "ok", 0), clientFrame(OpContinuation, "\xce", Fin)))
	wantCode(t, err, ErrInvalidUTF8)
	// Binary messages are not text.
	if _, err := decodeAll(Config{}, clientFrame(OpBinary, "\xff\xfe", Fin)); err != nil {
		t.Fatalf("binary: %v", err)
	}
	// A compressed text message is validated after inflating, not here.
	if _, err := decodeAll(Config{Extensions: Rsv1}, clientFrame(OpText, "\xff\xfe", Fin|Rsv1)); err != nil {
		t.Fatalf("compressed text: %v", err)
	}
}

// §5.7: the examples, byte for byte, encoded and decoded.
func TestRFC6455_5_7_Examples(t *testing.T) {
	unhex := func(s string) []byte {
		b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	hello := []byte("Hello")
	cases := []struct {
		name    string
		wire    []byte
		encoded []byte
		role    Role
		want    []got
	}{
		{"single-frame unmasked text", unhex("81 05 48 65 6c 6c 6f"), AppendFrame(nil, OpText, hello, Fin), Client,
			[]got{{op: OpText, payload: "Hello"}}},
		{"single-frame masked text", unhex("81 85 37 fa 21 3d 7f 9f 4d 51 58"), AppendMaskedFrame(nil, OpText, hello, Fin, testKey), Server,
			[]got{{op: OpText, payload: "Hello"}}},
		{"fragmented unmasked text", unhex("01 03 48 65 6c 80 02 6c 6f"), cat(AppendFrame(nil, OpText, hello[:3], 0), AppendFrame(nil, OpContinuation, hello[3:], Fin)), Client,
			[]got{{op: OpText, payload: "Hello"}}},
		{"unmasked ping", unhex("89 05 48 65 6c 6c 6f"), AppendFrame(nil, OpPing, hello, Fin), Client,
			[]got{{op: OpPing, payload: "Hello"}}},
		{"masked pong", unhex("8a 85 37 fa 21 3d 7f 9f 4d 51 58"), AppendMaskedFrame(nil, OpPong, hello, Fin, testKey), Server,
			[]got{{op: OpPong, payload: "Hello"}}},
		{"256 bytes binary", append(unhex("82 7E 0100"), make([]byte, 256)...), AppendFrame(nil, OpBinary, make([]byte, 256), Fin), Client,
			[]got{{op: OpBinary, payload: string(make([]byte, 256))}}},
		{"64KiB binary", append(unhex("82 7F 0000000000010000"), make([]byte, 65536)...), AppendFrame(nil, OpBinary, make([]byte, 65536), Fin), Client,
			[]got{{op: OpBinary, payload: string(make([]byte, 65536))}}},
	}
	for _, c := range cases {
		if !bytes.Equal(c.encoded, c.wire) {
			t.Errorf("%s: encoded % x, want % x", c.name, c.encoded, c.wire)
		}
		msgs, err := decodeAll(Config{Role: c.role}, c.wire)
		if err != nil || len(msgs) != len(c.want) || msgs[0] != c.want[0] {
			t.Errorf("%s: decoded %v, %v", c.name, len(msgs), err)
		}
	}
}

// §7.4.1 and §7.4.2: which codes may be on the wire. 1005, 1006 and 1015
// "MUST NOT be set as a status code in a Close control frame by an
// endpoint"; 0-999 are "not used"; 1000-2999 are "reserved for definition
// by this protocol" (1012-1014 have been defined since, in the IANA
// registry); 3000-4999 are for libraries, applications and private use.
func TestRFC6455_7_4_ValidCloseCodes(t *testing.T) {
	valid := map[CloseCode]bool{}
	for _, c := range []CloseCode{1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014} {
		valid[c] = true
	}
	for c := 3000; c <= 4999; c++ {
		valid[CloseCode(c)] = true
	}
	for c := 0; c <= 0xFFFF; c++ {
		if got := ValidCloseCode(CloseCode(c)); got != valid[CloseCode(c)] {
			t.Errorf("ValidCloseCode(%d) = %v", c, got)
		}
	}
	// The Autobahn 7.7.x and 7.9.x codes.
	for _, c := range []CloseCode{1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 3000, 3999, 4000, 4999} {
		if !ValidCloseCode(c) {
			t.Errorf("Autobahn 7.7.x code %d rejected", c)
		}
	}
	for _, c := range []CloseCode{0, 999, 1004, 1005, 1006, 1016, 1100, 2000, 2999} {
		if ValidCloseCode(c) {
			t.Errorf("Autobahn 7.9.x code %d accepted", c)
		}
	}
}

// §7.4.1: 1005, 1006 and 1015 "MUST NOT be set as a status code in a Close
// control frame by an endpoint": the encoders send an empty body instead.
func TestRFC6455_7_4_1_ReservedCodesNeverSent(t *testing.T) {
	for _, c := range []CloseCode{CloseNoStatus, CloseAbnormal, CloseTLSHandshake, 0, 1004, 2000} {
		if p := AppendClosePayload(nil, c, "why"); len(p) != 0 {
			t.Errorf("AppendClosePayload(%d) = % x, want empty", c, p)
		}
		if f := AppendCloseFrame(nil, c, "why"); !bytes.Equal(f, FrameClose) {
			t.Errorf("AppendCloseFrame(%d) = % x, want % x", c, f, FrameClose)
		}
	}
}

// §8.1: "When an endpoint is to interpret a byte stream as UTF-8 but finds
// that the byte stream is not, in fact, a valid UTF-8 stream, that endpoint
// MUST _Fail the WebSocket Connection_." The decoder fails as soon as the
// bytes that make the text invalid arrive: on the fragment that holds them
// (Autobahn 6.4.1/6.4.2), and inside a frame whose end has not arrived yet
// (Autobahn 6.4.3/6.4.4).
func TestRFC6455_8_1_InvalidUTF8FailsFast(t *testing.T) {
	// κόσμε, then the surrogate ED A0 80, then "edited": Autobahn 6.4.x.
	valid, bad, rest := "\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5", "\xed\xa0\x80", "edited"

	t.Run("fragments", func(t *testing.T) {
		d := NewDecoder(Config{})
		_, n, err := d.DecodeMessage(clientFrame(OpText, valid, 0), nil)
		if !errors.Is(err, ErrNeedMore) || n == 0 {
			t.Fatalf("first fragment: n=%d %v", n, err)
		}
		_, _, err = d.DecodeMessage(clientFrame(OpContinuation, bad, 0), nil)
		wantCode(t, err, ErrInvalidUTF8)
	})

	t.Run("chunks of one frame", func(t *testing.T) {
		cut1 := 6 + len(valid) // header, then the valid part
		cut2 := cut1 + 2       // ED A0: already impossible
		for _, path := range []string{"slice", "source"} {
			frame := clientFrame(OpText, valid+bad+rest, Fin) // decoding unmasks in place
			d := NewDecoder(Config{})
			if path == "slice" {
				if _, _, err := d.DecodeFrame(frame[:cut1]); !errors.Is(err, ErrNeedMore) {
					t.Fatalf("%s: valid chunk: %v", path, err)
				}
				_, _, err := d.DecodeFrame(frame[:cut2])
				wantCode(t, err, ErrInvalidUTF8)
				continue
			}
			q := newFakeQueue(frame[:cut1], 3, 9)
			if _, err := d.NextFrame(q); !errors.Is(err, ErrNeedMore) {
				t.Fatalf("%s: valid chunk: %v", path, err)
			}
			q.Push(frame[cut1:cut2])
			_, err := d.NextFrame(q)
			wantCode(t, err, ErrInvalidUTF8)
		}
	})
}

// §10.4: implementations "MUST protect themselves against exceeding those
// limits" of frame size and "total message size after reassembly", and the
// RFC names the "long stream of small frames" attack. Each limit fails with
// 1009 on the header, before the payload is buffered.
func TestRFC6455_10_4_Limits(t *testing.T) {
	cfg := Config{MaxFrameSize: 10, MaxMessageSize: 25, MaxFragments: 3}
	cases := []struct {
		name string
		in   []byte
		err  *ProtocolError
	}{
		{"frame at the limit", clientFrame(OpBinary, "0123456789", Fin), nil},
		{"frame over the limit", clientFrame(OpBinary, "0123456789a", Fin), ErrFrameTooBig},
		{"message at the limit", cat(clientFrame(OpBinary, "0123456789", 0), clientFrame(OpContinuation, "0123456789", 0), clientFrame(OpContinuation, "01234", Fin)), nil},
		{"message over the limit", cat(clientFrame(OpBinary, "0123456789", 0), clientFrame(OpContinuation, "0123456789", 0), clientFrame(OpContinuation, "012345", Fin)), ErrMessageTooBig},
		{"fragments over the limit", cat(clientFrame(OpBinary, "a", 0), clientFrame(OpContinuation, "", 0), clientFrame(OpContinuation, "", 0), clientFrame(OpContinuation, "", Fin)), ErrTooManyFragments},
	}
	for _, c := range cases {
		_, err := decodeAll(cfg, c.in)
		if c.err == nil {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		wantCode(t, err, c.err)
	}
	// A header announcing 2^60 bytes fails before any payload arrives.
	huge := AppendHeader(nil, Header{Flags: Fin, Opcode: OpBinary, Masked: true, Length: 1 << 60})
	_, _, err := NewDecoder(Config{}).DecodeFrame(huge)
	wantCode(t, err, ErrFrameTooBig)
}

// §5.3 again, for keys drawn by many goroutines at once: each pooled
// generator has a seed of its own, so concurrent writers never repeat one
// another's keys (4 × 2000 keys collide by chance with probability ~4e-3).
func TestRFC6455_5_3_FreshMaskKeysConcurrently(t *testing.T) {
	const writers, each = 4, 2000
	keys := make(chan [4]byte, writers*each)
	var wg sync.WaitGroup
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				keys <- NewMaskKey()
			}
		}()
	}
	wg.Wait()
	close(keys)
	seen := make(map[[4]byte]bool)
	repeats := 0
	for k := range keys {
		if seen[k] {
			repeats++
		}
		seen[k] = true
	}
	if repeats > 2 {
		t.Fatalf("%d repeated keys in %d", repeats, writers*each)
	}
}

// §5.2: "If an unknown opcode is received, the receiving endpoint MUST
// _Fail the WebSocket Connection_", and a 64-bit length's "most
// significant bit MUST be 0". The encoders refuse to build either (a bug
// in the caller): a reserved opcode, one past 4 bits (which was cut to
// its low bits, 0x12 becoming a binary frame), a negative length.
func TestRFC6455_5_2_EncodersBuildNoReservedOpcodeOrNegativeLength(t *testing.T) {
	panics := func(f func()) (p any) {
		defer func() { p = recover() }()
		f()
		return nil
	}
	for _, op := range []Opcode{0x3, 0x7, 0xB, 0xF, 0x12} {
		if p := panics(func() { AppendFrame(nil, op, nil, Fin) }); p == nil {
			t.Errorf("AppendFrame built a frame with opcode %#x", byte(op))
		}
		if p := panics(func() { AppendMaskedFrame(nil, op, nil, Fin, testKey) }); p == nil {
			t.Errorf("AppendMaskedFrame built a frame with opcode %#x", byte(op))
		}
	}
	if p := panics(func() { AppendHeader(nil, Header{Flags: Fin, Opcode: OpBinary, Length: -1}) }); p == nil {
		t.Error("AppendHeader encoded a negative length")
	}
}

// §8.1 and §7.1.6: a close reason is UTF-8, which a peer checks (failing
// the connection with 1007 otherwise). The close builders replace invalid
// bytes, and a prepared close must be a body a peer accepts (§5.5.1: none,
// or a 2-byte code and a reason).
func TestRFC6455_8_1_CloseBuildersSendValidUTF8(t *testing.T) {
	frame := AppendCloseFrame(nil, CloseNormal, "bad \xff\xfe reason")
	if !utf8.Valid(frame[4:]) {
		t.Fatalf("close frame reason %q is not UTF-8", frame[4:])
	}
	if _, reason, err := ParseClosePayload(AppendClosePayload(nil, CloseNormal, "x\xff")); err != nil || string(reason) != "x\uFFFD" {
		t.Fatalf("close payload reason %q, %v", reason, err)
	}
	long := strings.Repeat("\xff", 200) // each byte grows to three
	if frame := AppendCloseFrame(nil, CloseNormal, long); len(frame) > 2+MaxControlPayload || !utf8.Valid(frame[4:]) {
		t.Fatalf("close frame of %d bytes for an invalid reason of 200", len(frame))
	}
	for _, body := range [][]byte{{1}, {0x03, 0xed}, append([]byte{0x03, 0xe8}, 0xff)} {
		if _, err := NewPrepared(OpClose, body); !errors.Is(err, ErrPreparedOpcode) {
			t.Errorf("NewPrepared(OpClose, %x): %v, want ErrPreparedOpcode", body, err)
		}
	}
	if _, err := NewPrepared(OpClose, AppendClosePayload(nil, CloseGoingAway, "bye")); err != nil {
		t.Errorf("NewPrepared of a valid close: %v", err)
	}
}
