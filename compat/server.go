package compat

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gobwas/ws"
	"github.com/hotpath-go/hotpath/dictionary"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/scheduler"
	"github.com/hotpath-go/hotpath/wsframe"
	"github.com/quic-go/webtransport-go"
)

// Subprotocol is the WebSocket subprotocol of PROTOCOL.md.
const Subprotocol = "hotpath.v1"

// Server serves the hotpath.v1 protocol: calls, asks, events and rooms.
// Mount it on any mux as an http.Handler, or run it on a listener of its
// own with Serve and ListenAndServe.
type Server struct {
	opts     Options
	router   *Router
	dispatch *dispatch.Dispatcher[*Peer]
	dict     *serverDictionary // nil with Options.NoDictionary
	rooms    rooms
	metrics  metrics

	// keepalive checks every connection's silence; timeouts fires call
	// timeouts and ask deadlines. One runtime timer each for the whole
	// server, whatever the number of connections.
	keepalive *scheduler.Scheduler[*Peer]
	timeouts  *scheduler.Scheduler[timeoutTarget]

	mu sync.Mutex
	// peers are the open connections, each with its count by address
	// (register), which unregister ends; nil when not counted.
	peers map[*Peer]*addrSlot
	// listeners are closed by Shutdown. Keyed by a pointer of track's,
	// not by the listener: a listener's dynamic type need not be
	// comparable (a struct value holding a func), and as a map key it
	// panicked Serve.
	listeners map[*io.Closer]struct{}
	nextID    uint64
	// byAddr counts the connections by addrKey, for
	// Options.MaxConnectionsPerAddress (nil without it), from the moment
	// their address is known (an addrSlot) until they end, handshakes in
	// progress included; a key leaves at zero, so that it holds no more
	// entries than there are connections.
	byAddr map[netip.Prefix]int

	wtOnce sync.Once
	wt     *webtransport.Server // serves the "h3" connections of ServeQUIC

	// quicPending bounds the QUIC connections of every ServeQUIC that
	// have no control stream (native) or WebTransport session (HTTP/3)
	// yet; h3Pending hands an HTTP/3 connection's end of its slot and
	// its count by address, by connection, to its sessionWatch.
	quicPending *pendingHandshakes
	h3Pending   sync.Map // *quic.Conn → connSlots

	shutting atomic.Bool
	// stopping ends when Shutdown begins: binary streams end with it
	// (serveStream), where calls in flight are let finish.
	stopping   context.Context
	stop       context.CancelFunc
	asyncCalls tracker // Async calls running, waited for by Shutdown
	conns      tracker // connection goroutines
	// handshakes are the carrier handshakes in progress that Shutdown
	// closes when its ctx ends: until then they may finish, and their
	// clients are told the server is going away (1001).
	handshakes closerSet
}

// NewServer returns a Server for opts. It fails when opts has no Router,
// the Router has a name no packet can carry (empty, too long, not UTF-8,
// an event's starting with $) or one registered twice, or a field has a
// value it refuses: each is an *OptionError naming the field ("Router"
// for the Router's).
func NewServer(opts Options) (*Server, error) {
	if opts.Router == nil {
		return nil, &OptionError{Option: "Router", Err: errors.New("compat: Options.Router is nil")}
	}
	if opts.IdleTimeout < 0 || opts.KeepaliveInterval < 0 {
		// The client reads a negative value as "off"; a server always
		// gives silent peers up, or dead ones would pile up.
		field := "IdleTimeout"
		if opts.IdleTimeout >= 0 {
			field = "KeepaliveInterval"
		}
		return nil, &OptionError{Option: field, Err: fmt.Errorf("compat: negative IdleTimeout (%v) or KeepaliveInterval (%v): a server always pings and gives up silent peers; 0 takes the defaults", opts.IdleTimeout, opts.KeepaliveInterval)}
	}
	opts = opts.WithDefaults()
	if err := opts.check(); err != nil {
		return nil, err
	}
	if err := opts.Router.freeze(); err != nil {
		return nil, &OptionError{Option: "Router", Err: err}
	}
	s := &Server{
		opts:      opts,
		router:    opts.Router,
		peers:     map[*Peer]*addrSlot{},
		listeners: map[*io.Closer]struct{}{},

		quicPending: &pendingHandshakes{max: opts.MaxPendingQUIC},
	}
	if opts.MaxConnectionsPerAddress > 0 {
		s.byAddr = map[netip.Prefix]int{}
	}
	s.stopping, s.stop = context.WithCancel(context.Background())
	s.rooms.init(s)
	s.dispatch = dispatch.NewDispatcher(dispatch.Handlers[*Peer]{
		Call:         (*Peer).onCall,
		Event:        (*Peer).onEvent,
		Answer:       (*Peer).onAnswer,
		Batch:        (*Peer).onBatch,
		Ping:         (*Peer).onPing,
		Pong:         (*Peer).onPong,
		Join:         (*Peer).onJoin,
		Leave:        (*Peer).onLeave,
		Emit:         (*Peer).onEmit,
		Capabilities: (*Peer).onCapabilities,
	})
	if !opts.NoDictionary && !opts.Echo {
		switch d, err := newServerDictionary(s.router, opts.Limits.MaxMessageSize); {
		case errors.Is(err, dictionary.ErrEmpty):
			// A router without methods or events (rooms only) has no
			// names to compress: no dictionary is offered.
		case err != nil:
			return nil, err
		default:
			s.dict = d
		}
	}
	s.keepalive = scheduler.New(s.checkKeepalive, scheduler.WithGranularity(keepaliveGranularity(opts.KeepaliveInterval)))
	s.timeouts = scheduler.New(fireTimeouts, scheduler.WithGranularity(time.Millisecond))
	return s, nil
}

