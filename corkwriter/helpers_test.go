package corkwriter

import "testing"

// pattern is the source of written bytes: its period is a prime that no
// chunk or write size divides, so a byte sent twice, skipped or reordered
// shows as a mismatch.
const patternPeriod = 65521

var pattern = func() []byte {
	p := make([]byte, patternPeriod+maxOpSize)
	x := uint32(1)
	for i := range p {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		p[i] = byte(x >> 24)
	}
	return p
}()

// maxOpSize is the largest write of a model run: past the default flush
// threshold and several chunks long.
const maxOpSize = 1<<16 + 1<<14

func mustWrite(t *testing.T, write func([]byte) (int, error), p []byte) {
	t.Helper()
	if n, err := write(p); err != nil || n != len(p) {
		t.Fatalf("write: %d, %v", n, err)
	}
}

// mismatch returns the index of the first byte where a and b differ.
func mismatch(a, b []byte) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}
