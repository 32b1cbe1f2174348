package compat

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotpath-go/hotpath/wsframe"
	"github.com/pion/dtls/v3"
	"github.com/pion/webrtc/v4"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/webtransport-go"
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

// Handshakes abandoned by a peer (SCTP INITs never followed by a COOKIE
// ECHO, DTLS handshakes given up after the ClientHello) filled
// MaxPendingSCTP for their whole 10 s, and every new client of that
// listener was dropped meanwhile: a peer sending MaxPendingSCTP packets
// every 10 s kept everyone else out. A handshake pending for longer than
// staleHandshake now gives its slot to a newcomer.
func TestSCTPStaleHandshakesGiveWay(t *testing.T) {
	e := newCarrierEnv(t, Options{MaxPendingSCTP: 4})
	ctx := context.Background()
	for _, carrier := range []Carrier{CarrierSCTP, carrierSCTPDTLS} {
		t.Run(carrierName(carrier), func(t *testing.T) {
			u := e.urls[carrier]
			ua, err := net.ResolveUDPAddr("udp", u[strings.Index(u, "://")+3:])
			if err != nil {
				t.Fatal(err)
			}
			for range 4 {
				pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
				if err != nil {
					t.Fatal(err)
				}
				defer pc.Close()
				if carrier == CarrierSCTP {
					// A common header with verification tag 0, then an INIT
					// chunk header.
					pc.WriteTo([]byte{0x13, 0x88, 0x13, 0x88, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 4}, ua)
					continue
				}
				dc, err := dtls.ClientWithOptions(pc, ua,
					dtls.WithInsecureSkipVerify(true), // replaced by the pin
					dtls.WithVerifyPeerCertificate(func(raw [][]byte, _ [][]*x509.Certificate) error {
						return checkPin(raw, [][32]byte{e.cert.SHA256})
					}))
				if err != nil {
					t.Fatal(err)
				}
				hctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
				dc.HandshakeContext(hctx)
				cancel()
			}
			dctx, cancel := context.WithTimeout(ctx, 8*time.Second)
			defer cancel()
			c, err := Dial(dctx, u, ClientOptions{DTLSConfig: e.cert.ClientDTLSConfig(), Reconnect: Reconnect{Disabled: true}})
			if err != nil {
				t.Fatalf("a client after 4 abandoned handshakes, MaxPendingSCTP 4: %v", err)
			}
			defer c.Close()
			var out echoReq
			if err := c.Call(ctx, "echo/say", echoReq{Text: "x"}, &out); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Offers whose peers never connect held MaxPending for their 10 s, and
// every other client was answered 503 meanwhile: one client POSTing
// MaxPending offers every 10 s kept WebRTC closed to all. An offer
// pending for longer than staleHandshake now gives its slot to a
// newcomer; fresh ones still get 503 (TestWebRTCMaxPending).
func TestWebRTCStaleHandshakesGiveWay(t *testing.T) {
	s, err := NewServer(Options{Router: testRouter(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	hln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: s.WebRTCHandler(WebRTCOptions{LoopbackOnly: true, MaxPending: 2})}
	go hs.Serve(hln)
	t.Cleanup(func() { hs.Close() })
	endpoint := "http://" + hln.Addr().String() + "/rtc"
	for range 2 {
		body, _ := json.Marshal(gatheredOffer(t, ControlChannel))
		rsp, err := http.Post(endpoint, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		rsp.Body.Close()
		if rsp.StatusCode != http.StatusOK {
			t.Fatalf("an offer: %s", rsp.Status)
		}
	}
	time.Sleep(staleHandshake + 100*time.Millisecond)
	c, err := Dial(context.Background(), "webrtc+"+endpoint, ClientOptions{WebRTC: WebRTCOptions{LoopbackOnly: true}, Reconnect: Reconnect{Disabled: true}})
	if err != nil {
		t.Fatalf("a client after 2 abandoned offers, MaxPending 2: %v", err)
	}
	defer c.Close()
	var out echoReq
	if err := c.Call(context.Background(), "echo/say", echoReq{Text: "x"}, &out); err != nil {
		t.Fatal(err)
	}
	shutdownCutsHandshakes(t, s)
}

// An offer naming more than maxOfferCandidates ICE candidates is refused
// with 400 before a peer connection exists. Each remote candidate is a
// pair the server's ICE agent checks with STUN binding requests, about 8
// of them: one 62 KB offer of 1,000 made the server send 8,000 requests
// to addresses of the client's choosing, a reflector for anyone who can
// POST to the endpoint. The candidates are counted as pion's SDP parser
// reads the lines, which skips any '\r' before a line's type: counted as
// "\na=candidate:", 200 lines that began "\ra=candidate:" passed, and
// drew 1,600 STUN requests.
func TestWebRTCOfferCandidatesBounded(t *testing.T) {
	e := newCarrierEnv(t, Options{})
	const n = 200
	var got atomic.Int64
	var ports []int
	for range n {
		u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)})
		if err != nil {
			t.Fatal(err)
		}
		defer u.Close()
		ports = append(ports, u.LocalAddr().(*net.UDPAddr).Port)
		go func() {
			b := make([]byte, 2048)
			for {
				if _, _, err := u.ReadFrom(b); err != nil {
					return
				}
				got.Add(1)
			}
		}()
	}
	offer := gatheredOffer(t, ControlChannel)
	for _, prefix := range []string{"", "\r", "\r\r"} {
		var extra strings.Builder
		for i, port := range ports {
			fmt.Fprintf(&extra, "%sa=candidate:%d 1 udp 2130706431 127.0.0.2 %d typ host\r\n", prefix, 1000+i, port)
		}
		sdp := offer.SDP
		if i := strings.Index(sdp, "a=end-of-candidates"); i >= 0 {
			sdp = sdp[:i] + extra.String() + sdp[i:]
		} else {
			sdp += extra.String()
		}
		status := postOffer(t, e, sdp)
		time.Sleep(time.Second) // for STUN checks the server would start
		if status != http.StatusBadRequest || got.Load() != 0 {
			t.Errorf("an offer of %d candidates, their lines beginning %q: %d, %d STUN packets sent to them; want 400 and none", n, prefix, status, got.Load())
		}
	}
	webRTCStillServes(t, e)
}

// A native QUIC client that opens unidirectional streams before its
// control stream is closed at the first, with 1002
// HP_ERR_UNEXPECTED_STREAM, as one that opens them after it is. Nothing
// accepted them until the control stream came, so for handshakeTimeout
// quic-go kept what they carried, up to the connection's window (16 MiB,
// about 21 MiB of heap measured), for any number of connections.
func TestQUICUniStreamsBeforeControlStream(t *testing.T) {
	e := newCarrierEnv(t, Options{})
	tc := e.cert.ClientTLSConfig()
	tc.NextProtos = []string{ALPN}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	failures := e.srv.Metrics().HandshakeFailures
	qc, err := quic.DialAddr(ctx, e.urls[CarrierQUIC][len("quic://"):], tc, QUICConfig(0))
	if err != nil {
		t.Fatal(err)
	}
	defer qc.CloseWithError(0, "")
	for range 20 {
		str, err := qc.OpenUniStream()
		if err != nil {
			break // closed already
		}
		go func() {
			str.SetWriteDeadline(time.Now().Add(5 * time.Second))
			str.Write(make([]byte, 200<<10))
		}()
	}
	select {
	case <-qc.Context().Done():
	case <-time.After(3 * time.Second):
		t.Fatal("a QUIC connection that opened 20 uni streams before its control stream still open after 3 s")
	}
	var ae *quic.ApplicationError
	if err := context.Cause(qc.Context()); !errors.As(err, &ae) || !ae.Remote || ae.ErrorCode != quic.ApplicationErrorCode(wsframe.CloseProtocolError) || ae.ErrorMessage != unexpectedStreamReason {
		t.Errorf("closed with %v, want 1002 %s", err, unexpectedStreamReason)
	}
	waitFor(t, func() bool { return e.srv.Metrics().HandshakeFailures > failures })
	c := e.dial(t, CarrierQUIC, ClientOptions{})
	var out echoReq
	if err := c.Call(context.Background(), "echo/say", echoReq{Text: "x"}, &out); err != nil {
		t.Fatal(err)
	}
}

// dialPendingQUIC opens a QUIC connection to the env's QUIC listener with ALPN
// proto, and nothing on it.
func dialPendingQUIC(t *testing.T, e *carrierEnv, addr, proto string) (*quic.Conn, error) {
	t.Helper()
	tc := e.cert.ClientTLSConfig()
	tc.NextProtos = []string{proto}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	qc, err := quic.DialAddr(ctx, addr, tc, QUICConfig(0))
	if err == nil {
		t.Cleanup(func() { qc.CloseWithError(0, "") })
	}
	return qc, err
}

// quicClosedWith waits for qc to be closed by the server with code and
// reason.
func quicClosedWith(t *testing.T, qc *quic.Conn, what string, code quic.ApplicationErrorCode, reason string) {
	t.Helper()
	select {
	case <-qc.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: still open after 5 s, want closed with %d %s", what, code, reason)
	}
	var ae *quic.ApplicationError
	if err := context.Cause(qc.Context()); !errors.As(err, &ae) || !ae.Remote || ae.ErrorCode != code || ae.ErrorMessage != reason {
		t.Errorf("%s: closed with %v, want %d %s", what, err, code, reason)
	}
}

// QUIC connections without their control stream (native) or a
// WebTransport session (HTTP/3) could make the server buffer up to the
// connection's window (16 MiB) each, and any number of connections could
// be in that state. At most MaxPendingQUIC are: past it, while those are
// younger than staleHandshake, a newcomer is refused at its first packet
// with CONNECTION_REFUSED (no TLS handshake); once the oldest is stale, a
// newcomer takes its slot and it is closed with 1008
// HP_ERR_HANDSHAKE_STALE. On a listener not made by ListenQUIC the
// refusal comes once accepted: 1013 HP_ERR_TOO_MANY_HANDSHAKES.
//
// The table's clock stands still but when the test moves it past
// staleHandshake. On the wall clock the 4 handshakes that fill the table
// took up to 2.4 s at a load average of 12 to 16 under go test -race, and
// the oldest went stale before the newcomers meant to be refused came, which
// then took its slot (5 runs in 146).
func TestQUICStaleHandshakesGiveWay(t *testing.T) {
	const bound = 4
	e := newCarrierEnv(t, Options{MaxPendingQUIC: bound})
	for _, carrier := range streamCarriers {
		e.dial(t, carrier, ClientOptions{}).Close()
	}
	waitFor(t, func() bool { return e.srv.Peers() == 0 })
	time.Sleep(200 * time.Millisecond)
	base := runtime.NumGoroutine()
	advance := stopPendingClock(e.srv.quicPending)

	addr := e.urls[CarrierQUIC][len("quic://"):]
	protos := []string{http3.NextProtoH3, ALPN}
	var held []*quic.Conn
	for i := range bound {
		qc, err := dialPendingQUIC(t, e, addr, protos[i%2])
		if err != nil {
			t.Fatalf("pending connection %d of %d: %v", i, bound, err)
		}
		held = append(held, qc)
		waitPending(t, e.srv.quicPending, i+1)
	}
	failures := e.srv.Metrics().HandshakeFailures
	for i := range 2 * bound {
		qc, err := dialPendingQUIC(t, e, addr, protos[i%2])
		var te *quic.TransportError
		if !errors.As(err, &te) || !te.Remote || te.ErrorCode != quic.ConnectionRefused {
			t.Fatalf("connection %d past MaxPendingQUIC %d, all fresh: %v (%v), want CONNECTION_REFUSED", i, bound, err, qc != nil)
		}
	}
	if got := e.srv.Metrics().HandshakeFailures - failures; got != 2*bound {
		t.Errorf("%d refusals counted as handshake failures, want %d", got, 2*bound)
	}

	advance(staleHandshake)
	var out echoReq
	var clients []*Client
	for i, carrier := range streamCarriers {
		if i > 0 {
			// The client before gave its slot back once connected: one
			// more pending connection fills the table again.
			qc, err := dialPendingQUIC(t, e, addr, ALPN)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, qc)
			waitPending(t, e.srv.quicPending, bound)
		}
		c := e.dial(t, carrier, ClientOptions{Reconnect: Reconnect{Disabled: true}})
		clients = append(clients, c)
		if err := c.Call(context.Background(), "echo/say", echoReq{Text: "x"}, &out); err != nil {
			t.Fatal(err)
		}
		quicClosedWith(t, held[i], fmt.Sprintf("stale pending connection %d (%s), then a %s client", i, protos[i], carrierName(carrier)), staleHandshakeCode, staleHandshakeReason)
	}
	for _, qc := range held[2:] {
		if qc.Context().Err() != nil {
			t.Errorf("a pending connection younger than the ones evicted was closed: %v", context.Cause(qc.Context()))
		}
		qc.CloseWithError(0, "")
	}
	waitPending(t, e.srv.quicPending, 0) // the stale ones too

	// A listener without ListenQUIC's check before the handshake.
	tc := e.cert.ServerTLSConfig()
	tc.NextProtos = []string{ALPN, http3.NextProtoH3}
	ln, err := quic.ListenAddr("127.0.0.1:0", tc, QUICConfig(0))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go e.srv.ServeQUIC(ln)
	held = held[:0]
	for i := range bound {
		qc, err := dialPendingQUIC(t, e, ln.Addr().String(), protos[i%2])
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, qc)
		waitPending(t, e.srv.quicPending, i+1)
	}
	for i := range 2 {
		qc, err := dialPendingQUIC(t, e, ln.Addr().String(), protos[i%2])
		if err != nil {
			t.Fatal(err)
		}
		quicClosedWith(t, qc, "a connection past MaxPendingQUIC on a plain listener", tooManyHandshakesCode, tooManyHandshakesReason)
	}
	for _, qc := range held {
		qc.CloseWithError(0, "")
	}
	ln.Close()
	for _, c := range clients {
		c.Close()
	}
	settleWithin(t, e.srv, base, "after the pending connections", 8*time.Second)
}

// initialRefusals counts a connection's refusal once though its
// ClientHello's two Initial packets each ask for one, when the Initial
// packets of connections dialled together interleave (one client's
// concurrent dials did, and the refusals were counted twice); it remembers
// a bounded number of addresses.
func TestInitialRefusalsInterleaved(t *testing.T) {
	r := initialRefusals{within: time.Second}
	a := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1001}
	b := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1002}
	for i, tc := range []struct {
		addr *net.UDPAddr
		want bool
	}{{a, true}, {b, true}, {a, false}, {b, false}} {
		if got := r.first(tc.addr); got != tc.want {
			t.Errorf("packet %d from %v: first %v, want %v", i, tc.addr, got, tc.want)
		}
	}
	for port := range len(r.recent) {
		r.first(&net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: port})
	}
	if !r.first(a) {
		t.Errorf("an address %d refusals ago still remembered: the memory is unbounded", len(r.recent))
	}
}