// keepaliveGranularity is an eighth of the interval, within [10 ms, 1 s]:
// a connection is pinged at most an eighth late.
func keepaliveGranularity(interval time.Duration) time.Duration {
	return min(max(interval/8, 10*time.Millisecond), time.Second)
}

// ServeHTTP upgrades the request to a WebSocket connection and serves it.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Before the hooks, as under Serve: a request that is no upgrade
	// gets 400 (or 426 for its version), not a hook's refusal.
	if err := checkRequest(r); err != nil {
		s.refuse(w, err)
		return
	}
	// Counted from here: net/http owns the accept and the reading of the
	// request, which its own ReadHeaderTimeout bounds.
	slot, err := s.reserveAddr(r.RemoteAddr)
	if err != nil {
		s.refuse(w, err)
		return
	}
	defer slot.abandon() // unless a Peer kept it
	up, err := s.prepareUpgrade(r, slot)
	if err != nil {
		s.refuse(w, err)
		return
	}
	// Counted before the 101 leaves, and shutting looked at after that:
	// either Shutdown waits for this connection (and its close 1001), or
	// the upgrade sees Shutdown begun and is refused. Counted after the
	// 101, a connection upgraded as Shutdown began was not waited for,
	// and the hotpath command exited under it: its client read the end
	// of the stream, not 1001 (cmd/hotpath's
	// TestShutdownRightAfterAnUpgradeSaysGoingAway).
	s.conns.add()
	if s.shutting.Load() {
		s.conns.done()
		s.refuse(w, errShutting)
		return
	}
	nc, rw, err := up.upgradeHTTP(r, w)
	if err != nil {
		s.metrics.handshakeFailures.Add(1)
		s.conns.done()
		return
	}
	var early []byte
	if n := rw.Reader.Buffered(); n > 0 {
		early, _ = rw.Reader.Peek(n)
		early = append([]byte(nil), early...)
	}
	s.serveConn(nc, up, early)
}

func (s *Server) refuse(w http.ResponseWriter, err error) {
	s.metrics.handshakeFailures.Add(1)
	if err == errTooManyConnections || err == errTooManyFromAddress {
		w.Header().Set("Retry-After", retryAfterFull)
	}
	if err == ws.ErrHandshakeUpgradeRequired {
		// RFC 6455 §4.2.2 item 4, as Serve's Upgrader sends it.
		w.Header().Set("Sec-WebSocket-Version", "13")
	}
	if err == ws.ErrHandshakeBadMethod {
		// RFC 9110 §15.5.6: "The origin server MUST generate an Allow
		// header field in a 405 response", as handshakeReader.Write adds
		// it to Serve's.
		w.Header().Set("Allow", http.MethodGet)
	}
	var he *HTTPError
	var rej *ws.ConnectionRejectedError
	switch {
	case errors.As(err, &he):
		http.Error(w, he.Message, he.Status)
	case errors.As(err, &rej) && rej.StatusCode() != 0:
		http.Error(w, rej.Error(), rej.StatusCode())
	default:
		http.Error(w, err.Error(), http.StatusBadRequest)
	}
}

// ListenAndServe listens on the TCP address addr and serves WebSocket
// upgrades on every path with Serve; after Shutdown it returns
// http.ErrServerClosed.
func (s *Server) ListenAndServe(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return s.Serve(ln)
}

