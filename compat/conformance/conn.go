package conformance

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
)

// session is one raw client connection of a case: it upgrades by hand,
// writes any bytes, and reads the server's frames, inflating compressed
// messages with its own codec under the window the server agreed to.
type session struct {
	nc     net.Conn
	br     *bufio.Reader
	target Target

	// extensions is the server's Sec-WebSocket-Extensions answer.
	extensions string
	pmd        *pmdParams // nil unless permessage-deflate was agreed

	inflate *inflater // reads the server's compressed messages
	deflate *deflater // compresses the client's
}

// pmdParams are the permessage-deflate parameters of a response.
type pmdParams struct {
	serverNoTakeover, clientNoTakeover bool
	serverBits, clientBits             int // 0 when the response has none
}

// readLimit bounds what the suite reads in one frame or message.
const readLimit = 64 << 20

// dial connects to the target and upgrades with the Sec-WebSocket-Extensions
// offer given ("" for none). The suite checks the handshake answer as a
// client must (RFC 6455 §4.1): status 101, Upgrade, Connection and the
// Sec-WebSocket-Accept derived from its key.
func dial(ctx context.Context, tg Target, offer string) (*session, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", tg.Addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", tg.Addr, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
	}
	var key [16]byte
	rand.Read(key[:])
	k := base64.StdEncoding.EncodeToString(key[:])
	path := tg.Path
	if path == "" {
		path = "/"
	}
	req := "GET " + path + " HTTP/1.1\r\nHost: " + tg.Addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: " + k + "\r\nSec-WebSocket-Version: 13\r\n"
	if offer != "" {
		req += "Sec-WebSocket-Extensions: " + offer + "\r\n"
	}
	if _, err := io.WriteString(nc, req+"\r\n"); err != nil {
		nc.Close()
		return nil, err
	}
	br := bufio.NewReaderSize(nc, 64<<10)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("reading the upgrade response: %w", err)
	}
	resp.Body.Close()
	s := &session{nc: nc, br: br, target: tg}
	if err := checkUpgrade(resp, k); err != nil {
		nc.Close()
		return nil, err
	}
	s.extensions = resp.Header.Get("Sec-WebSocket-Extensions")
	if s.extensions != "" {
		p, err := parseResponse(s.extensions)
		if err != nil {
			nc.Close()
			return nil, err
		}
		s.pmd = p
		if err := p.checkAgainst(offer); err != nil {
			nc.Close()
			return nil, err
		}
		s.inflate = &inflater{windowBits: orBits(p.serverBits), takeover: !p.serverNoTakeover}
		s.deflate = &deflater{windowBits: min(orBits(p.clientBits), offeredClientBits(offer)), takeover: !p.clientNoTakeover}
	}
	return s, nil
}

func orBits(b int) int {
	if b == 0 {
		return 15
	}
	return b
}

func checkUpgrade(resp *http.Response, key string) error {
	if resp.StatusCode != http.StatusSwitchingProtocols {
		return fmt.Errorf("upgrade answered %s", resp.Status)
	}
	if !strings.EqualFold(resp.Header.Get("Upgrade"), "websocket") {
		return fmt.Errorf("upgrade answered Upgrade: %q", resp.Header.Get("Upgrade"))
	}
	if !headerHasToken(resp.Header.Get("Connection"), "upgrade") {
		return fmt.Errorf("upgrade answered Connection: %q", resp.Header.Get("Connection"))
	}
	// RFC 6455 §4.2.2: the accept value is base64(SHA-1(key + GUID)).
	sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	if got, want := resp.Header.Get("Sec-WebSocket-Accept"), base64.StdEncoding.EncodeToString(sum[:]); got != want {
		return fmt.Errorf("Sec-WebSocket-Accept %q, want %q", got, want)
	}
	return nil
}

func headerHasToken(v, token string) bool {
	for _, t := range strings.Split(v, ",") {
		if strings.EqualFold(strings.TrimSpace(t), token) {
			return true
		}
	}
	return false
}