// A repeat within the window is not counted again; past it, QUIC's
// counts again, for a client that dials again from the same port makes a
// new attempt, and SCTP's does not while each resend renews the window,
// for its INIT's resends come ever further apart.
func TestInitialRefusalsRenew(t *testing.T) {
	a := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1001}
	t0 := time.Now()
	for _, tc := range []struct {
		name  string
		renew bool
		want  []bool
	}{
		{"quic", false, []bool{true, false, true}},
		{"sctp", true, []bool{true, false, false}},
	} {
		r := initialRefusals{within: time.Second, renew: tc.renew}
		for i, at := range []time.Duration{0, 600 * time.Millisecond, 1200 * time.Millisecond} {
			if got := r.firstAt(a, t0.Add(at)); got != tc.want[i] {
				t.Errorf("%s: refusal at %v: first %v, want %v", tc.name, at, got, tc.want[i])
			}
		}
	}
}

// A client refused first past a pending bound, then, repeating its first
// packet, at its address's cap counts once in HandshakeFailures and once
// in RefusedPerAddress: an SCTP client whose INIT was dropped past
// MaxPendingSCTP and whose resend found its address at
// MaxConnectionsPerAddress (or a ClientHello's two Initial packets,
// refused for each). With one memory for both, the cap's refusal was
// taken for a repeat and not counted in RefusedPerAddress at all.
func TestRefusalCounterCountsTheCapOnce(t *testing.T) {
	s, err := NewServer(Options{Router: testRouter(), MaxConnectionsPerAddress: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	r := newRefusalCounter(sctpInitResends, true)
	a := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 1001}
	b := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2), Port: 1002}
	check := func(what string, failures, perAddress uint64) {
		t.Helper()
		if m := s.Metrics(); m.HandshakeFailures != failures || m.RefusedPerAddress != perAddress {
			t.Errorf("%s: HandshakeFailures %d, RefusedPerAddress %d; want %d, %d", what, m.HandshakeFailures, m.RefusedPerAddress, failures, perAddress)
		}
	}
	r.count(s, a, nil)
	check("a dropped past the pending bound", 1, 0)
	r.count(s, a, errTooManyFromAddress)
	check("a's resend refused at its address's cap", 1, 1)
	r.count(s, a, errTooManyFromAddress)
	r.count(s, a, nil)
	check("a's further resends", 1, 1)
	r.count(s, b, errTooManyFromAddress)
	r.count(s, b, nil)
	check("another client, at the cap, then past the pending bound", 2, 2)
}

