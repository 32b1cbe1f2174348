package compat

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/gobwas/httphead"
	"github.com/gobwas/ws"
	"github.com/hotpath-go/hotpath/wsframe"
	"golang.org/x/net/http/httpguts"
)

// upgrade is what the checks before an upgrade decided.
type upgrade struct {
	identity   any
	protocol   string   // "" when the client offered none
	pmd        *pmdConn // nil without permessage-deflate
	extensions string   // Sec-WebSocket-Extensions of the response, or ""
	remoteAddr string
	path       string
	// early holds the bytes a raw listener's upgrade read past the
	// request: the connection's first frames (handshakeReader.rest).
	early []byte
	// slot is the connection's reservation by address (reserveAddr),
	// which its Peer keeps; nil when none.
	slot *addrSlot
}

var (
	errBadOrigin   = &HTTPError{Status: http.StatusForbidden, Message: "origin not allowed"}
	errBadProtocol = &HTTPError{Status: http.StatusBadRequest, Message: "subprotocol " + Subprotocol + " not offered"}
	errShutting    = &HTTPError{Status: http.StatusServiceUnavailable, Message: "server shutting down"}
	// errTooManyConnections refuses a connection past
	// Options.MaxConnections.
	errTooManyConnections = &HTTPError{Status: http.StatusServiceUnavailable, Message: "too many connections"}
	// errTooManyFromAddress refuses a connection past
	// Options.MaxConnectionsPerAddress.
	errTooManyFromAddress = &HTTPError{Status: http.StatusServiceUnavailable, Message: "too many connections from this address"}
	// errHookPanicked refuses an upgrade whose hook panicked.
	errHookPanicked = &HTTPError{Status: http.StatusInternalServerError, Message: "internal error"}
)

// errBadProtocolList refuses a Sec-WebSocket-Protocol that is not a list
// of tokens (RFC 6455 §4.3: 1#token; §4.2.1: the server stops at "any
// violations of the ABNF grammar").
var errBadProtocolList = &HTTPError{Status: http.StatusBadRequest, Message: "Sec-WebSocket-Protocol is not a list of tokens"}

// prepareUpgrade runs the checks an upgrade request must pass (shutdown,
// origin, subprotocol, authentication) and negotiates permessage-deflate.
// A hook that panics (CheckOrigin, Authenticate, Compress) refuses the
// request with 500, logged and counted, on every carrier: on a raw
// listener or a QUIC or SCTP connection nothing else would recover it, and
// a crafted request would end the process. slot is the connection's
// reservation by address, taken by the caller, which ends it unless a
// Peer keeps it (nil when none).
func (s *Server) prepareUpgrade(r *http.Request, slot *addrSlot) (up *upgrade, err error) {
	defer func() {
		if v := recover(); v != nil {
			s.metrics.panics.Add(1)
			s.opts.Logger.Error("hotpath: upgrade hook panicked", "remote", r.RemoteAddr, "panic", v, "stack", string(debug.Stack()))
			up, err = nil, errHookPanicked
		}
	}()
	return s.checkUpgrade(r, slot)
}

func (s *Server) checkUpgrade(r *http.Request, slot *addrSlot) (*upgrade, error) {
	if s.shutting.Load() {
		return nil, errShutting
	}
	if err := s.capacityRefusal(); err != nil {
		// Before the hooks: a full server spends nothing on the request.
		return nil, err
	}
	check := s.opts.CheckOrigin
	if check == nil {
		check = sameOrigin
	}
	if !check(r) {
		return nil, errBadOrigin
	}
	up := &upgrade{remoteAddr: r.RemoteAddr, path: r.URL.Path, slot: slot}
	if offered := r.Header.Values("Sec-Websocket-Protocol"); len(offered) > 0 {
		switch {
		case !tokenList(offered):
			// ServeHTTP's HTTPUpgrader refused `"x", hotpath.v1` (or
			// "a;b"), where Serve's Upgrader, which hands the lines to
			// ProtocolCustom unread, took it.
			return nil, errBadProtocolList
		case headerHasToken(offered, Subprotocol):
			up.protocol = Subprotocol
		case s.opts.Echo:
			// A client that offers subprotocols fails the handshake when
			// none is selected (RFC 6455 §4.1): Node's ws does.
			up.protocol = firstToken(offered)
		default:
			return nil, errBadProtocol
		}
	}
	if auth := s.opts.Authenticate; auth != nil {
		id, err := auth(r)
		if err != nil {
			var he *HTTPError
			if !errors.As(err, &he) {
				// Its text is for the server's log, as a handler's error
				// is: it may say more than a stranger should read.
				s.opts.Logger.Debug("hotpath: Authenticate refused an upgrade", "remote", r.RemoteAddr, "err", err)
				err = &HTTPError{Status: http.StatusForbidden, Message: "forbidden"}
			}
			return nil, err
		}
		up.identity = id
	}
	if !s.opts.Compression.Disabled && (s.opts.Compress == nil || s.opts.Compress(r)) {
		offers := strings.Join(r.Header.Values("Sec-Websocket-Extensions"), ", ")
		if offers != "" {
			params, response, err := negotiatePMD(offers, s.opts.Compression)
			if err != nil {
				return nil, &HTTPError{Status: http.StatusBadRequest, Message: err.Error()}
			}
			if params != nil {
				if up.pmd, err = newPMDConn(*params, s.opts.Compression, false); err != nil {
					return nil, &HTTPError{Status: http.StatusInternalServerError, Message: err.Error()}
				}
				up.extensions = response
			}
		}
	}
	return up, nil
}

