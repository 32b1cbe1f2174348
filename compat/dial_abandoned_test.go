package compat

import (
	"context"
	"net/http"
	"runtime"
	"testing"
	"time"

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
	t.Parallel()
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
