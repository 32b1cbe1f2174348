package deflatecache

import (
	"bytes"
	stdflate "compress/flate"
	"testing"

	"github.com/hotpath-go/hotpath/wsframe"
)

// interopMessages are the payloads of the interoperability tests: JSON of
// several sizes (one crossing the 64 KiB block size), repeated text,
// incompressible bytes.
func interopMessages() [][]byte {
	n := 70000
	if raceEnabled {
		n = 9000
	}
	return [][]byte{
		document(1, 200),
		document(2, 5000),
		document(3, n),
		bytes.Repeat([]byte("abcabcabd"), 2000),
		append(noise(4, 3000), document(5, 3000)...),
	}
}

// TestInteropStdlibInflatesOurs: what this package compresses, at every
// window and every level, with and without context takeover, the standard
// library's compress/flate inflates to the same bytes.
func TestInteropStdlibInflatesOurs(t *testing.T) {
	msgs := interopMessages()
	levels := []int{1, 2, 3, 4, 5, 6, 7, 8, 9}
	if raceEnabled {
		levels = []int{1, 5, 9}
	}
	for bits := MinWindowBits; bits <= MaxWindowBits; bits++ {
		for _, level := range levels {
			if bits < MaxWindowBits && level > 1 {
				break // one algorithm below 15 bits: levels are the same compressor
			}
			for _, takeover := range []bool{false, true} {
				c := mustConn(t, Params{ServerNoContextTakeover: !takeover, ServerMaxWindowBits: bits}, wsframe.Server, Options{Level: level, TakeoverHistory: 1 << 15})
				var history []byte
				for i, m := range msgs {
					out, ok := c.AppendCompressed(nil, m)
					if !ok {
						t.Fatalf("bits=%d level=%d message %d not compressed", bits, level, i)
					}
					if got := stdInflate(t, out, history); !bytes.Equal(got, m) {
						t.Fatalf("bits=%d level=%d takeover=%v message %d: compress/flate inflates to other bytes", bits, level, takeover, i)
					}
					if takeover {
						history = append(history, m...)
					}
				}
			}
		}
	}
}

// TestInteropOursInflatesStdlib: what compress/flate writes at every level
// (with a sync flush and the tail removed, as an RFC 7692 peer sends it)
// this package inflates, on every window, with a fresh compressor per
// message and with one kept across messages (context takeover).
func TestInteropOursInflatesStdlib(t *testing.T) {
	msgs := interopMessages()
	for level := stdflate.HuffmanOnly; level <= stdflate.BestCompression; level++ {
		for bits := MinWindowBits; bits <= MaxWindowBits; bits++ {
			if raceEnabled && level%4 != 0 && bits%4 != 0 {
				continue
			}
			// The standard library always compresses with a 32 KiB
			// window: with takeover only bits 15 keeps enough history.
			for _, takeover := range []bool{false, bits == MaxWindowBits} {
				c := mustConn(t, Params{ClientNoContextTakeover: !takeover, ClientMaxWindowBits: bits}, wsframe.Server, Options{})
				var w appendWriter
				fw, err := stdflate.NewWriter(&w, level)
				if err != nil {
					t.Fatal(err)
				}
				for i, m := range msgs {
					if !takeover {
						fw.Reset(&w)
					}
					w.b = w.b[:0]
					fw.Write(m)
					fw.Flush()
					payload := bytes.TrimSuffix(w.b, tail)
					got, err := c.Inflate(nil, payload, 1<<20)
					if err != nil || !bytes.Equal(got, m) {
						t.Fatalf("level=%d bits=%d takeover=%v message %d: %v", level, bits, takeover, i, err)
					}
				}
			}
		}
	}
}

// TestTraceInflateAgreesWithStdlib checks the test's own decoder, on whose
// distances the window tests rely.
func TestTraceInflateAgreesWithStdlib(t *testing.T) {
	for level := stdflate.HuffmanOnly; level <= stdflate.BestCompression; level += iterations(1, 3) {
		for _, m := range interopMessages() {
			var w appendWriter
			fw, _ := stdflate.NewWriter(&w, level)
			fw.Write(m)
			fw.Close()
			got, _, err := traceInflate(w.b, nil)
			if err != nil || !bytes.Equal(got, m) {
				t.Fatalf("level %d: %v", level, err)
			}
		}
	}
}
