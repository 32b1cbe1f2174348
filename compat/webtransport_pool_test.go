package compat

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotpath-go/hotpath/wsframe"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
	"github.com/quic-go/quic-go/quicvarint"
	"github.com/quic-go/webtransport-go"
)

// pooledConfig is the WebTransport configuration of a test's client that
// pools sessions: any limit of its own sent in its SETTINGS turns
// WebTransport's flow control on, with the server's.
var pooledConfig = &webtransport.Config{MaxIncomingStreams: 16, MaxIncomingData: 1 << 20}

// dialPooled has Dial open its WebTransport sessions on c, side by side,
// until the test ends.
func dialPooled(t *testing.T, c *h3Client) {
	t.Helper()
	dial := func(ctx context.Context, u string, h http.Header) (*http.Response, *webtransport.Session, error) {
		return c.cc.Dial(ctx, u, h)
	}
	if !testHookWebTransportDial.CompareAndSwap(nil, &dial) {
		t.Fatal("testHookWebTransportDial in use")
	}
	t.Cleanup(func() { testHookWebTransportDial.Store(nil) })
}

// One HTTP/3 connection carries several WebTransport sessions at once, as
// a browser pooling them opens them: each is a Peer of its own, counted by
// address as a connection, makes calls and joins a room, and one closed
// leaves the others working on the connection. webtransport-go refused a
// second session open at once on a connection without its flow control,
// which the server did not offer.
func TestWebTransportPooledSessions(t *testing.T) {
	e := newCarrierEnv(t, Options{MaxConnectionsPerAddress: 3})
	u := e.urls[CarrierWebTransport]
	c, err := dialH3(t, e, hostOf(u), pooledConfig)
	if err != nil {
		t.Fatal(err)
	}
	dialPooled(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	clients := make([]*Client, 3)
	got := make([]chan string, len(clients))
	for i := range clients {
		cl, err := e.dialURL(u)
		if err != nil {
			t.Fatalf("session %d on the connection: %v", i, err)
		}
		t.Cleanup(func() { cl.Close() })
		clients[i] = cl
		got[i] = make(chan string, 4)
		cl.OnRoom("pool", "hi", func(m Message) {
			var s string
			m.Decode(&s)
			got[i] <- s
		})
		var out echoReq
		if err := cl.Call(ctx, "echo/say", echoReq{Text: "x"}, &out); err != nil || out.Text != "x" {
			t.Fatalf("session %d's call: %+v %v", i, out, err)
		}
		if n, err := cl.Join(ctx, "pool"); err != nil || n != i+1 {
			t.Fatalf("session %d's join: %d members, %v; want %d", i, n, err, i+1)
		}
	}
	if n := e.srv.Peers(); n != len(clients) {
		t.Fatalf("%d Peers, want one per session", n)
	}
	if n, _ := e.srv.addrCount(loopback); n != len(clients) {
		t.Fatalf("%d counted from 127.0.0.1, want one per session", n)
	}
	// MaxConnectionsPerAddress counts each session: a fourth is refused.
	if cl, err := e.dialURL(u); CloseStatus(err) != 0 || httpStatus(err) != http.StatusServiceUnavailable {
		if cl != nil {
			cl.Close()
		}
		t.Fatalf("a fourth session, MaxConnectionsPerAddress 3: %v, want 503", err)
	}

	// Closing one leaves the others at work.
	clients[1].Close()
	waitUntil(t, "the closed session's Peer gone", func() bool { return e.srv.Peers() == 2 })
	if err := c.qc.Context().Err(); err != nil {
		t.Fatalf("the HTTP/3 connection closed with a session: %v", context.Cause(c.qc.Context()))
	}
	if err := clients[0].Emit("pool", "hi", "after", true); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-got[2]:
		if s != "after" {
			t.Fatalf("the third session got %q, want the first's emit", s)
		}
	case <-ctx.Done():
		t.Fatal("the first session's emit did not reach the third after the second closed")
	}
	for _, i := range []int{0, 2} {
		var out echoReq
		if err := clients[i].Call(ctx, "echo/say", echoReq{Text: "y"}, &out); err != nil || out.Text != "y" {
			t.Fatalf("session %d's call after the second closed: %+v %v", i, out, err)
		}
	}
	waitUntil(t, "two counted from 127.0.0.1", func() bool { n, _ := e.srv.addrCount(loopback); return n == 2 })
	clients[0].Close()
	clients[2].Close()
	waitUntil(t, "the Peers gone", func() bool { return e.srv.Peers() == 0 })
	c.qc.CloseWithError(0, "")
	noAddressCounted(t, e.srv, "after the HTTP/3 connection closed")
}

// httpStatus is the status of an *HTTPError, 0 for any other error.
func httpStatus(err error) int {
	if he, ok := err.(*HTTPError); ok {
		return he.Status
	}
	return 0
}

// countingAuth counts the calls of Authenticate, which refuses a
// request with refuseHeader.
func countingAuth(n *atomic.Int32) func(*http.Request) (any, error) {
	return func(r *http.Request) (any, error) {
		n.Add(1)
		if r.Header.Get(refuseHeader) != "" {
			return nil, &HTTPError{Status: http.StatusForbidden, Message: "no"}
		}
		return nil, nil
	}
}

