package conformance

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hotpath-go/hotpath/compat"
)

// maxMessage is the message limit of every server under test, compat's
// default: large enough that a wire overhead proportional to the message
// (stored DEFLATE blocks) shows past any fixed allowance.
const maxMessage = 1 << 20

// maxFragments is compat's default Limits.MaxFragments.
const maxFragments = 1024

// TestConformance runs the suite against compat's echo mode in process,
// on its own listener (gobwas/ws's upgrader) with context takeover off and
// behind net/http (ServeHTTP, as the command serves it) with takeover on;
// and, when $HOTPATH_BIN names a built `hotpath` command (run.sh builds
// one), against `hotpath -echo` with takeover off and on. It logs a table
// of cases passed by group.
//
// The command is not built here: it links QUIC and WebRTC stacks, a long
// cold build for a test that plain `go test ./...` runs.
func TestConformance(t *testing.T) {
	targets := []struct {
		name    string
		command bool
		start   func(t *testing.T) Target
	}{
		{"in-process", false, func(t *testing.T) Target { return startInProcess(t, false, false) }},
		{"in-process-http-takeover", false, func(t *testing.T) Target { return startInProcess(t, true, true) }},
		{"hotpath-echo", true, func(t *testing.T) Target { return startCommand(t, false) }},
		{"hotpath-echo-takeover", true, func(t *testing.T) Target { return startCommand(t, true) }},
	}
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			if tg.command && os.Getenv("HOTPATH_BIN") == "" {
				t.Skip("set HOTPATH_BIN to a built ./compat/cmd/hotpath (compat/interop/run.sh does) to run the suite against the command")
			}
			t.Parallel()
			target := tg.start(t)
			var results []Result
			for _, c := range Cases() {
				// The name says the section the case checks, as every
				// RFC test's name does.
				t.Run(c.Group+"/"+c.Section+" "+c.Name, func(t *testing.T) {
					run := target
					if c.needs&needShutdown != 0 {
						// The shutdown ends the server: this case gets one
						// of its own.
						run = tg.start(t)
					}
					r := c.Run(context.Background(), run)
					results = append(results, r)
					switch {
					case r.Skipped != "":
						t.Skip(r.Skipped)
					case r.Err != nil:
						t.Errorf("[%s] expect %s: %v", c.Section, c.Expect, r.Err)
					case r.Note != "":
						t.Logf("[%s] note: %s", c.Section, r.Note)
					}
				})
			}
			var b strings.Builder
			WriteSummary(&b, "RFC 6455 / RFC 7692 conformance against "+tg.name, results)
			t.Log("\n" + b.String())
		})
	}
}

// TestCasesNamed checks the table itself: every case names a known group,
// an RFC section and its expected outcome, and names are unique.
func TestCasesNamed(t *testing.T) {
	seen := map[string]bool{}
	section := regexp.MustCompile(`^RFC (6455|7692) §\d+(\.\d+)*$`)
	for _, c := range Cases() {
		key := c.Group + "/" + c.Name
		switch {
		case seen[key]:
			t.Errorf("duplicate case %s", key)
		case !section.MatchString(c.Section):
			t.Errorf("%s: section %q", key, c.Section)
		case c.Expect == "":
			t.Errorf("%s: no expected outcome", key)
		case !strings.Contains(strings.Join(Groups, " "), c.Group):
			t.Errorf("%s: unknown group", key)
		}
		seen[key] = true
	}
	if len(seen) < 100 {
		t.Errorf("%d cases; the suite lost some", len(seen))
	}
}

// startInProcess serves compat's echo mode on a loopback port, on its own
// listener or behind net/http.
func startInProcess(t *testing.T, takeover, viaHTTP bool) Target {
	srv, err := compat.NewServer(compat.Options{
		Router:       compat.NewRouter(),
		Echo:         true,
		NoDictionary: true,
		Limits:       compat.Limits{MaxMessageSize: maxMessage},
		Compression:  compat.Compression{ContextTakeover: takeover},
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var hs *http.Server
	if viaHTTP {
		mux := http.NewServeMux()
		mux.Handle("/ws", srv)
		hs = &http.Server{Handler: mux}
		go hs.Serve(ln)
	} else {
		go srv.Serve(ln)
	}
	stop := func(ctx context.Context) {
		if hs != nil {
			hs.Shutdown(ctx)
		}
		srv.Shutdown(ctx)
	}
	var once sync.Once
	shutdown := func() {
		once.Do(func() {
			// Shutdown waits for the connections to finish their closing
			// handshakes, which the case drives: run it aside.
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				stop(ctx)
			}()
		})
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		stop(ctx)
	})
	return Target{Addr: ln.Addr().String(), Path: "/ws", MaxMessage: maxMessage, MaxFragments: maxFragments,
		ContextTakeover: takeover, Shutdown: shutdown}
}

// startCommand runs `hotpath -echo` on a free loopback port.
func startCommand(t *testing.T, takeover bool) Target {
	args := []string{"-echo", "-addr", "127.0.0.1:0", "-max-message", fmt.Sprint(maxMessage)}
	if takeover {
		args = append(args, "-context-takeover")
	}
	cmd := exec.Command(os.Getenv("HOTPATH_BIN"), args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := regexp.MustCompile(`http://([0-9.]+:[0-9]+)`).FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
	}()
	var a string
	select {
	case a = <-addr:
	case <-exited:
		t.Fatal("hotpath exited before listening")
	case <-time.After(30 * time.Second):
		t.Fatal("hotpath did not print its address")
	}
	var once sync.Once
	shutdown := func() { once.Do(func() { cmd.Process.Signal(syscall.SIGTERM) }) }
	return Target{Addr: a, Path: "/ws", MaxMessage: maxMessage, MaxFragments: maxFragments,
		ContextTakeover: takeover, Shutdown: shutdown}
}
