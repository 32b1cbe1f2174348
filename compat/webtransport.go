package compat

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotpath-go/hotpath/corkwriter"
	"github.com/hotpath-go/hotpath/wsframe"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/webtransport-go"
)

// webTransport returns the server's WebTransport server, made on first
// use: ServeQUIC hands it the connections that negotiated "h3", and its
// HTTP/3 handler upgrades a CONNECT request on any path to a hotpath
// session.
func (s *Server) webTransport() *webtransport.Server {
	s.wtOnce.Do(func() {
		// An HTTP/3 connection with no session open is closed after
		// webTransportIdle (watchSessions). One whose client finished the
		// QUIC handshake and sent no CONNECT (a dial given up, or a peer
		// holding connections) was kept until QUIC's idle timeout, for
		// ever when the client sent keepalives; native QUIC gives the
		// control stream handshakeTimeout likewise. http3's own
		// IdleTimeout is not enough: it stops at a request's first byte,
		// and waits for the rest of its headers for ever.
		idle := webTransportIdle
		watch := func(ctx context.Context, qc *quic.Conn) context.Context {
			ctx = watchSessions(ctx, qc, idle)
			if slots, ok := s.h3Pending.LoadAndDelete(qc); ok {
				slots := slots.(connSlots)
				w := ctx.Value(sessionWatchKey{}).(*sessionWatch)
				w.pending, w.count = slots.end, slots.count
			}
			return ctx
		}
		h3 := &http3.Server{Handler: http.HandlerFunc(s.serveWebTransport), ConnContext: watch}
		// Options.CheckOrigin runs in prepareUpgrade, as for WebSocket.
		wt := &webtransport.Server{H3: h3, CheckOrigin: func(*http.Request) bool { return true }, Config: pooledFlowControl}
		s.mu.Lock()
		s.wt = wt
		s.mu.Unlock()
	})
	return s.wt
}

// pooledFlowControl is the server's side of WebTransport's flow control,
// sent in its SETTINGS: webtransport-go serves a second session at once on
// one HTTP/3 connection only when both ends have it on (its Server.Upgrade
// refuses the second otherwise), so that a browser may pool a page's
// sessions on one connection. A client that sends no limits of its own
// (compat's, Chromium's) keeps it off, and its sessions are served as
// before, one at a time per connection.
//
// The limits hold a session to what QUICConfig gives a whole connection,
// which binds first: its streams (1024) and its window (16 MiB), which the
// sessions of a connection share as its streams do, so that a session
// alone on its connection is served as one without flow control is.
//
// Unidirectional streams get the same limit as bidirectional ones,
// although one is a violation (PROTOCOL.md §8.2): a limit of 0 had
// webtransport-go end the session of a client that opened one anyway
// (WT_FLOW_CONTROL_ERROR) before refuseStrayStreams saw the stream, by
// resetting the session's CONNECT stream and every stream of it, the
// control stream too, so nothing could tell the client why: it saw 1006
// where this end closed with 1002. Within the limit the stream reaches
// refuseStrayStreams, which closes as on any other session: the close
// notice, 1002 HP_ERR_UNEXPECTED_STREAM, on the control stream, then the
// session's close with the code. Only the first stream is accepted; the
// others stay unread, each holding a stream of QUIC's limit (100
// unidirectional streams, fewer than this), until the session closes. A
// client has to open more than the limit before the session is closed,
// streams that it ended at once, to meet webtransport-go's error again
// (flowControlViolation).
var pooledFlowControl = &webtransport.Config{
	MaxIncomingStreams:    maxIncomingStreams,
	MaxIncomingUniStreams: maxIncomingStreams,
	MaxIncomingData:       connectionWindow,
}

// maxPooledSessions bounds the WebTransport sessions of one HTTP/3
// connection, open or opening, when both ends have flow control on
// (without it webtransport-go serves one at a time). Each is a Peer,
// counted by MaxConnections and MaxConnectionsPerAddress as a connection,
// but both default to no cap, and a session costs its client a request on
// a connection it has, where a connection costs a QUIC handshake. QUIC's
// stream limit alone would allow 512 (a request stream and a control
// stream each), all sharing one connection's window and congestion
// control. A page pools a few; 16 leaves it room.
const maxPooledSessions = 16