// Serve accepts connections on ln and upgrades each with gobwas/ws's
// zero-copy upgrader, which parses the request in a pooled buffer without
// net/http's server. The hooks (origin check, Authenticate, the
// compression filter) still see an *http.Request: one is built from the
// request line and headers. A connection whose upgrade request runs past
// 64 KiB is closed. Serve returns when ln fails, or with
// http.ErrServerClosed, as net/http's servers do, once Shutdown has begun
// (at once if it had). Clients must wait for the upgrade response before
// they send frames, as RFC 6455 clients do. With
// Options.MaxConnectionsPerAddress a connection counts from its accept: one
// from an address at the cap is answered 503 there, before its request is
// read, and closed.
func (s *Server) Serve(ln net.Listener) error {
	key := s.track(ln)
	if key == nil {
		return http.ErrServerClosed
	}
	defer s.untrack(key)
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.shutting.Load() {
				return http.ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				// Out of descriptors, or a transient accept error: wait and
				// retry, as net/http does, instead of spinning or quitting.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		// Counted from the accept, before a byte is read: an address
		// past Options.MaxConnectionsPerAddress took a descriptor and a
		// goroutine for handshakeTimeout per connection that sent
		// nothing, as many as it liked.
		slot, err := s.reserveAddr(nc.RemoteAddr().String())
		if err != nil {
			s.metrics.handshakeFailures.Add(1)
			go refuseAccepted(nc, err)
			continue
		}
		s.conns.add()
		go s.upgradeRaw(nc, slot)
	}
}

// refuseAccepted answers a connection refused at its accept, before its
// request is read, with a bare 503 (refusedAnswer) and closes it. A
// client behind a shared address is told why and when to retry, as past
// the cap of the upgrade checks; one that sent its request already may
// see the connection reset after the answer, which it reads first.
//
// It runs off the accept loop, bounded by refuseAcceptedTimeout, reads
// included: on a plain socket the write does not wait (a fresh socket's
// send buffer takes the few bytes at once), but a *tls.Conn's (Serve
// over tls.NewListener) runs the TLS handshake first, which waits for the
// client: on the loop, a client that sent nothing stalled every accept
// for as long as it liked. A TLS client that does not finish its
// handshake within the bound is dropped without the answer.
func refuseAccepted(nc net.Conn, err error) {
	nc.SetDeadline(time.Now().Add(refuseAcceptedTimeout))
	nc.Write(refusedAnswer(err))
	nc.Close()
}

// refuseAcceptedTimeout bounds refuseAccepted's write.
const refuseAcceptedTimeout = 50 * time.Millisecond

// refusedAnswer is the 503 of refuseAccepted for err, errTooManyFromAddress
// or errTooManyConnections, as ServeHTTP's refuse writes it.
func refusedAnswer(err error) []byte {
	if err == errTooManyConnections {
		return answerTooMany
	}
	return answerTooManyFromAddress
}

var (
	answerTooMany            = bareAnswer(errTooManyConnections)
	answerTooManyFromAddress = bareAnswer(errTooManyFromAddress)
)