// parseResponse reads a permessage-deflate response. RFC 7692 §7.1: the
// response names one extension with each parameter at most once, and a
// window value between 8 and 15.
func parseResponse(h string) (*pmdParams, error) {
	parts := strings.Split(h, ";")
	if strings.TrimSpace(parts[0]) != "permessage-deflate" || strings.Contains(h, ",") {
		return nil, fmt.Errorf("extensions answered %q: want one permessage-deflate", h)
	}
	p := &pmdParams{}
	seen := map[string]bool{}
	for _, part := range parts[1:] {
		name, value, hasValue := strings.Cut(strings.TrimSpace(part), "=")
		name = strings.TrimSpace(name)
		if seen[name] {
			return nil, fmt.Errorf("response %q repeats %s (RFC 7692 §7.1)", h, name)
		}
		seen[name] = true
		bits := func() (int, error) {
			n, err := strconv.Atoi(strings.Trim(strings.TrimSpace(value), `"`))
			if !hasValue || err != nil || n < 8 || n > 15 {
				return 0, fmt.Errorf("response %q: %s needs a value from 8 to 15 (RFC 7692 §7.1.2)", h, name)
			}
			return n, nil
		}
		var err error
		switch name {
		case "server_no_context_takeover":
			p.serverNoTakeover = true
		case "client_no_context_takeover":
			p.clientNoTakeover = true
		case "server_max_window_bits":
			p.serverBits, err = bits()
		case "client_max_window_bits":
			p.clientBits, err = bits()
		default:
			err = fmt.Errorf("response %q has unknown parameter %q", h, name)
		}
		if err != nil {
			return nil, err
		}
		if hasValue && (name == "server_no_context_takeover" || name == "client_no_context_takeover") {
			return nil, fmt.Errorf("response %q gives %s a value", h, name)
		}
	}
	return p, nil
}

// offer is what one permessage-deflate offer asked for.
type offer struct {
	serverNoTakeover bool
	serverBits       int  // 0: not named
	clientBits       int  // 0: not named or named without a value
	clientBitsNamed  bool // client_max_window_bits present, with a value or not
}

// parseOffers reads the permessage-deflate offers of a request header as
// the suite wrote them (no quoted commas).
func parseOffers(h string) []offer {
	var out []offer
	for _, elem := range strings.Split(h, ",") {
		parts := strings.Split(elem, ";")
		if strings.TrimSpace(parts[0]) != "permessage-deflate" {
			continue
		}
		var o offer
		for _, part := range parts[1:] {
			name, value, _ := strings.Cut(strings.TrimSpace(part), "=")
			n, _ := strconv.Atoi(strings.Trim(strings.TrimSpace(value), `"`))
			switch strings.TrimSpace(name) {
			case "server_no_context_takeover":
				o.serverNoTakeover = true
			case "server_max_window_bits":
				o.serverBits = n
			case "client_max_window_bits":
				o.clientBits, o.clientBitsNamed = n, true
			}
		}
		out = append(out, o)
	}
	return out
}

// checkAgainst verifies that the response accepts one of the offers as
// RFC 7692 allows.
func (p *pmdParams) checkAgainst(offers string) error {
	var errs []error
	for _, o := range parseOffers(offers) {
		err := p.accepts(o)
		if err == nil {
			return nil
		}
		errs = append(errs, err)
	}
	return fmt.Errorf("response accepts no offer of %q: %w", offers, errors.Join(errs...))
}

func (p *pmdParams) accepts(o offer) error {
	// §7.1.1.1: a server accepts an offer with server_no_context_takeover
	// by including it in the response.
	if o.serverNoTakeover && !p.serverNoTakeover {
		return errors.New("server_no_context_takeover offered but not answered (§7.1.1.1)")
	}
	// §7.1.2.1: accepted "by including the "server_max_window_bits"
	// extension parameter in the extension negotiation response to send
	// back to the client with the same or smaller value as the offer".
	if o.serverBits != 0 && (p.serverBits == 0 || p.serverBits > o.serverBits) {
		return fmt.Errorf("server_max_window_bits=%d offered, %d answered (§7.1.2.1)", o.serverBits, p.serverBits)
	}
	// §7.1.2.2: "If a received extension negotiation offer doesn't have
	// the "client_max_window_bits" extension parameter, the corresponding
	// extension negotiation response to the offer MUST NOT include" it.
	if p.clientBits != 0 && !o.clientBitsNamed {
		return errors.New("client_max_window_bits answered but not offered (§7.1.2.2)")
	}
	// §7.1.2.2: to an offer with a value the server answers "with a value
	// equal to or smaller than the received value".
	if o.clientBits != 0 && p.clientBits > o.clientBits {
		return fmt.Errorf("client_max_window_bits=%d offered, %d answered (§7.1.2.2)", o.clientBits, p.clientBits)
	}
	return nil
}