// carrierRefusal is the close code and reason with which a carrier that
// has no HTTP response (native QUIC, SCTP) refuses a connection that
// prepareUpgrade refused with err: 1001 while the server shuts down, as its
// open connections get, 1013 (try again later) past
// Options.MaxConnections or Options.MaxConnectionsPerAddress, else 1008
// with the refusal's message.
func carrierRefusal(err error) (wsframe.CloseCode, string) {
	switch err {
	case errShutting:
		return wsframe.CloseGoingAway, "HP_SHUTTING_DOWN"
	case errTooManyConnections:
		return wsframe.CloseTryAgainLater, tooManyConnectionsReason
	case errTooManyFromAddress:
		return wsframe.CloseTryAgainLater, tooManyFromAddressReason
	}
	if he, ok := errors.AsType[*HTTPError](err); ok {
		return wsframe.ClosePolicyViolation, he.Message // the status means nothing here
	}
	return wsframe.ClosePolicyViolation, err.Error()
}

// sameOrigin allows requests without an Origin header (not from a browser)
// and requests whose Origin host is the Host the request was sent to.
func sameOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil {
		return false
	}
	return strings.EqualFold(u.Host, r.Host)
}

// SameHost is an Options.CheckOrigin that allows requests without an
// Origin header and requests whose Origin host name, port aside, is the
// name the request was sent to: a page served over HTTP on one port that
// opens WebTransport on a UDP port of the same host, or signals WebRTC.
func SameHost(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil {
		return false
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return strings.EqualFold(u.Hostname(), strings.Trim(host, "[]"))
}

func headerHasToken(values []string, token string) bool {
	for _, v := range values {
		for _, t := range strings.Split(v, ",") {
			if strings.TrimSpace(t) == token {
				return true
			}
		}
	}
	return false
}

// tokenList reports whether the comma-separated values of a header's
// lines are tokens (RFC 9110 §5.6.2), whitespace around them and empty
// elements aside (§5.6.1).
func tokenList(values []string) bool {
	for _, v := range values {
		for t := range strings.SplitSeq(v, ",") {
			if t = strings.Trim(t, " \t"); t != "" && !httpguts.ValidHeaderFieldName(t) {
				return false
			}
		}
	}
	return true
}

// firstToken returns the first token of a comma-separated header's values.
func firstToken(values []string) string {
	for _, v := range values {
		for _, t := range strings.Split(v, ",") {
			if t = strings.TrimSpace(t); t != "" {
				return t
			}
		}
	}
	return ""
}

// upgradeHTTP answers the upgrade on a net/http request.
func (up *upgrade) upgradeHTTP(r *http.Request, w http.ResponseWriter) (net.Conn, *bufio.ReadWriter, error) {
	u := ws.HTTPUpgrader{Protocol: func(p string) bool { return p == up.protocol }}
	if up.extensions != "" {
		u.Header = http.Header{"Sec-Websocket-Extensions": {up.extensions}}
	}
	nc, rw, _, err := u.Upgrade(withTokens(r), w)
	if err != nil {
		if nc != nil {
			nc.Close()
		}
		return nil, nil, err
	}
	return nc, rw, nil
}

// withTokens returns r, or a copy of it, with one Upgrade value,
// "websocket", and one Connection value, "Upgrade", where r's lines hold
// those tokens (hasTokenFold), and none where they do not, for gobwas/ws's
// HTTPUpgrader: it reads the first value of each only, and wants it to be
// "websocket" or to hold "upgrade" as it reads a list. It refused
// "Upgrade: h2c, websocket", and a Connection of two lines, "keep-alive"
// then "Upgrade". Serve's Upgrader reads the lines fixRequestLine
// rewrites: both decide by hasTokenFold.
func withTokens(r *http.Request) *http.Request {
	var h http.Header
	for name, token := range map[string]string{"Upgrade": "websocket", "Connection": "Upgrade"} {
		values := r.Header.Values(name)
		if len(values) == 1 && values[0] == token {
			continue
		}
		if h == nil {
			h = r.Header.Clone()
		}
		if hasTokenFold(values, token) {
			h.Set(name, token)
		} else {
			h.Del(name)
		}
	}
	if h == nil {
		return r
	}
	r2 := *r
	r2.Header = h
	return &r2
}

// errBadKey refuses an upgrade request whose Sec-WebSocket-Key is not the
// base64 encoding of 16 bytes, or that has more than one (RFC 6455 §4.2.1
// item 5, §11.3.1).
var errBadKey = &HTTPError{Status: http.StatusBadRequest, Message: "bad Sec-WebSocket-Key"}

// errManyVersions refuses an upgrade request with more than one
// Sec-WebSocket-Version line. RFC 6455 §11.3.5: the field "MUST NOT
// appear more than once in an HTTP request". gobwas/ws's Upgrader (Serve)
// checks each line and took 13 twice; its HTTPUpgrader (ServeHTTP) reads
// the first only and took 13 followed by anything, even an empty line.
var errManyVersions = &HTTPError{Status: http.StatusBadRequest, Message: "more than one Sec-WebSocket-Version"}

// checkKey checks the Sec-WebSocket-Key values of an upgrade request:
// exactly one, the base64 encoding of 16 bytes. gobwas/ws checks only
// that the key is 24 characters long.
func checkKey(values []string) error {
	if len(values) != 1 {
		return errBadKey
	}
	if b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(values[0])); err != nil || len(b) != 16 {
		return errBadKey
	}
	return nil
}

