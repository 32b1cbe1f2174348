// Command hotpath runs the hotpath server on its embedded defaults: the
// demo router (echo, a chat room with member counts, a live ticker), the
// demo page at /, the WebSocket endpoint at /ws.
//
//	go run ./compat/cmd/hotpath [-addr 127.0.0.1:8080] [-metrics] [-echo]
//	    [-no-compression] [-context-takeover] [-max-message 1048576] [-max-emit 8192]
//	    [-max-emit-rate 0] [-max-inflate-rate 0] [-max-outbox 0]
//	    [-slow-consumer drop] [-idle-timeout 0] [-keepalive 0] [-max-rooms 0]
//	    [-max-connections 0] [-max-connections-per-address 0]
//	    [-ticker 500ms] [-presence-interval 100ms]
//	    [-quic 127.0.0.1:4433 [-cert file -key file]] [-sctp 127.0.0.1:5000]
//	    [-webrtc | -webrtc-loopback]
//
// (-h describes each flag.)
//
// With -echo it is an echo server for conformance tools: every WebSocket
// message is sent back as it was received.
//
// With -quic it serves native QUIC and WebTransport on that UDP address,
// with a development certificate whose SHA-256 hash it prints for a
// browser's serverCertificateHashes (or the -cert and -key files); with
// -sctp, SCTP over UDP; with -webrtc, WebRTC signalling at /rtc
// (-webrtc-loopback keeps its candidates on 127.0.0.1). The URLs are
// printed and served at /carriers.json.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hotpath-go/hotpath/compat"
)

func main() {
	f := defineFlags(flag.CommandLine)
	flag.Parse()
	f.args = flag.Args()
	if err := checkFlags(*f); err != nil {
		usageError(err)
	}

	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	srv, err := newServer(flag.CommandLine, f, log)
	if err != nil {
		usageError(err)
	}

	mux := http.NewServeMux()
	mux.Handle("/ws", srv)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	if f.metrics {
		mux.Handle("GET /metrics", srv.MetricsHandler())
	}
	if !f.echo {
		serveDemoPage(mux)
	}

	var tlsConf *tls.Config
	var hash string
	if f.quic != "" {
		if tlsConf, hash, err = quicTLS(f.cert, f.key); err != nil {
			fatal(err)
		}
	}
	// Every listener is bound before any is served: all are up, or the
	// binary fails with none left bound.
	lns, err := listen(srv, f.addr, f.quic, f.sctp, tlsConf)
	if err != nil {
		fatal(err)
	}
	ln := lns.http
	extra := mountCarriers(srv, mux, lns, hash, f.webrtc, f.webrtcLoopback)
	// Plain HTTP connections (the page, /metrics, signalling) are closed
	// after 30 s without a request: left open, each idle keep-alive held a
	// descriptor for good. Upgraded connections have timeouts of their own.
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 30 * time.Second}
	mode := "demo"
	if f.echo {
		mode = "echo"
	}
	// On a signal: stop accepting, then let every connection finish its
	// closing handshake (1001) before the process exits. A second signal
	// ends the process at once. Watched before the address is printed: a
	// supervisor that waits for it and then signals gets a shutdown.
	ctx := watchSignals(func(code int) { os.Exit(code) })
	fmt.Printf("hotpath listening on http://%s (%s mode; WebSocket at ws://%s/ws)\n", ln.Addr(), mode, ln.Addr())
	extra.print()

	if !f.echo {
		go runTicker(ctx, srv, f.ticker)
	}
	// A carrier that fails shuts the rest down as a signal does, and the
	// process then exits 1, for a supervisor to restart it.
	failed := make(chan error, 2)
	exitCode := 0
	shutdownDone := make(chan struct{})
	go func() {
		defer close(shutdownDone)
		select {
		case <-ctx.Done():
		case err := <-failed:
			fmt.Fprintln(os.Stderr, "hotpath:", err)
			exitCode = 1
		}
		shutdown(hs, srv, 10*time.Second)
	}()
	lns.serveCarriers(srv, failed)
	if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fatal(err)
	}
	<-shutdownDone
	if exitCode != 0 {
		os.Exit(exitCode)
	}
}

// watchSignals returns a context canceled at the first SIGINT or SIGTERM,
// and calls exit at the second with the status of a process that signal
// killed (128 + its number, as a shell reports it). Restoring the
// default handling after the first (signal.NotifyContext's stop) did not
// do: a process started with SIGINT ignored, as a script's `hotpath &` is,
// gets that back, and a second Ctrl-C was ignored too.
func watchSignals(exit func(code int)) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-signals
		cancel()
		sig := <-signals
		n, _ := sig.(syscall.Signal)
		exit(128 + int(n))
	}()
	return ctx
}

