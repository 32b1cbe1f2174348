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
// *DecodeError errors, never more than the cap decoded. Deflate must
// decode as a fresh compress/flate reader with the dictionary does (the
// pooled decoder carries nothing from earlier inputs): the same bytes,
// ErrTooLarge exactly when the stream holds more than the cap, else
// ErrCorrupt for a stream that fails or has bytes after its final block.
// Both codecs append after a non-empty dst as after an empty one.
func FuzzDecompress(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		codecs, err := fuzzCodecs()
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range codecs {
			out, err := c.AppendDecompress(nil, data)
			prefix := []byte("dst")
			out2, err2 := c.AppendDecompress(prefix, data)
			if (err == nil) != (err2 == nil) || len(out2) < len(prefix) || string(out2[:len(prefix)]) != "dst" || !bytes.Equal(out2[len(prefix):], out) {
				t.Fatalf("codec %d: %d bytes, %v after an empty dst; %q, %v after \"dst\"", i, len(out), err, out2, err2)
			}
			if i == 0 {
				checkStdInflate(t, c, data, out, err)
			}
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

// checkStdInflate holds what the deflate codec c decoded from data to a
// fresh compress/flate reader with the same dictionary.
func checkStdInflate(t *testing.T, c Codec, data, out []byte, err error) {
	t.Helper()
	src := bytes.NewReader(data)
	fr := stdflate.NewReaderDict(src, c.Dictionary().Bytes())
	want, rerr := io.ReadAll(io.LimitReader(fr, fuzzCap+1))
	var reason error
	switch {
	case len(want) > fuzzCap:
		reason = ErrTooLarge
	case rerr != nil:
		reason = ErrCorrupt
	default:
		// io.ReadAll stops at io.EOF, the end of the final block.
		if src.Len() != 0 {
			reason = ErrCorrupt
		}
	}
	switch {
	case reason == nil && (err != nil || !bytes.Equal(out, want)):
		t.Fatalf("deflate: %d bytes, %v; compress/flate %d bytes", len(out), err, len(want))
	case reason != nil && !errors.Is(err, reason):
		t.Fatalf("deflate: %d bytes, %v; want %v (compress/flate: %d bytes, %v, %d left)", len(out), err, reason, len(want), rerr, src.Len())
	}
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
