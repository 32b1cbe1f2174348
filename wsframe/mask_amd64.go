//go:build amd64 && !purego

package wsframe

import "unsafe"

// maskBulk masks the longest prefix of b that is a multiple of 64 bytes
// with SSE2 and returns the rest.
func maskBulk(b []byte, k64 uint64) []byte {
	n := len(b) &^ 63
	if n == 0 {
		return b
	}
	maskSSE2(unsafe.SliceData(b), n, k64)
	return b[n:]
}

// maskSSE2 XORs n bytes at p, n a multiple of 64, with k64 repeated.
//
//go:noescape
func maskSSE2(p *byte, n int, k64 uint64)
