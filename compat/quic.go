package compat

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/hotpath-go/hotpath/corkwriter"
	"github.com/hotpath-go/hotpath/wsframe"
	"github.com/quic-go/quic-go"
)

// ALPN is the TLS application protocol of a native hotpath QUIC
// connection (PROTOCOL.md §8.2). A listener that also offers "h3" serves
// WebTransport sessions on the same UDP port.
const ALPN = Subprotocol

// QUICConfig returns the QUIC settings compat serves and dials with:
// datagrams on (unreliable room emits), stream resets with partial
// delivery (which WebTransport requires), an idle timeout of idleTimeout
// (QUIC's default, 30 s, when 0) and QUIC keep-alives every 15 s, so that
// a connection whose application is quiet, with a keepalive interval
// longer than QUIC's idle timeout, is not dropped by QUIC underneath.
//
// Its flow-control windows keep binary streams from holding up calls.
// Every stream's unread bytes count against the connection's window, which
// the control stream shares: with quic-go's defaults (512 KiB per stream
// at first, 768 KiB for the connection) two downloads the application had
// not read yet stopped every call, both ways (a liveness audit). Here the
// connection's window is fixed at connectionWindow and a stream's grows to
// streamWindowMax at most, so streamsUnread streams may sit unread, at
// their largest, before the control stream waits. The bytes a peer may
// have in flight per connection stay at quic-go's 15 MiB, give or take.
func QUICConfig(idleTimeout time.Duration) *quic.Config {
	return &quic.Config{
		EnableDatagrams:                  true,
		EnableStreamResetPartialDelivery: true,
		MaxIdleTimeout:                   idleTimeout,
		KeepAlivePeriod:                  15 * time.Second,
		MaxIncomingStreams:               maxIncomingStreams,
		InitialStreamReceiveWindow:       streamWindow,
		MaxStreamReceiveWindow:           streamWindowMax,
		InitialConnectionReceiveWindow:   connectionWindow,
		MaxConnectionReceiveWindow:       connectionWindow,
	}
}

// The limits of QUICConfig: the streams a peer may have open at once,
// and windows with which 15 streams at 1 MiB unread leave the control
// stream 1 MiB.
const (
	maxIncomingStreams = 1024
	streamWindow       = 256 << 10
	streamWindowMax    = 1 << 20
	streamsUnread      = 15
	connectionWindow   = (streamsUnread + 1) * streamWindowMax
)

// ListenQUIC listens on the UDP address addr for native hotpath QUIC
// connections and, with the "h3" protocol, WebTransport sessions: tlsConf
// needs a certificate (DevCertificate makes one for development); its
// NextProtos are set to both protocols.
//
// While Options.MaxPendingQUIC connections are pending, none of them for
// staleHandshake, a new connection is refused at its first packet, with
// QUIC's CONNECTION_REFUSED, before any TLS work; ServeQUIC refuses those
// that pass this check and find no slot once accepted. So is a connection
// from an address at Options.MaxConnectionsPerAddress, which would
// otherwise cost the server a full TLS handshake before ServeQUIC's 1013
// (a flood from one address at its cap would be a flood of handshakes);
// the check reserves nothing, and ServeQUIC still reserves at the accept
// and refuses with 1013 one that raced past it.
func (s *Server) ListenQUIC(addr string, tlsConf *tls.Config) (*quic.Listener, error) {
	tlsConf = tlsConf.Clone()
	tlsConf.NextProtos = []string{ALPN, "h3"}
	conf := QUICConfig(s.opts.IdleTimeout)
	refused := newRefusalCounter(time.Second, false)
	conf.GetConfigForClient = func(info *quic.ClientInfo) (*quic.Config, error) {
		if err := s.addrAtCap(info.RemoteAddr); err != nil {
			refused.count(s, info.RemoteAddr, err)
			return nil, err
		}
		if s.quicPending.full() {
			refused.count(s, info.RemoteAddr, nil)
			return nil, errTooManyHandshakes
		}
		return conf, nil
	}
	return quic.ListenAddr(addr, tlsConf, conf)
}

