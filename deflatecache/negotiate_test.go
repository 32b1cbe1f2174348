package deflatecache

import (
	"errors"
	"testing"
)

// What real clients send, and what a server with the default policy
// answers: every one gets permessage-deflate without context takeover.
func TestNegotiateRealOffers(t *testing.T) {
	const answer = "permessage-deflate; server_no_context_takeover; client_no_context_takeover"
	for name, offer := range map[string]string{
		"Chromium":                   "permessage-deflate; client_max_window_bits",
		"Firefox":                    "permessage-deflate",
		"Safari":                     "permessage-deflate",
		"gorilla/websocket":          "permessage-deflate; server_no_context_takeover; client_no_context_takeover",
		"Node ws":                    "permessage-deflate; client_max_window_bits",
		"two header lines, joined":   "x-webkit-deflate-frame, permessage-deflate; client_max_window_bits",
		"Python websockets":          "permessage-deflate; server_max_window_bits=12; client_max_window_bits=12",
		"upper case and odd spacing": "PerMessage-Deflate ;Client_Max_Window_Bits\t,",
	} {
		_, resp, ok, err := Negotiate(offer, ServerPolicy{})
		if err != nil || !ok {
			t.Errorf("%s: %v %v", name, ok, err)
			continue
		}
		if name == "Python websockets" {
			if resp != answer+"; server_max_window_bits=12" {
				t.Errorf("%s: %q", name, resp)
			}
		} else if resp != answer {
			t.Errorf("%s: %q", name, resp)
		}
	}
}

func TestNegotiateNoOffer(t *testing.T) {
	for _, h := range []string{"", "  ", ",", " , ,", "x-webkit-deflate-frame", "foo; bar=1, baz"} {
		p, resp, ok, err := Negotiate(h, ServerPolicy{})
		if err != nil || ok || resp != "" || p != (Params{}) {
			t.Errorf("%q: %+v %q %v %v", h, p, resp, ok, err)
		}
	}
}

// TestRFC6455_9_1_NegotiateMalformed: values that break RFC 6455 §9.1
// (a parameter value, after quoted-string unescaping, MUST conform to the
// token ABNF) are an error (the handshake gets a 400), wherever in the
// list they are.
func TestRFC6455_9_1_NegotiateMalformed(t *testing.T) {
	for _, h := range []string{
		";",
		"permessage-deflate;",
		"permessage-deflate; ;",
		"permessage-deflate; =10",
		"permessage-deflate; a=",
		"permessage-deflate; a=b=c",
		"permessage-deflate; a b",
		"permessage deflate",
		"permessage-deflate; a=\"10",
		"permessage-deflate; a=\"1 0\"",
		"permessage-deflate; a=\"\"",
		"permessage-deflate; a=\"x\\",
		"permessage-deflate; a=\"\x01\"",
		"permessage-deflate; client_max_window_bits, foo;",
		"permessage-deflate\x00",
		"(permessage-deflate)",
		"permessage-deflate; a=10;",
		"\"permessage-deflate\"",
	} {
		if _, _, ok, err := Negotiate(h, ServerPolicy{}); ok || !errors.Is(err, ErrMalformedHeader) {
			t.Errorf("Negotiate(%q) = %v, %v; want ErrMalformedHeader", h, ok, err)
		}
		if _, ok, err := ParseResponse(h, ClientOffer{}); ok || !errors.Is(err, ErrMalformedHeader) {
			t.Errorf("ParseResponse(%q) = %v, %v; want ErrMalformedHeader", h, ok, err)
		}
	}
}

// TestNegotiatePolicyTakeover: both directions with context takeover when
// the policy allows it and the client does not refuse.
func TestNegotiatePolicyTakeover(t *testing.T) {
	policy := ServerPolicy{ServerContextTakeover: true, ClientContextTakeover: true}
	p, resp, ok, err := Negotiate("permessage-deflate; client_max_window_bits", policy)
	want := Params{ServerMaxWindowBits: 15, ClientMaxWindowBits: 15}
	if err != nil || !ok || p != want || resp != "permessage-deflate" {
		t.Fatalf("%+v %q", p, resp)
	}
	got, ok, err := ParseResponse(resp, ClientOffer{})
	if err != nil || !ok || got != want {
		t.Fatalf("client side: %+v %v", got, err)
	}
}

// TestNegotiatePolicyNormalized: out-of-range policy windows are clamped,
// never turned into an invalid response.
func TestNegotiatePolicyNormalized(t *testing.T) {
	p, resp, ok, err := Negotiate("permessage-deflate; server_max_window_bits=9", ServerPolicy{MinWindowBits: 3, ServerMaxWindowBits: 40})
	if err != nil || !ok || p.ServerMaxWindowBits != 9 {
		t.Fatalf("%+v %q %v", p, resp, err)
	}
	// A minimum above the maximum is the maximum.
	p, _, ok, _ = Negotiate("permessage-deflate; server_max_window_bits=10", ServerPolicy{MinWindowBits: 14, ServerMaxWindowBits: 10})
	if !ok || p.ServerMaxWindowBits != 10 {
		t.Fatalf("%+v %v", p, ok)
	}
}

// TestOfferRoundTrip: every offer AppendOffer writes is accepted by
// Negotiate, and the answer is accepted by ParseResponse with the same
// agreed parameters.
func TestOfferRoundTrip(t *testing.T) {
	for _, o := range []ClientOffer{
		{},
		{ServerNoContextTakeover: true},
		{ClientNoContextTakeover: true},
		{ServerMaxWindowBits: 8, ClientMaxWindowBits: 8},
		{ServerMaxWindowBits: 15, ClientMaxWindowBits: 15},
		{ServerNoContextTakeover: true, ClientNoContextTakeover: true, ServerMaxWindowBits: 11, ClientMaxWindowBits: 12},
	} {
		for _, policy := range []ServerPolicy{{}, {ServerContextTakeover: true, ClientContextTakeover: true, ClientMaxWindowBits: 10}} {
			h := string(AppendOffer(nil, o))
			sp, resp, ok, err := Negotiate(h, policy)
			if err != nil || !ok {
				t.Fatalf("%q: %v %v", h, ok, err)
			}
			cp, ok, err := ParseResponse(resp, o)
			if err != nil || !ok || cp != sp {
				t.Fatalf("offer %q, answer %q: server agreed %+v, client %+v (%v)", h, resp, sp, cp, err)
			}
		}
	}
}

func BenchmarkNegotiate(b *testing.B) {
	const chromium = "permessage-deflate; client_max_window_bits"
	b.ReportAllocs()
	for b.Loop() {
		if _, _, ok, err := Negotiate(chromium, ServerPolicy{}); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}
