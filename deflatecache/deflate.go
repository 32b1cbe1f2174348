package deflatecache

import (
	"bytes"
	"sync"
	"sync/atomic"

	"github.com/hotpath-go/hotpath/wsframe"
	"github.com/klauspost/compress/flate"
)

// tail is the empty stored block a sync flush ends with. RFC 7692 §7.2.1:
// "Remove 4 octets (that are 0x00 0x00 0xff 0xff) from the tail end."
var tail = []byte{0x00, 0x00, 0xff, 0xff}

// A compressor is a klauspost/compress Writer set up for one window (and,
// at 15 bits, one level), kept in a pool between messages: a Writer holds
// about 1 MiB of tables and buffers, so no connection keeps one.
type compressor struct {
	fw      *flate.Writer
	out     appendWriter
	scratch []byte // reused output buffer for shared frames
	// owner and gen name the connection with context takeover whose
	// stream the writer holds, and how far: Conn.id and the Conn.sendGen
	// after the writer's last message. The connection resumes the stream
	// without priming only if no message joined its history since (sent
	// with another pooled writer, or broadcast); owner 0 is nobody.
	owner, gen uint64
}

// appendWriter is the io.Writer a flate.Writer writes to: it appends to a
// slice the caller lends for one message.
type appendWriter struct{ b []byte }

func (w *appendWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

// maxScratch bounds the output buffer a pooled compressor keeps.
const maxScratch = 64 << 10

// Pools of compressors. klauspost/compress offers levels only with its
// standard 32 KiB window; flate.NewWriterWindow, which takes the exact
// window a peer allows, has one algorithm (its level 5 matcher), so below
// 15 bits there is one pool per window and at 15 one per level.
var (
	windowPools [MaxWindowBits - MinWindowBits]sync.Pool
	levelPools  [flate.BestCompression + 1]sync.Pool
)

func compressorPool(bits, level int) *sync.Pool {
	if bits < MaxWindowBits {
		return &windowPools[bits-MinWindowBits]
	}
	return &levelPools[level]
}

func getCompressor(bits, level int) *compressor {
	if c, ok := compressorPool(bits, level).Get().(*compressor); ok {
		return c
	}
	return newCompressor(bits, level)
}

// newCompressor builds what the pools hold: a klauspost/compress writer,
// whose tables take 0.5-1 MB by level (BenchmarkPooledSizes), which is
// why it is pooled and not kept per connection.
func newCompressor(bits, level int) *compressor {
	c := &compressor{}
	if bits < MaxWindowBits {
		// RFC 7692 §7.2.1: "If the "agreed parameters" contain the
		// "server_max_window_bits" extension parameter with a value of
		// w, the server MUST NOT use an LZ77 sliding window longer than
		// the w-th power of 2 bytes to compress messages to send" (and
		// the same for the client). Bits 8 to 14 are within
		// [flate.MinCustomWindowSize, flate.MaxCustomWindowSize].
		c.fw, _ = flate.NewWriterWindow(&c.out, 1<<bits)
	} else {
		c.fw, _ = flate.NewWriter(&c.out, level)
	}
	return c
}

func putCompressor(c *compressor, bits, level int) {
	if cap(c.scratch) > maxScratch {
		c.scratch = nil
	}
	compressorPool(bits, level).Put(c)
}

// deflates counts every DEFLATE run of the process; see Deflates.
var deflates atomic.Uint64

// Deflates returns how many messages this process has compressed, shared
// broadcast frames and per-connection messages together. It is meant for
// monitoring, and for checking that a broadcast costs one deflate per
// distinct window rather than one per recipient.
func Deflates() uint64 { return deflates.Load() }

// appendDeflate appends payload compressed as RFC 7692 §7.2.1 describes:
// "1. Compress all the octets of the payload of the message using
// DEFLATE. 2. If the resulting data does not end with an empty DEFLATE
// block with no compression (the "BTYPE" bits are set to 00), append an
// empty DEFLATE block with no compression to the tail end. 3. Remove 4
// octets (that are 0x00 0x00 0xff 0xff) from the tail end." A sync flush
// always ends with that empty block. history primes the window for a
// connection with context takeover; nil starts from an empty window.
//
// It reports false, with dst unchanged, only if the writer failed, which
// an in-memory destination never makes it do; whether the result is worth
// sending is the caller's decision.
func (c *compressor) appendDeflate(dst, payload, history []byte) ([]byte, bool) {
	c.owner = 0
	c.fw.ResetDict(&c.out, history)
	return c.appendResume(dst, payload)
}

// appendResume is appendDeflate continuing the writer's stream as it is:
// after the sync flush that ended the previous message, its history is
// that message and those before it.
func (c *compressor) appendResume(dst, payload []byte) ([]byte, bool) {
	deflates.Add(1)
	c.out.b = dst
	_, werr := c.fw.Write(payload)
	ferr := c.fw.Flush()
	out := c.out.b
	c.out.b = nil
	body := out[len(dst):]
	if werr != nil || ferr != nil || !bytes.HasSuffix(body, tail) {
		return dst, false
	}
	return out[:len(out)-len(tail)], true
}

// plainVariant is what a shared-frame slot holds when compressing did not
// shrink the message: an empty, non-nil frame that tells every later
// recipient to send the plain frame without trying again.
var plainVariant = []byte{}

// sharedBuilders[bits-8][level] builds the compressed server frame of a
// broadcast for one window: the build function Prepared.Variant calls once
// per slot. They are made once, so a broadcast allocates no closure.
var sharedBuilders = func() (b [MaxWindowBits - MinWindowBits + 1][flate.BestCompression + 1]func(wsframe.Opcode, []byte) ([]byte, error)) {
	for bits := MinWindowBits; bits <= MaxWindowBits; bits++ {
		for level := flate.BestSpeed; level <= flate.BestCompression; level++ {
			b[bits-MinWindowBits][level] = func(op wsframe.Opcode, payload []byte) ([]byte, error) {
				return buildShared(op, payload, bits, level), nil
			}
		}
	}
	return b
}()

// buildShared compresses a broadcast without history, so any peer that
// negotiated this window can inflate it whatever its takeover mode, and
// frames it in a slice of exactly the frame's size, kept for the message's
// life.
func buildShared(op wsframe.Opcode, payload []byte, bits, level int) []byte {
	c := getCompressor(bits, level)
	defer putCompressor(c, bits, level)
	body, ok := c.appendDeflate(c.scratch[:0], payload, nil)
	c.scratch = body[:0]
	if !ok || len(body) >= len(payload) {
		return plainVariant
	}
	f := make([]byte, 0, wsframe.HeaderSize(int64(len(body)), false)+len(body))
	// RFC 7692 §6: a compressed message has "the "Per-Message Compressed"
	// bit" (RSV1) set on its first frame.
	return wsframe.AppendFrame(f, op, body, wsframe.Fin|wsframe.Rsv1)
}
