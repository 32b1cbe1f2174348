package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hotpath-go/hotpath/compat"
	"github.com/hotpath-go/hotpath/compat/internal/wstest"
	"github.com/hotpath-go/hotpath/compat/wire"
	"github.com/hotpath-go/hotpath/dispatch"
	"github.com/hotpath-go/hotpath/wsframe"
)

// TestMain runs the command itself, with the arguments in
// HOTPATH_TEST_MAIN, when a test starts the test binary with that set:
// the test then has the real command as a child process, without
// building it.
func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv("HOTPATH_TEST_MAIN"); ok {
		os.Args = append([]string{"hotpath"}, strings.Fields(args)...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A second SIGINT ends the process at once, also when it was started
// with SIGINT ignored, as a shell script's `hotpath &` is: the handling
// restored after the first signal was that ignoring, so the second was
// ignored too and the process went on with its graceful shutdown (exit
// 0, found by a docs walkthrough). Here a WebSocket client that does not
// answer the server's close holds the shutdown up.
func TestSecondSignalEndsTheProcess(t *testing.T) {
	cmd, addr := startCommand(t, true)
	ws, err := wstest.Dial(addr, "/ws")
	if err != nil {
		t.Fatal(err)
	}
	defer ws.NC.Close()
	// A pong shows the connection served: one still being registered when
	// the shutdown begins is refused at once, without a closing handshake.
	ws.WriteFrame(wsframe.OpPing, []byte("served?"), wsframe.Fin)
	for {
		m, err := ws.ReadMessage(10 * time.Second)
		if err != nil {
			t.Fatalf("waiting for the pong: %v", err)
		}
		if m.Opcode == wsframe.OpPong {
			break
		}
	}
	cmd.Process.Signal(syscall.SIGINT)
	if code, reason := ws.ReadClose(10 * time.Second); code != wsframe.CloseGoingAway {
		t.Fatalf("after the first SIGINT the client read close %d %q; want 1001, the shutdown begun", code, reason)
	}
	cmd.Process.Signal(syscall.SIGINT)
	if got, want := waitExit(t, cmd), 128+int(syscall.SIGINT); got != want {
		t.Errorf("exit status %d; want %d, the second SIGINT's (0 is a graceful shutdown that ignored it)", got, want)
	}
}

// A connection upgraded just as the shutdown begins gets its close 1001
// too. It was counted among the server's connections only after its 101
// had left, so Shutdown could return, and the process exit, before the
// connection was refused: its client read the end of the stream (1006),
// in about one run of five of TestSecondSignalEndsTheProcess before that
// waited for a pong. Each round signals the command as soon as the
// upgrade's answer is read.
func TestShutdownRightAfterAnUpgradeSaysGoingAway(t *testing.T) {
	for round := range 10 {
		cmd, addr := startCommand(t, false)
		ws, err := wstest.Dial(addr, "/ws")
		if err != nil {
			t.Fatal(err)
		}
		cmd.Process.Signal(syscall.SIGINT)
		code, reason := ws.ReadClose(10 * time.Second)
		ws.NC.Close()
		if code != wsframe.CloseGoingAway {
			t.Fatalf("round %d: the client read close %d %q; want 1001", round, code, reason)
		}
		if got := waitExit(t, cmd); got != 0 {
			t.Fatalf("round %d: exit status %d; want 0, a graceful shutdown", round, got)
		}
	}
}

// startCommand starts the command (TestMain) on a loopback port, with
// SIGINT ignored as a shell script's background job has it if ignoreINT,
// and returns it and its address once it has printed it. The command is
// killed when the test ends, if it still runs.
func startCommand(t *testing.T, ignoreINT bool) (*exec.Cmd, string) {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("no SIGINT to send")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "HOTPATH_TEST_MAIN=-addr 127.0.0.1:0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if ignoreINT {
		signal.Ignore(syscall.SIGINT) // inherited across exec, as from a shell
	}
	err = cmd.Start()
	if ignoreINT {
		signal.Reset(syscall.SIGINT)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	first, err := bufio.NewReader(stdout).ReadString('\n')
	go io.Copy(io.Discard, stdout)
	var addr string
	if _, serr := fmt.Sscanf(first, "hotpath listening on http://%s", &addr); serr != nil {
		t.Fatalf("the command's first line %q (%v): %v", first, err, serr)
	}
	return cmd, addr
}

// waitExit waits for cmd to exit, for 30 s at most, and returns its exit
// status.
func waitExit(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-exited
		t.Fatal("the command had not exited 30 s after the signal")
	}
	return cmd.ProcessState.ExitCode()
}

func TestCheckFlags(t *testing.T) {
	const every = 500 * time.Millisecond
	for _, tc := range []struct {
		name string
		settings
		ok bool
	}{
		{name: "defaults", settings: settings{maxMessage: 1 << 20, ticker: every, presence: every}, ok: true},
		{name: "cert with quic", settings: settings{maxMessage: 1 << 20, ticker: every, presence: every, cert: "c.pem", key: "k.pem", quic: "127.0.0.1:4433"}, ok: true},
		{name: "stray argument", settings: settings{args: []string{"8080"}, maxMessage: 1 << 20, ticker: every, presence: every}},
		{name: "zero ticker", settings: settings{maxMessage: 1 << 20, presence: every}},
		{name: "negative ticker", settings: settings{maxMessage: 1 << 20, ticker: -time.Second, presence: every}},
		{name: "nanosecond ticker", settings: settings{maxMessage: 1 << 20, ticker: time.Nanosecond, presence: every}},
		{name: "shortest ticker", settings: settings{maxMessage: 1 << 20, ticker: minTicker, presence: every}, ok: true},
		{name: "zero max message", settings: settings{ticker: every, presence: every}},
		{name: "negative max message", settings: settings{maxMessage: -5, ticker: every, presence: every}},
		{name: "max message under the capabilities", settings: settings{maxMessage: 10, ticker: every, presence: every}},
		{name: "max message over 1 GiB", settings: settings{maxMessage: 99999999999999, ticker: every, presence: every}},
		{name: "smallest max message", settings: settings{maxMessage: 1 << 10, ticker: every, presence: every}, ok: true},
		{name: "presence per change", settings: settings{maxMessage: 1 << 20, ticker: every, presence: -1}, ok: true},
		{name: "zero presence interval", settings: settings{maxMessage: 1 << 20, ticker: every}},
		{name: "connection cap", settings: settings{maxMessage: 1 << 20, maxConnections: 10000, ticker: every, presence: every}, ok: true},
		{name: "negative connection cap", settings: settings{maxMessage: 1 << 20, maxConnections: -1, ticker: every, presence: every}},
		{name: "per-address cap", settings: settings{maxMessage: 1 << 20, maxPerAddress: 100, ticker: every, presence: every}, ok: true},
		{name: "negative per-address cap", settings: settings{maxMessage: 1 << 20, maxPerAddress: -1, ticker: every, presence: every}},
		{name: "outbox bound", settings: settings{maxMessage: 1 << 20, maxOutbox: 64 << 10, ticker: every, presence: every}, ok: true},
		{name: "rooms bound", settings: settings{maxMessage: 1 << 20, maxRooms: 16, ticker: every, presence: every}, ok: true},
		{name: "negative rooms bound", settings: settings{maxMessage: 1 << 20, maxRooms: -1, ticker: every, presence: every}},
		{name: "negative outbox bound", settings: settings{maxMessage: 1 << 20, maxOutbox: -1, ticker: every, presence: every}},
		{name: "key without cert", settings: settings{maxMessage: 1 << 20, ticker: every, key: "k.pem", quic: "127.0.0.1:4433", presence: every}},
		{name: "cert without quic", settings: settings{maxMessage: 1 << 20, ticker: every, cert: "c.pem", key: "k.pem", presence: every}},
		{name: "context takeover", settings: settings{maxMessage: 1 << 20, ticker: every, presence: every, contextTakeover: true}, ok: true},
		{name: "no compression", settings: settings{maxMessage: 1 << 20, ticker: every, presence: every, noCompression: true}, ok: true},
		{name: "emits up to max message", settings: settings{maxMessage: 1 << 20, maxEmit: 0, ticker: every, presence: every}, ok: true},
		{name: "emit bound", settings: settings{maxMessage: 1 << 20, maxEmit: maxChatEmit, ticker: every, presence: every}, ok: true},
		{name: "emit bound of max message", settings: settings{maxMessage: 1 << 20, maxEmit: 1 << 20, ticker: every, presence: every}, ok: true},
		{name: "negative emit bound", settings: settings{maxMessage: 1 << 20, maxEmit: -1, ticker: every, presence: every}},
		{name: "emit bound over max message", settings: settings{maxMessage: 1 << 20, maxEmit: 1<<20 + 1, ticker: every, presence: every}},
		// Compression off, the takeover asked for would be silently ignored.
		{name: "context takeover without compression", settings: settings{maxMessage: 1 << 20, ticker: every, presence: every, noCompression: true, contextTakeover: true}},
	} {
		err := checkFlags(tc.settings)
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

// -max-emit-rate, -max-inflate-rate and -max-outbox reach the server's
// Limits.MaxEmitRate, MaxInflateRate and MaxOutboxBytes as given; left
// out, they are 0, the server's defaults. An inflate rate below -max-message a second
// passes checkFlags and is refused by NewServer's own check, on the
// options the flags make (main then exits 2, as for a bad flag).
func TestRateFlagsReachTheServer(t *testing.T) {
	options := func(args ...string) compat.Options { t.Helper(); return flagOptions(t, args...) }
	for _, tc := range []struct {
		args    []string
		emit    int
		inflate int64
		outbox  int
	}{
		{nil, 0, 0, 0},
		{[]string{"-max-emit-rate", "1000", "-max-inflate-rate", "2097152"}, 1000, 2 << 20, 0},
		{[]string{"-max-emit-rate", "-1", "-max-inflate-rate", "-1"}, -1, -1, 0},
		{[]string{"-max-message", "4194304", "-max-inflate-rate", "4194304"}, 0, 4 << 20, 0},
		{[]string{"-max-outbox", "65536"}, 0, 0, 64 << 10},
	} {
		opts := options(tc.args...)
		if got := opts.Limits; got.MaxEmitRate != tc.emit || got.MaxInflateRate != tc.inflate || got.MaxOutboxBytes != tc.outbox {
			t.Errorf("%q: MaxEmitRate %d, MaxInflateRate %d, MaxOutboxBytes %d; want %d, %d, %d", tc.args, got.MaxEmitRate, got.MaxInflateRate, got.MaxOutboxBytes, tc.emit, tc.inflate, tc.outbox)
		}
		if _, err := compat.NewServer(opts); err != nil {
			t.Errorf("%q: %v", tc.args, err)
		}
	}
	for _, args := range [][]string{
		{"-max-inflate-rate", "1000"},
		{"-max-message", "4194304", "-max-inflate-rate", "2097152"},
	} {
		if _, err := compat.NewServer(options(args...)); err == nil || !strings.Contains(err.Error(), "MaxInflateRate") {
			t.Errorf("%q: NewServer: %v, want MaxInflateRate refused", args, err)
		}
	}
}

// flagOptions parses args as the command does and returns the server's
// options, failing the test if the flags are refused before NewServer.
func flagOptions(t *testing.T, args ...string) compat.Options {
	t.Helper()
	_, f := parseFlags(t, args...)
	return f.options(slog.New(slog.DiscardHandler))
}

// parseFlags parses args as the command does, failing the test if the
// flags are refused before NewServer, and returns the flag set and the
// settings.
func parseFlags(t *testing.T, args ...string) (*flag.FlagSet, *settings) {
	t.Helper()
	fs := flag.NewFlagSet("hotpath", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := defineFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("%q: %v", args, err)
	}
	f.args = fs.Args()
	if err := checkFlags(*f); err != nil {
		t.Fatalf("%q: %v", args, err)
	}
	return fs, f
}

// -slow-consumer, -idle-timeout, -keepalive and -max-rooms reach
// Options.SlowConsumer, IdleTimeout, KeepaliveInterval and
// Limits.MaxRooms as given; left out, they are the zero values, the
// server's defaults. A negative duration, or a keepalive not shorter
// than the idle timeout (the default included, which pins the idle
// default -idle-timeout's help states), passes checkFlags
// and is refused by NewServer on the options the flags make (main then
// exits 2: TestRefusedFlagsExit2).
func TestLimitFlagsReachTheServer(t *testing.T) {
	defaultIdleTimeout := time.Duration(statedDefault(t, "idle-timeout") * float64(time.Second))
	for _, tc := range []struct {
		args            []string
		policy          compat.SlowConsumerPolicy
		idle, keepalive time.Duration
		rooms           int
	}{
		{nil, compat.DropEvent, 0, 0, 0},
		{[]string{"-slow-consumer", "drop"}, compat.DropEvent, 0, 0, 0},
		{[]string{"-slow-consumer", "disconnect"}, compat.Disconnect, 0, 0, 0},
		{[]string{"-slow-consumer=disconnect", "-slow-consumer=drop"}, compat.DropEvent, 0, 0, 0},
		{[]string{"-idle-timeout", "90s", "-keepalive", "30s"}, compat.DropEvent, 90 * time.Second, 30 * time.Second, 0},
		// The keepalive's default follows a shorter idle timeout.
		{[]string{"-idle-timeout", "10s"}, compat.DropEvent, 10 * time.Second, 0, 0},
		// Just under the default idle timeout the help states: NewServer
		// takes it, as it refuses that default itself below.
		{[]string{"-keepalive", (defaultIdleTimeout - time.Millisecond).String()}, compat.DropEvent, 0, defaultIdleTimeout - time.Millisecond, 0},
		{[]string{"-max-rooms", "16"}, compat.DropEvent, 0, 0, 16},
	} {
		opts := flagOptions(t, tc.args...)
		if opts.SlowConsumer != tc.policy || opts.IdleTimeout != tc.idle || opts.KeepaliveInterval != tc.keepalive || opts.Limits.MaxRooms != tc.rooms {
			t.Errorf("%q: SlowConsumer %d, IdleTimeout %v, KeepaliveInterval %v, MaxRooms %d; want %d, %v, %v, %d", tc.args,
				opts.SlowConsumer, opts.IdleTimeout, opts.KeepaliveInterval, opts.Limits.MaxRooms, tc.policy, tc.idle, tc.keepalive, tc.rooms)
		}
		if _, err := compat.NewServer(opts); err != nil {
			t.Errorf("%q: %v", tc.args, err)
		}
	}
	for _, args := range [][]string{
		{"-idle-timeout", "-1s"},
		{"-keepalive", "-1s"},
		{"-keepalive", defaultIdleTimeout.String()},
		{"-idle-timeout", "20s", "-keepalive", "20s"},
		{"-idle-timeout", "20s", "-keepalive", "30s"},
	} {
		if _, err := compat.NewServer(flagOptions(t, args...)); err == nil || !strings.Contains(err.Error(), "KeepaliveInterval") {
			t.Errorf("%q: NewServer: %v, want the keepalive or idle timeout refused", args, err)
		}
	}
	// Any word but the two is a flag error that names them.
	for _, word := range []string{"", "Drop", "close", "1"} {
		fs := flag.NewFlagSet("hotpath", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		defineFlags(fs)
		err := fs.Parse([]string{"-slow-consumer", word})
		if err == nil || !strings.Contains(err.Error(), "drop") || !strings.Contains(err.Error(), "disconnect") {
			t.Errorf("-slow-consumer %q: %v, want an error naming drop and disconnect", word, err)
		}
	}
}

// The default -max-rooms' help states is the server's: a client joins
// that many rooms and is refused one more. (-idle-timeout's is pinned by
// TestLimitFlagsReachTheServer; -keepalive's would take 25 s of silence
// to observe; every stated default is compat's by
// TestFlagDefaultsAreTheServers.)
func TestMaxRoomsDefaultIsTheServers(t *testing.T) {
	defaultMaxRooms := int(statedDefault(t, "max-rooms"))
	srv, err := compat.NewServer(flagOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	defer srv.Shutdown(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := compat.Dial(ctx, "ws"+strings.TrimPrefix(hs.URL, "http")+"/ws", compat.ClientOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range defaultMaxRooms {
		if _, err := c.Join(ctx, fmt.Sprint("room", i)); err != nil {
			t.Fatalf("join %d of %d: %v", i+1, defaultMaxRooms, err)
		}
	}
	if _, err := c.Join(ctx, "one more"); err == nil {
		t.Fatalf("joined %d rooms, past the default -max-rooms states", defaultMaxRooms+1)
	}
}

// A value NewServer refuses is refused in the terms of the flag that set
// it, with its value, as checkFlags' refusals are: the error began with
// NewServer's name for the option ("compat: KeepaliveInterval 20s is
// not shorter than IdleTimeout 20s"), not the flag the operator typed.
func TestNewServerRefusalNamesTheFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-idle-timeout", "-1s"}, "-idle-timeout -1s: "},
		{[]string{"-keepalive", "-1s"}, "-keepalive -1s: "},
		{[]string{"-idle-timeout", "20s", "-keepalive", "20s"}, "-keepalive 20s: "},
		{[]string{"-idle-timeout", "20s", "-keepalive", "30s"}, "-keepalive 30s: "},
		// Refused for the default -idle-timeout.
		{[]string{"-keepalive", serverDefaults.IdleTimeout.String()}, "-keepalive " + serverDefaults.IdleTimeout.String() + ": "},
		{[]string{"-max-inflate-rate", "1000"}, "-max-inflate-rate 1000: "},
		{[]string{"-max-message", "4194304", "-max-inflate-rate", "2097152"}, "-max-inflate-rate 2097152: "},
	} {
		fs, f := parseFlags(t, tc.args...)
		srv, err := newServer(fs, f, slog.New(slog.DiscardHandler))
		if err == nil {
			srv.Shutdown(context.Background())
			t.Errorf("%q: the server started", tc.args)
			continue
		}
		if !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q: %q, want it to begin %q", tc.args, err, tc.want)
		}
		var oe *compat.OptionError
		if !errors.As(err, &oe) {
			t.Errorf("%q: %v, not NewServer's *compat.OptionError wrapped", tc.args, err)
		}
	}
	// Every option the table names a flag for has that flag.
	fs, _ := parseFlags(t)
	for option, name := range optionFlags {
		if fs.Lookup(name) == nil {
			t.Errorf("optionFlags: %s's flag -%s is not defined", option, name)
		}
	}
}

// statedRE finds the default a flag's help states for 0: a number, with
// the unit it is in.
var statedRE = regexp.MustCompile(`\(0: the default, ([0-9]+(?:\.[0-9]+)?) ?(GiB|MiB|KiB|bytes|s)?[,;)]`)

// statedDefault is the default flag name's help states for 0, in bytes,
// seconds or a count.
func statedDefault(t *testing.T, name string) float64 {
	t.Helper()
	fs := flag.NewFlagSet("hotpath", flag.ContinueOnError)
	defineFlags(fs)
	fl := fs.Lookup(name)
	if fl == nil {
		t.Fatalf("no flag -%s", name)
	}
	m := statedRE.FindStringSubmatch(fl.Usage)
	if m == nil {
		t.Fatalf("-%s's help states no default for 0: %q", name, fl.Usage)
	}
	n, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	if unit, ok := map[string]float64{"GiB": 1 << 30, "MiB": 1 << 20, "KiB": 1 << 10}[m[2]]; ok {
		n *= unit
	}
	return n
}

// Every default the flags' help states is the one the server runs with
// (compat's Options.WithDefaults, which NewServer runs), and a flag that
// passes a default of its own to an option compat has a default for
// (-max-message, -presence-interval, -slow-consumer) has compat's. They
// were copies in main.go that had to follow compat's by hand, and tests
// pinned only -max-rooms' and -idle-timeout's. A flag whose help says
// "the default" and is not in the table fails the test, so a new one is
// checked too.
func TestFlagDefaultsAreTheServers(t *testing.T) {
	def := compat.Options{}.WithDefaults()
	stated := map[string]float64{
		"max-emit-rate":    float64(def.Limits.MaxEmitRate),
		"max-inflate-rate": float64(def.Limits.MaxInflateRate),
		"max-outbox":       float64(def.Limits.MaxOutboxBytes),
		"max-rooms":        float64(def.Limits.MaxRooms),
		"idle-timeout":     def.IdleTimeout.Seconds(),
		"keepalive":        def.KeepaliveInterval.Seconds(),
	}
	policy := slowConsumer(def.SlowConsumer)
	own := map[string]string{
		"max-message":       fmt.Sprint(def.Limits.MaxMessageSize),
		"presence-interval": def.PresenceInterval.String(),
		"slow-consumer":     policy.String(),
	}
	fs := flag.NewFlagSet("hotpath", flag.ContinueOnError)
	defineFlags(fs)
	fs.VisitAll(func(fl *flag.Flag) {
		if want, ok := own[fl.Name]; ok {
			if fl.DefValue != want {
				t.Errorf("-%s defaults to %s; compat's default is %s", fl.Name, fl.DefValue, want)
			}
		}
		if !strings.Contains(fl.Usage, "the default") {
			return
		}
		if fl.Name == "slow-consumer" {
			if !strings.Contains(fl.Usage, policy.String()+" (the default)") {
				t.Errorf("-slow-consumer's help does not name compat's default, %s: %q", policy.String(), fl.Usage)
			}
			return
		}
		want, ok := stated[fl.Name]
		if !ok {
			t.Errorf("-%s's help states a default this test does not check against compat's: %q", fl.Name, fl.Usage)
			return
		}
		if got := statedDefault(t, fl.Name); got != want {
			t.Errorf("-%s's help states the default %s; compat's is %s: %q", fl.Name, strconv.FormatFloat(got, 'f', -1, 64), strconv.FormatFloat(want, 'f', -1, 64), fl.Usage)
		}
	})
	for name := range stated {
		if fl := fs.Lookup(name); fl == nil || !strings.Contains(fl.Usage, "the default") {
			t.Errorf("-%s states no default", name)
		}
	}
}

// A flag the command refuses ends it with exit status 2, the usage and
// an error that names the flag, whichever check refuses it: the flag
// package's parse (-slow-consumer), checkFlags (-max-rooms) or NewServer
// (-keepalive with -idle-timeout, -max-inflate-rate). A refusal that
// regressed would serve instead of exiting: the command listens on a
// port of its own, and the test fails as soon as it prints its address,
// rather than at waitExit's 30 s.
func TestRefusedFlagsExit2(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{"-slow-consumer later", `invalid value "later" for flag -slow-consumer`},
		{"-max-rooms -1", "hotpath: -max-rooms -1: "},
		{"-idle-timeout 20s -keepalive 20s", "hotpath: -keepalive 20s: "},
		{"-idle-timeout -1s", "hotpath: -idle-timeout -1s: "},
		{"-max-inflate-rate 1000", "hotpath: -max-inflate-rate 1000: "},
	} {
		code, stderr, served := runRefused(t, tc.args)
		switch {
		case served != "":
			t.Errorf("%s: the command served (%q) instead of refusing the flags; stderr:\n%s", tc.args, served, stderr)
		case code != 2:
			t.Errorf("%s: exit status %d, want 2; stderr:\n%s", tc.args, code, stderr)
		case !strings.Contains(stderr, "-slow-consumer policy"):
			t.Errorf("%s: no usage on stderr:\n%s", tc.args, stderr)
		case !strings.Contains(stderr, tc.want):
			t.Errorf("%s: stderr does not say %q:\n%s", tc.args, tc.want, stderr)
		}
	}
}

// runRefused runs the command (TestMain) with args, on a loopback port
// of its own, and returns its exit status and stderr once it exits; or,
// if it serves instead (it prints its address first), the line it
// printed, having killed it. It waits 30 s at most for either, and
// fails the test then.
func runRefused(t *testing.T, args string) (code int, stderr, served string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "HOTPATH_TEST_MAIN=-addr 127.0.0.1:0 "+args)
	var errBuf strings.Builder
	cmd.Stderr = &errBuf
	out := &firstLine{line: make(chan string, 1)}
	cmd.Stdout = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	select {
	case <-exited:
		return cmd.ProcessState.ExitCode(), errBuf.String(), ""
	case served = <-out.line:
		cmd.Process.Kill()
		<-exited
		return -1, errBuf.String(), served
	case <-time.After(30 * time.Second):
	}
	cmd.Process.Kill()
	<-exited
	t.Fatalf("%s: the command neither exited nor printed a line in 30 s; stderr:\n%s", args, errBuf.String())
	return
}

// firstLine is a child's stdout: it sends the first line, once whole, on
// line (buffered), and discards the rest. exec writes to it from one
// goroutine.
type firstLine struct {
	buf  []byte
	sent bool
	line chan string
}

func (w *firstLine) Write(p []byte) (int, error) {
	if !w.sent {
		w.buf = append(w.buf, p...)
		if i := bytes.IndexByte(w.buf, '\n'); i >= 0 {
			w.sent = true
			w.line <- string(w.buf[:i])
		}
	}
	return len(p), nil
}

// -slow-consumer disconnect drops a member that does not read once its
// queue passes -max-outbox, where the default, drop, would keep it in the
// room and skip it (compat's TestSlowConsumerIsReset, through the flags).
func TestSlowConsumerFlagDisconnects(t *testing.T) {
	srv, err := compat.NewServer(flagOptions(t, "-slow-consumer", "disconnect", "-max-outbox", "262144"))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	defer srv.Shutdown(context.Background())
	slow, err := wstest.Dial(strings.TrimPrefix(hs.URL, "http://"), "/ws")
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	// Joins, reads the answer, and never reads again.
	slow.WriteMessage(wsframe.OpBinary, wire.Append(nil, &wire.Packet{Kind: dispatch.KindJoin, ID: 1, Room: []byte("r")}))
	for {
		m, err := slow.ReadMessage(10 * time.Second)
		if err != nil {
			t.Fatalf("waiting for the join's answer: %v", err)
		}
		if m.Opcode == wsframe.OpBinary {
			break
		}
	}
	if srv.Members("r") != 1 {
		t.Fatalf("%d members after the join, want 1", srv.Members("r"))
	}
	payload := make([]byte, 16<<10)
	for i := 0; srv.Members("r") > 0; i++ {
		if i == 4096 {
			t.Fatal("64 MiB of emits, and the member that reads nothing is still in the room")
		}
		if _, err := srv.Emit("r", "big", payload); err != nil {
			t.Fatal(err)
		}
	}
	if n := srv.Metrics().SlowConsumers; n != 1 {
		t.Errorf("SlowConsumers = %d, want 1", n)
	}
}

// An HTTP request whose body never comes must not hold back the WebSocket
// clients' close at shutdown: they get 1001 at once, and the request's
// connection is closed when shutdown returns. Run one after the other,
// the HTTP server's shutdown waited for that request until the limit, and
// the WebSocket clients then got 1006 instead of 1001.
func TestShutdownDoesNotWaitForHTTP(t *testing.T) {
	srv := demoServer(t)
	mux := http.NewServeMux()
	mux.Handle("/ws", srv)
	reading := make(chan struct{})
	mux.HandleFunc("POST /upload", func(w http.ResponseWriter, r *http.Request) {
		close(reading)
		io.Copy(io.Discard, r.Body) // a body that never comes
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: mux}
	go hs.Serve(ln)
	addr := ln.Addr().String()

	ws, err := wstest.Dial(addr, "/ws")
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	stalled, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	fmt.Fprintf(stalled, "POST /upload HTTP/1.1\r\nHost: %s\r\nContent-Length: 1000\r\n\r\n", addr)
	<-reading

	done := make(chan struct{})
	go func() {
		defer close(done)
		shutdown(hs, srv, 3*time.Second)
	}()
	if code, reason := ws.ReadClose(10 * time.Second); code != wsframe.CloseGoingAway {
		t.Errorf("the WebSocket client's close: %d %q, want 1001", code, reason)
	}
	ws.Close()
	<-done
	stalled.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, stalled); err != nil {
		t.Errorf("the stalled request's connection after shutdown: %v, want it closed", err)
	}
}

// The binary binds every listener before it serves any, and a port it
// cannot bind fails the start with none left bound: bound one after the
// other, the HTTP port answered while the UDP ones were not bound yet (a
// browser reconnecting over WebTransport fell back to WebSocket), and a
// failure after the first left the ones before it bound.
func TestListenAllOrNone(t *testing.T) {
	srv := demoServer(t)
	dev, err := compat.NewDevCertificate(time.Hour, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	taken, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	// freeAddr is an address of network with nothing bound to it.
	freeAddr := func(network string) string {
		t.Helper()
		var addr string
		if network == "tcp" {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr = ln.Addr().String()
			ln.Close()
		} else {
			pc, err := net.ListenPacket("udp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr = pc.LocalAddr().String()
			pc.Close()
		}
		return addr
	}
	// isFree reports whether addr on network can be bound.
	isFree := func(network, addr string) bool {
		if network == "tcp" {
			ln, err := net.Listen("tcp", addr)
			if err == nil {
				ln.Close()
			}
			return err == nil
		}
		pc, err := net.ListenPacket("udp", addr)
		if err == nil {
			pc.Close()
		}
		return err == nil
	}
	t.Run("quic port taken", func(t *testing.T) {
		httpAddr := freeAddr("tcp")
		l, err := listen(srv, httpAddr, taken.LocalAddr().String(), "", dev.ServerTLSConfig())
		if err == nil {
			l.close()
			t.Fatal("listen with the QUIC port taken succeeded")
		}
		if !strings.Contains(err.Error(), "-quic "+taken.LocalAddr().String()) {
			t.Errorf("error %q does not name the flag and address", err)
		}
		if !isFree("tcp", httpAddr) {
			t.Error("the HTTP port is still bound after the QUIC one failed")
		}
	})
	t.Run("sctp port taken", func(t *testing.T) {
		httpAddr, quicAddr := freeAddr("tcp"), freeAddr("udp")
		l, err := listen(srv, httpAddr, quicAddr, taken.LocalAddr().String(), dev.ServerTLSConfig())
		if err == nil {
			l.close()
			t.Fatal("listen with the SCTP port taken succeeded")
		}
		if !isFree("tcp", httpAddr) {
			t.Error("the HTTP port is still bound after the SCTP one failed")
		}
		// quic-go closes a listener's socket once its read loop has seen
		// the close, a moment after Close returns.
		deadline := time.Now().Add(2 * time.Second)
		for !isFree("udp", quicAddr) {
			if time.Now().After(deadline) {
				t.Fatal("the QUIC port is still bound 2 s after the SCTP one failed")
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	t.Run("all free", func(t *testing.T) {
		l, err := listen(srv, "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", dev.ServerTLSConfig())
		if err != nil {
			t.Fatal(err)
		}
		defer l.close()
		for _, bound := range []struct{ network, addr string }{
			{"tcp", l.http.Addr().String()},
			{"udp", l.quic.Addr().String()},
			{"udp", l.sctp.Addr().String()},
		} {
			if isFree(bound.network, bound.addr) {
				t.Errorf("%s %s not bound once listen returned", bound.network, bound.addr)
			}
		}
	})
}

// A QUIC or SCTP listener that stops other than by the server's Shutdown
// is reported, for main to shut down and exit 1: its error was dropped,
// and the process went on serving HTTP without the carrier it advertised.
func TestCarrierFailureIsReported(t *testing.T) {
	srv := demoServer(t)
	l := demoListeners(t, srv, "127.0.0.1:0", "127.0.0.1:0")
	failed := make(chan error, 2)
	l.serveCarriers(srv, failed)
	for _, c := range []struct {
		flag  string
		close func() error
	}{
		{"-quic", l.quic.Close},
		{"-sctp", l.sctp.Close},
	} {
		c.close() // as a socket error would end its Accept
		select {
		case err := <-failed:
			if !strings.HasPrefix(err.Error(), c.flag+" ") {
				t.Errorf("error %q does not name %s", err, c.flag)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s listener stopped and nothing was reported", c.flag)
		}
	}
}

// /carriers.json gives a carrier bound to an unspecified address (-quic
// :4433) at the host the page was loaded from: it gave the bound address,
// https://[::]:4433/wt or https://0.0.0.0:…, which a browser on another
// machine cannot open. A carrier bound to an address of its own keeps it.
func TestCarriersJSONUsesTheRequestHost(t *testing.T) {
	srv := demoServer(t)
	l := demoListeners(t, srv, "0.0.0.0:0", "0.0.0.0:0")
	mux := http.NewServeMux()
	mountCarriers(srv, mux, l, "hash", true, false)
	port := func(a net.Addr) string { _, p, _ := net.SplitHostPort(a.String()); return p }
	for _, tc := range []struct{ host, want string }{
		{"example.test:8080", "example.test"},
		{"example.test", "example.test"},
		{"[::1]:8080", "[::1]"},
		{"192.0.2.7:8080", "192.0.2.7"},
	} {
		req := httptest.NewRequest("GET", "/carriers.json", nil)
		req.Host = tc.host
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		var got carriers
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
			t.Fatalf("Host %s: %v in %q", tc.host, err, rec.Body)
		}
		want := carriers{
			WebTransport: &webTransportInfo{URL: "https://" + tc.want + ":" + port(l.quic.Addr()) + "/wt", CertificateHash: "hash"},
			QUIC:         "quic://" + tc.want + ":" + port(l.quic.Addr()),
			SCTP:         "sctp://" + tc.want + ":" + port(l.sctp.Addr()),
			WebRTC:       "http://" + l.http.Addr().String() + "/rtc", // bound to 127.0.0.1
		}
		if got.QUIC != want.QUIC || got.SCTP != want.SCTP || got.WebRTC != want.WebRTC || got.WebTransport == nil || *got.WebTransport != *want.WebTransport {
			t.Errorf("Host %s: got %s", tc.host, rec.Body)
		}
	}
}

// demoServer is a server with the demo router that logs nothing.
func demoServer(t *testing.T) *compat.Server {
	t.Helper()
	srv, err := compat.NewServer(compat.Options{Router: demoRouter(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// demoListeners binds srv's listeners as main does: HTTP on loopback,
// QUIC (with a development certificate) and SCTP at the addresses given.
// The test's end closes them.
func demoListeners(t *testing.T, srv *compat.Server, quicAddr, sctpAddr string) *listeners {
	t.Helper()
	dev, err := compat.NewDevCertificate(time.Hour, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	l, err := listen(srv, "127.0.0.1:0", quicAddr, sctpAddr, dev.ServerTLSConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.close)
	return l
}

// The demo relays a chat line the page can send, and drops a longer
// one: a client that is not the page could otherwise send every member
// lines up to -max-message. The server announces the bound (maxEmit), so
// the Go client refuses the longer one itself (the server's drop of one
// sent anyway: compat's TestEmitSizeBound).
func TestDemoChatLinesAreBounded(t *testing.T) {
	srv, err := compat.NewServer(compat.Options{Router: demoRouter(), Logger: slog.New(slog.DiscardHandler), Limits: demoLimits(1<<20, maxChatEmit), AllowEmit: demoAllowEmit})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	defer srv.Shutdown(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	url := "ws" + strings.TrimPrefix(hs.URL, "http") + "/ws"
	type line struct {
		Name string `json:"name"`
		Text string `json:"text"`
		At   int64  `json:"at"`
	}
	got := make(chan line, 4)
	var clients [2]*compat.Client
	for i := range clients {
		c, err := compat.Dial(ctx, url, compat.ClientOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if i == 1 {
			c.OnRoom("lobby", "message", func(m compat.Message) {
				var l line
				if m.Decode(&l) == nil {
					got <- l
				}
			})
		}
		if _, err := c.Join(ctx, "lobby"); err != nil {
			t.Fatal(err)
		}
		clients[i] = c
	}
	// The page's longest line, in the characters JSON escapes most.
	longest := line{Name: strings.Repeat("\x01", 32), Text: strings.Repeat("\x01", 1000), At: time.Now().UnixMilli()}
	if err := clients[0].Emit("lobby", "message", line{Name: "flood", Text: strings.Repeat("x", 100_000)}, false); !errors.Is(err, compat.ErrMessageTooBig) {
		t.Fatalf("a line over the demo's bound: %v, want ErrMessageTooBig", err)
	}
	for _, l := range []line{longest, {Name: "after", Text: "hi"}} {
		if err := clients[0].Emit("lobby", "message", l, false); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{longest.Name, "after"} {
		select {
		case l := <-got:
			if l.Name != want {
				t.Fatalf("got a line from %q, want %q (the flood dropped)", l.Name, want)
			}
		case <-ctx.Done():
			t.Fatalf("no line from %q", want)
		}
	}
}

// The defaults that compat/README.md's flags table and the package doc's
// usage line state are the flags' own, and a default the table gives in
// brackets (compat's, for a flag left at 0) is the one the help states:
// both are written by hand, and the help's defaults now follow compat's
// (TestFlagDefaultsAreTheServers), so a change there must reach them.
func TestDocumentedFlagDefaults(t *testing.T) {
	fs := flag.NewFlagSet("hotpath", flag.ContinueOnError)
	defineFlags(fs)
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `-([a-z-]+)`(?:, `-[a-z-]+`)* \\| ([^|]*) \\|")
	bracketed := regexp.MustCompile(`^\(([0-9][^,)]*)`)
	rows := 0
	for line := range strings.Lines(string(readme)) {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		name, cell := m[1], strings.TrimSpace(m[2])
		fl := fs.Lookup(name)
		if fl == nil {
			t.Errorf("compat/README.md's flags table has -%s, which the command does not define", name)
			continue
		}
		rows++
		value, rest, quoted := strings.Cut(strings.TrimPrefix(cell, "`"), "`")
		switch {
		case cell == "off":
			if fl.DefValue != "false" && fl.DefValue != "" {
				t.Errorf("compat/README.md: -%s is off by default; the flag's default is %q", name, fl.DefValue)
			}
		case strings.HasPrefix(cell, "`") && quoted:
			if !isDefault(fl, value) {
				t.Errorf("compat/README.md: -%s defaults to %s; the flag's default is %s", name, value, fl.DefValue)
			}
			if b := bracketed.FindStringSubmatch(strings.TrimSpace(rest)); b != nil && !strings.Contains(fl.Usage, "the default, "+b[1]) {
				t.Errorf("compat/README.md: -%s's default is %s; the help states another: %q", name, b[1], fl.Usage)
			}
		}
	}
	if rows < 20 {
		t.Fatalf("read %d rows of compat/README.md's flags table: has its form changed?", rows)
	}

	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	doc, _, _ := strings.Cut(string(src), "package main")
	usage := regexp.MustCompile(`\[-([a-z-]+) ([^\]\s\[]+)`)
	shown := 0
	for _, m := range usage.FindAllStringSubmatch(doc, -1) {
		fl := fs.Lookup(m[1])
		if fl == nil {
			t.Errorf("main.go's usage line shows -%s, which the command does not define", m[1])
			continue
		}
		shown++
		// A flag that is off by default (-quic, -sctp) shows an example;
		// a switch (-webrtc | -webrtc-loopback) none.
		if fl.DefValue != "" && fl.DefValue != "false" && !isDefault(fl, m[2]) {
			t.Errorf("main.go's usage line shows -%s %s; the flag's default is %s", m[1], m[2], fl.DefValue)
		}
	}
	if shown < 15 {
		t.Fatalf("read %d flags from main.go's usage line: has its form changed?", shown)
	}
}

// isDefault reports whether s, as the docs write it, is fl's default: a
// duration may be written 0 for 0s.
func isDefault(fl *flag.Flag, s string) bool {
	if s == fl.DefValue {
		return true
	}
	if g, ok := fl.Value.(flag.Getter); ok {
		if def, ok := g.Get().(time.Duration); ok {
			d, err := time.ParseDuration(s)
			return err == nil && d == def
		}
	}
	return false
}