// The sessions of one HTTP/3 connection are bounded, opening ones
// included: past maxPooledSessions a CONNECT is refused with 429 before
// any hook sees it, counted as a failed handshake, and the connection and
// its sessions live on; once one ends, another opens.
func TestWebTransportPooledSessionsBounded(t *testing.T) {
	var auths atomic.Int32
	e := newCarrierEnv(t, Options{Authenticate: countingAuth(&auths)})
	u := e.urls[CarrierWebTransport]
	c, err := dialH3(t, e, hostOf(u), pooledConfig)
	if err != nil {
		t.Fatal(err)
	}
	sessions := make([]*webtransport.Session, maxPooledSessions)
	for i := range sessions {
		sessions[i] = c.open(t, e, u, i+1)
	}
	before, calls := e.srv.Metrics(), auths.Load()
	sess, status, err := c.session(u, nil)
	if sess != nil || status != http.StatusTooManyRequests {
		t.Fatalf("session %d on one connection: %d %v, want 429", maxPooledSessions+1, status, err)
	}
	if n := auths.Load(); n != calls {
		t.Errorf("Authenticate called %d times for the refused session, want none", n-calls)
	}
	if m := e.srv.Metrics(); m.HandshakeFailures != before.HandshakeFailures+1 {
		t.Errorf("HandshakeFailures +%d, want +1", m.HandshakeFailures-before.HandshakeFailures)
	}
	for i, s := range sessions {
		if err := s.Context().Err(); err != nil {
			t.Fatalf("session %d ended by the refusal: %v", i, context.Cause(s.Context()))
		}
	}
	sessions[0].CloseWithError(0, "")
	waitUntil(t, "the closed session's Peer gone", func() bool { return e.srv.Peers() == maxPooledSessions-1 })
	c.open(t, e, u, maxPooledSessions)
}

// A client without WebTransport's flow control gets one session at a
// time on a connection, as webtransport-go serves it: a second is refused
// with 429 before any hook sees it. webtransport-go's own refusal came
// after Authenticate, and flushed a 200 before it reset the stream (http3's
// HTTPStream), so the client could read a session that then ended. A
// session that ended, and a request refused, give their place back.
func TestWebTransportSecondSessionWithoutFlowControl(t *testing.T) {
	var auths atomic.Int32
	e := newCarrierEnv(t, Options{Authenticate: countingAuth(&auths)})
	u := e.urls[CarrierWebTransport]
	c, err := dialH3(t, e, hostOf(u), nil)
	if err != nil {
		t.Fatal(err)
	}
	first := c.open(t, e, u, 1)
	calls := auths.Load()
	if sess, status, err := c.session(u, nil); sess != nil || status != http.StatusTooManyRequests {
		t.Fatalf("a second session without flow control: %d %v, want 429", status, err)
	}
	if n := auths.Load(); n != calls {
		t.Errorf("Authenticate called %d times for the refused session, want none", n-calls)
	}
	first.CloseWithError(0, "")
	waitUntil(t, "the first session's Peer gone", func() bool { return e.srv.Peers() == 0 })
	if sess, status, err := c.session(u, http.Header{refuseHeader: {"1"}}); sess != nil || status != http.StatusForbidden {
		t.Fatalf("a session Authenticate refuses: %d %v, want 403", status, err)
	}
	c.open(t, e, u, 1)
}

// sessionIDs has Authenticate learn the session ID of each WebTransport
// session as the server sees it, in the order the requests come: the
// stream ID of its CONNECT request (webtransport-go's Upgrade takes it so,
// and does not expose it), which http3's request body tells. Each
// session's Peer has its ID as identity. A body without it refuses the
// request: the test's dial fails, and says why.
func sessionIDs() (auth func(*http.Request) (any, error), ids <-chan quic.StreamID) {
	ch := make(chan quic.StreamID, 8)
	return func(r *http.Request) (any, error) {
		b, ok := r.Body.(interface{ StreamID() quic.StreamID })
		if !ok {
			return nil, &HTTPError{Status: http.StatusForbidden, Message: fmt.Sprintf("the request body (%T) has no StreamID: the test cannot learn the session ID", r.Body)}
		}
		ch <- b.StreamID()
		return b.StreamID(), nil
	}, ch
}

// nextSessionID returns the session ID of the session that just opened,
// which sessionIDs learned before the session's CONNECT was answered.
func nextSessionID(t *testing.T, ids <-chan quic.StreamID, what string) quic.StreamID {
	t.Helper()
	select {
	case id := <-ids:
		// A client-initiated bidirectional stream, as RFC 9220 has a
		// CONNECT request's.
		if id%4 != 0 {
			t.Fatalf("%s's session ID %d is no client-initiated bidirectional stream", what, id)
		}
		return id
	case <-time.After(hangBound):
		t.Fatalf("%s opened without Authenticate learning its session ID", what)
		return 0
	}
}

