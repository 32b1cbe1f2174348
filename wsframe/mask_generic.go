//go:build !amd64 || purego

package wsframe

// maskBulk leaves everything to maskWords where there is no vector kernel.
func maskBulk(b []byte, _ uint64) []byte { return b }
