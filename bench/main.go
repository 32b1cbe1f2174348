package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is main without the exit, so its exit code can be chosen in one
// place: 0 ok, 1 a hotpath row regressed against -baseline, 2 the run
// itself failed.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	only := fs.String("only", "", "run only the scenarios whose name matches this regular expression (see -list)")
	quick := fs.Bool("quick", false, "short trials, fewer connections, 3 trials unless -count is given: a sanity check, never for publishing")
	count := fs.Int("count", 5, "trials per row after the warm-up; tables show the median with min and max")
	save := fs.Bool("save", false, "write bench/results/<host>-<date>.md, .json and one .svg per scenario, and update bench/README.md")
	baseline := fs.String("baseline", "", "compare with a run saved by -save (its .json); peers' drift widens the tolerance")
	tolerance := fs.Float64("tolerance", 0.05, "with -baseline: the relative change taken as noise before peer drift and trial spread widen it")
	jsonOut := fs.Bool("json", false, "print one JSON object per row and metric on stdout instead of tables")
	list := fs.Bool("list", false, "list the scenarios and exit")
	render := fs.String("render", "", "rebuild the .md, the .svg charts and the README section from a saved .json, without running")
	rows := fs.String("rows", "", "run only the rows whose library matches this regular expression (a profile of one row)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	serve := fs.String("serve", "", "internal: serve LIB's echo server on 127.0.0.1 (the server process of the idle scenario)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	countSet := false
	fs.Visit(func(f *flag.Flag) { countSet = countSet || f.Name == "count" })
	if *quick && !countSet {
		*count = 3
	}

	fail := func(err error) int {
		fmt.Fprintln(stderr, "bench:", err)
		return 2
	}
	switch {
	case *serve != "":
		if err := serveChild(*serve, os.Stdin, stdout); err != nil {
			return fail(err)
		}
		return 0
	case *list:
		for _, s := range mustSelect("") {
			fmt.Fprintf(stdout, "%-12s %d. %s\n", s.Name, s.Number, s.Title)
		}
		return 0
	case *render != "":
		saved, err := loadRun(*render)
		if err == nil {
			err = writeOutputs(*render, saved, !isQuickFile(*render))
		}
		if err != nil {
			return fail(err)
		}
		return 0
	case *count < 1:
		return fail(errors.New("-count must be at least 1"))
	}

	selected, err := selectScenarios(*only)
	if err != nil {
		return fail(err)
	}
	var rowFilter *regexp.Regexp
	if *rows != "" {
		if rowFilter, err = regexp.Compile(*rows); err != nil {
			return fail(fmt.Errorf("bad -rows pattern: %w", err))
		}
		if *save {
			return fail(errors.New("-rows and -save do not go together: a saved run has every row"))
		}
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fail(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fail(err)
		}
		defer pprof.StopCPUProfile()
	}
	if len(selected) == 0 {
		return fail(fmt.Errorf("no scenario matches %q (see -list)", *only))
	}
	var base Run
	if *baseline != "" {
		if base, err = loadRun(*baseline); err != nil {
			return fail(err)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	prog := newProgress(true)
	var done Run
	for _, s := range selected {
		env := captureEnv(args, *count, *quick)
		res, err := runScenario(ctx, s, env, runOptions{Count: *count, CountSet: countSet, Quick: *quick, Progress: prog, Rows: rowFilter})
		prog.done()
		if err != nil {
			return fail(err)
		}
		done.Scenarios = append(done.Scenarios, res)
		if *jsonOut {
			err = writeJSONLines(stdout, res)
		} else {
			_, err = fmt.Fprintln(stdout, renderScenarioMarkdown(res, 2, ""))
		}
		if err != nil {
			return fail(err)
		}
	}

	if *save {
		path, err := savePath(done, *quick)
		if err == nil {
			var merged Run
			if merged, err = mergeInto(path, done); err == nil {
				if err = saveRun(path, merged); err == nil {
					err = writeOutputs(path, merged, !*quick)
				}
			}
		}
		if err != nil {
			return fail(err)
		}
		fmt.Fprintln(stderr, "bench: saved", path)
	}

	if *baseline != "" {
		cmps := compareRuns(base, done, *tolerance)
		out := stdout
		if *jsonOut {
			out = stderr // keep stdout a clean JSON stream
		}
		fmt.Fprintln(out, renderComparison(filepath.Base(*baseline), cmps))
		if bad := regressions(cmps); len(bad) > 0 {
			fmt.Fprintf(stderr, "bench: %d hotpath rows are worse than %s beyond the peers' drift\n", len(bad), *baseline)
			return 1
		}
	}
	return 0
}

func mustSelect(pattern string) []*Scenario {
	s, _ := selectScenarios(pattern)
	return s
}

// savePath is bench/results/<host>-<date>.json; a quick run gets a
// "-quick" suffix so it can never overwrite, or be mistaken for, a run
// meant for publishing.
func savePath(run Run, quick bool) (string, error) {
	dir, err := benchDir()
	if err != nil {
		return "", err
	}
	e := run.Scenarios[0].Env
	host := strings.Map(func(r rune) rune {
		if r == '/' || r == ' ' || r == os.PathSeparator {
			return '_'
		}
		return r
	}, e.Host)
	name := host + "-" + e.Date.Format("2006-01-02")
	if quick {
		name += "-quick"
	}
	results := filepath.Join(dir, "results")
	if err := os.MkdirAll(results, 0o755); err != nil {
		return "", err
	}
	return filepath.Join(results, name+".json"), nil
}

func isQuickFile(path string) bool {
	return strings.HasSuffix(strings.TrimSuffix(path, ".json"), "-quick")
}

// writeOutputs renders a saved run next to its .json: one .svg chart per
// scenario and one .md with every table. With readme set it also rewrites
// the generated section of bench/README.md, so the README always shows
// exactly what a committed result file holds.
func writeOutputs(jsonPath string, run Run, readme bool) error {
	stem := strings.TrimSuffix(jsonPath, ".json")
	charts := map[string]string{}
	for _, s := range run.Scenarios {
		path := stem + "-" + s.Name + ".svg"
		if err := os.WriteFile(path, []byte(renderSVG(s)), 0o644); err != nil {
			return err
		}
		charts[s.Name] = path
	}
	base := filepath.Base(stem)
	doc := "# Benchmark results: " + base + "\n\n" +
		"Written by `go run ./bench -save`, or by several runs with `-only` that each add their scenarios " +
		"(each section's last line gives the command of its run); rebuild this file, the charts and the README section with " +
		"`go run ./bench -render " + filepath.ToSlash(filepath.Join("bench", "results", base+".json")) + "`.\n\n" +
		renderRunMarkdown(run, 2, func(s ScenarioResult) string { return filepath.Base(charts[s.Name]) })
	if err := os.WriteFile(stem+".md", []byte(doc), 0o644); err != nil {
		return err
	}
	if !readme {
		return nil
	}
	dir, err := benchDir()
	if err != nil {
		return err
	}
	rel := func(p string) string {
		abs, _ := filepath.Abs(p)
		r, err := filepath.Rel(dir, abs)
		if err != nil {
			return p
		}
		return filepath.ToSlash(r)
	}
	section := "Figures from [" + rel(jsonPath) + "](" + rel(jsonPath) + ") (tables also in [" +
		rel(stem+".md") + "](" + rel(stem+".md") + ")).\n\n" +
		renderRunMarkdown(run, 3, func(s ScenarioResult) string { return rel(charts[s.Name]) })
	return updateReadme(filepath.Join(dir, "README.md"), section)
}

// benchDir finds the bench module's directory from the working directory:
// the directory itself when run inside bench/, or bench/ under the
// workspace root (the directory holding go.work) when run from anywhere
// else in the repository.
func benchDir() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if isBenchModule(d) {
			return d, nil
		}
		if _, err := os.Stat(filepath.Join(d, "go.work")); err == nil && isBenchModule(filepath.Join(d, "bench")) {
			return filepath.Join(d, "bench"), nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("cannot find the bench module: run from inside the hotpath repository")
		}
	}
}

func isBenchModule(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	first, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(first) == "module github.com/hotpath-go/hotpath/bench"
}
