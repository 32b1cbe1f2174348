package compat

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// An HTTP/3 connection whose requests never complete (a HEADERS frame
// begun and never finished, on many request streams) is closed after
// webTransportIdle, as one with no request at all is: http3's idle timer
// stops at a request's first byte and waits for its headers for ever, so a
// client sending QUIC keep-alives held the connection, and a goroutine per
// stream, for good, none of it counted as a connection.
func TestStalledHTTP3RequestsClosed(t *testing.T) {
	defer func(d time.Duration) { webTransportIdle = d }(webTransportIdle)
	webTransportIdle = 300 * time.Millisecond
	e := newCarrierEnv(t, Options{})
	// A session first, so that what the server starts once is in the
	// baseline.
	c := e.dial(t, CarrierWebTransport, ClientOptions{})
	c.Close()
	waitFor(t, func() bool { return e.srv.Peers() == 0 })
	time.Sleep(200 * time.Millisecond)
	base := runtime.NumGoroutine()

	tc := e.cert.ClientTLSConfig()
	tc.NextProtos = []string{http3.NextProtoH3}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	qcfg := QUICConfig(0)
	qcfg.KeepAlivePeriod = 100 * time.Millisecond
	const conns, streams = 4, 50
	var qcs []*quic.Conn
	for range conns {
		qc, err := quic.DialAddr(ctx, e.urls[CarrierQUIC][len("quic://"):], tc, qcfg)
		if err != nil {
			t.Fatal(err)
		}
		defer qc.CloseWithError(0, "")
		for range streams {
			str, err := qc.OpenStream()
			if err != nil {
				t.Fatal(err)
			}
			// A HEADERS frame's type, then nothing: its length never comes.
			if _, err := str.Write([]byte{0x01}); err != nil {
				t.Fatal(err)
			}
		}
		qcs = append(qcs, qc)
	}
	for i, qc := range qcs {
		select {
		case <-qc.Context().Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("connection %d, %d requests never completed, still open after 5 s (webTransportIdle %v)", i, streams, webTransportIdle)
		}
	}
	settleWithin(t, e.srv, base, "after the stalled requests", 5*time.Second)

	// A session still keeps its connection, however quiet.
	c = e.dial(t, CarrierWebTransport, ClientOptions{})
	time.Sleep(4 * webTransportIdle)
	var out echoReq
	if err := c.Call(context.Background(), "echo/say", echoReq{Text: "x"}, &out); err != nil {
		t.Fatalf("a call on a session quiet for %v: %v", 4*webTransportIdle, err)
	}
}
