package compat

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gobwas/ws"
	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/corkwriter"
	"github.com/hotpath-go/hotpath/dictionary"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/emitter"
	"github.com/hotpath-go/hotpath/scheduler"
	"github.com/hotpath-go/hotpath/wsframe"
	"github.com/pion/dtls/v3"
)

// ClientOptions configures a Client. The zero value is a complete
// configuration: JSON payloads, call batching, reconnection, no
// compression.
type ClientOptions struct {
	// Codec encodes payloads; JSON when nil.
	Codec Codec
	// Header is sent with the upgrade request (authentication, cookies)
	// on WebSocket, WebTransport and WebRTC signalling.
	Header http.Header
	// TLSConfig configures TLS for wss://, quic:// and https://
	// (WebTransport) URLs, and for the signalling request of
	// webrtc+https:// URLs: the roots or the certificate hash to trust,
	// client certificates. Its NextProtos are set by the client.
	TLSConfig *tls.Config
	// DTLSConfig configures DTLS for sctp+dtls:// URLs.
	//lint:ignore SA1019 dtls.Config is compat's public API, kept: no options-based pion call takes one, and a caller's Config does not convert to options exactly.
	DTLSConfig *dtls.Config
	// WebRTC configures webrtc+http:// and webrtc+https:// URLs.
	WebRTC WebRTCOptions
	// Handlers answers the server's asks; nil answers every ask NotFound.
	// A handler's ctx ends at the ask's timeout, or when the connection
	// it came on ends (a drop, Close). Each runs on a goroutine of its
	// own, which Close does not wait for: a handler that returns on its
	// ctx ends soon after, one that ignores it runs on, keeping its place
	// under Limits.MaxInFlight.
	Handlers *Router
	// Dictionary, when set, is offered to the server for per-message
	// compression (PROTOCOL.md §6). Build it with RouterDictionary from the
	// same registrations as the server's Router; when the server's differs,
	// packets travel plain.
	Dictionary *dictionary.Dictionary
	// Limits bound what the client accepts: MaxMessageSize, MaxFrameSize,
	// MaxFragments and MaxOutboxBytes apply, and MaxInFlight (128 by
	// default) bounds the server's asks whose handlers run at once (more
	// are answered ErrOverloaded, code 7). That bound is the client's, not
	// a connection's: a handler that ignores its ctx and still runs after
	// its connection dropped keeps its place, so reconnects cannot
	// multiply such handlers.
	Limits Limits
	// CallTimeout bounds a call, Join or Leave whose context has no
	// deadline, and the opening of such a stream (OpenStream: until the
	// server accepts it, not the transfer); 0: none.
	CallTimeout time.Duration
	// ConnectTimeout bounds each connection attempt, Dial's (within its
	// ctx) and every reconnect's: the carrier's handshakes, the upgrade or
	// signalling, and the server's capabilities. 10 s by default.
	ConnectTimeout time.Duration
	// KeepaliveInterval is how long the server may stay silent before the
	// client pings it; 25 s by default, or half of IdleTimeout when that is
	// shorter. IdleTimeout is how long it may stay silent, pings
	// unanswered, before the client closes the connection with 1001
	// HP_IDLE_TIMEOUT (and reconnects); 60 s by default; negative for
	// neither pings nor the timeout. Dial refuses an interval not shorter
	// than IdleTimeout. Any bytes read count as life.
	// Without it, a server whose host died, or a path that lost the
	// connection without a reset, would hold every call until the kernel
	// gave up on the socket: minutes, about 15 with a call's bytes
	// unacknowledged.
	KeepaliveInterval time.Duration
	IdleTimeout       time.Duration
	// NoBatching sends every call in a frame of its own. By default calls
	// issued while a write is in progress leave together in one Batch.
	NoBatching bool
	// Reconnect configures reconnection after the connection drops.
	Reconnect Reconnect
	// Logger receives reconnection errors; slog.Default() when nil.
	Logger *slog.Logger
	// OnState is told when the connection goes down and comes back.
	OnState func(State)
	// OnRejoinError, when set, is told of a room the client could not
	// rejoin after a reconnect, with why (ErrTimeout when the server has
	// not answered it within 10 s of its capabilities or of its last
	// answer to a rejoin); left is true when the client
	// forgot the room because the server refused it (ErrUnauthorized),
	// false when it will ask again at the next reconnect. It runs on a
	// goroutine of the client's and should not block. Either way the
	// Logger gets a warning.
	OnRejoinError func(room string, err error, left bool)
}

// Reconnect is the reconnection policy: capped exponential backoff with
// jitter, from MinDelay to MaxDelay, the actual delay drawn uniformly from
// the upper half of the current step so a fleet of clients does not
// reconnect in lockstep. The step doubles after each failed attempt, and
// after a connection that the server ended within MaxDelay of sending its
// capabilities; it starts over from MinDelay after one that served longer.
// After an attempt the server refused with Retry-After (HTTPError's
// RetryAfter: a 503 past its MaxConnections), the next one waits at least
// that long (counted up to MaxDelay), plus up to half again drawn at
// random: the clients a full server turned away together must not all
// come back together when it said.
type Reconnect struct {
	// Disabled leaves the client closed when its connection drops: every
	// later call fails with ErrDisconnected, for a caller that redials
	// itself or must not send to a server that may have restarted.
	Disabled bool
	MinDelay time.Duration // 100 ms by default
	MaxDelay time.Duration // 10 s (or MinDelay if longer) by default; not below MinDelay
}

// State is a client's connection state.
type State uint8

const (
	// Connected: calls go to the server; reported after each reconnect,
	// once the server's capabilities have arrived (Dial returns
	// connected, without reporting it). The Joins of the rooms the client
	// is in have left by then: what is sent from then on reaches the
	// server after them.
	Connected State = iota + 1
	// Reconnecting: the connection dropped and the client is dialing
	// again; calls fail with ErrDisconnected meanwhile.
	Reconnecting
	// Closed: for good, after Close, or after a drop with reconnecting
	// disabled.
	Closed
)

// String returns the state's name in lower case, as logs print it.
func (s State) String() string {
	switch s {
	case Connected:
		return "connected"
	case Reconnecting:
		return "reconnecting"
	case Closed:
		return "closed"
	}
	return "unknown"
}

// ErrDisconnected is returned by calls made while the client is
// reconnecting or after its connection dropped, and by calls in flight
// when it dropped (the server may or may not have run those), joined with
// why the connection ended: CloseStatus gives its close code. While
// reconnect attempts fail, the error says the last one's failure too, and
// a refusal's *HTTPError (Authenticate's 401 or 403 on WebSocket,
// WebTransport or WebRTC) is found by errors.As.
var ErrDisconnected = errors.New("hotpath: disconnected")

// Client is a connection to a hotpath server that reconnects when it
// drops. Its methods are safe for concurrent use.
type Client struct {
	url      string
	opts     ClientOptions
	timeouts *scheduler.Scheduler[callRef]

	mu      sync.Mutex
	conn    *clientConn // nil while reconnecting
	dropped error       // why the last connection ended, while conn is nil
	closed  bool
	rooms   map[string]bool // rooms to rejoin after a reconnect
	// joining tracks the user's Joins in flight, by room: a Leave of the
	// room meanwhile marks them left, so that their answer does not record
	// the room for rejoining after the Leave forgot it.
	joining map[string]*joinsInFlight
	// memberMu orders the rejoins after a reconnect with the user's Leave
	// of a room: sendRejoins looks at rooms and sends its Joins under it,
	// Leave forgets the room under it, so a rejoin either sees the room
	// gone or leaves before the Leave does.
	memberMu sync.Mutex
	pending  pendingTable
	nextID   uint32
	// idsWrapped: nextID has passed 2^32-1, so a new id may be one a
	// pending call still has. Until then ids only grow and none is looked up.
	idsWrapped bool

	handlersMu sync.RWMutex
	handlers   map[listenerKey]*emitter.Emitter[Message]
	// inCallbacks counts the listeners, OnState and OnRejoinError calls
	// running: Close called from one must not wait for the goroutine that
	// runs it.
	inCallbacks atomic.Int32
	// dgMu orders the handling of datagrams with Close. Their listeners
	// run off the read loop (handleDatagram), so waiting for the loop did
	// not wait for them: one whose datagram had passed the connection's
	// closing check ran just after Close returned. A datagram is handled
	// only if it begins before Close (dgClosed), and Close waits for
	// those begun (dgRunning; dgIdle is closed when the last ends), as
	// it waits for the read loop: unless a callback runs, which may be
	// Close's caller (awaitDone).
	dgMu      sync.Mutex
	dgClosed  bool
	dgRunning int
	dgIdle    chan struct{}
	// asksRunning counts the ask handlers running, at most
	// Limits.MaxInFlight: each has a goroutine of its own, and a server
	// that asks faster than they answer must not grow them without bound.
	// It is the client's, not a connection's: a handler that ignores its
	// ctx runs on after its connection ended, and counted per connection
	// such handlers piled up by MaxInFlight at every reconnect.
	asksRunning atomic.Int32

	watch ctxWatch // the context of the caller reading its own answer

	closedSignal chan struct{} // closed by Close, made on first use
	done         chan struct{} // closed when run returns
}

// clientConn is one connection of a Client, on any carrier.
type clientConn struct {
	c    *Client
	link link
	// ready is closed when the server's capabilities arrive: from then on
	// the server knows the control stream, binary streams may open, and
	// the server's limits are known (awaitReady). ended is closed when
	// the connection has ended.
	ready     chan struct{}
	readyOnce sync.Once
	ended     chan struct{}
	dict      atomic.Pointer[dictCodec]

	// serverMaxBatch is the server's maxBatch capability, 0 until known.
	serverMaxBatch atomic.Uint32
	// serverMaxMessage is the server's maxMessage capability, 0 until
	// known.
	serverMaxMessage atomic.Int64
	// serverMaxEmit is the server's maxEmit capability: the largest room
	// emit payload it relays, 0 when it announced none.
	serverMaxEmit atomic.Int64
	// asksCtx is the parent of the ask handlers' contexts, canceled
	// when the connection ends: a handler waiting on its ctx ran on after
	// Close until the ask's timeout (30 s by default; a reconnect audit).
	asksCtx    context.Context
	cancelAsks context.CancelFunc
	// readyAt is when the server's capabilities arrived, in UnixNano; 0
	// before.
	readyAt atomic.Int64
	// sentCapabilities is the payload of the client's capabilities: a
	// server that sends it back is an echo server (errEchoServer).
	sentCapabilities []byte
	// rejoins are the Joins a reconnected connection sent before it was
	// ready (sendRejoins), whose answers settleReconnect waits for.
	rejoins []rejoinCall

	qmu      sync.Mutex
	queue    []byte // encoded packets waiting, as batch items
	queued   uint32
	flushing bool
	// spare is the flusher's second queue buffer, kept between flushes
	// (up to maxSpareQueue): callers queue into one buffer while the
	// other is being sent (flushQueue). Only the goroutine that set
	// flushing touches it, so it needs no lock of its own.
	spare []byte

	// shared is the read token of a WebSocket connection, whose callers
	// read their answers themselves (sharedread.go); nil on other carriers.
	shared *sharedReads
}

// Message is a server event or room emit as a client receives it.
type Message struct {
	Room  string // "" for an event outside rooms
	Event string
	Data  []byte // encoded payload; valid only during the handler
	codec Codec
}

// Decode decodes the payload into v.
func (m Message) Decode(v any) error { return unmarshal(m.codec, m.Data, v) }