// errTooManySessions refuses a CONNECT past the sessions its connection
// may carry at once. A 4xx: the client's own sessions fill its
// connection, and another connection, or the end of one of them, makes
// room. RFC 9114 §4.1.1's H3_REQUEST_REJECTED, which says the same and
// that the request was not processed, cannot be sent cleanly from a
// handler: http3's HTTPStream, which gives the stream to reset, first
// flushes a 200.
var errTooManySessions = &HTTPError{Status: http.StatusTooManyRequests, Message: "too many WebTransport sessions on this connection"}

// The HTTP/3 settings of WebTransport's initial flow-control limits:
// webtransport-go has flow control on when the client sent any of them
// above 0 (its Config.sessionFlowControl).
const (
	settingWTInitialMaxData        = 0x2b61
	settingWTInitialMaxStreamsUni  = 0x2b64
	settingWTInitialMaxStreamsBidi = 0x2b65
)

// sessionsAllowed is how many WebTransport sessions the connection of w
// may carry at once: maxPooledSessions when its client has flow control
// on, or has not sent its SETTINGS yet (webtransport-go's Upgrade waits
// for them, and refuses a second session if they turn it off), else one.
func sessionsAllowed(w http.ResponseWriter) int {
	st, ok := w.(http3.Settingser)
	if !ok {
		return maxPooledSessions
	}
	select {
	case <-st.ReceivedSettings():
	default:
		return maxPooledSessions
	}
	other := st.Settings().Other
	if other[settingWTInitialMaxData] > 0 || other[settingWTInitialMaxStreamsUni] > 0 || other[settingWTInitialMaxStreamsBidi] > 0 {
		return maxPooledSessions
	}
	return 1
}

// errNotConnect refuses an HTTP/3 request that is no WebTransport
// session: not an extended CONNECT whose :protocol is WebTransport's.
var errNotConnect = &HTTPError{Status: http.StatusBadRequest, Message: "not a WebTransport CONNECT"}

// checkConnect checks, before any hook (CheckOrigin, Authenticate) sees
// the request, that it is an extended CONNECT for WebTransport, as
// checkRequest does for a WebSocket upgrade: webtransport-go checks it in
// Upgrade, after the hooks, so a GET got their refusal (403, 401) where a
// GET with hooks that passed got 400. Both :protocol values
// webtransport-go takes ("webtransport-h3", and "webtransport" before
// draft 15) begin with "webtransport"; it checks the value exactly.
func checkConnect(r *http.Request) error {
	if r.Method != http.MethodConnect || !strings.HasPrefix(r.Proto, "webtransport") {
		return errNotConnect
	}
	return nil
}

