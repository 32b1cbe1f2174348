//go:build amd64 && !purego

package wsframe

import "unsafe"

// maskSSE2Min is the shortest payload handed to the SSE2 loop: below it the
// call costs more than the wider loop saves (measured crossover: between
// 192 and 256 bytes).
const maskSSE2Min = 256

// maskBulk masks the longest prefix of b that is a multiple of 64 bytes
// with SSE2 and returns the rest.
func maskBulk(b []byte, k64 uint64) []byte {
	if len(b) < maskSSE2Min {
		return b
	}
	n := len(b) &^ 63
	maskSSE2(unsafe.SliceData(b), n, k64)
	return b[n:]
}

// maskSSE2 XORs n bytes at p, n a multiple of 64, with k64 repeated.
//
//go:noescape
func maskSSE2(p *byte, n int, k64 uint64)
