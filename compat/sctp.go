package compat

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotpath-go/hotpath/corkwriter"
	"github.com/hotpath-go/hotpath/wsframe"
	"github.com/pion/dtls/v3"
	"github.com/pion/logging"
	"github.com/pion/sctp"
	"github.com/pion/transport/v5/udp"
)

// SCTP streams of a hotpath association (PROTOCOL.md §8.2): stream 0 is
// the control stream, ordered and reliable, opened by the client; stream
// 1 carries unreliable emits, unordered and never retransmitted, one
// packet per message.
const (
	sctpControlStream    = 0
	sctpUnreliableStream = 1
)

// sctpChunk is the largest message written on the control stream. SCTP
// is message-oriented: the stream's bytes are cut into messages of at most
// this size, and a reader whose buffer holds a whole message reads the
// stream as a byte stream. It equals readBufSize, the smallest buffer the
// read loop reads into.
const sctpChunk = readBufSize

// quietLogs keeps pion's loggers silent: the connection's errors reach
// Options.Logger and OnDisconnect instead.
var quietLogs = func() logging.LoggerFactory {
	f := logging.NewDefaultLoggerFactory()
	f.DefaultLogLevel = logging.LogLevelDisabled
	return f
}()

// ListenSCTP listens on the UDP address addr for SCTP associations (SCTP
// over UDP, without encryption: for trusted networks and tests). Serve it
// with ServeSCTP. Only an SCTP INIT from a new address opens a connection:
// any other datagram from it is dropped without holding anything.
func ListenSCTP(addr string) (net.Listener, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, err
	}
	return (&udp.ListenConfig{AcceptFilter: isSCTPInit}).Listen("udp", ua)
}

// isSCTPInit reports whether a datagram is an SCTP packet that starts an
// association (RFC 9260 §3.1, §3.3.2): a common header with verification
// tag 0, then an INIT chunk.
func isSCTPInit(b []byte) bool {
	const commonHeader, chunkHeader, chunkInit = 12, 4, 1
	return len(b) >= commonHeader+chunkHeader && b[commonHeader] == chunkInit &&
		b[4] == 0 && b[5] == 0 && b[6] == 0 && b[7] == 0
}

// ListenSCTPDTLS listens on the UDP address addr for SCTP associations
// over DTLS (pion/dtls), as WebRTC runs them: config needs a certificate,
// and may require client certificates. Serve it with ServeSCTP.
//
//lint:ignore SA1019 dtls.Config is compat's public API, kept: no options-based pion call takes one, and a caller's Config does not convert to options exactly.
func ListenSCTPDTLS(addr string, config *dtls.Config) (net.Listener, error) {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, err
	}
	// A copy: the caller's Config is the caller's, and may serve another
	// listener (the client side copies ClientOptions.DTLSConfig the same way).
	cfg := *config
	if cfg.LoggerFactory == nil {
		cfg.LoggerFactory = quietLogs
	}
	//lint:ignore SA1019 ListenWithOptions would only rebuild a Config from options; the caller gave one (see above).
	return dtls.Listen("udp", ua, &cfg)
}

// sctpInitResends is how long ServeSCTP takes an INIT refused from a
// client's address and port for a resend of the last one refused from
// there, counted once: longer than the time between two resends, which
// is at most RTO.Max, RFC 9260's 60 s (§16) for a client that keeps the
// default, 3 s for the Go client's default (ClientOptions.SCTPRTOMax)
// and for Chromium's. Each resend starts it again, so an attempt's
// resends count once however long they go on (unless the client's
// RTO.Max is above 65 s); a client that dials again from the same port
// within it is not counted again, a port being chosen afresh for most
// dials.
const sctpInitResends = 65 * time.Second

