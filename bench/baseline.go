package main

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// A Comparison is one row's headline metric in a baseline run and in this
// run, judged against how much the peers of the same case moved.
type Comparison struct {
	Scenario, Case, Library string
	Role                    Role
	Metric                  Metric
	Base, Cur               Summary
	// Change is advantage(cur, base): above 1 the row got better.
	Change float64
	// Drift is the median Change of the peer and limit rows of the case:
	// how much the machine itself moved between the two runs.
	Drift float64
	// Tolerance is the relative band, after dividing out Drift, inside
	// which a change is noise: the base tolerance, widened by how much the
	// peers disagree with each other and by the row's own trial spread.
	Tolerance float64
	Verdict   string // "better", "worse", "same", or why there is none
}

// compareRuns compares every row of cur with the same row (scenario, case,
// library) of base on the headline metric.
//
// The peers are the yardstick. If every peer is 20% slower today, the
// machine is busier, and a row that is 20% slower has not regressed. So a
// row's change is divided by the peers' median change (the drift), and the
// tolerance grows by the peers' disagreement (the largest distance of a
// peer from the drift) and by the row's own min–max spread in both runs.
func compareRuns(base, cur Run, baseTol float64) []Comparison {
	baseIdx := map[string]RowResult{}
	for _, s := range base.Scenarios {
		for _, c := range s.Cases {
			for _, r := range c.Rows {
				baseIdx[rowKey(s.Name, c.Label, r.Library)] = r
			}
		}
	}
	var out []Comparison
	for _, s := range cur.Scenarios {
		hm := s.Headline()
		for _, c := range s.Cases {
			drift, spread := peerDrift(s.Name, c, baseIdx, hm)
			for _, r := range c.Rows {
				cmp := Comparison{Scenario: s.Name, Case: c.Label, Library: r.Library, Role: r.Role, Metric: hm, Drift: drift}
				cmp.Cur = r.Summary(hm.Key)
				b, ok := baseIdx[rowKey(s.Name, c.Label, r.Library)]
				switch {
				case !ok:
					cmp.Verdict = "not in baseline"
				case !b.Valid() || !r.Valid():
					cmp.Base = b.Summary(hm.Key)
					cmp.Verdict = "invalid"
				default:
					cmp.Base = b.Summary(hm.Key)
					judge(&cmp, spread, baseTol, hm.Better)
				}
				out = append(out, cmp)
			}
		}
	}
	return out
}

func rowKey(scenario, label, library string) string {
	return scenario + "\x00" + label + "\x00" + library
}

// peerDrift returns the median change of the valid peer and limit rows of
// c between base and now, and the largest log-distance of one of them from
// that median. With no peers the drift is 1 and the spread 0: nothing
// widens the base tolerance.
func peerDrift(scenario string, c CaseResult, baseIdx map[string]RowResult, hm Metric) (drift, spread float64) {
	var changes []float64
	for _, r := range c.Rows {
		if r.Role == Ours || !r.Valid() {
			continue
		}
		b, ok := baseIdx[rowKey(scenario, c.Label, r.Library)]
		if !ok || !b.Valid() {
			continue
		}
		if x, ok := advantage(r.Summary(hm.Key).Median, b.Summary(hm.Key).Median, hm.Better); ok {
			changes = append(changes, x)
		}
	}
	if len(changes) == 0 {
		return 1, 0
	}
	drift = summarize(changes).Median
	for _, x := range changes {
		spread = math.Max(spread, math.Abs(math.Log(x/drift)))
	}
	return drift, spread
}

// judge fills Change, Tolerance and Verdict. Work happens in log space so
// that "twice as fast" and "half as fast" are the same distance from 1.
func judge(c *Comparison, peerSpread, baseTol float64, dir Better) {
	change, ok := advantage(c.Cur.Median, c.Base.Median, dir)
	if !ok {
		c.Verdict = "no ratio"
		return
	}
	c.Change = change
	tol := math.Log1p(baseTol) + peerSpread + max(halfRange(c.Base), halfRange(c.Cur))
	c.Tolerance = math.Expm1(tol)
	switch x := math.Log(change / c.Drift); {
	case x > tol:
		c.Verdict = "better"
	case x < -tol:
		c.Verdict = "worse"
	default:
		c.Verdict = "same"
	}
}

// halfRange is half the log-spread of a row's trials: a row that itself
// varies by ±8% from trial to trial cannot be judged to ±5%.
func halfRange(s Summary) float64 {
	if s.Min <= 0 || s.Max <= 0 {
		return 0
	}
	return math.Log(s.Max/s.Min) / 2
}

// regressions returns the comparisons of our rows that got worse: the only
// verdicts that fail a run. A peer getting "worse" is information about
// the machine, not about hotpath.
func regressions(cmps []Comparison) []Comparison {
	var out []Comparison
	for _, c := range cmps {
		if c.Role == Ours && c.Verdict == "worse" {
			out = append(out, c)
		}
	}
	return out
}

// renderComparison prints the comparisons as a markdown table.
func renderComparison(baseName string, cmps []Comparison) string {
	var b strings.Builder
	fmt.Fprintf(&b, "### Compared with %s\n\n", baseName)
	b.WriteString("Each row's change on the headline metric (above 1: better), divided by its case's peer drift; a change inside the tolerance is noise.\n\n")
	b.WriteString("| scenario | case | library | baseline | now | change | peer drift | tolerance | verdict |\n")
	b.WriteString("|---|---|---|---:|---:|---:|---:|---:|---|\n")
	sorted := append([]Comparison(nil), cmps...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Scenario < sorted[j].Scenario })
	for _, c := range sorted {
		change, tol := "—", "—"
		if c.Change > 0 {
			change = formatRatio(c.Change)
			tol = fmt.Sprintf("±%.0f%%", 100*c.Tolerance)
		}
		verdict := c.Verdict
		if c.Verdict == "worse" && c.Role == Ours {
			verdict = "**worse**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			c.Scenario, c.Case, c.Library, medianWithUnit(c.Base, c.Metric), medianWithUnit(c.Cur, c.Metric),
			change, formatRatio(c.Drift), tol, verdict)
	}
	return b.String()
}

func medianWithUnit(s Summary, m Metric) string {
	if s.N == 0 {
		return "—"
	}
	return formatValue(s.Median) + " " + m.Unit
}