// The bound caps what pending connections hold: n HTTP/3 connections
// that fill their window with streams for a WebTransport session that
// does not exist (webtransport-go keeps such streams, renewed by each new
// one, 5 s after the last) held about n windows, 21 MiB of heap each;
// with MaxPendingQUIC at 2 they hold about 2, whatever n.
func TestQUICPendingBoundCapsHeap(t *testing.T) {
	const bound, n, streams = 2, 12, 60 // 60 × 256 KiB: 15 MiB of each 16 MiB window
	e := newCarrierEnv(t, Options{MaxPendingQUIC: bound})
	e.dial(t, CarrierWebTransport, ClientOptions{}).Close()
	waitFor(t, func() bool { return e.srv.Peers() == 0 })
	heap := func() int64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	base := heap()
	addr := e.urls[CarrierQUIC][len("quic://"):]
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	payload := make([]byte, streamWindow-3) // shared, read only
	// A WebTransport stream's header: the frame type 0x41 and session 0.
	header := []byte{0x40, 0x41, 0}
	var wg sync.WaitGroup
	var conns []*quic.Conn
	for range n {
		qc, err := dialPendingQUIC(t, e, addr, http3.NextProtoH3)
		if err != nil {
			continue // refused past the bound
		}
		conns = append(conns, qc)
		for range streams {
			wg.Go(func() {
				str, err := qc.OpenStreamSync(ctx)
				if err != nil {
					return
				}
				str.SetWriteDeadline(time.Now().Add(8 * time.Second))
				str.Write(header)
				str.Write(payload)
			})
		}
	}
	var peak atomic.Int64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for ctx.Err() == nil {
			peak.Store(max(peak.Load(), heap()-base))
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	wg.Wait()
	time.Sleep(300 * time.Millisecond) // the last frames reach the server
	peak.Store(max(peak.Load(), heap()-base))
	cancel()
	<-sampled
	t.Logf("%d of %d connections accepted; peak heap +%d MiB", len(conns), n, peak.Load()>>20)
	if limit := int64(bound+4) * connectionWindow; peak.Load() > limit {
		t.Errorf("%d HTTP/3 connections filling their windows, MaxPendingQUIC %d: heap peaked %d MiB over the baseline, want under %d MiB ((bound+4) windows)", n, bound, peak.Load()>>20, limit>>20)
	}
	for _, qc := range conns {
		qc.CloseWithError(0, "")
	}
	deadline := time.Now().Add(5 * time.Second)
	for heap()-base > connectionWindow {
		if time.Now().After(deadline) {
			t.Fatalf("heap still %d MiB over the baseline 5 s after the connections closed", (heap()-base)>>20)
		}
		time.Sleep(100 * time.Millisecond)
	}
	c := e.dial(t, CarrierWebTransport, ClientOptions{})
	var out echoReq
	if err := c.Call(context.Background(), "echo/say", echoReq{Text: "x"}, &out); err != nil {
		t.Fatal(err)
	}
}

// Options.MaxConnections caps the connections open at once, across every
// carrier: past it each carrier refuses in its own way (503 on the HTTP
// ones, an *HTTPError to the Go client; 1013 HP_ERR_TOO_MANY_CONNECTIONS
// on native QUIC and SCTP), counted in RefusedConnections; a slot freed by
// a connection that ends goes to the next, and the gauge never passes the
// cap. Nothing bounded connections in total before: the descriptor limit
// bounds WebSocket only, and the UDP carriers share their sockets.
func TestMaxConnections(t *testing.T) {
	const limit = 2
	e := newCarrierEnv(t, Options{MaxConnections: limit})
	ctx := context.Background()
	gauge := func(want int) {
		t.Helper()
		waitFor(t, func() bool { return e.srv.Peers() == want && e.srv.Metrics().Connections == int64(want) })
	}
	var out echoReq
	for _, carrier := range append([]Carrier{CarrierWebSocket}, goCarriers...) {
		t.Run(carrierName(carrier), func(t *testing.T) {
			// One connection on another carrier: the cap counts them all.
			other := CarrierWebSocket
			if carrier == CarrierWebSocket {
				other = CarrierQUIC
			}
			first := e.dial(t, other, ClientOptions{})
			second := e.dial(t, carrier, ClientOptions{})
			gauge(limit)
			before := e.srv.Metrics()
			opts := ClientOptions{TLSConfig: e.cert.ClientTLSConfig(), DTLSConfig: e.cert.ClientDTLSConfig(),
				WebRTC: WebRTCOptions{LoopbackOnly: true}, Reconnect: Reconnect{Disabled: true}}
			c, err := Dial(ctx, e.urls[carrier], opts)
			if err == nil {
				c.Close()
				t.Fatalf("connection %d of MaxConnections %d accepted", limit+1, limit)
			}
			switch carrier {
			case CarrierQUIC, CarrierSCTP, carrierSCTPDTLS:
				var ce *CloseError
				if !errors.As(err, &ce) || ce.Code != wsframe.CloseTryAgainLater || ce.Reason != tooManyConnectionsReason {
					t.Errorf("past the cap: %v, want close 1013 %s", err, tooManyConnectionsReason)
				}
			default:
				var he *HTTPError
				if !errors.As(err, &he) || he.Status != http.StatusServiceUnavailable {
					t.Errorf("past the cap: %v, want HTTP 503", err)
				}
			}
			waitFor(t, func() bool {
				m := e.srv.Metrics()
				return m.RefusedConnections == before.RefusedConnections+1 && m.HandshakeFailures == before.HandshakeFailures+1
			})
			gauge(limit)
			second.Close()
			gauge(limit - 1)
			third := e.dial(t, carrier, ClientOptions{})
			if err := third.Call(ctx, "echo/say", echoReq{Text: "x"}, &out); err != nil {
				t.Fatalf("a connection once one had closed: %v", err)
			}
			gauge(limit)
			third.Close()
			first.Close()
			gauge(0)
		})
	}

	// The HTTP refusals say when to come back.
	t.Run("Retry-After", func(t *testing.T) {
		for range limit {
			e.dial(t, CarrierWebSocket, ClientOptions{})
		}
		gauge(limit)
		viaHTTP := "http://" + startServer(t, e.srv, true) + "/ws"
		raw := "http://" + strings.TrimPrefix(e.urls[CarrierWebSocket], "ws://")
		for _, u := range []string{raw, viaHTTP} {
			req, _ := http.NewRequest(http.MethodGet, u, nil)
			req.Header = http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"}, "Sec-Websocket-Version": {"13"},
				"Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="}, "Sec-Websocket-Protocol": {Subprotocol}}
			rsp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			rsp.Body.Close()
			if rsp.StatusCode != http.StatusServiceUnavailable || rsp.Header.Get("Retry-After") != retryAfterFull {
				t.Errorf("upgrade at %s past the cap: %s, Retry-After %q; want 503, %s", u, rsp.Status, rsp.Header.Get("Retry-After"), retryAfterFull)
			}
		}
		rsp, err := http.Post(strings.TrimPrefix(e.urls[CarrierWebRTC], "webrtc+"), "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		rsp.Body.Close()
		if rsp.StatusCode != http.StatusServiceUnavailable || rsp.Header.Get("Retry-After") != retryAfterFull {
			t.Errorf("WebRTC signalling past the cap: %s, Retry-After %q; want 503, %s", rsp.Status, rsp.Header.Get("Retry-After"), retryAfterFull)
		}
		tc := e.cert.ClientTLSConfig()
		tc.NextProtos = []string{http3.NextProtoH3}
		d := &webtransport.Transport{TLSClientConfig: tc, QUICConfig: QUICConfig(0)}
		defer d.Close()
		rsp, sess, err := d.Dial(ctx, e.urls[CarrierWebTransport], nil)
		if err == nil {
			sess.CloseWithError(0, "")
		}
		if rsp == nil || rsp.StatusCode != http.StatusServiceUnavailable || rsp.Header.Get("Retry-After") != retryAfterFull {
			t.Errorf("WebTransport CONNECT past the cap: %v, %v; want 503, Retry-After %s", rsp, err, retryAfterFull)
		}
	})
}

