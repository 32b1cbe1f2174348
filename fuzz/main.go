package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

const workspacePattern = "github.com/hotpath-go/hotpath/..."

// A target is one Fuzz function in one package of the workspace.
type target struct {
	pkg  string // import path
	dir  string // directory of the package
	name string // FuzzXxx
}

// A result is what one fuzzing run reported.
type result struct {
	target
	execs   int64
	counted bool // go test printed a progress line; a short run may end before one
	raced   bool // go test failed with go.dev/issue/75804 alone: counted as ok
	newCorp int64
	elapsed time.Duration
	failed  bool
	crasher string // file that reproduces the failure, relative to the package
	tail    string // last lines of output, kept when the run failed
}

func main() {
	fuzztime := flag.String("time", "30s", "how long each target runs: a duration (30s) or a count of executions (500x)")
	minimize := flag.String("minimize", "500x", "how long each minimization may run (go test -fuzzminimizetime): a duration or a count")
	only := flag.String("only", "", "run only targets whose package/Name matches this regular expression")
	list := flag.Bool("list", false, "list the targets and exit")
	flag.Parse()

	var onlyRE *regexp.Regexp
	if *only != "" {
		re, err := regexp.Compile(*only)
		if err != nil {
			fatalf("bad -only pattern: %v", err)
		}
		onlyRE = re
	}

	targets, err := discover()
	if err != nil {
		fatalf("%v", err)
	}
	if onlyRE != nil {
		targets = filter(targets, onlyRE)
	}
	if len(targets) == 0 {
		if onlyRE != nil {
			fatalf("no fuzz target matches %q", *only)
		}
		fmt.Println("no fuzz targets in the workspace")
		return
	}
	if *list {
		// In the form -only matches.
		for _, t := range targets {
			fmt.Printf("%s/%s\n", shortPkg(t.pkg), t.name)
		}
		return
	}

	var results []result
	for i, t := range targets {
		fmt.Fprintf(os.Stderr, "[%d/%d] %s %s (%s)\n", i+1, len(targets), shortPkg(t.pkg), t.name, *fuzztime)
		results = append(results, run(t, *fuzztime, *minimize))
	}
	failed := printTable(os.Stdout, results, *fuzztime)
	if failed > 0 {
		fmt.Printf("\n%d target(s) failed\n", failed)
		os.Exit(1)
	}
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "fuzz: "+format+"\n", args...)
	os.Exit(2)
}

// discover lists every Fuzz target of every package of the workspace, the
// way go test itself sees them.
func discover() ([]target, error) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{.Dir}} {{len .TestGoFiles}} {{len .XTestGoFiles}}", workspacePattern).Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w", exitDetail(err))
	}
	var targets []target
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 || (f[2] == "0" && f[3] == "0") {
			continue
		}
		names, err := exec.Command("go", "test", "-list", "^Fuzz", f[0]).Output()
		if err != nil {
			return nil, fmt.Errorf("go test -list %s: %w", f[0], exitDetail(err))
		}
		for _, n := range strings.Fields(string(names)) {
			if strings.HasPrefix(n, "Fuzz") {
				targets = append(targets, target{pkg: f[0], dir: f[1], name: n})
			}
		}
	}
	return targets, nil
}

func exitDetail(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return fmt.Errorf("%w: %s", err, bytes.TrimSpace(ee.Stderr))
	}
	return err
}

func filter(ts []target, re *regexp.Regexp) []target {
	var out []target
	for _, t := range ts {
		if re.MatchString(shortPkg(t.pkg) + "/" + t.name) {
			out = append(out, t)
		}
	}
	return out
}

func shortPkg(pkg string) string {
	return strings.TrimPrefix(pkg, "github.com/hotpath-go/hotpath/")
}

var (
	progressRE = regexp.MustCompile(`execs: (\d+) .*new interesting: (\d+)`)
	crasherRE  = regexp.MustCompile(`Failing input written to (\S+)`)
)

// run fuzzes one target and parses go test's progress lines for the figures.
//
// go test minimizes every new corpus entry for up to a minute by default.
// For a target whose coverage varies from run to run of the same input (one
// that runs goroutines, such as a whole server), minimization rarely
// succeeds and takes the whole minute, so the target spends most of its
// time not fuzzing: FuzzServer ran 33,000 inputs and kept 4 new ones in 60
// seconds with the default, 95,000 and 439 in 40 seconds with 10x. The
// -minimize flag bounds each minimization by a count instead.
func run(t target, fuzztime, minimize string) result {
	r := result{target: t}
	cmd := exec.Command("go", "test", "-run", "^$", "-fuzz", "^"+t.name+"$", "-fuzztime", fuzztime, "-fuzzminimizetime", minimize, t.pkg)
	var buf bytes.Buffer
	cmd.Stdout = &buf
	cmd.Stderr = &buf
	start := time.Now()
	err := cmd.Run()
	r.elapsed = time.Since(start)

	sc := bufio.NewScanner(bytes.NewReader(buf.Bytes()))
	for sc.Scan() {
		line := sc.Text()
		if m := progressRE.FindStringSubmatch(line); m != nil {
			r.execs, _ = strconv.ParseInt(m[1], 10, 64)
			r.counted = true
			r.newCorp, _ = strconv.ParseInt(m[2], 10, 64)
		}
		if m := crasherRE.FindStringSubmatch(line); m != nil {
			r.crasher = filepath.Join(t.dir, m[1])
		}
	}
	if err != nil && !deadlineRace(buf.String()) {
		r.failed = true
		r.tail = lastLines(buf.String(), 25)
	}
	r.raced = err != nil && !r.failed
	return r
}

// deadlineRace reports whether a failed run's only failure is the race in
// Go's fuzzing coordinator at the end of a -fuzztime duration
// (go.dev/issue/75804, fixed in Go 1.27): "context deadline exceeded",
// printed by the testing package for the target itself, with no failing
// input found, being minimized or written. The run was cut off at its time
// limit, as it should have been.
func deadlineRace(out string) bool {
	return strings.Contains(out, "\n    context deadline exceeded\n") &&
		!strings.Contains(out, "failing input") && strings.Count(out, "--- FAIL:") == 1
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// printTable writes the summary and returns the number of failed targets.
func printTable(w io.Writer, results []result, fuzztime string) int {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "target\texecs\tnew corpus\ttime\tresult\n")
	failed := 0
	var total int64
	for _, r := range results {
		status := "ok"
		if r.raced {
			status = "ok (go.dev/issue/75804)"
		}
		if r.failed {
			failed++
			status = "FAIL"
			if r.crasher != "" {
				status = "CRASH " + r.crasher
			}
		}
		total += r.execs
		execs := "-"
		if r.counted {
			execs = strconv.FormatInt(r.execs, 10)
		}
		fmt.Fprintf(tw, "%s %s\t%s\t%d\t%s\t%s\n", shortPkg(r.pkg), r.name, execs, r.newCorp, r.elapsed.Round(100*time.Millisecond), status)
	}
	tw.Flush()
	fmt.Fprintf(w, "\n%d targets, %d executions counted (- : the run ended before go test reported a count), -time %s\n", len(results), total, fuzztime)
	for _, r := range results {
		if r.failed {
			fmt.Fprintf(w, "\n--- %s %s\n%s\n", shortPkg(r.pkg), r.name, r.tail)
			if r.crasher != "" {
				fmt.Fprintf(w, "reproduce: go test -run '%s/%s' %s\n", r.name, filepath.Base(r.crasher), r.pkg)
			}
		}
	}
	return failed
}
