package compat

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/corkwriter"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/wsframe"
)

// A compressed server Ping that inflates past the carrier's message limit
// (256 KiB on WebRTC) is answered when its Pong fits that limit as it
// travels, compressed, and the server's maxMessage (1 MiB) inflated: the
// server takes such a Pong. The client checked the carrier's limit
// against the plain Pong and closed the connection with 1009.
func TestClientPongCompressedWithinCarrierLimit(t *testing.T) {
	peers := make(chan *Peer, 1)
	e := newCarrierEnv(t, Options{OnConnect: func(p *Peer) { peers <- p }})
	d, err := RouterDictionary(testRouter())
	if err != nil {
		t.Fatal(err)
	}
	c := e.dial(t, CarrierWebRTC, ClientOptions{Dictionary: d, Reconnect: Reconnect{Disabled: true}})
	p := <-peers
	waitFor(t, func() bool { return p.dict.Load() != nil })
	ping := pingPastTheChannelLimit(t, p.dict.Load())
	before := e.srv.Metrics().MessagesIn
	if st := p.sendPacket(ping); st != corkwriter.Sent && st != corkwriter.Queued {
		t.Fatalf("sending the Ping: %v", st)
	}
	// The Ping goes before the call's answer: a client that closed on it
	// fails the call.
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()
	var out []byte
	if err := c.Call(ctx, "echo/raw", []byte("x"), &out); err != nil {
		t.Fatalf("a call after the Ping: %v", err)
	}
	// The server read the Pong and the call: two messages.
	deadline := time.Now().Add(hangBound)
	for e.srv.Metrics().MessagesIn < before+2 {
		if time.Now().After(deadline) {
			t.Fatalf("the server read %d messages after its Ping, want the Pong and the call", e.srv.Metrics().MessagesIn-before)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := c.Call(ctx, "echo/raw", []byte("x"), &out); err != nil {
		t.Fatalf("a call after the Pong: %v", err)
	}
}

// Close ends a reconnected connection whose server has not sent its
// capabilities without waiting for the answer to its close: nothing but
// the client's own capabilities has left on it (calls, emits and events
// wait for the server's), so there is nothing for the answer to confirm.
// It ran the handshake, and against a server silent since its upgrade
// waited closeTimeout (3 s) for an answer that never came. The test
// checks that decision (no handshake expired); the bound on Close only
// catches a hang. A call waiting for the capabilities fails.
// TestCloseWhileAwaitingCapabilitiesSendsItsClose checks the server's
// side.
func TestCloseWhileAwaitingCapabilities(t *testing.T) {
	_, addr := newTestServer(t, Options{})
	ln, first := hangAfterFirst(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()
	c, err := Dial(ctx, "ws://"+ln.Addr().String()+"/ws", ClientOptions{
		Logger: slog.New(slog.DiscardHandler), ConnectTimeout: time.Minute, IdleTimeout: time.Minute,
		Reconnect: Reconnect{MinDelay: 10 * time.Millisecond, MaxDelay: 20 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	dialed, err := c.current()
	if err != nil {
		t.Fatal(err)
	}
	(<-first).Close()
	var cc *clientConn
	waitFor(t, func() bool {
		cc, _ = c.current()
		return cc != nil && cc != dialed
	})
	if cc.isReady() {
		t.Fatal("the hung server's connection is ready")
	}
	called := make(chan error, 1)
	go func() { called <- c.Call(ctx, "echo/raw", []byte("x"), nil) }()
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(hangBound):
		t.Fatal("Close still waiting")
	}
	if link := cc.link.(*wsConn); link.closeExpired {
		t.Error("Close waited out the closing handshake of a connection that never got the server's capabilities")
	}
	select {
	case err := <-called:
		if !errors.Is(err, ErrDisconnected) && !errors.Is(err, ErrClosed) {
			t.Errorf("a call waiting for the capabilities at Close: %v, want ErrDisconnected or ErrClosed", err)
		}
	case <-time.After(hangBound):
		t.Fatal("a call waiting for the capabilities still waiting after Close")
	}
}

// closeCarriers are the carriers on which a client's close reaches a
// server that has not sent its capabilities yet: every one. On
// WebTransport the code comes in the session's close, or in the QUIC
// connection's, which the client closes right after it with the same
// code (wtTransport.closeTransport): the connection's close used to
// carry HTTP/3's 0x100, and when it overtook the session's the server
// saw 1006.
var closeCarriers = []Carrier{CarrierWebSocket, CarrierQUIC, CarrierWebTransport, CarrierSCTP, carrierSCTPDTLS, CarrierWebRTC}

// closeWayCarriers are one carrier for each of the four ways a link
// closes: wsConn, a carrier whose close carries the code (QUIC), one
// whose does not (SCTP), and WebTransport's session and QUIC connection,
// each with the code. For the tests that wait out a ConnectTimeout on
// each.
var closeWayCarriers = []Carrier{CarrierWebSocket, CarrierQUIC, CarrierWebTransport, CarrierSCTP}

// eachHeldConnect runs fn as a subtest for each carrier, on one
// heldConnectEnv, and then checks that the goroutines of the env, its
// clients and their connections are gone: what says after what.
func eachHeldConnect(t *testing.T, carriers []Carrier, what string, fn func(t *testing.T, e *heldConnectEnv, carrier Carrier)) {
	before := runtime.NumGoroutine()
	t.Run("carriers", func(t *testing.T) {
		e := newHeldConnectEnv(t)
		for _, carrier := range carriers {
			t.Run(carrierName(carrier), func(t *testing.T) { fn(t, e, carrier) })
		}
	}) // the env's listeners close with the subtest
	checkGoroutinesBack(t, before, hangBound, what)
}

// heldConnectEnv is a carrier env whose OnConnect, while hold has a
// channel, sends the peer on held and waits for the channel to close:
// the server reads nothing of that connection meanwhile, and sends no
// capabilities. ends gets every connection's end.
type heldConnectEnv struct {
	*carrierEnv
	hold atomic.Pointer[chan struct{}]
	held chan *Peer
	ends chan peerEnd
}

type peerEnd struct {
	p   *Peer
	err error
}

func newHeldConnectEnv(t *testing.T) *heldConnectEnv {
	e := &heldConnectEnv{held: make(chan *Peer, 1), ends: make(chan peerEnd, 16)}
	e.carrierEnv = newCarrierEnv(t, Options{
		OnConnect: func(p *Peer) {
			if release := e.hold.Load(); release != nil {
				e.held <- p
				<-*release
			}
		},
		OnDisconnect: func(p *Peer, err error) { e.ends <- peerEnd{p, err} },
	})
	return e
}

// awaitEnd returns the error p ended with.
func (e *heldConnectEnv) awaitEnd(t *testing.T, p *Peer) error {
	t.Helper()
	timeout := time.After(hangBound)
	for {
		select {
		case end := <-e.ends:
			if end.p == p {
				return end.err
			}
		case <-timeout:
			t.Fatal("the held connection has not ended")
		}
	}
}

// holdConnects has OnConnect hold the connections made from now on,
// reading nothing, until release, which t's end calls too.
func (e *heldConnectEnv) holdConnects(t *testing.T) (release func()) {
	ch := make(chan struct{})
	e.hold.Store(&ch)
	release = sync.OnceFunc(func() { close(ch) })
	t.Cleanup(release)
	return release
}

// awaitHeld returns the connection OnConnect holds, failing t with what
// when none comes; the connections made after it are served.
func (e *heldConnectEnv) awaitHeld(t *testing.T, what string) *Peer {
	t.Helper()
	select {
	case p := <-e.held:
		e.hold.Store(nil)
		return p
	case <-time.After(hangBound):
		t.Fatal(what)
		return nil
	}
}

// dropPeers closes every connection the server has, for its clients to
// reconnect.
func (e *heldConnectEnv) dropPeers() {
	for _, p := range e.srv.snapshotPeers() {
		p.closeWith(wsframe.CloseInternalError, "drop")
	}
}

// wantCloseUnawaited fails t unless closed, closed as a Client's Close
// returns, comes within half of closeTimeout, the time a Close that waits
// for the held server's answer would take: the bound tells the two
// apart with a 2x margin. It waits for closed either way.
func wantCloseUnawaited(t *testing.T, closed <-chan struct{}) {
	t.Helper()
	select {
	case <-closed:
	case <-time.After(closeTimeout / 2):
		t.Errorf("Close still waiting after %v for a server held from reading: it waits for the answer", closeTimeout/2)
		<-closed
	}
}

// checkClientClose fails t unless err, a server connection's end, is the
// client's close: 1000, from the other end.
func checkClientClose(t *testing.T, err error) {
	t.Helper()
	ce, ok := errors.AsType[*CloseError](err)
	if !ok || ce.Code != wsframe.CloseNormal || !ce.Remote {
		t.Errorf("the server's connection ended with %v, want the client's close, 1000", err)
	}
}

// Close of a client whose reconnected connection awaits the server's
// capabilities sends its close, 1000, as Close of a ready connection
// does, and does not wait for the server's answer: the server, held in
// OnConnect, reads nothing until Close has returned, and then reads the
// client's close. Close dropped the connection, and the server saw 1006.
// A Close that waited for the answer would run for closeTimeout; the
// bound, half of that, tells it from one that does not wait (a few
// milliseconds).
func TestCloseWhileAwaitingCapabilitiesSendsItsClose(t *testing.T) {
	eachHeldConnect(t, closeCarriers, "after the clients' Close", func(t *testing.T, e *heldConnectEnv, carrier Carrier) {
		c := e.dial(t, carrier, ClientOptions{Logger: slog.New(slog.DiscardHandler),
			Reconnect: Reconnect{MinDelay: 10 * time.Millisecond, MaxDelay: 20 * time.Millisecond}})
		dialed, err := c.current()
		if err != nil {
			t.Fatal(err)
		}
		release := e.holdConnects(t)
		e.dropPeers()
		p := e.awaitHeld(t, "no reconnect")
		var cc *clientConn
		waitFor(t, func() bool {
			cc, _ = c.current()
			return cc != nil && cc != dialed
		})
		if cc.isReady() {
			t.Fatal("the held connection is ready")
		}
		closed := make(chan struct{})
		start := time.Now()
		go func() { c.Close(); close(closed) }()
		wantCloseUnawaited(t, closed)
		t.Logf("Close took %v", time.Since(start))
		release()
		checkClientClose(t, e.awaitEnd(t, p))
	})
}

// Dial that gives up on a server's capabilities at ConnectTimeout closes
// the connection as Close does: the server sees 1000, not 1006, and Dial
// does not wait for its answer.
func TestDialGivingUpSendsItsClose(t *testing.T) {
	// Each attempt waits out ConnectTimeout: one carrier per way a link
	// closes.
	eachHeldConnect(t, closeWayCarriers, "after the Dials gave up", func(t *testing.T, e *heldConnectEnv, carrier Carrier) {
		release := e.holdConnects(t)
		const connectTimeout = 2 * time.Second
		dialed := make(chan error, 1)
		start := time.Now()
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), hangBound)
			defer cancel()
			opts := ClientOptions{Logger: slog.New(slog.DiscardHandler), ConnectTimeout: connectTimeout,
				TLSConfig: e.cert.ClientTLSConfig(), DTLSConfig: e.cert.ClientDTLSConfig()}
			opts.WebRTC.LoopbackOnly = true
			c, err := Dial(ctx, e.urls[carrier], opts)
			if err == nil {
				c.Close()
			}
			dialed <- err
		}()
		p := e.awaitHeld(t, "no connection")
		var err error
		select {
		case err = <-dialed:
			t.Logf("Dial gave up after %v", time.Since(start))
		case <-time.After(connectTimeout + closeTimeout/2 - time.Since(start)):
			t.Errorf("Dial still waiting %v past its ConnectTimeout for a server held from reading: it waits for the answer", closeTimeout/2)
			err = <-dialed
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Dial to a server that sends no capabilities: %v, want its ConnectTimeout", err)
		}
		release()
		checkClientClose(t, e.awaitEnd(t, p))
	})
}

// The server's side of the rule above: a client's Ping compressed with
// the dictionary that inflates past the carrier's 256 KiB limit on WebRTC
// has a Pong that fits compressed, as the client sends the Ping, so the
// server answers it rather than closing with 1009 (PROTOCOL.md §4.8: it
// closes only on a Ping whose Pong the client could not take).
func TestServerPongCompressedWithinCarrierLimit(t *testing.T) {
	e := newCarrierEnv(t, Options{})
	d, err := RouterDictionary(testRouter())
	if err != nil {
		t.Fatal(err)
	}
	c := e.dial(t, CarrierWebRTC, ClientOptions{Dictionary: d, Reconnect: Reconnect{Disabled: true}})
	cc, err := c.current()
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return cc.dict.Load() != nil })
	ping := pingPastTheChannelLimit(t, cc.dict.Load())
	if st := cc.sendPacket(ping); st != corkwriter.Sent && st != corkwriter.Queued {
		t.Fatalf("sending the Ping: %v", st)
	}
	// The call's answer comes after the Pong: a server that closed on the
	// Ping fails the call.
	ctx, cancel := context.WithTimeout(context.Background(), hangBound)
	defer cancel()
	var out []byte
	if err := c.Call(ctx, "echo/raw", []byte("x"), &out); err != nil {
		t.Fatalf("a call after the Ping: %v", err)
	}
	if n := e.srv.Metrics().Closes[wsframe.CloseMessageTooBig]; n != 0 {
		t.Errorf("the server closed %d connections with 1009", n)
	}
}

