package main

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
)

// Env is what a reader needs to judge a table: the machine, the toolchain,
// how busy the machine was, and the command that produced it. Every
// table's footer prints it.
type Env struct {
	Host       string    `json:"host"`
	GoVersion  string    `json:"go"`
	CPU        string    `json:"cpu"`
	Cores      int       `json:"cores"`
	GOMAXPROCS int       `json:"gomaxprocs"`
	Date       time.Time `json:"date"`
	Command    string    `json:"command"`
	Count      int       `json:"count"`
	Quick      bool      `json:"quick"`
	// LoadStart and LoadEnd are the one-minute load averages when the
	// scenario started and ended: on a shared machine they say how much
	// else was running.
	LoadStart string `json:"load_start,omitempty"`
	LoadEnd   string `json:"load_end,omitempty"`
}

// captureEnv describes this machine and this invocation.
func captureEnv(args []string, count int, quick bool) Env {
	host, _ := os.Hostname()
	return Env{
		Host:       host,
		GoVersion:  runtime.Version(),
		CPU:        cpuModel(),
		Cores:      runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		Date:       time.Now().UTC(),
		Command:    commandLine(args),
		Count:      count,
		Quick:      quick,
	}
}

// commandLine rebuilds the command a reader would type to get the same
// table; os.Args[0] is a temporary binary under go run, so it is replaced.
func commandLine(args []string) string {
	parts := []string{"go run ./bench"}
	for _, a := range args {
		if a == "" || strings.ContainsAny(a, " \t'\"$*?()[]|&;<>\\") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		parts = append(parts, a)
	}
	return strings.Join(parts, " ")
}

// cpuModel reads the model name from /proc/cpuinfo, or says which
// architecture it is when that file is missing (not Linux).
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

// loadAverage returns the one-minute load average, or "" where
// /proc/loadavg does not exist.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return ""
}

// progress prints where a run is on stderr, since a full run takes
// minutes. On a terminal it rewrites one line; in a log it prints one line
// per step.
type progress struct {
	on   bool
	tty  bool
	last int
}

func newProgress(on bool) *progress {
	p := &progress{on: on}
	if fi, err := os.Stderr.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		p.tty = true
	}
	return p
}

func (p *progress) show(scenario, label, library, what string) {
	if p == nil || !p.on {
		return
	}
	line := fmt.Sprintf("bench: %s | %s | %s | %s", scenario, label, library, what)
	if !p.tty {
		fmt.Fprintln(os.Stderr, line)
		return
	}
	pad := ""
	if n := p.last - len(line); n > 0 {
		pad = strings.Repeat(" ", n)
	}
	p.last = len(line)
	fmt.Fprintf(os.Stderr, "\r%s%s", line, pad)
}

// done ends the rewritten line so what follows starts on a fresh one.
func (p *progress) done() {
	if p != nil && p.on && p.tty && p.last > 0 {
		fmt.Fprintln(os.Stderr)
		p.last = 0
	}
}
