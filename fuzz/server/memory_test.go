package server

import (
	"bytes"
	"io"
	"runtime"
	"testing"

	"github.com/hotpath-go/hotpath/compat"
	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/wsframe"
)

// TestServerTrickledFrameMemory: a client that announces a large frame and
// then sends its payload one byte per read must not make the server hold
// more than the bytes it sent (plus a bounded overhead). Limits.MaxMessageSize
// (1 MiB by default) is the most a connection may buffer.
func TestServerTrickledFrameMemory(t *testing.T) {
	fs, err := startServer(compat.Limits{}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.ln.Close()
	c, err := fs.dial(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go io.Copy(io.Discard, c.br)

	const reads = 256
	h := wsframe.Header{Flags: wsframe.Fin, Opcode: wsframe.OpBinary, Masked: true, Length: wsframe.DefaultMaxMessageSize}
	if _, err := c.Write(wsframe.AppendHeader(nil, h)); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	// net.Pipe hands each write to one read of the server; a write
	// returns once the server has read it, so after write k+1 the server
	// has handled the byte of write k.
	for range reads + 1 {
		if _, err := c.Write([]byte{0}); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	held := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%d bytes received in %d reads: the heap grew by %d KiB", reads, reads, held>>10)
	if held > 4<<20 {
		t.Errorf("the server holds %d KiB for %d bytes of a pending frame (%d KiB per one-byte read)", held>>10, reads, held/reads>>10)
	}
}

// memoryBudget is what one connection of the fuzz server may allocate, the
// client's share included: a fixed part (the server's per-connection
// state, the client's buffers, and the first use of a zstd dictionary
// codec, about 1.2 MiB, which the garbage collector may make the codec's
// pools build again) and a part proportional to the bytes the server read.
// A server that buffers what it reads in pooled chunks allocates far less
// per byte; one that allocates a read buffer for each read of a few bytes
// allocates far more.
func memoryBudget(read int) uint64 { return 4<<20 + 64*uint64(read) }

// FuzzServerMemory sends the fuzzer's byte stream to the compat server as
// FuzzServer does, cut into fuzzer-chosen writes (each one read of the
// server), and bounds what the process allocates for the connection by
// memoryBudget. The router has no panicking method, whose logged stack
// trace would count.
func FuzzServerMemory(f *testing.F) {
	fs, err := memoryServerOnce()
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range serverSeeds(fs) {
		f.Add(s.handshake, s.stream, s.cuts)
	}
	// A call whose frame arrives one byte per read.
	call := wire.AppendCall(nil, dispatch.KindCall, 1, methodEcho, 0, bytes.Repeat([]byte("x"), 600))
	f.Add(uint8(0), clientFrame(wsframe.OpBinary, call, wsframe.Fin), make([]byte, 620))
	f.Fuzz(func(t *testing.T, handshake uint8, stream, cuts []byte) {
		x := fs.converse(t, handshake, stream, cuts)
		if _, err := fs.sortOut(x.frames); err != nil {
			t.Fatalf("%v\nclient sent %s", err, short(stream))
		}
		if budget := memoryBudget(len(x.written)); x.allocated > budget {
			t.Fatalf("the connection allocated %d KiB, over its budget of %d KiB for the %d bytes the server read in %d writes; input %s",
				x.allocated>>10, budget>>10, len(x.written), min(len(cuts), maxChunks)+1, short(stream))
		}
	})
}
