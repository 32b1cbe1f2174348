package dictionary

import (
	"bytes"
	stdflate "compress/flate"
	"errors"
	"io"
	"sync"
	"testing"
)

const fuzzCap = 4 << 10

var fuzzCodecs = sync.OnceValues(func() ([]Codec, error) {
	d, err := Build(testSource(), BuildOptions{})
	if err != nil {
		return nil, err
	}
	z, err := NewZstd(d, CodecOptions{Threshold: 1, MaxDecoded: fuzzCap})
	if err != nil {
		return nil, err
	}
	return []Codec{NewDeflate(d, CodecOptions{Threshold: 1, MaxDecoded: fuzzCap}), z}, nil
})

func fuzzSeeds(f *testing.F) {
	codecs, err := fuzzCodecs()
	if err != nil {
		f.Fatal(err)
	}
	for _, m := range [][]byte{eventMessage(), callMessage(), historyAnswer(), make([]byte, 2*fuzzCap)} {
		f.Add(m)
		for _, c := range codecs {
			if out, ok := c.AppendCompress(nil, m); ok {
				f.Add(out)
				f.Add(out[:len(out)/2])
			}
		}
	}
}

// FuzzDecompress feeds arbitrary bytes to both decoders: no panic, only
// *DecodeError errors, never more than the cap decoded.
func FuzzDecompress(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		codecs, err := fuzzCodecs()
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range codecs {
			out, err := c.AppendDecompress(nil, data)
			if err != nil {
				var de *DecodeError
				if !errors.As(err, &de) {
					t.Fatalf("error of type %T: %v", err, err)
				}
				continue
			}
			if len(out) > fuzzCap {
				t.Fatalf("decoded %d bytes past the cap of %d", len(out), fuzzCap)
			}
		}
	})
}

// FuzzRoundTrip compresses arbitrary bytes with both codecs and checks
// they come back; the deflate output must also inflate, to the same bytes,
// with the standard library's compress/flate.
func FuzzRoundTrip(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > fuzzCap {
			data = data[:fuzzCap]
		}
		codecs, err := fuzzCodecs()
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range codecs {
			out, ok := c.AppendCompress(nil, data)
			if !ok {
				continue
			}
			back, err := c.AppendDecompress(nil, out)
			if err != nil || !bytes.Equal(back, data) {
				t.Fatalf("codec %d: round trip of %d bytes: %v", i, len(data), err)
			}
			if i == 0 {
				std, err := io.ReadAll(stdflate.NewReaderDict(bytes.NewReader(out), c.Dictionary().data))
				if err != nil || !bytes.Equal(std, data) {
					t.Fatalf("compress/flate disagrees: %v", err)
				}
			}
		}
	})
}