// Dial connects to the hotpath server at url and returns a connected
// client. The scheme picks the carrier: ws:// and wss:// WebSocket,
// quic://host:port native QUIC, https:// WebTransport, sctp://host:port
// SCTP over UDP, sctp+dtls://host:port SCTP over DTLS, webrtc+http:// and
// webrtc+https:// a WebRTC data channel signalled at that http(s) URL.
// Later drops are repaired by reconnecting on the same carrier; the first
// connection is not retried.
//
// Dial returns once the server's capabilities have arrived, within ctx and
// ConnectTimeout: the server has registered the connection, and its limits
// are known. A server that closes the connection first fails Dial with
// ErrDisconnected joined with its close.
func Dial(ctx context.Context, url string, opts ClientOptions) (*Client, error) {
	if opts.Codec == nil {
		opts.Codec = JSON
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	opts.Limits = opts.Limits.withDefaults()
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = 10 * time.Second
	}
	if opts.IdleTimeout == 0 {
		opts.IdleTimeout = 60 * time.Second
	}
	if opts.IdleTimeout > 0 {
		opts.KeepaliveInterval = defaultKeepalive(opts.KeepaliveInterval, opts.IdleTimeout)
		if err := checkKeepalive(opts.KeepaliveInterval, opts.IdleTimeout); err != nil {
			return nil, err
		}
	}
	if opts.Reconnect.MinDelay <= 0 {
		opts.Reconnect.MinDelay = 100 * time.Millisecond
	}
	if opts.Reconnect.MaxDelay <= 0 {
		opts.Reconnect.MaxDelay = max(10*time.Second, opts.Reconnect.MinDelay)
	}
	if opts.Reconnect.MaxDelay < opts.Reconnect.MinDelay {
		// The step would fall to MaxDelay after the first failure: a
		// client meant to wait seconds would retry every few ms.
		return nil, fmt.Errorf("compat: Reconnect.MaxDelay %v is below MinDelay %v", opts.Reconnect.MaxDelay, opts.Reconnect.MinDelay)
	}
	if opts.Handlers != nil {
		if err := opts.Handlers.freeze(); err != nil {
			return nil, err
		}
	}
	c := &Client{
		url:      url,
		opts:     opts,
		rooms:    map[string]bool{},
		joining:  map[string]*joinsInFlight{},
		handlers: map[listenerKey]*emitter.Emitter[Message]{},
		done:     make(chan struct{}),
	}
	c.timeouts = scheduler.New(c.fireTimeouts, scheduler.WithGranularity(time.Millisecond))
	// The first connection, capabilities included, within ConnectTimeout.
	ctx, cancel := c.withConnectTimeout(ctx)
	defer cancel()
	cc, err := c.connect(ctx)
	if err != nil {
		c.timeouts.Stop()
		return nil, err
	}
	c.mu.Lock()
	c.conn = cc
	c.mu.Unlock()
	go c.run(cc)
	// Dial returns once the server's capabilities have arrived: the
	// server has registered the connection, and its limits are known, so
	// a first packet over them fails alone (ErrMessageTooBig) instead of
	// closing the connection. A server that refuses the connection now
	// (an unsupported codec, a shutdown) fails Dial.
	select {
	case <-cc.ready:
		return c, nil
	case <-c.done: // run does not retry a first connection that ended before
		c.mu.Lock()
		err = c.dropped
		c.mu.Unlock()
		return nil, &dialEndError{url: url, end: err}
	case <-ctx.Done():
		// Dropped at once, as settleReconnect drops a reconnected
		// connection given up: nothing sent on it needs the closing
		// handshake's confirmation, and a server silent since its
		// handshake held Dial closeTimeout past ctx.
		c.close(true)
		return nil, fmt.Errorf("hotpath: %s: no capabilities from the server: %w", url, ctx.Err())
	}
}

// connectTimeoutError is the cause of a connection attempt's ctx that ran
// out of ClientOptions.ConnectTimeout: it names the URL and tells the
// timeout from the caller's ctx ending. It matches
// context.DeadlineExceeded.
type connectTimeoutError struct {
	url     string
	timeout time.Duration
}

func (e *connectTimeoutError) Error() string {
	return fmt.Sprintf("hotpath: %s: no answer within ConnectTimeout (%v)", e.url, e.timeout)
}

func (e *connectTimeoutError) Unwrap() error { return context.DeadlineExceeded }

// withConnectTimeout bounds a connection attempt by ConnectTimeout.
func (c *Client) withConnectTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, c.opts.ConnectTimeout, &connectTimeoutError{url: c.url, timeout: c.opts.ConnectTimeout})
}

// connectError is the error of a connection attempt that failed with err
// under ctx. One that ran out of ConnectTimeout says so: a QUIC handshake
// with a host that never answers ended in a bare "context deadline
// exceeded".
func (c *Client) connectError(ctx context.Context, err error) error {
	var te *connectTimeoutError
	if !errors.As(context.Cause(ctx), &te) || !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if err == context.DeadlineExceeded || err == error(te) {
		return te
	}
	return &connectTimedOut{te: te, err: err}
}

// connectTimedOut is a connection attempt's error, err, when
// ConnectTimeout ran out under it. It reads as te alone, the URL and the
// timeout, as on QUIC, WebTransport and SCTP, whose dialers return the
// bare deadline: the dialers that say more name the URL again (the
// WebSocket upgrade's error), or wrap te itself (net/http's, for WebRTC
// signalling), and the error read `compat: webrtc: Post "…": hotpath:
// <url>: no answer within ConnectTimeout`. It unwraps to both, so that
// errors.Is and errors.As see what they saw before.
type connectTimedOut struct {
	te  *connectTimeoutError
	err error
}

func (e *connectTimedOut) Error() string   { return e.te.Error() }
func (e *connectTimedOut) Unwrap() []error { return []error{e.te, e.err} }

// abnormalEnd is err, the end of a connection, as a *CloseError: a
// carrier's error that brought no close (a reset association, a broken
// socket) is 1006 with the error's text, as a browser reports a
// connection that ended without a close frame, so that CloseStatus reads
// every end of a connection.
func abnormalEnd(err error) error {
	if err == nil || CloseStatus(err) != 0 {
		return err
	}
	return &CloseError{Code: wsframe.CloseAbnormal, Reason: err.Error()}
}

// dialEndError is Dial's error for a connection that ended before the
// server's capabilities: it matches ErrDisconnected and unwraps to why the
// connection ended (a *CloseError, for CloseStatus), on one line.
type dialEndError struct {
	url string
	end error // ErrDisconnected wrapped with why
}

func (e *dialEndError) Error() string {
	msg := "hotpath: " + e.url + ": the connection ended before the server's capabilities"
	why := e.why()
	if why != nil {
		msg += ": " + why.Error()
	}
	var ce *CloseError
	if errors.As(why, &ce) && ce.Reason == errEchoServer.Reason {
		msg += ": the server sent the client's capabilities back, as a server in echo mode does, which answers no calls"
	}
	return msg
}

// why is the cause wrapped with ErrDisconnected, or nil.
func (e *dialEndError) why() error {
	if j, ok := e.end.(interface{ Unwrap() []error }); ok {
		for _, err := range j.Unwrap() {
			if err != ErrDisconnected {
				return err
			}
		}
	}
	return nil
}

func (e *dialEndError) Unwrap() error { return e.end }

// connect opens one connection, on the carrier the URL's scheme names,
// and sends the capabilities.
func (c *Client) connect(ctx context.Context) (*clientConn, error) {
	// Without a bound, an SCTP handshake with a host that never answers
	// retried its INIT forever.
	ctx, cancel := c.withConnectTimeout(ctx)
	defer cancel()
	l, err := c.dialLink(ctx)
	if err != nil {
		return nil, c.connectError(ctx, err)
	}
	cc := &clientConn{c: c, link: l, ready: make(chan struct{}), ended: make(chan struct{})}
	cc.asksCtx, cc.cancelAsks = context.WithCancel(context.Background())
	if ws, ok := l.(*wsConn); ok {
		cc.shared = ws.shared
	}
	pairs := wire.AppendPair(nil, "codec", c.opts.Codec.Name())
	pairs = wire.AppendPair(pairs, "maxMessage", strconv.FormatInt(c.opts.Limits.MaxMessageSize, 10))
	n := uint32(2)
	if d := c.opts.Dictionary; d != nil {
		pairs = wire.AppendPair(pairs, "dict", "zstd:"+d.ID()+",deflate:"+d.ID())
		n++
	}
	cc.sentCapabilities = pairs
	cc.sendPacket(wire.Append(beginFrame(nil), &wire.Packet{Kind: dispatch.KindCapabilities, Count: n, Payload: pairs}))
	return cc, nil
}

// dialWebSocket opens a WebSocket connection (ws:// and wss:// URLs).
func (c *Client) dialWebSocket(ctx context.Context) (link, error) {
	d := ws.Dialer{Protocols: []string{Subprotocol}, Timeout: c.opts.ConnectTimeout}
	if c.opts.TLSConfig != nil {
		d.TLSConfig = c.opts.TLSConfig.Clone()
		d.TLSConfig.NextProtos = []string{"http/1.1"} // the upgrade is HTTP/1.1, never h2
	}
	if len(c.opts.Header) > 0 {
		d.Header = ws.HandshakeHeaderHTTP(c.opts.Header)
	}
	// A refused upgrade (Options.Authenticate's 401 or 403, the origin
	// check's 403) is an *HTTPError with the server's message, as on
	// WebTransport and WebRTC signalling.
	var refused *HTTPError
	d.OnStatusError = func(status int, _ []byte, resp io.Reader) {
		refused = &HTTPError{Status: status, Message: http.StatusText(status)}
		if r, err := http.ReadResponse(bufio.NewReader(resp), nil); err == nil {
			refused.RetryAfter = retryAfter(r.Header)
			msg, _ := io.ReadAll(io.LimitReader(r.Body, 512))
			if m := refusalMessage(msg); m != "" {
				refused.Message = m
			}
		}
	}
	// The answer is read within a bound, as the server reads the request
	// (Serve's 64 KiB): gobwas/ws reads a line, and http.ReadResponse
	// every header line, whole, so a server whose answer never ended had
	// the client buffer all it sent until ConnectTimeout (an audit: 64 MiB
	// in a second on loopback).
	d.NetDial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		uc := &upgradeConn{Conn: nc}
		uc.left.Store(maxUpgradeAnswer)
		return uc, nil
	}
	// Above TLS on wss://, so the client keeps the answer as it reads it.
	d.WrapConn = func(nc net.Conn) net.Conn { return newAnswerReader(nc) }
	nc, br, hs, err := d.Dial(ctx, c.url)
	var answer, unread []byte
	if ar, ok := nc.(*answerReader); ok {
		nc, answer, unread = ar.Conn, ar.seen, ar.unread()
	}
	if uc, ok := nc.(*upgradeConn); ok {
		nc = uc.Conn // ws://: the socket itself, for its raw reads
	} else if tc, ok := nc.(*tls.Conn); ok {
		if uc, ok := tc.NetConn().(*upgradeConn); ok {
			uc.done.Store(true) // wss://: under TLS for good, unbounded from now on
		}
	}
	if refused != nil {
		return nil, refused
	}
	if err == nil {
		if err = checkAnswer(answer); err != nil {
			nc.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("hotpath: WebSocket upgrade at %s: %w", c.url, err)
	}
	if hs.Protocol != Subprotocol {
		// RFC 6455 §4.1 leaves a response without a subprotocol to the
		// client: this one would send packets to a server that does not
		// speak them, and its calls would wait for answers never coming.
		nc.Close()
		return nil, fmt.Errorf("hotpath: the server at %s did not accept subprotocol %s: not a hotpath server", c.url, Subprotocol)
	}
	var early []byte
	if br != nil {
		if n := br.Buffered(); n > 0 {
			b, _ := br.Peek(n)
			early = append([]byte(nil), b...)
		}
		ws.PutReader(br)
	}
	// What the answerReader read past the answer and the Dialer did not
	// take comes after what the Dialer buffered.
	early = append(early, unread...)
	wc := newWSConn(nc, true, c.opts.Limits, nil, early)
	wc.shared = newSharedReads()
	return wc, nil
}

// maxUpgradeAnswer bounds what a WebSocket client reads until its
// upgrade is answered: the server's TLS handshake (wss://) and its HTTP
// answer together.
const maxUpgradeAnswer = 256 << 10

// errUpgradeAnswerTooLarge fails the upgrade of a server whose answer
// passes maxUpgradeAnswer.
var errUpgradeAnswerTooLarge = fmt.Errorf("hotpath: the server's answer to the upgrade is over %d KiB", maxUpgradeAnswer>>10)

// upgradeConn is a WebSocket client's socket during its upgrade: it reads
// at most maxUpgradeAnswer bytes, then fails. Once the upgrade is done the
// client reads the socket itself (ws://), or TLS reads it through
// upgradeConn without a bound (wss://).
type upgradeConn struct {
	net.Conn
	left atomic.Int64 // bytes it may still read before done
	done atomic.Bool
}

func (c *upgradeConn) Read(p []byte) (int, error) {
	if c.done.Load() {
		return c.Conn.Read(p)
	}
	left := c.left.Load()
	if left <= 0 {
		return 0, errUpgradeAnswerTooLarge
	}
	if int64(len(p)) > left {
		p = p[:left]
	}
	n, err := c.Conn.Read(p)
	c.left.Add(-int64(n))
	return n, err
}