// shutdown stops hs and srv together, within limit: srv's connections
// get their answers and 1001 at once, while hs's requests in progress
// finish. HTTP requests get until srv is done and httpGrace more; then
// hs's remaining connections are closed: net/http's Shutdown waits 5 s
// for a connection that has sent nothing yet (a browser's preconnect), and
// for the whole limit for a request whose body never comes. Run one after
// the other, such a connection held the WebSocket clients' 1001 back for
// seconds, or made them lose it (1006) when it outlasted the limit.
func shutdown(hs *http.Server, srv *compat.Server, limit time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	httpCtx, httpCancel := context.WithCancel(ctx)
	defer httpCancel()
	httpDone := make(chan struct{})
	go func() {
		defer close(httpDone)
		if hs.Shutdown(httpCtx) != nil {
			hs.Close()
		}
	}()
	srv.Shutdown(ctx)
	select {
	case <-httpDone:
	case <-time.After(httpGrace):
		httpCancel()
		<-httpDone
	}
}

// httpGrace is how long HTTP requests may outlast the server's connections
// at shutdown.
const httpGrace = 500 * time.Millisecond

// The range of -max-message.
const minMaxMessage, maxMaxMessage = 1 << 10, 1 << 30

// minTicker is the shortest -ticker: the demo room's emits are for eyes.
const minTicker = 10 * time.Millisecond

// serverDefaults are the options the server runs with when a flag leaves
// its option at 0: the defaults the flags' help states, and those of
// -max-message and -presence-interval, taken from compat itself so that
// a default changed there changes the help (they were copies here, which
// had to follow compat's by hand).
var serverDefaults = compat.Options{}.WithDefaults()