// checkVersion checks the Sec-WebSocket-Version values of an upgrade
// request, each trimmed: one (errManyVersions), not empty (400, as
// gobwas/ws answers a request without one), and 13. RFC 6455 §4.2.2 item 4: for
// another version the server "MUST abort the WebSocket handshake" and
// send "an appropriate HTTP error code (such as 426 Upgrade Required) and
// a |Sec-WebSocket-Version| header field indicating the version(s) the
// server is capable of understanding": ws.ErrHandshakeUpgradeRequired
// carries both. Both paths check it after every other check of the
// request (checkRequest, checkHeaders), so that a request that is not an
// upgrade gets 400 whatever its version.
func checkVersion(values []string) error {
	switch {
	case len(values) > 1:
		return errManyVersions
	case len(values) == 0 || values[0] == "":
		return ws.ErrHandshakeBadSecVersion
	case values[0] != "13":
		return ws.ErrHandshakeUpgradeRequired
	}
	return nil
}

// checkRequest checks, for ServeHTTP, that a request net/http read is a
// WebSocket upgrade (RFC 6455 §4.2.1), before any hook (CheckOrigin,
// Authenticate, Compress) sees it: a GET of HTTP/1.1 or above, with a
// Host, an Upgrade holding "websocket", a Connection holding "Upgrade",
// one valid key, no content, and version 13. It refuses with the errors,
// and in the order, Serve's Upgrader and checkHeaders do: 505, then 405,
// then 400 for any fault of the headers, and 426 only for a request whose
// sole fault is its version. gobwas/ws's HTTPUpgrader checks these only
// once the hooks have run, so a request that was no upgrade got the
// hook's refusal (403 from CheckOrigin, Authenticate's status) where
// Serve answered 400 or 426.
func checkRequest(r *http.Request) error {
	switch {
	case r.ProtoMajor != 1 || r.ProtoMinor < 1:
		return ws.ErrHandshakeBadProtocol
	case r.Method != http.MethodGet:
		return ws.ErrHandshakeBadMethod
	case r.ContentLength != 0 || len(r.TransferEncoding) > 0:
		return errRequestContent
	case r.Host == "":
		return ws.ErrHandshakeBadHost
	case !hasTokenFold(r.Header.Values("Upgrade"), "websocket"):
		return ws.ErrHandshakeBadUpgrade
	case !hasTokenFold(r.Header.Values("Connection"), "upgrade"):
		return ws.ErrHandshakeBadConnection
	}
	if err := checkKey(r.Header.Values("Sec-Websocket-Key")); err != nil {
		return err
	}
	return checkVersion(r.Header.Values("Sec-Websocket-Version"))
}

// maxHandshakeBytes bounds an upgrade request read from a raw listener:
// its headers are kept until the request ends, and a client could send
// them for all of handshakeTimeout. net/http applies its own
// MaxHeaderBytes to ServeHTTP.
const maxHandshakeBytes = 64 << 10

var errHandshakeTooLarge = errors.New("compat: upgrade request over 64 KiB")

// handshakeReader is the connection gobwas/ws's Upgrader reads a raw
// upgrade request from: it keeps the bytes read, up to maxHandshakeBytes,
// because the Upgrader hands Sec-WebSocket-Key to no hook (checkKey reads
// it from them), and fails the read past that limit. It hands the
// Upgrader the Upgrade, Connection and Sec-WebSocket-Version lines as
// fixRequestLine rewrites them, and writes its 405 with Allow (Write).
type handshakeReader struct {
	headReader
	answered bool // the answer's first bytes were written
}