// A server that upgrades and then sends no capabilities until
// ConnectTimeout runs out fails Dial with the same error as one that
// never answers (TestDialSilentServer): the URL, once, and the timeout.
// It said "no capabilities from the server: context deadline exceeded",
// which named neither the timeout nor that it was ConnectTimeout's.
func TestDialNoCapabilitiesWithinConnectTimeout(t *testing.T) {
	ln := listenLoopback(t)
	go func() {
		nc, err := acceptRaw(ln, "") // upgrades, sends nothing
		if err == nil {
			serveRaw(nc, nil)
		}
	}()
	url := "ws://" + ln.Addr().String()
	c, err := Dial(context.Background(), url, ClientOptions{ConnectTimeout: 300 * time.Millisecond})
	if err == nil {
		c.Close()
		t.Fatal("Dial succeeded without the server's capabilities")
	}
	want := "hotpath: " + url + ": ConnectTimeout (300ms) ran out waiting for the server's capabilities"
	if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, new(*connectTimeoutError)) || err.Error() != want {
		t.Errorf("%v, want %q, matching context.DeadlineExceeded", err, want)
	}
}

// A WebSocket Dial that ConnectTimeout ends says at which step: the TLS
// handshake (wss://, a server that accepts and never answers its
// ClientHello), the upgrade (ws:// likewise; wss:// once the handshake
// is done) or the server's capabilities (above). The timeout alone did
// not tell a server that never upgrades from one that never sends its
// capabilities, nor a TLS port from a plain one. The error still matches
// context.DeadlineExceeded and is a *connectTimeoutError.
func TestDialTimeoutNamesTheStep(t *testing.T) {
	// silent accepts connections on ln, after a TLS handshake with tls,
	// and never writes to them.
	silent := func(ln net.Listener, tlsConf *tls.Config) {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { nc.Close() })
			if tlsConf != nil {
				go tls.Server(nc, tlsConf).Handshake()
			}
		}
	}
	for _, tc := range []struct {
		name, scheme string
		serverTLS    *tls.Config
		want         string
	}{
		{"ws, no answer", "ws", nil, "during the WebSocket upgrade"},
		{"wss, no TLS answer", "wss", nil, "during the TLS handshake"},
		{"wss, no upgrade after TLS", "wss", testCert().ServerTLSConfig(), "during the WebSocket upgrade"},
	} {
		ln := listenLoopback(t)
		go silent(ln, tc.serverTLS)
		url := tc.scheme + "://" + ln.Addr().String() + "/ws"
		c, err := Dial(context.Background(), url, ClientOptions{ConnectTimeout: 300 * time.Millisecond, TLSConfig: testCert().ClientTLSConfig()})
		if err == nil {
			c.Close()
			t.Fatalf("%s: Dial succeeded", tc.name)
		}
		want := "hotpath: " + url + ": ConnectTimeout (300ms) ran out " + tc.want
		if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, new(*connectTimeoutError)) || err.Error() != want {
			t.Errorf("%s: %v, want %q, matching context.DeadlineExceeded", tc.name, err, want)
		}
	}
}

// pingPastTheChannelLimit is a Ping packet, built after frame headroom,
// whose data is past the WebRTC data channel's 256 KiB limit plain but
// within it compressed with d.
func pingPastTheChannelLimit(t *testing.T, d *dictCodec) []byte {
	t.Helper()
	data := bytes.Repeat([]byte("a ping that compresses well "), (300<<10)/28)
	if len(data) <= maxChannelMessage {
		t.Fatalf("a Ping of %d bytes: not past the carrier's limit", len(data))
	}
	ping := wire.Append(beginFrame(nil), &wire.Packet{Kind: dispatch.KindPing, Payload: data})
	cb, release, ok := d.compressPacket(ping[frameHeadroom:])
	if !ok || len(cb)-frameHeadroom > maxChannelMessage {
		t.Fatal("the Ping does not compress within the carrier's limit")
	}
	release()
	return ping
}
