package dictionary

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
)

// MaxSize is the largest dictionary, and the default cap of Build. Deflate
// can reach back 32 KiB (RFC 1951 §3.2.5: distances are limited to 32768
// bytes), so a longer preset dictionary would never be referenced.
const MaxSize = 32 << 10

// ErrEmpty is returned by Build and New when there are no bytes to make a
// dictionary from.
var ErrEmpty = errors.New("dictionary: no bytes to build a dictionary from")

// Dictionary is an immutable preset dictionary and its id. It is safe for
// concurrent use.
type Dictionary struct {
	data []byte
	sum  [sha256.Size]byte
	id   string
}

// New wraps dictionary bytes made elsewhere (read from a file, received from
// a peer). It copies b. b must hold 1 to MaxSize bytes.
func New(b []byte) (*Dictionary, error) {
	if len(b) == 0 {
		return nil, ErrEmpty
	}
	if len(b) > MaxSize {
		return nil, fmt.Errorf("dictionary: %d bytes is more than MaxSize (%d)", len(b), MaxSize)
	}
	d := &Dictionary{data: append([]byte(nil), b...)}
	d.sum = sha256.Sum256(d.data)
	d.id = hex.EncodeToString(d.sum[:8])
	return d, nil
}

// ID names the dictionary by its bytes: the first 8 bytes of their SHA-256,
// as 16 lowercase hex digits. Two ends compare ids before using a
// dictionary, so they agree exactly when their bytes agree.
//
// 64 bits make an accidental collision between two different routers'
// dictionaries a 2^-64 event; the id is not a security boundary (a peer that
// lies about it only gets its own messages garbled). Hex rather than base32
// because it is unambiguous to read, copy and grep, at 3 more characters.
func (d *Dictionary) ID() string { return d.id }

// Bytes returns a copy of the dictionary bytes.
func (d *Dictionary) Bytes() []byte { return append([]byte(nil), d.data...) }

// Len reports the number of dictionary bytes.
func (d *Dictionary) Len() int { return len(d.data) }

// zstdID is the dictionary id written in zstd frame headers: derived from
// the same hash, and kept in [32768, 2^31), the range RFC 8878 §5 leaves
// free for private use ("Values from 0 to 32767 are reserved for a future
// registrar and values from 2^31 to 2^32-1 are also reserved").
func (d *Dictionary) zstdID() uint32 {
	const lo, hi = 1 << 15, 1 << 31
	return lo + binary.BigEndian.Uint32(d.sum[8:12])%(hi-lo)
}