// serveWebTransport upgrades a WebTransport CONNECT request and serves the
// session: its first bidirectional stream is the control stream, as on
// native QUIC (PROTOCOL.md §8.2), and its datagrams carry unreliable
// emits.
//
// Until its control stream comes, the session is a handshake in progress,
// as a native QUIC connection without its own is: it holds a slot of
// Options.MaxPendingQUIC (its connection's, handed over, for the
// connection's first session), Shutdown drops it after
// handshakeShutdownGrace, and a unidirectional stream closes it. The
// connection's slot used to end as its first session opened, and the
// session's wait for its control stream (handshakeTimeout) was bounded by
// nothing, MaxConnections included, which counts a connection once its
// control stream has come: 100 sessions that never opened one were all
// accepted with MaxPendingQUIC 4, and Shutdown waited out their 10 s.
func (s *Server) serveWebTransport(w http.ResponseWriter, r *http.Request) {
	if err := checkConnect(r); err != nil {
		s.refuse(w, err)
		return
	}
	// The connection's first session takes over its slot of
	// MaxPendingQUIC, taken at the connection's accept; another takes its
	// own. By address (MaxConnectionsPerAddress), a request takes over
	// the connection's own count when the connection holds one (it has
	// no other request or session), else reserves one more (h3Count). A
	// request that opens no session gives them back (giveBack).
	//
	// Before all that, the request takes a place among the sessions its
	// connection may carry at once (sessionsAllowed), given back as it
	// fails or its session ends: past them it is refused before any hook
	// sees it.
	watch, _ := r.Context().Value(sessionWatchKey{}).(*sessionWatch)
	var (
		end   func()
		count *h3Count
	)
	if watch != nil {
		if !watch.admit(sessionsAllowed(w)) {
			s.refuse(w, errTooManySessions)
			return
		}
		end, count = watch.takePending(), watch.count
	}
	connSlot := end != nil
	slot, err := s.reserveAddrFor(r.RemoteAddr, count)
	if err != nil {
		if connSlot {
			watch.returnPending(end)
		}
		watch.leave()
		s.refuse(w, err)
		return
	}
	pending, abort := context.WithCancelCause(context.Background())
	giveBack := func() {
		abort(nil)
		watch.leave()
		if connSlot {
			watch.returnPending(end)
		} else if end != nil {
			end()
		}
		// Its count goes back to the connection when it was the
		// connection's last (endCount).
		slot.abandon()
	}
	up, err := s.prepareUpgrade(r, slot)
	if err != nil {
		giveBack()
		s.refuse(w, err)
		return
	}
	if !connSlot {
		own, ok := s.quicPending.begin(func() { abort(errStaleSession) })
		if !ok {
			giveBack()
			w.Header().Set("Retry-After", "1")
			s.refuse(w, &HTTPError{Status: http.StatusServiceUnavailable, Message: "too many WebTransport sessions opening"})
			return
		}
		end = own
	}
	sess, err := s.wt.Upgrade(w, r)
	if err != nil {
		// A request that opened no session (one that is no CONNECT)
		// leaves the connection's slots with it: ended, the connection
		// would stay for webTransportIdle outside the bounds.
		giveBack()
		s.metrics.handshakeFailures.Add(1)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if watch != nil {
		watch.opened()
		context.AfterFunc(sess.Context(), watch.ended)
	}
	s.conns.add()
	go func() {
		// Unless the session's Peer kept it; the connection takes its
		// count over when it was the connection's last (endCount).
		defer slot.abandon()
		ctx, cancel := context.WithTimeout(sess.Context(), handshakeTimeout)
		stop := context.AfterFunc(pending, cancel)
		abandon := &cancelCloser{func() { abort(nil) }}
		s.handshakes.add(abandon)
		// A unidirectional stream is a violation from the start
		// (refuseStrayStreams takes over once the session is served):
		// unaccepted, what it carried stayed in quic-go's buffers until
		// the control stream came, up to the connection's window.
		go func() {
			if _, err := sess.AcceptUniStream(ctx); err == nil {
				sess.CloseWithError(webtransport.SessionErrorCode(wsframe.CloseProtocolError), unexpectedStreamReason)
			}
		}()
		str, err := sess.AcceptStream(ctx)
		s.handshakes.remove(abandon)
		stop()
		cancel()
		stale := context.Cause(pending) == errStaleSession
		abort(nil)
		end()
		if err != nil {
			s.metrics.handshakeFailures.Add(1)
			reason := "HP_ERR_NO_CONTROL_STREAM"
			if stale {
				reason = staleHandshakeReason
			}
			sess.CloseWithError(webtransport.SessionErrorCode(wsframe.ClosePolicyViolation), reason)
			s.conns.done()
			return
		}
		var conn context.Context
		if watch != nil {
			conn = watch.conn
		}
		s.serveLink(newStreamConn(newWTTransport(sess, nil, conn, false), &deadlineTried{deadlineStream: str}, s.opts.Limits), up)
	}()
}

// errStaleSession ends the wait of a WebTransport session for its control
// stream when a newcomer takes its slot of MaxPendingQUIC.
var errStaleSession = errors.New("compat: WebTransport session stale")

// webTransportIdle is how long an HTTP/3 connection may stay without a
// session (a variable for the tests).
var webTransportIdle = handshakeTimeout

// sessionWatch closes an HTTP/3 connection that has had no WebTransport
// session open for webTransportIdle, whatever its requests are doing. A
// client that began a request and never finished its headers (one byte of
// a HEADERS frame on each of up to MaxIncomingStreams streams), while
// sending QUIC keep-alives, otherwise held the connection and a goroutine
// per stream for good, uncounted: http3 has no timeout for a request's
// headers, and its IdleTimeout stops at a request's first byte.
type sessionWatch struct {
	// conn is the QUIC connection's context (http3's, with its values),
	// whose cause is the error it closed with (wtTransport.conn). The
	// context only, which holds none of the connection's buffers:
	// watchSessions says why nothing may hold an ended connection.
	conn     context.Context
	mu       sync.Mutex
	sessions int
	// admitted counts the connection's sessions and the requests that
	// may open one (admit).
	admitted int
	after    time.Duration // webTransportIdle when the server began
	idle     *time.Timer
	// pending ends the connection's slot of Options.MaxPendingQUIC,
	// which its first session takes over (takePending); nil when none.
	pending func()
	// count is the connection's count by address, set before its first
	// request.
	count *h3Count
}

// connSlots are what an HTTP/3 connection took at its accept, handed to
// its sessionWatch: end gives up its slot of Options.MaxPendingQUIC,
// count holds its count by address.
type connSlots struct {
	end   func()
	count *h3Count
}

// h3Count is an HTTP/3 connection's part in the count by address
// (Options.MaxConnectionsPerAddress), for the whole of its life: it
// counts as many connections as it has requests and sessions holding a
// slot (a session's becomes its Peer's once its control stream has
// come), and one while it has none. Counted only by its sessions, a
// connection whose sessions had failed or ended counted nothing until
// webTransportIdle closed it, and one address could hold any number of
// HTTP/3 connections past its cap, each a QUIC connection with its
// buffers and goroutines.
//
// The count does not end and begin again between sessions: the last
// slot of an open connection to end hands its count to the connection
// (endCount), as its own slot, and the connection's next request takes
// that over (reserveAddrFor). So a client that opens its sessions one
// after another on one connection, as a browser pooling them does, is
// never refused its next for its own count, and no other connection
// takes the place in between. Its fields are guarded by the server's mu.
type h3Count struct {
	s *Server
	// live counts the connection's slots not yet ended: its own, its
	// requests' and its sessions'.
	live int
	// own is the connection's own slot while no request or session of
	// its holds one; nil otherwise, or without the cap.
	own *addrSlot
	// closed is set as the connection ends: its slots end their counts
	// from then on.
	closed bool
}

// newH3Count starts the count of an HTTP/3 connection whose slot by
// address, taken at its accept, is slot (nil without the cap): it
// becomes the connection's own. One abandoned already (the connection
// ended) is left to end alone.
func (s *Server) newH3Count(slot *addrSlot) *h3Count {
	c := &h3Count{s: s}
	if slot == nil {
		return c
	}
	s.mu.Lock()
	if slot.state.Load() == slotPending {
		slot.conn = c
		c.own = slot
		c.live = 1
	}
	s.mu.Unlock()
	return c
}

// close ends the connection's own count as the connection ends; the
// slots of its requests and sessions end theirs as they end.
func (c *h3Count) close() {
	c.s.mu.Lock()
	c.closed = true
	own := c.own
	c.own = nil
	c.s.mu.Unlock()
	own.abandon()
}

type sessionWatchKey struct{}

// watchSessions is the HTTP/3 server's ConnContext: it starts the
// connection's sessionWatch, which the requests' contexts carry.
//
// The timer reaches qc only through conn, cleared once qc has ended: a
// stopped timer stays in the runtime's timer heap, its func with it,
// until the runtime drops it (at its deadline at the latest), and a func
// holding qc held the ended connection with everything it had buffered,
// up to its window (16 MiB), for as long: TestQUICPendingBoundCapsHeap
// saw the heap of closed connections come back only after 1 to 5 s and
// more (it failed 1 run in 15, and 1 in 40, under go test -race).
func watchSessions(ctx context.Context, qc *quic.Conn, after time.Duration) context.Context {
	w := &sessionWatch{after: after, conn: ctx}
	var conn atomic.Pointer[quic.Conn]
	conn.Store(qc)
	w.idle = time.AfterFunc(after, func() {
		if qc := conn.Load(); qc != nil {
			qc.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "idle timeout")
		}
	})
	context.AfterFunc(qc.Context(), func() {
		w.idle.Stop()
		conn.Store(nil)
	})
	return context.WithValue(ctx, sessionWatchKey{}, w)
}

