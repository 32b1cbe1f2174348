package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sampleScenario is a two-case scenario with our row, two peers, a limit
// and an invalid peer: every kind of cell the reports print.
func sampleScenario() ScenarioResult {
	rows := func(scale float64) []RowResult {
		return []RowResult{
			{Library: "hotpath", Role: Ours, Samples: map[string][]float64{"time": {50 * scale, 40 * scale, 45 * scale}, "allocs": {0, 0, 0}}},
			{Library: "gorilla/websocket", Role: Peer, Samples: map[string][]float64{"time": {90 * scale, 90 * scale, 90 * scale}, "allocs": {1, 1, 1}}},
			{Library: "lxzan/gws", Role: Peer, Invalid: "lost 3 messages (1 of 3 trials)", Samples: map[string][]float64{"time": {60 * scale}, "allocs": {2}}},
			{Library: "copy (limit)", Role: Limit, Samples: map[string][]float64{"time": {15 * scale, 15 * scale, 15 * scale}, "allocs": {0, 0, 0}}},
		}
	}
	return ScenarioResult{
		Number: 1,
		Name:   "framewrite",
		Title:  "Frame write",
		About:  "What it measures.",
		Metrics: []Metric{
			{Key: "time", Unit: "ns/op", Better: LowerIsBetter},
			{Key: "allocs", Unit: "allocs/op", Better: LowerIsBetter},
		},
		Env: Env{
			Host: "vm", GoVersion: "go1.26.8", CPU: "AMD EPYC <test>", Cores: 2, GOMAXPROCS: 2,
			Date:    time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC),
			Command: "go run ./bench -only framewrite", Count: 3, LoadStart: "1.50", LoadEnd: "1.70",
		},
		Cases: []CaseResult{{Label: "200 B", Rows: rows(1)}, {Label: "64 KiB", Rows: rows(100)}},
	}
}

func TestMarkdownTable(t *testing.T) {
	md := renderScenarioMarkdown(sampleScenario(), 2, "chart.svg")
	for _, want := range []string{
		"## 1. Frame write (`framewrite`)",
		"![Frame write](chart.svg)",
		"| case | library | ns/op | allocs/op | of limit | hotpath × |",
		"|---|---|---:|---:|---:|---:|",
		// Ours: median 45 of {50, 40, 45}; per round against the limit's
		// 15: 0.30, 0.375, 0.33 → median 0.33.
		"| 200 B | **hotpath** | 45 [40, 50] | 0 | 0.33× | — |",
		// hotpath per round against gorilla's 90: 1.8, 2.25, 2 → 2.
		"|  | gorilla/websocket | 90 | 1 | 0.17× | 2.00× |",
		"|  | lxzan/gws | ~~60~~ | ~~2~~ | invalid | invalid |",
		"|  | copy (limit) | 15 | 0 | — | 0.33× |",
		"| 64 KiB | **hotpath** | 4,500 [4,000, 5,000] |",
		"- **invalid** — 200 B, lxzan/gws: lost 3 messages (1 of 3 trials)",
		"Ratios compare ns/op (lower is better), trial by trial within a round, and show the median of those ratios.",
		"go1.26.8 · AMD EPYC <test> · 2 cores · GOMAXPROCS 2 · 2026-12-02 13:00 UTC · load average 1.50 → 1.70",
		"`go run ./bench -only framewrite`",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "-quick") {
		t.Error("a full run is marked quick")
	}
}

// With two hotpath rows in a case, the legend names the one the hotpath ×
// column compares with; with one, it names none.
func TestMarkdownNamesTheHotpathReference(t *testing.T) {
	s := sampleScenario()
	if md := renderScenarioMarkdown(s, 2, ""); strings.Contains(md, "the first hotpath row") {
		t.Errorf("one hotpath row per case, yet the legend names it:\n%s", md)
	}
	for i := range s.Cases {
		second := RowResult{Library: "hotpath (Prepared)", Role: Ours, Samples: s.Cases[i].Rows[0].Samples}
		s.Cases[i].Rows = append(s.Cases[i].Rows, second)
	}
	md := renderScenarioMarkdown(s, 2, "")
	if want := "hotpath's row is *hotpath*, the first hotpath row, and the other hotpath rows get no ratio"; !strings.Contains(md, want) {
		t.Errorf("markdown lacks %q:\n%s", want, md)
	}
}