// Upgrades that pass the capacity check together are still held to the
// cap where a connection is counted (register): the ones past it are
// refused with 1013 once open, and the gauge never passes the cap. Here
// Authenticate, which runs after the check, holds every upgrade until all
// have passed it.
func TestMaxConnectionsConcurrent(t *testing.T) {
	const limit, n = 2, 12
	var arrived atomic.Int64
	all := make(chan struct{})
	e := newCarrierEnv(t, Options{MaxConnections: limit, Authenticate: func(*http.Request) (any, error) {
		if arrived.Add(1) == n {
			close(all)
		}
		select {
		case <-all:
		case <-time.After(5 * time.Second):
		}
		return nil, nil
	}})
	var peak atomic.Int64
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			peak.Store(max(peak.Load(), int64(e.srv.Peers())))
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	var wg sync.WaitGroup
	var ok atomic.Int64
	for i := range n {
		carrier := []Carrier{CarrierWebSocket, CarrierQUIC}[i%2]
		wg.Go(func() {
			opts := ClientOptions{TLSConfig: e.cert.ClientTLSConfig(), Reconnect: Reconnect{Disabled: true}}
			c, err := Dial(context.Background(), e.urls[carrier], opts)
			if err != nil {
				var he *HTTPError
				if CloseStatus(err) != wsframe.CloseTryAgainLater && !(errors.As(err, &he) && he.Status == http.StatusServiceUnavailable) {
					t.Errorf("%s past the cap: %v, want 503 or 1013", carrierName(carrier), err)
				}
				return
			}
			ok.Add(1)
			t.Cleanup(func() { c.Close() })
		})
	}
	wg.Wait()
	close(stop)
	<-watched
	if ok.Load() != limit || peak.Load() > limit || e.srv.Metrics().Connections != limit {
		t.Errorf("%d dials at once, MaxConnections %d: %d connected, %d open at the peak, gauge %d", n, limit, ok.Load(), peak.Load(), e.srv.Metrics().Connections)
	}
	if got := e.srv.Metrics().RefusedConnections; got != n-limit {
		t.Errorf("RefusedConnections %d, want %d", got, n-limit)
	}
}