// Write writes the Upgrader's answer, adding "Allow: GET" to the 405 it
// gives a method other than GET (ws.ErrHandshakeBadMethod). RFC 9110
// §15.5.6: "The origin server MUST generate an Allow header field in a
// 405 response". The Upgrader writes that 405 before any hook runs, and
// the one header it takes from us there, Upgrader.Header, it writes into
// every answer, where the method alone does not tell its 405 from the 505
// it answers first for a version below 1.1 (POST of HTTP/1.0): the status
// line does. Its 512-byte buffer holds the status line whole, so the
// first write starts with it. Hooks run only for a GET: a hook's 405
// gets no Allow, as under ServeHTTP.
func (r *handshakeReader) Write(p []byte) (int, error) {
	if r.answered {
		return r.Conn.Write(p)
	}
	r.answered = true
	method, _, _ := bytes.Cut(r.seen[:r.first], []byte(" "))
	status, rest, ok := bytes.Cut(p, []byte("\n"))
	if string(method) == http.MethodGet || !ok || string(statusCode(status)) != "405" {
		return r.Conn.Write(p)
	}
	if _, err := r.Conn.Write(slices.Concat(status, []byte("\nAllow: GET\r\n"), rest)); err != nil {
		return 0, err
	}
	return len(p), nil
}

func newHandshakeReader(nc net.Conn) *handshakeReader {
	fix := func(_, line []byte) []byte { return fixRequestLine(line) }
	return &handshakeReader{headReader: headReader{Conn: nc, max: maxHandshakeBytes, fix: fix}}
}

// headReader is the connection gobwas/ws reads an HTTP head through: an
// upgrade request (Upgrader) or its answer (Dialer). It keeps every byte
// it reads in seen, up to max if max is not 0, and hands the reader the
// head's first line as fixFirst returns it (as it came if fixFirst is
// nil), its header lines whole, one at a time, each as fix returns it
// given the first line as it came (nil drops it), then the bytes after
// the head as they came.
type headReader struct {
	net.Conn
	seen     []byte
	max      int
	fixFirst func(line []byte) []byte
	fix      func(first, line []byte) []byte
	first    int    // the first line's length in seen, once read
	given    int    // bytes of seen handed on, fixed
	out      []byte // fixed bytes the reader has yet to take
	lines    int    // lines of the head handed on
	head     int    // the head's length, once its empty line is handed on
	err      error  // the connection's, once it failed
}

func (r *headReader) Read(p []byte) (int, error) {
	for len(r.out) == 0 {
		rest := r.seen[r.given:]
		if r.head > 0 && len(rest) > 0 {
			r.out, r.given = rest, len(r.seen)
			break
		}
		if i := bytes.IndexByte(rest, '\n'); i >= 0 && r.head == 0 {
			line := rest[:i+1]
			r.given += len(line)
			r.lines++
			switch {
			case r.lines == 1: // the request or status line
				r.first, r.out = r.given, line
				if r.fixFirst != nil {
					r.out = r.fixFirst(line)
				}
			case len(bytes.TrimSuffix(line[:i], []byte("\r"))) == 0:
				r.head, r.out = r.given, line
			default:
				r.out = r.fix(r.seen[:r.first], line)
			}
			continue
		}
		if r.err != nil {
			return 0, r.err
		}
		if r.max > 0 && len(r.seen) >= r.max {
			return 0, errHandshakeTooLarge
		}
		r.seen = slices.Grow(r.seen, 4096)
		room := cap(r.seen) - len(r.seen)
		if r.max > 0 {
			room = min(room, r.max-len(r.seen))
		}
		n, err := r.Conn.Read(r.seen[len(r.seen) : len(r.seen)+room])
		r.seen, r.err = r.seen[:len(r.seen)+n], err
		if n == 0 && err == nil {
			return 0, nil // bufio.Reader gives up after a few
		}
	}
	n := copy(p, r.out)
	r.out = r.out[n:]
	return n, nil
}

// unread returns the bytes read from the connection that the reader has
// not taken, to be read before the connection's next bytes.
func (r *headReader) unread() []byte {
	return append(bytes.Clone(r.out), r.seen[r.given:]...)
}

