package compat

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"testing"
	"time"
)

// Serve over a TLS listener (tls.NewListener) refuses a connection past
// MaxConnectionsPerAddress without stalling its accept loop: the 503 of
// a *tls.Conn needs the TLS handshake first, which a client that sends
// nothing never finishes. Written on the accept loop, the refusal held it
// for as long as that client liked, and no other address connected.
func TestMaxConnectionsPerAddressTLSListener(t *testing.T) {
	s, err := NewServer(Options{Router: testRouter(), Logger: slog.New(slog.DiscardHandler), MaxConnectionsPerAddress: 1})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve(tls.NewListener(ln, testCert().ServerTLSConfig()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), hangBound)
		defer cancel()
		s.Shutdown(ctx)
	})
	addr := ln.Addr().String()
	// Two silent connections from 127.0.0.1: the first holds the
	// address's slot (for handshakeTimeout), the second is refused.
	d := net.Dialer{Timeout: 5 * time.Second}
	for i := range 2 {
		nc, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		if i == 0 {
			waitUntil(t, "the silent connection counted", func() bool { n, _ := s.addrCount(loopback); return n == 1 })
		}
	}
	waitUntil(t, "the second silent connection refused", func() bool { return s.Metrics().RefusedPerAddress == 1 })

	// Another address still connects, well within handshakeTimeout.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // a bound on a hang
	defer cancel()
	relay := tcpRelayFrom(t, addr, peerAddr)
	c, err := Dial(ctx, "wss://"+relay+"/ws", ClientOptions{TLSConfig: testCert().ClientTLSConfig(), Reconnect: Reconnect{Disabled: true}})
	if err != nil {
		t.Fatalf("a connection from 127.0.0.2 while a refused one from 127.0.0.1 stays silent: %v", err)
	}
	c.Close()
}