// initialRefusals tells a connection's first refused Initial packet from
// the ones after it: a ClientHello with a post-quantum key share spans two
// Initial packets, and quic-go asks GetConfigForClient for each, so that
// counting every refusal counted most connections twice. The second
// comes from the same address soon after the first, but not always next:
// a client that dials several connections at once interleaves them, and
// remembering the last address alone counted those twice. The last
// len(recent) are remembered; a flood from more addresses than that, all
// at once, may still count a few twice.
//
// ServeSCTP tells an association's first refused INIT from its client's
// resends of it the same way (sctpInitResends). Both count through a
// refusalCounter.
type initialRefusals struct {
	// within is how long after a refusal another from the same address
	// is taken for a repeat of it.
	within time.Duration
	// renew starts within again at each repeat: SCTP's resends of one
	// INIT come ever further apart, and each is a repeat of the first.
	// Not QUIC's: its two Initial packets come together, and a client
	// that dials again from the same port (a quic.Transport shared by
	// its dials) makes a new attempt, counted again after within.
	renew  bool
	mu     sync.Mutex
	recent [16]refusedInitial
	next   int
}

type refusedInitial struct {
	addr string
	at   time.Time
}

func (r *initialRefusals) first(addr net.Addr) bool { return r.firstAt(addr, time.Now()) }

func (r *initialRefusals) firstAt(addr net.Addr, now time.Time) bool {
	a := addr.String()
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, e := range r.recent {
		if e.addr == a && now.Sub(e.at) < r.within {
			if r.renew {
				r.recent[i].at = now
			}
			return false
		}
	}
	r.recent[r.next] = refusedInitial{a, now}
	r.next = (r.next + 1) % len(r.recent)
	return true
}

// refusalCounter counts the refusals of clients that repeat their first
// packet (a ClientHello's two Initial packets, an SCTP client's resent
// INIT), by initialRefusals: once in HandshakeFailures, and once in the
// metric of a cap (RefusedPerAddress, RefusedConnections) if a cap
// refused it. The caps have a memory of their own: with one, an SCTP
// client dropped past MaxPendingSCTP, then, resending, at its address's
// cap was not counted in RefusedPerAddress at all.
type refusalCounter struct {
	any, atCap initialRefusals
}

func newRefusalCounter(within time.Duration, renew bool) *refusalCounter {
	return &refusalCounter{
		any:   initialRefusals{within: within, renew: renew},
		atCap: initialRefusals{within: within, renew: renew},
	}
}

// count counts a refusal of addr: err is a cap's (errTooManyFromAddress,
// errTooManyConnections), nil for one past a pending bound.
func (r *refusalCounter) count(s *Server, addr net.Addr, err error) {
	if r.any.first(addr) {
		s.metrics.handshakeFailures.Add(1)
	}
	if err != nil && r.atCap.first(addr) {
		s.countRefusal(err)
	}
}

// The closes of QUIC connections over Options.MaxPendingQUIC: a pending
// one whose slot went to a newcomer, and one refused once accepted.
const (
	staleHandshakeReason    = "HP_ERR_HANDSHAKE_STALE"
	tooManyHandshakesReason = "HP_ERR_TOO_MANY_HANDSHAKES"
	staleHandshakeCode      = quic.ApplicationErrorCode(wsframe.ClosePolicyViolation)
	tooManyHandshakesCode   = quic.ApplicationErrorCode(wsframe.CloseTryAgainLater)
)

var errTooManyHandshakes = errors.New("compat: too many QUIC connections opening")

