package compat

import (
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hotpath-go/hotpath/wsframe"
)

// Options configures a Server. The zero value of every field selects the
// documented default, so Options{Router: r} is a complete configuration.
type Options struct {
	// Router holds the methods and events served. Required.
	Router *Router

	// Codec encodes payloads; JSON when nil.
	Codec Codec

	// Logger receives connection errors and handler panics; slog.Default()
	// when nil.
	Logger *slog.Logger

	// Limits bound every connection; see Limits for the defaults.
	Limits Limits

	// Compression configures permessage-deflate (RFC 7692) for the peers
	// that offer it.
	Compression Compression

	// NoDictionary turns off the preset dictionary compression that the Go
	// client negotiates through capabilities (PROTOCOL.md §6).
	NoDictionary bool

	// CheckOrigin decides whether an upgrade request from a browser may
	// proceed. nil allows requests without an Origin header and requests
	// whose Origin host equals the Host header (same origin); everything
	// else is refused with 403.
	CheckOrigin func(r *http.Request) bool

	// Authenticate runs before the upgrade. It returns the identity the
	// connection carries (Peer.Identity), or an error: an *HTTPError
	// chooses the status (401, 403, ...) and the message the client
	// reads; any other error refuses with 403 "forbidden", its text logged
	// at Debug level and not sent. Native QUIC and SCTP connections have
	// no HTTP request: r then has Proto "quic", "sctp" or "sctp+dtls",
	// RemoteAddr, and in TLS the certificates the client sent (TLS is nil
	// over SCTP without DTLS). r.TLS is set whenever the connection is
	// encrypted (Peer.Encrypted), Serve over tls.NewListener included,
	// but on WebRTC, whose r is the signalling request.
	Authenticate func(r *http.Request) (identity any, err error)

	// Compress decides per upgrade request whether permessage-deflate may
	// be negotiated, for instance to turn it off for clients on a local
	// network. nil allows it whenever Compression allows it.
	Compress func(r *http.Request) bool

	// MaxPendingSCTP bounds the SCTP associations in their handshake at
	// once (ServeSCTP). Each holds about 13 KB and two goroutines for up to
	// 10 s, and over UDP an INIT from a new address is all it takes to
	// start one, so a flood from many addresses could hold memory without
	// bound. A client that completes the association may make it hold up
	// to its 1 MiB receive window more, with the fragments of a message
	// larger than the window, which pion keeps until the message completes
	// (what it sends on stream 1 in whole messages is read and dropped);
	// such a message never completes, since the sender may not pass the
	// full window, and pion shows nothing of it, so the association is
	// held until its handshake times out (see the README's carriers
	// section). Past it, a new one replaces the oldest if that has been pending for
	// 2 s, and is dropped otherwise. 256 by default.
	MaxPendingSCTP int

	// SCTPRTOMax caps the retransmission timeout (RTO) of the server's SCTP
	// associations, native (ServeSCTP) and WebRTC's (WebRTCHandler); 3 s
	// by default, where pion's own default is RFC 9260's RTO.Max of 60 s.
	// The timer doubles at each expiry (§6.3.3 E2) and comes down only
	// with a fresh round-trip sample (§6.3.1): a flooded association was
	// seen backed off to 8.9 s, so that each later loss waited that long,
	// and a packet lost a few times in a row could wait up to a minute,
	// past the keepalive (25 s) and IdleTimeout (60 s), which would give
	// up as silent a connection SCTP was about to recover. Capped at 3 s,
	// with RTO.Min's 1 s, the timer runs 1, 2, 3, 3 s…: a lost packet, or
	// a probe of a closed receive window, is sent again within 3 s, eight
	// times or more within a default keepalive interval. 3 s is what
	// Chromium's SCTP gives its data channels (kMaxTimerBackoffDuration),
	// so a browser's end backs off alike. The cost, on a path that is
	// down, is one retransmitted packet per association every 3 s instead
	// of ever more rarely; and an INIT, whose resends it also times, is
	// sent again sooner (its 8 resends span about 24 s instead of 4
	// minutes, still past the Go client's 10 s ConnectTimeout), which
	// suits a client dropped past MaxPendingSCTP.
	//
	// Raise it on a path whose round trip, with its jitter, nears the cap
	// (a geostationary satellite hop, a congested mobile link whose delay
	// spikes to seconds): a timer that expires before the
	// acknowledgement arrives sends again what was not lost, and each
	// expiry cuts the congestion window to one packet (§7.2.3). Keep it
	// under the keepalive interval, with room for a few resends: a
	// keepalive interval under the cap (an IdleTimeout under twice it sets
	// one by default) may give a connection up while a retransmission
	// waits. Lower it, down to 1 s, on a LAN, where a lost packet is
	// rarely congestion and is worth sending again sooner. NewServer
	// refuses a value under 1 s, SCTP's RTO.Min (§6.3.1 C6): pion takes
	// the cap as the timeout outright when it is below RTO.Min, whatever
	// the round trip, and would resend every packet of a slower path. It
	// refuses one above 60 s, RTO.Max (§16), too. Each
	// end caps its own timers: a Go client's is ClientOptions.SCTPRTOMax.
	SCTPRTOMax time.Duration

	// MaxPendingQUIC bounds the QUIC connections, across the server's
	// ServeQUIC listeners, accepted and still without their control
	// stream (native QUIC) or their first WebTransport session (HTTP/3),
	// together with the WebTransport sessions still without their control
	// stream (a connection's first session takes over its slot; a CONNECT
	// past the bound is answered 503 with Retry-After).
	// Until then a connection has passed nothing but QUIC's handshake, and
	// what a client sends on streams the server has not taken yet (on
	// HTTP/3, for a session that does not exist, which webtransport-go
	// holds for 5 s at a time) sits in QUIC's buffers, up to the
	// connection's 16 MiB window, about 21 MiB of heap, for up to 10 s.
	// Past it, a new connection takes the slot of the oldest if that has
	// been pending for 2 s (closed with 1008 HP_ERR_HANDSHAKE_STALE), and
	// is refused otherwise: before its TLS handshake with QUIC's
	// CONNECTION_REFUSED on a ListenQUIC listener, or once accepted with
	// 1013 HP_ERR_TOO_MANY_HANDSHAKES. 256 by default.
	MaxPendingQUIC int

	// MaxConnections caps the connections open at once, across every
	// carrier (Server.Peers, Metrics.Connections). A connection past it is
	// refused with the carrier's refusal: 503 with Retry-After on a
	// WebSocket upgrade, a WebTransport CONNECT and WebRTC signalling (an
	// *HTTPError to the Go client), a close with 1013
	// HP_ERR_TOO_MANY_CONNECTIONS on native QUIC and SCTP; one that passed
	// those checks together with others that filled the cap is closed
	// with that 1013 once open, on any carrier. Refusals count in
	// Metrics.RefusedConnections. 0 (or less), the default, is no cap: the
	// right number is memory per connection against the host's, which the
	// server cannot know. Over TCP the process's descriptor limit caps
	// WebSocket already; QUIC, WebTransport, SCTP and WebRTC share UDP
	// sockets and have no such bound, so set it when serving them to the
	// public.
	MaxConnections int

	// MaxConnectionsPerAddress caps the connections open at once from one
	// remote address, across every carrier, so that one client cannot take
	// every slot of MaxConnections (or, with no cap, every descriptor of
	// the process) from everyone else. An address is the IP of the
	// connection's RemoteAddr (for WebRTC the signalling request's, for
	// ServeHTTP the http.Request's, so a middleware that sets it from a
	// trusted proxy's header makes the count follow it); an IPv4-mapped
	// IPv6 address counts as its IPv4, and an IPv6 address by its /64
	// prefix, which a single host usually holds whole. A connection whose
	// RemoteAddr names no IP (a Unix socket, net.Pipe) is not counted.
	//
	// Handshakes in progress included: a connection counts from the moment
	// the server first knows its address until it ends, so that one
	// address cannot hold descriptors and goroutines in handshakes that
	// never finish, nor fill MaxPendingQUIC, MaxPendingSCTP or WebRTC's
	// MaxPending, which every client shares. It counts from Serve's
	// accept, before a byte is read; from a QUIC connection's accept,
	// native or HTTP/3 (an HTTP/3 connection counts once while it has no
	// WebTransport session, and once per session while it has some: a
	// session takes the connection's count over when the connection has
	// no other, else counts from its CONNECT, and the connection takes
	// the last one's back as it ends, until the connection closes); from
	// an SCTP association's accept; from WebRTC's signalling request; and
	// under ServeHTTP from the handler, net/http having read the request
	// first (its ReadHeaderTimeout bounds that). Past it a connection gets
	// MaxConnections' refusal with a reason of its own, where it is
	// counted: 503 "too many connections from this address" with
	// Retry-After (ServeHTTP, WebRTC signalling and a WebTransport
	// session's CONNECT beside another on its connection; Serve writes it
	// at the accept, before the request, and closes); on a QUIC listener
	// made by ListenQUIC, QUIC's CONNECTION_REFUSED at the connection's
	// first packet, before any TLS work (native QUIC and WebTransport
	// alike); on a listener the application made, and for one that raced
	// past that check, a close of its QUIC connection at its accept with
	// 1013 HP_ERR_TOO_MANY_CONNECTIONS_FROM_ADDRESS; and on SCTP a drop,
	// as past MaxPendingSCTP: its client retries its INIT, a refusal it
	// could read taking the handshake the cap spares. Refusals count in
	// Metrics.RefusedPerAddress, an SCTP client's once however many times
	// it resends its INIT. 0 (or less), the default, is no cap:
	// behind a reverse proxy every connection shares the proxy's address,
	// and the cap would be one for all. Options.Authenticate may still
	// refuse by a key of the application's own (an account, a token).
	MaxConnectionsPerAddress int

	// KeepaliveInterval is how long a connection may stay silent before
	// the server pings it; 25 s by default, or half of IdleTimeout when
	// that is shorter. IdleTimeout is how long it may stay silent, pings
	// unanswered, before the server drops it; 60 s by default. NewServer
	// refuses an interval not shorter than IdleTimeout, and negative
	// values (a server always gives silent peers up; the client's
	// negative "off" has no server counterpart). Both are checked by one
	// scheduler for the whole server.
	//
	// A pause of a connection's reading for Limits.MaxInflateRate is the
	// server's silence, not the client's: the client's answers to pings
	// wait unread behind it. While it lasts the connection is pinged but
	// never given up, and its silence counts from the pause's end, so
	// any IdleTimeout, even one whose IdleTimeout - KeepaliveInterval is
	// shorter than a pause, keeps a live client. A pause lasts a second
	// at most, and begins only before inflating a message already
	// received, so a client that went silently dead (no FIN, no reset)
	// is still given up, about IdleTimeout after the server has read
	// and inflated the last of what it sent.
	KeepaliveInterval time.Duration
	IdleTimeout       time.Duration

	// AskTimeout bounds a server-to-client Ask whose context has no
	// deadline; 30 s by default.
	AskTimeout time.Duration

	// PresenceInterval coalesces a room's presence events ($join, $leave:
	// PROTOCOL.md §4.5). Each one goes to every member: with one per
	// change, N members joining a room cost N²/2 packets, and a client
	// that joins and leaves in a loop makes every member of a large room
	// read two packets per turn. A room sends at most one presence
	// event per interval, with its member count then ($join when it grew
	// since the last one, $leave when it fell, none when it is unchanged):
	// 100 ms by default; a negative interval sends one per change, at once,
	// in the order of the changes (of two changes made together, the
	// earlier one's event is dropped if the later one's went first).
	// NoPresence sends none (Join's answer still carries the count).
	PresenceInterval time.Duration
	NoPresence       bool

	// SlowConsumer is what a room emit does to a member whose outbound
	// queue is over Limits.MaxOutboxBytes: DropEvent (the default) skips
	// that member for that event, Disconnect drops the member. Answers to
	// calls are never skipped: one the queue has no room for waits up to
	// 3 s for it to drain, and a peer that takes nothing meanwhile is
	// disconnected.
	SlowConsumer SlowConsumerPolicy

	// Echo turns the server into an echo server: every WebSocket message,
	// text or binary, is sent back as it was received, and no packet is
	// parsed. It exists for external conformance tools (RFC 6455 and RFC
	// 7692 suites); the Router is still required but unused, and any
	// subprotocol, or none, is accepted: the first one offered is selected.
	Echo bool

	// OnConnect and OnDisconnect, when set, run when a connection is
	// established and when it ends, with why: when the server began the
	// closing handshake (Shutdown, an idle timeout, a violation), its own
	// close as a *CloseError with Remote false and the reason it sent
	// (HP_SHUTTING_DOWN, HP_IDLE_TIMEOUT, ...), not the client's echo;
	// when the client did, the client's close, Remote true. They
	// run on the connection's goroutine and should not block. A panic in
	// either is logged and counted; one in OnConnect closes that
	// connection with 1011. OnDisconnect runs once the connection's
	// synchronous handlers have returned; Async methods, stream handlers
	// and handlers of events that came as datagrams may still run then
	// (their contexts are canceled): do not free what they use there
	// without a lock or a count of your own.
	OnConnect    func(p *Peer)
	OnDisconnect func(p *Peer, err error)

	// AllowJoin, when set, decides whether a client may join a room. It
	// runs on the connection's read loop for every Join a client sends
	// (a Go client's rejoins after a reconnect included; Server.Join does
	// not ask it) and returns nil to allow. An *Error it returns is the
	// Join's answer; any other error is answered ErrUnauthorized. Without
	// it any client may join any room, receive its events and emit to it:
	// set it when some rooms are not public (a user's own room, a private
	// chat), typically from Peer.Identity. It must not block. A panic in
	// it is logged and counted, and the Join answered ErrInternal.
	AllowJoin func(p *Peer, room string) error

	// AllowEmit, when set, decides whether a client's emit to a room it is
	// a member of reaches the room's members: false drops it, counted in
	// Metrics.DroppedEvents, as an emit to a room the client is not in
	// is. It runs on the read loop for every such emit, so it must be
	// quick; event is a new string each call. Server emits do not ask it.
	// A panic in it is logged and counted, and the emit dropped.
	AllowEmit func(p *Peer, room, event string) bool
}