// A pooled session whose client opens a unidirectional stream, which
// PROTOCOL.md §8.2 forbids, ends alone, and both ends read why: 1002
// HP_ERR_UNEXPECTED_STREAM, the server's close notice, as on a session
// alone on its connection. With a limit of 0 on such streams
// (pooledFlowControl) webtransport-go ended the session itself
// (WT_FLOW_CONTROL_ERROR) before the server saw the stream, resetting
// the session's CONNECT stream and its control stream: the server's Peer
// ended with 1002 HP_ERR_FLOW_CONTROL, and the client with 1006. The
// other session on the connection goes on working, the connection stays
// open, and nothing of the ended session stays behind: once another
// session takes its place, the process has no more goroutines than with
// the two it had.
func TestWebTransportPooledUniStream(t *testing.T) {
	type end struct {
		p   *Peer
		err error
	}
	ended := make(chan end, 4)
	auth, ids := sessionIDs()
	e := newCarrierEnv(t, Options{Authenticate: auth, OnDisconnect: func(p *Peer, err error) { ended <- end{p, err} }})
	u := e.urls[CarrierWebTransport]
	c, err := dialH3(t, e, hostOf(u), pooledConfig)
	if err != nil {
		t.Fatal(err)
	}
	dialPooled(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dial := func(what string) *Client {
		t.Helper()
		cl, err := e.dialURL(u)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		t.Cleanup(func() { cl.Close() })
		var out echoReq
		if err := cl.Call(ctx, "echo/say", echoReq{Text: "x"}, &out); err != nil {
			t.Fatalf("%s's call: %v", what, err)
		}
		return cl
	}
	first := dial("the first session")
	firstID := nextSessionID(t, ids, "the first session")
	second := dial("the second session")
	secondID := nextSessionID(t, ids, "the second session")
	if secondID == firstID {
		t.Fatalf("both sessions have ID %d", firstID)
	}
	t.Logf("session IDs: %d, %d", firstID, secondID)
	before := runtime.NumGoroutine()

	str, err := c.qc.OpenUniStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	str.Write(quicvarint.Append(quicvarint.Append(nil, 0x54), uint64(firstID))) // a WebTransport stream of the first session
	str.Write([]byte("stray"))
	select {
	case end := <-ended:
		if id := end.p.Identity(); id != firstID {
			t.Fatalf("the session of ID %v ended, want the first's, %d", id, firstID)
		}
		if ce, ok := errors.AsType[*CloseError](end.err); !ok || ce.Code != wsframe.CloseProtocolError || ce.Reason != unexpectedStreamReason || ce.Remote {
			t.Errorf("the server's connection of the session that opened a unidirectional stream ended with %v, want its own 1002 %s", end.err, unexpectedStreamReason)
		}
	case <-ctx.Done():
		t.Fatal("the session that opened a unidirectional stream was not ended")
	}
	var dropped error
	waitUntil(t, "the first session's client disconnected", func() bool { _, dropped = first.current(); return dropped != nil })
	if ce, ok := errors.AsType[*CloseError](dropped); !ok || ce.Code != wsframe.CloseProtocolError || ce.Reason != unexpectedStreamReason || !ce.Remote {
		t.Errorf("the first session's client ended with %v, want the server's 1002 %s", dropped, unexpectedStreamReason)
	}
	var out echoReq
	if err := second.Call(ctx, "echo/say", echoReq{Text: "y"}, &out); err != nil || out.Text != "y" {
		t.Fatalf("the second session's call after the first ended: %+v %v", out, err)
	}
	if err := c.qc.Context().Err(); err != nil {
		t.Fatalf("the HTTP/3 connection closed with the session: %v", context.Cause(c.qc.Context()))
	}
	first.Close()
	dial("a third session")
	checkGoroutinesBack(t, before, hangBound, "with two sessions again")
}

// A session webtransport-go ended for the other end's breach of its flow
// control reads as 1002 HP_ERR_FLOW_CONTROL with what webtransport-go
// said, this end's own close; the other end's error, and another HTTP/3
// error, are not read so. TestWebTransportPooledUniStream no longer
// meets it: a pooled session's limits are QUIC's, which bind first.
func TestFlowControlViolationReads1002(t *testing.T) {
	own := &http3.Error{ErrorCode: http3.ErrCode(webtransport.WTFlowControlErrorCode), ErrorMessage: "webtransport: peer opened more than 0 streams"}
	ce := flowControlViolation(fmt.Errorf("session: %w", own))
	if ce == nil || ce.Code != wsframe.CloseProtocolError || ce.Reason != flowControlReason+" ("+own.ErrorMessage+")" || ce.Remote {
		t.Errorf("webtransport-go's own WT_FLOW_CONTROL_ERROR: %v, want this end's 1002 %s (%s)", ce, flowControlReason, own.ErrorMessage)
	}
	for _, err := range []error{
		&http3.Error{ErrorCode: http3.ErrCode(webtransport.WTFlowControlErrorCode), Remote: true},
		&http3.Error{ErrorCode: http3.ErrCodeDatagramError},
		errors.New("other"),
	} {
		if ce := flowControlViolation(err); ce != nil {
			t.Errorf("%v read as %v, want no flow control violation", err, ce)
		}
	}
}
