package main

import (
	"fmt"
	"strings"
)

// A Target is a goal an issue sets for a hotpath row, checked on every run
// and printed under the scenario's table as met or not met, with the
// figure. It compares the row's headline metric with another row's (a
// ratio, oriented so that above 1 means the row is better) or, when
// Against is empty, with a fixed bound.
type Target struct {
	// Goal is what the issue asks, in its words.
	Goal string `json:"goal"`
	// Case and Row name the row being judged.
	Case string `json:"case"`
	Row  string `json:"row"`
	// Against names the row it is compared with, in AgainstCase (Case
	// when empty). Rows of one case ran round by round, so their ratio is
	// paired (the median of per-round ratios); rows of two cases did not,
	// so theirs is the ratio of the medians.
	AgainstCase string `json:"against_case,omitempty"`
	Against     string `json:"against,omitempty"`
	// Min is the least ratio that meets the goal, when Against is set.
	Min float64 `json:"min,omitempty"`
	// Bound is the headline value the row must reach when Against is
	// empty: at most Bound for a cost, at least Bound for a rate.
	Bound float64 `json:"bound,omitempty"`
}

// targets holds the targets of each scenario by name, added from the init
// of the file that declares the rows they judge.
var targets = map[string][]Target{}

func addTargets(scenario string, ts ...Target) {
	targets[scenario] = append(targets[scenario], ts...)
}

// TargetResult is a Target checked against a run.
type TargetResult struct {
	Target
	Value float64 // the ratio, or the row's median when there is no Against
	OK    bool    // the figure could be computed (both rows valid)
	Met   bool
	Why   string // why there is no figure
}

// checkTargets evaluates every target of s.
func checkTargets(s ScenarioResult) []TargetResult {
	hm := s.Headline()
	find := func(caseLabel, lib string) (RowResult, bool) {
		for _, c := range s.Cases {
			if c.Label != caseLabel {
				continue
			}
			for _, r := range c.Rows {
				if r.Library == lib {
					return r, true
				}
			}
		}
		return RowResult{}, false
	}
	var out []TargetResult
	for _, t := range s.Targets {
		tr := TargetResult{Target: t}
		row, ok := find(t.Case, t.Row)
		switch {
		case !ok:
			tr.Why = fmt.Sprintf("no row %q in case %q", t.Row, t.Case)
		case !row.Valid():
			tr.Why = t.Row + " is invalid"
		case t.Against == "":
			tr.Value, tr.OK = row.Summary(hm.Key).Median, true
			if hm.Better == LowerIsBetter {
				tr.Met = tr.Value <= t.Bound
			} else {
				tr.Met = tr.Value >= t.Bound
			}
		default:
			otherCase := t.AgainstCase
			if otherCase == "" {
				otherCase = t.Case
			}
			other, ok := find(otherCase, t.Against)
			switch {
			case !ok:
				tr.Why = fmt.Sprintf("no row %q in case %q", t.Against, otherCase)
			case !other.Valid():
				tr.Why = t.Against + " is invalid"
			default:
				a, b := row.Samples[hm.Key], other.Samples[hm.Key]
				if otherCase == t.Case {
					tr.Value, tr.OK = pairedAdvantage(a, b, hm.Better)
				} else {
					tr.Value, tr.OK = advantage(summarize(a).Median, summarize(b).Median, hm.Better)
				}
				if !tr.OK {
					tr.Why = "no ratio (a zero figure)"
				}
				tr.Met = tr.OK && tr.Value >= t.Min
			}
		}
		out = append(out, tr)
	}
	return out
}

// renderTargets lists the targets of s with their figures and verdicts.
func renderTargets(s ScenarioResult) string {
	results := checkTargets(s)
	if len(results) == 0 {
		return ""
	}
	hm := s.Headline()
	var b strings.Builder
	b.WriteString("Targets:\n\n")
	for _, r := range results {
		verdict := "**not measured**"
		figure := r.Why
		switch {
		case r.OK && r.Met:
			verdict = "**met**"
		case r.OK:
			verdict = "**not met**"
		}
		if r.OK {
			if r.Against == "" {
				figure = fmt.Sprintf("%s: %s %s", r.Row, formatValue(r.Value), hm.Unit)
			} else {
				against := r.Against
				if r.AgainstCase != "" && r.AgainstCase != r.Case {
					against += " (" + r.AgainstCase + ")"
				}
				figure = fmt.Sprintf("%s is %s %s (%s)", r.Row, formatRatio(r.Value), against, hm.Unit)
			}
		}
		fmt.Fprintf(&b, "- %s — %s: %s\n", r.Goal, figure, verdict)
	}
	return b.String()
}
