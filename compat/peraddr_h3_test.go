package compat

import (
	"context"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/webtransport-go"
)

// h3Client is an HTTP/3 connection of a test's, for WebTransport
// sessions one after another.
type h3Client struct {
	qc *quic.Conn
	cc *webtransport.ClientConn
}

// dialH3 opens an HTTP/3 connection to the QUIC listener at addr
// (host:port) and its WebTransport client, configured by conf (nil for
// none: without WebTransport's flow control); the test's end closes it.
func dialH3(t *testing.T, e *carrierEnv, addr string, conf *webtransport.Config) (*h3Client, error) {
	t.Helper()
	tc := e.cert.ClientTLSConfig()
	tc.NextProtos = []string{http3.NextProtoH3}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	qc, err := quic.DialAddrEarly(ctx, addr, tc, QUICConfig(0))
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { qc.CloseWithError(0, "") })
	cc, err := (&webtransport.Transport{Config: conf}).NewClientConn(qc)
	if err != nil {
		t.Fatal(err)
	}
	return &h3Client{qc: qc, cc: cc}, nil
}

// session opens a WebTransport session on the connection with header h
// (nil for none): the session, or the status of its refusal, or the
// dial's error.
func (c *h3Client) session(u string, h http.Header) (*webtransport.Session, int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rsp, sess, err := c.cc.Dial(ctx, u, h)
	if err != nil {
		if rsp != nil && rsp.StatusCode != 0 {
			return nil, rsp.StatusCode, nil
		}
		return nil, 0, err
	}
	return sess, http.StatusOK, nil
}

// open opens a session whose control stream comes: the server has a
// Peer for it once the server's Peers reach peers.
func (c *h3Client) open(t *testing.T, e *carrierEnv, u string, peers int) *webtransport.Session {
	t.Helper()
	sess, status, err := c.session(u, nil)
	if sess == nil {
		t.Fatalf("a session: %d %v", status, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	str, err := sess.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	str.Write(nil) // sends the stream's header: the server accepts it
	waitUntil(t, "the session's Peer registered", func() bool { return e.srv.Peers() == peers })
	return sess
}

// refuseHeader makes h3Gate.authenticate refuse a session; blockHeader
// makes it wait for the gate first.
const (
	refuseHeader = "X-Test-Refuse"
	blockHeader  = "X-Test-Block"
)

// h3Gate holds the sessions whose Authenticate waits (blockHeader): each
// sends on entered, then waits for release.
type h3Gate struct {
	entered chan struct{}
	release chan struct{}
}

func newH3Gate() *h3Gate {
	return &h3Gate{entered: make(chan struct{}, 4), release: make(chan struct{}, 4)}
}

func (g *h3Gate) authenticate(r *http.Request) (any, error) {
	if r.Header.Get(blockHeader) != "" {
		g.entered <- struct{}{}
		<-g.release
	}
	if r.Header.Get(refuseHeader) != "" {
		return nil, &HTTPError{Status: http.StatusForbidden, Message: "no"}
	}
	return nil, nil
}

// waitEntered waits for a blocked Authenticate to begin.
func (g *h3Gate) waitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second): // a bound on a hang
		t.Fatal("Authenticate not called within 10 s")
	}
}