// ServeQUIC accepts connections on ln until it fails or Shutdown closes
// it. A connection that negotiated ALPN "hotpath.v1" is a native hotpath
// connection: its first stream is the control stream, which carries the
// packets of PROTOCOL.md; further streams are the binary streams of
// HandleStream. One that negotiated "h3" is served as HTTP/3 for
// WebTransport sessions (ServeWebTransport's handler answers on every
// path). ln should be made with QUICConfig's settings (ListenQUIC does).
func (s *Server) ServeQUIC(ln *quic.Listener) error {
	key := s.track(ln)
	if key == nil {
		return http.ErrServerClosed
	}
	defer s.untrack(key)
	for {
		qc, err := ln.Accept(context.Background())
		if err != nil {
			if s.shutting.Load() {
				return http.ErrServerClosed
			}
			return err
		}
		// Counted by address first, before it takes a slot every client
		// shares: an address past Options.MaxConnectionsPerAddress
		// neither fills MaxPendingQUIC nor evicts another's stale
		// handshake. Refused with 1013 and its reason: a QUIC close is
		// as cheap here as anywhere, and the connection is up.
		slot, err := s.reserveAddr(qc.RemoteAddr().String())
		if err != nil {
			s.metrics.handshakeFailures.Add(1)
			code, reason := carrierRefusal(err)
			qc.CloseWithError(quic.ApplicationErrorCode(code), reason)
			continue
		}
		// Counted before it takes its slot: a Shutdown that finds it
		// pending waits for it, and drops it when its ctx ends. Counted
		// after, a Shutdown that came in between found no connection to
		// wait for and returned nil at once, the connection pending
		// (TestShutdownDropsPendingQUIC, in a loaded run of the suite).
		s.conns.add()
		// The connection holds a slot of MaxPendingQUIC until its control
		// stream, or its first session's, is established, or it ends.
		end, ok := s.quicPending.begin(func() { qc.CloseWithError(staleHandshakeCode, staleHandshakeReason) })
		if !ok {
			slot.abandon()
			s.metrics.handshakeFailures.Add(1)
			qc.CloseWithError(tooManyHandshakesCode, tooManyHandshakesReason)
			s.conns.done()
			continue
		}
		// The slot by address ends with the connection unless a Peer
		// kept it, or on HTTP/3 a session took it over (h3Count).
		context.AfterFunc(qc.Context(), func() {
			end()
			slot.abandon()
		})
		go s.serveQUICConn(qc, end, slot)
	}
}

// serveQUICConn serves one accepted QUIC connection; it calls conns.done
// when the connection ends, and handshaken once its control stream (or on
// HTTP/3 its first WebTransport session's) is established or it has failed.
// slot is its reservation by address (nil when none), which its Peer
// keeps; on HTTP/3 it becomes the connection's own count (h3Count).
func (s *Server) serveQUICConn(qc *quic.Conn, handshaken func(), slot *addrSlot) {
	if qc.ConnectionState().TLS.NegotiatedProtocol == "h3" {
		// Its sessions count as connections, not the HTTP/3 connection
		// itself, which Shutdown closes once the sessions have ended.
		s.conns.done()
		// Its sessionWatch takes its slot of MaxPendingQUIC and its
		// count by address (watchSessions), which lasts for as long as
		// it is open (h3Count).
		count := s.newH3Count(slot)
		context.AfterFunc(qc.Context(), count.close)
		s.h3Pending.Store(qc, connSlots{handshaken, count})
		context.AfterFunc(qc.Context(), func() { s.h3Pending.Delete(qc) })
		s.webTransport().ServeQUICConn(qc)
		return
	}
	defer slot.abandon()
	state := qc.ConnectionState().TLS
	up, err := s.prepareUpgrade(carrierRequest(qc.RemoteAddr(), "quic", &state), slot)
	if err != nil {
		s.metrics.handshakeFailures.Add(1)
		code, reason := carrierRefusal(err)
		qc.CloseWithError(quic.ApplicationErrorCode(code), reason)
		s.conns.done()
		return
	}
	ctx, cancel := context.WithTimeout(qc.Context(), handshakeTimeout)
	// A unidirectional stream is a violation from the start
	// (refuseStrayStreams takes over once the connection is served):
	// unaccepted, what one carried stayed in quic-go's buffers until the
	// control stream came or handshakeTimeout passed, up to the
	// connection's window (16 MiB) per connection, from a client that had
	// not yet passed anything.
	go func() {
		if _, err := qc.AcceptUniStream(ctx); err == nil {
			qc.CloseWithError(quic.ApplicationErrorCode(wsframe.CloseProtocolError), unexpectedStreamReason)
		}
	}()
	// Shutdown drops it when its ctx ends, as SCTP's and WebRTC's.
	abandon := &cancelCloser{cancel}
	s.handshakes.add(abandon)
	str, err := qc.AcceptStream(ctx)
	s.handshakes.remove(abandon)
	cancel()
	handshaken()
	if err != nil {
		s.metrics.handshakeFailures.Add(1)
		qc.CloseWithError(quic.ApplicationErrorCode(wsframe.ClosePolicyViolation), "HP_ERR_NO_CONTROL_STREAM")
		s.conns.done()
		return
	}
	// The control stream goes first: a call never waits behind the bytes
	// of a binary stream (RFC 9218 urgency 0, the most urgent).
	str.SetPriority(0, false)
	t := newQUICTransport(qc)
	l := newStreamConn(t, newQUICControl(str), s.opts.Limits)
	s.serveLink(l, up)
}

