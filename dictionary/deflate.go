package dictionary

import (
	"bytes"
	"compress/flate"
	"errors"
	"io"
	"math"
	"sync"
)

// Defaults of CodecOptions.
const (
	// DefaultThreshold: shorter messages are not compressed. Below it even
	// a dictionary rarely wins the few bytes that marking a message as
	// compressed costs the caller.
	DefaultThreshold = 64
	// DefaultMaxDecoded caps a decoded message.
	DefaultMaxDecoded = 1 << 20
)

// CodecOptions tune a codec. The zero value is the default.
type CodecOptions struct {
	// Threshold: messages shorter than this are not compressed.
	// 0 means DefaultThreshold; 1 tries every non-empty message.
	Threshold int
	// MaxDecoded caps the decoded size of one message; AppendDecompress
	// fails with ErrTooLarge before allocating past it. 0 means
	// DefaultMaxDecoded.
	MaxDecoded int
}

func (o CodecOptions) withDefaults() CodecOptions {
	if o.Threshold <= 0 {
		o.Threshold = DefaultThreshold
	}
	if o.MaxDecoded <= 0 {
		o.MaxDecoded = DefaultMaxDecoded
	}
	return o
}

// Codec compresses and decompresses single messages with one dictionary.
// Deflate and Zstd implement it.
//
// The codec does not mark its output: AppendCompress reports whether it
// compressed, and the caller records that in its own envelope (a flag bit
// of the packet kind, say) and calls AppendDecompress only for messages so
// marked. A message that was not compressed is sent as it is.
type Codec interface {
	// AppendCompress appends the compressed form of src to dst and reports
	// true, or returns dst unchanged and false when src is shorter than
	// the threshold or would not shrink: then send src as it is.
	AppendCompress(dst, src []byte) ([]byte, bool)
	// AppendDecompress appends the message that src decodes to to dst.
	// Errors are *DecodeError; dst's length is restored on error.
	AppendDecompress(dst, src []byte) ([]byte, error)
	// Dictionary returns the codec's dictionary, nil for none.
	Dictionary() *Dictionary
}

// Deflate is a raw deflate (RFC 1951) codec with a preset dictionary: the
// encoder is this package's own (see encode.go for why), the decoder is
// the standard library's compress/flate (see inflater for why). It is safe
// for concurrent use; encoders and decoders come from pools, and with a dst
// of enough capacity a call allocates nothing.
//
// Raw deflate has no header, no checksum and no dictionary id: a message
// decoded with another dictionary than it was encoded with is usually
// returned as wrong bytes of the right length, and fails (ErrCorrupt) only
// when it reaches back further than the other dictionary goes. Use it only
// after both ends have agreed on Dictionary().ID(). Zstd can tell.
type Deflate struct {
	dict     *Dictionary
	index    *dictIndex
	opts     CodecOptions
	encoders sync.Pool
	decoders sync.Pool
}

// NewDeflate returns a deflate codec using d, or no dictionary if d is nil.
func NewDeflate(d *Dictionary, opts CodecOptions) *Deflate {
	c := &Deflate{dict: d, opts: opts.withDefaults()}
	var dictBytes []byte
	if d != nil {
		c.index = newDictIndex(d.data)
		dictBytes = d.data
	}
	c.encoders.New = func() any { return newEncoder() }
	c.decoders.New = func() any {
		st := &inflater{}
		st.fr = flate.NewReaderDict(&st.src, dictBytes)
		return st
	}
	return c
}

// Dictionary returns the codec's dictionary, nil for none.
func (c *Deflate) Dictionary() *Dictionary { return c.dict }

// AppendCompress appends src as raw deflate to dst and reports true, or
// returns dst unchanged and false when src is shorter than the threshold,
// longer than 1 GiB, or would not shrink.
func (c *Deflate) AppendCompress(dst, src []byte) ([]byte, bool) {
	if len(src) < c.opts.Threshold || len(src) == 0 || len(src) > maxEncode {
		return dst, false
	}
	e := c.encoders.Get().(*encoder)
	out := e.appendDeflate(dst, src, c.index)
	c.encoders.Put(e)
	if len(out)-len(dst) >= len(src) {
		return dst, false
	}
	return out, true
}

// inflater decodes with the standard library's compress/flate:
// klauspost/compress v1.20.4's decoder keeps Huffman tables across Reset,
// so a corrupt block declaring an empty code decodes with the tables of a
// previous stream (another connection's, from the pool) instead of
// failing. The standard decoder costs 1.0-1.3x the CPU (measured in
// deflatecache, which made the same choice).
type inflater struct {
	src   bytes.Reader
	fr    io.ReadCloser
	probe [1]byte
}

// AppendDecompress appends the message src decodes to to dst. It fails
// with ErrTooLarge once the message passes MaxDecoded, never holding more
// than MaxDecoded bytes of it, and with ErrCorrupt on invalid input or
// bytes left after the final block.
func (c *Deflate) AppendDecompress(dst, src []byte) ([]byte, error) {
	st := c.decoders.Get().(*inflater)
	defer c.decoders.Put(st)
	st.src.Reset(src)
	var dictBytes []byte
	if c.dict != nil {
		dictBytes = c.dict.data
	}
	if err := st.fr.(flate.Resetter).Reset(&st.src, dictBytes); err != nil {
		return dst, c.fail(ErrCorrupt, err)
	}
	start := len(dst)
	// min keeps the sum within an int: a cap of math.MaxInt ("no cap")
	// after a non-empty dst wrapped negative.
	limit := start + min(c.opts.MaxDecoded, math.MaxInt-start)
	for {
		if len(dst) == limit {
			// At the cap: one more byte means too large.
			n, err := st.fr.Read(st.probe[:])
			if n > 0 {
				return dst[:start], c.fail(ErrTooLarge, nil)
			}
			if err == io.EOF {
				break
			}
			if err == nil {
				continue
			}
			return dst[:start], c.fail(ErrCorrupt, err)
		}
		if len(dst) == cap(dst) {
			dst = grow(dst, start, limit, len(src))
		}
		n, err := st.fr.Read(dst[len(dst):min(cap(dst), limit)])
		dst = dst[:len(dst)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return dst[:start], c.fail(ErrCorrupt, err)
		}
	}
	if st.src.Len() != 0 {
		return dst[:start], c.fail(ErrCorrupt, errTrailing)
	}
	return dst, nil
}

var errTrailing = errors.New("bytes after the final block")

func (c *Deflate) fail(reason, cause error) error {
	return &DecodeError{Codec: "deflate", Reason: reason, Limit: c.opts.MaxDecoded, Cause: cause}
}

// grow makes room in dst for more decoded bytes: double what has been
// decoded so far (first guess: four times the compressed size), never
// past limit.
func grow(dst []byte, start, limit, srcLen int) []byte {
	decoded := len(dst) - start
	want := max(2*decoded, 4*srcLen, 512)
	newCap := min(len(dst)+want, limit)
	if newCap <= cap(dst) {
		return dst
	}
	out := make([]byte, len(dst), newCap)
	copy(out, dst)
	return out
}