// A WebRTC connection that passed signalling while there was room, and
// whose control channel opens once the cap is full, is refused where it is
// counted (register) with the close every other carrier gives there, 1013
// HP_ERR_TOO_MANY_CONNECTIONS: closing the peer connection at once aborted
// its SCTP association under the close notice, and the client saw 1006.
func TestMaxConnectionsWebRTCRefusal(t *testing.T) {
	entered := make(chan struct{})
	full := make(chan struct{})
	e := newCarrierEnv(t, Options{MaxConnections: 1, Authenticate: func(r *http.Request) (any, error) {
		if r.URL.Path == "/rtc" {
			close(entered) // past the capacity check, which runs first
			<-full
		}
		return nil, nil
	}})
	dialed := make(chan error, 1)
	go func() {
		opts := ClientOptions{WebRTC: WebRTCOptions{LoopbackOnly: true}, Reconnect: Reconnect{Disabled: true}}
		c, err := Dial(context.Background(), e.urls[CarrierWebRTC], opts)
		if err == nil {
			c.Close()
		}
		dialed <- err
	}()
	<-entered
	e.dial(t, CarrierWebSocket, ClientOptions{}) // fills the cap
	close(full)
	err := <-dialed
	var ce *CloseError
	if !errors.As(err, &ce) || ce.Code != wsframe.CloseTryAgainLater || ce.Reason != tooManyConnectionsReason {
		t.Fatalf("a WebRTC connection opened past the cap: %v, want close 1013 %s", err, tooManyConnectionsReason)
	}
	if got := e.srv.Metrics().RefusedConnections; got != 1 {
		t.Errorf("RefusedConnections %d, want 1", got)
	}
}

