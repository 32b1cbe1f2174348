package compat

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/gobwas/ws"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/webtransport-go"
)

// stalledConnectServer serves HTTP/3 with WebTransport enabled and reads
// every CONNECT request without answering it, until the request's
// connection closes. It returns the https URL, a channel told of each
// request as it arrives and another as its handler returns.
func stalledConnectServer(t *testing.T) (url string, arrived, ended chan struct{}) {
	t.Helper()
	tlsConf := testCert().ServerTLSConfig()
	tlsConf.NextProtos = []string{http3.NextProtoH3}
	ln, err := quic.ListenAddrEarly("127.0.0.1:0", tlsConf, &quic.Config{EnableDatagrams: true, EnableStreamResetPartialDelivery: true})
	if err != nil {
		t.Fatal(err)
	}
	arrived, ended = make(chan struct{}, 8), make(chan struct{}, 8)
	wt := &webtransport.Server{H3: &http3.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-r.Context().Done() // the connection closed
		ended <- struct{}{}
	})}}
	go func() {
		for {
			qc, err := ln.Accept(context.Background())
			if err != nil {
				return
			}
			go wt.ServeQUICConn(qc)
		}
	}()
	t.Cleanup(func() {
		wt.Close()
		ln.Close()
	})
	return "https://" + ln.Addr().String() + "/wt", arrived, ended
}

// A WebTransport Dial whose CONNECT request the server never answers
// ends when its ctx does, closing its QUIC connection. webtransport-go
// reads the answer to the CONNECT without a ctx: the dial waited for as
// long as the server kept the connection, for ever with the client's
// keepalives (and Close, during a reconnect attempt, with it), whatever
// ctx and ConnectTimeout said.
func TestDialWebTransportUnansweredConnect(t *testing.T) {
	// Not parallel: it counts the process's goroutines.
	url, arrived, ended := stalledConnectServer(t)
	base := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-arrived:
			cancel()
		case <-time.After(hangBound):
		}
	}()
	dialed := make(chan error, 1)
	go func() {
		c, err := Dial(ctx, url, ClientOptions{TLSConfig: testCert().ClientTLSConfig(), ConnectTimeout: time.Hour})
		if err == nil {
			c.Close()
		}
		dialed <- err
	}()
	select {
	case err := <-dialed:
		if err == nil || ctx.Err() == nil {
			t.Fatalf("Dial = %v before its CONNECT arrived, want it canceled", err)
		}
	case <-time.After(2 * hangBound):
		t.Fatal("Dial canceled during its CONNECT request did not return")
	}
	select {
	case <-ended:
	case <-time.After(hangBound):
		t.Fatal("the abandoned dial's QUIC connection is still open")
	}
	checkGoroutinesBack(t, base, hangBound, "after the abandoned dial")
}

// A Dial given up after the carrier's handshake, while it waits for the
// server's capabilities, sends its close and ends the connection without
// waiting for the answer (link.closeNow): nothing it sent needs the
// closing handshake's confirmation. It ran the closing handshake, and a
// server silent since its upgrade held Dial closeTimeout past its ctx;
// with ConnectTimeout, for ConnectTimeout and closeTimeout. The server
// here never answers: the client's side of the connection records
// whether its handshake ran out (closeExpired), which says without a
// clock that Dial did not wait. The server reads the close, 1000, before
// the connection ends (TestDialGivingUpSendsItsClose checks a Server).
func TestDialCanceledBeforeCapabilities(t *testing.T) {
	// Not parallel: it counts the process's goroutines.
	ln := listenLoopback(t)
	upgraded, ended := make(chan struct{}, 1), make(chan ws.StatusCode, 1)
	go func() { // upgrades one connection, then only reads it
		nc, err := acceptRaw(ln, "")
		if err != nil {
			return
		}
		defer nc.Close()
		if _, err := ws.ReadFrame(nc); err != nil { // the client's capabilities: Dial waits for the server's
			return
		}
		upgraded <- struct{}{}
		// The close code read, 0 until a close frame comes; read until
		// the connection ends, bounded by hangBound below.
		var code ws.StatusCode
		for {
			f, err := ws.ReadFrame(nc)
			if err != nil {
				break
			}
			if f.Header.OpCode == ws.OpClose {
				f = ws.UnmaskFrameInPlace(f)
				code, _ = ws.ParseCloseFrameData(f.Payload)
			}
		}
		ended <- code
	}()
	links := make(chan *wsConn, 1)
	hook := func(c *wsConn) { links <- c }
	testHookCloseRequested.Store(&hook)
	t.Cleanup(func() { testHookCloseRequested.Store(nil) })
	base := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-upgraded:
			cancel()
		case <-time.After(hangBound):
		}
	}()
	c, err := Dial(ctx, "ws://"+ln.Addr().String()+"/ws", ClientOptions{ConnectTimeout: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	if err == nil {
		c.Close()
		t.Fatal("Dial succeeded with a server that sends no capabilities")
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Dial = %v, want it canceled", err)
	}
	select {
	case code := <-ended:
		if code != ws.StatusNormalClosure {
			t.Errorf("the server read close code %d before the abandoned dial's connection ended, want 1000", code)
		}
	case <-time.After(hangBound):
		t.Fatal("the abandoned dial's connection is still open")
	}
	select {
	case link := <-links:
		if link.closeExpired {
			t.Errorf("Dial canceled before the server's capabilities waited out the closing handshake (%v with a silent server)", closeTimeout)
		}
	default:
		t.Error("Dial canceled before the server's capabilities asked for no close")
	}
	checkGoroutinesBack(t, base, hangBound, "after the abandoned dial")
}