// ServeSCTP serves SCTP associations on the connections ln accepts
// (ListenSCTP, ListenSCTPDTLS, or any listener of datagram-preserving
// connections), until ln fails or Shutdown closes it. At most
// Options.MaxPendingSCTP associations are in their handshake at once;
// past it a new one takes the slot of the oldest if that has been pending
// for staleHandshake (2 s), which is aborted, and is dropped otherwise, and
// its client retries its INIT.
func (s *Server) ServeSCTP(ln net.Listener) error {
	key := s.track(ln)
	if key == nil {
		return http.ErrServerClosed
	}
	defer s.untrack(key)
	pending := &pendingHandshakes{max: s.opts.MaxPendingSCTP}
	refused := newRefusalCounter(sctpInitResends, true)
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.shutting.Load() {
				return http.ErrServerClosed
			}
			if errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) {
				return err
			}
			continue // one peer's failed handshake
		}
		// Counted by address first, before it takes a slot every client
		// shares, as ServeQUIC does. Past Options.MaxConnectionsPerAddress
		// it is dropped, as past MaxPendingSCTP, and its client retries
		// its INIT: a refusal it could read (1013) would take the whole
		// handshake, DTLS's included, the work the cap is there to spare.
		// Counted once per client (by address and port): each resend of
		// its INIT is accepted and dropped again.
		slot, err := s.takeAddrSlot(nc.RemoteAddr().String(), nil)
		if err != nil {
			refused.count(s, nc.RemoteAddr(), err)
			nc.Close()
			continue
		}
		// Counted before it takes its slot, as ServeQUIC counts its
		// connections: a Shutdown that came in between found no
		// connection to wait for and returned while the handshake went on.
		s.conns.add()
		end, ok := pending.begin(func() { nc.Close() })
		if !ok {
			slot.abandon()
			refused.count(s, nc.RemoteAddr(), nil)
			nc.Close()
			s.conns.done()
			continue
		}
		h := &handshakeConn{nc}
		s.handshakes.add(h)
		go s.serveSCTPConn(nc, slot, func() {
			s.handshakes.remove(h)
			end()
		})
	}
}

// serveSCTPConn serves one accepted connection; handshaken is called once
// its handshake has ended, however it ended. slot is its reservation by
// address (nil when none), which it ends unless its Peer keeps it.
func (s *Server) serveSCTPConn(nc net.Conn, slot *addrSlot, handshaken func()) {
	defer slot.abandon()
	fail := func() {
		handshaken()
		s.metrics.handshakeFailures.Add(1)
		nc.Close()
		s.conns.done()
	}
	// The handshakes (DTLS's, then SCTP's; sctpServer blocks until the
	// association is up) are bounded together.
	timer := time.AfterFunc(handshakeTimeout, func() { nc.Close() })
	req := carrierRequest(nc.RemoteAddr(), "sctp", nil)
	if dc, ok := nc.(*dtls.Conn); ok {
		// pion's DTLS handshakes on first use: first here, so that the
		// upgrade checks see the client's certificates.
		ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
		err := dc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			timer.Stop()
			fail()
			return
		}
		req = carrierRequest(nc.RemoteAddr(), "sctp+dtls", dtlsConnectionState(dc))
	}
	// A refused client (Options.Authenticate, Shutdown) is told why in a
	// close notice once its association is up: dropped before, it would
	// wait for its handshake until its connect timeout.
	up, refusal := s.prepareUpgrade(req, slot)
	a, err := sctpServer(nc, s.opts.Limits, s.opts.SCTPRTOMax)
	if err != nil {
		timer.Stop()
		fail()
		return
	}
	t := newSCTPTransport(a, nc)
	control, err := t.acceptControl()
	timer.Stop()
	if err != nil {
		a.Abort("HP_ERR_NO_CONTROL_STREAM")
		fail()
		return
	}
	handshaken()
	link := newStreamConn(t, newSCTPControl(control), s.opts.Limits)
	t.attach(link)
	if refusal != nil {
		s.metrics.handshakeFailures.Add(1)
		link.refuse(carrierRefusal(refusal))
		s.conns.done()
		return
	}
	s.serveLink(link, up)
}