// quicControl is the control stream of a native QUIC connection, as the
// pktConn's outbox writes it: a corkwriter.TryWriter, so that a packet
// sent off the read loop (a client's call, an Async answer, an event) is
// written on the sender's goroutine only as far as the stream takes it at
// once, and the rest by the outbox's flusher. Waiting for a stream whose
// window a silent peer never opens again held the sender until the QUIC
// connection ended, past any deadline of its own.
//
// quic-go's TryWriteAll queues a whole write at once or nothing, without
// waiting, but the packer then splits that copy by copying the rest again
// for each packet, quadratic in the write. Up to tryWriteMax bytes the
// copies cost less than waiting for the connection's goroutine, which
// Write does until the packer has taken all but the last packet's worth;
// past it a write is tried with a deadline (deadlineTried).
type quicControl struct {
	deadlineTried
	str *quic.Stream
}

func newQUICControl(str *quic.Stream) *quicControl {
	return &quicControl{deadlineTried: deadlineTried{deadlineStream: str}, str: str}
}

// tryWriteMax is where TryWriteAll's repeated copies (about n²/1200 bytes
// for n) start to cost more than a wait: 8 KiB copies 55 KB.
const tryWriteMax = 8 << 10

func (w *quicControl) TryWrite(p []byte) (int, error) {
	if len(p) > tryWriteMax {
		return w.deadlineTried.TryWrite(p)
	}
	switch err := w.str.TryWriteAll(p); {
	case err == nil:
		return len(p), nil
	case errors.Is(err, quic.ErrWouldBlock):
		return 0, corkwriter.ErrWouldBlock
	default:
		return 0, err
	}
}

func (w *quicControl) Write(p []byte) (int, error) {
	if len(p) <= tryWriteMax {
		if n, err := w.TryWrite(p); err != corkwriter.ErrWouldBlock {
			return n, err
		}
	}
	return w.deadlineTried.Write(p)
}

// carrierRequest is the request that Options.CheckOrigin and
// Options.Authenticate see for a connection that has no HTTP request of
// its own (native QUIC, SCTP): the remote address, the carrier in
// Proto, and the TLS state (client certificates) when there is one.
func carrierRequest(remote net.Addr, proto string, state *tls.ConnectionState) *http.Request {
	return &http.Request{
		Method:     http.MethodGet,
		Proto:      proto,
		URL:        &url.URL{Scheme: proto, Host: remote.String(), Path: "/"},
		Header:     http.Header{},
		RemoteAddr: remote.String(),
		TLS:        state,
	}
}

// quicTransport is a native QUIC connection under a pktConn.
type quicTransport struct {
	conn      *quic.Conn
	datagrams *quicDatagrams
}

func newQUICTransport(qc *quic.Conn) *quicTransport {
	return &quicTransport{conn: qc, datagrams: newQUICDatagrams(qc.SendDatagram, 0, qc.Context().Done())}
}

func (t *quicTransport) carriesCloseCode() bool { return true }

// ended: the connection's context ends as either end closes it or it
// dies (transportEnd).
func (t *quicTransport) ended() <-chan struct{} { return t.conn.Context().Done() }

func (t *quicTransport) carrier() Carrier { return CarrierQUIC }

