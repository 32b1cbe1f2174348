package wsframe

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParseHeader: whatever ParseHeader accepts, AppendHeader writes back
// byte for byte (the encoding is canonical), and any header built from the
// fuzzer's values survives AppendHeader then ParseHeader.
func FuzzParseHeader(f *testing.F) {
	f.Add([]byte{0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d}, byte(0x81), uint64(5), true, uint32(0x3d21fa37))
	f.Add([]byte{0x82, 0x7E, 0x01, 0x00}, byte(0x02), uint64(256), false, uint32(0))
	f.Add([]byte{0x82, 0x7F, 0, 0, 0, 0, 0, 1, 0, 0}, byte(0x82), uint64(65536), false, uint32(0))
	f.Add([]byte{0x82, 0x7E, 0x00, 0x7D}, byte(0xF9), uint64(1)<<62, true, uint32(1))
	f.Fuzz(func(t *testing.T, data []byte, b0 byte, length uint64, masked bool, key uint32) {
		h, n, err := ParseHeader(data)
		switch {
		case errors.Is(err, ErrShortHeader):
			if n <= len(data) || n > MaxHeaderSize {
				t.Fatalf("short header % x: needs %d", data, n)
			}
		case err != nil:
			if CloseCodeOf(err) != CloseProtocolError {
				t.Fatalf("% x: %v", data, err)
			}
		default:
			if out := AppendHeader(nil, h); !bytes.Equal(out, data[:n]) {
				t.Fatalf("% x parsed as %+v, written back as % x", data[:n], h, out)
			}
		}

		built := Header{Flags: Flags(b0) & 0xF0, Opcode: Opcode(b0 & 0xF), Masked: masked, Length: int64(length >> 1)}
		if masked {
			binary.LittleEndian.PutUint32(built.Key[:], key)
		}
		wire := AppendHeader(nil, built)
		back, n, err := ParseHeader(wire)
		if err != nil || n != len(wire) || back != built || n != HeaderSize(built.Length, masked) {
			t.Fatalf("%+v: wire % x parsed as %+v n=%d %v", built, wire, back, n, err)
		}
	})
}

// fuzzConfig derives a decoder configuration with small limits from one
// byte, so that the limits are actually reached.
func fuzzConfig(c byte) Config {
	cfg := Config{
		MaxFrameSize:   int64(c>>2&7) * 40,     // 0 (default) to 280
		MaxMessageSize: int64(c>>5&7) * 100,    // 0 (default) to 700
		MaxFragments:   int(c>>2&3) + int(c&1), // 0 (default) to 4
	}
	if c&1 != 0 {
		cfg.Role = Client
	}
	if c&2 != 0 {
		cfg.Extensions = Rsv1
	}
	return cfg
}

// fuzzRun is the outcome of decoding one input one way: the messages,
// with fragment counts, and the error that ended it.
type fuzzRun struct {
	msgs []got
	err  error
}