func bareAnswer(he *HTTPError) []byte {
	body := he.Message + "\n"
	return fmt.Appendf(nil, "HTTP/1.1 %d %s\r\nRetry-After: %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		he.Status, http.StatusText(he.Status), retryAfterFull, len(body), body)
}

// track registers a listener for Shutdown to close and returns the key
// that untracks it; nil when shutting down already.
func (s *Server) track(ln io.Closer) *io.Closer {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutting.Load() {
		return nil
	}
	key := &ln
	s.listeners[key] = struct{}{}
	return key
}

func (s *Server) untrack(key *io.Closer) {
	s.mu.Lock()
	delete(s.listeners, key)
	s.mu.Unlock()
}

// handshakeTimeout bounds the reading of an upgrade request on a raw
// listener, so a client that sends half a request does not hold a goroutine.
const handshakeTimeout = 10 * time.Second

// upgradeRaw upgrades and serves a connection of Serve's; slot is its
// reservation by address, nil when none, which it ends unless a Peer
// keeps it.
func (s *Server) upgradeRaw(nc net.Conn, slot *addrSlot) {
	defer slot.abandon()
	nc.SetDeadline(time.Now().Add(handshakeTimeout))
	// Shutdown drops it when its ctx ends, as the other carriers'
	// handshakes: left, it outlived Shutdown by up to handshakeTimeout.
	h := &handshakeConn{nc}
	s.handshakes.add(h)
	up, err := s.upgradeConn(nc, slot)
	s.handshakes.remove(h)
	if err != nil {
		s.metrics.handshakeFailures.Add(1)
		nc.Close()
		s.conns.done()
		return
	}
	nc.SetDeadline(time.Time{})
	s.serveConn(nc, up, up.early)
}

// serveConn starts serving one WebSocket connection. The caller did
// conns.add; the connection's last goroutine calls conns.done.
func (s *Server) serveConn(nc net.Conn, up *upgrade, early []byte) {
	s.serveLink(newWSConn(nc, false, s.opts.Limits, up.pmd, early), up)
}

// serveLink starts serving one connection on any carrier. The caller did
// conns.add; the connection's last goroutine calls conns.done.
func (s *Server) serveLink(l link, up *upgrade) {
	p := s.newPeer(l, up)
	if err := s.register(p, up.slot); err != nil {
		if err == errTooManyConnections || err == errTooManyFromAddress {
			s.metrics.handshakeFailures.Add(1)
		}
		l.refuse(carrierRefusal(err))
		s.conns.done()
		return
	}
	if s.opts.OnConnect != nil && !s.runHook("OnConnect", func() { s.opts.OnConnect(p) }) {
		// What the hook set up for the connection is unknown: end it.
		ce := &CloseError{Code: wsframe.CloseInternalError, Reason: "HP_ERR_INTERNAL"}
		// The Peer ends as a started one does (start): the hook may have
		// handed it to goroutines that wait on its Context, Ask, or
		// Join it to rooms, which must not keep it for good.
		p.closed.Store(true)
		p.cancel()
		p.failAsks(ce)
		s.unregister(p, ce)
		l.refuse(ce.Code, ce.Reason)
		s.conns.done()
		return
	}
	p.start(func(err error) {
		s.unregister(p, err)
		if s.opts.OnDisconnect != nil {
			s.runHook("OnDisconnect", func() { s.opts.OnDisconnect(p, err) })
		}
		s.conns.done()
	})
}

// runHook runs a connection hook and reports whether it returned: a panic
// is logged and counted instead of ending the process, as a handler's is.
func (s *Server) runHook(name string, hook func()) (ok bool) {
	defer func() {
		if v := recover(); v != nil {
			s.metrics.panics.Add(1)
			s.opts.Logger.Error("hotpath: hook panicked", "hook", name, "panic", v, "stack", string(debug.Stack()))
			ok = false
		}
	}()
	hook()
	return true
}

// register counts p among the open connections, or refuses it while
// shutting down, at Options.MaxConnections or at
// Options.MaxConnectionsPerAddress. The upgrade checks refused most of
// those already, with each carrier's refusal (capacityRefusal,
// reserveAddr); this one counts for certain, when connections that passed
// the checks together would go past MaxConnections. slot is the
// connection's reservation by address, which p keeps from here, its count
// ended by unregister. A connection without one for its address (its
// address changed during the handshake, a QUIC migration; or the slot
// was abandoned as its QUIC connection ended) is counted here afresh,
// held to the cap: unregister ends the count of p's address, which must
// be the one counted.
func (s *Server) register(p *Peer, slot *addrSlot) error {
	key, counted := s.addrKeyOf(p.remoteAddr)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutting.Load() {
		return errShutting
	}
	if limit := s.opts.MaxConnections; limit > 0 && len(s.peers) >= limit {
		s.countRefusal(errTooManyConnections)
		return errTooManyConnections
	}
	var count *addrSlot
	if counted {
		if slot.keep(key) {
			count = slot
		} else {
			if s.byAddr[key] >= s.opts.MaxConnectionsPerAddress {
				s.countRefusal(errTooManyFromAddress)
				return errTooManyFromAddress
			}
			s.byAddr[key]++
			count = &addrSlot{s: s, key: key}
			count.state.Store(slotKept)
		}
	}
	s.nextID++
	p.id = s.nextID
	s.peers[p] = count
	s.metrics.connections.Add(1)
	s.metrics.connectionsTotal.Add(1)
	p.keepaliveHandle.Store(uint64(s.keepalive.Arm(time.Now().Add(s.opts.KeepaliveInterval), p)))
	return nil
}

// capacityRefusal is errTooManyConnections, counted, when
// Options.MaxConnections connections are open, else nil. The cap by
// address was checked when the connection's address was first known
// (reserveAddr).
func (s *Server) capacityRefusal() error {
	limit := s.opts.MaxConnections
	if limit <= 0 {
		return nil
	}
	s.mu.Lock()
	full := len(s.peers) >= limit
	s.mu.Unlock()
	if !full {
		return nil
	}
	s.countRefusal(errTooManyConnections)
	return errTooManyConnections
}

func (s *Server) countRefusal(err error) {
	switch err {
	case errTooManyConnections:
		s.metrics.refusedConnections.Add(1)
	case errTooManyFromAddress:
		s.metrics.refusedPerAddress.Add(1)
	}
}

// addrSlot is a connection's place in the count of
// Options.MaxConnectionsPerAddress, taken (reserveAddr) as soon as the
// server knows its address: at Serve's accept, at a QUIC connection's or
// an SCTP association's accept, at ServeHTTP's handler, a WebTransport
// CONNECT or WebRTC signalling request. Its handshake then counts as the
// open connection does: one address could otherwise hold any number of
// handshakes in progress (each a descriptor and a goroutine for
// handshakeTimeout), or fill the pending bounds every client shares
// (MaxPendingQUIC, MaxPendingSCTP, WebRTC's MaxPending).
//
// It ends exactly once: kept by the connection's Peer (register), whose
// count unregister ends, or abandoned by whichever path gives up the
// handshake. A slot that ended twice would free another connection's
// place; one that never ended would keep its address out for good. So
// the path that holds it abandons it in a defer, which does nothing once
// a Peer has kept it, and both are safe to call in any order, any number
// of times, on a nil slot (no cap, or an address with no IP) too.
type addrSlot struct {
	s     *Server
	key   netip.Prefix
	state atomic.Uint32 // slotPending, then slotKept or slotAbandoned
	// conn is the HTTP/3 connection the slot counts for, which takes
	// its count over when it is the connection's last (endCount); nil
	// on the other carriers. Guarded by s.mu.
	conn *h3Count
}

const (
	slotPending uint32 = iota
	slotKept
	slotAbandoned
)

// reserveAddr takes a slot for a connection from remote, or refuses it,
// counted, at Options.MaxConnectionsPerAddress: with errTooManyFromAddress,
// or with errTooManyConnections when MaxConnections is reached too, so
// that one refusal is counted once, as MaxConnections'. It returns a nil
// slot without the cap, or for an address with no IP.
func (s *Server) reserveAddr(remote string) (*addrSlot, error) {
	return s.reserveAddrFor(remote, nil)
}

// reserveAddrFor is reserveAddr for a request on the HTTP/3 connection
// c (nil for none): it takes over the connection's own slot when the
// connection holds one, which is never refused, and otherwise reserves
// a slot that counts for the connection until it ends.
func (s *Server) reserveAddrFor(remote string, c *h3Count) (*addrSlot, error) {
	slot, err := s.takeAddrSlot(remote, c)
	if err != nil {
		s.countRefusal(err)
	}
	return slot, err
}

// takeAddrSlot is reserveAddrFor without the count of its refusal, for a
// caller that counts it itself (ServeSCTP, once per client).
func (s *Server) takeAddrSlot(remote string, c *h3Count) (*addrSlot, error) {
	key, counted := s.addrKeyOf(remote)
	if !counted {
		return nil, nil
	}
	s.mu.Lock()
	if c != nil && c.own != nil {
		own := c.own
		c.own = nil
		s.mu.Unlock()
		return own, nil
	}
	if err := s.addrRefusal(key); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	s.byAddr[key]++
	slot := &addrSlot{s: s, key: key}
	if c != nil && !c.closed {
		slot.conn = c
		c.live++
	}
	s.mu.Unlock()
	return slot, nil
}

// addrRefusal is the refusal of one more connection under key, nil below
// Options.MaxConnectionsPerAddress: errTooManyFromAddress, or
// errTooManyConnections when MaxConnections is reached too. s.mu is held.
func (s *Server) addrRefusal(key netip.Prefix) error {
	if s.byAddr[key] < s.opts.MaxConnectionsPerAddress {
		return nil
	}
	if limit := s.opts.MaxConnections; limit > 0 && len(s.peers) >= limit {
		return errTooManyConnections
	}
	return errTooManyFromAddress
}

// addrAtCap is reserveAddr's refusal for a connection from addr, not
// counted and without a reservation: nil when addr's address is below
// Options.MaxConnectionsPerAddress (or not counted). ListenQUIC asks it
// before any TLS work; the reservation still comes at the accept.
func (s *Server) addrAtCap(addr net.Addr) error {
	if addr == nil {
		return nil
	}
	key, counted := s.addrKeyOf(addr.String())
	if !counted {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addrRefusal(key)
}

// keep hands the slot to the connection's Peer, and reports whether it
// did: false for a nil slot, one abandoned already, or one for another
// key than the Peer's.
func (a *addrSlot) keep(key netip.Prefix) bool {
	return a != nil && a.key == key && a.state.CompareAndSwap(slotPending, slotKept)
}

// abandon ends the slot's count unless a Peer kept it or it ended already.
func (a *addrSlot) abandon() {
	if a != nil && a.state.CompareAndSwap(slotPending, slotAbandoned) {
		a.s.mu.Lock()
		a.s.endCount(a)
		a.s.mu.Unlock()
	}
}

// endCount ends the count of a, which has just ended (abandoned, or its
// Peer unregistered); s.mu is held. The last slot of an HTTP/3
// connection still open hands its count to the connection instead, as
// the connection's own slot: the count goes on, unbroken (h3Count).
func (s *Server) endCount(a *addrSlot) {
	if a == nil {
		return
	}
	if c := a.conn; c != nil {
		if c.own == a {
			c.own = nil
		}
		if c.live == 1 && !c.closed {
			c.own = &addrSlot{s: s, key: a.key, conn: c}
			return
		}
		c.live--
	}
	s.uncountAddr(a.key)
}

// uncountAddr takes one connection off key's count; s.mu is held.
func (s *Server) uncountAddr(key netip.Prefix) {
	if n := s.byAddr[key]; n > 1 {
		s.byAddr[key] = n - 1
	} else {
		delete(s.byAddr, key)
	}
}

// addrKeyOf is addrKey(remote) when Options.MaxConnectionsPerAddress is
// set; without it no connection is counted by address.
func (s *Server) addrKeyOf(remote string) (netip.Prefix, bool) {
	if s.opts.MaxConnectionsPerAddress <= 0 {
		return netip.Prefix{}, false
	}
	return addrKey(remote)
}

// addrKey is the key under which Options.MaxConnectionsPerAddress counts
// a connection from remote, a RemoteAddr ("host:port", or a bare IP):
// an IPv4 address whole, an IPv4-mapped IPv6 address as its IPv4 (a
// dual-stack listener's IPv4 clients), an IPv6 address by its /64: the
// subnet of an interface (RFC 4291 §2.5.4), in which a host may take any
// number of addresses (privacy addresses do, RFC 8981). ok is false when
// remote names no IP (a Unix socket, net.Pipe).
func addrKey(remote string) (key netip.Prefix, ok bool) {
	addr, err := netip.ParseAddr(remote)
	if err != nil {
		ap, err := netip.ParseAddrPort(remote)
		if err != nil {
			return netip.Prefix{}, false
		}
		addr = ap.Addr()
	}
	addr = addr.Unmap().WithZone("")
	bits := 32
	if addr.Is6() {
		bits = 64
	}
	key, err = addr.Prefix(bits)
	return key, err == nil
}

// tooManyConnectionsReason is the close reason of a connection refused
// past Options.MaxConnections on a carrier without an HTTP response, or
// one that passed the upgrade checks together with others and would have
// gone past it; tooManyFromAddressReason is the same past
// Options.MaxConnectionsPerAddress.
const (
	tooManyConnectionsReason = "HP_ERR_TOO_MANY_CONNECTIONS"
	tooManyFromAddressReason = "HP_ERR_TOO_MANY_CONNECTIONS_FROM_ADDRESS"
)

// retryAfterFull is the Retry-After, in seconds, of a 503 past
// Options.MaxConnections: a slot frees when a connection ends, which
// takes longer than a handshake does (WebRTC's MaxPending says 1).
const retryAfterFull = "5"

// unregister removes an ended connection from the server and its counts.
// Its close is counted first: a connection no longer among the Peers or
// the open Connections has its close code in Closes, so a scrape sees it
// in one or the other (never Connections + Closes short of
// ConnectionsTotal), and whoever waits for the open count to fall reads
// the close it made. It was counted last, and a snapshot taken in between
// missed it.
func (s *Server) unregister(p *Peer, err error) {
	s.keepalive.Cancel(scheduler.Handle(p.keepaliveHandle.Load()))
	s.rooms.leaveAll(p)
	s.metrics.countClose(CloseStatus(err))
	s.mu.Lock()
	if count, ok := s.peers[p]; ok {
		delete(s.peers, p)
		s.endCount(count)
	}
	s.mu.Unlock()
	s.metrics.connections.Add(-1)
}

// Peers returns the number of open connections.
func (s *Server) Peers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.peers)
}

