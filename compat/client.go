package compat

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gobwas/ws"
	"github.com/hotpath-go/hotpath/compat/wire"
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
	// SCTPRTOMax caps the retransmission timeout of the client's SCTP
	// associations: sctp://, sctp+dtls:// and WebRTC's data channels. 3 s
	// by default; Dial refuses a value under 1 s, SCTP's RTO.Min, or
	// above 60 s, its RTO.Max.
	// Options.SCTPRTOMax says why 3 s, and when to choose another.
	SCTPRTOMax time.Duration
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
	// multiply such handlers. MaxInflateRate (64 MiB/s by default) bounds
	// what a connection inflates of the server's dictionary-compressed
	// packets, as the server bounds its clients': past it the reading
	// pauses, and compressed datagrams are dropped (see its doc).
	Limits Limits
	// CallTimeout bounds a call, Join or Leave whose context has no
	// deadline, and the opening of such a stream (OpenStream: until the
	// server accepts it, not the transfer); 0: none.
	CallTimeout time.Duration
	// ConnectTimeout bounds each connection attempt, Dial's (within its
	// ctx) and every reconnect's: the carrier's handshakes, the upgrade or
	// signalling, and the server's capabilities. 10 s by default. An
	// attempt it ends fails with an error that matches
	// context.DeadlineExceeded and names the step that ran out (the TCP
	// connect, the TLS handshake, the WebSocket upgrade, the carrier's
	// handshake, the server's capabilities).
	ConnectTimeout time.Duration
	// KeepaliveInterval is how long the server may stay silent before the
	// client pings it; 25 s by default, or half of IdleTimeout when that is
	// shorter. IdleTimeout is how long it may stay silent, pings
	// unanswered, before the client closes the connection with 1001
	// HP_IDLE_TIMEOUT (and reconnects); 60 s by default; negative for
	// neither pings nor the timeout. Dial refuses an interval not shorter
	// than IdleTimeout. Any bytes read count as life. A pause of the
	// reading for Limits.MaxInflateRate is the client's silence, not the
	// server's, whose answers to pings wait unread behind it: while it
	// lasts the server is pinged but never given up, and its silence
	// counts from the pause's end, whatever IdleTimeout -
	// KeepaliveInterval is. A pause lasts a second at most and begins
	// only before inflating a packet already received, so a server gone
	// silently is still given up, about IdleTimeout after the client has
	// read and inflated the last of what it sent.
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

	metrics clientMetrics

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

	// inflateRate bounds how fast the connection inflates the server's
	// dictionary-compressed packets (Limits.MaxInflateRate), nil until
	// the first.
	inflateRate atomic.Pointer[inflateBudget]
	// noPauses is set once the client closes or gives up the connection:
	// no inflate pause begins, and the one under way ends (endPauses).
	noPauses atomic.Bool
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
//
// Dial refuses, before dialling, a value in opts it cannot use (a
// KeepaliveInterval not shorter than IdleTimeout, a Limits.MaxInflateRate
// below MaxMessageSize a second, an SCTPRTOMax outside SCTP's RTO.Min
// and RTO.Max, a Reconnect.MaxDelay below MinDelay, Handlers with a name
// no packet can carry or registered twice) with an *OptionError whose
// Option names the field as ClientOptions spells it
// ("Limits.MaxInflateRate", "Handlers"), as NewServer does its Options'.
// An sctp+dtls URL without a DTLSConfig is one too, for "DTLSConfig".
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
			return nil, &OptionError{Option: "KeepaliveInterval", Err: err}
		}
	}
	if err := checkInflateRate("ClientOptions.Limits", opts.Limits); err != nil {
		return nil, &OptionError{Option: "Limits.MaxInflateRate", Err: err}
	}
	if opts.SCTPRTOMax == 0 {
		opts.SCTPRTOMax = defaultSCTPRTOMax
	}
	if err := checkSCTPRTOMax("ClientOptions.SCTPRTOMax", opts.SCTPRTOMax); err != nil {
		return nil, &OptionError{Option: "SCTPRTOMax", Err: err}
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
		return nil, &OptionError{Option: "Reconnect.MaxDelay", Err: fmt.Errorf("compat: Reconnect.MaxDelay %v is below MinDelay %v", opts.Reconnect.MaxDelay, opts.Reconnect.MinDelay)}
	}
	if opts.Handlers != nil {
		if err := opts.Handlers.freeze(); err != nil {
			return nil, &OptionError{Option: "Handlers", Err: err}
		}
	}
	if opts.DTLSConfig == nil && isDTLSURL(url) {
		// Before the dial, as the other options': dialSCTP found it only
		// once the address had resolved, and an address that did not
		// failed with the resolver's error instead.
		return nil, errNoDTLSConfig
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
		// Closed without waiting for the answer (link.closeNow):
		// nothing sent on it needs the closing handshake's
		// confirmation, and a server silent since its handshake held
		// Dial closeTimeout past ctx. Its close tells the server why
		// the connection ended, which a drop did not (1006).
		c.close(true)
		// Run out of ConnectTimeout, it reads as a dial that had no
		// answer at all does (connectError), with the step it was at.
		return nil, c.connectError(ctx, fmt.Errorf("hotpath: %s: no capabilities from the server: %w", url, ctx.Err()))
	}
}