// fixRequestLine rewrites an upgrade request's Upgrade and Connection
// lines for gobwas/ws's Upgrader, which checks each such line alone and
// for one value: a line with the token the upgrade needs becomes
// "Upgrade: websocket" or "Connection: Upgrade", and one without it is
// dropped, so that the Upgrader refuses a request only when no line has
// the token. RFC 6455 §4.2.1 items 3 and 4 want an Upgrade "containing
// the value websocket" and a Connection that "includes the token
// Upgrade", both lists (RFC 9110 §7.6.1, §7.8), and RFC 9110 §5.3 has a
// list split over several lines mean its values joined with commas: the
// Upgrader refused "Upgrade: h2c, websocket", and a Connection of two
// lines, "keep-alive" then "Upgrade". checkHeaders still checks the
// lines as they came.
//
// A Sec-WebSocket-Version line becomes "Sec-WebSocket-Version: 13", and
// checkHeaders checks the version after every other fault (checkVersion):
// the Upgrader answered 426 for a version it read before a line it
// refuses with 400, and 400 for one after, where ServeHTTP, which cannot
// see the order of the lines, answers by the rule alone.
func fixRequestLine(line []byte) []byte {
	name, value, _ := bytes.Cut(line, []byte(":"))
	switch name := bytes.Trim(name, " \t"); {
	case bytes.EqualFold(name, []byte("Upgrade")):
		return tokenLine(value, "websocket", "Upgrade: websocket\r\n")
	case bytes.EqualFold(name, []byte("Connection")):
		return tokenLine(value, "upgrade", "Connection: Upgrade\r\n")
	case bytes.EqualFold(name, []byte("Sec-WebSocket-Version")):
		return []byte("Sec-WebSocket-Version: 13\r\n")
	}
	return line
}

// fixAnswerLine rewrites a 101 answer's Connection lines for gobwas/ws's
// Dialer, as fixRequestLine does a request's: the Dialer wants each line
// to be "Upgrade", where RFC 6455 §4.1 item 3 has the client fail the
// connection only when the answer's Connection "doesn't contain a token"
// Upgrade, so it refused "Connection: keep-alive, Upgrade". Its Upgrade
// lines are left to the Dialer: item 2 wants each value to be
// "websocket", compared case-insensitively, as the Dialer does.
//
// Any other answer (a refusal, whose status line is status) is left as it
// came: the Dialer hands it to OnStatusError, which reads its headers and
// body with net/http, and a dropped Connection line altered them (one
// followed by a folded line made the refusal unreadable, its message and
// Retry-After lost).
func fixAnswerLine(status, line []byte) []byte {
	if string(statusCode(status)) != "101" {
		return line
	}
	if name, value, _ := bytes.Cut(line, []byte(":")); strings.EqualFold(string(bytes.Trim(name, " \t")), "Connection") {
		return tokenLine(value, "upgrade", "Connection: Upgrade\r\n")
	}
	return line
}

// statusCode returns a status line's code, as net/http cuts it: what
// follows the first space, up to the next space or the line's end.
func statusCode(line []byte) []byte {
	_, rest, _ := bytes.Cut(trimEOL(line), []byte(" "))
	code, _, _ := bytes.Cut(rest, []byte(" "))
	return code
}

// trimEOL returns line without its CRLF or bare LF.
func trimEOL(line []byte) []byte {
	return bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
}

// fixStatusLine adds, to a status line without a reason phrase and
// without the space before it ("HTTP/1.1 101"), that space, for
// gobwas/ws's Dialer: it wants two spaces and refused the line as
// malformed, a 101 and a refusal alike (a 403 became no *HTTPError).
// RFC 9112 §4 writes the space (status-line = HTTP-version SP
// status-code SP [reason-phrase]), but net/http and browsers take the
// line without it, and some servers send it; the client takes it as
// they do. checkAnswer still reads a 101's status line as it came, as
// net/http does.
//
// A refusal (a status other than 101) that net/http reads but the Dialer
// would not is handed on as "HTTP/1.1", its code, and its reason
// (refusalLine), so that it reaches OnStatusError and Dial returns an
// *HTTPError with its status and Retry-After, as net/http would: the
// Dialer refuses a version below 1.1 before it reads the status
// ("HTTP/1.0 403"), and reads the code between the line's first two
// spaces only ("HTTP/1.1  403"). A 101 keeps its version: RFC 6455 §4.1
// wants HTTP/1.1 or above, and the Dialer refuses "HTTP/1.0 101".
func fixStatusLine(line []byte) []byte {
	if fixed := refusalLine(line); fixed != nil {
		return fixed
	}
	text := trimEOL(line)
	if bytes.Count(text, []byte(" ")) != 1 {
		return line
	}
	return slices.Concat(text, []byte(" "), line[len(text):])
}

// refusalLine returns a status line that net/http reads with a status
// other than 101 as gobwas/ws's Dialer reads the same status: "HTTP/1.1",
// the code in three digits, and the reason net/http reads. It returns nil
// for a 101, a line net/http does not read, and one the Dialer already
// reads alike.
func refusalLine(line []byte) []byte {
	text := trimEOL(line)
	// net/http's own reading of the line, rather than a copy of its rules.
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(slices.Concat(text, []byte("\r\n\r\n")))), nil)
	if err != nil || resp.StatusCode == http.StatusSwitchingProtocols {
		return nil
	}
	code := fmt.Sprintf("%03d", resp.StatusCode)
	if resp.Proto == "HTTP/1.1" && bytes.HasPrefix(text, []byte("HTTP/1.1 "+code+" ")) {
		return nil
	}
	// resp.Status is the code as it came (three bytes), then the reason.
	reason := strings.TrimPrefix(resp.Status[3:], " ")
	return slices.Concat([]byte("HTTP/1.1 "+code+" "+reason), line[len(text):])
}

