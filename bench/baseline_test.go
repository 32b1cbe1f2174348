package main

import (
	"strings"
	"testing"
)

// runWith builds a one-scenario run whose headline is msgs/s, with one
// case and rows given as library → role and trial values.
type testRow struct {
	lib    string
	role   Role
	trials []float64
}

func runWith(rows ...testRow) Run {
	c := CaseResult{Label: "32 B"}
	for _, r := range rows {
		c.Rows = append(c.Rows, RowResult{Library: r.lib, Role: r.role, Samples: map[string][]float64{"rate": r.trials}})
	}
	return Run{Scenarios: []ScenarioResult{{
		Name:    "echo",
		Metrics: []Metric{{Key: "rate", Unit: "msgs/s", Better: HigherIsBetter}},
		Cases:   []CaseResult{c},
	}}}
}

func verdictOf(t *testing.T, cmps []Comparison, lib string) Comparison {
	t.Helper()
	for _, c := range cmps {
		if c.Library == lib {
			return c
		}
	}
	t.Fatalf("no comparison for %s", lib)
	return Comparison{}
}

func TestBaselinePeerDriftWidensTolerance(t *testing.T) {
	base := runWith(
		testRow{"hotpath", Ours, []float64{100, 100, 100}},
		testRow{"gorilla", Peer, []float64{80, 80, 80}},
		testRow{"gws", Peer, []float64{90, 90, 90}},
	)
	// The machine is about 20% slower today, and the peers disagree by
	// about 6% about how much: a hotpath 24% slower is inside that.
	busy := runWith(
		testRow{"hotpath", Ours, []float64{76, 76, 76}},
		testRow{"gorilla", Peer, []float64{60, 60, 60}},
		testRow{"gws", Peer, []float64{76, 76, 76}},
	)
	cmps := compareRuns(base, busy, 0.05)
	hp := verdictOf(t, cmps, "hotpath")
	if hp.Verdict != "same" {
		t.Errorf("hotpath verdict = %q (change %.3f, drift %.3f, tolerance %.3f), want same: the peers moved as much",
			hp.Verdict, hp.Change, hp.Drift, hp.Tolerance)
	}
	if hp.Drift > 0.85 || hp.Drift < 0.75 {
		t.Errorf("drift = %.3f, want the peers' median change ≈ 0.80", hp.Drift)
	}
	if hp.Tolerance <= 0.05 {
		t.Errorf("tolerance = %.3f, want it widened beyond the base 5%% by the peers' disagreement", hp.Tolerance)
	}
	if len(regressions(cmps)) != 0 {
		t.Errorf("regressions = %v, want none", regressions(cmps))
	}

	// The same hotpath figure with peers that did not move is a regression.
	quiet := runWith(
		testRow{"hotpath", Ours, []float64{76, 76, 76}},
		testRow{"gorilla", Peer, []float64{80, 80, 80}},
		testRow{"gws", Peer, []float64{90, 90, 90}},
	)
	cmps = compareRuns(base, quiet, 0.05)
	if hp := verdictOf(t, cmps, "hotpath"); hp.Verdict != "worse" {
		t.Errorf("with steady peers, hotpath verdict = %q, want worse", hp.Verdict)
	}
	if n := len(regressions(cmps)); n != 1 {
		t.Errorf("regressions = %d, want 1", n)
	}
}

func TestBaselineWithoutPeersUsesBaseTolerance(t *testing.T) {
	base := runWith(testRow{"hotpath", Ours, []float64{100}})
	for _, tt := range []struct {
		now  float64
		want string
	}{
		{103, "same"},
		{97, "same"},
		{110, "better"},
		{90, "worse"},
	} {
		cmps := compareRuns(base, runWith(testRow{"hotpath", Ours, []float64{tt.now}}), 0.05)
		if got := verdictOf(t, cmps, "hotpath"); got.Verdict != tt.want {
			t.Errorf("100 → %v: verdict %q, want %q", tt.now, got.Verdict, tt.want)
		}
	}
}

func TestBaselineOwnSpreadWidensTolerance(t *testing.T) {
	base := runWith(testRow{"hotpath", Ours, []float64{80, 100, 125}})
	now := runWith(testRow{"hotpath", Ours, []float64{70, 88, 110}})
	// 12% slower, but the row's own trials span ±25%: not a verdict.
	if got := verdictOf(t, compareRuns(base, now, 0.05), "hotpath"); got.Verdict != "same" {
		t.Errorf("verdict = %q (tolerance %.2f), want same", got.Verdict, got.Tolerance)
	}
}

func TestBaselineLowerIsBetter(t *testing.T) {
	base := runWith(testRow{"hotpath", Ours, []float64{100}})
	base.Scenarios[0].Metrics[0].Better = LowerIsBetter
	now := runWith(testRow{"hotpath", Ours, []float64{50}})
	now.Scenarios[0].Metrics[0].Better = LowerIsBetter
	got := verdictOf(t, compareRuns(base, now, 0.05), "hotpath")
	if got.Verdict != "better" || got.Change != 2 {
		t.Errorf("half the ns/op: verdict %q change %v, want better 2", got.Verdict, got.Change)
	}
}

func TestBaselineMissingAndInvalidRows(t *testing.T) {
	base := runWith(testRow{"gorilla", Peer, []float64{80}})
	base.Scenarios[0].Cases[0].Rows[0].Invalid = "lost messages"
	now := runWith(
		testRow{"gorilla", Peer, []float64{80}},
		testRow{"hotpath", Ours, []float64{100}},
	)
	cmps := compareRuns(base, now, 0.05)
	if got := verdictOf(t, cmps, "gorilla").Verdict; got != "invalid" {
		t.Errorf("invalid baseline row: verdict %q", got)
	}
	if got := verdictOf(t, cmps, "hotpath").Verdict; got != "not in baseline" {
		t.Errorf("new row: verdict %q", got)
	}
	md := renderComparison("old.json", cmps)
	for _, want := range []string{"| echo | 32 B | hotpath | — | 100 msgs/s |", "not in baseline", "invalid"} {
		if !strings.Contains(md, want) {
			t.Errorf("comparison table lacks %q:\n%s", want, md)
		}
	}
}
