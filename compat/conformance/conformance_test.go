package conformance

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hotpath-go/hotpath/compat"
)

// maxMessage is the message limit of every server under test: small
// enough that the limit cases stay quick.
const maxMessage = 256 << 10

// maxFragments is compat's default Limits.MaxFragments.
const maxFragments = 1024

// TestConformance runs the suite against compat's echo mode in process
// (the raw-listener upgrade path) and against the `hotpath -echo` command
// (the net/http upgrade path), each with context takeover off (the
// default) and on. It logs a table of cases passed by group.
func TestConformance(t *testing.T) {
	targets := []struct {
		name  string
		start func(t *testing.T) Target
	}{
		{"in-process", func(t *testing.T) Target { return startInProcess(t, false) }},
		{"in-process-takeover", func(t *testing.T) Target { return startInProcess(t, true) }},
		{"hotpath-echo", func(t *testing.T) Target { return startCommand(t, false) }},
		{"hotpath-echo-takeover", func(t *testing.T) Target { return startCommand(t, true) }},
	}
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			target := tg.start(t)
			var results []Result
			for _, c := range Cases() {
				t.Run(c.Group+"/"+c.Name, func(t *testing.T) {
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

func startInProcess(t *testing.T, takeover bool) Target {
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
	go srv.Serve(ln)
	var once sync.Once
	shutdown := func() {
		once.Do(func() {
			// Shutdown waits for the connections to finish their closing
			// handshakes, which the case drives: run it aside.
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				srv.Shutdown(ctx)
			}()
		})
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return Target{Addr: ln.Addr().String(), Path: "/ws", MaxMessage: maxMessage, MaxFragments: maxFragments,
		ContextTakeover: takeover, Shutdown: shutdown}
}

var (
	buildOnce  sync.Once
	hotpathBin string
	buildErr   error
)

// hotpathBinary returns the path of the hotpath command: $HOTPATH_BIN, or
// one built once for the whole test binary.
func hotpathBinary(t *testing.T) string {
	buildOnce.Do(func() {
		if hotpathBin = os.Getenv("HOTPATH_BIN"); hotpathBin != "" {
			return
		}
		dir, err := os.MkdirTemp("", "hotpath-conformance-")
		if err != nil {
			buildErr = err
			return
		}
		hotpathBin = filepath.Join(dir, "hotpath")
		out, err := exec.Command("go", "build", "-o", hotpathBin, "github.com/hotpath-go/hotpath/compat/cmd/hotpath").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return hotpathBin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if os.Getenv("HOTPATH_BIN") == "" && hotpathBin != "" {
		os.RemoveAll(filepath.Dir(hotpathBin))
	}
	os.Exit(code)
}

// startCommand runs `hotpath -echo` on a free loopback port.
func startCommand(t *testing.T, takeover bool) Target {
	args := []string{"-echo", "-addr", "127.0.0.1:0", "-max-message", fmt.Sprint(maxMessage)}
	if takeover {
		args = append(args, "-context-takeover")
	}
	cmd := exec.Command(hotpathBinary(t), args...)
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
