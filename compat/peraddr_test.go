package compat

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotpath-go/hotpath/wsframe"
	"github.com/quic-go/quic-go"
)

// addrKey counts an IPv4 address whole, an IPv4-mapped IPv6 address as
// its IPv4, and an IPv6 address by its /64, zone dropped; a RemoteAddr
// that names no IP has no key and is not counted.
func TestAddrKey(t *testing.T) {
	for _, tc := range []struct {
		remote string
		want   string // "" for no key
	}{
		{"127.0.0.2:4000", "127.0.0.2/32"},
		{"127.0.0.2", "127.0.0.2/32"},
		{"[::ffff:127.0.0.2]:4000", "127.0.0.2/32"},
		{"::ffff:10.1.2.3", "10.1.2.3/32"},
		{"[2001:db8:1:2:aaaa:bbbb:cccc:dddd]:443", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2::1]:9", "2001:db8:1:2::/64"},
		{"[2001:db8:1:3::1]:9", "2001:db8:1:3::/64"},
		{"[fe80::1%eth0]:80", "fe80::/64"},
		{"[::1]:80", "::/64"},
		{"pipe", ""},
		{"@", ""},
		{"", ""},
		{"example.com:80", ""},
	} {
		key, ok := addrKey(tc.remote)
		got := ""
		if ok {
			got = key.String()
		}
		if got != tc.want {
			t.Errorf("addrKey(%q) = %q, %v; want %q", tc.remote, got, ok, tc.want)
		}
	}
	a, _ := addrKey("[2001:db8::1]:1")
	b, _ := addrKey("[2001:db8::ffff:1]:2")
	if a != b {
		t.Errorf("two addresses of one /64 have keys %v and %v", a, b)
	}
}

// peerAddr is the second loopback address: a client bound to it is
// another remote address to the server than one from 127.0.0.1.
var peerAddr = netip.MustParseAddr("127.0.0.2")

// tcpRelayFrom relays every TCP connection it accepts to upstream over a
// connection of its own from the address from, until the test ends.
func tcpRelayFrom(t *testing.T, upstream string, from netip.Addr) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(from, 0)), Timeout: 5 * time.Second}
	go func() {
		for {
			front, err := ln.Accept()
			if err != nil {
				return
			}
			back, err := d.Dial("tcp", upstream)
			if err != nil {
				front.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, front, back)
			mu.Unlock()
			pipe := func(dst, src net.Conn) {
				buf := make([]byte, 64<<10)
				for {
					n, err := src.Read(buf)
					if err != nil {
						// Either side's end ends both: a client's close
						// reaches the server.
						dst.Close()
						src.Close()
						return
					}
					dst.Write(buf[:n])
				}
			}
			go pipe(back, front)
			go pipe(front, back)
		}
	}()
	return ln.Addr().String()
}

// udpRelayFrom relays the datagrams of every client that sends to it to
// upstream and back, each client over a socket of its own bound to the
// address from, until the test ends.
func udpRelayFrom(t *testing.T, upstream string, from netip.Addr) string {
	t.Helper()
	front, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	ua, err := net.ResolveUDPAddr("udp", upstream)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	backs := map[netip.AddrPort]*net.UDPConn{}
	t.Cleanup(func() {
		front.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, b := range backs {
			b.Close()
		}
	})
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, client, err := front.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			mu.Lock()
			back := backs[client]
			if back == nil {
				back, err = net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(from, 0)), ua)
				if err != nil {
					mu.Unlock()
					continue
				}
				backs[client] = back
				go func() {
					buf := make([]byte, 64<<10)
					for {
						n, err := back.Read(buf)
						if err != nil {
							return
						}
						front.WriteToUDPAddrPort(buf[:n], client)
					}
				}()
			}
			mu.Unlock()
			back.Write(buf[:n])
		}
	}()
	return front.LocalAddr().String()
}

// viaRelay is u with its host:port replaced by a relay's from the address
// from: TCP for ws:// and WebRTC's signalling, UDP for the others.
func viaRelay(t *testing.T, u string, from netip.Addr) string {
	t.Helper()
	scheme, rest, _ := strings.Cut(u, "://")
	upstream, path, _ := strings.Cut(rest, "/")
	var relay string
	switch scheme {
	case "ws", "http", "webrtc+http":
		relay = tcpRelayFrom(t, upstream, from)
	default:
		relay = udpRelayFrom(t, upstream, from)
	}
	return scheme + "://" + relay + "/" + path
}

