package compat

import (
	"crypto/tls"
	"net"
	"net/http"
	"strings"
	"testing"
)

// Peer.Encrypted on every carrier and way of serving it: TLS under
// WebSocket from Serve and from ServeHTTP, or none; DTLS under SCTP, or
// plain UDP; QUIC, WebTransport and WebRTC, always. Carrier stays the
// same for SCTP with and without DTLS. Options.Authenticate sees the same
// in r.TLS, but on WebRTC, whose request is the signalling's: Serve over
// tls.NewListener gave it none.
func TestPeerEncrypted(t *testing.T) {
	e := newCarrierEnv(t, Options{Authenticate: func(r *http.Request) (any, error) {
		return r.TLS != nil && r.TLS.HandshakeComplete, nil // the identity: r had a TLS state
	}})
	rawTLS, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rawTLS.Close() })
	go e.srv.Serve(tls.NewListener(rawTLS, e.cert.ServerTLSConfig()))
	// Listeners that wrap each TLS connection, with and without NetConn.
	wrapped := listenWrapped(t, e, func(c net.Conn) net.Conn { return unwrappableConn{c} })
	hidden := listenWrapped(t, e, func(c net.Conn) net.Conn { return opaqueConn{c} })
	httpTLS, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: e.srv, TLSConfig: e.cert.ServerTLSConfig()}
	go hs.ServeTLS(httpTLS, "", "")
	t.Cleanup(func() { hs.Close() })
	for _, tc := range []struct {
		name    string
		url     string
		carrier Carrier
		want    bool
		authTLS bool // whether Authenticate's r has a TLS state
	}{
		{"ws/Serve", e.urls[CarrierWebSocket], CarrierWebSocket, false, false},
		{"ws/ServeHTTP", "ws://" + startServer(t, e.srv, true) + "/ws", CarrierWebSocket, false, false},
		{"wss/Serve", "wss://" + rawTLS.Addr().String() + "/ws", CarrierWebSocket, true, true},
		{"wss/ServeHTTP", "wss://" + httpTLS.Addr().String() + "/ws", CarrierWebSocket, true, true},
		{"wss/Serve/wrapped", "wss://" + wrapped + "/ws", CarrierWebSocket, true, true},
		{"wss/Serve/opaque-wrapper", "wss://" + hidden + "/ws", CarrierWebSocket, false, false},
		{"quic", e.urls[CarrierQUIC], CarrierQUIC, true, true},
		{"webtransport", e.urls[CarrierWebTransport], CarrierWebTransport, true, true},
		{"sctp", e.urls[CarrierSCTP], CarrierSCTP, false, false},
		{"sctp+dtls", e.urls[carrierSCTPDTLS], CarrierSCTP, true, true},
		{"webrtc", e.urls[CarrierWebRTC], CarrierWebRTC, true, false}, // signalled over plain HTTP
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := e.dialURL(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				c.Close()
				waitFor(t, func() bool { return e.srv.Peers() == 0 })
			}()
			var peers []*Peer
			waitFor(t, func() bool { peers = e.srv.snapshotPeers(); return len(peers) == 1 })
			p := peers[0]
			if p.Carrier() != tc.carrier || p.Encrypted() != tc.want {
				t.Errorf("peer on %s, Encrypted %v; want %s, %v", p.Carrier(), p.Encrypted(), tc.carrier, tc.want)
			}
			if got := p.Identity(); got != tc.authTLS {
				t.Errorf("Authenticate saw a TLS state: %v, want %v", got, tc.authTLS)
			}
			// The client's link says the same of its end, which a wrapper
			// on the server's end does not hide.
			want := tc.want || strings.HasPrefix(tc.url, "wss://")
			if got := c.conn.link.encrypted(); got != want {
				t.Errorf("client's link: encrypted %v, want %v", got, want)
			}
		})
	}
}

// listenWrapped serves e's server over TLS on a listener that wraps each
// accepted *tls.Conn with wrap, and returns its address.
func listenWrapped(t *testing.T, e *carrierEnv, wrap func(net.Conn) net.Conn) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go e.srv.Serve(wrappingListener{tls.NewListener(ln, e.cert.ServerTLSConfig()), wrap})
	return ln.Addr().String()
}

type wrappingListener struct {
	net.Listener
	wrap func(net.Conn) net.Conn
}

func (l wrappingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.wrap(c), nil
}

// unwrappableConn is a middleware's wrapper that keeps the convention of
// *tls.Conn: NetConn returns what it wraps.
type unwrappableConn struct{ net.Conn }

func (c unwrappableConn) NetConn() net.Conn { return c.Conn }

// opaqueConn hides what it wraps.
type opaqueConn struct{ net.Conn }

// selfConn's NetConn returns itself: findTLS must give up, not loop.
type selfConn struct{ net.Conn }

func (c selfConn) NetConn() net.Conn { return c }

func TestFindTLSThroughWrappers(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	tc := tls.Client(a, &tls.Config{})
	var nc net.Conn = tc
	for range maxConnWrappers - 1 {
		nc = unwrappableConn{nc}
	}
	if got, ok := findTLS(nc); !ok || got != tlsConn(tc) {
		t.Errorf("under %d wrappers: found %v, %v; want the *tls.Conn", maxConnWrappers-1, got, ok)
	}
	if _, ok := findTLS(unwrappableConn{nc}); ok {
		t.Errorf("found TLS under %d wrappers, past maxConnWrappers", maxConnWrappers)
	}
	for _, c := range []net.Conn{a, opaqueConn{tc}, selfConn{a}, unwrappableConn{nil}} {
		if _, ok := findTLS(c); ok {
			t.Errorf("findTLS(%T) found TLS", c)
		}
	}
}
