package deflatecache

import (
	"fmt"
	"strconv"
	"strings"
)

// ExtensionName is the registered name of the extension, RFC 7692 §7:
// "The registered extension name for this extension is
// "permessage-deflate"".
const ExtensionName = "permessage-deflate"

// The window sizes RFC 7692 §7.1.2 allows: "a decimal integer value without
// leading zeroes between 8 to 15, inclusive, indicating the base-2 logarithm
// of the LZ77 sliding window size".
const (
	MinWindowBits = 8
	MaxWindowBits = 15
)

const (
	serverNoContextTakeover = "server_no_context_takeover"
	clientNoContextTakeover = "client_no_context_takeover"
	serverMaxWindowBits     = "server_max_window_bits"
	clientMaxWindowBits     = "client_max_window_bits"
)

// Params are the agreed parameters of one connection, RFC 7692 §7.1: which
// direction keeps its LZ77 window between messages (context takeover) and
// how large each direction's window may be. Negotiate returns them on the
// server, ParseResponse on the client; NewConn turns them into a
// connection's compression state. The zero value is what a bare
// "permessage-deflate" agrees to: context takeover both ways, 32 KiB
// windows.
type Params struct {
	// ServerNoContextTakeover: the server compresses every message from an
	// empty window, so the client inflates each one alone.
	ServerNoContextTakeover bool
	// ClientNoContextTakeover: the client compresses every message from an
	// empty window, so the server inflates each one alone.
	ClientNoContextTakeover bool
	// ServerMaxWindowBits is the base-2 logarithm of the window the server
	// compresses with, 8 to 15; 0 means 15 (32 KiB, no limit).
	ServerMaxWindowBits int
	// ClientMaxWindowBits is the same for the client's window.
	ClientMaxWindowBits int
}

// ServerPolicy is what a server is willing to agree to. The zero value is
// the memory-frugal default a broadcasting server wants: no context
// takeover in either direction, every window from 8 to 15 accepted, and
// the server's own window at most 15. Window sizes outside 8 to 15 (3, 20)
// are taken as the nearest valid one, not refused.
type ServerPolicy struct {
	// ServerContextTakeover lets the server keep its compression history
	// between the messages it sends, when the client allows it. It costs
	// history memory per connection and a priming pass per message (see
	// Options.TakeoverHistory); off, the response always carries
	// server_no_context_takeover (RFC 7692 §7.1.1.1: "A server MAY include
	// the "server_no_context_takeover" extension parameter in an extension
	// negotiation response even if the extension negotiation offer being
	// accepted by the extension negotiation response didn't include" it).
	ServerContextTakeover bool
	// ClientContextTakeover lets the client keep its compression history,
	// which makes the server keep a copy of the client's window (up to
	// 2^ClientMaxWindowBits bytes) for the life of the connection. Off,
	// the response always carries client_no_context_takeover (RFC 7692
	// §7.1.1.2: "A server MAY include the "client_no_context_takeover"
	// extension parameter in an extension negotiation response").
	ClientContextTakeover bool
	// MinWindowBits is the smallest server_max_window_bits the server
	// honours; an offer asking for less is declined, never answered with
	// more. 0 means 8: every window, since klauspost/compress compresses
	// with a 256-byte window.
	MinWindowBits int
	// ServerMaxWindowBits caps the server's window: the response names it
	// even when the offer did not (§7.1.2.1 allows that). 0 means 15.
	ServerMaxWindowBits int
	// ClientMaxWindowBits caps the client's window when the client takes
	// over context, bounding the history the server keeps for it. It can
	// only be sent when the offer named client_max_window_bits (§7.1.2.2);
	// when the offer did not, client context takeover is refused instead.
	// 0 means 15.
	ClientMaxWindowBits int
}

func clampBits(b int) int {
	switch {
	case b == 0 || b > MaxWindowBits:
		return MaxWindowBits
	case b < MinWindowBits:
		return MinWindowBits
	}
	return b
}

// normalized returns p with zero and out-of-range window sizes replaced by
// the nearest valid value.
func (p ServerPolicy) normalized() ServerPolicy {
	p.ServerMaxWindowBits = clampBits(p.ServerMaxWindowBits)
	p.ClientMaxWindowBits = clampBits(p.ClientMaxWindowBits)
	if p.MinWindowBits == 0 {
		p.MinWindowBits = MinWindowBits
	}
	p.MinWindowBits = min(clampBits(p.MinWindowBits), p.ServerMaxWindowBits)
	return p
}

// offer is one permessage-deflate element of a header, offer or response,
// as RFC 7692 §7.1 defines its parameters.
type offer struct {
	serverNoTakeover bool
	clientNoTakeover bool
	serverBits       int  // 0 when absent
	clientBits       int  // 0 when absent or without a value
	clientBitsNamed  bool // client_max_window_bits present, with or without value
	seen             uint8
	invalid          string // why the element cannot be accepted, "" when it can
}