// checkKeepalive runs on the keepalive scheduler's goroutine with every
// connection whose check came due. A connection silent for IdleTimeout is
// dropped; one silent for KeepaliveInterval is pinged; the others are
// re-armed for when their silence would reach the interval.
func (s *Server) checkKeepalive(batch []*Peer) {
	now := time.Now()
	for _, p := range batch {
		if p.closed.Load() {
			continue
		}
		act, next := p.link.liveness().check(now, s.opts.KeepaliveInterval, s.opts.IdleTimeout)
		switch act {
		case keepGiveUp:
			s.metrics.idleTimeouts.Add(1)
			p.closeWith(wsframe.CloseGoingAway, idleTimeoutReason)
			continue
		case keepPing:
			p.link.ping()
		}
		p.keepaliveHandle.Store(uint64(s.keepalive.Arm(next, p)))
	}
}

// admitAsync counts an Async call or a binary stream, which Shutdown
// waits for, unless Shutdown has begun. Counted first, then checked: a
// Shutdown that found no call running had set shutting before it looked,
// so it cannot have missed this one. Checked first, a call admitted just
// as Shutdown looked ran after its connection had closed, its answer lost.
func (s *Server) admitAsync() bool {
	s.asyncCalls.add()
	if hook := testHookAdmitAsync.Load(); hook != nil {
		(*hook)()
	}
	if s.shutting.Load() {
		s.asyncCalls.done()
		return false
	}
	return true
}

