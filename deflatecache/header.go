package deflatecache

import "fmt"

// The grammar of Sec-WebSocket-Extensions, RFC 6455 §9.1:
//
//	extension-list = 1#extension
//	extension = extension-token *( ";" extension-param )
//	extension-token = registered-token
//	registered-token = token
//	extension-param = token [ "=" (token | quoted-string) ]
//	    ;When using the quoted-string syntax variant, the value
//	    ;after quoted-string unescaping MUST conform to the
//	    ;'token' ABNF.
//
// with optional whitespace around the separators, and empty list elements
// ignored as RFC 7230 §7 asks of a recipient. The scanner below walks a
// value once without allocating: each element's name and parameters are
// handed to the caller as substrings of the header.

// param is one extension-param. value is the raw text: a token, or the
// inside of a quoted-string with its escapes still in place.
type param struct {
	name     string
	value    string
	hasValue bool
	quoted   bool
}

// extScanner walks the elements of an extension list.
type extScanner struct {
	s string
	i int
}

func (sc *extScanner) malformed(what string) error {
	return fmt.Errorf("%w: %s at byte %d", ErrMalformedHeader, what, sc.i)
}

func (sc *extScanner) skipSpace() {
	for sc.i < len(sc.s) && (sc.s[sc.i] == ' ' || sc.s[sc.i] == '\t') {
		sc.i++
	}
}

func (sc *extScanner) peek() byte {
	if sc.i < len(sc.s) {
		return sc.s[sc.i]
	}
	return 0
}

func (sc *extScanner) token() string {
	start := sc.i
	for sc.i < len(sc.s) && isTokenChar(sc.s[sc.i]) {
		sc.i++
	}
	return sc.s[start:sc.i]
}

// quotedString consumes a quoted-string (RFC 7230 §3.2.6) and returns its
// inside, escapes kept.
func (sc *extScanner) quotedString() (string, error) {
	sc.i++ // opening DQUOTE
	start := sc.i
	for sc.i < len(sc.s) {
		c := sc.s[sc.i]
		switch {
		case c == '"':
			inner := sc.s[start:sc.i]
			sc.i++
			return inner, nil
		case c == '\\':
			if sc.i+1 >= len(sc.s) || !isQuotedPairChar(sc.s[sc.i+1]) {
				return "", sc.malformed("bad quoted-pair")
			}
			sc.i += 2
		case isQdtext(c):
			sc.i++
		default:
			return "", sc.malformed("bad character in quoted-string")
		}
	}
	return "", sc.malformed("unterminated quoted-string")
}

// nextElement returns the name of the next extension and leaves the
// scanner on its parameters, which nextParam returns one by one. At the end
// of the list it returns "" and nil.
func (sc *extScanner) nextElement() (string, error) {
	for {
		sc.skipSpace()
		switch sc.peek() {
		case 0:
			if sc.i < len(sc.s) {
				return "", sc.malformed("NUL byte")
			}
			return "", nil
		case ',':
			sc.i++
			continue
		}
		name := sc.token()
		if name == "" {
			return "", sc.malformed("expected an extension token")
		}
		return name, nil
	}
}

// nextParam returns the next parameter of the current element, or ok false
// at the element's end (which it consumes, with its comma).
func (sc *extScanner) nextParam() (p param, ok bool, err error) {
	sc.skipSpace()
	switch sc.peek() {
	case ',':
		sc.i++
		return param{}, false, nil
	case ';':
		sc.i++
	default:
		if sc.i >= len(sc.s) {
			return param{}, false, nil
		}
		return param{}, false, sc.malformed("expected ';' or ','")
	}
	sc.skipSpace()
	p.name = sc.token()
	if p.name == "" {
		return param{}, false, sc.malformed("expected a parameter token")
	}
	sc.skipSpace()
	if sc.peek() != '=' {
		return p, true, nil
	}
	sc.i++
	sc.skipSpace()
	p.hasValue = true
	if sc.peek() == '"' {
		p.quoted = true
		if p.value, err = sc.quotedString(); err != nil {
			return param{}, false, err
		}
		if !unquotedIsToken(p.value) {
			return param{}, false, sc.malformed("quoted value is not a token")
		}
		return p, true, nil
	}
	if p.value = sc.token(); p.value == "" {
		return param{}, false, sc.malformed("expected a parameter value")
	}
	return p, true, nil
}

// unquote returns the value of p with quoted-pair escapes removed, in buf
// when it fits, and false when it is longer than buf: every value this
// package understands is one or two digits.
func (p param) unquote(buf []byte) ([]byte, bool) {
	if !p.quoted {
		if len(p.value) > len(buf) {
			return nil, false
		}
		return buf[:copy(buf, p.value)], true
	}
	n := 0
	for i := 0; i < len(p.value); i++ {
		c := p.value[i]
		if c == '\\' {
			i++
			c = p.value[i]
		}
		if n == len(buf) {
			return nil, false
		}
		buf[n] = c
		n++
	}
	return buf[:n], true
}

// unquotedIsToken reports whether the inside of a quoted-string, once
// unescaped, is a non-empty token.
func unquotedIsToken(inner string) bool {
	n := 0
	for i := 0; i < len(inner); i++ {
		c := inner[i]
		if c == '\\' {
			i++
			c = inner[i]
		}
		if !isTokenChar(c) {
			return false
		}
		n++
	}
	return n > 0
}

// isTokenChar reports whether c is a tchar of RFC 7230 §3.2.6:
// "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" / "-" / "." / "^" / "_" /
// "`" / "|" / "~" / DIGIT / ALPHA.
func isTokenChar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}

// isQdtext: HTAB / SP / %x21 / %x23-5B / %x5D-7E / obs-text.
func isQdtext(c byte) bool {
	return c == '\t' || c == ' ' || c == 0x21 || (0x23 <= c && c <= 0x5B) || (0x5D <= c && c <= 0x7E) || c >= 0x80
}

// isQuotedPairChar: HTAB / SP / VCHAR / obs-text.
func isQuotedPairChar(c byte) bool {
	return c == '\t' || c == ' ' || (0x21 <= c && c <= 0x7E) || c >= 0x80
}