// tokenLine returns fixed when the comma-separated list holds token,
// compared case-insensitively, and nil when it does not.
func tokenLine(list []byte, token, fixed string) []byte {
	if hasTokenFold([]string{string(list)}, token) {
		return []byte(fixed)
	}
	return nil
}

// hasTokenFold reports whether the comma-separated values of a header's
// lines hold token, compared case-insensitively, as RFC 9110 §5.6.1 reads
// a list (whitespace around the commas, empty elements).
func hasTokenFold(values []string, token string) bool {
	for _, v := range values {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.Trim(t, " \t\r\n"), token) {
				return true
			}
		}
	}
	return false
}

// rest returns what was read after the request's headers: frames a
// client sent with its request, which gobwas/ws's Upgrader reads into a
// buffer of its own and drops when it returns. The engine takes them as
// the connection's first bytes, as ServeHTTP takes what net/http
// buffered; dropped, they leave the reader inside a frame. They are taken
// from seen, past the head's end as headReader found it, whatever the
// Upgrader buffered of them.
func (r *handshakeReader) rest() []byte {
	if r.head == 0 {
		return nil
	}
	return bytes.Clone(r.seen[r.head:])
}

// checkHeaders checks what gobwas/ws's Upgrader reads past: the request
// line's HTTP version (errMalformedRequestLine), and on every header line
// up to the empty one that ends them:
//   - the line's grammar (RFC 9110 §5.1, §5.5: a token, a colon, a value
//     without control characters). The Upgrader takes any line with a
//     colon, and reads the headers it knows itself (Host, Upgrade,
//     Connection, Sec-WebSocket-*) as tokens, so "Connection: Upgrade\x1f"
//     passed; net/http refuses such a line, and so does this;
//   - folded lines, which it reads as headers of their own where net/http
//     joins them to the line before; RFC 9112 §5.2 lets a server refuse
//     them with 400;
//   - more than one Host line, which the Upgrader reads one after the
//     other (RFC 9112 §3.2: a server MUST answer 400);
//   - content: a Transfer-Encoding line, or a Content-Length other than 0
//     (errRequestContent);
//   - the request's Sec-WebSocket-Key lines (checkKey);
//   - last, its Sec-WebSocket-Version lines (checkVersion), which
//     fixRequestLine hid from the Upgrader.
//
// Lines end with CRLF or, as the Upgrader also reads them, a bare LF.
func (r *handshakeReader) checkHeaders() error {
	var keys, lengths, versions []string
	hosts := 0
	requestLine := true
	for line := range bytes.Lines(r.seen) {
		line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
		if requestLine {
			requestLine = false // the Upgrader checks the method and target
			_, rest, _ := bytes.Cut(line, []byte(" "))
			_, proto, _ := bytes.Cut(rest, []byte(" "))
			if _, _, ok := http.ParseHTTPVersion(string(proto)); !ok {
				return errMalformedRequestLine
			}
			continue
		}
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		value = bytes.Trim(value, " \t")
		if !ok || !httpguts.ValidHeaderFieldName(string(name)) || !httpguts.ValidHeaderFieldValue(string(value)) {
			return errMalformedHeader // a folded line's name starts with a space
		}
		switch {
		case strings.EqualFold(string(name), "Host"):
			if hosts++; hosts > 1 {
				return errManyHosts
			}
		case strings.EqualFold(string(name), "Sec-WebSocket-Key"):
			keys = append(keys, string(value))
		case strings.EqualFold(string(name), "Sec-WebSocket-Version"):
			versions = append(versions, string(value))
		case strings.EqualFold(string(name), "Transfer-Encoding"):
			return errRequestContent
		case strings.EqualFold(string(name), "Content-Length"):
			lengths = append(lengths, string(value))
		}
	}
	if !zeroLength(lengths) {
		return errRequestContent
	}
	if err := checkKey(keys); err != nil {
		return err
	}
	return checkVersion(versions)
}

// errRequestContent refuses an upgrade request that frames content (RFC
// 9112 §6): a Transfer-Encoding, or a Content-Length other than 0. The
// handshake of RFC 6455 §4.1 has none, and RFC 9110 §9.3.1 gives a GET's
// content no meaning. Taken, it was read as the connection's first frames
// under both Serve and ServeHTTP, where a proxy in front may have taken it
// for content: refused, nothing after the headers is ambiguous.
var errRequestContent = &HTTPError{Status: http.StatusBadRequest, Message: "an upgrade request has no content"}