// SetLinger lets abort reset the socket under TLS (wsConn.abort).
func (c *upgradeConn) SetLinger(sec int) error {
	if l, ok := c.Conn.(interface{ SetLinger(sec int) error }); ok {
		return l.SetLinger(sec)
	}
	return nil
}

// run serves connections until Close: it reads one until it drops, fails
// the calls in flight, and reconnects with backoff.
//
// The backoff starts over only after a connection that served for
// Reconnect.MaxDelay at least. One that the server ended sooner counts as
// a failed attempt: a server that refuses the client after the handshake
// (an authentication refused on QUIC or SCTP, where the upgrade checks
// come after it) or closes every connection at once (over a quota) was
// asked again every MinDelay, for ever (a reconnect audit: 36 attempts in
// 3 s).
func (c *Client) run(cc *clientConn) {
	defer close(c.done)
	step := c.opts.Reconnect.MinDelay
	var settled chan struct{} // closed when a reconnected cc's settleReconnect is done
	for first := true; ; first = false {
		watch := cc.watchLiveness()
		err := cc.link.run(cc)
		if watch.stop() {
			// The closing handshake with a silent server ends in a
			// timeout or a reset, whatever the carrier: say why it began.
			err = &CloseError{Code: wsframe.CloseGoingAway, Reason: idleTimeoutReason}
		}
		if why := abnormalEnd(err); why != nil {
			// Wrapped, not errors.Join: one line, for logs.
			err = fmt.Errorf("%w: %w", ErrDisconnected, why)
		} else {
			err = ErrDisconnected
		}
		c.mu.Lock()
		c.conn, c.dropped = nil, err
		closed := c.closed
		failed := c.pending.drain()
		c.mu.Unlock()
		for _, pc := range failed {
			c.settle(pc, nil, err, true)
		}
		close(cc.ended) // after the drain: see settleRefused
		cc.cancelAsks()
		if settled != nil {
			<-settled // its Connected, rejoins or giving up come first
		}
		if first && !cc.isReady() {
			// Dial's connection, ended before the server's capabilities:
			// Dial fails with err, and nothing is retried.
			c.timeouts.Stop()
			c.watch.close()
			return
		}
		if closed || c.opts.Reconnect.Disabled {
			c.setState(Closed)
			c.timeouts.Stop()
			c.watch.close()
			return
		}
		if cc.servedFor() >= c.opts.Reconnect.MaxDelay {
			step = c.opts.Reconnect.MinDelay
		} else if !first {
			step = min(2*step, c.opts.Reconnect.MaxDelay)
		}
		c.setState(Reconnecting)
		cc, step = c.reconnect(step)
		if cc == nil {
			c.setState(Closed)
			c.timeouts.Stop()
			c.watch.close() // or the caller's context keeps the client
			return
		}
		settled = make(chan struct{})
		go c.settleReconnect(cc, settled)
	}
}

// settleReconnect waits, within ConnectTimeout, for the capabilities of
// a reconnected connection, as Dial does for the first one; then the
// client is Connected, and waits for the answers to its rejoins, sent
// when the capabilities came. A connection whose server
// sends none in time is given up, and run tries again. It was Connected
// as soon as the carrier's handshake was done: calls, emits and events
// waited for the capabilities of a server that had hung after its
// upgrade until IdleTimeout (a reconnect audit: 7 s with a 1 s
// ConnectTimeout), and OnState said Connected to a server that refused
// the client a moment later.
func (c *Client) settleReconnect(cc *clientConn, done chan struct{}) {
	defer close(done)
	t := time.NewTimer(c.opts.ConnectTimeout)
	defer t.Stop()
	select {
	case <-cc.ready:
	case <-cc.ended:
		return
	case <-t.C:
		c.opts.Logger.Info("hotpath: reconnect failed", "err", fmt.Errorf("no capabilities from the server: %w", &connectTimeoutError{url: c.url, timeout: c.opts.ConnectTimeout}))
		cc.link.abort()
		return
	}
	c.setState(Connected)
	c.awaitRejoins(cc)
}

// watchLiveness pings the server once it has been silent for
// KeepaliveInterval and closes the connection with 1001 HP_IDLE_TIMEOUT
// once it has been silent for IdleTimeout, as the server does with its
// clients. The watch's stop ends it.
func (cc *clientConn) watchLiveness() *livenessWatch {
	w := &livenessWatch{}
	if cc.c.opts.IdleTimeout < 0 {
		return w
	}
	w.cc.Store(cc)
	t := time.AfterFunc(time.Hour, w.check)
	t.Stop()
	w.timer.Store(t) // before the first check can run
	t.Reset(cc.c.opts.KeepaliveInterval)
	return w
}

// idleTimeoutReason is the close reason of a connection given up for
// silence, at either end.
const idleTimeoutReason = "HP_IDLE_TIMEOUT"

// livenessWatch is the keepalive of one client connection: one timer,
// re-armed for when the server's silence would next matter.
//
// Its timers reach the connection only through cc, which stop clears: the
// runtime keeps a stopped timer's function until the P whose timer heap
// holds it removes it (go.dev/issue/75935), seconds later or at the time
// it was armed for. A function bound to the connection kept the closed
// client reachable meanwhile, with its buffers and dictionary encoders
// (a soak: about 4 MB, for up to a second after Close).
type livenessWatch struct {
	cc       atomic.Pointer[clientConn] // nil once stopped
	timer    atomic.Pointer[time.Timer]
	timedOut atomic.Bool
	// heldLoop fires heldLoopGrace after the connection was given up,
	// should its read loop not have ended by then (endHeldLoop).
	heldLoop atomic.Pointer[time.Timer]
}

// stop ends the watch and reports whether the server was given up.
func (w *livenessWatch) stop() (timedOut bool) {
	w.cc.Store(nil)
	if t := w.timer.Load(); t != nil {
		t.Stop()
	}
	if h := w.heldLoop.Load(); h != nil {
		h.Stop()
	}
	return w.timedOut.Load()
}

// heldLoopGrace is how long a connection given up for silence has to end
// before endHeldLoop concludes that its read loop is held: the closing
// handshake that ends it takes closeTimeout at most.
const heldLoopGrace = 2 * closeTimeout

func (w *livenessWatch) check() {
	cc := w.cc.Load()
	if cc == nil {
		return
	}
	o, l := cc.c.opts, cc.link
	act, next := l.liveness().check(time.Now(), o.KeepaliveInterval, o.IdleTimeout)
	switch act {
	case keepGiveUp:
		w.timedOut.Store(true)
		l.requestClose(wsframe.CloseGoingAway, idleTimeoutReason)
		w.heldLoop.Store(time.AfterFunc(heldLoopGrace, w.endHeldLoop))
		return
	case keepPing:
		l.ping()
	}
	w.timer.Load().Reset(time.Until(next))
}

// endHeldLoop is the heldLoop timer's function: it goes through the watch,
// not to the connection, which a stopped timer's function would keep.
func (w *livenessWatch) endHeldLoop() {
	if cc := w.cc.Load(); cc != nil {
		cc.endHeldLoop()
	}
}

// endHeldLoop ends the calls of a connection given up for silence whose
// read loop has not ended heldLoopGrace later: the loop is held by a
// callback of the program's, most likely a listener that made a Call,
// Join or Leave, whose answer only that loop could read. Such a call
// waited for ever, and with it the client: every later call, and the
// reconnect, which follows the loop's end. The link is dropped first, so
// that calls sent from then on fail to send instead of waiting; the calls
// waiting fail as at any end of the connection, and once the callback
// returns, the loop ends the connection and the client reconnects.
func (cc *clientConn) endHeldLoop() {
	select {
	case <-cc.ended:
		return
	default:
	}
	c := cc.c
	c.opts.Logger.Warn("hotpath: the connection was given up for silence, but its read loop is held by a listener or OnState callback; its calls fail now (a Call, Join or Leave made inside a listener waits for an answer only that loop can read: make it from a goroutine)",
		"url", c.url, "held", heldLoopGrace)
	cc.link.abort()
	err := fmt.Errorf("%w: %w", ErrDisconnected, &CloseError{Code: wsframe.CloseGoingAway, Reason: idleTimeoutReason})
	var failed []*pendingCall
	c.mu.Lock()
	if c.conn == cc {
		failed = c.pending.drain()
	}
	c.mu.Unlock()
	for _, pc := range failed {
		c.settle(pc, nil, err, true)
	}
}

// reconnect dials, after a delay of about step and then doubling it up to
// Reconnect.MaxDelay after each failure, until a connection is made or
// the client is closed (nil). It returns the step it ended at.
func (c *Client) reconnect(step time.Duration) (*clientConn, time.Duration) {
	c.mu.Lock()
	dropped := c.dropped
	c.mu.Unlock()
	var notBefore time.Duration // the last refusal's Retry-After
	for attempt := 1; ; attempt++ {
		delay := reconnectDelay(step, notBefore)
		select {
		case <-time.After(delay):
		case <-c.closedCh():
			return nil, step
		}
		cc, err := c.connectUnlessClosed()
		if err != nil {
			select {
			case <-c.closedCh():
				return nil, step // the attempt was given up for Close
			default:
			}
			c.opts.Logger.Info("hotpath: reconnect failed", "attempt", attempt, "err", err)
			c.mu.Lock()
			c.dropped = &reconnectError{dropped: dropped, attempt: attempt, err: err}
			c.mu.Unlock()
			step = min(2*step, c.opts.Reconnect.MaxDelay)
			notBefore = 0
			if refused, ok := errors.AsType[*HTTPError](err); ok {
				notBefore = min(refused.RetryAfter, c.opts.Reconnect.MaxDelay)
			}
			continue
		}
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			cc.link.abort()
			return nil, step
		}
		c.conn = cc
		c.mu.Unlock()
		return cc, step
	}
}

// reconnectDelay is the wait before a reconnect attempt: drawn from the
// upper half of step, and after a refusal with Retry-After (notBefore)
// from notBefore to half again as long, so that a fleet refused together
// by a full server spreads its return instead of coming back in lockstep
// at the moment it was given.
func reconnectDelay(step, notBefore time.Duration) time.Duration {
	delay := step/2 + rand.N(step/2+1)
	if notBefore > 0 {
		delay = max(delay, notBefore+rand.N(notBefore/2+1))
	}
	return delay
}

// reconnectError is the error of calls made while reconnect attempts
// fail: the last connection's end, which CloseStatus reads, with the last
// attempt's failure. A client whose reconnects were refused (a token
// revoked: Authenticate's 401 on WebSocket, WebTransport or WebRTC, where
// the refusal is the upgrade's answer) failed its calls with the old
// connection's drop for as long as it tried, and only the Info log said
// why.
type reconnectError struct {
	dropped error // ErrDisconnected with why the last connection ended
	attempt int
	err     error
}

func (e *reconnectError) Error() string {
	return fmt.Sprintf("%v; reconnect attempt %d failed: %v", e.dropped, e.attempt, e.err)
}

// Unwrap gives the drop, and the attempt's failure only when it is the
// server's refusal (an *HTTPError, for errors.As): a dial that timed out
// would otherwise make a call that failed at once match
// context.DeadlineExceeded, as a call that timed out does.
func (e *reconnectError) Unwrap() []error {
	var refused *HTTPError
	if errors.As(e.err, &refused) {
		return []error{e.dropped, refused}
	}
	return []error{e.dropped}
}

// connectUnlessClosed is one reconnect attempt, given up when Close is
// called: Close returns at once, not after the attempt's ConnectTimeout
// against a server that accepts and never answers.
func (c *Client) connectUnlessClosed() (*clientConn, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	closed := c.closedCh()
	go func() {
		select {
		case <-closed:
			cancel()
		case <-ctx.Done():
		}
	}()
	return c.connect(ctx)
}

// rejoinCall is the Join of a room the client was in, sent on a
// reconnected connection.
type rejoinCall struct {
	room string
	pc   *pendingCall
}