// stopPendingClock stops p's clock; advance moves it on by d.
func stopPendingClock(p *pendingHandshakes) (advance func(d time.Duration)) {
	now := time.Now()
	p.mu.Lock()
	p.now = func() time.Time { return now } // called with p.mu held
	p.mu.Unlock()
	return func(d time.Duration) {
		p.mu.Lock()
		now = now.Add(d)
		p.mu.Unlock()
	}
}

// waitPending waits until p holds n handshakes. A test that dials pending
// connections one after another waits for each to be accepted before the
// next: quic-go's Dial returns when the client has sent its Finished, and
// the server queues the connection for Accept once it has read it, from
// a goroutine of the connection's own, so two connections dialed back to
// back could be accepted in either order (the younger one was evicted as
// the oldest in 4 runs of 146 at a load average of 12 to 16).
func waitPending(t *testing.T, p *pendingHandshakes, n int) {
	t.Helper()
	waitFor(t, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.queue) == n
	})
}

// TestShutdownDropsPendingQUIC: a QUIC connection still without its
// control stream is a handshake in progress, dropped when Shutdown's ctx
// ends as SCTP's and WebRTC's are, not left for handshakeTimeout (10 s).
func TestShutdownDropsPendingQUIC(t *testing.T) {
	e := newCarrierEnv(t, Options{})
	qc, err := dialPendingQUIC(t, e, e.urls[CarrierQUIC][len("quic://"):], ALPN)
	if err != nil {
		t.Fatal(err)
	}
	// Accepted, and waiting for its control stream: a connection that
	// takes its slot before its goroutine has reached that wait is refused
	// as soon as that goroutine sees Shutdown begun, and Shutdown, having
	// nothing left to wait for, rightly returns nil before its ctx ends (a
	// 50 ms sleep before the goroutine's start made that happen every time).
	waitFor(t, func() bool {
		e.srv.quicPending.mu.Lock()
		pending := len(e.srv.quicPending.queue)
		e.srv.quicPending.mu.Unlock()
		return pending == 1 && handshakesInProgress(e.srv) == 1
	})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := e.srv.Shutdown(ctx); err == nil {
		t.Error("Shutdown returned nil with a connection still opening past its ctx")
	}
	select {
	case <-qc.Context().Done():
	case <-time.After(3 * time.Second):
		t.Fatal("a QUIC connection without its control stream still open 3 s after Shutdown's ctx ended")
	}
}

// gatheredOffer is the offer of a new WebRTC peer connection with one data
// channel, label, after ICE gathering (every candidate in it), as
// compat's signalling wants one. Nothing ever applies an answer to it: the
// tests that use it abandon the connection the server opens for it, which
// the test's end closes.
func gatheredOffer(t *testing.T, label string) *webrtc.SessionDescription {
	t.Helper()
	pc, err := WebRTCOptions{LoopbackOnly: true}.api(defaultSCTPRTOMax).NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	if _, err := pc.CreateDataChannel(label, nil); err != nil {
		t.Fatal(err)
	}
	return localOffer(t, pc)
}

// localOffer makes pc's offer its local description and returns it once
// ICE gathering is complete, with every candidate in it: compat's
// signalling takes one request, no trickle ICE.
func localOffer(t *testing.T, pc *webrtc.PeerConnection) *webrtc.SessionDescription {
	t.Helper()
	offer, err := pc.CreateOffer(nil)
	if err != nil {
		t.Fatal(err)
	}
	gathered := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(offer); err != nil {
		t.Fatal(err)
	}
	<-gathered
	return pc.LocalDescription()
}