func (t *quicTransport) encrypted() bool { return true } // QUIC runs TLS 1.3 (RFC 9001)

func (t *quicTransport) closeTransport(code wsframe.CloseCode, reason string) {
	t.conn.CloseWithError(quic.ApplicationErrorCode(code), reason)
}

func (t *quicTransport) closeErrorOf(err error) *CloseError { return quicCloseError(err) }

// quicCloseError recovers the close code the other end sent in its
// CONNECTION_CLOSE. A code outside the close codes' range (1000-4999) is
// not one of ours: HTTP/3's, say, when the server under a WebTransport
// session closed the QUIC connection before the session's close arrived.
// The connection then ended without a close: 1006, the code named in the
// reason. One in the range is read by carrierCloseCode.
func quicCloseError(err error) *CloseError {
	var ae *quic.ApplicationError
	if !errors.As(err, &ae) || !ae.Remote {
		return nil
	}
	if !isCloseCode(uint64(ae.ErrorCode)) {
		return &CloseError{Code: wsframe.CloseAbnormal, Reason: fmt.Sprintf("QUIC connection closed with code %#x", uint64(ae.ErrorCode)), Remote: true}
	}
	return carrierCloseCode(uint64(ae.ErrorCode), ae.ErrorMessage)
}

// isCloseCode reports whether a carrier's error code is in the range of
// WebSocket close codes, which QUIC and WebTransport closes carry.
func isCloseCode(code uint64) bool { return code >= 1000 && code <= 4999 }

// carrierCloseCode reads code, in the close codes' range, and reason from
// the other end's QUIC or WebTransport close (PROTOCOL.md §8.3): a code
// a close frame may carry is the close code, the reason held to what a
// close frame carries (peerCloseReason). So are 1005 and 1006, which no
// close frame carries but a carrier's close does: an end that drops its
// connection closes QUIC with 1006 (pktConn.abort). Any other (1004,
// 1015, the unassigned 1016-2999) is the other end's protocol error,
// 1002 HP_ERR_BAD_CLOSE_CODE, as a close notice with one is
// (HP_ERR_BAD_CLOSE_NOTICE): taken as it is, it reached OnDisconnect and
// the metrics as a code no end may close with.
func carrierCloseCode(code uint64, reason string) *CloseError {
	c := wsframe.CloseCode(code)
	if !wsframe.ValidCloseCode(c) && c != wsframe.CloseNoStatus && c != wsframe.CloseAbnormal {
		return &CloseError{Code: wsframe.CloseProtocolError, Reason: fmt.Sprintf("HP_ERR_BAD_CLOSE_CODE (%d)", code)}
	}
	return &CloseError{Code: c, Reason: peerCloseReason(reason), Remote: true}
}

// quicConnectionEnded reports whether err, from a stream, is the end of
// its whole QUIC connection rather than of the stream.
func quicConnectionEnded(err error) bool {
	var (
		ae *quic.ApplicationError
		te *quic.TransportError
		ie *quic.IdleTimeoutError
		sr *quic.StatelessResetError
	)
	return errors.As(err, &ae) || errors.As(err, &te) || errors.As(err, &ie) || errors.As(err, &sr)
}

// endedDialError is err, the error of a dial (what) that ctx ended, named
// with the URL as the WebSocket dial names its errors ("hotpath:
// WebSocket upgrade at <url>: context canceled"): quic-go and
// webtransport-go return ctx's bare error, so a Dial canceled by its
// caller failed with "context canceled" and nothing more. It still
// matches ctx's error. An end by ConnectTimeout is left to connectError,
// whose error names the URL already; err is returned as it is while ctx
// has not ended.
func (c *Client) endedDialError(ctx context.Context, what string, err error) error {
	if ctx.Err() == nil {
		return err
	}
	if _, ok := errors.AsType[*connectTimeoutError](context.Cause(ctx)); ok {
		return err
	}
	return fmt.Errorf("hotpath: %s at %s: %w", what, c.url, err)
}

