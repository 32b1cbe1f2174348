package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
)

// renderScenarioMarkdown writes one scenario as a markdown section: the
// heading, what it measures, its chart (when chartPath is set), the table,
// a legend for the ratio columns, the reasons of invalid rows, and the
// footer a reader needs to judge the numbers.
func renderScenarioMarkdown(s ScenarioResult, level int, chartPath string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %d. %s (`%s`)\n\n", strings.Repeat("#", level), s.Number, s.Title, s.Name)
	if s.About != "" {
		b.WriteString(s.About + "\n\n")
	}
	if chartPath != "" {
		fmt.Fprintf(&b, "![%s](%s)\n\n", s.Title, chartPath)
	}
	b.WriteString(markdownTable(s))
	b.WriteString("\n")
	if legend := ratioLegend(s); legend != "" {
		b.WriteString(legend + "\n\n")
	}
	if t := renderTargets(s); t != "" {
		b.WriteString(t + "\n")
	}
	for _, c := range s.Cases {
		for _, r := range c.Rows {
			if !r.Valid() {
				fmt.Fprintf(&b, "- **invalid** — %s, %s: %s\n", c.Label, r.Library, invalidText(r))
			}
		}
	}
	if hasInvalid(s) {
		b.WriteString("\n")
	}
	b.WriteString(footer(s) + "\n")
	return b.String()
}

func hasInvalid(s ScenarioResult) bool {
	for _, c := range s.Cases {
		for _, r := range c.Rows {
			if !r.Valid() {
				return true
			}
		}
	}
	return false
}

func invalidText(r RowResult) string {
	if r.Invalid != "" {
		return r.Invalid
	}
	return "no trial completed"
}

// markdownTable renders the rows of every case: one column per metric
// ("median [min, max]"), then the ratio columns on the headline metric.
// An invalid row keeps its numbers, struck through, and gets no ratio.
func markdownTable(s ScenarioResult) string {
	withLimit, withOurs := s.hasRole(Limit), s.hasRole(Ours)
	head := []string{"case", "library"}
	align := []string{"---", "---"}
	for _, m := range s.Metrics {
		head = append(head, m.Unit)
		align = append(align, "---:")
	}
	if withLimit {
		head = append(head, "of limit")
		align = append(align, "---:")
	}
	if withOurs {
		head = append(head, "hotpath ×")
		align = append(align, "---:")
	}
	var b strings.Builder
	b.WriteString("| " + strings.Join(head, " | ") + " |\n")
	b.WriteString("|" + strings.Join(align, "|") + "|\n")

	hm := s.Headline()
	for _, c := range s.Cases {
		limit, hasLimit := c.reference(Limit)
		ours, hasOurs := c.reference(Ours)
		for i, r := range c.Rows {
			label := ""
			if i == 0 {
				label = c.Label
			}
			lib := r.Library
			if r.Role == Ours {
				lib = "**" + lib + "**"
			}
			cells := []string{label, lib}
			for _, m := range s.Metrics {
				cell := formatSummary(r.Summary(m.Key))
				if !r.Valid() && cell != "—" {
					cell = "~~" + cell + "~~"
				}
				cells = append(cells, cell)
			}
			own := r.Samples[hm.Key]
			if withLimit {
				cells = append(cells, ratioCell(r, r.Role == Limit, hasLimit, own, limit.Samples[hm.Key], hm.Better))
			}
			if withOurs {
				cells = append(cells, ratioCell(r, r.Role == Ours, hasOurs, ours.Samples[hm.Key], own, hm.Better))
			}
			b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
		}
	}
	return b.String()
}

// ratioCell prints pairedAdvantage(a, b): "—" on the reference row itself
// or when there is no valid reference, "invalid" on an invalid row.
func ratioCell(r RowResult, isRef, hasRef bool, a, b []float64, dir Better) string {
	switch {
	case !r.Valid():
		return "invalid"
	case isRef || !hasRef:
		return "—"
	}
	if x, ok := pairedAdvantage(a, b, dir); ok {
		return formatRatio(x)
	}
	return "—"
}