// dialURL dials u with the env's certificates and no reconnection.
func (e *carrierEnv) dialURL(u string) (*Client, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return Dial(ctx, u, ClientOptions{TLSConfig: e.cert.ClientTLSConfig(), DTLSConfig: e.cert.ClientDTLSConfig(),
		WebRTC: WebRTCOptions{LoopbackOnly: true}, Reconnect: Reconnect{Disabled: true}})
}

// waitUntil waits for cond, and fails t if it is not met within 10 s (a
// bound on a hang, not a timing assertion).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10 s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// addrCount is the server's count of open connections from addr.
func (s *Server) addrCount(addr netip.Addr) (n, keys int) {
	key, _ := addrKey(addr.String())
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byAddr[key], len(s.byAddr)
}

// Options.MaxConnectionsPerAddress caps the connections open at once from
// one address, across every carrier: past it each carrier refuses with a
// reason of its own, counted in RefusedPerAddress, where it first knows
// the address: 503 with Retry-After from Serve at the accept, ServeHTTP
// and WebRTC signalling at the request; CONNECTION_REFUSED at a QUIC
// connection's first packet (ListenQUIC's listener), native or
// WebTransport's; SCTP drops the association at its
// accept, and the client's dial fails (its INIT, resent, is dropped
// again, counted once). Another address still connects; a
// connection that ends frees its slot, and the count by address holds no
// entry once none is open.
func TestMaxConnectionsPerAddress(t *testing.T) {
	const limit = 2
	e := newCarrierEnv(t, Options{MaxConnectionsPerAddress: limit})
	e.urls[carrierServeHTTP] = "ws://" + startServer(t, e.srv, true) + "/ws" // ServeHTTP
	ctx := context.Background()
	var out echoReq
	carriers := append([]Carrier{CarrierWebSocket, carrierServeHTTP}, goCarriers...)
	for _, carrier := range carriers {
		name := carrierName(carrier)
		if carrier == carrierServeHTTP {
			name = "ServeHTTP"
		}
		t.Run(name, func(t *testing.T) {
			fromPeer := func() (*Client, error) {
				return e.dialURL(viaRelay(t, e.urls[carrier], peerAddr))
			}
			// One connection on another carrier: the cap counts them all.
			other := CarrierWebSocket
			if carrier == CarrierWebSocket {
				other = CarrierQUIC
			}
			first, err := e.dialURL(viaRelay(t, e.urls[other], peerAddr))
			if err != nil {
				t.Fatal(err)
			}
			defer first.Close()
			second, err := fromPeer()
			if err != nil {
				t.Fatal(err)
			}
			defer second.Close()
			waitUntil(t, "two connections from 127.0.0.2 counted", func() bool { n, _ := e.srv.addrCount(peerAddr); return n == limit })
			before := e.srv.Metrics()

			sctp := carrier == CarrierSCTP || carrier == carrierSCTPDTLS
			var c *Client
			if sctp {
				// Dropped, it fails when its ctx ends: a short one.
				ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				c, err = Dial(ctx, viaRelay(t, e.urls[carrier], peerAddr), ClientOptions{DTLSConfig: e.cert.ClientDTLSConfig(), Reconnect: Reconnect{Disabled: true}})
				cancel()
			} else {
				c, err = fromPeer()
			}
			if err == nil {
				c.Close()
				t.Fatalf("connection %d from one address accepted, MaxConnectionsPerAddress %d", limit+1, limit)
			}
			switch carrier {
			case CarrierSCTP, carrierSCTPDTLS:
			case CarrierQUIC, CarrierWebTransport:
				// The count settled at the cap: ListenQUIC's listener
				// refuses at the first packet, before any TLS work.
				if !quicRefused(err) {
					t.Errorf("past the cap: %v, want CONNECTION_REFUSED", err)
				}
			default:
				var he *HTTPError
				if !errors.As(err, &he) || he.Status != http.StatusServiceUnavailable || he.RetryAfter == 0 ||
					!strings.HasSuffix(he.Message, errTooManyFromAddress.Message) {
					t.Errorf("past the cap: %#v, want HTTP 503 %q with Retry-After", err, errTooManyFromAddress.Message)
				}
			}
			waitUntil(t, "the refusal counted", func() bool {
				m := e.srv.Metrics()
				return m.RefusedPerAddress > before.RefusedPerAddress && m.HandshakeFailures > before.HandshakeFailures
			})
			// Once: on SCTP too, where the client resent its INIT until
			// its dial ended.
			if m := e.srv.Metrics(); m.RefusedPerAddress != before.RefusedPerAddress+1 || m.HandshakeFailures != before.HandshakeFailures+1 {
				t.Errorf("RefusedPerAddress +%d, HandshakeFailures +%d; want +1 each", m.RefusedPerAddress-before.RefusedPerAddress, m.HandshakeFailures-before.HandshakeFailures)
			}
			if m := e.srv.Metrics(); m.RefusedConnections != before.RefusedConnections {
				t.Errorf("RefusedConnections %d, want %d: the server is below MaxConnections", m.RefusedConnections, before.RefusedConnections)
			}

			// Another address is not held to 127.0.0.2's count.
			local, err := e.dialURL(e.urls[carrier])
			if err != nil {
				t.Fatalf("a connection from 127.0.0.1: %v", err)
			}
			defer local.Close()
			if err := local.Call(ctx, "echo/say", echoReq{Text: "x"}, &out); err != nil {
				t.Fatal(err)
			}

			second.Close()
			waitUntil(t, "the closed connection uncounted", func() bool { n, _ := e.srv.addrCount(peerAddr); return n == limit-1 })
			third, err := fromPeer()
			if err != nil {
				t.Fatalf("a connection from 127.0.0.2 once one had closed: %v", err)
			}
			defer third.Close()
			if err := third.Call(ctx, "echo/say", echoReq{Text: "x"}, &out); err != nil {
				t.Fatal(err)
			}
			third.Close()
			first.Close()
			local.Close()
			waitUntil(t, "no connection open, no address counted", func() bool {
				_, keys := e.srv.addrCount(peerAddr)
				return keys == 0 && e.srv.Peers() == 0
			})
		})
	}
	var prom bytes.Buffer
	m := e.srv.Metrics()
	m.WritePrometheus(&prom)
	if want := "\nhotpath_refused_per_address_total " + strconv.FormatUint(m.RefusedPerAddress, 10) + "\n"; m.RefusedPerAddress == 0 || !strings.Contains(prom.String(), want) {
		t.Errorf("Prometheus output has no %q", strings.TrimSpace(want))
	}
}