// decodeFramesChecked decodes in with the frame API, fed in pieces cut at
// the given points, and checks every limit on every frame and message.
func decodeFramesChecked(t *testing.T, cfg Config, in []byte, cuts []byte) fuzzRun {
	d := NewDecoder(cfg)
	maxMsg, maxFrame, maxFrags := d.maxMessage(), d.maxFrame(), d.maxFragments()
	var run fuzzRun
	var pending, msg []byte
	frags := 0
	var op Opcode
	var compressed bool
	feed := 0
	for i := 0; ; i++ {
		step := len(in) - feed
		if i < len(cuts) {
			step = min(step, int(cuts[i]))
		}
		pending = append(pending, in[feed:feed+step]...)
		feed += step
		for {
			f, n, err := d.DecodeFrame(pending)
			pending = pending[n:]
			if errors.Is(err, ErrNeedMore) && feed < len(in) {
				break
			}
			if err != nil {
				run.err = err
				return run
			}
			h := f.Header
			if int64(len(f.Payload)) != h.Length || (!h.Opcode.IsControl() && h.Length > maxFrame) || h.Masked != (cfg.Role == Server) {
				t.Fatalf("frame %+v with %d bytes breaks the limits or the role", h, len(f.Payload))
			}
			if h.Opcode.IsControl() {
				if len(f.Payload) > MaxControlPayload || !h.Fin() {
					t.Fatalf("control frame %+v", h)
				}
				var code CloseCode
				if h.Opcode == OpClose {
					code, _, err = ParseClosePayload(f.Payload)
					if err != nil {
						t.Fatalf("close frame accepted with a bad body: %v", err)
					}
				}
				run.msgs = append(run.msgs, got{h.Opcode, false, code, string(f.Payload)})
				continue
			}
			if h.Opcode != OpContinuation {
				op, compressed, frags, msg = h.Opcode, h.Flags&Rsv1 != 0, 0, msg[:0]
			}
			frags++
			msg = append(msg, f.Payload...)
			if frags > maxFrags || int64(len(msg)) > maxMsg {
				t.Fatalf("message of %d fragments, %d bytes passed the limits", frags, len(msg))
			}
			if h.Fin() {
				if op == OpText && !compressed && !utf8.Valid(msg) {
					t.Fatalf("invalid UTF-8 text accepted: %q", msg)
				}
				run.msgs = append(run.msgs, got{op, compressed, 0, string(msg)})
			}
		}
	}
}

// decodeSourceCut decodes in with the message API from a Source that
// receives in as segments cut at the given points, one segment at a time.
func decodeSourceCut(cfg Config, in []byte, cuts []byte) fuzzRun {
	d := NewDecoder(cfg)
	q := &fakeQueue{}
	var buf []byte
	var run fuzzRun
	feed := 0
	for i := 0; ; i++ {
		step := len(in) - feed
		if i < len(cuts) {
			step = min(step, int(cuts[i]))
		}
		q.Push(in[feed : feed+step])
		feed += step
		for {
			m, err := d.NextMessage(q, &buf)
			if errors.Is(err, ErrNeedMore) && feed < len(in) {
				break
			}
			if err != nil {
				run.err = err
				return run
			}
			run.msgs = append(run.msgs, got{m.Opcode, m.Compressed, m.CloseCode, string(m.Payload)})
		}
	}
}

// FuzzDecoder: on arbitrary input cut at arbitrary points, the decoder
// never panics, every frame and message it returns honours every limit and
// rule, every error is ErrNeedMore, io.EOF or a *ProtocolError with a close
// code, and the slice, frame-by-frame and Source paths agree.
func FuzzDecoder(f *testing.F) {
	stream, _ := mixedStream()
	f.Add(stream[:300], []byte{1, 2, 3, 50}, byte(0))
	f.Add(cat(clientFrame(OpText, "Hel", 0), clientFrame(OpPing, "x", Fin), clientFrame(OpContinuation, "lo", Fin)), []byte{7}, byte(0x24))
	f.Add(cat(serverFrame(OpBinary, "abc", Rsv1), serverFrame(OpContinuation, "def", Fin)), []byte{2, 2}, byte(0x03))
	f.Add(clientFrame(OpText, "\xce\xba\xed\xa0\x80", Fin), []byte{8, 1}, byte(0))
	f.Add(clientFrame(OpClose, "\x03\xe8bye", Fin), []byte{}, byte(0xE4))
	f.Add([]byte{0x82, 0xFF, 0, 0, 0, 0, 0, 1, 0, 0}, []byte{3}, byte(0))
	f.Fuzz(func(t *testing.T, in []byte, cuts []byte, c byte) {
		cfg := fuzzConfig(c)
		frames := decodeFramesChecked(t, cfg, append([]byte(nil), in...), cuts)
		source := decodeSourceCut(cfg, append([]byte(nil), in...), cuts)
		whole, err := decodeAll(cfg, append([]byte(nil), in...))
		runs := map[string]fuzzRun{"frames": frames, "source": source, "whole": {whole, err}}
		for name, r := range runs {
			if normalizeEnd(t, r.err) != normalizeEnd(t, source.err) {
				t.Fatalf("%s ended with %v, source with %v", name, r.err, source.err)
			}
			if len(r.msgs) != len(source.msgs) {
				t.Fatalf("%s: %d messages, source %d", name, len(r.msgs), len(source.msgs))
			}
			for i := range r.msgs {
				if r.msgs[i] != source.msgs[i] {
					t.Fatalf("%s: message %d differs", name, i)
				}
			}
		}
	})
}