// takePending returns the end of the connection's slot of
// MaxPendingQUIC, once: its first session holds it until its control
// stream comes. Nil for the sessions after it.
func (w *sessionWatch) takePending() func() {
	w.mu.Lock()
	defer w.mu.Unlock()
	end := w.pending
	w.pending = nil
	return end
}

// returnPending gives back what takePending returned, for a request that
// opened no session.
func (w *sessionWatch) returnPending(end func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pending == nil {
		w.pending = end
		return
	}
	// Cannot happen: only one request holds it at a time.
	end()
}

// admit takes a place for a CONNECT request among the connection's
// sessions, up to limit of them open or opening; false when none is
// left. The request gives it back (leave) if it opens no session, else
// its session does as it ends (ended).
func (w *sessionWatch) admit(limit int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.admitted >= limit {
		return false
	}
	w.admitted++
	return true
}

// leave gives back the place of a request that opened no session; safe
// on a nil sessionWatch.
func (w *sessionWatch) leave() {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.admitted--
	w.mu.Unlock()
}

func (w *sessionWatch) opened() {
	w.mu.Lock()
	w.sessions++
	w.idle.Stop()
	w.mu.Unlock()
}

func (w *sessionWatch) ended() {
	w.mu.Lock()
	w.sessions--
	w.admitted--
	if w.sessions == 0 {
		w.idle.Reset(w.after)
	}
	w.mu.Unlock()
}

