package wsframe

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseHeaderReportsWhatItNeeds(t *testing.T) {
	headers := []Header{
		{Flags: Fin, Opcode: OpText, Length: 5},
		{Flags: Fin, Opcode: OpText, Masked: true, Key: testKey, Length: 5},
		{Opcode: OpBinary, Length: 300},
		{Opcode: OpBinary, Masked: true, Key: testKey, Length: 300},
		{Flags: Fin | Rsv1, Opcode: OpBinary, Length: 1 << 20},
		{Flags: Fin, Opcode: OpBinary, Masked: true, Key: testKey, Length: 1 << 20},
	}
	for _, h := range headers {
		wire := AppendHeader(nil, h)
		for k := 0; k < len(wire); k++ {
			_, n, err := ParseHeader(wire[:k])
			if !errors.Is(err, ErrShortHeader) {
				t.Fatalf("%+v prefix %d: err %v", h, k, err)
			}
			want := len(wire)
			if k < 2 {
				want = 2
			}
			if n != want {
				t.Fatalf("%+v prefix %d: needs %d, want %d", h, k, n, want)
			}
		}
		got, n, err := ParseHeader(append(wire, 0xAA, 0xBB)) // payload after it
		if err != nil || n != len(wire) || got != h {
			t.Fatalf("parse %+v: %+v n=%d %v", h, got, n, err)
		}
	}
}

// Round trip: any header AppendHeader writes, ParseHeader reads back whole.
func TestHeaderRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		h := Header{
			Flags:  Flags(r.IntN(16)) << 4,
			Opcode: Opcode(r.IntN(16)),
			Masked: r.IntN(2) == 1,
			Length: int64(r.Uint64N(1<<63) >> r.UintN(64)),
		}
		if h.Masked {
			h.Key = [4]byte{byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32()), byte(r.Uint32())}
		}
		wire := AppendHeader(nil, h)
		if len(wire) != HeaderSize(h.Length, h.Masked) {
			t.Fatalf("%+v: %d bytes, HeaderSize says %d", h, len(wire), HeaderSize(h.Length, h.Masked))
		}
		got, n, err := ParseHeader(wire)
		if err != nil || n != len(wire) || got != h {
			t.Fatalf("%+v: parsed %+v n=%d %v", h, got, n, err)
		}
	}
}

func TestOpcodeClasses(t *testing.T) {
	for op := Opcode(0); op <= 0xF; op++ {
		control := op >= 8
		reserved := (op >= 3 && op <= 7) || op >= 0xB
		if op.IsControl() != control || op.IsReserved() != reserved {
			t.Errorf("%v: control %v reserved %v", op, op.IsControl(), op.IsReserved())
		}
		if s := op.String(); s == "" || (reserved && !strings.HasPrefix(s, "opcode 0x")) {
			t.Errorf("String(%d) = %q", op, s)
		}
	}
}

// Mask on a payload split at arbitrary points, at every alignment of the
// buffer, equals one call on the whole.
func TestMaskSplitAndAligned(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	base := make([]byte, 1100)
	for i := range base {
		base[i] = byte(r.Uint32())
	}
	key := [4]byte{1, 2, 4, 8}
	for align := 0; align < 8; align++ {
		for _, n := range []int{0, 1, 3, 7, 8, 9, 31, 32, 33, 63, 64, 65, 100, 127, 128, 1024, 1029} {
			want := append([]byte(nil), base[:n]...)
			for i := range want {
				want[i] ^= key[i%4]
			}
			buf := make([]byte, n+align)[align:]
			copy(buf, base)
			off, rest := 0, buf
			for len(rest) > 0 {
				k := 1 + r.IntN(len(rest))
				off = Mask(rest[:k], key, off)
				rest = rest[k:]
			}
			if !bytes.Equal(buf, want) {
				t.Fatalf("align %d n %d: split masking differs", align, n)
			}
			copy(buf, base)
			k64, _ := maskKey(key, 0, n)
			maskWords(buf, k64)
			if !bytes.Equal(buf, want) {
				t.Fatalf("align %d n %d: portable word loop differs", align, n)
			}
		}
	}
}