// An HTTP/3 connection counts against its address for the whole of its
// life, one while it has no WebTransport session. Its sessions held its
// count: once they had failed (no control stream) or ended, it counted
// nothing until webTransportIdle closed it, and one address could hold
// any number of HTTP/3 connections (a QUIC connection each, with its
// buffers and goroutines) past MaxConnectionsPerAddress, opening a
// session on each and closing it. Here 3 connections from 127.0.0.2
// whose sessions were refused by Authenticate, failed and ended count 3,
// the fourth is refused while they are open, another address still gets
// in, and closing them empties the count.
func TestMaxConnectionsPerAddressH3WithoutSession(t *testing.T) {
	const limit = 3
	gate := newH3Gate()
	e := newCarrierEnv(t, Options{MaxConnectionsPerAddress: limit, Authenticate: gate.authenticate})
	u := e.urls[CarrierWebTransport]
	relay := hostOf(viaRelay(t, u, peerAddr))
	count := func() int { n, _ := e.srv.addrCount(peerAddr); return n }
	var conns []*h3Client
	for range limit {
		c, err := dialH3(t, e, relay, nil)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	waitUntil(t, "the connections counted", func() bool { return count() == limit })
	before := e.srv.Metrics()

	// Refused by Authenticate.
	if sess, status, err := conns[0].session(u, http.Header{refuseHeader: {"1"}}); sess != nil || status != http.StatusForbidden {
		t.Fatalf("a session Authenticate refuses: %d %v, want 403", status, err)
	}
	// Failed: its control stream never comes.
	sess, status, err := conns[1].session(u, nil)
	if sess == nil {
		t.Fatalf("a session: %d %v", status, err)
	}
	waitUntil(t, "the session's handshake in progress", func() bool { return handshakesInProgress(e.srv) == 1 })
	sess.CloseWithError(0, "")
	waitUntil(t, "the session's handshake failed", func() bool {
		return handshakesInProgress(e.srv) == 0 && e.srv.Metrics().HandshakeFailures > before.HandshakeFailures
	})
	// Ended: a Peer, closed.
	conns[2].open(t, e, u, 1).CloseWithError(0, "")
	waitUntil(t, "the session's Peer gone", func() bool { return e.srv.Peers() == 0 })

	// (a) Each connection counts, without a session.
	waitUntil(t, "each connection counted without its session", func() bool { return count() == limit })
	if n := count(); n != limit {
		t.Fatalf("%d counted from 127.0.0.2, want %d: each HTTP/3 connection once its sessions are gone", n, limit)
	}
	// (b) One more from the address is refused while they are open.
	before = e.srv.Metrics()
	if extra, err := dialH3(t, e, relay, nil); !quicRefused(err) {
		t.Fatalf("connection %d from 127.0.0.2, MaxConnectionsPerAddress %d, the others without a session: %v (connected %v), want CONNECTION_REFUSED", limit+1, limit, err, extra != nil)
	}
	if m := e.srv.Metrics(); m.RefusedPerAddress != before.RefusedPerAddress+1 {
		t.Errorf("RefusedPerAddress +%d, want +1", m.RefusedPerAddress-before.RefusedPerAddress)
	}
	// (c) Another address still gets in.
	local := e.dial(t, CarrierWebTransport, ClientOptions{})
	var out echoReq
	if err := local.Call(context.Background(), "echo/say", echoReq{Text: "x"}, &out); err != nil {
		t.Fatal(err)
	}
	local.Close()
	for i, c := range conns {
		if err := c.qc.Context().Err(); err != nil {
			t.Errorf("connection %d closed: %v; want it open, counted", i, context.Cause(c.qc.Context()))
		}
	}
	// (d) Closed, they leave no count.
	for _, c := range conns {
		c.qc.CloseWithError(0, "")
	}
	noAddressCounted(t, e.srv, "after the HTTP/3 connections closed")
}

// A client that opens its sessions one after another on one HTTP/3
// connection, as a browser pooling them does, keeps its connection and is
// never refused for its own count: the connection counts one between its
// sessions, which its next session takes over instead of counting again,
// and a request beside a session counts one more while it lasts. Closed,
// the connection leaves no count. (The client has WebTransport's flow
// control on, without which a request beside a session is refused before
// Authenticate: TestWebTransportSecondSessionWithoutFlowControl.)
func TestMaxConnectionsPerAddressH3PooledSessions(t *testing.T) {
	gate := newH3Gate()
	e := newCarrierEnv(t, Options{MaxConnectionsPerAddress: 2, Authenticate: gate.authenticate})
	u := e.urls[CarrierWebTransport]
	c, err := dialH3(t, e, hostOf(u), pooledConfig)
	if err != nil {
		t.Fatal(err)
	}
	counted := func(what string, want int) {
		t.Helper()
		waitUntil(t, what, func() bool { n, _ := e.srv.addrCount(loopback); return n == want })
	}
	counted("the connection counted", 1)
	first := c.open(t, e, u, 1)
	counted("the first session, on the connection's count", 1)

	// A request beside the session counts for itself while Authenticate
	// holds it, and not once refused.
	type dialed struct {
		sess   *webtransport.Session
		status int
		err    error
	}
	refused := make(chan dialed, 1)
	go func() {
		sess, status, err := c.session(u, http.Header{blockHeader: {"1"}, refuseHeader: {"1"}})
		refused <- dialed{sess, status, err}
	}()
	gate.waitEntered(t)
	counted("a request beside the session counted", 2)
	gate.release <- struct{}{}
	if d := <-refused; d.status != http.StatusForbidden {
		t.Fatalf("the request refused: %d %v, want 403", d.status, d.err)
	}
	counted("the refused request uncounted", 1)

	first.CloseWithError(0, "")
	waitUntil(t, "the first session's Peer gone", func() bool { return e.srv.Peers() == 0 })
	counted("the connection counted once its session ended", 1)

	// The next session takes the connection's count over.
	opened := make(chan dialed, 1)
	go func() {
		sess, status, err := c.session(u, http.Header{blockHeader: {"1"}})
		opened <- dialed{sess, status, err}
	}()
	gate.waitEntered(t)
	counted("the next session's request, on the connection's count", 1)
	gate.release <- struct{}{}
	d := <-opened
	next := d.sess
	if next == nil {
		t.Fatalf("the next session: %d %v", d.status, d.err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	str, err := next.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	str.Write(nil)
	waitUntil(t, "the next session's Peer registered", func() bool { return e.srv.Peers() == 1 })
	counted("the next session, on the connection's count", 1)
	next.CloseWithError(0, "")
	waitUntil(t, "the next session's Peer gone", func() bool { return e.srv.Peers() == 0 })
	counted("the connection counted once its sessions ended", 1)
	if err := c.qc.Context().Err(); err != nil {
		t.Fatalf("the HTTP/3 connection closed: %v; want it kept for its next session", context.Cause(c.qc.Context()))
	}
	c.qc.CloseWithError(0, "")
	noAddressCounted(t, e.srv, "after the HTTP/3 connection closed")
}

// An HTTP/3 connection's count is exactly its sessions' while it has
// some, and one while it has none, each slot ending once: two sessions'
// Peers count two, the connection takes the last one's count over as it
// ends, and its close ends that; a slot that outlives the connection
// ends its own count.
func TestH3CountEndsEachSlotOnce(t *testing.T) {
	s, err := NewServer(Options{Router: testRouter(), MaxConnectionsPerAddress: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	const remote = "127.0.0.2:1000"
	addr := netip.MustParseAddr("127.0.0.2")
	check := func(what string, want int) {
		t.Helper()
		if n, keys := s.addrCount(addr); n != want || (want == 0) != (keys == 0) {
			t.Errorf("%s: %d counted (%d keys), want %d", what, n, keys, want)
		}
	}
	accepted, err := s.reserveAddr(remote)
	if err != nil {
		t.Fatal(err)
	}
	c := s.newH3Count(accepted)
	check("the connection", 1)
	a, err := s.reserveAddrFor(remote, c)
	if err != nil || a != accepted {
		t.Fatalf("the first session's slot %p (%v), want the connection's %p", a, err, accepted)
	}
	b, err := s.reserveAddrFor(remote, c)
	if err != nil {
		t.Fatal(err)
	}
	check("two sessions", 2)
	pa := s.newPeer(nil, &upgrade{remoteAddr: remote})
	pb := s.newPeer(nil, &upgrade{remoteAddr: remote})
	if err := s.register(pa, a); err != nil {
		t.Fatal(err)
	}
	if err := s.register(pb, b); err != nil {
		t.Fatal(err)
	}
	a.abandon() // kept: nothing
	b.abandon()
	check("two Peers", 2)
	s.unregister(pa, nil)
	check("one Peer left", 1)
	s.unregister(pb, nil)
	s.unregister(pb, nil) // once only
	check("both ended: the connection's own", 1)

	// A request that takes the connection's count over and fails gives it
	// back; a request beside it counts for itself, and ends its count.
	r1, _ := s.reserveAddrFor(remote, c)
	r2, _ := s.reserveAddrFor(remote, c)
	check("two requests", 2)
	r1.abandon()
	check("one request left", 1)
	r2.abandon()
	r2.abandon()
	check("none: the connection's own", 1)

	// A Peer outlives its connection's close: each count ends once.
	r3, _ := s.reserveAddrFor(remote, c)
	p3 := s.newPeer(nil, &upgrade{remoteAddr: remote})
	if err := s.register(p3, r3); err != nil {
		t.Fatal(err)
	}
	c.close()
	accepted.abandon() // ServeQUIC's, as the connection ends: ended already
	check("the connection closed, its Peer open", 1)
	s.unregister(p3, nil)
	check("all ended", 0)
	late, err := s.reserveAddrFor(remote, c)
	if err != nil {
		t.Fatal(err)
	}
	check("a request on the closed connection", 1)
	late.abandon()
	check("all ended again", 0)
}