// dtlsConnectionState is a DTLS connection's state as the upgrade checks
// see a TLS one's: the certificates the client sent, parsed (verified by
// pion as dtls.Config.ClientAuth asks). A chain with one that does not
// parse is given as none.
func dtlsConnectionState(dc *dtls.Conn) *tls.ConnectionState {
	st, ok := dc.ConnectionState()
	cs := &tls.ConnectionState{HandshakeComplete: ok}
	for _, der := range st.PeerCertificates {
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			cs.PeerCertificates = nil
			break
		}
		cs.PeerCertificates = append(cs.PeerCertificates, cert)
	}
	return cs
}

// defaultSCTPRTOMax is Options.SCTPRTOMax and ClientOptions.SCTPRTOMax
// when unset; the Options field's doc says why 3 s.
const defaultSCTPRTOMax = 3 * time.Second

// minSCTPRTOMax is the least cap accepted: RTO.Min, 1 s in pion as in
// RFC 9260 §16. pion takes any positive cap, but computes the timeout as
// min(max(estimate, RTO.Min), cap): under RTO.Min the cap is the timeout
// itself, whatever the round trip, against §6.3.1 C6 ("RTOs that do not
// have a high minimum value are susceptible to unnecessary timeouts"). On
// a path whose round trip is longer, every packet would be sent again at
// each cap until acknowledged, and an INIT's 8 resends would all be spent
// within 9 caps, before a server past MaxPendingSCTP had room for it.
const minSCTPRTOMax = time.Second

// maxSCTPRTOMax is the greatest cap accepted: RFC 9260's RTO.Max (§16),
// pion's own default. A cap above it only makes each retransmission on
// a lossy path wait longer than the protocol's suggested worst case,
// past the keepalive and IdleTimeout that then give the connection up
// as silent; a value that large is more likely a unit mistake (3000 *
// time.Second for 3 s) than a choice.
const maxSCTPRTOMax = 60 * time.Second

// checkSCTPRTOMax refuses a cap, once its default is filled in, below
// minSCTPRTOMax or above maxSCTPRTOMax; name is the option's, for the
// error.
func checkSCTPRTOMax(name string, d time.Duration) error {
	if d < minSCTPRTOMax {
		return fmt.Errorf("compat: %s %v is below SCTP's RTO.Min of %v (RFC 9260 §6.3.1 C6): pion would time every retransmission at exactly that, however long the round trip; 0 takes the default %v", name, d, minSCTPRTOMax, defaultSCTPRTOMax)
	}
	if d > maxSCTPRTOMax {
		return fmt.Errorf("compat: %s %v is above SCTP's RTO.Max of %v (RFC 9260 §16): a lost packet would wait longer than the protocol's own worst case; 0 takes the default %v", name, d, maxSCTPRTOMax, defaultSCTPRTOMax)
	}
	return nil
}

// sctpOptions are the options of every hotpath association over nc, a
// server's (sctpServer) or a client's (sctpClient); rtoMax caps its
// retransmission timeout (Options.SCTPRTOMax).
func sctpOptions(nc net.Conn, limits Limits, rtoMax time.Duration) []sctp.AssociationOption {
	return []sctp.AssociationOption{
		sctp.WithNetConn(nc),
		sctp.WithLoggerFactory(quietLogs),
		sctp.WithRTOMax(float64(rtoMax) / float64(time.Millisecond)), // in ms
		// A write waits while the association's send queue is full: the
		// outbox, not pion's queue, holds what a slow peer has not read.
		sctp.WithBlockWrite(true),
		sctp.WithMaxMessageSize(uint32(max(sctpChunk, int(min(limits.MaxMessageSize, maxChannelMessage))))),
	}
}

// sctpServer accepts an association over nc; it blocks until the
// association is up.
func sctpServer(nc net.Conn, limits Limits, rtoMax time.Duration) (*sctp.Association, error) {
	opts := sctpOptions(nc, limits, rtoMax)
	server := make([]sctp.ServerOption, len(opts))
	for i, o := range opts {
		server[i] = o
	}
	return sctp.ServerWithOptions(server...)
}

// sctpClient opens an association over nc; it blocks until the
// association is up.
func sctpClient(nc net.Conn, limits Limits, rtoMax time.Duration) (*sctp.Association, error) {
	opts := sctpOptions(nc, limits, rtoMax)
	client := make([]sctp.ClientOption, len(opts))
	for i, o := range opts {
		client[i] = o
	}
	return sctp.ClientWithOptions(client...)
}

