// Tests of what a client can make the server hold before its connection
// exists, at the entry points of WebRTC signalling, WebTransport, SCTP and
// HTTP/3: each is bounded, and given back when the handshake ends.

package compat

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotpath-go/hotpath/wsframe"
	"github.com/pion/sctp"
	"github.com/pion/webrtc/v4"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/webtransport-go"
)

// A signalling body that stalls after a whole JSON value (a Content-Length
// larger than what is sent, or a chunked body never ended) is still held to
// signalBodyTimeout. The handler lifted the read deadline once the decoder
// had its value, and net/http then read what was left of the body after
// the handler (up to 256 KiB, to keep the connection) with no deadline at
// all: the answer went out, and the connection and its goroutine stayed
// for as long as the client wanted, any number of them. An offer of the
// wrong type needs no ICE agent and no MaxPending slot, so nothing bounded
// them.
func TestWebRTCSignallingBodyStalledAfterTheOffer(t *testing.T) {
	defer func(d time.Duration) { signalBodyTimeout = d }(signalBodyTimeout)
	signalBodyTimeout = 300 * time.Millisecond
	e := newCarrierEnv(t, Options{Router: concurrencyRouter()})
	// The offer's peer connection, which the test keeps, is in the
	// baseline.
	offer, _ := json.Marshal(gatheredOffer(t, ControlChannel))
	base := goroutineBaseline(t, e, CarrierWebRTC)
	host := strings.TrimPrefix(strings.TrimSuffix(e.urls[CarrierWebRTC], "/rtc"), "webrtc+http://")
	bodies := []struct {
		name, body string
		want       int
	}{
		{"an answer", `{"type":"answer","sdp":"v=0"}`, http.StatusBadRequest},
		{"an offer", string(offer), http.StatusOK},
	}
	const each = 10
	var conns []net.Conn
	var names []string
	var wants []int
	for _, b := range bodies {
		for i := range each {
			nc, err := net.Dial("tcp", host)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			if i%2 == 0 {
				fmt.Fprintf(nc, "POST /rtc HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", host, len(b.body)+1000, b.body)
			} else {
				fmt.Fprintf(nc, "POST /rtc HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", host, len(b.body), b.body)
			}
			conns = append(conns, nc)
			names = append(names, b.name)
			wants = append(wants, b.want)
		}
	}
	for i, nc := range conns {
		nc.SetReadDeadline(time.Now().Add(hangBound))
		br := bufio.NewReader(nc)
		rsp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s, its body stalled after it: %v", names[i], err)
		}
		io.Copy(io.Discard, rsp.Body)
		rsp.Body.Close()
		// Answered 408 once the deadline passed, or before with what the
		// offer deserved: either way the connection then closes.
		if rsp.StatusCode != http.StatusRequestTimeout && rsp.StatusCode != wants[i] {
			t.Errorf("%s, its body stalled after it: %s, want %d or 408", names[i], rsp.Status, wants[i])
		}
		if _, err := br.ReadByte(); err != io.EOF {
			t.Errorf("%s, its body stalled after it: the connection still open %v after the answer (signalBodyTimeout %v): %v", names[i], hangBound, signalBodyTimeout, err)
		}
	}
	for _, nc := range conns {
		nc.Close()
	}
	// The offers' peer connections, never answered, end at
	// handshakeTimeout.
	settleWithin(t, e.srv, base, "after the stalled bodies", handshakeTimeout+hangBound)
}