// connectTimeoutError is the cause of a connection attempt's ctx that ran
// out of ClientOptions.ConnectTimeout: it names the URL, the timeout and
// the step the attempt was at, and tells the timeout from the caller's
// ctx ending. It matches context.DeadlineExceeded.
type connectTimeoutError struct {
	url     string
	timeout time.Duration
	// step is the step the attempt was at when the timeout ran out, set
	// by connectError from progress, which the attempt moves on as it
	// goes (setConnectStep).
	step     connectStep
	progress *connectProgress
}

func (e *connectTimeoutError) Error() string {
	return fmt.Sprintf("hotpath: %s: ConnectTimeout (%v) ran out %s", e.url, e.timeout, e.step)
}

func (e *connectTimeoutError) Unwrap() error { return context.DeadlineExceeded }

// isDTLSURL reports whether raw is an sctp+dtls URL, which needs
// ClientOptions.DTLSConfig. A URL that does not parse is left to the
// dial, whose error it is.
func isDTLSURL(raw string) bool {
	u, err := url.Parse(raw)
	return err == nil && u.Scheme == "sctp+dtls"
}

// errNoDTLSConfig refuses an sctp+dtls URL without ClientOptions.DTLSConfig.
var errNoDTLSConfig = &OptionError{Option: "DTLSConfig", Err: errors.New("compat: sctp+dtls needs ClientOptions.DTLSConfig")}

// connectStep is a step of a connection attempt, for the error of one
// that ConnectTimeout ends: a server that never answers the upgrade, one
// that upgrades and sends no capabilities, and a host that drops every
// packet fail alike, and only the step tells them apart.
type connectStep int32

const (
	stepConnect      connectStep = iota // the carrier's dial, before a step of its own is known
	stepTCP                             // ws://, wss://: the TCP connect
	stepTLS                             // wss://: the TLS handshake
	stepUpgrade                         // ws://, wss://: the upgrade request and its answer
	stepQUIC                            // quic://: the QUIC handshake, TLS included, and the control stream
	stepWebTransport                    // https://: the QUIC handshake, the CONNECT and the control stream
	stepSCTP                            // sctp://: the association's handshake
	stepDTLS                            // sctp+dtls://: the DTLS handshake, then the association's
	stepSignalling                      // webrtc+http(s)://: the offer and the signalling request
	stepWebRTC                          // webrtc+http(s)://: ICE, DTLS, SCTP and the control channel
	stepCapabilities                    // every carrier: the server's capabilities
)

func (s connectStep) String() string {
	switch s {
	case stepTCP:
		return "during the TCP connect"
	case stepTLS:
		return "during the TLS handshake"
	case stepUpgrade:
		return "during the WebSocket upgrade"
	case stepQUIC:
		return "during the QUIC handshake"
	case stepWebTransport:
		return "during the QUIC handshake or the WebTransport CONNECT"
	case stepSCTP:
		return "during the SCTP handshake"
	case stepDTLS:
		return "during the DTLS or SCTP handshake"
	case stepSignalling:
		return "during the WebRTC signalling"
	case stepWebRTC:
		return "during the WebRTC connection (ICE, DTLS, SCTP, its data channel)"
	case stepCapabilities:
		return "waiting for the server's capabilities"
	}
	return "during the connection"
}

// connectProgress is the step a connection attempt is at. Dial's attempt
// and the connect within it share one, so that whichever ctx runs out
// first names the step.
type connectProgress struct{ step atomic.Int32 }

type connectProgressKey struct{}

// setConnectStep records that the attempt ctx bounds is at step.
func setConnectStep(ctx context.Context, step connectStep) {
	if p, ok := ctx.Value(connectProgressKey{}).(*connectProgress); ok {
		p.step.Store(int32(step))
	}
}

// withConnectTimeout bounds a connection attempt by ConnectTimeout.
func (c *Client) withConnectTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	p, ok := ctx.Value(connectProgressKey{}).(*connectProgress)
	if !ok {
		p = &connectProgress{}
		ctx = context.WithValue(ctx, connectProgressKey{}, p)
	}
	return context.WithTimeoutCause(ctx, c.opts.ConnectTimeout, &connectTimeoutError{url: c.url, timeout: c.opts.ConnectTimeout, progress: p})
}