// sctpTransport is an SCTP association under a pktConn.
type sctpTransport struct {
	assoc *sctp.Association
	nc    net.Conn

	unreliableOnce sync.Once
	unreliable     *sctp.Stream
	control        chan *sctp.Stream
	closeOnce      sync.Once
	closed         chan struct{} // closed with the association
	// gone is closed once the association has ended, closed by either
	// end or dead: the end of an inflate pause (transportEnd). Closed
	// once (endGone), by acceptStreams, whose accepting ends with the
	// association, or by this end's close of it, for an acceptStreams
	// that stopped before (an unexpected stream).
	gone      chan struct{}
	goneOnce  sync.Once
	datagrams *datagramQueue
	// link is the connection's engine once it exists, for acceptStreams
	// to close it with a code.
	link atomic.Pointer[pktConn]
	// reading is set once stream 1 has its reader (readUnreliable), and
	// deliver once the connection takes what it reads (receiveDatagrams).
	reading atomic.Bool
	deliver atomic.Pointer[func([]byte)]
}

func newSCTPTransport(a *sctp.Association, nc net.Conn) *sctpTransport {
	t := &sctpTransport{assoc: a, nc: nc, control: make(chan *sctp.Stream, 1), closed: make(chan struct{}), gone: make(chan struct{})}
	t.datagrams = newDatagramQueue(t.writeDatagram, t.closed)
	go t.acceptStreams()
	return t
}

// acceptStreams takes the streams the other end opens: the control
// stream goes to acceptControl, the unreliable one is the same as the one
// this end opens, read from now on (readUnreliable). Any other breaks
// PROTOCOL.md §8.2 and ends the connection: each stream holds memory in
// the association until the other end resets it, so a peer could
// otherwise pin 65,535 of them (about 1 KB each, and what it sent on
// them). acceptStreams then stops accepting, and pion drops the streams
// opened after its small accept queue is full.
func (t *sctpTransport) acceptStreams() {
	for {
		st, err := t.assoc.AcceptStream()
		if err != nil {
			// pion ends the accepting as the association ends: an ABORT
			// or a SHUTDOWN from the other end, a dead path, or this
			// end's close.
			close(t.control)
			t.endGone()
			return
		}
		switch st.StreamIdentifier() {
		case sctpControlStream:
			select {
			case t.control <- st:
			default:
			}
		case sctpUnreliableStream:
			if t.reading.CompareAndSwap(false, true) {
				go t.readUnreliable()
			}
		default:
			if link := t.link.Load(); link != nil {
				link.requestClose(wsframe.CloseProtocolError, unexpectedStreamReason)
				// acceptControl has returned: nobody waits on control.
				// gone is left to the link's end, which closes the
				// association (closeTransport, closeClosed): seeing the
				// association end here would take accepting the
				// streams opened meanwhile, which returning avoids.
				return
			}
			// Before the connection exists there is no one to tell why.
			t.assoc.Abort(unexpectedStreamReason)
		}
	}
}

func (t *sctpTransport) attach(c *pktConn) { t.link.Store(c) }

// endGone closes gone, once: the association has ended.
func (t *sctpTransport) endGone() { t.goneOnce.Do(func() { close(t.gone) }) }

// acceptControl waits for the control stream the client opens.
func (t *sctpTransport) acceptControl() (*sctp.Stream, error) {
	st, ok := <-t.control
	if !ok {
		return nil, io.EOF
	}
	return st, nil
}

func (t *sctpTransport) carriesCloseCode() bool { return false }

func (t *sctpTransport) carrier() Carrier { return CarrierSCTP }

func (t *sctpTransport) ended() <-chan struct{} { return t.gone }

// encrypted: over DTLS (ListenSCTPDTLS, sctp+dtls://), not over plain UDP.
func (t *sctpTransport) encrypted() bool {
	_, ok := t.nc.(*dtls.Conn)
	return ok
}

