package compat

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
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

// A signalling request whose body never completes is answered 408 (400
// when what came is no offer) and closed after signalBodyTimeout, on an http.Server without timeouts of
// its own (cmd/hotpath's has ReadHeaderTimeout only, which ends at the
// headers): the decoder waited for the rest of the body for ever, a
// goroutine and a descriptor per client, and a client could open any
// number. A slot of MaxPending is taken only once the offer is read.
func TestWebRTCSlowSignallingBody(t *testing.T) {
	defer func(d time.Duration) { signalBodyTimeout = d }(signalBodyTimeout)
	signalBodyTimeout = 300 * time.Millisecond
	e := newCarrierEnv(t, Options{})
	c := e.dial(t, CarrierWebRTC, ClientOptions{})
	c.Close()
	waitFor(t, func() bool { return e.srv.Peers() == 0 })
	host := strings.TrimPrefix(strings.TrimSuffix(e.urls[CarrierWebRTC], "/rtc"), "webrtc+http://")
	const n = 20
	var conns []net.Conn
	for i := range n {
		nc, err := net.Dial("tcp", host)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		// Half begin an offer, half send what is no JSON (answered 400
		// at once, before net/http reads the rest of the body).
		body := `{"type":"offer","sdp":"v=0`
		if i%2 == 1 {
			body = "not JSON"
		}
		fmt.Fprintf(nc, "POST /rtc HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 4000\r\n\r\n%s", host, body)
		conns = append(conns, nc)
	}
	for i, nc := range conns {
		want := http.StatusRequestTimeout
		if i%2 == 1 {
			want = http.StatusBadRequest
		}
		nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		rsp, err := http.ReadResponse(bufio.NewReader(nc), nil)
		if err != nil {
			t.Fatalf("request %d, its body stalled: %v, want an answer within 5 s (signalBodyTimeout %v)", i, err, signalBodyTimeout)
		}
		rsp.Body.Close()
		if rsp.StatusCode != want {
			t.Errorf("request %d, its body stalled: %s, want %d", i, rsp.Status, want)
		}
	}
	// The endpoint still serves, and a whole offer sent slowly in under
	// the timeout is no slow body.
	c = e.dial(t, CarrierWebRTC, ClientOptions{})
	var out echoReq
	if err := c.Call(context.Background(), "echo/say", echoReq{Text: "x"}, &out); err != nil {
		t.Fatal(err)
	}
}