// sendRejoins sends on cc, a reconnected connection whose capabilities
// have just come, a Join for every room the client is in, before cc is
// ready for anything else: what the program sends on cc then reaches the
// server after them, so an Emit made as soon as OnState says Connected
// (or made while the reconnect was under way, and waiting for it) finds
// the client a member again. Sent one at a time after Connected, each
// waiting for its answer, the rejoins let the server drop such emits
// from a client not yet back in their rooms (a soak test found it), for
// as many round trips as the client had rooms. It runs on the read loop,
// so it only sends; awaitRejoins waits for the answers.
func (c *Client) sendRejoins(cc *clientConn) []rejoinCall {
	c.memberMu.Lock()
	defer c.memberMu.Unlock()
	c.mu.Lock()
	if len(c.rooms) == 0 || c.stillCurrentLocked(cc) != nil {
		c.mu.Unlock()
		return nil
	}
	calls := make([]rejoinCall, 0, len(c.rooms))
	for room := range c.rooms {
		pc := getPendingCall(nil)
		pc.id = c.newID()
		c.pending.add(pc)
		calls = append(calls, rejoinCall{room, pc})
	}
	c.mu.Unlock()
	for _, j := range calls {
		err := cc.sendRaw(wire.Append(nil, &wire.Packet{Kind: dispatch.KindJoin, ID: j.pc.id, Room: []byte(j.room)}))
		switch {
		case err == ErrDisconnected:
			c.settleRefused(cc, callRef{j.pc, j.pc.id})
		case err != nil:
			c.cancelCall(j.pc, err)
		}
	}
	return calls
}

// awaitRejoins waits for the answers to cc's rejoins and reports those
// that failed, unless cc is no longer the client's by then (dropped: the
// next connection rejoins; closed: none does): after Close,
// OnRejoinError is not called. The answers of a connection that ended
// are settled by its end, so waiting for them then takes no time.
//
// They wait up to rejoinTimeout from now or from the last answer to one
// of them: a server that answers them slowly gets that long for each
// (one that checks them all in one turn answers them together, at its
// end). Given rejoinTimeout each, one after the other, whatever came,
// the rejoins of n rooms to a server that answered none were reported
// over n×10 s (a client audit). They are waited for all at once, each on
// a goroutine of its own, so that the bound runs from when an answer
// came: waited for one after the other, an answer picked up after an
// earlier rejoin's wait ran out pushed the bound on from then, and
// against a server that answered every other room the last report came
// about n/2 × rejoinTimeout after the reconnect (note19's "Left").
func (c *Client) awaitRejoins(cc *clientConn) {
	type answer struct {
		room string
		err  error
	}
	// Each pc is recycled once its wait returns: the refs, taken before,
	// tell at the bound whether it is still the rejoin's.
	refs := make([]callRef, len(cc.rejoins))
	for i, j := range cc.rejoins {
		refs[i] = callRef{j.pc, j.pc.id}
	}
	answers := make(chan answer, len(cc.rejoins))
	for _, j := range cc.rejoins {
		go func() { answers <- answer{j.room, c.wait(context.Background(), cc, j.pc)} }()
	}
	cc.rejoins = nil
	bound := time.NewTimer(rejoinTimeout)
	defer bound.Stop()
	for range refs {
		var a answer
		select {
		case a = <-answers:
			bound.Reset(rejoinTimeout)
		case <-bound.C:
			for _, ref := range refs {
				c.cancelRef(ref, errCallTimeout) // no-op for those answered
			}
			a = <-answers
		}
		if a.err != nil {
			c.rejoinFailed(cc, a.room, a.err)
		}
	}
}

// rejoinFailed reports a rejoin of room on cc that failed with err,
// unless cc is no longer the client's.
func (c *Client) rejoinFailed(cc *clientConn, room string, err error) {
	c.mu.Lock()
	gone := c.stillCurrentLocked(cc) != nil
	c.mu.Unlock()
	if gone {
		return
	}
	// Refused by the server (Options.AllowJoin), the room is left:
	// asking again at every reconnect would not change that.
	left := errors.Is(err, ErrUnauthorized)
	if left {
		c.mu.Lock()
		delete(c.rooms, room)
		c.mu.Unlock()
		c.opts.Logger.Warn("hotpath: rejoin refused; the room is left", "room", room, "err", err)
	} else {
		c.opts.Logger.Warn("hotpath: rejoin failed", "room", room, "err", err)
	}
	if h := c.opts.OnRejoinError; h != nil {
		c.rejoinError(h, room, err, left)
	}
}

// rejoinTimeout is how long a reconnect's rejoins wait for an answer
// (awaitRejoins); a variable for tests.
var rejoinTimeout = 10 * time.Second

// rejoinError tells OnRejoinError; a panic in it is logged, as one in
// OnState is. It counts in inCallbacks, as OnState does: a Close made
// from it waited for the goroutine running it, for ever (a client audit).
func (c *Client) rejoinError(h func(string, error, bool), room string, err error, left bool) {
	c.inCallbacks.Add(1)
	defer func() {
		c.inCallbacks.Add(-1)
		if r := recover(); r != nil {
			c.logCallbackPanic("OnRejoinError", r, "room", room)
		}
	}()
	h(room, err, left)
}

// closedCh returns a channel closed once Close was called.
func (c *Client) closedCh() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closedSignal == nil {
		c.closedSignal = make(chan struct{})
		if c.closed {
			close(c.closedSignal)
		}
	}
	return c.closedSignal
}

func (c *Client) setState(s State) {
	if c.opts.OnState == nil {
		return
	}
	c.inCallbacks.Add(1)
	defer func() {
		c.inCallbacks.Add(-1)
		if r := recover(); r != nil {
			c.logCallbackPanic("OnState", r, "state", s.String())
		}
	}()
	c.opts.OnState(s)
}

// logCallbackPanic logs the panic of a callback of the program's that
// runs on a goroutine of the client's (a listener, OnState). Such a panic
// is recovered, not left to end the program from a goroutine the program
// does not own: the connection, its calls and the other listeners live
// on, as on the server and in the browser client.
func (c *Client) logCallbackPanic(what string, r any, attrs ...any) {
	attrs = append(attrs, "panic", r, "stack", string(debug.Stack()))
	c.opts.Logger.Error("hotpath: "+what+" panicked", attrs...)
}

// Close closes the connection with 1000 and stops reconnecting. Calls in
// flight fail with ErrDisconnected. Close returns once the client's
// goroutines are done (but for ask handlers, whose ctx it ends without
// waiting for them: see ClientOptions.Handlers; and for a Go call sent to
// a full Done channel, whose goroutine waits until Done is read: see Go),
// except while a listener (On, OnRoom), OnState or OnRejoinError runs:
// those run on the client's goroutines, so a Close made from one (a
// server's "go away" event, giving up in OnState) returns at once and the
// client finishes closing when the callback returns. The listeners of
// events that came as datagrams, which run off the connection's read
// loop, are waited for alike, and a datagram that arrives once Close has
// begun reaches none.
//
// Close runs the closing handshake (RFC 6455 §7.1.1 and §5.5.1; the close
// notice of PROTOCOL.md §8.3 on the other carriers): it waits for the
// server's answer to its close, which shows that the server read every
// call and reliable emit sent before it, for up to 3 s. With a server that
// answers, Close returns within a round trip or so; on a dead path (the
// server vanished, nothing answers) it returns after those 3 s, on every
// carrier: a silent server cannot be told from a slow one sooner. A
// reconnected connection whose server has not sent its capabilities yet
// has carried nothing to confirm: Close drops it at once.
func (c *Client) Close() error {
	c.close(false)
	return nil
}

// close is Close; with abort, the connection is dropped without the
// closing handshake.
func (c *Client) close(abort bool) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.awaitDone()
		return
	}
	c.closed = true
	if c.closedSignal != nil {
		close(c.closedSignal)
	}
	cc := c.conn
	c.mu.Unlock()
	c.dgMu.Lock()
	c.dgClosed = true
	c.dgMu.Unlock()
	switch {
	case cc == nil:
	case abort || !cc.isReady():
		// A reconnected connection still waiting for the server's
		// capabilities has carried nothing but the client's own: no call,
		// emit or event leaves before them (awaitReady), so the closing
		// handshake would confirm nothing, and a server silent since its
		// handshake held Close for closeTimeout. It is dropped, as Dial
		// and settleReconnect drop one whose capabilities never came.
		cc.link.abort()
	default:
		cc.link.requestClose(wsframe.CloseNormal, "")
	}
	c.awaitDone()
}

// awaitDone waits for the client's goroutines to end, and for the
// datagrams being handled, unless a callback runs, which may be Close's
// caller: waiting would then never end.
func (c *Client) awaitDone() {
	if c.inCallbacks.Load() != 0 {
		return
	}
	<-c.done
	c.dgMu.Lock()
	if c.dgRunning == 0 {
		c.dgMu.Unlock()
		return
	}
	if c.dgIdle == nil {
		c.dgIdle = make(chan struct{})
	}
	idle := c.dgIdle
	c.dgMu.Unlock()
	<-idle
}

// beginDatagram reports whether a datagram may be handled, Close not
// having begun, and counts it until endDatagram.
func (c *Client) beginDatagram() bool {
	c.dgMu.Lock()
	defer c.dgMu.Unlock()
	if c.dgClosed {
		return false
	}
	c.dgRunning++
	return true
}

func (c *Client) endDatagram() {
	c.dgMu.Lock()
	defer c.dgMu.Unlock()
	if c.dgRunning--; c.dgRunning == 0 && c.dgIdle != nil {
		close(c.dgIdle)
		c.dgIdle = nil
	}
}

// testHookDatagramBegun, when set, runs in handleDatagram once the
// datagram is counted, before its listeners.
var testHookDatagramBegun atomic.Pointer[func()]

// current returns the connection calls go to, or ErrDisconnected.
func (c *Client) current() (*clientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.currentLocked()
}

// currentLocked is current with c.mu held.
func (c *Client) currentLocked() (*clientConn, error) {
	if c.closed {
		return nil, ErrClosed
	}
	if c.conn == nil {
		// While reconnecting, or after the connection dropped with
		// Reconnect disabled: why it dropped (CloseStatus gives its code).
		if c.dropped != nil {
			return nil, c.dropped
		}
		return nil, ErrDisconnected
	}
	return c.conn, nil
}

// Call calls method with req and decodes the result into resp, a pointer
// (or nil to discard it). It returns the server's *Error, ErrTimeout when
// ctx's deadline or ClientOptions.CallTimeout passes first (one that
// matches context.DeadlineExceeded too, unless the server's timeout
// answer came first), ctx's error when ctx is canceled, or
// ErrDisconnected when the connection drops first. A canceled ctx ends
// the wait only: the protocol has no cancel packet, and the server's
// handler runs on until the call's timeout (the deadline, sent with the
// call) or its end. Before anything is sent, it refuses with
// ErrBadRequest a resp that is not a non-nil pointer (the method would
// run and its result be lost) and a method name the protocol cannot carry
// (empty, over 255 bytes, not UTF-8); Join, Leave, Emit and Event refuse
// such names too. A ctx that has ended already fails the call at once
// with ctx's error (ErrTimeout past its deadline), unsent: the server
// would run a handler whose answer nobody waits for.
//
// A raw result (resp a *[]byte or *json.RawMessage) is copied into the
// slice resp points to, reusing its capacity, as encoding/json does for a
// json.RawMessage: a caller that passes the same slice call after call
// allocates nothing per answer (at 10 KiB that saved a fifth of a
// call's time, BenchmarkCall10KiB), and one that keeps an earlier answer
// passes a nil slice.
func (c *Client) Call(ctx context.Context, method string, req, resp any) error {
	cc, pc, err := c.start(ctx, method, req, resp, nil)
	if err != nil {
		return err
	}
	if err := c.wait(ctx, cc, pc); err != nil {
		return callError(method, resp, err)
	}
	return nil
}

// callError is the error a call to method ended with, naming the method
// and resp's type when the answer came but did not decode into resp. A nil
// err returns before re is declared: errors.As makes re escape, and every
// answered Go call passes here (one allocation per call).
func callError(method string, resp any, err error) error {
	if err == nil {
		return nil
	}
	var re *resultError
	if errors.As(err, &re) {
		return fmt.Errorf("hotpath: %q answered, but its result does not decode into %T: %w", method, resp, re.err)
	}
	return err
}

