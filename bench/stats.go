package main

import (
	"math"
	"sort"
	"strconv"
	"strings"
)

// A Summary is what a table shows for one metric of one row: the median
// of the trials, with the smallest and largest so the spread is visible.
// The median, not the mean, because on a shared machine one trial that
// lost its core to another process should not move the figure.
type Summary struct {
	Median, Min, Max float64
	N                int
}

// summarize returns the median, minimum and maximum of xs. An even count
// takes the mean of the two middle values.
func summarize(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{}
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return Summary{Median: med, Min: s[0], Max: s[n-1], N: n}
}

// advantage says how many times a is better than b for a metric going in
// direction dir: 2 means a does twice the work per second, or costs half
// the time. It reports false when the ratio means nothing (a zero, a
// negative, NaN).
func advantage(a, b float64, dir Better) (float64, bool) {
	if !(a > 0 && b > 0) || math.IsInf(a, 0) || math.IsInf(b, 0) {
		return 0, false
	}
	if dir == LowerIsBetter {
		return b / a, true
	}
	return a / b, true
}

// pairedAdvantage compares two rows of one case on one metric. Rows of a
// case run their trials back to back, round by round, so trial i of a and
// trial i of b saw the same machine: the median of the per-round ratios
// cancels most of what a busy machine does to both, where the ratio of
// the two medians would not. Rows with unequal trial counts (one stopped
// early) fall back to the ratio of their medians.
func pairedAdvantage(a, b []float64, dir Better) (float64, bool) {
	if len(a) == 0 || len(b) == 0 {
		return 0, false
	}
	if len(a) != len(b) {
		return advantage(summarize(a).Median, summarize(b).Median, dir)
	}
	ratios := make([]float64, 0, len(a))
	for i := range a {
		x, ok := advantage(a[i], b[i], dir)
		if !ok {
			return advantage(summarize(a).Median, summarize(b).Median, dir)
		}
		ratios = append(ratios, x)
	}
	return summarize(ratios).Median, true
}

// formatValue prints a measurement with three significant digits, which is
// more than a shared machine can resolve: 0.0123, 4.56, 789, 12,300, 4.56M.
func formatValue(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return "—"
	case v == 0:
		return "0"
	case v < 0:
		return "-" + formatValue(-v)
	case v >= 1e9:
		return strconv.FormatFloat(round3(v/1e9), 'f', -1, 64) + "G"
	case v >= 1e6:
		return strconv.FormatFloat(round3(v/1e6), 'f', -1, 64) + "M"
	case v >= 1000:
		return groupThousands(int64(round3(v)))
	}
	return strconv.FormatFloat(round3(v), 'f', -1, 64)
}

// round3 rounds v to three significant digits.
func round3(v float64) float64 {
	if v == 0 {
		return 0
	}
	exp := math.Floor(math.Log10(math.Abs(v)))
	scale := math.Pow(10, 2-exp)
	return math.Round(v*scale) / scale
}

func groupThousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// formatSummary prints "median [min, max]", or just the median when every
// trial gave the same number.
func formatSummary(s Summary) string {
	if s.N == 0 {
		return "—"
	}
	med := formatValue(s.Median)
	lo, hi := formatValue(s.Min), formatValue(s.Max)
	if lo == med && hi == med {
		return med
	}
	return med + " [" + lo + ", " + hi + "]"
}

// formatRatio prints an advantage as "1.42×".
func formatRatio(r float64) string {
	switch {
	case r >= 100:
		return strconv.FormatFloat(math.Round(r), 'f', 0, 64) + "×"
	case r >= 10:
		return strconv.FormatFloat(r, 'f', 1, 64) + "×"
	}
	return strconv.FormatFloat(r, 'f', 2, 64) + "×"
}