// SlowConsumerPolicy says what a room emit does with a member that cannot
// keep up.
type SlowConsumerPolicy uint8

const (
	// DropEvent skips the member for this event and counts the drop.
	DropEvent SlowConsumerPolicy = iota
	// Disconnect closes the member's connection, with no close frame;
	// a WebSocket is reset, so the kernel frees what it held for the
	// member at once.
	Disconnect
)

// Limits bound one connection. A zero field selects its default.
type Limits struct {
	// MaxMessageSize bounds a message, after inflating: 1 MiB.
	MaxMessageSize int64
	// MaxFrameSize bounds one frame's payload: MaxMessageSize.
	MaxFrameSize int64
	// MaxFragments bounds the frames of one message: 1024.
	MaxFragments int
	// MaxInFlight bounds the Async calls running at once; calls beyond it
	// are answered ErrOverloaded: 128.
	MaxInFlight int
	// MaxBatch bounds the packets of one batch: 1024.
	MaxBatch int
	// MaxOutboxBytes bounds what is queued for the peer and not yet
	// written: 4 MiB.
	MaxOutboxBytes int
	// MaxRooms bounds the rooms one connection is in at once: 256.
	MaxRooms int
	// MaxPendingAsks bounds the server's asks to one peer that await
	// their answers at once (Peer.Ask); one more fails at once with
	// ErrTooManyAsks, unsent, and the connection lives on. Each pending
	// ask holds an entry, a timeout and its caller's goroutine until it
	// is answered or times out (Options.AskTimeout, 30 s), so a handler
	// that asks in a loop a client that never answers would otherwise
	// grow them without bound: 256, twice the asks a Go client runs at
	// once by default (it answers more with ErrOverloaded). Server only:
	// the Go client ignores it.
	MaxPendingAsks int
	// MaxEmitSize bounds the payload of a room emit a client sends,
	// which the server relays to every member: one emit of MaxMessageSize
	// to a room of a thousand members is a gigabyte to send. A larger
	// one is dropped, counted in Metrics.DroppedEvents as an emit
	// AllowEmit refuses, and logged at Warn the first time on each
	// connection (an emit has no answer to carry an error, and a log line
	// per emit would let one client flood the log). Server emits are not
	// held to it. 0, the default, sets no bound beyond MaxMessageSize.
	// Server only. One below MaxMessageSize is announced to clients (the
	// maxEmit capability, PROTOCOL.md §4.9), and the Go and JavaScript
	// clients refuse a larger emit themselves, with an error, instead of
	// sending it to be dropped.
	MaxEmitSize int
	// MaxEmitRate bounds the member deliveries one connection's room
	// emits cost a second: an emit to a room of n members costs n, n-1
	// when it excepts the sender. The server relays a client's emit to
	// every member, so one connection sending small emits as fast as it
	// can to a room of a thousand has the server make a thousand
	// deliveries per emit, an amplification MaxEmitSize does not bound.
	// It is a token bucket holding one second's worth; an emit larger
	// than that passes when the bucket is full and leaves it owing the
	// rest, so no room is too large to emit to. An emit the bucket
	// cannot pay is dropped, counted in Metrics.EmitThrottled and
	// DroppedEvents and logged at Warn the first time on each
	// connection, as one over MaxEmitSize is; the connection stays, and
	// its calls are answered. Emits that arrive as datagrams are charged
	// alike; server emits are not. 500,000 a second: a client streaming
	// 60 updates a second to a room of a thousand makes 60,000, and a
	// connection held to the rate costs about a tenth of a core (some
	// 200 ns a delivery by BenchmarkRoomEmit); negative turns it off.
	// Server only, and not announced to clients: an emit has no answer
	// either way.
	MaxEmitRate int
	// MaxInflateRate bounds the bytes one connection inflates a second,
	// its permessage-deflate messages and dictionary-compressed packets
	// together: 64 MiB/s (or MaxMessageSize a second, if larger); negative
	// turns it off. MaxMessageSize bounds inflating in memory, not in CPU:
	// a message of zeros inflates some 1000 times over, at about 5 MB/s
	// of received bytes per core whatever its size, so a client could
	// keep a core inflating. Past the rate the connection's reading
	// pauses before it inflates again (at most a second at a time),
	// which holds the sender back through the carrier's flow control and
	// loses nothing. The answers already made leave before the pause, and
	// a close (Peer.Close, Shutdown, a slow consumer's drop, a violation
	// off the read loop) or the connection's end (on WebSocket, the
	// client's FIN or reset, seen on Linux only) ends it at once. A pause
	// is not the client's silence: the keepalive gives nothing up while
	// it lasts and counts the silence from its end (see IdleTimeout). A
	// compressed datagram that finds the budget spent is dropped
	// (DroppedEvents).
	// Both are counted in Metrics.InflateThrottled. A message of
	// MaxMessageSize always passes at once, and NewServer refuses a rate
	// below MaxMessageSize a second.
	//
	// The Go client (ClientOptions.Limits) holds what its server sends to
	// the same rate, by default too: its dictionary-compressed packets
	// (it offers no permessage-deflate), so that a server it cannot trust
	// (a bot's, a bridge's, one taken over) cannot keep a core of the
	// client's program inflating. Its reading pauses alike, after the
	// calls answered so far have returned; a caller reading for its own
	// answer stops pausing once its call is answered or its ctx ends;
	// Close ends a pause at once; its keepalive does not give the server
	// up for the silence of the client's own pause (see
	// ClientOptions.IdleTimeout); its compressed datagrams that find the
	// budget spent are dropped. Nothing counts them: the client has no
	// metrics. Dial refuses a rate below MaxMessageSize a second.
	MaxInflateRate int64
}

