package main

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/hotpath-go/hotpath/segmentqueue"
	"github.com/hotpath-go/hotpath/wsframe"
)

// The two modules may not import each other, so the proof that wsframe's
// decoder runs on a segmentqueue.Queue lives here: a stream of masked
// frames, cut into reads at random points (headers straddling reads
// included), is pushed into a real Queue and decoded with NextMessage.
var _ wsframe.Source = (*segmentqueue.Queue)(nil)

func TestDecoderOnSegmentQueue(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		var stream []byte
		var want [][]byte
		for i := range 1 + rng.IntN(20) {
			payload := bytes.Repeat([]byte{byte('a' + i%26)}, rng.IntN(70000))
			want = append(want, payload)
			if rng.IntN(3) == 0 && len(payload) > 2 {
				// fragmented, with a ping between the fragments
				cut := 1 + rng.IntN(len(payload)-1)
				stream = wsframe.AppendMaskedFrame(stream, wsframe.OpText, payload[:cut], 0, wsframe.NewMaskKey())
				stream = wsframe.AppendMaskedFrame(stream, wsframe.OpPing, []byte("p"), wsframe.Fin, wsframe.NewMaskKey())
				stream = wsframe.AppendMaskedFrame(stream, wsframe.OpContinuation, payload[cut:], wsframe.Fin, wsframe.NewMaskKey())
			} else {
				stream = wsframe.AppendMaskedFrame(stream, wsframe.OpText, payload, wsframe.Fin, wsframe.NewMaskKey())
			}
		}
		q := segmentqueue.New(segmentqueue.Limits{})
		dec := wsframe.NewDecoder(wsframe.Config{Role: wsframe.Server})
		var asm []byte
		var got [][]byte
		for len(stream) > 0 {
			n := min(len(stream), 1+rng.IntN(9000))
			seg := append([]byte(nil), stream[:n]...) // a read buffer the queue now owns
			stream = stream[n:]
			if err := q.Push(seg); err != nil {
				t.Fatal(err)
			}
			for {
				m, err := dec.NextMessage(q, &asm)
				if errors.Is(err, wsframe.ErrNeedMore) {
					break
				}
				if err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				if m.Opcode == wsframe.OpText {
					got = append(got, append([]byte(nil), m.Payload...))
				}
			}
		}
		if q.Len() != 0 || len(got) != len(want) {
			t.Fatalf("round %d: %d messages, want %d; %d bytes left", round, len(got), len(want), q.Len())
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("round %d message %d differs", round, i)
			}
		}
	}
}
