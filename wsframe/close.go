package wsframe

import (
	"encoding/binary"
	"strconv"
	"strings"
	"unicode/utf8"
)

// CloseCode is the status code of a close frame (RFC 6455 §7.4).
type CloseCode uint16

// The status codes of RFC 6455 §7.4.1 and the IANA "WebSocket Close Code
// Number Registry" (RFC 6455 §11.7).
const (
	CloseNormal             CloseCode = 1000
	CloseGoingAway          CloseCode = 1001
	CloseProtocolError      CloseCode = 1002
	CloseUnsupportedData    CloseCode = 1003
	CloseNoStatus           CloseCode = 1005 // never on the wire: the close body was empty
	CloseAbnormal           CloseCode = 1006 // never on the wire: no close frame at all
	CloseInvalidPayload     CloseCode = 1007
	ClosePolicyViolation    CloseCode = 1008
	CloseMessageTooBig      CloseCode = 1009
	CloseMandatoryExtension CloseCode = 1010
	CloseInternalError      CloseCode = 1011
	CloseServiceRestart     CloseCode = 1012 // IANA registry
	CloseTryAgainLater      CloseCode = 1013 // IANA registry
	CloseBadGateway         CloseCode = 1014 // IANA registry
	CloseTLSHandshake       CloseCode = 1015 // never on the wire
)

// MaxCloseReason is the longest close reason: a control frame carries at
// most 125 bytes (RFC 6455 §5.5) and the code takes 2 of them.
const MaxCloseReason = MaxControlPayload - 2

// ValidCloseCode reports whether code may appear in a close frame on the
// wire. A close frame received with any other code fails the connection
// with 1002.
//
// Valid are 1000-1003 and 1007-1011 (RFC 6455 §7.4.1), 1012-1014 (added to
// the IANA registry RFC 6455 §11.7 sets up, and sent by deployed servers and
// accepted by browsers) and 3000-4999 (§7.4.2: libraries, frameworks and
// applications; private use). Invalid are 0-999 ("not used"), 1004
// (reserved), 1005, 1006 and 1015 (each "MUST NOT be set as a status code
// in a Close control frame by an endpoint") and the unassigned rest of
// 1000-2999, "reserved for definition by this protocol".
func ValidCloseCode(code CloseCode) bool {
	switch {
	case code >= 1000 && code <= 1014:
		return code != 1004 && code != 1005 && code != 1006
	case code >= 3000 && code <= 4999:
		return true
	}
	return false
}

// String returns the code's registered name, or its number.
func (c CloseCode) String() string {
	switch c {
	case CloseNormal:
		return "normal closure"
	case CloseGoingAway:
		return "going away"
	case CloseProtocolError:
		return "protocol error"
	case CloseUnsupportedData:
		return "unsupported data"
	case CloseNoStatus:
		return "no status received"
	case CloseAbnormal:
		return "abnormal closure"
	case CloseInvalidPayload:
		return "invalid frame payload data"
	case ClosePolicyViolation:
		return "policy violation"
	case CloseMessageTooBig:
		return "message too big"
	case CloseMandatoryExtension:
		return "mandatory extension"
	case CloseInternalError:
		return "internal error"
	case CloseServiceRestart:
		return "service restart"
	case CloseTryAgainLater:
		return "try again later"
	case CloseBadGateway:
		return "bad gateway"
	case CloseTLSHandshake:
		return "TLS handshake"
	}
	return "close code " + strconv.Itoa(int(c))
}

// AppendClosePayload appends the body of a close frame: the code in network
// byte order, then the reason. RFC 6455 §5.5.1: "If there is a body, the
// first two bytes of the body MUST be a 2-byte unsigned integer (in network
// byte order) representing a status code".
//
// A code ValidCloseCode rejects (CloseNoStatus among them) yields an empty
// body, the wire form of "no status", since such codes must not be sent.
// A reason that is not valid UTF-8 has its invalid bytes replaced by
// U+FFFD; one longer than MaxCloseReason is cut at the last whole UTF-8
// character that fits.
func AppendClosePayload(dst []byte, code CloseCode, reason string) []byte {
	if !ValidCloseCode(code) {
		return dst
	}
	dst = binary.BigEndian.AppendUint16(dst, uint16(code))
	return append(dst, truncateReason(reason)...)
}

// AppendCloseFrame appends a whole unmasked (server) close frame with the
// body AppendClosePayload builds. A client masks it with AppendMaskedFrame.
func AppendCloseFrame(dst []byte, code CloseCode, reason string) []byte {
	if !ValidCloseCode(code) {
		return append(dst, byte(Fin)|byte(OpClose), 0)
	}
	reason = truncateReason(reason)
	dst = append(dst, byte(Fin)|byte(OpClose), byte(2+len(reason)))
	dst = binary.BigEndian.AppendUint16(dst, uint16(code))
	return append(dst, reason...)
}

// truncateReason makes reason what a close body can carry: valid UTF-8
// (invalid bytes become U+FFFD; a peer fails the connection with 1007 on
// an invalid reason, RFC 6455 §8.1) of at most MaxCloseReason bytes, cut
// at a whole character.
func truncateReason(reason string) string {
	if !utf8.ValidString(reason) {
		reason = strings.ToValidUTF8(reason, "\uFFFD")
	}
	if len(reason) <= MaxCloseReason {
		return reason
	}
	cut := MaxCloseReason
	for cut > 0 && !utf8.RuneStart(reason[cut]) {
		cut--
	}
	return reason[:cut]
}

// ParseClosePayload decodes and validates the body of a received close
// frame. An empty body yields CloseNoStatus. A body of one byte or a code
// ValidCloseCode rejects is ErrInvalidClosePayload or ErrInvalidCloseCode
// (1002); a reason that is not valid UTF-8 is ErrInvalidUTF8 (1007), since
// RFC 6455 §5.5.1 says the body "MAY contain UTF-8-encoded data". The
// reason aliases p.
func ParseClosePayload(p []byte) (code CloseCode, reason []byte, err error) {
	switch len(p) {
	case 0:
		return CloseNoStatus, nil, nil
	case 1:
		return 0, nil, ErrInvalidClosePayload
	}
	code = CloseCode(binary.BigEndian.Uint16(p))
	if !ValidCloseCode(code) {
		return 0, nil, ErrInvalidCloseCode
	}
	reason = p[2:]
	if !ValidUTF8(reason) {
		return 0, nil, ErrInvalidUTF8
	}
	return code, reason, nil
}