// offeredClientBits is the smallest client window any offer promised; a
// client keeps to what it offered whatever the answer.
func offeredClientBits(offers string) int {
	bits := 15
	for _, o := range parseOffers(offers) {
		if o.clientBits != 0 {
			bits = min(bits, o.clientBits)
		}
	}
	return bits
}

// send writes frames, each encoded as given.
func (s *session) send(fs ...frame) error {
	var b []byte
	for _, f := range fs {
		b = appendFrame(b, f)
	}
	return s.writeRaw(b)
}

// sendPartial writes the first n bytes of f's encoding only: a frame left
// unfinished on purpose, for the fail-fast cases.
func (s *session) sendPartial(f frame, n int) error {
	return s.writeRaw(appendFrame(nil, f)[:n])
}

// sendChopped writes the frames' bytes in pieces of size n with a short
// pause between them, so the server sees them across many reads.
func (s *session) sendChopped(n int, fs ...frame) error {
	var b []byte
	for _, f := range fs {
		b = appendFrame(b, f)
	}
	for len(b) > 0 {
		k := min(n, len(b))
		if err := s.writeRaw(b[:k]); err != nil {
			return err
		}
		b = b[k:]
		time.Sleep(time.Millisecond)
	}
	return nil
}

func (s *session) writeRaw(b []byte) error {
	_, err := s.nc.Write(b)
	return err
}

// compressed returns a data frame whose payload is msg compressed by the
// client's deflater (RSV1 set, RFC 7692 §6).
func (s *session) compressed(op byte, msg []byte) frame {
	return frame{fin: true, rsv: bitRsv1, op: op, payload: s.deflate.deflateMessage(msg)}
}

// reply is one message or control frame the server sent.
type reply struct {
	op         byte
	payload    []byte
	compressed bool // the message came with RSV1 (RFC 7692 §6)
}

// next reads the server's next message or control frame, reassembling
// fragments and inflating compressed messages. Every frame is checked as
// a client must: no reserved bits but RSV1 on a first data frame with
// permessage-deflate, no reserved opcode, control frames whole and short.
func (s *session) next() (reply, error) {
	var msg []byte
	var first *frame
	for {
		f, err := readFrame(s.br, readLimit)
		if err != nil {
			return reply{}, err
		}
		if err := s.checkServerFrame(f, first != nil); err != nil {
			return reply{}, err
		}
		if f.op >= opClose {
			return reply{op: f.op, payload: f.payload}, nil
		}
		if first == nil {
			first = &f
		}
		msg = append(msg, f.payload...)
		if len(msg) > readLimit {
			return reply{}, fmt.Errorf("server message over %d bytes", readLimit)
		}
		if f.fin {
			break
		}
	}
	r := reply{op: first.op, payload: msg, compressed: first.rsv&bitRsv1 != 0}
	if r.compressed {
		out, err := s.inflate.inflateMessage(msg, readLimit)
		if err != nil {
			return reply{}, fmt.Errorf("server's compressed message: %w", err)
		}
		r.payload = out
	}
	if r.payload == nil {
		r.payload = []byte{}
	}
	return r, nil
}

func (s *session) checkServerFrame(f frame, inMessage bool) error {
	switch {
	case f.op > opPong || (f.op > opBinary && f.op < opClose):
		return fmt.Errorf("server sent reserved opcode %#x", f.op)
	case f.op >= opClose && (!f.fin || len(f.payload) > 125):
		return fmt.Errorf("server sent a fragmented or long control frame: %v", f)
	case f.op >= opClose && f.rsv != 0:
		return fmt.Errorf("server set RSV bits on a control frame: %v", f)
	case f.op == opContinuation && !inMessage:
		return fmt.Errorf("server sent a continuation outside a message")
	case f.op != opContinuation && f.op < opClose && inMessage:
		return fmt.Errorf("server interleaved a new message in a fragmented one")
	case f.rsv&^bitRsv1 != 0, f.rsv != 0 && s.pmd == nil, f.rsv != 0 && f.op == opContinuation:
		return fmt.Errorf("server set reserved bits it may not: %v", f)
	}
	return nil
}