// carrierServeHTTP names WebSocket through ServeHTTP in these tests.
const carrierServeHTTP Carrier = 101

// Handshakes in progress count: while Authenticate holds the upgrades
// that reached it, the cap's worth from one address, every other dial
// from that address is refused where the server first sees it, before
// any hook runs (503 from Serve at the accept; for QUIC CONNECTION_REFUSED
// at its first packet, or 1013 at its accept for one that raced past that
// check), on WebSocket and native QUIC alike; once let go, exactly
// the cap's worth connect, and the count never passes the cap.
func TestMaxConnectionsPerAddressConcurrent(t *testing.T) {
	const limit, n = 2, 8
	var arrived atomic.Int64
	release := make(chan struct{})
	e := newCarrierEnv(t, Options{MaxConnectionsPerAddress: limit, Authenticate: func(*http.Request) (any, error) {
		arrived.Add(1)
		select {
		case <-release:
		case <-time.After(10 * time.Second):
		}
		return nil, nil
	}})
	var wg sync.WaitGroup
	var ok atomic.Int64
	for i := range n {
		carrier := []Carrier{CarrierWebSocket, CarrierQUIC}[i%2]
		wg.Go(func() {
			c, err := e.dialURL(e.urls[carrier])
			if err != nil {
				var ce *CloseError
				var he *HTTPError
				switch {
				case carrier == CarrierQUIC && !quicRefused(err) && (!errors.As(err, &ce) || ce.Code != wsframe.CloseTryAgainLater || ce.Reason != tooManyFromAddressReason):
					t.Errorf("QUIC past the cap: %v, want CONNECTION_REFUSED or close 1013 %s", err, tooManyFromAddressReason)
				case carrier == CarrierWebSocket && (!errors.As(err, &he) || he.Status != http.StatusServiceUnavailable || !strings.HasSuffix(he.Message, errTooManyFromAddress.Message)):
					t.Errorf("WebSocket past the cap: %v, want 503 %q", err, errTooManyFromAddress.Message)
				}
				return
			}
			ok.Add(1)
			t.Cleanup(func() { c.Close() })
		})
	}
	local := netip.MustParseAddr("127.0.0.1")
	waitUntil(t, "the dials past the cap refused", func() bool { return e.srv.Metrics().RefusedPerAddress == n-limit })
	waitUntil(t, "the cap's worth in Authenticate", func() bool { return arrived.Load() == limit })
	if got, _ := e.srv.addrCount(local); got != limit || e.srv.Peers() != 0 {
		t.Errorf("%d handshakes held in Authenticate: %d counted by address, %d open; want %d, 0", limit, got, e.srv.Peers(), limit)
	}
	close(release)
	wg.Wait()
	if got, _ := e.srv.addrCount(local); ok.Load() != limit || got != limit || e.srv.Peers() != limit || arrived.Load() != limit {
		t.Errorf("%d dials at once from one address, MaxConnectionsPerAddress %d: %d authenticated, %d connected, %d counted, %d open",
			n, limit, arrived.Load(), ok.Load(), got, e.srv.Peers())
	}
	if m := e.srv.Metrics(); m.RefusedPerAddress != n-limit || m.RefusedConnections != 0 || m.HandshakeFailures != n-limit {
		t.Errorf("RefusedPerAddress %d, RefusedConnections %d, HandshakeFailures %d; want %d, 0, %d", m.RefusedPerAddress, m.RefusedConnections, m.HandshakeFailures, n-limit, n-limit)
	}
}