// zeroLength reports whether a raw request's Content-Length lines, if any,
// all say 0, as net/http reads them for ServeHTTP: digits only, and every
// line the same.
func zeroLength(lengths []string) bool {
	for _, v := range lengths {
		if v != lengths[0] || strings.Trim(v, "0") != "" || v == "" {
			return false
		}
	}
	return true
}

// errMalformedRequestLine refuses a raw upgrade request whose HTTP
// version is not "HTTP/" DIGIT "." DIGIT (RFC 9112 §2.3), as net/http
// reads it for ServeHTTP. gobwas/ws's Upgrader reads a digit as any byte
// from '0' to '?' (0x30-0x3F) and a number as any count of them, so
// "HTTP/1.<" (1.12) and "HTTP/1.10" passed its check of 1.1 or above;
// RFC 6455 §4.2.1 has the server stop at "any violations of the ABNF
// grammar" with an error such as 400.
var errMalformedRequestLine = ws.RejectConnectionError(ws.RejectionStatus(http.StatusBadRequest), ws.RejectionReason("malformed request line"))

// errMalformedHeader refuses a raw upgrade request with a header line
// that is not one (RFC 6455 §4.2.1: the server stops at "any violations of
// the ABNF grammar").
var errMalformedHeader = ws.RejectConnectionError(ws.RejectionStatus(http.StatusBadRequest), ws.RejectionReason("malformed header line"))

// answerReader keeps what a WebSocket client reads during its upgrade
// (above TLS on wss://) for checkAnswer, as handshakeReader keeps a
// request: gobwas/ws's Dialer hands its OnHeader hook only the lines it
// does not read itself, with the name trimmed. It hands the Dialer the
// status line as fixStatusLine rewrites it, and a 101's Connection lines
// as fixAnswerLine rewrites them. upgradeConn, below it, bounds what it
// reads to maxUpgradeAnswer.
type answerReader struct {
	headReader
}

func newAnswerReader(nc net.Conn) *answerReader {
	return &answerReader{headReader{Conn: nc, fixFirst: fixStatusLine, fix: fixAnswerLine}}
}

// checkAnswer checks a server's 101 answer, which gobwas/ws's Dialer read
// and took: its status line (validStatusLine), and its header lines up
// to the empty one that ends them:
//   - the line's grammar (RFC 9110 §5.1, §5.5), as checkHeaders checks a
//     request's: the Dialer takes any line with a colon and trims the
//     name, so a 101 with a line such as "\xaf:", "Foo : bar" or a folded
//     line passed, which net/http and browsers refuse; RFC 6455 §4.1 has
//     the client fail a connection whose answer is not the handshake of
//     §4.2.2, an HTTP response;
//   - Sec-WebSocket-Protocol more than once: the Dialer checks those lines
//     only until one names an offered protocol, so a second one with any
//     value passed. RFC 6455 §11.3.4: the field "MUST NOT appear more
//     than once in an HTTP response"; §4.1: the client MUST fail the
//     connection if it names a protocol the client did not offer. The
//     same holds for Sec-WebSocket-Accept (§11.3.3), which the Dialer
//     took twice when both were right. (Sec-WebSocket-Extensions, §11.3.2,
//     the Dialer refuses itself: the client offers no extension.)
//
// Lines end with CRLF or, as the Dialer also reads them, a bare LF.
func checkAnswer(answer []byte) error {
	var protocols, accepts int
	statusLine := true
	for line := range bytes.Lines(answer) {
		line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
		if statusLine {
			statusLine = false
			if !validStatusLine(line) {
				return errMalformedStatusLine
			}
			continue
		}
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		value = bytes.Trim(value, " \t")
		if !ok || !httpguts.ValidHeaderFieldName(string(name)) || !httpguts.ValidHeaderFieldValue(string(value)) {
			return errMalformedAnswer
		}
		var count *int
		switch {
		case strings.EqualFold(string(name), "Sec-WebSocket-Protocol"):
			count = &protocols
		case strings.EqualFold(string(name), "Sec-WebSocket-Accept"):
			count = &accepts
		}
		if count != nil {
			if *count++; *count > 1 {
				return fmt.Errorf("%s %w", name, errRepeatedField)
			}
		}
	}
	return nil
}

// validStatusLine reports whether line is a 101 status line as RFC 9112
// §4 writes it and net/http reads it: "HTTP/" DIGIT "." DIGIT, a space,
// the status code 101, then nothing or a space and a reason. gobwas/ws's
// Dialer reads a digit as any byte from '0' to '?' (0x30-0x3F, so '<' is
// 12) and a number as any count of them: it took "HTTP/1.< 101" for 1.12
// and "HTTP/1.1 0:1" for 101, answers net/http and browsers refuse. The
// Dialer itself refuses a version other than 1.1 or above.
func validStatusLine(line []byte) bool {
	proto, rest, _ := bytes.Cut(line, []byte(" "))
	code, _, _ := bytes.Cut(rest, []byte(" "))
	_, _, ok := http.ParseHTTPVersion(string(proto))
	return ok && string(code) == "101"
}

