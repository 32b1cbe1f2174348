package dictionary

import (
	"bytes"
	"math"
	"testing"
)

// Each codec decodes a message of up to MaxDecoded bytes and refuses one
// byte more, whatever the cap. Zstd refused every message with a cap
// below 1 KiB: its decoder's memory limit was the cap, below the 1 KiB
// window it gives any small frame (a modules audit).
func TestSmallDecodeCaps(t *testing.T) {
	for _, limit := range []int{1, 100, 512, 1000, 1023, 1024, 1025} {
		opts := CodecOptions{MaxDecoded: limit}
		z, err := NewZstd(nil, opts)
		if err != nil {
			t.Fatal(err)
		}
		codecs := map[string]Codec{"zstd": z, "deflate": NewDeflate(nil, opts)}
		for name, c := range codecs {
			for _, n := range []int{limit, limit + 1} {
				msg := bytes.Repeat([]byte("hello world "), n/12+1)[:n]
				packed, ok := c.AppendCompress(nil, msg)
				if !ok {
					continue // too short to compress: sent as it is
				}
				got, err := c.AppendDecompress(nil, packed)
				switch {
				case n <= limit && (err != nil || !bytes.Equal(got, msg)):
					t.Errorf("%s, cap %d: a message of %d bytes: %v", name, limit, n, err)
				case n > limit && !isDecodeError(err, ErrTooLarge):
					t.Errorf("%s, cap %d: a message of %d bytes: %v, want ErrTooLarge", name, limit, n, err)
				}
			}
		}
		z.Close()
	}
}

// A zstd message is one frame (AppendCompress writes one), and only the
// first frame's header was checked against the cap and the dictionary;
// DecodeAll went on to decode every frame concatenated after it. Under a
// cap below 1 KiB, the decoder's own limit, two frames within the cap
// each decoded to more than the cap together. A message that decodes to
// more than its first frame declares is now refused, as Deflate refuses
// bytes after its final block.
func TestZstdOneFramePerMessage(t *testing.T) {
	for _, limit := range []int{100, 1 << 20} {
		z, err := NewZstd(nil, CodecOptions{MaxDecoded: limit, Threshold: 1})
		if err != nil {
			t.Fatal(err)
		}
		msg := bytes.Repeat([]byte("hello world "), 7)[:80]
		one, ok := z.AppendCompress(nil, msg)
		if !ok {
			t.Fatal("an 80-byte repetitive message did not compress")
		}
		if got, err := z.AppendDecompress(nil, one); err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("cap %d: one frame: %v", limit, err)
		}
		two := append(append([]byte(nil), one...), one...)
		got, err := z.AppendDecompress([]byte("kept"), two)
		if err == nil {
			t.Errorf("cap %d: two frames decoded as one message of %d bytes", limit, len(got)-4)
		} else if !isDecodeError(err, ErrCorrupt) || string(got) != "kept" {
			t.Errorf("cap %d: two frames: %q, %v; want dst unchanged and ErrCorrupt", limit, got, err)
		}
		z.Close()
	}
}

// A cap of math.MaxInt, the natural "no cap", with bytes already in dst:
// Deflate computed its limit as len(dst)+MaxDecoded, which wrapped
// negative, and sliced dst with it: a panic on every message.
func TestHugeDecodeCapAfterAPrefix(t *testing.T) {
	opts := CodecOptions{MaxDecoded: math.MaxInt, Threshold: 1}
	z, err := NewZstd(nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	msg := bytes.Repeat([]byte("hello world "), 20)
	for name, c := range map[string]Codec{"zstd": z, "deflate": NewDeflate(nil, opts)} {
		packed, ok := c.AppendCompress(nil, msg)
		if !ok {
			t.Fatalf("%s: a repetitive message did not compress", name)
		}
		got, err := c.AppendDecompress([]byte("prefix:"), packed)
		if err != nil || string(got) != "prefix:"+string(msg) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