// start checks a call, puts it in the pending table and sends it: the
// part of a call that Call and Go share. An error returned means the call
// never joined the table; from then on the call ends in settle, whoever
// settles it (its answer, its deadline, its ctx, a send that failed, the
// connection's end). With async, the call is Go's: settle delivers it on
// async.Done, and its ctx is watched from here (Call watches its own, in
// wait), so the caller must not touch pc after start returns.
func (c *Client) start(ctx context.Context, method string, req, resp any, async *AsyncCall) (*clientConn, *pendingCall, error) {
	if err := checkName("method", method); err != nil {
		return nil, nil, err
	}
	if err := checkResp(resp); err != nil {
		return nil, nil, err
	}
	if ctx.Err() != nil {
		// Not sent: the server would run a handler nobody waits for. A
		// Go call also spared the goroutine that context.AfterFunc starts
		// at once for an ended ctx: a loop of them on one core queued
		// hundreds on c.mu, ahead of the answers (a flake hunt).
		return nil, nil, ctxError(ctx)
	}
	cc, err := c.current()
	if err != nil {
		return nil, nil, err
	}
	deadline, hasDeadline := ctx.Deadline()
	if !hasDeadline && c.opts.CallTimeout > 0 {
		deadline, hasDeadline = time.Now().Add(c.opts.CallTimeout), true
	}
	if !cc.isReady() {
		if err := c.awaitReady(ctx, cc, deadline, hasDeadline); err != nil {
			return nil, nil, err
		}
	}
	var timeoutMS uint32
	if hasDeadline {
		timeoutMS = uint32(min(max(time.Until(deadline).Milliseconds(), 1), 1<<31))
	}

	pc := getPendingCall(resp)
	pc.async = async
	if async != nil && cc.shared != nil {
		// Nobody waits in wait to read this call's answer on WebSocket:
		// counted among the callers waiting on channels, it keeps the
		// token with the read loop until settle takes the count back.
		// Counted before the call joins the table, where any settler
		// may recycle pc.
		cc.shared.countWaiting(&pc.waitingOn)
	}
	c.mu.Lock()
	if err := c.stillCurrentLocked(cc); err != nil {
		c.mu.Unlock()
		uncount(&pc.waitingOn)
		putPendingCall(pc)
		return nil, nil, err
	}
	id := c.newID()
	pc.id = id
	if hasDeadline {
		// Armed under c.mu: whoever settles the call takes it out of the
		// table under c.mu first, so it sees the handle.
		pc.handle = c.timeouts.Arm(deadline, callRef{pc, id})
	}
	if async != nil && ctx.Done() != nil {
		// Registered under c.mu for the same reason; if ctx has ended
		// already, f runs on a goroutine of its own, after the unlock.
		ref := callRef{pc, id}
		pc.stopWatch = context.AfterFunc(ctx, func() { c.cancelRef(ref, ctxError(ctx)) })
	}
	c.pending.add(pc)
	c.mu.Unlock()

	bp := scratchBufs.Get().(*[]byte)
	b := wire.AppendCall(beginFrame(*bp), dispatch.KindCall, id, method, timeoutMS, nil)
	b, err = marshal(c.opts.Codec, b, req)
	if err == nil {
		// A Go caller has no other callers to wait for (enqueue's
		// yield): the calls it starts in a row leave one by one, as a
		// pipelining writer's do.
		err = cc.enqueue(b, async == nil)
	}
	*bp = b[:0]
	scratchBufs.Put(bp)
	// By id, not pc: a Go call's pc may have been settled (its ctx, its
	// deadline, the connection's end) and recycled for another call by
	// now, and canceling through pc would end that other call.
	ref := callRef{pc, id}
	switch {
	case err == ErrDisconnected:
		c.settleRefused(cc, ref)
	case err != nil:
		c.cancelRef(ref, err)
	}
	return cc, pc, nil
}

// stillCurrentLocked returns nil if cc is still the client's connection,
// with c.mu held, and otherwise why not. A call is added to the pending
// table only then: the end of cc clears c.conn and fails the calls in the
// table under c.mu, so a call added after that was failed by nobody, and
// one without a deadline, queued behind another caller's packet, waited
// for ever (a reconnect audit: 1 call in about 500 dropped connections).
func (c *Client) stillCurrentLocked(cc *clientConn) error {
	now, err := c.currentLocked()
	if err == nil && now != cc {
		err = ErrDisconnected // cc ended, and a reconnect replaced it
	}
	return err
}

// resultError is an answer whose result did not decode into the caller's
// resp: the call itself succeeded (Call names the method).
type resultError struct{ err error }

func (e *resultError) Error() string { return "hotpath: decoding a call's result: " + e.err.Error() }
func (e *resultError) Unwrap() error { return e.err }

// awaitReady waits, for a call about to be sent on a reconnected
// connection, until the server's capabilities have arrived (see
// clientConn.awaitReady), or the call's ctx or deadline ends first, or the
// connection does: the errors a call waiting for its answer gets.
func (c *Client) awaitReady(ctx context.Context, cc *clientConn, deadline time.Time, hasDeadline bool) error {
	var expired <-chan time.Time
	if hasDeadline {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		expired = t.C
	}
	select {
	case <-cc.ready:
		return nil
	case <-cc.ended:
		return c.endError(cc)
	case <-ctx.Done():
		return ctxError(ctx)
	case <-expired:
		return errCallTimeout
	}
}

// settleRefused settles a call that cc refused because it was ending
// (ErrDisconnected) with why it ended, once it has. The end fails the
// calls pending then; this one may have joined the table after that. The
// caller waits for the settlement as for an answer (wait), within its ctx
// and deadline: an end that takes long (a read loop that has not noticed
// yet) does not hold the call past them.
func (c *Client) settleRefused(cc *clientConn, ref callRef) {
	go func() {
		<-cc.ended
		c.cancelRef(ref, c.endError(cc))
	}()
}

// endError is why cc ended, once cc.ended is closed: the error its calls
// failed with, or, when a reconnect has cleared that already,
// ErrDisconnected (ErrClosed after Close).
func (c *Client) endError(cc *clientConn) error {
	c.mu.Lock()
	err := c.dropped
	c.mu.Unlock()
	if err == nil {
		err = cc.sendError(corkwriter.Closed)
	}
	return err
}

// newID returns an id no pending call uses; c.mu is held. The table is
// searched only once the ids have wrapped: with 64 calls in flight the
// search cost 1.4% of BenchmarkCarrierEcho/quic/small-64/rpc-goall.
func (c *Client) newID() uint32 {
	for {
		c.nextID++
		if c.nextID == 0 {
			c.idsWrapped = true
			continue
		}
		if !c.idsWrapped || c.pending.get(c.nextID) == nil {
			return c.nextID
		}
	}
}

// wait blocks until pc is settled, settling it with ctx's error if ctx
// ends first. When nobody is reading cc, the caller reads its answer
// itself (readOwnAnswer).
func (c *Client) wait(ctx context.Context, cc *clientConn, pc *pendingCall) error {
	if ws, ok := cc.link.(*wsConn); ok && cc.shared != nil && !pc.settled.Load() && ws.takeReads(&pc.waitingOn, c.pending.size.Load() == 1) {
		c.readOwnAnswer(ctx, cc, ws, pc)
	}
	if done := ctx.Done(); done == nil || pc.settled.Load() {
		// A ctx that never ends, or a call settled already (its caller
		// read the answer): no select to pay for.
		<-pc.done
	} else {
		select {
		case <-pc.done:
		case <-done:
			c.cancelCall(pc, ctxError(ctx))
			<-pc.done
		}
	}
	uncount(&pc.waitingOn) // settled before it was counted
	err := pc.err
	putPendingCall(pc)
	return err
}

// readOwnAnswer reads ws on the caller's goroutine, holding its read token,
// until pc is settled: by its answer, or by another goroutine (timeout,
// ctx, a dropped batch, the connection's end), which then wakes the read.
func (c *Client) readOwnAnswer(ctx context.Context, cc *clientConn, ws *wsConn, pc *pendingCall) {
	pc.reader.Store(ws)
	if ctx.Done() != nil {
		ref := callRef{pc, pc.id}
		c.watch.begin(c, ctx, ref)
		defer c.watch.end(ref)
	}
	ws.readUntil(cc, &pc.settled)
}

// ctxError is the error of a call whose ctx ended: ctx's error when it
// was canceled, errCallTimeout past its deadline.
func ctxError(ctx context.Context) error {
	err := ctx.Err()
	if errors.Is(err, context.DeadlineExceeded) {
		err = errCallTimeout
	}
	return err
}

// cancelCall settles pc with err if it is still pending.
func (c *Client) cancelCall(pc *pendingCall, err error) {
	c.mu.Lock()
	ok := c.pending.remove(pc.id) == pc
	c.mu.Unlock()
	if ok {
		c.settle(pc, nil, err, true)
	}
}

// cancelRef settles the call ref names with err if it is still pending:
// ref's id tells a pendingCall reused for a later call from the one meant.
func (c *Client) cancelRef(ref callRef, err error) {
	c.mu.Lock()
	ok := c.pending.get(ref.id) == ref.pc
	if ok {
		c.pending.remove(ref.id)
	}
	c.mu.Unlock()
	if ok {
		c.settle(ref.pc, nil, err, true)
	}
}

// settle completes a call that its settler removed from the table:
// decodes the result into the caller's resp, or records err. A settler
// other than the connection's reader passes wake, to wake a caller that
// reads for its own answer.
func (c *Client) settle(pc *pendingCall, payload []byte, err error, wake bool) {
	c.timeouts.Cancel(pc.handle)
	if err == nil && pc.resp != nil {
		// A raw answer is copied out of the read buffer it aliases, into
		// the caller's slice when it has the room (see Call).
		switch raw := pc.resp.(type) {
		case *[]byte:
			*raw = append((*raw)[:0], payload...)
		case *json.RawMessage:
			*raw = append((*raw)[:0], payload...)
		default:
			if derr := decodeResult(c.opts.Codec, payload, pc.resp); derr != nil {
				err = &resultError{derr}
			}
		}
	}
	if call := pc.async; call != nil {
		// Nobody waits on done: the settler recycles pc, whose callRefs
		// (the timeout's, the ctx watch's) its id guards.
		if pc.stopWatch != nil {
			pc.stopWatch()
		}
		uncount(&pc.waitingOn)
		putPendingCall(pc)
		call.finish(callError(call.Method, call.Resp, err))
		return
	}
	pc.err = err
	pc.settled.Store(true)
	uncount(&pc.waitingOn) // before the reader looks whether someone waits
	// Read after settled is set (the reading caller sets reader before it
	// looks at settled) and before done is signalled (the caller then
	// reuses pc).
	reader := pc.reader.Load()
	pc.done <- struct{}{}
	if wake && reader != nil {
		reader.wakeReader()
	}
}

// decodeResult decodes a call's answer into resp. A codec, or an
// UnmarshalJSON of resp's, that panics on what the server sent fails that
// call, as marshal fails an encoding that panics: the panic ended the
// program from the goroutine that read the answer, the client's read loop
// or another caller reading its own (a client audit).
func decodeResult(codec Codec, payload []byte, resp any) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the %s codec panicked decoding a %T: %v", codec.Name(), resp, r)
		}
	}()
	return unmarshal(codec, payload, resp)
}

// callRef names a call for the timeout scheduler. The id guards against a
// timeout that fires after its call was answered and its pendingCall
// reused for another call.
type callRef struct {
	pc *pendingCall
	id uint32
}

func (c *Client) fireTimeouts(batch []callRef) {
	for _, ref := range batch {
		c.cancelRef(ref, errCallTimeout)
	}
}

// errCallTimeout ends a call whose deadline passed on the client's side
// (ctx's or CallTimeout): ErrTimeout, as a server's timeout answer is,
// wrapped with context.DeadlineExceeded so that either test matches it.
var errCallTimeout = fmt.Errorf("%w: %w", ErrTimeout, context.DeadlineExceeded)

// On registers fn for the server events named event; the returned
// function unregisters it. fn runs on the connection's read loop, but for
// an event or room emit that came as a datagram (Server.EmitUnreliable on
// QUIC, WebTransport, SCTP and WebRTC), which it gets on the goroutine
// of the carrier's datagrams, at the same time as the loop's: a listener
// whose state both may touch guards it. fn must not block: a Call made from fn would
// wait for an answer that only the loop it holds can read, so fn starts a
// goroutine for one. (Made from fn,
// such a call, Join or Leave fails with ErrDisconnected once the silent
// connection is given up, IdleTimeout plus 6 s after the loop's last
// read, and a warning is logged; the client reconnects when fn
// returns.) A panic in fn
// is logged and the event goes on to the other listeners. On panics on a
// name no event can have (empty, over 255 bytes, not UTF-8), as a
// listener that could never run is a bug in the caller.
func (c *Client) On(event string, fn func(Message)) (off func()) {
	mustListenName("event", event)
	return c.listen(listenerKey{event: event}, fn)
}