// wtTransport is a WebTransport session under a pktConn.
type wtTransport struct {
	sess *webtransport.Session
	// own is the client's QUIC connection, which it dialed for this
	// session alone and closes with it (closeTransport); nil on a server,
	// and for a test's sessions (testHookWebTransportDial).
	own *quic.Conn
	// conn is the context of the QUIC connection under the session, whose
	// cause is the error it closed with (closeErrorOf); nil when unknown.
	conn context.Context
	// client: this end is the client, whose close carries the code
	// (carriesCloseCode).
	client    bool
	datagrams *quicDatagrams
	closeOnce sync.Once
}

// newWTTransport is a client's session when client is set, on own, the
// QUIC connection it dialed (nil for a test's session), else a server's,
// on the QUIC connection whose context is conn (nil when unknown).
func newWTTransport(sess *webtransport.Session, own *quic.Conn, conn context.Context, client bool) *wtTransport {
	if own != nil {
		conn = own.Context()
	}
	return &wtTransport{sess: sess, own: own, conn: conn, client: client, datagrams: newQUICDatagrams(sess.SendDatagram, 8, sess.Context().Done())}
}

// carriesCloseCode: a client's close carries the code, a server's does
// not, so a server waits for the answer to its close notice first, as on
// SCTP, and the client closes at once after a violation it finds, as on
// QUIC (PROTOCOL.md §8.3).
//
// A client's: closeTransport closes the session with the code and then
// its own QUIC connection with it too, and the server reads the code from
// whichever comes first (closeErrorOf); a test's session, on a connection
// the client does not own, closes with the session alone, which carries
// it. Waiting for the answer held a client whose server never gave one
// for closeTimeout, its calls with it. (Another client may close its QUIC
// connection with HTTP/3's code, as webtransport-go's Transport.Dial
// does, and overtake the session's close: a server reads that as 1006,
// but this end only answers for its own closes.)
//
// A server's: Chromium never reports the code of webtransport-go's
// CLOSE_WEBTRANSPORT_SESSION (its closed promise rejects, "Connection
// lost."), and the session's close resets the control stream, which
// discarded the close notice sent just before it: a page saw 1006 for
// every violation the server found (carriertest's "the page sees 1009 on
// WebTransport").
func (t *wtTransport) carriesCloseCode() bool { return t.client }