// quicDialError is err, or the close the server sent when it closed the
// connection while it was opening (a refusal: Authenticate, Shutdown), as
// a *CloseError, so that CloseStatus reads a refusal the same whether it
// came during Dial or after.
func quicDialError(err error) error {
	if ce := quicCloseError(err); ce != nil {
		return ce
	}
	return err
}

func (t *quicTransport) sendDatagram(pkt []byte) (corkwriter.Status, bool) {
	return t.datagrams.push(pkt)
}

func (t *quicTransport) receiveDatagrams(deliver func([]byte)) {
	for {
		b, err := t.conn.ReceiveDatagram(t.conn.Context())
		if err != nil {
			return
		}
		deliver(b)
	}
}

// openStream opens a binary stream (Client.OpenStream).
func (t *quicTransport) openStream(ctx context.Context) (rawStream, error) {
	str, err := t.conn.OpenStreamSync(ctx)
	if err != nil {
		return nil, err
	}
	return quicStream{str}, nil
}

// acceptStreams serves the binary streams the client opens, until the
// connection ends.
func (t *quicTransport) acceptStreams(p *Peer) {
	for {
		str, err := t.conn.AcceptStream(p.ctx)
		if err != nil {
			return
		}
		go p.serveStream(t, quicStream{str})
	}
}

func (t *quicTransport) refuseStrayStreams(c *pktConn, server bool) {
	refuseStrayStreams(t.conn.Context(), c, server,
		func(ctx context.Context) error { _, err := t.conn.AcceptUniStream(ctx); return err },
		func(ctx context.Context) error { _, err := t.conn.AcceptStream(ctx); return err })
}

// refuseStrayStreams closes c at the first unidirectional stream the other
// end opens, and on a client at the first bidirectional one, until ctx,
// the connection's, ends.
func refuseStrayStreams(ctx context.Context, c *pktConn, server bool, acceptUni, acceptBidi func(context.Context) error) {
	refuse := func(accept func(context.Context) error) {
		if accept(ctx) == nil {
			c.violate(wsframe.CloseProtocolError, unexpectedStreamReason)
		}
	}
	if !server {
		go refuse(acceptBidi)
	}
	refuse(acceptUni)
}

// quicStream is a QUIC stream as a binary stream.
type quicStream struct{ *quic.Stream }

func (s quicStream) CloseWrite() error { return s.Stream.Close() }

func (s quicStream) Close() error {
	s.Stream.CancelRead(0)
	return s.Stream.Close()
}

func (s quicStream) Reset(code uint32) {
	s.Stream.CancelWrite(quic.StreamErrorCode(code))
	s.Stream.CancelRead(quic.StreamErrorCode(code))
}

func (s quicStream) resetCode(err error) (uint32, bool) {
	var se *quic.StreamError
	// A QUIC code has 62 bits, the protocol's 32 (PROTOCOL.md §2, §8.5):
	// cut to 32, 2^32+7 read as 7, Overloaded. One over 32 bits is no
	// code of the protocol's, and the carrier's error is left as it is.
	if errors.As(err, &se) && se.Remote && se.ErrorCode <= math.MaxUint32 {
		return uint32(se.ErrorCode), true
	}
	return 0, false
}

// dialQUIC opens a native QUIC connection to a quic://host:port URL and
// its control stream.
func (c *Client) dialQUIC(ctx context.Context, u *url.URL) (link, error) {
	tlsConf := c.opts.TLSConfig.Clone()
	if tlsConf == nil {
		tlsConf = &tls.Config{}
	}
	tlsConf.NextProtos = []string{ALPN}
	if tlsConf.ServerName == "" {
		tlsConf.ServerName = u.Hostname()
	}
	qc, err := quic.DialAddr(ctx, u.Host, tlsConf, QUICConfig(0))
	if err != nil {
		return nil, c.endedDialError(ctx, "QUIC dial", quicDialError(err))
	}
	str, err := qc.OpenStreamSync(ctx)
	if err != nil {
		qc.CloseWithError(0, "")
		return nil, c.endedDialError(ctx, "QUIC dial", quicDialError(err))
	}
	str.SetPriority(0, false)
	return newStreamConn(newQUICTransport(qc), newQUICControl(str), c.opts.Limits), nil
}