// OnRoom registers fn for the emits of event in room, including the
// presence events "$join" and "$leave" whose payload is {"members": n}.
// fn runs as On's does, and OnRoom panics as On does.
func (c *Client) OnRoom(room, event string, fn func(Message)) (off func()) {
	mustListenName("room", room)
	mustListenName("event", event)
	return c.listen(listenerKey{room, event}, fn)
}

// mustListenName panics on a name the wire cannot carry (see On); names
// starting with $ are fine here: the presence events.
func mustListenName(what, name string) {
	if !wire.ValidName(name) {
		panic("compat: " + nameFault(what, name) + ": a listener for it could never run")
	}
}

// guardListener wraps a listener so that its panic is logged, not fatal.
func (c *Client) guardListener(fn func(Message)) func(Message) {
	if fn == nil {
		return nil
	}
	return func(m Message) {
		c.inCallbacks.Add(1)
		defer func() {
			c.inCallbacks.Add(-1)
			if r := recover(); r != nil {
				c.logCallbackPanic("listener", r, "room", m.Room, "event", m.Event)
			}
		}()
		fn(m)
	}
}

// listenerKey names the listeners of an event: in a room, or outside
// rooms (room "", which no room is named). Names may hold any UTF-8,
// NUL included, so a key joined from the two strings could make two
// pairs meet.
type listenerKey struct{ room, event string }

// listen adds fn to the listeners of key. A key's entry goes with its
// last listener: a client that listens to many rooms or events in turn (a
// room per document opened) kept an entry per name for good.
func (c *Client) listen(key listenerKey, fn func(Message)) (off func()) {
	if fn == nil {
		return func() {}
	}
	c.handlersMu.Lock()
	defer c.handlersMu.Unlock()
	e := c.handlers[key]
	if e == nil {
		e = &emitter.Emitter[Message]{}
		c.handlers[key] = e
	}
	remove := e.On(c.guardListener(fn))
	return func() {
		remove()
		c.handlersMu.Lock()
		if c.handlers[key] == e && e.Len() == 0 {
			delete(c.handlers, key)
		}
		c.handlersMu.Unlock()
	}
}

func (c *Client) deliver(key listenerKey, m Message) {
	c.handlersMu.RLock()
	e := c.handlers[key]
	c.handlersMu.RUnlock()
	if e != nil {
		e.Emit(m)
	}
}

// Join adds the client to room and returns the member count. The client
// rejoins it after a reconnect until Leave, or until the server refuses a
// rejoin with ErrUnauthorized (Options.AllowJoin). A ctx that has ended
// already fails the Join at once, unsent, as it does a Call.
func (c *Client) Join(ctx context.Context, room string) (int, error) {
	c.mu.Lock()
	j := c.joining[room]
	if j == nil {
		j = &joinsInFlight{}
		c.joining[room] = j
	}
	j.n++
	c.mu.Unlock()
	n, err := c.membership(ctx, dispatch.KindJoin, room)
	c.mu.Lock()
	if err == nil && !j.left {
		c.rooms[room] = true
	}
	if j.n--; j.n == 0 && c.joining[room] == j {
		delete(c.joining, room)
	}
	c.mu.Unlock()
	return n, err
}

// joinsInFlight counts the Joins of a room in flight; left is set by a
// Leave of the room issued meanwhile. A Join recorded the room when its
// answer came, after a Leave issued later had forgotten it, and the
// reconnect that followed joined the room again (a reconnect audit).
type joinsInFlight struct {
	n    int
	left bool
}

// Leave removes the client from room and returns the member count. The
// client stops rejoining room at once, also when Leave fails: while the
// client is disconnected it returns ErrDisconnected, and the room, which
// the server dropped with the connection, is not rejoined. Unlike a Join,
// a Leave whose ctx has ended already is sent all the same, so that the
// server's membership follows the client's, and returns ctx's error.
func (c *Client) Leave(ctx context.Context, room string) (int, error) {
	c.memberMu.Lock()
	c.mu.Lock()
	delete(c.rooms, room)
	if j := c.joining[room]; j != nil {
		j.left = true
		delete(c.joining, room) // Joins issued from now on count anew
	}
	c.mu.Unlock()
	c.memberMu.Unlock()
	return c.membership(ctx, dispatch.KindLeave, room)
}

// membership sends a Join or Leave and waits for its answer.
func (c *Client) membership(ctx context.Context, kind dispatch.Kind, room string) (int, error) {
	if err := checkName("room", room); err != nil {
		return 0, err
	}
	if kind == dispatch.KindJoin && ctx.Err() != nil {
		// Sent, it would have made the client a member of a room it does
		// not know it is in: not recorded, not rejoined.
		return 0, ctxError(ctx)
	}
	cc, err := c.current()
	if err != nil {
		return 0, err
	}
	// CallTimeout bounds it as it bounds a call: a server that never
	// answered Joins held one with a ctx without deadline for as long as
	// the connection lived, whatever CallTimeout said (a client audit).
	deadline, hasDeadline := ctx.Deadline()
	if !hasDeadline && c.opts.CallTimeout > 0 {
		deadline, hasDeadline = time.Now().Add(c.opts.CallTimeout), true
	}
	if !cc.isReady() {
		if err := c.awaitReady(ctx, cc, deadline, hasDeadline); err != nil {
			return 0, err
		}
	}
	var ans joinAnswer
	pc := getPendingCall(&ans)
	c.mu.Lock()
	if err := c.stillCurrentLocked(cc); err != nil {
		c.mu.Unlock()
		putPendingCall(pc)
		return 0, err
	}
	pc.id = c.newID()
	if hasDeadline {
		// Armed under c.mu, as start arms a call's (see there).
		pc.handle = c.timeouts.Arm(deadline, callRef{pc, pc.id})
	}
	c.pending.add(pc)
	c.mu.Unlock()
	b := wire.Append(beginFrame(nil), &wire.Packet{Kind: kind, ID: pc.id, Room: []byte(room)})
	err = cc.enqueue(b, true)
	switch {
	case err == ErrDisconnected:
		c.settleRefused(cc, callRef{pc, pc.id})
	case err != nil:
		c.cancelCall(pc, err)
	}
	err = c.wait(ctx, cc, pc)
	return ans.Members, err
}

// Emit sends event with payload v to every member of room, the client
// included unless exceptSelf. The client must be a member of room (by
// its Join, or the server's Server.Join): the server drops an emit from a
// non-member, or one Options.AllowEmit refuses, without an answer (it
// counts it in Metrics.DroppedEvents), and Emit returns nil once the
// packet is queued. A payload over the server's emit limit (its maxEmit
// capability, Limits.MaxEmitSize), which the server would drop likewise,
// is refused unsent with an error matching ErrMessageTooBig, as a packet
// over its maxMessage is. Event names starting with $ are the server's
// presence events: refused with ErrBadRequest.
func (c *Client) Emit(room, event string, v any, exceptSelf bool) error {
	if err := checkEmitNames(room, event); err != nil {
		return err
	}
	cc, err := c.current()
	if err != nil {
		return err
	}
	var flags uint8
	if exceptSelf {
		flags = wire.EmitExceptSender
	}
	head := wire.AppendEmit(beginFrame(nil), room, event, flags, nil)
	b, err := marshal(c.opts.Codec, head, v)
	if err != nil {
		return err
	}
	if err := cc.checkEmitSize(len(b) - len(head)); err != nil {
		return cc.refusedError(err)
	}
	return cc.refusedError(cc.enqueue(b, true))
}

// EmitUnreliable is Emit for events the room may miss without harm: on
// QUIC and WebTransport it goes as a datagram, on SCTP and WebRTC on the
// unordered stream or data channel that is never retransmitted, so it
// never waits behind other traffic, and the server relays it to the
// members the same way where their carriers allow (Server.EmitUnreliable);
// on WebSocket, or when it is too large for a datagram, it goes as Emit
// sends it. Like Emit, it fails with ErrMessageTooBig over the server's
// limits, and on a connection just reestablished first waits for the
// server's capabilities, which tell that limit.
func (c *Client) EmitUnreliable(room, event string, v any, exceptSelf bool) error {
	if err := checkEmitNames(room, event); err != nil {
		return err
	}
	cc, err := c.current()
	if err != nil {
		return err
	}
	var flags uint8
	if exceptSelf {
		flags = wire.EmitExceptSender
	}
	head := wire.AppendEmit(beginFrame(nil), room, event, flags, nil)
	b, err := marshal(c.opts.Codec, head, v)
	if err != nil {
		return err
	}
	// Held to the server's limits as Emit is: the server closes the
	// connection on a datagram over maxMessage (1009), and drops one over
	// maxEmit. The limits are known once the server's capabilities came
	// (checkEmitSize waits, as enqueue does): a reconnected connection is
	// current before, and its first datagrams went unchecked.
	if err := cc.checkEmitSize(len(b) - len(head)); err != nil {
		return err
	}
	if err := cc.checkSize(len(b) - frameHeadroom); err != nil {
		return err
	}
	if st, ok := cc.link.sendDatagram(b[frameHeadroom:]); ok {
		return cc.refusedError(cc.sendError(st))
	}
	return cc.refusedError(cc.enqueue(b, true))
}

// Event sends a fire-and-forget event to the server's event handlers.
// Names starting with $ are the protocol's: refused with ErrBadRequest.
func (c *Client) Event(name string, v any) error {
	if err := checkName("event", name); err != nil {
		return err
	}
	cc, err := c.current()
	if err != nil {
		return err
	}
	b, err := marshal(c.opts.Codec, wire.Append(beginFrame(nil), &wire.Packet{Kind: dispatch.KindEvent, Name: []byte(name)}), v)
	if err != nil {
		return err
	}
	return cc.refusedError(cc.enqueue(b, true))
}

// refusedError is the error of an Emit, Event or EmitUnreliable that cc
// refused because it is ending (sendError's bare ErrDisconnected): why it
// ends, as a call refused so gets (settleRefused). Until the read loop has
// ended and recorded why, which takes a round trip or more (the closing
// handshake, the wait for the carrier's close), these returned a bare
// ErrDisconnected, whose CloseStatus is 0. The closing handshake says why
// as soon as it begins, without waiting for the loop, which a listener
// that emits may hold; a link dropped without one is waited for, as long
// as a closing handshake may take, unless a callback runs: it may be the
// read loop's own, which the loop waits for, and the wait would only run
// out (Close's rule, awaitDone). Without a handshake, the close is 1006.
func (cc *clientConn) refusedError(err error) error {
	if err != ErrDisconnected {
		return err
	}
	select {
	case <-cc.ended:
		return cc.c.endError(cc)
	default:
	}
	if ce := cc.link.closeCause(); ce != nil {
		return fmt.Errorf("%w: %w", ErrDisconnected, ce)
	}
	if cc.c.inCallbacks.Load() != 0 {
		return errDroppedWithoutClose
	}
	t := time.NewTimer(closeTimeout)
	defer t.Stop()
	select {
	case <-cc.ended:
		return cc.c.endError(cc)
	case <-t.C:
		return errDroppedWithoutClose
	}
}

// errDroppedWithoutClose is refusedError's when the link ended without a
// closing handshake and its read loop has not said more.
var errDroppedWithoutClose = fmt.Errorf("%w: %w", ErrDisconnected, &CloseError{Code: wsframe.CloseAbnormal, Reason: "the connection dropped"})

