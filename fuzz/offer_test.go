package main

import (
	"strings"
	"testing"

	"github.com/gobwas/httphead"
	"github.com/gobwas/ws/wsflate"
	"github.com/hotpath-go/hotpath/deflatecache"
)

// acceptAll is the server policy under which deflatecache.Negotiate's
// answer is the first valid offer itself: every context takeover and
// window allowed.
var acceptAll = deflatecache.ServerPolicy{ServerContextTakeover: true, ClientContextTakeover: true, MinWindowBits: 8, ServerMaxWindowBits: 15, ClientMaxWindowBits: 15}

type offerVerdict struct {
	malformed bool
	ok        bool
	params    deflatecache.Params
}

func negotiateOurs(header string) offerVerdict {
	p, _, ok, err := deflatecache.Negotiate(header, acceptAll)
	if err != nil {
		return offerVerdict{malformed: true}
	}
	return offerVerdict{ok: ok, params: p}
}

// negotiateGobwas reads header as gobwas/ws's server does: httphead parses
// the elements, wsflate.Parameters.Parse reads the parameters of each
// element named permessage-deflate, and the first that parses is the offer
// taken. The harness adds the rules of RFC 6455 §9.1 and RFC 7692 §7 that
// gobwas does not apply, each named in README.md.
func negotiateGobwas(header string) offerVerdict {
	if strings.Trim(header, " \t,") == "" {
		return offerVerdict{} // O1: no element at all
	}
	// O2: names compared without regard to case; O3: HTAB is whitespace.
	header = strings.ReplaceAll(strings.ToLower(header), "\t", " ")
	header, good := unescapeQuoted(header)
	if !good {
		return offerVerdict{malformed: true}
	}
	opts, good := httphead.ParseOptions([]byte(header), nil)
	if !good {
		return offerVerdict{malformed: true}
	}
	// O4: a parameter value must be a token, quoted or not.
	for _, opt := range opts {
		malformed := false
		opt.Parameters.ForEach(func(_, v []byte) bool {
			malformed = v != nil && !isToken(v)
			return !malformed
		})
		if malformed {
			return offerVerdict{malformed: true}
		}
	}
	for _, opt := range opts {
		if string(opt.Name) != wsflate.ExtensionName {
			continue
		}
		var p wsflate.Parameters
		// O5: no leading zero in a window size; O6: no parameter twice.
		if p.Parse(opt) != nil || leadingZero(opt) || duplicateParam(opt) {
			continue
		}
		bits := func(b wsflate.WindowBits) int {
			if b < 8 {
				return 15 // absent (0) or without a value (1)
			}
			return int(b)
		}
		return offerVerdict{ok: true, params: deflatecache.Params{
			ServerNoContextTakeover: p.ServerNoContextTakeover,
			ClientNoContextTakeover: p.ClientNoContextTakeover,
			ServerMaxWindowBits:     bits(p.ServerMaxWindowBits),
			ClientMaxWindowBits:     bits(p.ClientMaxWindowBits),
		}}
	}
	return offerVerdict{}
}

// FuzzOfferGobwas: deflatecache.Negotiate, under a policy that accepts
// any valid offer, and gobwas/ws's offer parser (httphead and
// wsflate.Parameters) agree on whether a Sec-WebSocket-Extensions value is
// well formed, which offer is the first valid permessage-deflate one, and
// its parameters. With wellFormed the fuzzer's bytes are rendered as a
// header that follows RFC 6455 §9.1 (offerHeader), which deflatecache must
// then never call malformed; raw headers that deflatecache calls malformed
// are not compared further (O7: httphead accepts more than the grammar).
func FuzzOfferGobwas(f *testing.F) {
	for _, h := range []string{
		"permessage-deflate; client_max_window_bits",
		"permessage-deflate",
		"x-webkit-deflate-frame, permessage-deflate; server_max_window_bits=10; client_max_window_bits=9",
		`permessage-deflate; server_max_window_bits="8"; server_no_context_takeover; client_no_context_takeover`,
		"permessage-deflate; server_max_window_bits=08, permessage-deflate;client_max_window_bits=15",
		"permessage-deflate; foo=\"a\\\"b\"",
		", ,permessage-deflate ;client_max_window_bits= 12 ,",
	} {
		f.Add(h, false)
	}
	f.Add("\x00\x02\x20\x05\x30\x06\x10\x01\x23\x02", true)
	f.Fuzz(func(t *testing.T, header string, wellFormed bool) {
		if wellFormed {
			header = offerHeader([]byte(header))
		}
		o, g := negotiateOurs(header), negotiateGobwas(header)
		switch {
		case o.malformed && wellFormed:
			t.Fatalf("%q: deflatecache refuses a well-formed header", header)
		case o.malformed:
			// O7: httphead accepts some values RFC 6455 §9.1's grammar
			// refuses (tokens separated by spaces alone, for one).
		case o != g:
			t.Fatalf("%q: deflatecache %+v, gobwas %+v", header, o, g)
		}
	})
}