// add records one parameter. RFC 7692 §7: a server "MUST decline an
// extension negotiation offer for this extension if any of the following
// conditions are met: The negotiation offer contains an extension
// parameter not defined for use in an offer. The negotiation offer
// contains an extension parameter with an invalid value. The negotiation
// offer contains multiple extension parameters with the same name." The
// client's list for a response is the same.
func (o *offer) add(p param, response bool) {
	if o.invalid != "" {
		return
	}
	var bit uint8
	switch {
	case strings.EqualFold(p.name, serverNoContextTakeover):
		bit = 1
		o.serverNoTakeover = true
		if p.hasValue {
			o.invalid = serverNoContextTakeover + " has a value"
		}
	case strings.EqualFold(p.name, clientNoContextTakeover):
		bit = 2
		o.clientNoTakeover = true
		if p.hasValue {
			o.invalid = clientNoContextTakeover + " has a value"
		}
	case strings.EqualFold(p.name, serverMaxWindowBits):
		// §7.1.2.1: in an offer and in a response it "has a decimal
		// integer value".
		bit = 4
		o.serverBits = windowValue(p)
		if o.serverBits == 0 {
			o.invalid = serverMaxWindowBits + " without a value from 8 to 15"
		}
	case strings.EqualFold(p.name, clientMaxWindowBits):
		// §7.1.2.2: in an offer it "has no value or a decimal integer
		// value"; in a response it "has a decimal integer value".
		bit = 8
		o.clientBitsNamed = true
		if p.hasValue {
			if o.clientBits = windowValue(p); o.clientBits == 0 {
				o.invalid = clientMaxWindowBits + " without a value from 8 to 15"
			}
		} else if response {
			o.invalid = clientMaxWindowBits + " without a value in a response"
		}
	default:
		o.invalid = "unknown parameter " + strconv.Quote(p.name)
		return
	}
	if o.seen&bit != 0 {
		o.invalid = "duplicate parameter " + p.name
	}
	o.seen |= bit
}

// windowValue returns the window size p names, or 0 when its value is not
// "a decimal integer value without leading zeroes between 8 to 15,
// inclusive" (RFC 7692 §7.1.2.1), conforming to "1*DIGIT".
func windowValue(p param) int {
	if !p.hasValue {
		return 0
	}
	var buf [2]byte
	v, ok := p.unquote(buf[:])
	if !ok || len(v) == 0 {
		return 0
	}
	switch {
	case len(v) == 1 && '8' <= v[0] && v[0] <= '9':
		return int(v[0] - '0')
	case len(v) == 2 && v[0] == '1' && '0' <= v[1] && v[1] <= '5':
		return 10 + int(v[1]-'0')
	}
	return 0
}

// Negotiate chooses a permessage-deflate configuration from a client's
// Sec-WebSocket-Extensions value (several header lines joined with ", ")
// under policy, and returns the agreed parameters with the value of the
// response's Sec-WebSocket-Extensions header.
//
// Offers are tried in the client's order, RFC 7692 §5: "The order of
// elements is important as it specifies the client's preference." The
// first one the policy can honour is accepted; ok is false when there is
// none (or no offer at all), and the server answers without the
// extension. err is non-nil, wrapping ErrMalformedHeader, only when the
// value breaks the grammar of RFC 6455 §9.1, which deserves a 400.
//
// The response names only permessage-deflate: RFC 7692 §5: "A server MUST
// NOT accept a PMCE extension negotiation offer together with another
// extension if the PMCE will conflict with the extension on their use of
// the RSV1 bit." A server that accepts other extensions must make sure
// none uses RSV1.
//
// Negotiate allocates only the response string.
func Negotiate(offers string, policy ServerPolicy) (params Params, response string, ok bool, err error) {
	policy = policy.normalized()
	sc := extScanner{s: offers}
	for {
		name, err := sc.nextElement()
		if err != nil {
			return Params{}, "", false, err
		}
		if name == "" {
			break
		}
		isDeflate := !ok && strings.EqualFold(name, ExtensionName)
		var o offer
		for {
			p, more, err := sc.nextParam()
			if err != nil {
				return Params{}, "", false, err
			}
			if !more {
				break
			}
			if isDeflate {
				o.add(p, false)
			}
		}
		if isDeflate && o.invalid == "" {
			params, response, ok = accept(o, policy)
		}
	}
	return params, response, ok, nil
}