// enqueue sends one packet, built after frame headroom in b (see
// beginFrame); the caller owns b again on return. With batching, packets
// that arrive while a write is in progress are gathered and leave together
// as one Batch; the goroutine that finds no write in progress writes at
// once, its own packet straight from b when nobody queued behind it, so a
// lone call waits for nothing and is not copied.
func (cc *clientConn) enqueue(b []byte, yield bool) error {
	if err := cc.awaitReady(); err != nil {
		return err
	}
	if err := cc.checkSize(len(b) - frameHeadroom); err != nil {
		return err
	}
	if cc.c.opts.NoBatching {
		return cc.sendError(cc.sendPacket(b))
	}
	pkt := b[frameHeadroom:]
	cc.qmu.Lock()
	if cc.flushing {
		cc.queue = wire.AppendItem(cc.queue, pkt)
		cc.queued++
		cc.qmu.Unlock()
		return nil
	}
	cc.flushing = true
	cc.qmu.Unlock()
	// Callers are often woken together, by one read that settled their
	// previous calls; yielding once lets the others queue and leave in one
	// batch with this one. On QUIC, where a write is a copy into the
	// stream, 64 concurrent callers otherwise send a packet each; with the
	// yield about 20 calls share one (BenchmarkCarrierEcho/*/small-64).
	// A caller with no other call in flight has nobody to wait for, and
	// since callers read their own answers (sharedread.go) a yield would
	// only delay its packet and the read that follows it.
	// alone: this packet leaves first, straight from b, and what others
	// queued meanwhile follows it (flushQueue).
	alone := true
	ownEnd := 0
	if yield && cc.c.pending.size.Load() > 1 {
		runtime.Gosched()
		cc.qmu.Lock()
		if alone = cc.queued == 0; !alone {
			cc.queue = wire.AppendItem(cc.queue, pkt)
			cc.queued++
			ownEnd = len(cc.queue)
		}
		cc.qmu.Unlock()
	}
	if alone {
		err := cc.sendError(cc.sendPacket(b))
		cc.flushQueue(0)
		return err
	}
	return cc.flushQueue(ownEnd)
}

// hold makes the caller the flusher, as enqueue's first caller becomes
// one, if nobody is, and reports whether it did: packets enqueued
// meanwhile queue until the caller's flushQueue.
func (cc *clientConn) hold() bool {
	if cc.c.opts.NoBatching {
		return false
	}
	cc.qmu.Lock()
	defer cc.qmu.Unlock()
	if cc.flushing {
		return false
	}
	cc.flushing = true
	return true
}

// servedFor is how long cc served, from its server's capabilities to now:
// 0 if they never came.
func (cc *clientConn) servedFor() time.Duration {
	at := cc.readyAt.Load()
	if at == 0 {
		return 0
	}
	return time.Since(time.Unix(0, at))
}

// isReady reports whether the server's capabilities have arrived.
func (cc *clientConn) isReady() bool {
	select {
	case <-cc.ready:
		return true
	default:
		return false
	}
}

// awaitReady waits for the server's capabilities, which carry its message
// and batch limits: sent before them, a packet over a limit the client
// does not know yet would make the server close the connection (1009)
// instead of failing alone. Dial returns after them; a reconnected
// connection's first packets wait here, for about a round trip. It must
// not run on the read loop, which is what makes the connection ready.
func (cc *clientConn) awaitReady() error {
	if cc.isReady() {
		return nil
	}
	select {
	case <-cc.ready:
		return nil
	case <-cc.ended:
		// Why it ended, as a call's error says (Client.awaitReady): a bare
		// ErrDisconnected lost the close of a server that refused the
		// reconnect after its handshake (QUIC, SCTP: 1008).
		return cc.c.endError(cc)
	}
}

// sendError is the error of a packet the link did not take: ErrOverloaded
// when the outbox is full; when the link is closing, ErrClosed if the
// client's owner closed it, else ErrDisconnected (the server or the
// network ended the connection, and it may reconnect).
func (cc *clientConn) sendError(st corkwriter.Status) error {
	if st != corkwriter.Closed {
		return statusError(st)
	}
	cc.c.mu.Lock()
	closed := cc.c.closed
	cc.c.mu.Unlock()
	if closed {
		return ErrClosed
	}
	return ErrDisconnected
}

// packetLimit is the largest packet this connection may send: the least
// of the server's maxMessage and the carrier's message limit, 0 while
// neither is known.
func (cc *clientConn) packetLimit() int {
	limit := int64(cc.link.maxPacket())
	if m := cc.serverMaxMessage.Load(); m > 0 && (limit == 0 || m < limit) {
		limit = m
	}
	return int(min(limit, math.MaxInt32))
}

// checkSize refuses a packet of n bytes over packetLimit, which the server
// would answer by closing the connection (1009), or the carrier could not
// carry.
func (cc *clientConn) checkSize(n int) error {
	if limit := cc.packetLimit(); limit > 0 && n > limit {
		return fmt.Errorf("%w: a packet of %d bytes, over the limit of %d", ErrMessageTooBig, n, limit)
	}
	return nil
}

// checkEmitSize refuses a room emit whose payload, n bytes as the codec
// encoded it, is over the server's maxEmit: the server would drop it
// without a word (an emit has no answer), and Emit would have returned
// nil for an emit nobody receives. It waits for the server's
// capabilities first, which tell the limit, as enqueue waits.
func (cc *clientConn) checkEmitSize(n int) error {
	if err := cc.awaitReady(); err != nil {
		return err
	}
	if limit := cc.serverMaxEmit.Load(); limit > 0 && int64(n) > limit {
		return fmt.Errorf("%w: a room emit's payload of %d bytes, over the server's emit limit (maxEmit) of %d", ErrMessageTooBig, n, limit)
	}
	return nil
}

// flushQueue writes what is queued until the queue stays empty. A packet
// that cannot be sent (the outbox dropped it, the connection closed) may
// hold other callers' calls: they fail with the error at once instead of
// waiting for answers that will never come.
//
// With ownEnd > 0, the caller's own packet is an item of the first round
// that ends ownEnd bytes into it, and the error returned is that packet's:
// nil when it was sent, whatever became of the others. Not necessarily the
// last item: others may queue behind it before the round begins, and a
// packet of theirs that the outbox refused made the caller's call fail
// with ErrOverloaded although it had been sent (an async-call audit).
func (cc *clientConn) flushQueue(ownEnd int) error {
	var own error
	spare := cc.spare
	cc.spare = nil
	for round := 0; ; round++ {
		cc.qmu.Lock()
		items, n := cc.queue, cc.queued
		if n == 0 {
			cc.flushing = false
			if cap(cc.queue) == 0 {
				cc.queue = spare[:0]
			} else if cap(spare) <= maxSpareQueue {
				cc.spare = spare[:0]
			}
			cc.qmu.Unlock()
			return own
		}
		cc.queue, cc.queued = spare[:0], 0
		cc.qmu.Unlock()
		unsent, err := cc.sendItems(items, n)
		if err != nil {
			// Go on with what queued meanwhile: its callers wait on this
			// flusher, and fail too if the outbox is still full.
			cc.failCalls(unsent, err)
			// unsent runs to the end of items: what precedes it was sent.
			if round == 0 && ownEnd > len(items)-len(unsent) {
				own = err
			}
		}
		spare = items
	}
}

// maxSpareQueue bounds the spare queue buffer a client connection keeps
// between flushes. Without a spare, a flush that took more than one round
// grew a new buffer item by item: at 10 KiB with 64 callers, 9-13 KiB
// allocated per call (BenchmarkCall64x10KiB/batching;
// bench/results/compat-large-2026-12-03.txt). 64 calls of 10 KiB queue
// about 650 KiB, more than a smaller cap would keep.
const maxSpareQueue = 1 << 20

// sendItems sends n queued items: one alone, or several as Batch packets
// each within batchMaxBytes and the carrier's packet limit (a data
// channel's message size), a large item alone. On failure it returns the
// items that were not sent.
func (cc *clientConn) sendItems(items []byte, n uint32) (unsent []byte, err error) {
	if n == 1 {
		_, hl := binary.Uvarint(items) // one item: its length, then the packet
		if err := cc.sendRaw(items[hl:]); err != nil {
			return items, err
		}
		return nil, nil
	}
	limit := batchLimit(cc.packetLimit())
	for len(items) > 0 {
		end, count := nextBatch(items, limit, cc.maxBatch())
		var err error
		if count == 1 {
			_, hl := binary.Uvarint(items)
			err = cc.sendRaw(items[hl:end])
		} else {
			err = cc.sendBatch(items[:end], count)
		}
		if err != nil {
			return items, err
		}
		items = items[end:]
	}
	return nil, nil
}

// sendBatch sends count items as one Batch packet, built in a pooled
// frame buffer.
func (cc *clientConn) sendBatch(items []byte, count uint32) error {
	bp := scratchBufs.Get().(*[]byte)
	defer scratchBufs.Put(bp)
	b := wire.Append(beginFrame(*bp), &wire.Packet{Kind: dispatch.KindBatch, Count: count, Payload: items})
	*bp = b[:0]
	return cc.sendError(cc.sendPacket(b))
}

// maxBatch is the most items one Batch may carry to this server.
func (cc *clientConn) maxBatch() uint32 {
	if n := cc.serverMaxBatch.Load(); n > 0 {
		return n
	}
	return defaultMaxBatch
}

// failCalls fails the calls, joins and leaves among items, which were
// not sent, with err. Other packets (events, emits, answers) are lost as
// a packet sent alone would be.
func (cc *clientConn) failCalls(items []byte, err error) {
	if err == ErrDisconnected {
		return // the connection is ending: its end fails them, with why
	}
	for len(items) > 0 {
		size, hl := binary.Uvarint(items)
		if hl <= 0 || uint64(len(items)-hl) < size {
			return
		}
		pkt := items[hl : hl+int(size)]
		items = items[hl+int(size):]
		if len(pkt) == 0 {
			continue
		}
		switch k := dispatch.Kind(pkt[0]); k {
		case dispatch.KindCall, dispatch.KindJoin, dispatch.KindLeave:
			pk, derr := decode(k, pkt[1:])
			if derr != nil {
				continue
			}
			cc.c.mu.Lock()
			pc := cc.c.pending.remove(pk.ID)
			cc.c.mu.Unlock()
			if pc != nil {
				cc.c.settle(pc, nil, err, true)
			}
		}
	}
}

// sendRaw frames and sends one packet.
func (cc *clientConn) sendRaw(pkt []byte) error {
	bp := scratchBufs.Get().(*[]byte)
	defer scratchBufs.Put(bp)
	b := append(beginFrame(*bp), pkt...)
	*bp = b[:0]
	return cc.sendError(cc.sendPacket(b))
}

// sendPacket sends a packet built after frame headroom, compressed with
// the negotiated dictionary when that pays.
func (cc *clientConn) sendPacket(b []byte) corkwriter.Status {
	if d := cc.dict.Load(); d != nil {
		if cb, release, ok := d.compressPacket(b[frameHeadroom:]); ok {
			defer release()
			return cc.link.sendBuilt(cb)
		}
	}
	return cc.link.sendBuilt(b)
}

// handleMessage is the entry of every packet the server sends.
func (cc *clientConn) handleMessage(op wsframe.Opcode, payload []byte) error {
	if op != wsframe.OpBinary {
		return &CloseError{Code: wsframe.CloseUnsupportedData, Reason: "HP_ERR_TEXT_MESSAGE"}
	}
	// An unknown kind, or one only a client sends (PROTOCOL.md §3: 1008),
	// is read from the head byte before anything else, as the server
	// reads it: decoded or inflated first, such a packet whose body did
	// not inflate closed with 1007 here and 1008 there.
	if len(payload) > 0 && !wire.ToClient(dispatch.Kind(payload[0]&^wire.CompressedBit)) {
		return errUnknownKind
	}
	p, err := wire.Decode(payload)
	if err != nil {
		return errMalformed
	}
	if p.Compressed {
		release, err := cc.inflate(&p)
		if err != nil {
			return err
		}
		defer release()
	}
	return cc.handlePacket(&p, true)
}

// inflate replaces a compressed packet by the one its body holds
// (PROTOCOL.md §6); release gives back the buffer p then points into.
func (cc *clientConn) inflate(p *wire.Packet) (release func(), err error) {
	d := cc.dict.Load()
	if d == nil {
		return nil, &CloseError{Code: wsframe.ClosePolicyViolation, Reason: "HP_ERR_UNNEGOTIATED_COMPRESSION"}
	}
	body, release, err := d.decompress(p.Body)
	if err != nil {
		return nil, err
	}
	if *p, err = wire.DecodeBody(p.Kind, body); err != nil {
		release()
		return nil, errMalformed
	}
	return release, nil
}

// handleDatagram handles a packet that arrived as a datagram, on the
// carrier's goroutine: an Emit or an Event, compressed or not
// (PROTOCOL.md §8.4); any other kind closes the connection with 1008, as
// on the server. One that arrives once Close has begun is dropped, and
// Close waits for one begun before (beginDatagram).
func (cc *clientConn) handleDatagram(pkt []byte) error {
	if !cc.c.beginDatagram() {
		return nil
	}
	defer cc.c.endDatagram()
	if hook := testHookDatagramBegun.Load(); hook != nil {
		(*hook)()
	}
	if len(pkt) == 0 {
		return errMalformed
	}
	if k := dispatch.Kind(pkt[0] &^ wire.CompressedBit); k != dispatch.KindEmit && k != dispatch.KindEvent {
		return errDatagramKind
	}
	p, err := wire.Decode(pkt)
	if err != nil {
		return errMalformed
	}
	if p.Compressed {
		release, err := cc.inflate(&p)
		if err != nil {
			return err
		}
		defer release()
	}
	return cc.handlePacket(&p, false)
}