// testHookAdmitAsync, when set, runs in admitAsync between the count and
// the check.
var testHookAdmitAsync atomic.Pointer[func()]

// Shutdown stops the server gracefully: it stops accepting connections and
// calls (new calls are answered ErrUnavailable), lets the calls in flight
// finish, closes every connection with 1001 (going away) after its answers,
// and waits for the connections to end. The server's asks (Peer.Ask),
// which wait on clients that may never answer, are not waited for: those
// pending fail at once, and those made during Shutdown fail unsent, with
// ErrCanceled joined with that 1001 close, as at the end of their
// connection, so that a handler asking a silent client does not hold
// Shutdown until AskTimeout. Binary streams, which may last as
// long as their connection, are not let finish: their handlers' contexts
// are canceled and the streams reset with Unavailable (9) at once (a
// handler's Read or Write then returns ErrClosed), and Shutdown waits for
// the handlers to return, as for the calls in flight (a handler that
// heeds neither holds it until ctx ends). A handshake in progress
// (Serve's upgrade request, the control stream of a QUIC connection or a
// WebTransport session, SCTP's, WebRTC's) is refused when it completes
// (HTTP 503, or close 1001 HP_SHUTTING_DOWN where there is no HTTP), and
// dropped when it has not completed within handshakeShutdownGrace (1 s):
// a client that stalls its handshake does not hold Shutdown for
// handshakeTimeout (10 s). When ctx ends first, the remaining connections
// and handshakes are dropped and Shutdown returns ctx's error,
// within shutdownDropGrace (1 s) even when a handler or hook of a dropped
// connection does not return (one that called Shutdown, say). Shutdown
// may be called from handlers and hooks, and more than once.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.shutting.Store(true)
	s.stop()
	for ln := range s.listeners {
		(*ln).Close()
	}
	s.mu.Unlock()
	// The asks awaiting a client's answer fail now, as at the end of
	// their connection, which follows: an Async handler waiting on a
	// client that never answers held Shutdown until AskTimeout (30 s by
	// default) or ctx, whatever else was done. Asks made from now on
	// fail unsent (Ask looks at shutting under asksMu, which failAsks
	// takes after it was set).
	for _, p := range s.snapshotPeers() {
		p.failAsks(errShuttingDown)
	}
	cutHandshakes := time.AfterFunc(handshakeShutdownGrace, s.handshakes.closeAll)
	defer cutHandshakes.Stop()

	err := waitCtx(ctx, s.asyncCalls.idle())
	for _, p := range s.snapshotPeers() {
		p.closeWith(errShuttingDown.Code, errShuttingDown.Reason)
	}
	if err == nil {
		err = waitCtx(ctx, s.conns.idle())
	}
	if err != nil {
		for _, p := range s.snapshotPeers() {
			p.link.abort()
		}
		s.handshakes.closeAll()
		// Dropped connections end at once, but for one whose handler or
		// hook does not return: a synchronous handler or OnDisconnect
		// that called Shutdown itself (it waits for its own connection),
		// or one that ignores its ctx. Those are not waited for long.
		t := time.NewTimer(shutdownDropGrace)
		select {
		case <-s.conns.idle():
		case <-t.C:
		}
		t.Stop()
	}
	s.mu.Lock()
	wt := s.wt
	s.mu.Unlock()
	if wt != nil {
		wt.Close()
	}
	s.keepalive.Stop()
	s.timeouts.Stop()
	return err
}

