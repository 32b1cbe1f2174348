package wsframe

import "encoding/binary"

// UTF8Validator checks that a byte stream fed in pieces is valid UTF-8
// (RFC 3629), carrying an incomplete sequence from one piece to the next, so
// a text message is validated fragment by fragment, and a fragment chunk by
// chunk as it arrives, without reassembling it first.
//
// It fails fast: Valid returns false on the piece that holds the first byte
// after which the stream can no longer be completed into valid UTF-8 (a
// stray continuation byte, an overlong or surrogate lead, a code point above
// U+10FFFF), which is what the Autobahn 6.x cases expect. Complete, called
// once the stream ends (at FIN), rejects a stream that stops inside a
// sequence.
//
// The zero value is ready to use and the validator is 4 bytes.
type UTF8Validator struct {
	need   uint8 // continuation bytes still expected
	lo, hi uint8 // the range the next continuation byte must fall in
	failed bool
}

// Valid feeds p and reports whether the stream so far can still be
// completed into valid UTF-8. Once it returns false, the validator stays
// failed until Reset.
func (v *UTF8Validator) Valid(p []byte) bool {
	if v.need != 0 || v.failed {
		if v.failed {
			return false
		}
		for v.need != 0 {
			if len(p) == 0 {
				return true
			}
			if c := p[0]; c < v.lo || c > v.hi {
				v.failed = true
				return false
			}
			p = p[1:]
			v.need--
			v.lo, v.hi = 0x80, 0xBF
		}
	}
	tail, ok := validPrefix(p)
	if !ok {
		v.failed = true
		return false
	}
	if len(tail) == 0 {
		return true
	}
	// tail starts a sequence cut off by the end of p; the bytes present
	// are checked already.
	x := leadInfo[tail[0]]
	v.need = x&7 - uint8(len(tail))
	v.lo, v.hi = 0x80, 0xBF
	if len(tail) == 1 {
		r := acceptRanges[x>>4]
		v.lo, v.hi = r.lo, r.hi
	}
	return true
}

// Complete reports whether the stream fed so far is valid UTF-8 that ends
// on a character boundary: call it when the message ends.
func (v *UTF8Validator) Complete() bool { return v.need == 0 && !v.failed }

// Reset makes v ready for a new stream.
func (v *UTF8Validator) Reset() { *v = UTF8Validator{} }

// ValidUTF8 reports whether p is entirely valid UTF-8. It is the one-shot
// form of UTF8Validator, for a payload that is already whole.
func ValidUTF8(p []byte) bool {
	tail, ok := validPrefix(p)
	return ok && len(tail) == 0
}

// leadInfo describes each possible first byte of a sequence: the low 3 bits
// hold the sequence length (0 for a byte that can never start one, 1 for
// ASCII), the high 4 bits index acceptRanges for the second byte.
var leadInfo = [256]uint8{
	// 0x00-0x7F: ASCII.
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	// 0x80-0xBF: continuation bytes, 0xC0-0xC1: overlong 2-byte leads.
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	0, 0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, // 0xC2-0xCF
	2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, // 0xD0-0xDF
	0x13, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 0x23, 3, 3, // 0xE0, 0xE1-0xEC, 0xED, 0xEE-0xEF
	0x34, 4, 4, 4, 0x44, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, // 0xF0, 0xF1-0xF3, 0xF4, 0xF5-0xFF
}

type acceptRange struct{ lo, hi uint8 }

// acceptRanges bounds the second byte of a sequence, by leadInfo>>4:
// RFC 3629 §4 excludes overlong forms (E0 80-9F, F0 80-8F), the UTF-16
// surrogates (ED A0-BF) and code points above U+10FFFF (F4 90-BF).
var acceptRanges = [5]acceptRange{
	{0x80, 0xBF},
	{0xA0, 0xBF}, // after E0
	{0x80, 0x9F}, // after ED
	{0x90, 0xBF}, // after F0
	{0x80, 0x8F}, // after F4
}

// validPrefix scans p and returns ok=false as soon as a byte makes p
// invalid UTF-8 whatever follows it. Otherwise tail is empty, or the start
// of a sequence whose remaining bytes lie beyond the end of p (the bytes of
// it that p holds are checked).
//
// It reslices p rather than indexing it, skips ASCII 8, 16, then 32 bytes
// at a time, and re-enters that fast path after every multi-byte sequence,
// which keeps mostly-ASCII text (JSON) at memory speed.
func validPrefix(p []byte) (tail []byte, ok bool) {
	p = p[:len(p):len(p)] // lets the compiler drop capacity arithmetic
	for len(p) > 0 {
		c := p[0]
		if c < 0x80 {
			p = p[1:]
			// Strict > keeps every reslice below in bounds.
			if len(p) > 8 && word(p)&ascii == 0 {
				p = p[8:]
				if len(p) > 16 && (word(p)|word(p[8:]))&ascii == 0 {
					p = p[16:]
					for len(p) > 32 && (word(p)|word(p[8:])|word(p[16:])|word(p[24:]))&ascii == 0 {
						p = p[32:]
					}
				}
			}
			continue
		}
		x := leadInfo[c]
		r := acceptRanges[x>>4]
		switch x & 7 {
		case 2:
			if len(p) < 2 {
				return p, true
			}
			if p[1] < r.lo || r.hi < p[1] {
				return nil, false
			}
			p = p[2:]
		case 3:
			if len(p) < 3 {
				return p, partialValid(p, r)
			}
			if p[1] < r.lo || r.hi < p[1] || p[2] < 0x80 || 0xBF < p[2] {
				return nil, false
			}
			p = p[3:]
		case 4:
			if len(p) < 4 {
				return p, partialValid(p, r)
			}
			if p[1] < r.lo || r.hi < p[1] || p[2] < 0x80 || 0xBF < p[2] || p[3] < 0x80 || 0xBF < p[3] {
				return nil, false
			}
			p = p[4:]
		default:
			return nil, false
		}
	}
	return nil, true
}

// partialValid checks the bytes present of a sequence cut by the end of the
// input: seq holds the lead and fewer bytes than the lead announces.
func partialValid(seq []byte, r acceptRange) bool {
	if len(seq) >= 2 && (seq[1] < r.lo || r.hi < seq[1]) {
		return false
	}
	if len(seq) >= 3 && (seq[2] < 0x80 || 0xBF < seq[2]) {
		return false
	}
	return true
}

const ascii = 0x8080808080808080

func word(p []byte) uint64 { return binary.LittleEndian.Uint64(p) }
