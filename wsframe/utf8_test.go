package wsframe

import (
	"sort"
	"testing"
	"unicode/utf8"
)

var utf8Cases = []string{
	"",
	"plain ASCII that is longer than eight bytes",
	"\x00\x7f",
	"\xc2\x80", "\xdf\xbf", // U+0080, U+07FF
	"\xe0\xa0\x80", "\xef\xbf\xbf", // U+0800, U+FFFF
	"\xf0\x90\x80\x80", "\xf4\x8f\xbf\xbf", // U+10000, U+10FFFF
	"\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5", // κόσμε
	"\xed\x9f\xbf", "\xee\x80\x80", // around the surrogates
	"\x80", "\xbf", // lone continuation bytes
	"\xc0\x80", "\xc1\xbf", // overlong 2-byte
	"\xe0\x80\x80", "\xe0\x9f\xbf", // overlong 3-byte
	"\xf0\x80\x80\x80", "\xf0\x8f\xbf\xbf", // overlong 4-byte
	"\xed\xa0\x80", "\xed\xbf\xbf", // surrogates
	"\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xff", // above U+10FFFF
	"\xc2", "\xe1\x80", "\xf1\x80\x80", // cut short
	"\xc2\x41", "\xe1\x80\x41", "\xf1\x80\x80\x41", // interrupted
	"{\"name\":\"caf\xc3\xa9\",\"n\":1}",
	"0123456789abcdef\xce\xba0123456789abcdef\xed\xa0\x80",
}

func TestValidUTF8MatchesStandardLibrary(t *testing.T) {
	for _, s := range utf8Cases {
		if got, want := ValidUTF8([]byte(s)), utf8.ValidString(s); got != want {
			t.Errorf("ValidUTF8(%q) = %v, want %v", s, got, want)
		}
	}
	// Every sequence of one and two bytes, and every three-byte sequence
	// starting with a lead or continuation byte.
	b := make([]byte, 3)
	for i := 0; i < 1<<16; i++ {
		b[0], b[1] = byte(i>>8), byte(i)
		if ValidUTF8(b[:2]) != utf8.Valid(b[:2]) {
			t.Fatalf("% x", b[:2])
		}
		if b[0] < 0x80 {
			continue
		}
		for c := 0; c < 256; c++ {
			b[2] = byte(c)
			if ValidUTF8(b) != utf8.Valid(b) {
				t.Fatalf("% x", b)
			}
		}
	}
	// Four-byte sequences over every lead and second byte.
	for lead := 0xF0; lead <= 0xFF; lead++ {
		for c1 := 0; c1 < 256; c1++ {
			p := []byte{byte(lead), byte(c1), 0x80, 0xBF}
			if ValidUTF8(p) != utf8.Valid(p) {
				t.Fatalf("% x", p)
			}
		}
	}
}

// checkStream feeds p to a UTF8Validator in the pieces that the sorted cut
// points make, and checks it against utf8.Valid and the fail-fast rule: Valid
// fails on the piece that holds the first byte after which p cannot be
// completed, and not before.
func checkStream(t testing.TB, p []byte, cuts []int) {
	sort.Ints(cuts)
	bad := uncompletableAt(p)
	var v UTF8Validator
	start := 0
	for i := 0; i <= len(cuts); i++ {
		end := len(p)
		if i < len(cuts) {
			end = max(start, min(cuts[i], len(p)))
		}
		ok := v.Valid(p[start:end])
		switch {
		case bad >= 0 && bad < end && ok:
			t.Fatalf("% x cut at %v: piece [%d,%d) holds byte %d that cannot be completed, Valid says true", p, cuts, start, end, bad)
		case (bad < 0 || bad >= end) && !ok:
			t.Fatalf("% x cut at %v: Valid false on [%d,%d), first bad byte %d", p, cuts, start, end, bad)
		case !ok:
			if v.Valid([]byte("a")) || v.Complete() {
				t.Fatalf("% x: validator recovered after failing", p)
			}
			return
		}
		start = end
	}
	if v.Complete() != utf8.Valid(p) {
		t.Fatalf("% x cut at %v: Complete %v, utf8.Valid %v", p, cuts, v.Complete(), utf8.Valid(p))
	}
}

// uncompletableAt returns the index of the first byte of p after which no
// continuation makes p valid UTF-8, or -1 if every prefix of p can still be
// completed. Being completable only ever turns false as a prefix grows, so
// it binary-searches the shortest prefix that is not.
func uncompletableAt(p []byte) int {
	k := sort.Search(len(p)+1, func(k int) bool { return !completable(p[:k]) })
	if k > len(p) {
		return -1
	}
	return k - 1
}

// completable reports whether some suffix makes q valid UTF-8: q is valid,
// or valid up to a trailing start of a sequence that the smallest allowed
// continuation bytes complete.
func completable(q []byte) bool {
	if utf8.Valid(q) {
		return true
	}
	for j := 1; j <= 3 && j <= len(q); j++ {
		head, tail := q[:len(q)-j], q[len(q)-j:]
		size := 0
		switch lead := tail[0]; {
		case lead >= 0xC2 && lead <= 0xDF:
			size = 2
		case lead >= 0xE0 && lead <= 0xEF:
			size = 3
		case lead >= 0xF0 && lead <= 0xF4:
			size = 4
		}
		if j >= size || !utf8.Valid(head) {
			continue
		}
		seq := append([]byte(nil), tail...)
		for len(seq) < size {
			c := byte(0x80)
			if len(seq) == 1 && tail[0] == 0xE0 {
				c = 0xA0
			} else if len(seq) == 1 && tail[0] == 0xF0 {
				c = 0x90
			}
			seq = append(seq, c)
		}
		if utf8.Valid(seq) {
			return true
		}
	}
	return false
}

func TestUTF8ValidatorEverySplit(t *testing.T) {
	for _, s := range utf8Cases {
		p := []byte(s)
		for i := 0; i <= len(p); i++ {
			for j := i; j <= len(p); j++ {
				checkStream(t, p, []int{i, j})
			}
		}
	}
}

func TestUTF8ValidatorByteAtATime(t *testing.T) {
	s := []byte("a\xce\xba\xe1\xbd\xb9\xf0\x9f\x98\x80z")
	cuts := make([]int, len(s))
	for i := range cuts {
		cuts[i] = i
	}
	checkStream(t, s, cuts)
	var v UTF8Validator
	for i := range s {
		if !v.Valid(s[i : i+1]) {
			t.Fatalf("byte %d", i)
		}
		if wantComplete := utf8.Valid(s[:i+1]); v.Complete() != wantComplete {
			t.Fatalf("after byte %d: Complete %v", i, v.Complete())
		}
	}
	v.Reset()
	if !v.Complete() {
		t.Fatal("Reset validator is not complete")
	}
}