// errShuttingDown is the close of every connection at Shutdown.
var errShuttingDown = &CloseError{Code: wsframe.CloseGoingAway, Reason: "HP_SHUTTING_DOWN"}

// shutdownDropGrace is how long a Shutdown whose ctx ended waits for the
// connections it dropped to end.
const shutdownDropGrace = time.Second

// handshakeShutdownGrace is how long Shutdown lets a handshake in progress
// complete (to be refused, which tells its client why) before it drops the
// handshake's connection. A handshake completes in a few round
// trips; one that takes longer has stalled, and would otherwise hold
// Shutdown until its handshakeTimeout.
const handshakeShutdownGrace = time.Second

func (s *Server) snapshotPeers() []*Peer {
	s.mu.Lock()
	defer s.mu.Unlock()
	ps := make([]*Peer, 0, len(s.peers))
	for p := range s.peers {
		ps = append(ps, p)
	}
	return ps
}

// handshakeConn holds a connection accepted from a caller's listener in
// a closerSet while it shakes hands, by pointer: the set's map needs
// comparable keys, and a listener may return a net.Conn that is not (a
// struct value holding a func), which as a key panicked the process.
type handshakeConn struct{ net.Conn }

// closerSet is a set of things to close at once, safe for concurrent use.
// Once closeAll has run, what is added is closed at once: a handshake's
// goroutine that registers after Shutdown's cut (it was started before
// the listener closed and scheduled late) would otherwise be missed by
// it and last until handshakeTimeout.
type closerSet struct {
	mu     sync.Mutex
	m      map[io.Closer]struct{}
	closed bool
}