// accept answers one well-formed offer, or reports false when the policy
// cannot honour it.
func accept(o offer, policy ServerPolicy) (Params, string, bool) {
	var p Params
	var buf [160]byte
	r := append(buf[:0], ExtensionName...)

	// §7.1.1.1: "A server accepts an extension negotiation offer that
	// includes the "server_no_context_takeover" extension parameter by
	// including the "server_no_context_takeover" extension parameter in
	// the corresponding extension negotiation response".
	p.ServerNoContextTakeover = o.serverNoTakeover || !policy.ServerContextTakeover
	if p.ServerNoContextTakeover {
		r = append(r, "; "+serverNoContextTakeover...)
	}

	// §7.1.1.2: the server may use a client_no_context_takeover in the
	// offer "to avoid taking over the LZ77 sliding window unnecessarily by
	// including the "client_no_context_takeover" extension parameter in
	// the corresponding extension negotiation response". A cap on the
	// client's window needs client_max_window_bits in the offer (below);
	// without it the only way to bound the client's history is to refuse
	// its takeover.
	clientTakeover := policy.ClientContextTakeover && !o.clientNoTakeover
	if clientTakeover && !o.clientBitsNamed && policy.ClientMaxWindowBits < MaxWindowBits {
		clientTakeover = false
	}
	p.ClientNoContextTakeover = !clientTakeover
	if p.ClientNoContextTakeover {
		r = append(r, "; "+clientNoContextTakeover...)
	}

	// §7.1.2.1: "A server declines an extension negotiation offer with
	// this parameter if the server doesn't support it." and accepts it "by
	// including the "server_max_window_bits" extension parameter in the
	// extension negotiation response to send back to the client with the
	// same or smaller value as the offer." A request for a window below
	// the policy's minimum is declined: answering it with a larger one
	// would break that sentence, and strict clients fail the connection.
	p.ServerMaxWindowBits = policy.ServerMaxWindowBits
	if o.serverBits != 0 {
		if o.serverBits < policy.MinWindowBits {
			return Params{}, "", false
		}
		p.ServerMaxWindowBits = min(o.serverBits, policy.ServerMaxWindowBits)
	}
	if o.serverBits != 0 || p.ServerMaxWindowBits < MaxWindowBits {
		r = append(r, "; "+serverMaxWindowBits+"="...)
		r = strconv.AppendInt(r, int64(p.ServerMaxWindowBits), 10)
	}

	// §7.1.2.2: "If a received extension negotiation offer doesn't have
	// the "client_max_window_bits" extension parameter, the corresponding
	// extension negotiation response to the offer MUST NOT include the
	// "client_max_window_bits" extension parameter." With a value in the
	// offer, the client promises never to use more, whatever the answer.
	p.ClientMaxWindowBits = MaxWindowBits
	if o.clientBits != 0 {
		p.ClientMaxWindowBits = o.clientBits
	}
	if clientTakeover && o.clientBitsNamed {
		p.ClientMaxWindowBits = min(p.ClientMaxWindowBits, policy.ClientMaxWindowBits)
		if p.ClientMaxWindowBits < MaxWindowBits || o.clientBits != 0 {
			r = append(r, "; "+clientMaxWindowBits+"="...)
			r = strconv.AppendInt(r, int64(p.ClientMaxWindowBits), 10)
		}
	}
	return p, string(r), true
}

// ClientOffer is what a client asks for in its opening handshake.
// The zero value offers plain permessage-deflate and announces, with a
// bare client_max_window_bits, that the client accepts any window the
// server sets for it, as browsers do.
type ClientOffer struct {
	// ServerNoContextTakeover asks the server to compress every message
	// from an empty window, so the client keeps no history for it.
	ServerNoContextTakeover bool
	// ClientNoContextTakeover tells the server this client compresses
	// every message from an empty window.
	ClientNoContextTakeover bool
	// ServerMaxWindowBits, 8 to 15, asks the server for at most that
	// window; 0 leaves it to the server.
	ServerMaxWindowBits int
	// ClientMaxWindowBits, 8 to 15, limits the client's own window; 0
	// sends client_max_window_bits without a value.
	ClientMaxWindowBits int
}

// AppendOffer appends the Sec-WebSocket-Extensions value of o to dst.
// RFC 7692 §5: "To offer use of a PMCE, a client MUST include the
// extension name of the PMCE in the Sec-WebSocket-Extensions header field
// of its opening handshake". Window sizes outside 8 to 15 are clamped.
func AppendOffer(dst []byte, o ClientOffer) []byte {
	dst = append(dst, ExtensionName...)
	if o.ServerNoContextTakeover {
		dst = append(dst, "; "+serverNoContextTakeover...)
	}
	if o.ClientNoContextTakeover {
		dst = append(dst, "; "+clientNoContextTakeover...)
	}
	if o.ServerMaxWindowBits != 0 {
		dst = append(dst, "; "+serverMaxWindowBits+"="...)
		dst = strconv.AppendInt(dst, int64(clampBits(o.ServerMaxWindowBits)), 10)
	}
	dst = append(dst, "; "+clientMaxWindowBits...)
	if o.ClientMaxWindowBits != 0 {
		dst = append(dst, '=')
		dst = strconv.AppendInt(dst, int64(clampBits(o.ClientMaxWindowBits)), 10)
	}
	return dst
}