// ratioLegend says what the ratio columns mean, in the scenario's own
// headline unit, so nobody has to guess which way a ratio goes.
func ratioLegend(s ScenarioResult) string {
	hm := s.Headline()
	word := "higher is better"
	if hm.Better == LowerIsBetter {
		word = "lower is better"
	}
	var parts []string
	if s.hasRole(Limit) {
		parts = append(parts, fmt.Sprintf("*of limit*: the row's %s as a fraction of the limit row's (1.00× would be at the physical limit)", hm.Unit))
	}
	if s.hasRole(Ours) {
		parts = append(parts, fmt.Sprintf("*hotpath ×*: how many times better hotpath's %s is than the row's (above 1: hotpath ahead)%s", hm.Unit, oursReferenceNote(s)))
	}
	if len(parts) == 0 {
		return ""
	}
	return fmt.Sprintf("Ratios compare %s (%s), trial by trial within a round, and show the median of those ratios. %s.", hm.Unit, word, strings.Join(parts, "; "))
}

// oursReferenceNote names the row *hotpath ×* compares with when a case has
// more than one hotpath row: the first valid one in table order (see
// CaseResult.reference). Without it a reader takes a ratio against one
// hotpath row for a ratio against another.
func oursReferenceNote(s ScenarioResult) string {
	several := false
	var refs []string
	for _, c := range s.Cases {
		n := 0
		for _, r := range c.Rows {
			if r.Role == Ours {
				n++
			}
		}
		several = several || n > 1
		if ref, ok := c.reference(Ours); ok && !slices.Contains(refs, ref.Library) {
			refs = append(refs, ref.Library)
		}
	}
	switch {
	case !several:
		return ""
	case len(refs) == 1:
		return fmt.Sprintf("; hotpath's row is *%s*, the first hotpath row, and the other hotpath rows get no ratio", refs[0])
	}
	return "; hotpath's row is the first valid hotpath row of each case, and the other hotpath rows get no ratio"
}

// footer is the line under every table: machine, toolchain, load, method
// and the exact command.
func footer(s ScenarioResult) string {
	e := s.Env
	var b strings.Builder
	fmt.Fprintf(&b, "<sub>%s · %s · %d cores · GOMAXPROCS %d · %s",
		e.GoVersion, e.CPU, e.Cores, e.GOMAXPROCS, e.Date.Format("2006-01-02 15:04 MST"))
	if e.LoadStart != "" {
		fmt.Fprintf(&b, " · load average %s → %s", e.LoadStart, e.LoadEnd)
	}
	fmt.Fprintf(&b, " · %d trials per row after a warm-up, interleaved; median [min, max]", e.Count)
	if s.Loopback {
		fmt.Fprintf(&b, " · loopback TCP on 127.0.0.1: client and server share the %d cores", e.Cores)
	}
	fmt.Fprintf(&b, " · `%s`", e.Command)
	if e.Quick {
		b.WriteString(" · **-quick: a sanity check, not for publishing**")
	}
	b.WriteString("</sub>")
	return b.String()
}

// renderRunMarkdown renders every scenario of a run as one document.
// chartFor returns the chart path to embed for a scenario ("" for none).
func renderRunMarkdown(run Run, level int, chartFor func(ScenarioResult) string) string {
	var b strings.Builder
	for i, s := range run.Scenarios {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(renderScenarioMarkdown(s, level, chartFor(s)))
	}
	return b.String()
}

const (
	readmeBegin = "<!-- results:begin (generated by go run ./bench -save or -render; do not edit) -->"
	readmeEnd   = "<!-- results:end -->"
)

// replaceGenerated swaps the text between the README markers for section,
// leaving the hand-written prose around it alone.
func replaceGenerated(doc []byte, section string) ([]byte, error) {
	i := bytes.Index(doc, []byte(readmeBegin))
	j := bytes.Index(doc, []byte(readmeEnd))
	if i < 0 || j < i {
		return nil, errors.New("markers not found: add " + readmeBegin + " and " + readmeEnd)
	}
	var out bytes.Buffer
	out.Write(doc[:i+len(readmeBegin)])
	out.WriteString("\n\n" + section + "\n")
	out.Write(doc[j:])
	return out.Bytes(), nil
}

// updateReadme rewrites the generated section of the README at path.
func updateReadme(path, section string) error {
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := replaceGenerated(doc, section)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, out, 0o644)
}