// expectReply reads the next reply and compares it with want.
func (s *session) expectReply(want reply, mustCompress bool) error {
	got, err := s.next()
	if err != nil {
		return fmt.Errorf("waiting for %s: %w", describeReply(want), err)
	}
	if got.op == opClose && want.op != opClose {
		code, reason := parseClose(got.payload)
		return fmt.Errorf("waiting for %s: server closed with %d %q", describeReply(want), code, reason)
	}
	if got.op != want.op || !bytes.Equal(got.payload, want.payload) {
		return fmt.Errorf("got %s, want %s%s", describeReply(got), describeReply(want), firstDifference(got.payload, want.payload))
	}
	if mustCompress && !got.compressed {
		return fmt.Errorf("%s came uncompressed", describeReply(want))
	}
	return nil
}

// firstDifference says where two payloads of the same length part.
func firstDifference(got, want []byte) string {
	if len(got) != len(want) {
		return ""
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Sprintf(" (first difference at byte %d: %#x, want %#x)", i, got[i], want[i])
		}
	}
	return ""
}

func describeReply(r reply) string {
	name := map[byte]string{opText: "text", opBinary: "binary", opClose: "close", opPing: "ping", opPong: "pong"}[r.op]
	if name == "" {
		name = fmt.Sprintf("op %#x", r.op)
	}
	p := r.payload
	if len(p) > 24 {
		return fmt.Sprintf("%s of %d bytes %q…", name, len(p), p[:24])
	}
	return fmt.Sprintf("%s %q", name, p)
}

func parseClose(p []byte) (code uint16, reason string) {
	if len(p) < 2 {
		return 1005, ""
	}
	return uint16(p[0])<<8 | uint16(p[1]), string(p[2:])
}

// expectClose reads until the server's close frame, which must carry one
// of codes (1005 stands for an empty body), then answers it and expects
// the server to close the TCP connection. Replies before the close fail
// the case: a server that fails a connection sends nothing more.
func (s *session) expectClose(codes []uint16) error {
	r, err := s.next()
	if err != nil {
		return fmt.Errorf("waiting for close %s: %w", codeList(codes), err)
	}
	if r.op != opClose {
		return fmt.Errorf("waiting for close %s: got %s", codeList(codes), describeReply(r))
	}
	code, reason := parseClose(r.payload)
	if !containsCode(codes, code) {
		return fmt.Errorf("server closed with %d %q, want %s", code, reason, codeList(codes))
	}
	if !utf8.ValidString(reason) {
		return fmt.Errorf("server's close reason is not UTF-8: %q", reason)
	}
	// RFC 6455 §5.5.1: an endpoint that receives a Close frame sends one
	// in response. The server may have closed the socket already (§7.1.7,
	// failing the connection), so a failed write is fine.
	s.send(frame{fin: true, op: opClose, payload: r.payload})
	return s.expectEOF()
}

// expectEOF expects the server to close the TCP connection, with nothing
// more sent.
func (s *session) expectEOF() error {
	b, err := s.br.ReadByte()
	switch {
	case err == nil:
		return fmt.Errorf("server sent byte %#x after its close frame", b)
	case errors.Is(err, io.EOF), isReset(err):
		return nil
	case errors.Is(err, context.DeadlineExceeded), isTimeout(err):
		return errors.New("server did not close the TCP connection after the closing handshake (RFC 6455 §7.1.1)")
	}
	return err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// isReset reports a connection the server reset: it closed its socket
// with our close frame unread, which RFC 6455 §7.1.7 allows a server
// failing the connection.
func isReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }

// closeCleanly runs the closing handshake from the client side (RFC 6455
// §7.1.2): a close 1000 sent, the server's close received with the same
// code or 1000, then the server closes the TCP connection (§7.1.1).
func (s *session) closeCleanly() error {
	if err := s.send(frame{fin: true, op: opClose, payload: closePayload(closeNormal, "")}); err != nil {
		return fmt.Errorf("sending close: %w", err)
	}
	r, err := s.next()
	if err != nil {
		return fmt.Errorf("waiting for the server's close: %w", err)
	}
	if r.op != opClose {
		return fmt.Errorf("after the client's close: got %s, want close 1000", describeReply(r))
	}
	if code, reason := parseClose(r.payload); code != closeNormal {
		return fmt.Errorf("server answered close 1000 with %d %q", code, reason)
	}
	return s.expectEOF()
}

func (s *session) close() { s.nc.Close() }

func containsCode(codes []uint16, c uint16) bool {
	for _, x := range codes {
		if x == c {
			return true
		}
	}
	return false
}