var (
	errMalformedAnswer     = errors.New("malformed header line in the upgrade's answer")
	errMalformedStatusLine = errors.New("malformed status line in the upgrade's answer")
	errRepeatedField       = errors.New("more than once in the upgrade's answer (RFC 6455 §11.3.3, §11.3.4)")
)

// errManyHosts refuses a raw upgrade request with more than one Host line,
// as net/http does.
var errManyHosts = ws.RejectConnectionError(ws.RejectionStatus(http.StatusBadRequest), ws.RejectionReason("more than one Host header"))

// tlsState is the TLS state of a connection that runs over TLS (a
// *tls.Conn, as tls.NewListener accepts, or one under wrappers: findTLS),
// for the request the upgrade checks see on Serve, as net/http gives it
// under ServeHTTP; nil for any other. Without it, an Authenticate behind
// Serve could not read the client's certificates, and took every wss://
// client for a plain one.
func tlsState(nc net.Conn) *tls.ConnectionState {
	tc, ok := findTLS(nc)
	if !ok {
		return nil
	}
	st := tc.ConnectionState()
	return &st
}

// upgradeConn reads and answers the upgrade request on a raw connection
// with gobwas/ws's Upgrader. It collects the few headers the checks read
// and runs the same checks as ServeHTTP on a request built from them;
// slot is prepareUpgrade's.
func (s *Server) upgradeConn(nc net.Conn, slot *addrSlot) (*upgrade, error) {
	r := &http.Request{Method: http.MethodGet, Header: http.Header{}, RemoteAddr: nc.RemoteAddr().String(), URL: &url.URL{}}
	hr := newHandshakeReader(nc)
	var up *upgrade
	u := ws.Upgrader{
		OnRequest: func(uri []byte) error {
			parsed, err := url.ParseRequestURI(string(uri))
			if err != nil {
				return ws.RejectConnectionError(ws.RejectionStatus(http.StatusBadRequest))
			}
			r.URL = parsed
			return nil
		},
		OnHost: func(host []byte) error {
			// RFC 6455 §4.2.1 item 2: "A |Host| header field containing
			// the server's authority"; an empty one names none, and
			// ServeHTTP (gobwas/ws's HTTPUpgrader) refuses it too.
			if len(host) == 0 || !httpguts.ValidHostHeader(string(host)) {
				return errMalformedHeader
			}
			r.Host = string(host)
			return nil
		},
		OnHeader: func(key, value []byte) error {
			// checkHeaders checks the grammar of every line, these
			// and those the Upgrader reads itself.
			r.Header.Add(string(key), string(value))
			return nil
		},
		ProtocolCustom: func(offer []byte) (string, bool) {
			r.Header.Add("Sec-Websocket-Protocol", string(offer))
			return "", true
		},
		ExtensionCustom: func(offer []byte, accepted []httphead.Option) ([]httphead.Option, bool) {
			r.Header.Add("Sec-Websocket-Extensions", string(offer))
			return accepted, true
		},
		OnBeforeUpgrade: func() (ws.HandshakeHeader, error) {
			err := hr.checkHeaders()
			if rej, ok := err.(*ws.ConnectionRejectedError); ok {
				return nil, rej // its own status, and header (426)
			}
			if err == nil {
				// The request is read: over TLS, its handshake is done.
				r.TLS = tlsState(nc)
				up, err = s.prepareUpgrade(r, slot)
			}
			if err != nil {
				status := http.StatusBadRequest
				var he *HTTPError
				if errors.As(err, &he) {
					status = he.Status
				}
				opts := []ws.RejectOption{ws.RejectionStatus(status), ws.RejectionReason(err.Error())}
				if err == errTooManyConnections || err == errTooManyFromAddress {
					opts = append(opts, ws.RejectionHeader(ws.HandshakeHeaderString("Retry-After: "+retryAfterFull+"\r\n")))
				}
				return nil, ws.RejectConnectionError(opts...)
			}
			var h strings.Builder
			if up.protocol != "" {
				h.WriteString("Sec-WebSocket-Protocol: " + up.protocol + "\r\n")
			}
			if up.extensions != "" {
				h.WriteString("Sec-WebSocket-Extensions: " + up.extensions + "\r\n")
			}
			return ws.HandshakeHeaderString(h.String()), nil
		},
	}
	if _, err := u.Upgrade(hr); err != nil {
		return nil, err
	}
	up.early = hr.rest()
	return up, nil
}