func (cs *closerSet) add(c io.Closer) {
	cs.mu.Lock()
	if cs.closed {
		cs.mu.Unlock()
		c.Close()
		return
	}
	if cs.m == nil {
		cs.m = map[io.Closer]struct{}{}
	}
	cs.m[c] = struct{}{}
	cs.mu.Unlock()
}

func (cs *closerSet) remove(c io.Closer) {
	cs.mu.Lock()
	delete(cs.m, c)
	cs.mu.Unlock()
}

// closeAll closes every member, outside the lock: a member's Close may
// lead to its own remove.
func (cs *closerSet) closeAll() {
	cs.mu.Lock()
	cs.closed = true
	all := make([]io.Closer, 0, len(cs.m))
	for c := range cs.m {
		all = append(all, c)
	}
	cs.mu.Unlock()
	for _, c := range all {
		c.Close()
	}
}

// cancelCloser cancels a context when closed: a handshake that waits on
// the context, in a closerSet.
type cancelCloser struct{ cancel context.CancelFunc }

func (c *cancelCloser) Close() error {
	c.cancel()
	return nil
}

// waitCtx waits for done and returns nil, or ctx's error if it ends first.
func waitCtx(ctx context.Context, done <-chan struct{}) error {
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("compat: shutdown: %w", ctx.Err())
	}
}

// pendingHandshakes bounds the handshakes in progress on one SCTP listener
// (Options.MaxPendingSCTP), a server's QUIC listeners (MaxPendingQUIC) or
// a WebRTC endpoint (WebRTCOptions.MaxPending).
// A full table refused every newcomer until a slot freed, and an abandoned
// handshake frees its slot only at handshakeTimeout: a peer that began
// max handshakes every 10 s (an SCTP INIT or DTLS ClientHello each, or an
// offer) kept every other client of the carrier out. So once its oldest
// handshake has been pending for staleHandshake, a newcomer takes its slot
// and the oldest is aborted; a full table of younger ones still refuses
// (a burst of real clients is not turned over before any can finish).
type pendingHandshakes struct {
	mu    sync.Mutex
	max   int
	queue []*pendingHandshake // oldest first
	// now is the table's clock, read under mu; time.Now when nil. A test
	// stops it, so that which handshakes are stale is up to the test and
	// not to how long its handshakes take on a loaded machine.
	now func() time.Time
}

type pendingHandshake struct {
	began time.Time
	abort func()
}

// staleHandshake is how long a handshake keeps its slot against
// newcomers: well over the few round trips one takes on a working path,
// WebRTC's ICE, DTLS and SCTP included. A flood then has to begin max
// handshakes per staleHandshake, not per handshakeTimeout, to keep others
// out.
const staleHandshake = 2 * time.Second

// full reports whether begin would refuse a handshake now: every slot is
// held by one younger than staleHandshake. A carrier that can refuse more
// cheaply before its own handshake than after (QUIC, before TLS) asks it
// first; begin still decides.
func (p *pendingHandshakes) full() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue) >= p.max && p.clock().Sub(p.queue[0].began) < staleHandshake
}

// clock is the time now by the table's clock; p.mu is held.
func (p *pendingHandshakes) clock() time.Time {
	if p.now != nil {
		return p.now()
	}
	return time.Now()
}

// begin takes a slot for a handshake that abort cuts short, and returns
// the end to call once it has ended, however it ended; ok is false when
// every slot is held by a handshake younger than staleHandshake. The
// handshake aborted to make room is the oldest, once it is stale.
func (p *pendingHandshakes) begin(abort func()) (end func(), ok bool) {
	p.mu.Lock()
	h := &pendingHandshake{began: p.clock(), abort: abort}
	var evicted *pendingHandshake
	if len(p.queue) >= p.max {
		if h.began.Sub(p.queue[0].began) < staleHandshake {
			p.mu.Unlock()
			return nil, false
		}
		evicted = p.queue[0]
		p.queue = slices.Delete(p.queue, 0, 1)
	}
	p.queue = append(p.queue, h)
	p.mu.Unlock()
	if evicted != nil {
		evicted.abort()
	}
	return func() {
		p.mu.Lock()
		if i := slices.Index(p.queue, h); i >= 0 {
			p.queue = slices.Delete(p.queue, i, i+1)
		}
		p.mu.Unlock()
	}, true
}