// normalizeEnd maps the error that ended a run to the protocol error it
// carries, or nil when the input simply ran out (ErrNeedMore, or io.EOF
// after a close frame). Any other error fails the test.
func normalizeEnd(t *testing.T, err error) *ProtocolError {
	var pe *ProtocolError
	switch {
	case errors.As(err, &pe):
		return pe
	case err == nil, errors.Is(err, ErrNeedMore), errors.Is(err, io.EOF):
		return nil
	}
	t.Fatalf("error without a close code: %v", err)
	return nil
}

// FuzzUTF8Stream: fed in pieces cut anywhere, the streaming validator
// agrees with utf8.Valid and fails on the piece holding the first byte
// after which the input cannot be completed.
func FuzzUTF8Stream(f *testing.F) {
	for _, s := range utf8Cases {
		f.Add([]byte(s), []byte{1, 3})
	}
	f.Fuzz(func(t *testing.T, p []byte, rawCuts []byte) {
		cuts := make([]int, len(rawCuts))
		for i, c := range rawCuts {
			cuts[i] = int(c) % (len(p) + 1)
		}
		checkStream(t, p, cuts)
		if ValidUTF8(p) != utf8.Valid(p) {
			t.Fatalf("ValidUTF8(% x) = %v", p, ValidUTF8(p))
		}
	})
}

// FuzzMask: Mask at any offset, over a payload cut at any points, the
// portable word loop on its own, and unmasking fused with the ASCII check
// all equal the byte-at-a-time definition of RFC 6455 §5.3.
func FuzzMask(f *testing.F) {
	f.Add([]byte("Hello"), uint32(0x3d21fa37), uint8(0), []byte{})
	f.Add(make([]byte, 100), uint32(0xdeadbeef), uint8(3), []byte{1, 7, 33})
	f.Add(make([]byte, 300), uint32(0x01020304), uint8(2), []byte{65, 64, 3})
	f.Fuzz(func(t *testing.T, data []byte, key32 uint32, offset uint8, cuts []byte) {
		var key [4]byte
		binary.LittleEndian.PutUint32(key[:], key32)
		want := append([]byte(nil), data...)
		for i := range want {
			want[i] ^= key[(int(offset)+i)%4]
		}
		got := append([]byte(nil), data...)
		off, rest := int(offset), got
		for _, c := range cuts {
			k := min(int(c), len(rest))
			off = Mask(rest[:k], key, off)
			rest = rest[k:]
		}
		off = Mask(rest, key, off)
		if off != (int(offset)+len(data))%4 || !bytes.Equal(got, want) {
			t.Fatalf("Mask(% x, % x, %d) cut at %v = % x (offset %d), want % x", data, key, offset, cuts, got, off, want)
		}
		// The portable word loop alone, as non-amd64 builds run it.
		portable := append([]byte(nil), data...)
		k64, _ := maskKey(key, int(offset), len(data))
		maskWords(portable, k64)
		if !bytes.Equal(portable, want) {
			t.Fatalf("maskWords(% x, % x, %d) = % x, want % x", data, key, offset, portable, want)
		}
		// Unmasking fused with the ASCII check.
		fused := append([]byte(nil), data...)
		isASCII := maskASCII(fused, key, int(offset))
		if !bytes.Equal(fused, want) || isASCII != !bytes.ContainsFunc(want, func(r rune) bool { return r >= 0x80 }) {
			t.Fatalf("maskASCII(% x, % x, %d) = % x, %v; want % x", data, key, offset, fused, isASCII, want)
		}
	})
}