// defaultMaxInflateRate is Limits.MaxInflateRate's default: far above
// what realtime traffic inflates, while the worst bomb held to it costs
// about 1.3% of a core per connection (bench/results/inflate-bomb-2026-12-07.txt).
const defaultMaxInflateRate = 64 << 20

func (l Limits) withDefaults() Limits {
	if l.MaxMessageSize <= 0 {
		l.MaxMessageSize = wsframe.DefaultMaxMessageSize
	}
	if l.MaxFrameSize <= 0 {
		l.MaxFrameSize = l.MaxMessageSize
	}
	if l.MaxInflateRate == 0 {
		l.MaxInflateRate = max(defaultMaxInflateRate, l.MaxMessageSize)
	}
	if l.MaxFragments <= 0 {
		l.MaxFragments = 1024
	}
	if l.MaxInFlight <= 0 {
		l.MaxInFlight = 128
	}
	if l.MaxBatch <= 0 {
		l.MaxBatch = 1024
	}
	if l.MaxOutboxBytes <= 0 {
		l.MaxOutboxBytes = 4 << 20
	}
	if l.MaxRooms <= 0 {
		l.MaxRooms = 256
	}
	if l.MaxPendingAsks <= 0 {
		l.MaxPendingAsks = 256
	}
	if l.MaxEmitRate == 0 {
		l.MaxEmitRate = defaultMaxEmitRate
	}
	return l
}