// closeTransport shuts the association down gracefully, so that what was
// written is delivered, except on an abnormal close; then it closes the
// connection under it.
func (t *sctpTransport) closeTransport(code wsframe.CloseCode, reason string) {
	t.closeOnce.Do(func() {
		close(t.closed)
		t.deliver.Store(nil) // see rtcTransport.close
		if hook := testHookSCTPClose.Load(); hook != nil {
			(*hook)(t, code != wsframe.CloseAbnormal)
		}
		if code == wsframe.CloseAbnormal {
			t.assoc.Abort(reason)
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			if t.assoc.Shutdown(ctx) != nil {
				t.assoc.Abort(reason)
			}
			cancel()
		}
		t.assoc.Close()
		t.nc.Close()
		t.endGone()
	})
}

// testHookSCTPClose, when set, runs as an association closes, with whether
// it tries a graceful shutdown before an ABORT.
var testHookSCTPClose atomic.Pointer[func(t *sctpTransport, graceful bool)]

// closeAfterHandshake ends an association whose closing handshake this end
// started and the other end answered. The answer proves that every packet
// on the ordered control stream arrived, and the unreliable stream may lose
// packets anyway: SCTP's graceful shutdown has nothing left to deliver,
// yet it waits for the SACK of this end's close notice, which pion delays
// by up to 200 ms (BenchmarkCarrierOpen/sctp: close 201 ms). An ABORT ends
// the association at once; the other end, which waits for the carrier to
// close, sees it end.
func (t *sctpTransport) closeAfterHandshake() { t.closeTransport(wsframe.CloseAbnormal, "closed") }

// closeUnanswered ends an association whose close notice went unanswered
// for closeTimeout. With the notice still unacknowledged, the other end is
// gone (or its receive window is full) and a graceful shutdown would wait
// its second for nothing: the association is aborted at once.
// Acknowledged, the other end's SCTP stack lives and a shutdown completes
// in a round trip, which leaves a peer merely slow to read the notice and
// its code.
func (t *sctpTransport) closeUnanswered(code wsframe.CloseCode, reason string) {
	if t.assoc.BufferedAmount() > 0 {
		code = wsframe.CloseAbnormal
	}
	t.closeTransport(code, reason)
}

// closeClosed releases an association the other end ended after this end
// answered its close notice. A graceful shutdown or an ABORT of an ended
// association waits for pion's write loop, which is gone: about 400 ms
// (the SCTP clients of a server that shut down saw its close that late).
func (t *sctpTransport) closeClosed() {
	t.closeOnce.Do(func() {
		close(t.closed)
		t.deliver.Store(nil) // see rtcTransport.close
		t.assoc.Close()
		t.nc.Close()
		t.endGone()
	})
}

// closeErrorOf: an SCTP association carries no close code (the close
// notice does); a message larger than the read buffer breaks the framing;
// a write that met the association's end is 1006 (sctpWriteEndError).
func (t *sctpTransport) closeErrorOf(err error) *CloseError {
	if errors.Is(err, io.ErrShortBuffer) {
		return errMessageTooBig
	}
	return sctpWriteEndError(err)
}

// sctpWriteEndError is the end of a connection whose write met the end of
// its association (a turn's answers, the outbox's flusher), with no close
// notice read after it (pktConn.readError): 1006, as any end without a
// notice (PROTOCOL.md §8.3), naming pion's error in the reason. pion
// refuses the write of an association that is no longer up (aborted by
// either end, its DTLS connection closed, shut down), of a stream that was
// reset, and of one the other end's restart (a new INIT from the same
// address and port) cut short; the connection ended with that error
// itself, which is no *CloseError, where every other carrier's end
// without a close is 1006. Other errors are nil.
func sctpWriteEndError(err error) *CloseError {
	if !errors.Is(err, sctp.ErrPayloadDataStateNotExist) && !errors.Is(err, sctp.ErrStreamClosed) && !errors.Is(err, sctp.ErrAssociationRestarted) {
		return nil
	}
	return &CloseError{Code: wsframe.CloseAbnormal, Reason: validPrefix(sctpWriteEndReason+err.Error(), wsframe.MaxCloseReason), Remote: true}
}

