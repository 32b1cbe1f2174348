package dispatch

import (
	"bytes"
	"errors"
	"testing"
)

// TestKindWireValues pins the byte of every kind: they are the first byte of
// a hotpath.v1 envelope and compat/PROTOCOL.md cites them, so changing one
// breaks every deployed peer.
func TestKindWireValues(t *testing.T) {
	want := []struct {
		kind Kind
		wire byte
		name string
	}{
		{KindCall, 1, "call"},
		{KindResult, 2, "result"},
		{KindError, 3, "error"},
		{KindEvent, 4, "event"},
		{KindAsk, 5, "ask"},
		{KindAnswer, 6, "answer"},
		{KindBatch, 7, "batch"},
		{KindPing, 8, "ping"},
		{KindPong, 9, "pong"},
		{KindJoin, 10, "join"},
		{KindLeave, 11, "leave"},
		{KindEmit, 12, "emit"},
		{KindCapabilities, 13, "capabilities"},
	}
	for _, w := range want {
		if byte(w.kind) != w.wire || w.kind.String() != w.name || !w.kind.Valid() {
			t.Errorf("%v: wire %d, valid %v; want %d %q", w.kind, byte(w.kind), w.kind.Valid(), w.wire, w.name)
		}
	}
	if numKinds != len(want)+1 {
		t.Errorf("numKinds = %d, want %d", numKinds, len(want)+1)
	}
}

func TestKindStringUnknown(t *testing.T) {
	for k, want := range map[Kind]string{0: "Kind(0)", 14: "Kind(14)", 255: "Kind(255)"} {
		if k.Valid() || k.String() != want {
			t.Errorf("Kind %d: String %q, Valid %v", k, k.String(), k.Valid())
		}
	}
}

// TestDecodeKindEveryByte decodes a packet starting with each of the 256
// byte values.
func TestDecodeKindEveryByte(t *testing.T) {
	body := []byte("body")
	for b := range 256 {
		packet := append([]byte{byte(b)}, body...)
		k, got, err := DecodeKind(packet)
		if b >= 1 && b <= 13 {
			if err != nil || k != Kind(b) || !bytes.Equal(got, body) {
				t.Fatalf("byte %d: %v, %q, %v", b, k, got, err)
			}
			continue
		}
		var unknown *UnknownKindError
		if !errors.As(err, &unknown) || unknown.Kind != Kind(b) || k != 0 || got != nil {
			t.Fatalf("byte %d: %v, %q, %v; want *UnknownKindError", b, k, got, err)
		}
	}
}

func TestDecodeKindEmpty(t *testing.T) {
	for _, p := range [][]byte{nil, {}} {
		if _, _, err := DecodeKind(p); !errors.Is(err, ErrEmptyPacket) {
			t.Fatalf("DecodeKind(%v) = %v, want ErrEmptyPacket", p, err)
		}
	}
}

// TestDecodeKindBodyAliases checks that the body is the packet's own bytes,
// not a copy.
func TestDecodeKindBodyAliases(t *testing.T) {
	packet := []byte{byte(KindCall), 'a', 'b'}
	_, body, _ := DecodeKind(packet)
	body[0] = 'z'
	if packet[1] != 'z' {
		t.Fatal("body is a copy")
	}
	if _, body, _ := DecodeKind([]byte{byte(KindPing)}); body == nil || len(body) != 0 {
		t.Fatalf("body of a kind-only packet = %v, want empty and non-nil", body)
	}
}
