package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	idleConns      = 10_000
	idleConnsQuick = 1_000
	// idleSources is how many 127.0.0.x source addresses the clients
	// spread over (127.0.0.2 onwards).
	idleSources = 4
	// idleDialers is how many handshakes are in progress at once: enough
	// to keep both processes busy, far below the listen backlog.
	idleDialers = 32
)

func init() {
	register(&Scenario{
		Number:   8,
		Name:     "idle",
		Title:    "Idle memory per connection",
		Loopback: true,
		Trials:   3, // steady within 1%, and each trial opens 10,000 connections
		About: "Each server runs in a process of its own (this binary re-run with -serve LIB); this " +
			"process opens the connections from 127.0.0.2–127.0.0.5, upgrades each, sends one 32 B " +
			"message and waits for its echo, then lets them sit. B/conn is the growth of the " +
			"server's resident memory (VmRSS in /proc/PID/status) divided by the connections, both " +
			"readings taken after a GC that returns freed memory to the OS; heap+stack is the Go " +
			"runtime's share of it. Kernel socket buffers are not in either. Every library runs " +
			"in goroutine mode; nbio also runs in the epoll mode it is built for. A row is invalid " +
			"unless every connection echoed.",
		Metrics: []Metric{
			{Key: "rss", Unit: "RSS B/conn", Better: LowerIsBetter},
			{Key: "gomem", Unit: "heap+stack B/conn", Better: LowerIsBetter},
			{Key: "goroutines", Unit: "goroutines/conn", Better: LowerIsBetter},
			{Key: "setup", Unit: "conns/s", Better: HigherIsBetter},
		},
		Cases: idleCases,
	})
}

func idleCases(cfg Config) ([]Case, error) {
	n, settle := idleConns, time.Second
	if cfg.Quick {
		n, settle = idleConnsQuick, 200*time.Millisecond
	}
	// This process holds one descriptor per client: stay well inside the
	// limit (the server process holds as many of its own).
	if lim := openFileLimit(); lim > 0 && uint64(n)+1000 > lim {
		n = int(lim) - 1000
		if n < 100 {
			return nil, fmt.Errorf("open file limit %d is too low", lim)
		}
	}
	c := Case{Label: groupThousands(int64(n)) + " connections"}
	for _, srv := range echoServers {
		c.Rows = append(c.Rows, Row{
			Library: srv.Library,
			Role:    srv.Role,
			Open: func(context.Context) (Instance, error) {
				return TrialFunc(func(ctx context.Context) (Outcome, error) {
					return idleTrial(ctx, srv, n, settle)
				}), nil
			},
		})
	}
	return []Case{c}, nil
}

// idleTrial starts srv in a fresh server process, measures it, connects n
// clients, lets them settle, measures again, and reports the difference
// per connection.
func idleTrial(ctx context.Context, srv echoServer, n int, settle time.Duration) (Outcome, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	child, err := startServerProcess(ctx, srv.Library)
	if err != nil {
		return Outcome{}, err
	}
	defer child.stop()

	before, err := child.measure()
	if err != nil {
		return Outcome{}, err
	}
	start := time.Now()
	clients, ok, firstErr := dialMany(ctx, child.addr, n, srv)
	setup := time.Since(start)
	// Reset, not FIN: the server sees the end at once and no TIME_WAIT is
	// left behind to hold source ports for the next trial.
	defer func() {
		for _, c := range clients {
			if c != nil {
				_ = c.closeNow()
			}
		}
	}()
	select {
	case <-time.After(settle):
	case <-ctx.Done():
		return Outcome{}, ctx.Err()
	}
	after, err := child.measure()
	if err != nil {
		return Outcome{}, err
	}
	perConn := func(a, b float64) float64 { return (b - a) / float64(n) }
	out := Outcome{Values: map[string]float64{
		"rss":        perConn(before.rss, after.rss),
		"gomem":      perConn(before.gomem, after.gomem),
		"goroutines": perConn(before.goroutines, after.goroutines),
		"setup":      float64(ok) / setup.Seconds(),
	}}
	if ok < n {
		out.Invalid = fmt.Sprintf("%d of %d connections did not echo (first error: %v)", n-ok, n, firstErr)
	}
	return out, nil
}