// Compression configures permessage-deflate. Compression is on by default
// for peers that offer it; messages below Threshold are sent plain.
type Compression struct {
	// Disabled turns permessage-deflate off: offers are declined.
	Disabled bool
	// Level is the deflate level, 1 (fastest) to 9; 1 by default, which
	// suits short JSON well. NewServer refuses any other value.
	Level int
	// Threshold is the smallest payload worth compressing: 256 bytes.
	Threshold int
	// ContextTakeover lets peers that ask for it keep a compression
	// context across messages. It compresses repeated messages far better
	// and costs a window and a compressor per connection (see deflatecache);
	// off by default, so an idle connection costs no compression memory.
	ContextTakeover bool
}

// check refuses, once defaults are filled in, the settings that would fail
// later on every connection rather than now.
func (o Options) check() error {
	if err := checkKeepalive(o.KeepaliveInterval, o.IdleTimeout); err != nil {
		return &OptionError{Option: "KeepaliveInterval", Err: err}
	}
	if err := checkSCTPRTOMax("Options.SCTPRTOMax", o.SCTPRTOMax); err != nil {
		return &OptionError{Option: "SCTPRTOMax", Err: err}
	}
	if l := o.Compression.Level; l < 1 || l > 9 {
		// deflatecache would refuse it, and every upgrade that negotiates
		// permessage-deflate would fail with 500.
		return &OptionError{Option: "Compression.Level", Err: fmt.Errorf("compat: Compression.Level %d is outside 1 to 9", l)}
	}
	if err := checkInflateRate("Limits", o.Limits); err != nil {
		return &OptionError{Option: "Limits.MaxInflateRate", Err: err}
	}
	return nil
}

