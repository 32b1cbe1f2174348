package conformance

import (
	"bytes"
	"compress/flate"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
)

// stdDeflate compresses p as compress/flate does for a permessage-deflate
// sender: flushed, the 00 00 ff ff tail removed.
func stdDeflate(t testing.TB, p []byte, level int) []byte {
	var b bytes.Buffer
	w, err := flate.NewWriter(&b, level)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(p)
	w.Flush()
	return bytes.TrimSuffix(b.Bytes(), []byte{0, 0, 0xff, 0xff})
}

// stdInflate is compress/flate's reading of a permessage-deflate payload.
func stdInflate(p []byte) ([]byte, error) {
	r := flate.NewReader(io.MultiReader(bytes.NewReader(p), bytes.NewReader([]byte{0, 0, 0xff, 0xff, 1, 0, 0, 0xff, 0xff})))
	return io.ReadAll(r)
}

func testMessages() [][]byte {
	r := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 40000)
	for i := range random {
		random[i] = byte(r.IntN(256))
	}
	text := bytes.Repeat([]byte(`{"event":"tick","symbol":"HOT","price":101.25} `), 900)
	return [][]byte{{}, []byte("a"), []byte("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"), random, text, append(random[:5000:5000], text...)}
}

func TestDeflaterRoundTrip(t *testing.T) {
	for _, bits := range []int{8, 9, 12, 15} {
		for _, takeover := range []bool{false, true} {
			enc := deflater{windowBits: bits, takeover: takeover}
			dec := inflater{windowBits: bits, takeover: takeover}
			for i, m := range testMessages() {
				c := enc.deflateMessage(m)
				if !takeover {
					std, err := stdInflate(c)
					if err != nil || !bytes.Equal(std, m) {
						t.Fatalf("bits %d message %d: compress/flate reads %d bytes, %v", bits, i, len(std), err)
					}
				}
				got, err := dec.inflateMessage(c, 1<<20)
				if err != nil || !bytes.Equal(got, m) {
					t.Fatalf("bits %d takeover %t message %d: inflates to %d bytes, %v", bits, takeover, i, len(got), err)
				}
			}
		}
	}
}

func TestInflaterReadsCompressFlate(t *testing.T) {
	for _, level := range []int{flate.HuffmanOnly, flate.BestSpeed, flate.DefaultCompression, flate.BestCompression} {
		for i, m := range testMessages() {
			dec := inflater{windowBits: 15}
			got, err := dec.inflateMessage(stdDeflate(t, m, level), 1<<20)
			if err != nil || !bytes.Equal(got, m) {
				t.Fatalf("level %d message %d: %d bytes, %v", level, i, len(got), err)
			}
		}
	}
}

func TestStoredDeflate(t *testing.T) {
	for _, m := range testMessages() {
		got, err := stdInflate(storedDeflate(m, 1000))
		if err != nil || !bytes.Equal(got, m) {
			t.Fatalf("%d bytes: compress/flate reads %d, %v", len(m), len(got), err)
		}
	}
}

// TestInflaterWindow: a reference 300 bytes back is fine in a 512-byte
// window and an error in a 256-byte one.
func TestInflaterWindow(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	chunk := make([]byte, 300)
	for i := range chunk {
		chunk[i] = byte(r.IntN(256))
	}
	c := (&deflater{windowBits: 9}).deflateMessage(append(chunk, chunk...))
	if _, err := (&inflater{windowBits: 9}).inflateMessage(c, 1<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := (&inflater{windowBits: 8}).inflateMessage(c, 1<<20); !errors.Is(err, errTooFar) {
		t.Fatalf("window 8: %v, want errTooFar", err)
	}
	if _, err := (&inflater{windowBits: 9}).inflateMessage(c, 500); err == nil {
		t.Fatal("inflate past max succeeded")
	}
}

// FuzzInflater checks the suite's inflater against compress/flate: both
// read a stream the same, or the suite's refuses it.
func FuzzInflater(f *testing.F) {
	for _, m := range testMessages()[:4] {
		f.Add(stdDeflate(f, m, flate.BestSpeed))
		f.Add((&deflater{windowBits: 8}).deflateMessage(m))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		got, err := (&inflater{windowBits: 15}).inflateMessage(p, 1<<20)
		if err != nil {
			return
		}
		want, werr := stdInflate(p)
		switch {
		case werr == nil && !bytes.Equal(got, want):
			t.Fatalf("suite inflates %d bytes, compress/flate %d", len(got), len(want))
		case werr != nil && !bytes.HasPrefix(got, want):
			// compress/flate reads on past the tail the suite treats as
			// the end; what it did read must agree.
			t.Fatalf("suite inflates %d bytes, compress/flate %d before %v", len(got), len(want), werr)
		}
	})
}

// FuzzDeflater round-trips any message through the suite's deflater and
// compress/flate.
func FuzzDeflater(f *testing.F) {
	for _, m := range testMessages()[:3] {
		f.Add(m, uint8(8))
	}
	f.Fuzz(func(t *testing.T, m []byte, bits uint8) {
		enc := deflater{windowBits: 8 + int(bits%8)}
		c := enc.deflateMessage(m)
		got, err := stdInflate(c)
		if err != nil || !bytes.Equal(got, m) {
			t.Fatalf("compress/flate reads %d of %d bytes: %v", len(got), len(m), err)
		}
	})
}