// sctpWriteEndReason starts the reason of sctpWriteEndError's 1006.
const sctpWriteEndReason = "SCTP write failed without a close notice: "

// sctpAbortError is the end of an association (SCTP's, or a WebRTC peer
// connection's) that the other end aborted without a close notice: 1006,
// as any end without one (PROTOCOL.md §8.3), with the ABORT's causes as
// the reason, held to what a close frame carries (peerCloseReason). The
// peer chooses an ABORT's reason, up to about 1 KiB of any bytes, and
// pion's error carries it as it came.
func sctpAbortError(err error) *CloseError {
	if !errors.Is(err, sctp.ErrChunk) {
		return nil
	}
	_, causes, ok := strings.Cut(err.Error(), sctp.ErrChunk.Error()+": ")
	if !ok {
		causes = err.Error()
	}
	return &CloseError{Code: wsframe.CloseAbnormal, Reason: peerCloseReason("SCTP ABORT: " + causes), Remote: true}
}

// unreliableStream opens stream 1, unordered and never retransmitted.
func (t *sctpTransport) unreliableStream() *sctp.Stream {
	t.unreliableOnce.Do(func() {
		st, err := t.assoc.OpenStream(sctpUnreliableStream, sctp.PayloadTypeWebRTCBinary)
		if err != nil {
			return
		}
		st.SetReliabilityParams(true, sctp.ReliabilityTypeRexmit, 0)
		t.unreliable = st
	})
	return t.unreliable
}

func (t *sctpTransport) sendDatagram(pkt []byte) (corkwriter.Status, bool) {
	st := t.unreliableStream()
	if st == nil || len(pkt) > sctpChunk {
		return 0, false
	}
	return t.datagrams.push(pkt), true
}

// writeDatagram is the datagram queue's write: with BlockWrite, it waits
// until the association's send queue took the write before.
func (t *sctpTransport) writeDatagram(pkt []byte) bool {
	st := t.unreliableStream()
	_, err := st.Write(pkt)
	return err == nil
}

func (t *sctpTransport) receiveDatagrams(deliver func([]byte)) {
	if keepDeliver(&t.deliver, t.closed, deliver) && t.reading.CompareAndSwap(false, true) {
		t.readUnreliable()
	}
}

// readUnreliable reads stream 1 until the association ends, from whenever
// the other end opens it or the connection starts, whichever comes first,
// and hands what it reads to the connection once it has one
// (receiveDatagrams). A client may send on it before its control stream
// (datagrams are unordered): left unread until the connection existed,
// what it sent stayed in pion's buffers, up to the association's 1 MiB
// receive window, for handshakeTimeout, while the association held only
// its MaxPendingSCTP slot. Dropped, it is what an unreliable datagram may
// be, and one sent before the connection exists has no room to reach.
func (t *sctpTransport) readUnreliable() {
	st := t.unreliableStream()
	if st == nil {
		return
	}
	buf := make([]byte, sctpChunk)
	for {
		n, err := st.Read(buf)
		if errors.Is(err, io.ErrShortBuffer) {
			// No hotpath end sends one (sendDatagram).
			datagramTooBig(t.link.Load(), t)
			return
		}
		if err != nil {
			return
		}
		if deliver := t.deliver.Load(); deliver != nil {
			(*deliver)(buf[:n])
		}
	}
}

// sctpStream is the control stream as a byte stream: writes are cut into
// messages of at most sctpChunk bytes. The outbox writes it through
// deadlineTried (newSCTPControl): with BlockWrite, a write waits while the
// association has a write pending, for a peer that stopped answering
// until the association ends, which pion never decides on its own. So a
// packet sent off the read loop is tried (a call to a silent server
// returns at its deadline), and the flusher's writes wait without a bound
// of their own: a live peer that stops reading for a while (a listener
// that blocks) is queued for up to MaxOutboxBytes, as on the other
// carriers, and a dead one is given up by the keepalive (IdleTimeout).
type sctpStream struct {
	*sctp.Stream
	// A message read whole because the caller's buffer was smaller than
	// sctpChunk (segmentqueue.Fill reads into a partial packet's rest),
	// and how much of it was returned.
	msg  []byte
	moff int
}