// checkInflateRate refuses a MaxInflateRate below MaxMessageSize a
// second, at either end (name is the Limits' own, for the error): a
// message of MaxMessageSize could then pause the reading for more than
// a second.
func checkInflateRate(name string, l Limits) error {
	if r, m := l.MaxInflateRate, l.MaxMessageSize; r > 0 && r < m {
		return fmt.Errorf("compat: %s.MaxInflateRate %d is below MaxMessageSize (%d) a second; set it higher, or negative for no limit", name, r, m)
	}
	return nil
}

// defaultKeepalive is the keepalive interval when none is set: 25 s, or
// half of idle when idle is shorter, so that a silent peer is pinged
// before it is given up.
func defaultKeepalive(interval, idle time.Duration) time.Duration {
	if interval > 0 {
		return interval
	}
	return min(25*time.Second, idle/2)
}

// checkKeepalive refuses an interval that does not leave a silent peer
// time to answer a ping before idle passes: it would be dropped unpinged.
func checkKeepalive(interval, idle time.Duration) error {
	if interval >= idle {
		return fmt.Errorf("compat: KeepaliveInterval %v is not shorter than IdleTimeout %v: a silent peer would be dropped before it is pinged", interval, idle)
	}
	return nil
}

// HTTPError refuses an upgrade with Status from Options.Authenticate. The
// Go client's Dial returns one when a server refuses its upgrade (or
// WebRTC signalling, or WebTransport CONNECT) with an HTTP status, the
// Message being the response body's first 512 bytes.
type HTTPError struct {
	Status  int
	Message string
	// RetryAfter is, on the client's side, the refusal's Retry-After
	// (RFC 9110 §10.2.3: seconds, or a date), 0 without one. The client
	// waits at least that long (counted up to Reconnect.MaxDelay), plus up
	// to half again at random, before its next reconnect attempt: a server
	// at its connection cap answers 503 with Retry-After, and its clients
	// asked again from MinDelay (100 ms) on.
	// The server does not send it from an Authenticate's error.
	RetryAfter time.Duration
}