// isToken reports whether v is an RFC 7230 token.
func isToken(v []byte) bool {
	if len(v) == 0 {
		return false
	}
	for _, c := range v {
		if c <= ' ' || c >= 0x7F || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// unescapeQuoted resolves the quoted-pairs (RFC 7230 §3.2.6) of the
// quoted strings in header for httphead, which drops the escaped character
// ("\0" reads as empty, "c\d" as c): O8. The value must then be a token
// (O4), so an escaped character that is not a token character makes the
// header malformed, which good reports.
func unescapeQuoted(header string) (_ string, good bool) {
	var b strings.Builder
	quoted := false
	for i := 0; i < len(header); i++ {
		c := header[i]
		switch {
		case c == '"':
			quoted = !quoted
		case c == '\\' && quoted:
			if i+1 == len(header) || !isToken([]byte{header[i+1]}) {
				return "", false
			}
			i++
			c = header[i]
		}
		b.WriteByte(c)
	}
	return b.String(), true
}

// leadingZero reports whether a window size of opt has a leading zero.
func leadingZero(opt httphead.Option) bool {
	bad := false
	opt.Parameters.ForEach(func(k, v []byte) bool {
		bad = strings.HasSuffix(string(k), "_window_bits") && len(v) > 1 && v[0] == '0'
		return !bad
	})
	return bad
}

// duplicateParam reports whether opt names a parameter twice.
func duplicateParam(opt httphead.Option) bool {
	seen := map[string]bool{}
	dup := false
	opt.Parameters.ForEach(func(k, _ []byte) bool {
		dup = seen[string(k)]
		seen[string(k)] = true
		return !dup
	})
	return dup
}

// offerHeader renders fuzz bytes as a well-formed Sec-WebSocket-Extensions
// value (RFC 6455 §9.1): elements with a name, parameters with or without
// a value, values as tokens or quoted strings, and optional whitespace
// around the separators.
func offerHeader(b []byte) string {
	next := func() byte {
		if len(b) == 0 {
			return 0
		}
		c := b[0]
		b = b[1:]
		return c
	}
	names := []string{"permessage-deflate", "PerMessage-Deflate", "x-webkit-deflate-frame", "foo"}
	params := []string{"server_no_context_takeover", "client_no_context_takeover", "server_max_window_bits", "client_max_window_bits", "Server_Max_Window_Bits", "bar"}
	values := []string{"8", "9", "10", "12", "15", "08", "7", "16", "0x9", "abc", "1", ""}
	ws := func(c byte) string { return [...]string{"", " ", "\t", "  "}[c&3] }
	var h strings.Builder
	for i := 0; len(b) > 0; i++ {
		c := next()
		if i > 0 {
			h.WriteString(ws(c) + "," + ws(c>>2))
		}
		h.WriteString(names[int(c>>4)%len(names)])
		for n := next() % 4; n > 0; n-- {
			c := next()
			h.WriteString(ws(c) + ";" + ws(c>>2) + params[int(c>>4)%len(params)])
			v := next()
			switch val := values[int(v>>2)%len(values)]; {
			case v&3 == 1 && val != "":
				h.WriteString("=" + val)
			case v&3 == 2 && val != "":
				// RFC 6455 §9.1: the value "after quoted-string unescaping
				// MUST conform to the 'token' ABNF", so never empty.
				h.WriteString(`="` + val + `"`)
			}
		}
	}
	return h.String()
}