// byteSize says n bytes in the largest binary unit that divides it: 4 MiB,
// 1536 bytes.
func byteSize(n int64) string {
	switch {
	case n != 0 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n != 0 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n != 0 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// slowConsumer is -slow-consumer: Options.SlowConsumer by the names
// slowConsumerNames gives its policies.
type slowConsumer compat.SlowConsumerPolicy

// slowConsumerNames are -slow-consumer's words, the default's first.
var slowConsumerNames = []struct {
	name   string
	policy compat.SlowConsumerPolicy
}{{"drop", compat.DropEvent}, {"disconnect", compat.Disconnect}}

func (v *slowConsumer) String() string {
	for _, n := range slowConsumerNames {
		if n.policy == compat.SlowConsumerPolicy(*v) {
			return n.name
		}
	}
	return fmt.Sprint(uint8(*v))
}

// Set takes one of slowConsumerNames' words, exactly: any other is an
// error that names them.
func (v *slowConsumer) Set(s string) error {
	for _, n := range slowConsumerNames {
		if n.name == s {
			*v = slowConsumer(n.policy)
			return nil
		}
	}
	return fmt.Errorf("want %s or %s", slowConsumerNames[0].name, slowConsumerNames[1].name)
}

// settings are the command's flags (defineFlags), with its arguments.
type settings struct {
	args                          []string
	addr                          string
	echo, metrics                 bool
	noCompression                 bool
	contextTakeover               bool
	maxMessage, maxEmit           int64
	maxEmitRate                   int
	maxInflateRate                int64
	maxOutbox                     int
	slowConsumer                  slowConsumer
	idleTimeout, keepalive        time.Duration
	maxRooms                      int
	maxConnections, maxPerAddress int
	ticker, presence              time.Duration
	cert, key, quic, sctp         string
	webrtc, webrtcLoopback        bool
}

// defineFlags defines the command's flags on fs; the settings it returns
// hold their values once fs is parsed (but for args).
func defineFlags(fs *flag.FlagSet) *settings {
	f := &settings{}
	fs.StringVar(&f.addr, "addr", "127.0.0.1:8080", "address to listen on")
	fs.BoolVar(&f.echo, "echo", false, "echo every WebSocket message as received, for conformance tools")
	fs.BoolVar(&f.metrics, "metrics", false, "serve counters in Prometheus text format at /metrics")
	fs.BoolVar(&f.noCompression, "no-compression", false, "decline permessage-deflate")
	fs.BoolVar(&f.contextTakeover, "context-takeover", false, "allow permessage-deflate context takeover (more memory per connection)")
	def := serverDefaults
	fs.Int64Var(&f.maxMessage, "max-message", def.Limits.MaxMessageSize, fmt.Sprintf("largest message accepted, in bytes, after inflating (%d to %d)", minMaxMessage, maxMaxMessage))
	fs.Int64Var(&f.maxEmit, "max-emit", maxChatEmit, "largest room emit a client may send, in bytes, relayed to every member (0: up to -max-message)")
	fs.IntVar(&f.maxEmitRate, "max-emit-rate", 0, fmt.Sprintf("member deliveries a second that one connection's room emits may cost (an emit to n members costs n); past it they are dropped (0: the default, %d; negative: no limit)", def.Limits.MaxEmitRate))
	fs.Int64Var(&f.maxInflateRate, "max-inflate-rate", 0, fmt.Sprintf("bytes a second one connection may inflate (permessage-deflate and dictionary packets); past it its reading pauses (0: the default, %s, or -max-message if larger; negative: no limit; else at least -max-message)", byteSize(def.Limits.MaxInflateRate)))
	fs.IntVar(&f.maxOutbox, "max-outbox", 0, fmt.Sprintf("bytes queued for one connection and not yet written; past it room emits skip it and answers wait up to 3 s for room (0: the default, %s)", byteSize(int64(def.Limits.MaxOutboxBytes))))
	fs.Var(&f.slowConsumer, "slow-consumer", "what a room emit does to a member whose queue is past -max-outbox, the slow-consumer `policy`: drop (the default) skips the member for that event, disconnect closes its connection")
	fs.DurationVar(&f.idleTimeout, "idle-timeout", 0, fmt.Sprintf("how long a connection may stay silent, pings unanswered, before the server closes it (0: the default, %gs; negative: refused; must be longer than -keepalive)", def.IdleTimeout.Seconds()))
	fs.DurationVar(&f.keepalive, "keepalive", 0, fmt.Sprintf("how long a connection may stay silent before the server pings it (0: the default, %gs, or half of -idle-timeout if that is shorter; negative: refused; must be shorter than -idle-timeout)", def.KeepaliveInterval.Seconds()))
	fs.IntVar(&f.maxRooms, "max-rooms", 0, fmt.Sprintf("rooms one connection may be in at once; past it a join is refused (0: the default, %d; negative: refused)", def.Limits.MaxRooms))
	fs.IntVar(&f.maxConnections, "max-connections", 0, "connections open at once, every carrier's together; past it they are refused (503, or close 1013) (0: no cap)")
	fs.IntVar(&f.maxPerAddress, "max-connections-per-address", 0, "connections open at once from one client address (an IPv6 one by its /64), every carrier's together; past it they are refused (503; QUIC's CONNECTION_REFUSED before the TLS handshake, or close 1013) (0: no cap; leave it 0 behind a reverse proxy)")
	fs.DurationVar(&f.ticker, "ticker", 500*time.Millisecond, "interval of the demo ticker room's emits (at least "+minTicker.String()+")")
	fs.DurationVar(&f.presence, "presence-interval", def.PresenceInterval, "send each room's member-count events at most once per interval (negative: one per change)")
	fs.StringVar(&f.quic, "quic", "", "UDP address for QUIC and WebTransport (off when empty)")
	fs.StringVar(&f.sctp, "sctp", "", "UDP address for SCTP (off when empty)")
	fs.BoolVar(&f.webrtc, "webrtc", false, "serve WebRTC signalling at /rtc")
	fs.BoolVar(&f.webrtcLoopback, "webrtc-loopback", false, "serve WebRTC signalling at /rtc with loopback ICE candidates only")
	fs.StringVar(&f.cert, "cert", "", "certificate file for QUIC (a 13-day development certificate when empty)")
	fs.StringVar(&f.key, "key", "", "key file of -cert")
	return f
}

// options are the server's options for f, logging to log.
func (f *settings) options(log *slog.Logger) compat.Options {
	lim := demoLimits(f.maxMessage, f.maxEmit)
	lim.MaxEmitRate = f.maxEmitRate
	lim.MaxInflateRate = f.maxInflateRate
	lim.MaxOutboxBytes = f.maxOutbox
	lim.MaxRooms = f.maxRooms
	opts := compat.Options{
		Router:      demoRouter(),
		Logger:      log,
		Echo:        f.echo,
		Limits:      lim,
		Compression: compat.Compression{Disabled: f.noCompression, ContextTakeover: f.contextTakeover},
		AllowEmit:   demoAllowEmit,

		PresenceInterval:  f.presence,
		MaxConnections:    f.maxConnections,
		SlowConsumer:      compat.SlowConsumerPolicy(f.slowConsumer),
		IdleTimeout:       f.idleTimeout,
		KeepaliveInterval: f.keepalive,

		MaxConnectionsPerAddress: f.maxPerAddress,
	}
	if f.quic != "" || f.webrtc || f.webrtcLoopback {
		// WebTransport comes from the page's origin on another port.
		opts.CheckOrigin = compat.SameHost
	}
	return opts
}

// newServer is the server for the settings f parsed from fs, logging to
// log. Every option comes from a flag, so a value NewServer refuses is a
// flag's, which checkFlags leaves to NewServer's own check (whose
// defaults and rules the command does not copy): -max-inflate-rate below
// -max-message, a negative -idle-timeout or -keepalive, or a -keepalive
// not shorter than -idle-timeout. Its error then begins with the flag and
// its value, as checkFlags' do: NewServer's names the option
// (KeepaliveInterval), which is not what the operator typed.
func newServer(fs *flag.FlagSet, f *settings, log *slog.Logger) (*compat.Server, error) {
	srv, err := compat.NewServer(f.options(log))
	var oe *compat.OptionError
	if errors.As(err, &oe) {
		if name, ok := optionFlags[oe.Option]; ok {
			return nil, fmt.Errorf("-%s %v: %w", name, fs.Lookup(name).Value, err)
		}
	}
	return srv, err
}

// optionFlags name the flag that sets each option NewServer may refuse
// (its *compat.OptionError's Option); the others' flags checkFlags holds
// to what NewServer takes.
var optionFlags = map[string]string{
	"Limits.MaxInflateRate": "max-inflate-rate",
	"IdleTimeout":           "idle-timeout",
	"KeepaliveInterval":     "keepalive",
}

// checkFlags refuses what the flag package lets through but the server
// cannot use, before anything starts: a value that would panic (a ticker
// interval of 0), fall back silently to a default (a message limit of 0 or
// less, a presence interval of 0, a negative connection cap, outbox
// bound or rooms bound) or be ignored (a stray argument, -key without
// -cert, -cert without -quic, -context-takeover with -no-compression).
func checkFlags(f settings) error {
	switch {
	case len(f.args) > 0:
		return fmt.Errorf("unexpected argument %q", f.args[0])
	case f.maxMessage < minMaxMessage || f.maxMessage > maxMaxMessage:
		// Below about a kilobyte the clients' own capabilities and first
		// calls are refused (1009) at every reconnect.
		return fmt.Errorf("-max-message %d: must be from %d to %d bytes", f.maxMessage, minMaxMessage, maxMaxMessage)
	case f.maxEmit < 0 || f.maxEmit > f.maxMessage:
		// Limits.MaxEmitSize reads a negative one as none, and no emit
		// over -max-message arrives at all.
		return fmt.Errorf("-max-emit %d: must be from 0 (up to -max-message) to -max-message, %d bytes", f.maxEmit, f.maxMessage)
	case f.maxOutbox < 0:
		// Limits.MaxOutboxBytes reads it as the default, as 0: not the
		// smaller queue a negative number seems to ask for.
		return fmt.Errorf("-max-outbox %d: give a number of bytes, or 0 for the default", f.maxOutbox)
	case f.maxRooms < 0:
		// The same for Limits.MaxRooms.
		return fmt.Errorf("-max-rooms %d: give a number of rooms, or 0 for the default", f.maxRooms)
	case f.maxConnections < 0:
		// Options.MaxConnections reads it as no cap, as 0: not what a
		// negative number seems to ask.
		return fmt.Errorf("-max-connections %d: give a number of connections, or 0 for no cap", f.maxConnections)
	case f.maxPerAddress < 0:
		// The same for Options.MaxConnectionsPerAddress.
		return fmt.Errorf("-max-connections-per-address %d: give a number of connections, or 0 for no cap", f.maxPerAddress)
	case f.ticker < minTicker:
		// A nanosecond ticker spun a core, members or not.
		return fmt.Errorf("-ticker %v: must be at least %v", f.ticker, minTicker)
	case f.presence == 0:
		return errors.New("-presence-interval 0: give an interval, or a negative value for one event per change")
	case (f.cert == "") != (f.key == ""):
		return errors.New("-cert and -key go together")
	case f.cert != "" && f.quic == "":
		return errors.New("-cert is for QUIC: set -quic too")
	case f.noCompression && f.contextTakeover:
		// With permessage-deflate declined there is no context to keep.
		return errors.New("-context-takeover is for permessage-deflate: leave out -no-compression")
	}
	return nil
}

// usageError ends the process as the flag package does for a flag it
// cannot parse: the error, the flags' help, exit status 2.
func usageError(err error) {
	fmt.Fprintln(os.Stderr, "hotpath:", err)
	flag.Usage()
	os.Exit(2)
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "hotpath:", err)
	os.Exit(1)
}