// dialMany opens n client connections to addr, each upgraded and checked
// with one echo, spread over idleSources source addresses.
func dialMany(ctx context.Context, addr string, n int, srv echoServer) (clients []*wsClient, ok int, firstErr error) {
	clients = make([]*wsClient, n)
	msg, answer := srv.message(make([]byte, 32))
	frame := appendClientFrame(nil, 0x2, msg, newMaskKey())
	var (
		next    atomic.Int64
		okCount atomic.Int64
		errOnce sync.Once
		wg      sync.WaitGroup
	)
	for range idleDialers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				c, err := dialAndEcho(ctx, addr, net.IPv4(127, 0, 0, byte(2+i%idleSources)), srv.Handshake, frame, answer)
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					continue
				}
				clients[i] = c
				okCount.Add(1)
			}
		}()
	}
	wg.Wait()
	return clients, int(okCount.Load()), firstErr
}

func dialAndEcho(ctx context.Context, addr string, local net.IP, handshake bool, frame []byte, answer int) (*wsClient, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// A small read buffer: this process holds thousands of these.
	c, err := dialWS(ctx, addr, dialOptions{Local: local, Handshake: handshake, ReadBuffer: 512})
	if err != nil {
		return nil, err
	}
	deadline, _ := ctx.Deadline()
	_ = c.conn.SetDeadline(deadline)
	if _, err := c.conn.Write(frame); err != nil {
		c.closeNow()
		return nil, err
	}
	if _, size, err := c.readMessage(); err != nil || size != answer {
		c.closeNow()
		if err == nil {
			err = fmt.Errorf("echo of %d bytes, want %d", size, answer)
		}
		return nil, err
	}
	_ = c.conn.SetDeadline(time.Time{})
	return c, nil
}

// serverProcess is the idle scenario's server: this binary run with -serve,
// spoken to over its stdin and stdout.
type serverProcess struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Scanner
	addr string
}

// serverSample is one reading of the server process.
type serverSample struct {
	rss, gomem, goroutines float64
}

func startServerProcess(ctx context.Context, library string) (*serverProcess, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe, "-serve", library)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &serverProcess{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	line, err := p.expect("listening")
	if err != nil {
		p.stop()
		return nil, err
	}
	p.addr = line
	return p, nil
}

// expect reads the next line of the server and returns what follows the
// keyword it must start with.
func (p *serverProcess) expect(keyword string) (string, error) {
	if !p.out.Scan() {
		if err := p.out.Err(); err != nil {
			return "", err
		}
		return "", errors.New("server process exited")
	}
	rest, ok := strings.CutPrefix(p.out.Text(), keyword+" ")
	if !ok {
		return "", fmt.Errorf("server process said %q, want %s", p.out.Text(), keyword)
	}
	return rest, nil
}

// measure asks the server to collect its garbage and return freed memory
// to the OS, then reads its resident size from /proc and its Go figures
// from its answer.
func (p *serverProcess) measure() (serverSample, error) {
	if _, err := io.WriteString(p.in, "gc\n"); err != nil {
		return serverSample{}, err
	}
	line, err := p.expect("stats")
	if err != nil {
		return serverSample{}, err
	}
	var s serverSample
	if _, err := fmt.Sscan(line, &s.gomem, &s.goroutines); err != nil {
		return serverSample{}, fmt.Errorf("server stats %q: %w", line, err)
	}
	rss, err := residentBytes(p.cmd.Process.Pid)
	if err != nil {
		return serverSample{}, err
	}
	s.rss = rss
	return s, nil
}

// stop asks the server to exit and kills it if it does not.
func (p *serverProcess) stop() {
	_, _ = io.WriteString(p.in, "quit\n")
	_ = p.in.Close()
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

// residentBytes reads VmRSS of process pid.
func residentBytes(pid int) (float64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, fmt.Errorf("reading server memory: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest) // "12345 kB"
			if len(f) == 2 && f[1] == "kB" {
				kb, err := strconv.ParseFloat(f[0], 64)
				return kb * 1024, err
			}
		}
	}
	return 0, errors.New("no VmRSS line in /proc/" + strconv.Itoa(pid) + "/status")
}

// serveChild is the -serve mode: run library's echo server on a loopback
// port, print "listening ADDR", then answer "gc" with "stats GOMEM
// GOROUTINES" until "quit" or the end of stdin.
func serveChild(library string, in io.Reader, out io.Writer) error {
	srv, ok := findEchoServer(library)
	if !ok {
		return fmt.Errorf("no echo server named %q", library)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	stop, err := srv.Serve(ln)
	if err != nil {
		return err
	}
	defer stop()
	fmt.Fprintf(out, "listening %s\n", ln.Addr())
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		switch sc.Text() {
		case "gc":
			runtime.GC()
			debug.FreeOSMemory()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			fmt.Fprintf(out, "stats %d %d\n", ms.HeapInuse+ms.StackInuse, runtime.NumGoroutine())
		case "quit":
			return nil
		}
	}
	return sc.Err()
}
