package wsframe

import (
	"crypto/rand"
	"encoding/binary"
)

// Mask XORs b in place with the masking key, as RFC 6455 §5.3 defines:
//
//	j                   = i MOD 4
//	transformed-octet-i = original-octet-i XOR masking-key-octet-j
//
// The same call masks and unmasks. offset is the position of b[0] within
// the frame's payload (only offset mod 4 matters), so a payload that arrives
// in pieces is unmasked piece by piece: pass the returned offset to the next
// call.
//
// Mask works a machine word at a time, 32 bytes per loop iteration, on any
// length and alignment.
func Mask(b []byte, key [4]byte, offset int) int {
	next := (offset + len(b)) & 3
	if len(b) == 0 {
		return next
	}
	// Rotate the key so that its first byte lines up with b[0].
	k := binary.LittleEndian.Uint32(key[:])
	if s := uint(offset&3) * 8; s != 0 {
		k = k>>s | k<<(32-s)
	}
	k64 := uint64(k) | uint64(k)<<32
	for len(b) >= 32 {
		w := b[:32:32]
		binary.LittleEndian.PutUint64(w[0:8], binary.LittleEndian.Uint64(w[0:8])^k64)
		binary.LittleEndian.PutUint64(w[8:16], binary.LittleEndian.Uint64(w[8:16])^k64)
		binary.LittleEndian.PutUint64(w[16:24], binary.LittleEndian.Uint64(w[16:24])^k64)
		binary.LittleEndian.PutUint64(w[24:32], binary.LittleEndian.Uint64(w[24:32])^k64)
		b = b[32:]
	}
	for len(b) >= 8 {
		binary.LittleEndian.PutUint64(b[:8], binary.LittleEndian.Uint64(b[:8])^k64)
		b = b[8:]
	}
	// Fewer than 8 bytes remain; every consumed block was a multiple of 4
	// long, so the key is still aligned with b[0].
	for i := range b {
		b[i] ^= byte(k)
		k = k>>8 | k<<24
	}
	return next
}

// NewMaskKey returns a fresh masking key from crypto/rand. RFC 6455 §5.3:
// "the masking key MUST be derived from a strong source of entropy, and the
// masking key for a given frame MUST NOT make it simple for a server/proxy
// to predict the masking key for a subsequent frame."
func NewMaskKey() [4]byte {
	var k [4]byte
	rand.Read(k[:]) // crypto/rand.Read never returns an error since Go 1.24
	return k
}
