package dictionary

import (
	"errors"
	"math/bits"
	"runtime"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// Zstd is a zstd (RFC 8878) codec with the dictionary as raw content (no
// trained entropy tables), on klauspost/compress/zstd at its fastest level.
// It is safe for concurrent use: EncodeAll and DecodeAll draw from the
// library's own pools of GOMAXPROCS encoders and decoders.
//
// Every frame names its dictionary (4 bytes of the frame header), so a
// message compressed with another dictionary, or with none, fails with
// ErrOtherDictionary instead of decoding to wrong bytes. Frames carry no
// checksum: that would cost 4 more bytes a message, for a transport that
// has its own.
//
// Measured on the test router (see README.md), zstd's frame overhead and
// its per-message dictionary setup make it larger and slower than Deflate
// for messages under a few KiB; it wins on large ones.
type Zstd struct {
	dict   *Dictionary
	opts   CodecOptions
	id     uint32
	window uint64
	enc    *zstd.Encoder
	dec    *zstd.Decoder
	// mu is read-held by every call and write-held by Close, so Close
	// waits for the calls in flight: closing klauspost's decoder under a
	// DecodeAll left that call blocked for ever handing its block decoder
	// back (or panicked it on the closed pool).
	mu     sync.RWMutex
	closed bool
}

// NewZstd returns a zstd codec using d, or no dictionary if d is nil.
func NewZstd(d *Dictionary, opts CodecOptions) (*Zstd, error) {
	opts = opts.withDefaults()
	// The window is the cap rounded up to a power of two: no frame this
	// codec writes needs more, and a decoder allowing more would allocate
	// past the cap for a frame that claims it.
	window := uint64(1) << bits.Len64(uint64(opts.MaxDecoded-1))
	window = min(max(window, zstd.MinWindowSize), zstd.MaxWindowSize)
	eopts := []zstd.EOption{
		zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithEncoderCRC(false),
		zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)),
		zstd.WithWindowSize(int(window)),
		// One segment: the frame header then always carries the content
		// size (checked against the cap before decoding) and drops the
		// window byte.
		zstd.WithSingleSegment(true),
	}
	dopts := []zstd.DOption{
		zstd.WithDecoderConcurrency(0),
		// Not below 1 KiB: the decoder takes a single-segment frame's
		// window as its content size or 1 KiB, whichever is larger, and
		// refuses a window over its memory limit, so a MaxDecoded below
		// 1 KiB refused every message (a modules audit). The cap itself
		// is checked against the frame's content size first
		// (AppendDecompress).
		zstd.WithDecoderMaxMemory(uint64(max(opts.MaxDecoded, 1<<10))),
		zstd.WithDecoderMaxWindow(window),
	}
	c := &Zstd{dict: d, opts: opts, window: window}
	if d != nil {
		c.id = d.zstdID()
		eopts = append(eopts, zstd.WithEncoderDictRaw(c.id, d.data))
		dopts = append(dopts, zstd.WithDecoderDictRaw(c.id, d.data))
	}
	var err error
	if c.enc, err = zstd.NewWriter(nil, eopts...); err != nil {
		return nil, err
	}
	if c.dec, err = zstd.NewReader(nil, dopts...); err != nil {
		c.enc.Close()
		return nil, err
	}
	return c, nil
}

// Dictionary returns the codec's dictionary, nil for none.
func (c *Zstd) Dictionary() *Dictionary { return c.dict }

// Close releases the encoders' and decoders' goroutines and memory. After
// it, AppendCompress leaves every message plain and AppendDecompress fails
// with ErrClosed (not ErrCorrupt, which would blame the peer). It may be
// called while other goroutines use the codec: it waits for the calls in
// flight. A second Close does nothing.
func (c *Zstd) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	c.dec.Close()
	return c.enc.Close()
}

// AppendCompress appends src as one zstd frame to dst and reports true, or
// returns dst unchanged and false when src is shorter than the threshold or
// would not shrink.
func (c *Zstd) AppendCompress(dst, src []byte) ([]byte, bool) {
	if len(src) < c.opts.Threshold || len(src) == 0 {
		return dst, false
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return dst, false
	}
	out := c.enc.EncodeAll(src, dst)
	if len(out)-len(dst) >= len(src) {
		return dst, false
	}
	return out, true
}

// AppendDecompress appends the message src decodes to to dst. The frame
// header is checked first: a frame of another dictionary fails with
// ErrOtherDictionary, one without a content size with ErrCorrupt, one whose
// content size or window passes MaxDecoded with ErrTooLarge, all before
// anything is allocated. A message is one frame: one followed by more
// frames that decode to anything fails with ErrCorrupt.
func (c *Zstd) AppendDecompress(dst, src []byte) ([]byte, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return dst, c.fail(ErrClosed, nil)
	}
	var h zstd.Header
	if err := h.Decode(src); err != nil {
		return dst, c.fail(ErrCorrupt, err)
	}
	if h.Skippable || !h.HasFCS {
		return dst, c.fail(ErrCorrupt, errNoContentSize)
	}
	if h.DictionaryID != c.id {
		return dst, c.fail(ErrOtherDictionary, nil)
	}
	if h.FrameContentSize > uint64(c.opts.MaxDecoded) || h.WindowSize > c.window {
		return dst, c.fail(ErrTooLarge, nil)
	}
	start := len(dst)
	out, err := c.dec.DecodeAll(src, dst)
	switch {
	case err == nil && uint64(len(out)-start) != h.FrameContentSize:
		// DecodeAll decodes every frame concatenated after the first,
		// whose header alone was checked against the cap and the
		// dictionary: a message is one frame, as AppendCompress writes it
		// (and as Deflate refuses bytes after its final block).
		return dst[:start], c.fail(ErrCorrupt, errTrailingFrames)
	case err == nil:
		return out, nil
	case errors.Is(err, zstd.ErrDecoderSizeExceeded), errors.Is(err, zstd.ErrWindowSizeExceeded):
		return dst[:start], c.fail(ErrTooLarge, err)
	case errors.Is(err, zstd.ErrUnknownDictionary):
		return dst[:start], c.fail(ErrOtherDictionary, err)
	}
	return dst[:start], c.fail(ErrCorrupt, err)
}

var (
	errNoContentSize  = errors.New("frame has no content size")
	errTrailingFrames = errors.New("bytes after the frame")
)

func (c *Zstd) fail(reason, cause error) error {
	return &DecodeError{Codec: "zstd", Reason: reason, Limit: c.opts.MaxDecoded, Cause: cause}
}
