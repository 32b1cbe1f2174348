package main

import (
	"fmt"
	"strings"
)

// Chart geometry, in SVG user units (pixels at 100%).
const (
	svgWidth     = 760
	svgLabelW    = 200 // library names, right-aligned against the bars
	svgBarW      = 420 // the longest bar of a case
	svgRowH      = 20
	svgBarH      = 13
	svgCaseHeadH = 24
	svgMarginTop = 46
	svgBottom    = 34
)

// roleColor tells our rows, peers and limits apart at a glance.
var roleColor = map[Role]string{
	Ours:  "#e8590c",
	Peer:  "#4c6ef5",
	Limit: "#868e96",
}

var svgEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;")

// renderSVG draws the headline metric of s as horizontal bars: one panel
// per case, each with its own scale (a 64 KiB write and a 200 B write do
// not share an axis), the median as the bar and the trial range as a
// whisker. Written by hand: a chart this plain needs no dependency.
func renderSVG(s ScenarioResult) string {
	hm := s.Headline()
	height := svgMarginTop + svgBottom
	for _, c := range s.Cases {
		height += svgCaseHeadH + len(c.Rows)*svgRowH
	}
	direction := "longer is better"
	if hm.Better == LowerIsBetter {
		direction = "shorter is better"
	}

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		svgWidth, height, svgWidth, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", svgWidth, height)
	fmt.Fprintf(&b, `<text x="10" y="20" font-size="15" font-weight="bold">%d. %s</text>`+"\n", s.Number, esc(s.Title))
	fmt.Fprintf(&b, `<text x="10" y="37" fill="#495057">median %s, %s; whiskers: min–max of %d trials</text>`+"\n",
		esc(hm.Unit), direction, s.Env.Count)

	drawLegend(&b, s)

	y := svgMarginTop
	for _, c := range s.Cases {
		fmt.Fprintf(&b, `<text x="10" y="%d" font-weight="bold">%s</text>`+"\n", y+16, esc(c.Label))
		y += svgCaseHeadH
		scale := caseScale(c, hm.Key)
		for _, r := range c.Rows {
			drawRow(&b, r, hm, scale, y)
			y += svgRowH
		}
	}
	e := s.Env
	fmt.Fprintf(&b, `<text x="10" y="%d" fill="#868e96" font-size="11">%s · %s · %d cores · GOMAXPROCS %d · %s</text>`+"\n",
		height-12, esc(e.GoVersion), esc(e.CPU), e.Cores, e.GOMAXPROCS, e.Date.Format("2006-01-02"))
	b.WriteString("</svg>\n")
	return b.String()
}

// caseScale maps the largest value of a case (a maximum, so whiskers fit)
// to the full bar width.
func caseScale(c CaseResult, key string) float64 {
	top := 0.0
	for _, r := range c.Rows {
		if sum := r.Summary(key); sum.N > 0 && sum.Max > top {
			top = sum.Max
		}
	}
	if top <= 0 {
		return 0
	}
	return svgBarW / top
}

func drawRow(b *strings.Builder, r RowResult, hm Metric, scale float64, y int) {
	weight := ""
	if r.Role == Ours {
		weight = ` font-weight="bold"`
	}
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="end"%s>%s</text>`+"\n", svgLabelW-8, y+svgBarH-2, weight, esc(r.Library))
	sum := r.Summary(hm.Key)
	if !r.Valid() || sum.N == 0 || scale == 0 {
		fmt.Fprintf(b, `<text x="%d" y="%d" fill="#c92a2a">invalid: %s</text>`+"\n", svgLabelW, y+svgBarH-2, esc(truncate(invalidText(r), 70)))
		return
	}
	w := sum.Median * scale
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", svgLabelW, y, w, svgBarH, roleColor[r.Role])
	mid := float64(y) + svgBarH/2.0
	x0, x1 := float64(svgLabelW)+sum.Min*scale, float64(svgLabelW)+sum.Max*scale
	fmt.Fprintf(b, `<path d="M%.1f %.1fH%.1fM%.1f %.1fV%.1fM%.1f %.1fV%.1f" stroke="#212529" fill="none"/>`+"\n",
		x0, mid, x1, x0, mid-4, mid+4, x1, mid-4, mid+4)
	fmt.Fprintf(b, `<text x="%.1f" y="%d">%s %s</text>`+"\n", max(x1, float64(svgLabelW)+w)+6, y+svgBarH-2, formatValue(sum.Median), esc(hm.Unit))
}

// drawLegend names the colours of the roles present, top right.
func drawLegend(b *strings.Builder, s ScenarioResult) {
	x := svgWidth - 10
	for _, role := range []Role{Limit, Peer, Ours} {
		if !s.hasRole(role) {
			continue
		}
		name := map[Role]string{Ours: "hotpath", Peer: "peer", Limit: "limit"}[role]
		x -= 8 + 7*len(name) + 16
		fmt.Fprintf(b, `<rect x="%d" y="10" width="10" height="10" fill="%s"/><text x="%d" y="19">%s</text>`+"\n", x, roleColor[role], x+14, name)
	}
}

func esc(s string) string { return svgEscaper.Replace(s) }

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