// ParseResponse validates the Sec-WebSocket-Extensions value of a server's
// handshake response against the offer the client sent, and returns the
// agreed parameters. ok is false, with no error, when the server accepted
// no extension (an empty value).
//
// err wraps ErrMalformedHeader for a value that breaks the grammar, and
// ErrInvalidResponse for one RFC 7692 obliges the client to refuse: an
// extension other than permessage-deflate or more than one element (RFC
// 6455 §4.1, RFC 7692 §5), an unknown, duplicate or invalid parameter
// (§7), a parameter the offer asked for missing from the answer
// (§7.1.1.1, §7.1.2.1), or a window larger than offered (§7.1.2.1,
// §7.1.2.2). On any error the client fails the connection. sent must be
// the offer AppendOffer wrote into the request; since that offer always
// names client_max_window_bits, the response may always carry it.
//
// The client's own compression follows ClientNoContextTakeover of the
// result, which is also true when the offer promised it: §7.1.1.2 makes
// that promise binding "even if the server doesn't include the
// "client_no_context_takeover" extension parameter".
func ParseResponse(response string, sent ClientOffer) (params Params, ok bool, err error) {
	sc := extScanner{s: response}
	var o offer
	var wrong error // the first element that is not ours; reported once the grammar is checked
	n := 0
	for ; ; n++ {
		name, err := sc.nextElement()
		if err != nil {
			return Params{}, false, err
		}
		if name == "" {
			break
		}
		switch {
		case wrong != nil:
		case n > 0:
			wrong = fmt.Errorf("%w: a second extension %q accepted (RFC 7692 §5)", ErrInvalidResponse, name)
		case !strings.EqualFold(name, ExtensionName):
			wrong = fmt.Errorf("%w: extension %q was not offered (RFC 6455 §4.1)", ErrInvalidResponse, name)
		}
		for {
			p, more, err := sc.nextParam()
			if err != nil {
				return Params{}, false, err
			}
			if !more {
				break
			}
			o.add(p, true)
		}
	}
	if n == 0 {
		return Params{}, false, nil
	}
	if wrong != nil {
		return Params{}, false, wrong
	}
	if o.invalid != "" {
		return Params{}, false, fmt.Errorf("%w: %s (RFC 7692 §7)", ErrInvalidResponse, o.invalid)
	}
	if sent.ServerNoContextTakeover && !o.serverNoTakeover {
		return Params{}, false, fmt.Errorf("%w: server_no_context_takeover was offered but not accepted (RFC 7692 §7.1.1.1)", ErrInvalidResponse)
	}
	if sent.ServerMaxWindowBits != 0 {
		offered := clampBits(sent.ServerMaxWindowBits)
		if o.serverBits == 0 {
			return Params{}, false, fmt.Errorf("%w: server_max_window_bits was offered but not accepted (RFC 7692 §7.1.2.1)", ErrInvalidResponse)
		}
		if o.serverBits > offered {
			return Params{}, false, fmt.Errorf("%w: server_max_window_bits=%d exceeds the offered %d (RFC 7692 §7.1.2.1)", ErrInvalidResponse, o.serverBits, offered)
		}
	}
	if o.clientBits != 0 && sent.ClientMaxWindowBits != 0 && o.clientBits > clampBits(sent.ClientMaxWindowBits) {
		return Params{}, false, fmt.Errorf("%w: client_max_window_bits=%d exceeds the offered %d (RFC 7692 §7.1.2.2)", ErrInvalidResponse, o.clientBits, clampBits(sent.ClientMaxWindowBits))
	}
	params = Params{
		ServerNoContextTakeover: o.serverNoTakeover,
		ClientNoContextTakeover: o.clientNoTakeover || sent.ClientNoContextTakeover,
		ServerMaxWindowBits:     MaxWindowBits,
		ClientMaxWindowBits:     MaxWindowBits,
	}
	if o.serverBits != 0 {
		params.ServerMaxWindowBits = o.serverBits
	}
	switch {
	case o.clientBits != 0:
		params.ClientMaxWindowBits = o.clientBits
	case sent.ClientMaxWindowBits != 0:
		params.ClientMaxWindowBits = clampBits(sent.ClientMaxWindowBits)
	}
	return params, true, nil
}