func (t *wtTransport) carrier() Carrier { return CarrierWebTransport }

// ended: the session's context ends as either end closes it, or its
// QUIC connection ends (transportEnd).
func (t *wtTransport) ended() <-chan struct{} { return t.sess.Context().Done() }

func (t *wtTransport) encrypted() bool { return true } // over HTTP/3, over QUIC

// closeTransport closes the session with CLOSE_WEBTRANSPORT_SESSION
// carrying code and reason, and then a client's QUIC connection with the
// same code and reason in its CONNECTION_CLOSE, as native QUIC closes
// (PROTOCOL.md §8.3). The connection's close is sent at once, and
// overtakes what is not yet sent of the session's close and of the
// close notice: had it carried HTTP/3's H3_NO_ERROR (0x100), as
// webtransport-go's Transport.Dial closes it, the server saw 1006 where
// it lost the race. With the code it reads the code whichever comes
// first (closeErrorOf). RFC 9114 §8 has an HTTP/3 endpoint that does not
// know the code treat it as H3_NO_ERROR, so another server sees a clean
// close; the connection carries this session alone.
//
// The first close alone counts: the read loop, ended by the session's
// close, closes the transport again with its own code (1006 for the end
// of its read), which must not reach the connection's close first.
func (t *wtTransport) closeTransport(code wsframe.CloseCode, reason string) {
	t.closeOnce.Do(func() {
		t.sess.CloseWithError(webtransport.SessionErrorCode(code), reason)
		if t.own != nil {
			t.own.CloseWithError(quic.ApplicationErrorCode(code), reason)
		}
	})
}

// closeErrorOf recovers the code of the other end's CLOSE_WEBTRANSPORT_SESSION,
// or of the QUIC connection's close.
//
// A session that ended is asked for its own error first: a read racing
// with the session's end can return another error than the session's,
// which carries the code (TestCarrierBadInput saw it in about one run in
// eight, when the client closed the QUIC connection as its session
// ended). Then the QUIC connection's: a session that the connection's
// close ended has an error of its own that does not carry the
// connection's code (webtransport-go's H3_DATAGRAM_ERROR with the
// connection's error as text), and neither does the read of a stream
// that the session's end canceled first.
func (t *wtTransport) closeErrorOf(err error) *CloseError {
	if ce := remoteSessionClose(err); ce != nil {
		return ce
	}
	if ce := flowControlViolation(err); ce != nil {
		return ce
	}
	if t.sess.Context().Err() != nil {
		// An ended session has its error set, and OpenStream returns it
		// without opening a stream.
		if str, serr := t.sess.OpenStream(); serr != nil {
			if ce := remoteSessionClose(serr); ce != nil {
				return ce
			}
			if ce := flowControlViolation(serr); ce != nil {
				return ce
			}
		} else {
			str.CancelWrite(0)
			str.CancelRead(0)
		}
	}
	if t.conn != nil && t.conn.Err() == nil && (connectStreamFailed(err) || connectStreamFailed(context.Cause(t.sess.Context()))) {
		// The session's CONNECT stream failed, most likely because its
		// QUIC connection closed: quic-go fails the streams first and
		// cancels the connection's context, whose cause carries the
		// code, a moment later. Read before it, a client's Close (1000)
		// reached OnDisconnect as webtransport-go's error (CI: one run
		// of TestCloseWhileAwaitingCapabilitiesSendsItsClose).
		select {
		case <-t.conn.Done():
		case <-time.After(connEndWait):
		}
	}
	if t.conn != nil && t.conn.Err() != nil {
		if ce := quicCloseError(context.Cause(t.conn)); ce != nil {
			return ce
		}
	}
	return quicCloseError(err)
}

// connectStreamFailed reports whether err is webtransport-go's end of a
// session whose CONNECT stream failed: H3_DATAGRAM_ERROR, this end's,
// with the stream's error only as text (the connection's close code
// among it, out of reach).
func connectStreamFailed(err error) bool {
	var he *http3.Error
	return errors.As(err, &he) && he.ErrorCode == http3.ErrCodeDatagramError && !he.Remote
}