// handlePacket handles a packet, and the items of a Batch one by one; a
// Batch is malformed inside another or outside the packets of a message
// (top).
func (cc *clientConn) handlePacket(p *wire.Packet, top bool) error {
	if p.Kind != dispatch.KindBatch {
		return cc.handleOne(p)
	}
	if !top {
		return errMalformed
	}
	for item := range p.Items() {
		// An item's kind is read before its body, as the server reads it
		// (PROTOCOL.md §3): an unknown kind, or one only a client sends,
		// is HP_ERR_UNKNOWN_KIND whatever follows it. Items() yields no
		// empty, compressed, batch or capabilities item.
		if !wire.ToClient(dispatch.Kind(item[0])) {
			return errUnknownKind
		}
		ip, err := wire.Decode(item)
		if err != nil || ip.Kind == dispatch.KindBatch {
			return errMalformed
		}
		// handleOne does not call back here, so ip stays on the stack: a
		// recursive call moved it to the heap, an allocation per answer.
		if err := cc.handleOne(&ip); err != nil {
			return err
		}
	}
	return nil
}

// handleOne handles a packet other than a Batch.
func (cc *clientConn) handleOne(p *wire.Packet) error {
	c := cc.c
	switch p.Kind {
	case dispatch.KindResult, dispatch.KindError:
		c.mu.Lock()
		pc := c.pending.remove(p.ID)
		if pc != nil && c.pending.len() == 0 && cc.shared != nil {
			cc.shared.handing.Store(true)
		}
		c.mu.Unlock()
		if pc == nil {
			return nil // answered after its timeout
		}
		if p.Kind == dispatch.KindResult {
			c.settle(pc, p.Payload, nil, false)
		} else {
			c.settle(pc, nil, &Error{Code: p.Code, Message: string(p.Message), Data: append([]byte(nil), p.Payload...)}, false)
		}
	case dispatch.KindEvent:
		event := string(p.Name)
		c.deliver(listenerKey{event: event}, Message{Event: event, Data: p.Payload, codec: c.opts.Codec})
	case dispatch.KindEmit:
		room, event := string(p.Room), string(p.Name)
		c.deliver(listenerKey{room, event}, Message{Room: room, Event: event, Data: p.Payload, codec: c.opts.Codec})
	case dispatch.KindAsk:
		cc.answerAsk(p.ID, string(p.Name), append([]byte(nil), p.Payload...), p.Timeout)
	case dispatch.KindPing:
		return cc.answerPing(p.Payload)
	case dispatch.KindPong:
	case dispatch.KindCapabilities:
		// PROTOCOL.md §4.9: a server sends its Capabilities once per
		// connection, as a client does. A repeat could switch the
		// dictionary codec under packets compressed with the first (and
		// have a codec built per packet: a zstd codec's first compression
		// allocates 2 MiB), or change the limits that queued packets were
		// checked against; the server closes on a client's repeat alike.
		if cc.isReady() {
			return errRepeatedCapabilities
		}
		if bytes.Equal(p.Payload, cc.sentCapabilities) {
			return errEchoServer
		}
		for k, v := range p.Pairs() {
			switch string(k) {
			case "dict":
				if c.opts.Dictionary != nil {
					cc.chooseDictionary(string(v))
				}
			case "codec":
				if string(v) != c.opts.Codec.Name() {
					return errUnsupportedCodec
				}
			case "maxBatch":
				if n, err := strconv.ParseUint(string(v), 10, 32); err == nil && n > 0 {
					cc.serverMaxBatch.Store(uint32(n))
				}
			case "maxMessage":
				if n, err := strconv.ParseInt(string(v), 10, 64); err == nil && n > 0 {
					cc.serverMaxMessage.Store(n)
				}
			case "maxEmit":
				if n, err := strconv.ParseInt(string(v), 10, 64); err == nil && n > 0 {
					cc.serverMaxEmit.Store(n)
				}
			}
		}
		// Ready once the limits are stored: senders waiting for them
		// (awaitReady) go on, and Dial returns. A reconnected connection
		// sends its rejoins first, so that what they send goes after.
		cc.readyOnce.Do(func() {
			cc.rejoins = c.sendRejoins(cc)
			cc.readyAt.Store(time.Now().UnixNano())
			close(cc.ready)
		})
	default:
		return errUnknownKind
	}
	return nil
}

// errEchoServer ends a connection whose server sent the client's own
// capabilities back: a server in echo mode (Options.Echo, hotpath -echo),
// which would echo every call too and answer none.
var errEchoServer = &CloseError{Code: wsframe.ClosePolicyViolation, Reason: "HP_ERR_ECHO_SERVER"}

// answerPing answers a server's Ping with a Pong of the same data
// (PROTOCOL.md §4.8), unless the server would refuse the Pong: then this
// end closes with 1009, as the server does on a client's such Ping. The
// server refuses a Pong whose packet, inflated, is over its maxMessage;
// the carrier cannot carry one whose message, as it travels (compressed
// when the dictionary shrinks it), is over its limit (256 KiB on WebRTC).
// Both were checked against the plain Pong, which closed the connection
// on a compressed Ping that inflated past 256 KiB on WebRTC, whose Pong
// the server takes compressed. Before the server's capabilities, only the
// carrier's limit is known, and nothing is compressed.
func (cc *clientConn) answerPing(data []byte) error {
	bp := scratchBufs.Get().(*[]byte)
	defer scratchBufs.Put(bp)
	b := wire.Append(beginFrame(*bp), &wire.Packet{Kind: dispatch.KindPong, Payload: data})
	*bp = b[:0]
	if limit := cc.serverMaxMessage.Load(); limit > 0 && int64(len(b)-frameHeadroom) > limit {
		return errMessageTooBig
	}
	if d := cc.dict.Load(); d != nil {
		if cb, release, ok := d.compressPacket(b[frameHeadroom:]); ok {
			defer release()
			b = cb
		}
	}
	if limit := cc.link.maxPacket(); limit > 0 && len(b)-frameHeadroom > limit {
		return errMessageTooBig
	}
	cc.link.sendBuilt(b)
	return nil
}

// chooseDictionary installs the dictionary codec the server chose.
func (cc *clientConn) chooseDictionary(choice string) {
	d := cc.c.opts.Dictionary
	codecName, id, _ := strings.Cut(choice, ":")
	if id != d.ID() {
		return
	}
	opts := dictionary.CodecOptions{MaxDecoded: maxDecodedBody(cc.c.opts.Limits.MaxMessageSize)}
	switch codecName {
	case "deflate":
		cc.dict.Store(&dictCodec{name: choice, codec: dictionary.NewDeflate(d, opts)})
	case "zstd":
		if z, err := dictionary.NewZstd(d, opts); err == nil {
			cc.dict.Store(&dictCodec{name: choice, codec: z})
		}
	}
}

// invokeAskHandler calls the handler of a server's ask and turns a panic
// into an Internal answer and a log line, as the server does with its
// handlers: the process and the connection live on.
func (c *Client) invokeAskHandler(ctx context.Context, m *method, payload []byte) (result []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			c.opts.Logger.Error("hotpath: ask handler panicked", "method", m.name, "panic", r, "stack", string(debug.Stack()))
			result, err = nil, ErrInternal
		}
	}()
	return m.call(ctx, c.opts.Codec, payload, nil)
}

// answerAsk runs the handler of a server ask on a goroutine of its own
// and sends the Answer; an ask beyond Limits.MaxInFlight running at once
// is answered ErrOverloaded at once, as the server answers such calls.
// Handlers still running from an earlier connection count.
func (cc *clientConn) answerAsk(id uint32, method string, payload []byte, timeoutMS uint32) {
	c := cc.c
	if int(c.asksRunning.Add(1)) > c.opts.Limits.MaxInFlight {
		c.asksRunning.Add(-1)
		e := ErrOverloaded
		// Sent by the read loop itself, which enqueue's wait for the
		// capabilities (awaitReady) would block.
		cc.sendRaw(wire.Append(nil, &wire.Packet{Kind: dispatch.KindAnswer, ID: id, Status: wire.AnswerError, Code: e.Code, Message: []byte(e.Message)}))
		return
	}
	go func() {
		defer c.asksRunning.Add(-1)
		ctx := cc.asksCtx
		if timeoutMS > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, time.Duration(timeoutMS)*time.Millisecond)
			defer cancel()
		}
		var result []byte
		var err error = &Error{Code: wire.CodeNotFound, Message: "method not found: " + method}
		if h := c.opts.Handlers; h != nil {
			if m, lerr := h.methodTable.Lookup([]byte(method)); lerr == nil {
				result, err = c.invokeAskHandler(ctx, m, payload)
			}
		}
		a := wire.Packet{Kind: dispatch.KindAnswer, ID: id, Status: wire.AnswerOK, Payload: result}
		if err != nil {
			e := askError(err)
			a = wire.Packet{Kind: dispatch.KindAnswer, ID: id, Status: wire.AnswerError, Code: e.Code, Message: []byte(wireMessage(e.Message)), Payload: e.Data}
		}
		err = cc.sendAnswer(&a)
		if errors.Is(err, ErrMessageTooBig) {
			// The server still gets an answer, and the asker a reason.
			a = wire.Packet{Kind: dispatch.KindAnswer, ID: id, Status: wire.AnswerError, Code: wire.CodeInternal, Message: []byte("answer over the message limit")}
			err = cc.sendAnswer(&a)
		}
		if errors.Is(err, ErrOverloaded) {
			c.opts.Logger.Warn("hotpath: the answer to an ask was dropped: the outbound queue stayed full", "method", method)
		}
	}()
}

// sendAnswer sends the answer to a server's ask on its own, not through
// the calls' queue: a batch the outbox refuses fails its calls, and an
// answer lost with it left the server's Ask waiting for its timeout (a
// liveness audit: 8 asks of 256 KiB while 32 callers filled the outbox).
// One the outbox has no room for waits, up to closeTimeout, for the queue
// to drain, as the server's answers do. It is built afresh for each try:
// a WebSocket client masks a packet in place.
func (cc *clientConn) sendAnswer(a *wire.Packet) error {
	if err := cc.awaitReady(); err != nil {
		return err
	}
	deadline := time.Now().Add(closeTimeout)
	for {
		b := wire.Append(beginFrame(nil), a)
		if err := cc.checkSize(len(b) - frameHeadroom); err != nil {
			return err
		}
		st := cc.sendPacket(b)
		if st != corkwriter.Dropped || !cc.link.awaitRoom(b, false, deadline) {
			return cc.sendError(st)
		}
	}
}

// askError is the *Error an ask handler's error is answered with, as the
// server answers a handler's (Peer.answerError): its own *Error (Internal
// if it has no code); Timeout
// or Canceled for its context's end, which a handler that respects its
// ctx returns when the ask's timeout passes; Internal for anything else.
func askError(err error) *Error {
	var e *Error
	switch {
	case errors.As(err, &e):
		return withCode(e)
	case errors.Is(err, context.DeadlineExceeded):
		return ErrTimeout
	case errors.Is(err, context.Canceled):
		return ErrCanceled
	}
	return ErrInternal
}

// dialLink opens a connection on the carrier that the URL's scheme names.
func (c *Client) dialLink(ctx context.Context) (link, error) {
	u, err := url.Parse(c.url)
	if err != nil {
		return nil, err
	}
	var l link
	switch u.Scheme {
	case "ws", "wss":
		return c.dialWebSocket(ctx)
	case "quic":
		l, err = c.dialQUIC(ctx, u)
	case "https":
		l, err = c.dialWebTransport(ctx, u)
	case "sctp", "sctp+dtls":
		l, err = c.dialSCTP(ctx, u)
	case "webrtc+http", "webrtc+https":
		l, err = c.dialWebRTC(ctx, u)
	default:
		return nil, fmt.Errorf("compat: unsupported URL scheme %q (ws, wss, quic, https for WebTransport, sctp, sctp+dtls, webrtc+http, webrtc+https)", u.Scheme)
	}
	if pc, ok := l.(*pktConn); ok && err == nil {
		pc.client = true // before its read loop starts
	}
	return l, err
}