// 0, the default, is no cap by address: nothing is counted by address,
// and one address opens as many connections as it likes.
func TestMaxConnectionsPerAddressZero(t *testing.T) {
	e := newCarrierEnv(t, Options{})
	for i := range 6 {
		e.dial(t, []Carrier{CarrierWebSocket, CarrierQUIC}[i%2], ClientOptions{})
	}
	waitUntil(t, "six connections open", func() bool { return e.srv.Peers() == 6 })
	if _, keys := e.srv.addrCount(netip.MustParseAddr("127.0.0.1")); keys != 0 || e.srv.byAddr != nil {
		t.Errorf("addresses counted without MaxConnectionsPerAddress: %v", e.srv.byAddr)
	}
	if m := e.srv.Metrics(); m.RefusedPerAddress != 0 {
		t.Errorf("RefusedPerAddress %d without a cap", m.RefusedPerAddress)
	}
}

// With both caps, a full server refuses with MaxConnections' refusal,
// counted in RefusedConnections, whatever the address: the two counters
// never count one refusal twice.
func TestMaxConnectionsBeforePerAddress(t *testing.T) {
	e := newCarrierEnv(t, Options{MaxConnections: 2, MaxConnectionsPerAddress: 1})
	c, err := e.dialURL(viaRelay(t, e.urls[CarrierWebSocket], peerAddr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	e.dial(t, CarrierQUIC, ClientOptions{})
	waitUntil(t, "two connections open", func() bool { return e.srv.Peers() == 2 })
	_, err = e.dialURL(e.urls[CarrierWebSocket])
	var he *HTTPError
	if !errors.As(err, &he) || he.Status != http.StatusServiceUnavailable || strings.Contains(he.Message, errTooManyFromAddress.Message) {
		t.Errorf("a full server: %v, want 503 %q", err, errTooManyConnections.Message)
	}
	if m := e.srv.Metrics(); m.RefusedConnections != 1 || m.RefusedPerAddress != 0 {
		t.Errorf("RefusedConnections %d, RefusedPerAddress %d; want 1, 0", m.RefusedConnections, m.RefusedPerAddress)
	}
}

// quicRefused reports whether err is QUIC's CONNECTION_REFUSED from the
// server, ListenQUIC's refusal before any TLS work.
func quicRefused(err error) bool {
	var te *quic.TransportError
	return errors.As(err, &te) && te.Remote && te.ErrorCode == quic.ConnectionRefused
}
