package wsframe

import (
	"crypto/rand"
	"encoding/binary"
	mrand "math/rand/v2"
	"sync"
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
// Mask works on 8-byte words, 32 bytes per loop iteration, on any length
// and alignment. On amd64 the bulk of a payload of 256 bytes or more goes
// 16 bytes per instruction (SSE2, part of every amd64 CPU): about twice the
// word loop's speed on 64 KiB (see the README). Build with the purego tag
// to use the word loop everywhere.
func Mask(b []byte, key [4]byte, offset int) int {
	k64, next := maskKey(key, offset, len(b))
	maskWords(maskBulk(b, k64), k64)
	return next
}

// maskKey returns the key rotated so that its first byte lines up with the
// payload byte at offset, repeated to fill a word, and the offset that
// follows n bytes.
func maskKey(key [4]byte, offset, n int) (k64 uint64, next int) {
	k := binary.LittleEndian.Uint32(key[:])
	if s := uint(offset&3) * 8; s != 0 {
		k = k>>s | k<<(32-s)
	}
	return uint64(k) | uint64(k)<<32, (offset + n) & 3
}

// maskWords masks b with the word-sized key k64 whose low byte lines up
// with b[0].
func maskWords(b []byte, k64 uint64) {
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
	// Every block consumed was a multiple of 4 bytes long, so the key is
	// still aligned with b[0].
	for i := range b {
		b[i] ^= byte(k64)
		k64 = k64>>8 | k64<<56
	}
}

// maskASCII unmasks b like Mask and reports whether every unmasked byte is
// ASCII, in the same pass over memory: text frames are mostly ASCII, and
// for them this replaces a masking pass and a UTF-8 pass with one.
func maskASCII(b []byte, key [4]byte, offset int) bool {
	k64, _ := maskKey(key, offset, len(b))
	var acc uint64
	for len(b) >= 32 {
		w := b[:32:32]
		w0 := binary.LittleEndian.Uint64(w[0:8]) ^ k64
		w1 := binary.LittleEndian.Uint64(w[8:16]) ^ k64
		w2 := binary.LittleEndian.Uint64(w[16:24]) ^ k64
		w3 := binary.LittleEndian.Uint64(w[24:32]) ^ k64
		binary.LittleEndian.PutUint64(w[0:8], w0)
		binary.LittleEndian.PutUint64(w[8:16], w1)
		binary.LittleEndian.PutUint64(w[16:24], w2)
		binary.LittleEndian.PutUint64(w[24:32], w3)
		acc |= w0 | w1 | w2 | w3
		b = b[32:]
	}
	for len(b) >= 8 {
		w := binary.LittleEndian.Uint64(b[:8]) ^ k64
		binary.LittleEndian.PutUint64(b[:8], w)
		acc |= w
		b = b[8:]
	}
	for i := range b {
		b[i] ^= byte(k64)
		acc |= uint64(b[i])
		k64 = k64>>8 | k64<<56
	}
	return acc&ascii == 0
}

// NewMaskKey returns a fresh masking key. RFC 6455 §5.3: "the masking key
// MUST be derived from a strong source of entropy, and the masking key for
// a given frame MUST NOT make it simple for a server/proxy to predict the
// masking key for a subsequent frame."
//
// The keys come from ChaCha8 generators (math/rand/v2's cryptographically
// strong generator) seeded from crypto/rand, kept in a pool so that
// concurrent writers do not share one: a key costs about half of what
// drawing it from crypto/rand does, once per frame a client sends (20
// against 38 ns, BenchmarkNewMaskKey;
// bench/results/wsframe-maskkey-2026-12-04.txt).
func NewMaskKey() [4]byte {
	g := maskKeys.Get().(*mrand.ChaCha8)
	v := g.Uint64()
	maskKeys.Put(g)
	var k [4]byte
	binary.LittleEndian.PutUint32(k[:], uint32(v))
	return k
}

// maskKeys holds ChaCha8 generators, each seeded from crypto/rand when the
// pool makes it.
var maskKeys = sync.Pool{New: func() any {
	var seed [32]byte
	rand.Read(seed[:]) // crypto/rand.Read never returns an error since Go 1.24
	return mrand.NewChaCha8(seed)
}}