// connectError is the error of a connection attempt that failed with err
// under ctx. One that ran out of ConnectTimeout says so, and at which
// step: a QUIC handshake with a host that never answers ended in a bare
// "context deadline exceeded".
func (c *Client) connectError(ctx context.Context, err error) error {
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	if ctx.Err() == nil {
		// A dialer that sets ctx's deadline on its socket (net.Dialer's
		// connect) may fail at it, with the socket's own "i/o timeout", a
		// moment before ctx ends and has its cause: a TCP connect that
		// ran out of ConnectTimeout read "dial tcp …: i/o timeout" in
		// about one run of three.
		if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
			<-ctx.Done()
		}
	}
	var te *connectTimeoutError
	if !errors.As(context.Cause(ctx), &te) {
		return err
	}
	at := &connectTimeoutError{url: te.url, timeout: te.timeout, step: connectStep(te.progress.step.Load())}
	if err == context.DeadlineExceeded || err == error(te) {
		return at
	}
	return &connectTimedOut{te: at, err: err}
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
	setConnectStep(ctx, stepCapabilities)
	cc := &clientConn{c: c, link: l, ready: make(chan struct{}), ended: make(chan struct{})}
	cc.asksCtx, cc.cancelAsks = context.WithCancel(context.Background())
	if ws, ok := l.(*wsConn); ok {
		cc.shared = ws.shared
		cc.shared.inflate = &cc.inflateRate
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
func (c *Client) dialWebSocket(ctx context.Context, u *url.URL) (link, error) {
	d := ws.Dialer{Protocols: []string{Subprotocol}, Timeout: c.opts.ConnectTimeout}
	tlsScheme := u.Scheme == "wss"
	if c.opts.TLSConfig != nil {
		d.TLSConfig = c.opts.TLSConfig.Clone()
		d.TLSConfig.NextProtos = []string{"http/1.1"} // the upgrade is HTTP/1.1, never h2
	} else if tlsScheme {
		d.TLSConfig = &tls.Config{} // as the Dialer's own, to hook on
	}
	if tlsScheme {
		// The handshake runs inside the Dialer's first write (the
		// upgrade request): VerifyConnection, at its end, marks it done.
		verify := d.TLSConfig.VerifyConnection
		d.TLSConfig.VerifyConnection = func(cs tls.ConnectionState) error {
			if verify != nil {
				if err := verify(cs); err != nil {
					return err
				}
			}
			setConnectStep(ctx, stepUpgrade)
			return nil
		}
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
	setConnectStep(ctx, stepTCP)
	d.NetDial = func(dctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := (&net.Dialer{}).DialContext(dctx, network, addr)
		if err != nil {
			return nil, err
		}
		if tlsScheme {
			setConnectStep(ctx, stepTLS)
		} else {
			setConnectStep(ctx, stepUpgrade)
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

// SyscallConn lets an inflate pause watch the socket under TLS for the
// server's going (watchHangUp).
func (c *upgradeConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.ErrUnsupported
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
// has carried nothing to confirm: Close sends its close and ends the
// connection once that is written, without waiting for the answer (on
// SCTP and WebRTC the carrier's close delivers the close notice first,
// within a second; on WebTransport the session's and the QUIC
// connection's closes carry the code). The server sees 1000 on every
// carrier.
func (c *Client) Close() error {
	c.close(false)
	return nil
}

// close is Close; with now, the connection is closed without waiting
// for the server's answer (link.closeNow).
func (c *Client) close(now bool) {
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
	case now || !cc.isReady():
		// A reconnected connection still waiting for the server's
		// capabilities has carried nothing but the client's own: no call,
		// emit or event leaves before them (awaitReady), so the closing
		// handshake would confirm nothing, and a server silent since its
		// handshake held Close for closeTimeout. Its close is sent, and
		// the connection ended, without waiting for the answer: dropped,
		// as it was, the server saw 1006.
		cc.link.closeNow(wsframe.CloseNormal, "")
		cc.endPauses()
	default:
		cc.link.requestClose(wsframe.CloseNormal, "")
		cc.endPauses()
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

// dialLink opens a connection on the carrier that the URL's scheme names.
func (c *Client) dialLink(ctx context.Context) (link, error) {
	u, err := url.Parse(c.url)
	if err != nil {
		return nil, err
	}
	var l link
	switch u.Scheme {
	case "ws", "wss":
		return c.dialWebSocket(ctx, u)
	case "quic":
		setConnectStep(ctx, stepQUIC)
		l, err = c.dialQUIC(ctx, u)
	case "https":
		setConnectStep(ctx, stepWebTransport)
		l, err = c.dialWebTransport(ctx, u)
	case "sctp", "sctp+dtls":
		if u.Scheme == "sctp" {
			setConnectStep(ctx, stepSCTP)
		} else {
			setConnectStep(ctx, stepDTLS)
		}
		l, err = c.dialSCTP(ctx, u)
	case "webrtc+http", "webrtc+https":
		setConnectStep(ctx, stepSignalling)
		l, err = c.dialWebRTC(ctx, u)
	default:
		return nil, fmt.Errorf("compat: unsupported URL scheme %q (ws, wss, quic, https for WebTransport, sctp, sctp+dtls, webrtc+http, webrtc+https)", u.Scheme)
	}
	if pc, ok := l.(*pktConn); ok && err == nil {
		pc.client = true // before its read loop starts
	}
	return l, err
}