// connEndWait bounds closeErrorOf's wait for the QUIC connection's end
// after its session's CONNECT stream failed: microseconds when the
// connection closed, the whole bound (once, at the connection's end)
// when only the stream was reset.
const connEndWait = 250 * time.Millisecond

// flowControlViolation returns the error of a session that
// webtransport-go ended for the other end's breach of its flow control
// (WT_FLOW_CONTROL_ERROR), or nil: 1002 HP_ERR_FLOW_CONTROL, with what
// webtransport-go says of it. webtransport-go resets the session's
// CONNECT stream and its streams, so the other end reads no close code,
// and this end's connection ended with webtransport-go's error itself,
// which is no CloseError. QUIC's limits, which a pooled session's equal
// (pooledFlowControl) and its connection's count more against, bind
// first; a client breaches the session's only by opening past them
// streams it ends at once, or by ignoring them.
func flowControlViolation(err error) *CloseError {
	var he *http3.Error
	if !errors.As(err, &he) || he.Remote || he.ErrorCode != http3.ErrCode(webtransport.WTFlowControlErrorCode) {
		return nil
	}
	return &CloseError{Code: wsframe.CloseProtocolError, Reason: validPrefix(flowControlReason+" ("+he.ErrorMessage+")", wsframe.MaxCloseReason)}
}

// flowControlReason is the reason of flowControlViolation's 1002.
const flowControlReason = "HP_ERR_FLOW_CONTROL"

// remoteSessionClose returns the close code of a session the other end
// closed, or nil. A session closed with a code outside the close codes'
// range (a browser's close() without one sends 0) ended cleanly without
// a code: 1005, as a WebSocket close frame without a status. One in the
// range is read by carrierCloseCode.
func remoteSessionClose(err error) *CloseError {
	var se *webtransport.SessionError
	if !errors.As(err, &se) || !se.Remote {
		return nil
	}
	if !isCloseCode(uint64(se.ErrorCode)) {
		return &CloseError{Code: wsframe.CloseNoStatus, Reason: fmt.Sprintf("session closed with code %d", se.ErrorCode), Remote: true}
	}
	return carrierCloseCode(uint64(se.ErrorCode), se.Message)
}

func (t *wtTransport) sendDatagram(pkt []byte) (corkwriter.Status, bool) {
	return t.datagrams.push(pkt)
}

func (t *wtTransport) receiveDatagrams(deliver func([]byte)) {
	for {
		b, err := t.sess.ReceiveDatagram(t.sess.Context())
		if err != nil {
			return
		}
		deliver(b)
	}
}

func (t *wtTransport) openStream(ctx context.Context) (rawStream, error) {
	str, err := t.sess.OpenStreamSync(ctx)
	if err != nil {
		return nil, err
	}
	return wtStream{str}, nil
}

func (t *wtTransport) acceptStreams(p *Peer) {
	for {
		str, err := t.sess.AcceptStream(p.ctx)
		if err != nil {
			return
		}
		go p.serveStream(t, wtStream{str})
	}
}

func (t *wtTransport) refuseStrayStreams(c *pktConn, server bool) {
	refuseStrayStreams(t.sess.Context(), c, server,
		func(ctx context.Context) error { _, err := t.sess.AcceptUniStream(ctx); return err },
		func(ctx context.Context) error { _, err := t.sess.AcceptStream(ctx); return err })
}

// wtStream is a WebTransport stream as a binary stream.
type wtStream struct{ *webtransport.Stream }

func (s wtStream) CloseWrite() error { return s.Stream.Close() }

func (s wtStream) Close() error {
	s.Stream.CancelRead(0)
	return s.Stream.Close()
}

func (s wtStream) Reset(code uint32) {
	s.Stream.CancelWrite(webtransport.StreamErrorCode(code))
	s.Stream.CancelRead(webtransport.StreamErrorCode(code))
}

