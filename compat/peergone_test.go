package compat

import (
	"math"
	"testing"

	"github.com/hotpath-go/hotpath/wsframe"
)

// findClose walks frame headers to the first close frame, skipping the
// other frames' payloads however the bytes are split into segments (the
// partial frame the read loop's queue held, then what readUnread read),
// and finds nothing when the bytes end before a close frame is whole or
// at a frame the Decoder would refuse.
func TestFindClose(t *testing.T) {
	key := wsframe.NewMaskKey()
	masked := func(op wsframe.Opcode, p []byte, fl wsframe.Flags) []byte {
		b := wsframe.AppendHeader(nil, wsframe.Header{Flags: fl, Opcode: op, Length: int64(len(p)), Masked: true, Key: key})
		start := len(b)
		b = append(b, p...)
		wsframe.Mask(b[start:], key, 0)
		return b
	}
	cat := func(bs ...[]byte) (out []byte) {
		for _, b := range bs {
			out = append(out, b...)
		}
		return out
	}
	fin := wsframe.Fin
	data := masked(wsframe.OpBinary, make([]byte, 300), fin|wsframe.Rsv1)  // a 16-bit length
	big := masked(wsframe.OpBinary, make([]byte, 70000), fin|wsframe.Rsv1) // a 64-bit length
	frag := masked(wsframe.OpBinary, make([]byte, 10), wsframe.Rsv1)       // a first fragment
	cont := masked(wsframe.OpContinuation, make([]byte, 10), fin)          // its last
	ping := masked(wsframe.OpPing, []byte("hi"), fin)                      // between fragments
	closing := masked(wsframe.OpClose, wsframe.AppendClosePayload(nil, wsframe.CloseGoingAway, "bye"), fin)
	empty := masked(wsframe.OpClose, nil, fin)
	const maxFrame = 1 << 20

	for _, tc := range []struct {
		name   string
		stream []byte
		want   wsframe.CloseCode // 0: none found
	}{
		{"close alone", closing, wsframe.CloseGoingAway},
		{"behind frames", cat(data, big, frag, ping, cont, closing), wsframe.CloseGoingAway},
		{"between fragments", cat(frag, closing, cont), wsframe.CloseGoingAway},
		{"no status", cat(data, empty), wsframe.CloseNoStatus},
		{"none", cat(data, big, ping), 0},
		{"cut short", cat(data, closing[:len(closing)-1]), 0},
		{"header cut short", cat(data, big[:5]), 0},
		{"unmasked", cat(wsframe.AppendFrame(nil, wsframe.OpBinary, []byte("x"), fin), closing), 0},
		{"reserved opcode", cat(masked(3, nil, fin), closing), 0},
		{"RSV1 on a continuation", cat(frag, masked(wsframe.OpContinuation, nil, fin|wsframe.Rsv1), closing), 0},
		{"RSV2", cat(masked(wsframe.OpBinary, nil, fin|wsframe.Rsv2), closing), 0},
		{"RSV1 on a control frame", cat(masked(wsframe.OpPing, nil, fin|wsframe.Rsv1), closing), 0},
		{"fragmented control frame", cat(masked(wsframe.OpPing, nil, 0), closing), 0},
		{"control frame over 125", cat(masked(wsframe.OpPing, make([]byte, 126), fin), closing), 0},
		{"frame over the limit", cat(masked(wsframe.OpBinary, make([]byte, maxFrame+1), fin), closing), 0},
		{"invalid close code", masked(wsframe.OpClose, []byte{0x03, 0xE7}, fin), 0},
		{"close body of one byte", masked(wsframe.OpClose, []byte{0x03}, fin), 0},
		{"reason not UTF-8", masked(wsframe.OpClose, []byte{0x03, 0xE8, 0xFF}, fin), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Every split in two, and every byte a segment of its own.
			splits := [][][]byte{{tc.stream}}
			for i := 0; i <= len(tc.stream); i += max(1, len(tc.stream)/97) {
				splits = append(splits, [][]byte{tc.stream[:i], tc.stream[i:]})
			}
			if len(tc.stream) < 1000 {
				var bytes [][]byte
				for i := range tc.stream {
					bytes = append(bytes, tc.stream[i:i+1])
				}
				splits = append(splits, bytes)
			}
			for _, segs := range splits {
				ce := findClose(segs, true, wsframe.Rsv1, maxFrame)
				switch {
				case tc.want == 0 && ce != nil:
					t.Fatalf("found close %v in %d segments, want none", ce, len(segs))
				case tc.want != 0 && (ce == nil || ce.Code != tc.want || !ce.Remote):
					t.Fatalf("found %v in %d segments, want %d (remote)", ce, len(segs), tc.want)
				case tc.want == wsframe.CloseGoingAway && ce.Reason != "bye":
					t.Fatalf("reason %q, want %q", ce.Reason, "bye")
				}
			}
		})
	}
	// A length of 2^63-1 with no limit on frames: past the bytes, so
	// nothing follows it (and no offset overflows).
	huge := cat([]byte{0x82, 0xFF, 0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}, key[:], closing)
	if ce := findClose([][]byte{huge}, true, wsframe.Rsv1, math.MaxInt64); ce != nil {
		t.Errorf("found %v behind a frame of %d bytes, want none", ce, int64(math.MaxInt64))
	}
	// A client's walk wants the server's frames unmasked.
	plain := wsframe.AppendCloseFrame(nil, wsframe.CloseNormal, "")
	if ce := findClose([][]byte{plain}, false, 0, maxFrame); ce == nil || ce.Code != wsframe.CloseNormal {
		t.Errorf("a client's walk found %v in a server's close frame, want 1000", ce)
	}
	if ce := findClose([][]byte{plain}, true, 0, maxFrame); ce != nil {
		t.Errorf("a server's walk found %v in an unmasked close frame, want none", ce)
	}
}
