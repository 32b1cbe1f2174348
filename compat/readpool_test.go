package compat

import (
	"bytes"
	"net"
	"testing"

	"github.com/hotpath-go/hotpath/wsframe"
)

type countMessages struct{ sizes []int }

func (h *countMessages) handleMessage(_ wsframe.Opcode, payload []byte) error {
	h.sizes = append(h.sizes, len(payload))
	return nil
}

// A read that continues a pending message is copied into the queue while
// the message is small, so that its buffer goes back to the pool: pushing
// every such read cost a 16 KiB buffer per read when 10 KiB messages
// straddle most reads (BenchmarkCall64x10KiB). The read of a large message
// joins the queue without a copy.
func TestStraddlingReadsKeepTheirBuffers(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	c := newWSConn(a, true, Limits{}.withDefaults(), nil, nil)
	frame := func(n int) []byte {
		f := wsframe.AppendHeader(nil, wsframe.Header{Flags: wsframe.Fin, Opcode: wsframe.OpBinary, Length: int64(n)})
		return append(f, bytes.Repeat([]byte{'x'}, n)...)
	}
	var h countMessages
	feed := func(stream []byte, read int) (kept int) {
		for len(stream) > 0 {
			n := min(read, len(stream))
			k, err := c.consume(stream[:n:n], &h)
			if err != nil {
				t.Fatal(err)
			}
			if k {
				kept++
			}
			stream = stream[n:]
		}
		return kept
	}

	var small []byte
	for range 12 {
		small = append(small, frame(10<<10)...)
	}
	if kept := feed(small, readBufSize); kept != 0 {
		t.Fatalf("the queue kept %d read buffers of 10 KiB messages, want none", kept)
	}
	large := frame(1 << 20)
	if kept := feed(large, readBufSize); kept == 0 {
		t.Fatal("the reads of a 1 MiB message were all copied into the queue")
	}
	if len(h.sizes) != 13 || h.sizes[12] != 1<<20 {
		t.Fatalf("handled %d messages (%v), want 12 of 10 KiB and one of 1 MiB", len(h.sizes), h.sizes)
	}
}