func TestClosePayloadRoundTrip(t *testing.T) {
	for _, c := range []struct {
		code   CloseCode
		reason string
	}{{CloseNormal, ""}, {CloseGoingAway, "restart"}, {4321, "κόσμε"}, {CloseTryAgainLater, "busy"}} {
		p := AppendClosePayload(nil, c.code, c.reason)
		code, reason, err := ParseClosePayload(p)
		if err != nil || code != c.code || string(reason) != c.reason {
			t.Errorf("%d %q: got %d %q %v", c.code, c.reason, code, reason, err)
		}
		f := AppendCloseFrame(nil, c.code, c.reason)
		if want := AppendFrame(nil, OpClose, p, Fin); !bytes.Equal(f, want) {
			t.Errorf("%d %q: AppendCloseFrame % x, want % x", c.code, c.reason, f, want)
		}
	}
}

func TestCloseReasonTruncatedOnCharacterBoundary(t *testing.T) {
	long := strings.Repeat("é", 100) // 200 bytes, 2 per character
	p := AppendClosePayload(nil, CloseNormal, long)
	if len(p) > MaxControlPayload || !utf8.Valid(p[2:]) || len(p)-2 != 122 {
		t.Fatalf("payload of %d bytes, reason valid %v", len(p), utf8.Valid(p[2:]))
	}
	f := AppendCloseFrame(nil, CloseNormal, long)
	if _, err := decodeAll(Config{Role: Client}, f); err != nil {
		t.Fatalf("truncated close frame rejected: %v", err)
	}
}

func TestPrecompiledFrames(t *testing.T) {
	for code, f := range map[CloseCode][]byte{
		CloseNoStatus: FrameClose, CloseNormal: FrameCloseNormal, CloseGoingAway: FrameCloseGoingAway,
		CloseProtocolError: FrameCloseProtocolError, CloseInvalidPayload: FrameCloseInvalidPayload,
		ClosePolicyViolation: FrameClosePolicyViolation, CloseMessageTooBig: FrameCloseMessageTooBig,
		CloseInternalError: FrameCloseInternalError, CloseTryAgainLater: FrameCloseTryAgainLater,
	} {
		if !bytes.Equal(f, AppendCloseFrame(nil, code, "")) || !bytes.Equal(CloseFrameFor(code), f) {
			t.Errorf("close frame for %d: % x", code, f)
		}
		if cap(f) != len(f) {
			t.Errorf("close frame for %d: capacity %d invites appends into shared memory", code, cap(f))
		}
	}
	if CloseFrameFor(4000) != nil {
		t.Error("CloseFrameFor(4000) is not nil")
	}
	if !bytes.Equal(FramePing, []byte{0x89, 0}) || !bytes.Equal(FramePong, []byte{0x8A, 0}) {
		t.Errorf("ping % x pong % x", FramePing, FramePong)
	}
}

func TestErrorsCarryCodeAndReason(t *testing.T) {
	var pe *ProtocolError
	wrapped := errors.Join(errors.New("reading conn"), ErrInvalidUTF8)
	if !errors.As(wrapped, &pe) || pe.Reason != "WS_ERR_INVALID_UTF8" || pe.Code != CloseInvalidPayload {
		t.Fatalf("errors.As: %+v", pe)
	}
	if CloseCodeOf(wrapped) != 1007 || CloseCodeOf(errors.New("io")) != 0 || CloseCodeOf(nil) != 0 {
		t.Fatal("CloseCodeOf")
	}
	if s := ErrMessageTooBig.Error(); !strings.Contains(s, "WS_ERR_MESSAGE_TOO_BIG") || !strings.Contains(s, "1009") {
		t.Fatalf("Error() = %q", s)
	}
}