// Read reads the stream as a byte stream. pion returns ErrShortBuffer, and
// a count larger than p (the message's size), for a message p cannot
// hold, and keeps the message: a short p gets the message through a
// buffer of sctpChunk bytes, and a message larger than sctpChunk, which
// no hotpath end writes, is io.ErrShortBuffer with no bytes
// (closeErrorOf: 1009).
func (s *sctpStream) Read(p []byte) (int, error) {
	if s.moff < len(s.msg) {
		n := copy(p, s.msg[s.moff:])
		s.moff += n
		return n, nil
	}
	if len(p) >= sctpChunk {
		n, err := s.Stream.Read(p)
		if n < 0 || n > len(p) || errors.Is(err, io.ErrShortBuffer) {
			return 0, io.ErrShortBuffer
		}
		return n, err
	}
	if s.msg == nil {
		s.msg = make([]byte, sctpChunk)
	}
	n, err := s.Stream.Read(s.msg[:sctpChunk])
	if n < 0 || n > sctpChunk || errors.Is(err, io.ErrShortBuffer) {
		s.msg = s.msg[:0]
		return 0, io.ErrShortBuffer
	}
	s.msg = s.msg[:n]
	s.moff = copy(p, s.msg)
	return s.moff, err
}

// newSCTPControl is the control stream st as the connection reads and
// writes it.
func newSCTPControl(st *sctp.Stream) *deadlineTried {
	return &deadlineTried{deadlineStream: &sctpStream{Stream: st}}
}

// Write writes p in messages of at most sctpChunk bytes. At a deadline,
// the messages before the one that could not be queued are written.
func (s *sctpStream) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), sctpChunk)
		w, err := s.Stream.Write(p[:k])
		n += w
		if err != nil {
			return n, err
		}
		p = p[k:]
	}
	return n, nil
}

// dialSCTP opens an SCTP association to an sctp://host:port URL (over
// UDP) or sctp+dtls://host:port (over DTLS, with ClientOptions.DTLSConfig)
// and its control stream.
func (c *Client) dialSCTP(ctx context.Context, u *url.URL) (link, error) {
	ua, err := net.ResolveUDPAddr("udp", u.Host)
	if err != nil {
		return nil, err
	}
	var nc net.Conn
	switch u.Scheme {
	case "sctp":
		nc, err = net.DialUDP("udp", nil, ua)
	case "sctp+dtls":
		if c.opts.DTLSConfig == nil {
			return nil, errNoDTLSConfig // Dial refuses it first
		}
		cfg := *c.opts.DTLSConfig
		if cfg.LoggerFactory == nil {
			cfg.LoggerFactory = quietLogs
		}
		var dc *dtls.Conn
		//lint:ignore SA1019 DialWithOptions would only rebuild a Config from options; ClientOptions.DTLSConfig is one.
		if dc, err = dtls.Dial("udp", ua, &cfg); err == nil {
			if err = dc.HandshakeContext(ctx); err != nil {
				dc.Close()
			}
			nc = dc
		}
	}
	// failed is the dial's error: ctx's, named with the URL, when ctx
	// ended it (the DTLS handshake or the association gave up because it
	// did), as the other carriers' dials name theirs.
	failed := func(err error) error {
		if ctx.Err() != nil {
			return c.endedDialError(ctx, "SCTP dial", ctx.Err())
		}
		return fmt.Errorf("compat: sctp: %w", err)
	}
	if err != nil {
		return nil, failed(err)
	}
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	a, err := sctpClient(nc, c.opts.Limits, c.opts.SCTPRTOMax)
	stop()
	if err != nil {
		nc.Close()
		return nil, failed(err)
	}
	control, err := a.OpenStream(sctpControlStream, sctp.PayloadTypeWebRTCBinary)
	if err != nil {
		a.Close()
		nc.Close()
		return nil, err
	}
	t := newSCTPTransport(a, nc)
	link := newStreamConn(t, newSCTPControl(control), c.opts.Limits)
	t.attach(link)
	return link, nil
}