// streamConnectionEnded reports whether err, from a QUIC or WebTransport
// stream, is the end of the whole connection or session under it rather
// than of the stream.
func streamConnectionEnded(err error) bool {
	var (
		se *webtransport.SessionError
		he *http3.Error // the HTTP/3 connection under a session
		qe *quic.StreamError
	)
	return errors.As(err, &se) || quicConnectionEnded(err) || (errors.As(err, &he) && !errors.As(err, &qe))
}

func (s wtStream) resetCode(err error) (uint32, bool) {
	var se *webtransport.StreamError
	if errors.As(err, &se) && se.Remote {
		return uint32(se.ErrorCode), true
	}
	return 0, false
}

// dialWebTransport opens a WebTransport session at an https:// URL and
// its control stream, on a QUIC connection of its own that it closes
// with the session (wtTransport.closeTransport). webtransport-go's
// Transport.Dial closes the connection it dials with HTTP/3's
// H3_NO_ERROR as soon as the session ends, and that close overtook the
// session's, which carries the close code: the server saw 1006 for a
// client's close (TestCloseWhileAwaitingCapabilitiesSendsItsClose).
func (c *Client) dialWebTransport(ctx context.Context, u *url.URL) (link, error) {
	var (
		rsp  *http.Response
		sess *webtransport.Session
		qc   *quic.Conn // the client's own; nil for a test's session
		err  error
	)
	stop := func() bool { return true }
	if hook := testHookWebTransportDial.Load(); hook != nil {
		rsp, sess, err = (*hook)(ctx, u.String(), c.opts.Header)
	} else {
		tlsConf := c.opts.TLSConfig.Clone()
		if tlsConf == nil {
			tlsConf = &tls.Config{}
		}
		tlsConf.NextProtos = []string{http3.NextProtoH3}
		qc, err = quic.DialAddrEarly(ctx, u.Host, tlsConf, QUICConfig(0))
		if err == nil {
			// webtransport-go reads the answer to its CONNECT request
			// without ctx: a server that never answered held the dial
			// (and Close, during a reconnect attempt) for as long as it
			// kept the connection, for ever with our keepalives. Closing
			// the connection when ctx ends fails that read.
			conn := qc
			stop = context.AfterFunc(ctx, func() { conn.CloseWithError(0, "") })
			var cc *webtransport.ClientConn
			if cc, err = (&webtransport.Transport{}).NewClientConn(qc); err == nil {
				rsp, sess, err = cc.Dial(ctx, u.String(), c.opts.Header)
			}
		}
	}
	if err != nil {
		stop()
		if qc != nil {
			// As Transport.Dial closes it.
			code, msg := quic.ApplicationErrorCode(http3.ErrCodeNoError), ""
			if rerr, ok := errors.AsType[*webtransport.RequirementsNotMetError](err); ok {
				code, msg = webtransport.WTRequirementsNotMetErrorCode, rerr.Message
			}
			qc.CloseWithError(code, msg)
		}
		if rsp != nil && rsp.StatusCode != 0 {
			return nil, &HTTPError{Status: rsp.StatusCode, Message: "webtransport: " + http.StatusText(rsp.StatusCode), RetryAfter: retryAfter(rsp.Header)}
		}
		if ctx.Err() != nil {
			// The connection closed because ctx ended.
			return nil, c.endedDialError(ctx, "WebTransport dial", context.Cause(ctx))
		}
		return nil, quicDialError(err)
	}
	str, err := sess.OpenStreamSync(ctx)
	if !stop() && err == nil {
		err = context.Cause(ctx) // ctx ended as the stream opened: the connection is closed
	}
	if err != nil {
		sess.CloseWithError(0, "")
		if qc != nil {
			qc.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "")
		}
		return nil, c.endedDialError(ctx, "WebTransport dial", err)
	}
	return newStreamConn(newWTTransport(sess, qc, nil, true), &deadlineTried{deadlineStream: str}, c.opts.Limits), nil
}

// testHookWebTransportDial, when set, opens the sessions of
// dialWebTransport in place of a Transport's Dial: a test's opens them
// side by side on one HTTP/3 connection, as a browser pooling them does.
var testHookWebTransportDial atomic.Pointer[func(ctx context.Context, url string, h http.Header) (*http.Response, *webtransport.Session, error)]