// dialStalledSession opens a WebTransport session on a QUIC connection of
// its own and nothing on it: no control stream. The session and its
// connection are closed at the test's end.
func dialStalledSession(t *testing.T, e *carrierEnv) (*http.Response, *webtransport.Session, error) {
	t.Helper()
	tc := e.cert.ClientTLSConfig()
	tc.NextProtos = []string{http3.NextProtoH3}
	d := &webtransport.Transport{TLSClientConfig: tc, QUICConfig: QUICConfig(0)}
	t.Cleanup(func() { d.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()
	rsp, sess, err := d.Dial(ctx, e.urls[CarrierWebTransport], nil)
	if err == nil {
		t.Cleanup(func() { sess.CloseWithError(0, "") })
	}
	return rsp, sess, err
}

// A WebTransport session waiting for its control stream holds a slot of
// MaxPendingQUIC, as a native QUIC connection waiting for its own does.
// The connection's slot was given up as its session opened, and the
// session's wait (handshakeTimeout) was bounded by nothing: not
// MaxPendingQUIC, and not MaxConnections, which counts connections once
// their control stream has come. 100 sessions that never opened one were
// all accepted with MaxPendingQUIC 4, holding about 10 goroutines and
// 60 KB each on the server for 10 s, and a client could open more as the
// first ended.
func TestWebTransportSessionsWithoutControlStreamBounded(t *testing.T) {
	const max = 2
	e := newCarrierEnv(t, Options{MaxPendingQUIC: max})
	stopPendingClock(e.srv.quicPending) // none of the sessions grows stale
	var stalled []*webtransport.Session
	for i := range max {
		_, sess, err := dialStalledSession(t, e)
		if err != nil {
			t.Fatalf("session %d of MaxPendingQUIC %d: %v", i+1, max, err)
		}
		stalled = append(stalled, sess)
	}
	// Each holds its slot before its CONNECT is answered.
	for i := range 3 {
		rsp, _, err := dialStalledSession(t, e)
		if err == nil {
			t.Fatalf("session %d with %d waiting for their control stream, MaxPendingQUIC %d: accepted", max+i+1, max, max)
		}
		// Refused at the connection's first packet (the table is full),
		// or at its CONNECT.
		if rsp != nil && rsp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("session past MaxPendingQUIC: %s, want 503", rsp.Status)
		}
	}
	// A stalled session that ends gives its slot back.
	stalled[0].CloseWithError(0, "")
	waitPending(t, e.srv.quicPending, max-1)
	c := e.dial(t, CarrierWebTransport, ClientOptions{})
	var out echoReq
	if err := c.Call(context.Background(), "echo/say", echoReq{Text: "x"}, &out); err != nil {
		t.Fatal(err)
	}
	// Its slot freed once its control stream came.
	waitPending(t, e.srv.quicPending, max-1)
}

// Shutdown drops a WebTransport session still waiting for its control
// stream after handshakeShutdownGrace, as it does the other carriers'
// handshakes: it was not among them, and Shutdown waited out its
// handshakeTimeout (10 s), past a ctx of 5 s.
func TestShutdownDropsPendingWebTransportSession(t *testing.T) {
	e := newCarrierEnv(t, Options{})
	_, sess, err := dialStalledSession(t, e)
	if err != nil {
		t.Fatal(err)
	}
	shutdownCutsHandshakes(t, e.srv)
	select {
	case <-sess.Context().Done():
	case <-time.After(hangBound):
		t.Fatal("a session without its control stream still open after Shutdown returned")
	}
}

// A unidirectional stream in a WebTransport session before its control
// stream closes the session with 1002 HP_ERR_UNEXPECTED_STREAM, as one
// after it does, and as a native QUIC connection's does
// (TestQUICUniStreamsBeforeControlStream): nothing accepted it until the
// control stream came, so what it carried stayed in quic-go's buffers, up
// to the connection's window (16 MiB), for handshakeTimeout.
func TestWebTransportUniStreamBeforeControlStream(t *testing.T) {
	e := newCarrierEnv(t, Options{})
	_, sess, err := dialStalledSession(t, e)
	if err != nil {
		t.Fatal(err)
	}
	str, err := sess.OpenUniStream()
	if err != nil {
		t.Fatal(err)
	}
	str.Write(make([]byte, 64<<10))
	select {
	case <-sess.Context().Done():
	case <-time.After(handshakeTimeout + hangBound):
		t.Fatal("the session still open")
	}
	// An ended session's calls return its error.
	_, err = sess.AcceptStream(context.Background())
	var se *webtransport.SessionError
	if !errors.As(err, &se) || se.ErrorCode != webtransport.SessionErrorCode(wsframe.CloseProtocolError) || se.Message != unexpectedStreamReason {
		t.Errorf("a uni stream before the control stream: the session ended with %v, want 1002 %s", err, unexpectedStreamReason)
	}
}

// An offer of more than maxOfferMedia media sections is refused with 400
// before a peer connection exists. A hotpath offer has one, its data
// channels'; pion answers every section, so that one of 673 audio
// sections (a 62 KB body) took 43 ms of CPU and held 2 MiB of heap for its
// MaxPending slot (a plain offer: 1.5 ms, 110 KiB), and was answered with
// 160 KB.
func TestWebRTCOfferMediaSectionsBounded(t *testing.T) {
	e := newCarrierEnv(t, Options{})
	offer := gatheredOffer(t, ControlChannel)
	for _, prefix := range []string{"", "\r"} {
		var extra strings.Builder
		for i := range 100 {
			fmt.Fprintf(&extra, "%sm=audio 9 UDP/TLS/RTP/SAVPF 111\r\na=mid:a%d\r\na=rtpmap:111 opus/48000/2\r\na=recvonly\r\n", prefix, i)
		}
		if status := postOffer(t, e, offer.SDP+extra.String()); status != http.StatusBadRequest {
			t.Errorf("an offer of 101 media sections, their lines beginning %q: %d, want 400", prefix, status)
		}
	}
	webRTCStillServes(t, e)
}

// What an SCTP client sends on the unreliable stream (1) before it opens
// its control stream (0) is read and dropped: the connection does not exist
// yet, and nothing read the stream until it did, so pion kept it, up to
// the association's 1 MiB receive window, for the whole handshakeTimeout.
// 20 such associations held 32 MiB of the server's heap (about 1.6 MiB
// each, where Options.MaxPendingSCTP's documentation counts 13 KB), 400 MiB
// at the default 256. Here the client's queue drains while the association
// is still waiting for its control stream; it stopped at the server's
// window before. (One message larger than the window still parks its
// fragments in pion until the association ends: documented, not fixed.)
func TestSCTPUnreliableStreamBeforeControlStream(t *testing.T) {
	e := newCarrierEnv(t, Options{})
	u := e.urls[CarrierSCTP]
	ua, err := net.ResolveUDPAddr("udp", u[strings.Index(u, "://")+3:])
	if err != nil {
		t.Fatal(err)
	}
	nc, err := net.DialUDP("udp", nil, ua)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	a, err := sctp.ClientWithOptions(sctp.WithNetConn(nc), sctp.WithLoggerFactory(quietLogs))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Abort("")
	st, err := a.OpenStream(sctpUnreliableStream, sctp.PayloadTypeWebRTCBinary)
	if err != nil {
		t.Fatal(err)
	}
	msg := make([]byte, 1<<10)
	for range 2 << 10 { // 2 MiB, twice the server's window
		if _, err := st.Write(msg); err != nil {
			t.Fatal(err)
		}
	}
	awaitDrainedWhilePending(t, e.srv, a.BufferedAmount, "2 MiB sent on stream 1 before the control stream")
}

// The same on WebRTC: what a client sends on its unreliable channel before
// its control channel opens is read and dropped. Unread until the
// connection existed, it stayed in the association's 1 MiB receive window
// for handshakeTimeout, for an offer that held only its MaxPending slot
// (a plain pending offer holds about 110 KiB).
func TestWebRTCUnreliableChannelBeforeControlChannel(t *testing.T) {
	e := newCarrierEnv(t, Options{})
	pc, err := WebRTCOptions{LoopbackOnly: true}.api(defaultSCTPRTOMax).NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	ordered, retransmits := false, uint16(0)
	dc, err := pc.CreateDataChannel(UnreliableChannel, &webrtc.DataChannelInit{Ordered: &ordered, MaxRetransmits: &retransmits})
	if err != nil {
		t.Fatal(err)
	}
	opened := make(chan struct{})
	dc.OnOpen(func() { close(opened) })
	signalRaw(t, e, pc)
	select {
	case <-opened:
	case <-time.After(hangBound):
		t.Fatal("the unreliable channel did not open")
	}
	msg := make([]byte, 1<<10)
	for range 2 << 10 { // 2 MiB, twice the server's window
		if err := dc.Send(msg); err != nil {
			t.Fatal(err)
		}
	}
	awaitDrainedWhilePending(t, e.srv, func() int { return int(dc.BufferedAmount()) }, "2 MiB sent on the unreliable channel before the control channel")
}

// awaitDrainedWhilePending waits for what the client queued (buffered) to
// drain, which a server reading and dropping it allows in a few round
// trips, and fails unless it did while the connection's handshake was
// still pending. Unread, it stayed at the server's window until the
// handshake was given up at handshakeTimeout; the wait is half of that.
func awaitDrainedWhilePending(t *testing.T, s *Server, buffered func() int, what string) {
	t.Helper()
	deadline := time.Now().Add(handshakeTimeout / 2)
	for buffered() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n, pending := buffered(), handshakesInProgress(s); n > 0 || pending != 1 {
		t.Fatalf("%s: %d bytes still queued on the client after %v, %d handshakes pending on the server; want none queued, 1 pending", what, n, handshakeTimeout/2, pending)
	}
}

// handshakesInProgress counts s's carrier handshakes in progress, those
// Shutdown would drop.
func handshakesInProgress(s *Server) int {
	s.handshakes.mu.Lock()
	defer s.handshakes.mu.Unlock()
	return len(s.handshakes.m)
}

// postOffer posts an offer of sdp to e's WebRTC signalling endpoint and
// returns the answer's HTTP status.
func postOffer(t *testing.T, e *carrierEnv, sdp string) int {
	t.Helper()
	body, _ := json.Marshal(webrtc.SessionDescription{Type: webrtc.SDPTypeOffer, SDP: sdp})
	rsp, err := http.Post(strings.TrimPrefix(e.urls[CarrierWebRTC], "webrtc+"), "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	rsp.Body.Close()
	return rsp.StatusCode
}

// webRTCStillServes dials e over WebRTC and makes one call: what a test
// sent before did not stop the endpoint.
func webRTCStillServes(t *testing.T, e *carrierEnv) {
	t.Helper()
	c := e.dial(t, CarrierWebRTC, ClientOptions{})
	var out echoReq
	if err := c.Call(context.Background(), "echo/say", echoReq{Text: "x"}, &out); err != nil {
		t.Fatal(err)
	}
}

// signalRaw signals pc's offer, with every candidate, to e's WebRTC
// endpoint and applies the answer.
func signalRaw(t *testing.T, e *carrierEnv, pc *webrtc.PeerConnection) {
	t.Helper()
	body, _ := json.Marshal(localOffer(t, pc))
	rsp, err := http.Post(strings.TrimPrefix(e.urls[CarrierWebRTC], "webrtc+"), "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var answer webrtc.SessionDescription
	err = json.NewDecoder(rsp.Body).Decode(&answer)
	rsp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := pc.SetRemoteDescription(answer); err != nil {
		t.Fatal(err)
	}
}

// A WebRTC connection closed before its control channel opened (here for
// a channel PROTOCOL.md §8.2 does not have; also one whose ICE or DTLS
// failed) gives its MaxPending slot back at once. Its handshake waited on
// the control channel and its timeout only, so the slot, and the
// handshake Shutdown waits for, stayed for handshakeTimeout after the peer
// connection had closed.
func TestWebRTCClosedBeforeControlChannelFreesItsSlot(t *testing.T) {
	e := newCarrierEnv(t, Options{})
	pc, err := WebRTCOptions{LoopbackOnly: true}.api(defaultSCTPRTOMax).NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	if _, err := pc.CreateDataChannel("other", nil); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	var once sync.Once
	pc.OnConnectionStateChange(func(st webrtc.PeerConnectionState) {
		if st == webrtc.PeerConnectionStateFailed || st == webrtc.PeerConnectionStateClosed || st == webrtc.PeerConnectionStateDisconnected {
			once.Do(func() { close(closed) })
		}
	})
	signalRaw(t, e, pc)
	if n := handshakesInProgress(e.srv); n != 1 {
		t.Fatalf("%d handshakes pending once signalled, want 1", n)
	}
	// The client sees the server's ABORT within a round trip; the slot
	// was held for handshakeTimeout.
	deadline := time.Now().Add(handshakeTimeout / 2)
	for handshakesInProgress(e.srv) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if handshakesInProgress(e.srv) != 0 {
		select {
		case <-closed:
			t.Fatalf("a peer connection the server closed for its channel \"other\": its handshake still pending %v later", handshakeTimeout/2)
		default:
			t.Fatalf("the server did not close the peer connection for its channel \"other\"")
		}
	}
}

// An HTTP/3 request that is no WebTransport CONNECT (a GET, say) leaves its
// connection's MaxPendingQUIC slot with the connection: the slot a
// connection's first session takes over would otherwise go with a request
// that opens none, and the connection, still without a session, would
// stay for webTransportIdle outside the bound.
func TestHTTP3RequestKeepsItsConnectionPending(t *testing.T) {
	e := newCarrierEnv(t, Options{MaxPendingQUIC: 1})
	stopPendingClock(e.srv.quicPending)
	tc := e.cert.ClientTLSConfig()
	tc.NextProtos = []string{http3.NextProtoH3}
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()
	addr := e.urls[CarrierQUIC][len("quic://"):]
	qc, err := quic.DialAddr(ctx, addr, tc, QUICConfig(0))
	if err != nil {
		t.Fatal(err)
	}
	defer qc.CloseWithError(0, "")
	d := &webtransport.Transport{TLSClientConfig: tc, QUICConfig: QUICConfig(0)}
	cc, err := d.NewClientConn(qc)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.urls[CarrierWebTransport], nil)
	rsp, err := cc.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	rsp.Body.Close()
	if rsp.StatusCode != http.StatusBadRequest {
		t.Errorf("a GET: %s, want 400", rsp.Status)
	}
	if qc2, err := quic.DialAddr(ctx, addr, tc, QUICConfig(0)); err == nil {
		qc2.CloseWithError(0, "")
		t.Fatal("a second connection accepted while the first, MaxPendingQUIC 1, had made a GET and no session")
	}
}