// refusalMessage is an HTTPError's Message from the first bytes of a
// refusal's body (512 are read): trimmed, and valid UTF-8, since the cut
// may split a character and the body is the server's to choose.
func refusalMessage(body []byte) string {
	return strings.TrimSpace(validPrefix(string(body), len(body)))
}

// retryAfter reads a response's Retry-After: delay-seconds or an
// HTTP-date (RFC 9110 §10.2.3); 0 when absent, malformed or past.
func retryAfter(h http.Header) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseUint(v, 10, 32); err == nil {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// Error says the status with the message: on the client's side the
// message alone ("no token", or a proxy's "hello") would not say that an
// HTTP request was refused.
func (e *HTTPError) Error() string {
	return fmt.Sprintf("hotpath: HTTP %d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
}

// WithDefaults returns o as NewServer runs it: every field that selects a
// default (a zero value, and the others its doc names) set to that
// default, those that follow another field (KeepaliveInterval, the
// Limits' MaxFrameSize and MaxInflateRate) from o's. It checks nothing:
// NewServer refuses some values it would fill in (a negative
// IdleTimeout). It exists so that a program can state the defaults it
// leaves to the server, a command's flags' help for one, from this one
// source rather than copies that must follow it (Options{}.WithDefaults()
// has them all). Options that NewServer accepts it accepts filled in
// alike, and runs the same.
func (o Options) WithDefaults() Options {
	if o.Codec == nil {
		o.Codec = JSON
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	o.Limits = o.Limits.withDefaults()
	if o.MaxPendingSCTP <= 0 {
		o.MaxPendingSCTP = 256
	}
	if o.SCTPRTOMax == 0 {
		o.SCTPRTOMax = defaultSCTPRTOMax
	}
	if o.MaxPendingQUIC <= 0 {
		o.MaxPendingQUIC = 256
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 60 * time.Second
	}
	o.KeepaliveInterval = defaultKeepalive(o.KeepaliveInterval, o.IdleTimeout)
	if o.AskTimeout <= 0 {
		o.AskTimeout = 30 * time.Second
	}
	if o.PresenceInterval == 0 {
		o.PresenceInterval = defaultPresenceInterval
	}
	if o.Compression.Level == 0 {
		o.Compression.Level = 1
	}
	if o.Compression.Threshold <= 0 {
		o.Compression.Threshold = 256
	}
	return o
}

// defaultPresenceInterval is Options.PresenceInterval's default: presence
// reaches members about as fast as a person notices it, and a room of any
// size sends at most ten presence events a second.
const defaultPresenceInterval = 100 * time.Millisecond