// FuzzClosePayload: ParseClosePayload accepts exactly the close bodies RFC
// 6455 §5.5.1 and §7.4 allow (empty, meaning 1005; or a code registered
// for use in a close frame, then a UTF-8 reason), fails the others with
// the close code §7.4.1 and §8.1 give (1002 for the length or the code,
// 1007 for the reason), and reads back the code and reason
// AppendClosePayload wrote; AppendClosePayload writes a body of at most
// 125 bytes (§5.5) whose reason is the longest whole-character prefix of
// the given one made valid UTF-8, or nothing for a code that cannot be
// sent.
func FuzzClosePayload(f *testing.F) {
	f.Add([]byte{0x03, 0xe8, 'o', 'k'}, uint16(1000), "bye")
	f.Add([]byte{0x03}, uint16(1005), "")
	f.Add([]byte{0x03, 0xf7, 0xff}, uint16(4999), "\xff\xfe")
	f.Add([]byte{0x13, 0x88}, uint16(5000), string(bytes.Repeat([]byte("é"), 70)))
	f.Add([]byte{}, uint16(1014), "x")
	f.Fuzz(func(t *testing.T, p []byte, code uint16, reason string) {
		// RFC 6455 §7.4.1 and the IANA registry: 1000-1003 and 1007-1014
		// are sent; 1004 is reserved, 1005 and 1006 are never sent. 3000-
		// 4999 are for libraries and applications.
		sendable := func(c uint16) bool {
			return c >= 1000 && c <= 1003 || c >= 1007 && c <= 1014 || c >= 3000 && c <= 4999
		}
		got, gotReason, err := ParseClosePayload(p)
		var want CloseCode // 0: accepted
		switch {
		case len(p) == 0:
		case len(p) == 1, !sendable(binary.BigEndian.Uint16(p)):
			want = CloseProtocolError
		case !utf8.Valid(p[2:]):
			want = CloseInvalidPayload
		}
		switch {
		case want != 0:
			if err == nil || CloseCodeOf(err) != want {
				t.Fatalf("% x: %v (close %d), want close %d", p, err, CloseCodeOf(err), want)
			}
		case err != nil:
			t.Fatalf("% x: %v", p, err)
		case len(p) == 0:
			if got != CloseNoStatus || len(gotReason) != 0 {
				t.Fatalf("empty body: %d %q", got, gotReason)
			}
		case got != CloseCode(binary.BigEndian.Uint16(p)) || !bytes.Equal(gotReason, p[2:]):
			t.Fatalf("% x: %d %q", p, got, gotReason)
		case len(p) <= MaxControlPayload:
			if back := AppendClosePayload(nil, got, string(gotReason)); !bytes.Equal(back, p) {
				t.Fatalf("% x read as %d %q, written back as % x", p, got, gotReason, back)
			}
		}

		body := AppendClosePayload([]byte{0xAA}, CloseCode(code), reason)
		if body[0] != 0xAA {
			t.Fatal("AppendClosePayload changed dst")
		}
		body = body[1:]
		if !sendable(code) {
			if len(body) != 0 {
				t.Fatalf("code %d written as % x", code, body)
			}
			return
		}
		valid := strings.ToValidUTF8(reason, "\uFFFD")
		c, r, err := ParseClosePayload(body)
		if err != nil || c != CloseCode(code) || len(body) > MaxControlPayload || !strings.HasPrefix(valid, string(r)) {
			t.Fatalf("%d %q written as % x, read as %d %q %v", code, reason, body, c, r, err)
		}
		if len(r) < len(valid) {
			// Cut short: only because the next character would not fit.
			_, size := utf8.DecodeRuneInString(valid[len(r):])
			if len(r)+size <= MaxCloseReason {
				t.Fatalf("reason %q cut to %q", valid, r)
			}
		}
	})
}
