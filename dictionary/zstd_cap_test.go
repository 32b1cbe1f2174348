package dictionary

import (
	"bytes"
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