func TestMarkdownWithoutOursHasNoHotpathColumn(t *testing.T) {
	s := sampleScenario()
	for i := range s.Cases {
		s.Cases[i].Rows = s.Cases[i].Rows[1:]
	}
	s.Loopback, s.Env.Quick = true, true
	md := renderScenarioMarkdown(s, 3, "")
	if strings.Contains(md, "hotpath ×") || strings.Contains(md, "![") {
		t.Errorf("no hotpath row and no chart, yet:\n%s", md)
	}
	for _, want := range []string{"### 1. Frame write", "client and server share the 2 cores", "-quick: a sanity check, not for publishing"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
}

func TestJSONLines(t *testing.T) {
	var buf bytes.Buffer
	if err := writeJSONLines(&buf, sampleScenario()); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(&buf)
	var lines []map[string]any
	for {
		var m map[string]any
		if err := dec.Decode(&m); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, m)
	}
	if len(lines) != 2*4*2 { // cases × rows × metrics
		t.Fatalf("%d lines, want 16", len(lines))
	}
	first := lines[0]
	for k, want := range map[string]any{
		"scenario": "framewrite", "row": "200 B", "library": "hotpath", "metric": "time",
		"unit": "ns/op", "median": 45.0, "min": 40.0, "max": 50.0, "n": 3.0, "role": "ours",
	} {
		if first[k] != want {
			t.Errorf("first line %s = %v, want %v", k, first[k], want)
		}
	}
	if _, ok := first["invalid"]; ok {
		t.Error("a valid row has an invalid field")
	}
	if lines[4]["invalid"] != "lost 3 messages (1 of 3 trials)" {
		t.Errorf("invalid row line = %v", lines[4])
	}
}

func TestSVGIsWellFormed(t *testing.T) {
	svg := renderSVG(sampleScenario())
	dec := xml.NewDecoder(strings.NewReader(svg))
	for {
		_, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG does not parse: %v\n%s", err, svg)
		}
	}
	for _, want := range []string{"<svg ", "1. Frame write", "AMD EPYC &lt;test&gt;", "invalid: lost 3 messages", `fill="#e8590c"`, "shorter is better"} {
		if !strings.Contains(svg, want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
}

func TestReplaceGenerated(t *testing.T) {
	doc := []byte("# bench\n\nprose\n\n" + readmeBegin + "\nold tables\n" + readmeEnd + "\n\nmore prose\n")
	out, err := replaceGenerated(doc, "new tables")
	if err != nil {
		t.Fatal(err)
	}
	want := "# bench\n\nprose\n\n" + readmeBegin + "\n\nnew tables\n" + readmeEnd + "\n\nmore prose\n"
	if string(out) != want {
		t.Errorf("got\n%s\nwant\n%s", out, want)
	}
	if _, err := replaceGenerated([]byte("no markers"), "x"); err == nil {
		t.Error("a README without markers was accepted")
	}
}

func TestSaveLoadMerge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "vm-2026-12-02.json")
	first := Run{Scenarios: []ScenarioResult{sampleScenario()}}
	if err := saveRun(path, first); err != nil {
		t.Fatal(err)
	}
	loaded, err := loadRun(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := renderScenarioMarkdown(loaded.Scenarios[0], 2, ""), renderScenarioMarkdown(first.Scenarios[0], 2, ""); got != want {
		t.Errorf("a saved run renders differently after loading:\n%s\nvs\n%s", got, want)
	}

	echo := ScenarioResult{Number: 4, Name: "echo", Title: "Echo"}
	again := sampleScenario()
	again.About = "rerun"
	merged, err := mergeInto(path, Run{Scenarios: []ScenarioResult{echo, again}})
	if err != nil {
		t.Fatal(err)
	}
	if len(merged.Scenarios) != 2 || merged.Scenarios[0].Name != "framewrite" || merged.Scenarios[1].Name != "echo" {
		t.Fatalf("merged scenarios = %+v", merged.Scenarios)
	}
	if merged.Scenarios[0].About != "rerun" {
		t.Error("merge kept the old framewrite instead of the new one")
	}
	fresh, err := mergeInto(filepath.Join(t.TempDir(), "none.json"), first)
	if err != nil || len(fresh.Scenarios) != 1 {
		t.Errorf("merge into a missing file = %v, %v", fresh, err)
	}
}

func TestCommandLineQuotes(t *testing.T) {
	got := commandLine([]string{"-only", "echo|idle", "-count", "7"})
	if want := "go run ./bench -only 'echo|idle' -count 7"; got != want {
		t.Errorf("commandLine = %q, want %q", got, want)
	}
}
