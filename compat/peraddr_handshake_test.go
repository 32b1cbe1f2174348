package compat

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotpath-go/hotpath/wsframe"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/webtransport-go"
)

// loopback is the address the tests' clients connect from, but through
// the relays of peerAddr.
var loopback = netip.MustParseAddr("127.0.0.1")

// noAddressCounted waits until the server counts no address: every
// reservation by address has ended.
func noAddressCounted(t *testing.T, s *Server, after string) {
	t.Helper()
	waitUntil(t, "no address counted "+after, func() bool { _, keys := s.addrCount(loopback); return keys == 0 })
}

// hostOf is the host:port of a carrier URL.
func hostOf(u string) string {
	_, rest, _ := strings.Cut(u, "://")
	host, _, _ := strings.Cut(rest, "/")
	return host
}

// Serve counts a connection by its address from its accept, before it
// sends a byte: connections that send nothing hold the address's slots,
// and the one past them is answered 503 and closed at once, well before
// handshakeTimeout, counted as a refusal, while another address still
// connects; closing the silent ones frees their slots. Each silent one
// held a descriptor and a goroutine for handshakeTimeout uncounted, as
// many as one address liked.
func TestMaxConnectionsPerAddressCountsSilentTCP(t *testing.T) {
	const limit = 3
	e := newCarrierEnv(t, Options{MaxConnectionsPerAddress: limit})
	addr := hostOf(e.urls[CarrierWebSocket])
	d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(peerAddr, 0)), Timeout: 5 * time.Second}
	var silent []net.Conn
	for range limit {
		nc, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		silent = append(silent, nc)
	}
	waitUntil(t, "the silent connections counted", func() bool { n, _ := e.srv.addrCount(peerAddr); return n == limit })
	before := e.srv.Metrics()

	nc, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetReadDeadline(time.Now().Add(5 * time.Second)) // a bound on a hang
	rsp, err := http.ReadResponse(bufio.NewReader(nc), nil)
	if err != nil {
		t.Fatalf("connection %d from one address, silent, MaxConnectionsPerAddress %d: %v, want a 503 at once", limit+1, limit, err)
	}
	body, _ := io.ReadAll(rsp.Body)
	if rsp.StatusCode != http.StatusServiceUnavailable || rsp.Header.Get("Retry-After") != retryAfterFull || !strings.Contains(string(body), errTooManyFromAddress.Message) {
		t.Errorf("past the cap: %s, Retry-After %q, %q; want 503 %q with Retry-After", rsp.Status, rsp.Header.Get("Retry-After"), body, errTooManyFromAddress.Message)
	}
	if _, err := nc.Read(make([]byte, 1)); err == nil || errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
		t.Errorf("after the 503: %v, want the connection closed", err)
	}
	if m := e.srv.Metrics(); m.RefusedPerAddress != before.RefusedPerAddress+1 || m.HandshakeFailures != before.HandshakeFailures+1 {
		t.Errorf("RefusedPerAddress +%d, HandshakeFailures +%d; want +1 each", m.RefusedPerAddress-before.RefusedPerAddress, m.HandshakeFailures-before.HandshakeFailures)
	}

	// Another address is not held to 127.0.0.2's count.
	local := e.dial(t, CarrierWebSocket, ClientOptions{})
	var out echoReq
	if err := local.Call(context.Background(), "echo/say", echoReq{Text: "x"}, &out); err != nil {
		t.Fatal(err)
	}

	for _, nc := range silent {
		nc.Close()
	}
	waitUntil(t, "the silent connections uncounted", func() bool { n, _ := e.srv.addrCount(peerAddr); return n == 0 })
	for range limit {
		c, err := e.dialURL(viaRelay(t, e.urls[CarrierWebSocket], peerAddr))
		if err != nil {
			t.Fatalf("a connection from 127.0.0.2 once the silent ones had closed: %v", err)
		}
		defer c.Close()
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Options.Authenticate runs with the connection already counted by its
// address, on every carrier; a refusal ends the count, and the address
// connects again. A count left behind would keep the address out for
// good (MaxConnectionsPerAddress 1 here).
func TestMaxConnectionsPerAddressAuthenticateRefusal(t *testing.T) {
	var refuse atomic.Bool
	var counted atomic.Int64
	var srv atomic.Pointer[Server]
	e := newCarrierEnv(t, Options{MaxConnectionsPerAddress: 1, Authenticate: func(r *http.Request) (any, error) {
		n, _ := srv.Load().addrCount(loopback)
		counted.Store(int64(n))
		if refuse.Load() {
			return nil, &HTTPError{Status: http.StatusForbidden, Message: "no"}
		}
		return nil, nil
	}})
	srv.Store(e.srv)
	e.urls[carrierServeHTTP] = "ws://" + startServer(t, e.srv, true) + "/ws"
	for _, carrier := range append([]Carrier{CarrierWebSocket, carrierServeHTTP}, goCarriers...) {
		name := carrierName(carrier)
		if carrier == carrierServeHTTP {
			name = "ServeHTTP"
		}
		t.Run(name, func(t *testing.T) {
			refuse.Store(true)
			counted.Store(-1)
			c, err := e.dialURL(e.urls[carrier])
			if err == nil {
				c.Close()
				t.Fatal("Authenticate refused, the dial succeeded")
			}
			if got := counted.Load(); got != 1 {
				t.Errorf("Authenticate saw %d connections counted from its address, want 1: the handshake in progress", got)
			}
			noAddressCounted(t, e.srv, "after a refusal")
			refuse.Store(false)
			c, err = e.dialURL(e.urls[carrier])
			if err != nil {
				t.Fatalf("the address after a refusal, MaxConnectionsPerAddress 1: %v", err)
			}
			c.Close()
			noAddressCounted(t, e.srv, "after a connection closed")
		})
	}
}

// The ways a handshake ends before its connection opens each end its
// count by address, and while it is in progress it is counted: a bad
// upgrade request, a client gone halfway through its request, a QUIC
// connection that never opens its control stream or WebTransport session,
// an HTTP/3 connection idle past webTransportIdle, a signalling body that
// never comes (signalBodyTimeout).
func TestMaxConnectionsPerAddressAbandonedHandshakes(t *testing.T) {
	defer func(d, b time.Duration) { webTransportIdle, signalBodyTimeout = d, b }(webTransportIdle, signalBodyTimeout)
	webTransportIdle, signalBodyTimeout = 300*time.Millisecond, 300*time.Millisecond
	e := newCarrierEnv(t, Options{MaxConnectionsPerAddress: 4})
	countedOne := func(t *testing.T, what string) {
		t.Helper()
		waitUntil(t, what+" counted", func() bool { n, keys := e.srv.addrCount(loopback); return n == 1 && keys == 1 })
	}
	wsAddr := hostOf(e.urls[CarrierWebSocket])

	t.Run("bad upgrade request", func(t *testing.T) {
		nc, err := net.Dial("tcp", wsAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		countedOne(t, "an accepted connection")
		fmt.Fprintf(nc, "GET /ws HTTP/1.1\r\nHost: %s\r\n\r\n", wsAddr)
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		rsp, err := http.ReadResponse(bufio.NewReader(nc), nil)
		if err != nil || rsp.StatusCode != http.StatusBadRequest {
			t.Fatalf("a request that is no upgrade: %v %v, want 400", rsp, err)
		}
		noAddressCounted(t, e.srv, "after a bad request")
	})

	t.Run("client gone", func(t *testing.T) {
		nc, err := net.Dial("tcp", wsAddr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(nc, "GET /ws HTTP/1.1\r\nHost: %s\r\n", wsAddr)
		countedOne(t, "half a request")
		nc.Close()
		noAddressCounted(t, e.srv, "after the client left")
	})

	for _, proto := range []string{ALPN, http3.NextProtoH3} {
		t.Run("QUIC "+proto+" abandoned", func(t *testing.T) {
			qc, err := dialPendingQUIC(t, e, hostOf(e.urls[CarrierQUIC]), proto)
			if err != nil {
				t.Fatal(err)
			}
			countedOne(t, "a QUIC connection without its control stream or session")
			qc.CloseWithError(0, "")
			noAddressCounted(t, e.srv, "after the QUIC connection closed")
		})
	}

	t.Run("HTTP/3 idle", func(t *testing.T) {
		qc, err := dialPendingQUIC(t, e, hostOf(e.urls[CarrierQUIC]), http3.NextProtoH3)
		if err != nil {
			t.Fatal(err)
		}
		countedOne(t, "an HTTP/3 connection without a session")
		select {
		case <-qc.Context().Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("an HTTP/3 connection without a session still open after 5 s (webTransportIdle %v)", webTransportIdle)
		}
		noAddressCounted(t, e.srv, "after the idle HTTP/3 connection closed")
	})

	t.Run("signalling body stalled", func(t *testing.T) {
		host := hostOf(e.urls[CarrierWebRTC])
		nc, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		fmt.Fprintf(nc, "POST /rtc HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 4000\r\n\r\n{", host)
		countedOne(t, "a signalling request")
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		rsp, err := http.ReadResponse(bufio.NewReader(nc), nil)
		if err != nil || rsp.StatusCode != http.StatusRequestTimeout {
			t.Fatalf("a signalling body stalled: %v %v, want 408", rsp, err)
		}
		noAddressCounted(t, e.srv, "after the signalling request")
	})
}

// WebTransport sessions that never open their control stream end their
// counts by address as they close, while their connection stays open,
// counted once: the connection's first session holds the count the
// connection took at its accept, a later one the count the connection
// took back as the first ended, and a CONNECT refused past the sessions
// its connection may carry (one at a time without WebTransport's flow
// control) is never counted. Closed, the connection leaves no count.
func TestMaxConnectionsPerAddressWebTransportSessions(t *testing.T) {
	e := newCarrierEnv(t, Options{MaxConnectionsPerAddress: 4})
	tc := e.cert.ClientTLSConfig()
	tc.NextProtos = []string{http3.NextProtoH3}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	qc, err := quic.DialAddrEarly(ctx, hostOf(e.urls[CarrierQUIC]), tc, QUICConfig(0))
	if err != nil {
		t.Fatal(err)
	}
	defer qc.CloseWithError(0, "")
	counted := func(what string, want int) {
		t.Helper()
		waitUntil(t, what, func() bool { n, _ := e.srv.addrCount(loopback); return n == want })
	}
	counted("the HTTP/3 connection counted", 1)
	cc, err := (&webtransport.Transport{}).NewClientConn(qc)
	if err != nil {
		t.Fatal(err)
	}
	session := func() *webtransport.Session {
		t.Helper()
		_, sess, err := cc.Dial(ctx, e.urls[CarrierWebTransport], nil)
		if err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "the session's handshake in progress", func() bool { return handshakesInProgress(e.srv) == 1 })
		return sess
	}
	first := session()
	counted("the first session, on the connection's count", 1)
	if rsp, second, err := cc.Dial(ctx, e.urls[CarrierWebTransport], nil); second != nil || rsp == nil || rsp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("a second session at once without flow control: %v %v, want 429", rsp, err)
	}
	counted("the refused CONNECT uncounted", 1)
	first.CloseWithError(0, "")
	waitUntil(t, "the first session's handshake failed", func() bool { return handshakesInProgress(e.srv) == 0 })
	counted("the connection counted once its first session ended", 1)
	later := session()
	counted("a later session, on the connection's count", 1)
	later.CloseWithError(0, "")
	waitUntil(t, "the later session's handshake failed", func() bool { return handshakesInProgress(e.srv) == 0 })
	counted("the connection counted once its later session ended", 1)
	if err := qc.Context().Err(); err != nil {
		t.Errorf("the HTTP/3 connection closed: %v; want the sessions' counts ended by the sessions", context.Cause(qc.Context()))
	}
	qc.CloseWithError(0, "")
	noAddressCounted(t, e.srv, "after the HTTP/3 connection closed")
}

// Shutdown drops the handshakes in progress, and their counts by address
// with them: a silent TCP connection of Serve's, a QUIC connection
// without its control stream, an SCTP association begun with an INIT
// alone, and a WebRTC connection signalled whose control channel never
// opens (counted after its signalling request has been answered).
func TestMaxConnectionsPerAddressShutdownDuringHandshakes(t *testing.T) {
	e := newCarrierEnv(t, Options{MaxConnectionsPerAddress: 8})
	nc, err := net.Dial("tcp", hostOf(e.urls[CarrierWebSocket]))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := dialPendingQUIC(t, e, hostOf(e.urls[CarrierQUIC]), ALPN); err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	ua, err := net.ResolveUDPAddr("udp", hostOf(e.urls[CarrierSCTP]))
	if err != nil {
		t.Fatal(err)
	}
	// A common header with verification tag 0, then an INIT chunk header.
	pc.WriteTo([]byte{0x13, 0x88, 0x13, 0x88, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 4}, ua)
	offer, _ := json.Marshal(gatheredOffer(t, "control"))
	rsp, err := http.Post(strings.TrimPrefix(e.urls[CarrierWebRTC], "webrtc+"), "application/json", bytes.NewReader(offer))
	if err != nil {
		t.Fatal(err)
	}
	rsp.Body.Close()
	if rsp.StatusCode != http.StatusOK {
		t.Fatalf("an offer: %s", rsp.Status)
	}
	waitUntil(t, "four handshakes counted", func() bool { n, _ := e.srv.addrCount(loopback); return n == 4 && handshakesInProgress(e.srv) == 4 })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	e.srv.Shutdown(ctx)
	noAddressCounted(t, e.srv, "after Shutdown")
}

// A connection counted by address from its accept and refused where it
// would open, past Options.MaxConnections (upgrades that passed the
// checks together), ends its count: only the open one is counted.
func TestMaxConnectionsPerAddressRefusedAtRegister(t *testing.T) {
	const n = 2
	var arrived atomic.Int64
	all := make(chan struct{})
	e := newCarrierEnv(t, Options{MaxConnections: 1, MaxConnectionsPerAddress: 4, Authenticate: func(*http.Request) (any, error) {
		if arrived.Add(1) == n {
			close(all)
		}
		select {
		case <-all:
		case <-time.After(10 * time.Second):
		}
		return nil, nil
	}})
	var wg sync.WaitGroup
	var opened atomic.Int64
	for i := range n {
		carrier := []Carrier{CarrierWebSocket, CarrierQUIC}[i%2]
		wg.Go(func() {
			c, err := e.dialURL(e.urls[carrier])
			if err != nil {
				var ce *CloseError
				if !errors.As(err, &ce) || ce.Code != wsframe.CloseTryAgainLater || ce.Reason != tooManyConnectionsReason {
					t.Errorf("%s past MaxConnections: %v, want close 1013 %s", carrierName(carrier), err, tooManyConnectionsReason)
				}
				return
			}
			opened.Add(1)
			t.Cleanup(func() { c.Close() })
		})
	}
	wg.Wait()
	waitUntil(t, "the open connection alone counted", func() bool {
		got, keys := e.srv.addrCount(loopback)
		return got == 1 && keys == 1
	})
	if opened.Load() != 1 || e.srv.Peers() != 1 {
		t.Errorf("%d dials at once, MaxConnections 1: %d opened, %d open", n, opened.Load(), e.srv.Peers())
	}
}

// A QUIC connection whose slot of MaxPendingQUIC a newcomer takes, once
// it is stale, ends its count by address as it is closed.
func TestMaxConnectionsPerAddressStaleEviction(t *testing.T) {
	e := newCarrierEnv(t, Options{MaxConnectionsPerAddress: 4, MaxPendingQUIC: 1})
	advance := stopPendingClock(e.srv.quicPending)
	addr := hostOf(e.urls[CarrierQUIC])
	old, err := dialPendingQUIC(t, e, addr, ALPN)
	if err != nil {
		t.Fatal(err)
	}
	waitPending(t, e.srv.quicPending, 1)
	advance(staleHandshake)
	fresh, err := dialPendingQUIC(t, e, addr, ALPN)
	if err != nil {
		t.Fatal(err)
	}
	quicClosedWith(t, old, "the stale pending connection", staleHandshakeCode, staleHandshakeReason)
	waitUntil(t, "the evicted connection uncounted", func() bool { n, _ := e.srv.addrCount(loopback); return n == 1 })
	fresh.CloseWithError(0, "")
	noAddressCounted(t, e.srv, "after the fresh connection closed")
}

// register counts a Peer by its own address: a slot taken for another
// address (the client's changed during the handshake, a QUIC migration)
// or one abandoned already (its QUIC connection ended) is not the Peer's
// count; the Peer is counted afresh, held to the cap, and the slot left
// to the handshake that holds it to end. Kept, a slot of another
// address's would have had unregister end the Peer's address's count
// while the slot's stayed for good.
func TestRegisterCountsThePeersOwnAddress(t *testing.T) {
	s, err := NewServer(Options{Router: testRouter(), MaxConnectionsPerAddress: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	count := func(addr string) int {
		n, _ := s.addrCount(netip.MustParseAddr(addr))
		return n
	}
	moved, err := s.reserveAddr("127.0.0.2:1000")
	if err != nil {
		t.Fatal(err)
	}
	p := s.newPeer(nil, &upgrade{remoteAddr: "127.0.0.3:1000"})
	if err := s.register(p, moved); err != nil {
		t.Fatalf("a Peer whose slot is another address's: %v", err)
	}
	if count("127.0.0.2") != 1 || count("127.0.0.3") != 1 {
		t.Errorf("counts %d, %d; want the slot's and the Peer's, 1 each", count("127.0.0.2"), count("127.0.0.3"))
	}
	moved.abandon()
	if q := s.newPeer(nil, &upgrade{remoteAddr: "127.0.0.3:1001"}); s.register(q, nil) != errTooManyFromAddress {
		t.Error("a second Peer from 127.0.0.3 past its cap of 1 registered")
	}
	s.unregister(p, nil)

	gone, err := s.reserveAddr("127.0.0.3:1002")
	if err != nil {
		t.Fatal(err)
	}
	gone.abandon()
	p = s.newPeer(nil, &upgrade{remoteAddr: "127.0.0.3:1002"})
	if err := s.register(p, gone); err != nil {
		t.Fatalf("a Peer whose slot was abandoned: %v", err)
	}
	if count("127.0.0.3") != 1 {
		t.Errorf("count %d, want 1: the Peer counted afresh", count("127.0.0.3"))
	}
	gone.abandon()
	s.unregister(p, nil)
	if _, keys := s.addrCount(loopback); keys != 0 {
		t.Errorf("%d addresses counted with no connection", keys)
	}
}

// ListenQUIC refuses a connection from an address at
// MaxConnectionsPerAddress at its first packet, with CONNECTION_REFUSED,
// before any TLS work: a flood from one address at its cap costs the
// server no handshake. Counted once, in RefusedPerAddress and
// HandshakeFailures; the address connects again once below its cap.
func TestMaxConnectionsPerAddressQUICRefusedBeforeTLS(t *testing.T) {
	e := newCarrierEnv(t, Options{MaxConnectionsPerAddress: 1})
	var hellos atomic.Int64
	tc := e.cert.ServerTLSConfig()
	tc.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		hellos.Add(1)
		return nil, nil
	}
	ln, err := e.srv.ListenQUIC("127.0.0.1:0", tc)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go e.srv.ServeQUIC(ln)
	addr := ln.Addr().String()

	held, err := dialPendingQUIC(t, e, addr, ALPN)
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the pending connection counted", func() bool { n, _ := e.srv.addrCount(loopback); return n == 1 })
	before, helloed := e.srv.Metrics(), hellos.Load()
	for i, proto := range []string{ALPN, http3.NextProtoH3} {
		qc, err := dialPendingQUIC(t, e, addr, proto)
		if !quicRefused(err) {
			t.Fatalf("dial %d (%s) at the cap: %v (connected %v), want CONNECTION_REFUSED", i, proto, err, qc != nil)
		}
	}
	if got := hellos.Load() - helloed; got != 0 {
		t.Errorf("%d ClientHellos processed for connections refused at the cap, want 0", got)
	}
	m := e.srv.Metrics()
	if refused, failed := m.RefusedPerAddress-before.RefusedPerAddress, m.HandshakeFailures-before.HandshakeFailures; refused != 2 || failed != 2 {
		t.Errorf("RefusedPerAddress +%d, HandshakeFailures +%d; want +2, +2", refused, failed)
	}

	held.CloseWithError(0, "")
	noAddressCounted(t, e.srv, "after the pending connection closed")
	if _, err := dialPendingQUIC(t, e, addr, ALPN); err != nil {
		t.Errorf("below the cap again: %v", err)
	}
}

// An SCTP client refused at MaxConnectionsPerAddress is counted once,
// however often it resends its INIT: each resend, from the same address
// and port, is accepted and dropped again, and counted again in
// RefusedPerAddress and HandshakeFailures (pion resends an INIT until its
// dial gives up). Another client from the address counts once more. The
// INITs from 127.0.0.1 between them, below the cap, show when ServeSCTP
// has taken those before them: it accepts in order.
func TestMaxConnectionsPerAddressSCTPResentINITCountedOnce(t *testing.T) {
	const limit = 4
	e := newCarrierEnv(t, Options{MaxConnectionsPerAddress: limit})
	ua, err := net.ResolveUDPAddr("udp", hostOf(e.urls[CarrierSCTP]))
	if err != nil {
		t.Fatal(err)
	}
	socket := func(from netip.Addr) *net.UDPConn {
		t.Helper()
		pc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(from, 0)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pc.Close() })
		return pc
	}
	// A common header with verification tag 0, then an INIT chunk header:
	// an association begun, pending until handshakeTimeout.
	init := []byte{0x13, 0x88, 0x13, 0x88, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 4}
	for range limit {
		socket(peerAddr).WriteTo(init, ua)
	}
	waitUntil(t, "127.0.0.2 at its cap", func() bool { n, _ := e.srv.addrCount(peerAddr); return n == limit })
	before := e.srv.Metrics()
	local := 0
	taken := func() {
		t.Helper()
		socket(loopback).WriteTo(init, ua)
		local++
		waitUntil(t, "an INIT from 127.0.0.1 taken", func() bool { n, _ := e.srv.addrCount(loopback); return n == local })
	}
	refused := socket(peerAddr)
	for range 3 {
		refused.WriteTo(init, ua)
		taken()
	}
	m := e.srv.Metrics()
	if r, f := m.RefusedPerAddress-before.RefusedPerAddress, m.HandshakeFailures-before.HandshakeFailures; r != 1 || f != 1 {
		t.Errorf("one INIT sent 3 times past the cap: RefusedPerAddress +%d, HandshakeFailures +%d; want +1 each", r, f)
	}
	socket(peerAddr).WriteTo(init, ua)
	taken()
	m = e.srv.Metrics()
	if r, f := m.RefusedPerAddress-before.RefusedPerAddress, m.HandshakeFailures-before.HandshakeFailures; r != 2 || f != 2 {
		t.Errorf("another client past the cap: RefusedPerAddress +%d, HandshakeFailures +%d; want +2 each", r, f)
	}
}
