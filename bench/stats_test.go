package main

import (
	"math"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	tests := []struct {
		in   []float64
		want Summary
	}{
		{nil, Summary{}},
		{[]float64{7}, Summary{Median: 7, Min: 7, Max: 7, N: 1}},
		{[]float64{5, 1, 3}, Summary{Median: 3, Min: 1, Max: 5, N: 3}},
		{[]float64{4, 1, 3, 2}, Summary{Median: 2.5, Min: 1, Max: 4, N: 4}},
		// One trial that lost its core does not move the median.
		{[]float64{100, 101, 99, 100, 900}, Summary{Median: 100, Min: 99, Max: 900, N: 5}},
	}
	for _, tt := range tests {
		if got := summarize(tt.in); got != tt.want {
			t.Errorf("summarize(%v) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
	in := []float64{3, 1, 2}
	summarize(in)
	if in[0] != 3 || in[1] != 1 {
		t.Errorf("summarize reordered its input: %v", in)
	}
}

func TestAdvantage(t *testing.T) {
	tests := []struct {
		a, b   float64
		dir    Better
		want   float64
		wantOK bool
	}{
		{200, 100, HigherIsBetter, 2, true}, // twice the msgs/s
		{50, 100, LowerIsBetter, 2, true},   // half the ns/op
		{100, 50, LowerIsBetter, 0.5, true}, // twice the ns/op
		{0, 100, HigherIsBetter, 0, false},  // no ratio with a zero
		{100, 0, LowerIsBetter, 0, false},   // 0 allocs: no ratio
		{-1, 100, HigherIsBetter, 0, false}, // a negative delta
		{math.NaN(), 1, HigherIsBetter, 0, false},
		{math.Inf(1), 1, HigherIsBetter, 0, false},
	}
	for _, tt := range tests {
		got, ok := advantage(tt.a, tt.b, tt.dir)
		if ok != tt.wantOK || (ok && math.Abs(got-tt.want) > 1e-12) {
			t.Errorf("advantage(%v, %v, %v) = %v, %v; want %v, %v", tt.a, tt.b, tt.dir, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestFormatValue(t *testing.T) {
	tests := map[float64]string{
		0:         "0",
		0.012345:  "0.0123",
		1:         "1",
		4.5678:    "4.57",
		99.96:     "100",
		789.4:     "789",
		1234:      "1,230",
		12345:     "12,300",
		999_999:   "1,000,000",
		1_234_567: "1.23M",
		2.5e9:     "2.5G",
		-42.42:    "-42.4",
	}
	for in, want := range tests {
		if got := formatValue(in); got != want {
			t.Errorf("formatValue(%v) = %q, want %q", in, got, want)
		}
	}
	if got := formatValue(math.NaN()); got != "—" {
		t.Errorf("formatValue(NaN) = %q", got)
	}
}

func TestFormatSummaryAndRatio(t *testing.T) {
	if got := formatSummary(Summary{Median: 2, Min: 1, Max: 3, N: 3}); got != "2 [1, 3]" {
		t.Errorf("formatSummary = %q", got)
	}
	if got := formatSummary(Summary{Median: 5, Min: 5, Max: 5, N: 5}); got != "5" {
		t.Errorf("formatSummary of equal trials = %q, want the median alone", got)
	}
	if got := formatSummary(Summary{}); got != "—" {
		t.Errorf("formatSummary of nothing = %q", got)
	}
	for in, want := range map[float64]string{1.4242: "1.42×", 0.25: "0.25×", 12.34: "12.3×", 123.4: "123×"} {
		if got := formatRatio(in); got != want {
			t.Errorf("formatRatio(%v) = %q, want %q", in, got, want)
		}
	}
}

func TestLatencyHistQuantiles(t *testing.T) {
	var h latencyHist
	if h.quantile(0.5) != 0 {
		t.Fatal("empty histogram has a quantile")
	}
	// 1..1000 µs, uniformly: p50 ≈ 500 µs, p99 ≈ 990 µs.
	for i := 1; i <= 1000; i++ {
		h.add(time.Duration(i) * time.Microsecond)
	}
	for q, want := range map[float64]time.Duration{0.5: 500 * time.Microsecond, 0.99: 990 * time.Microsecond} {
		got := h.quantile(q)
		if err := math.Abs(float64(got-want)) / float64(want); err > 0.035 {
			t.Errorf("quantile(%v) = %v, want %v within 3.5%% (half a bucket)", q, got, want)
		}
	}
	h.reset()
	h.add(3)
	if got := h.quantile(0.5); got != 3 {
		t.Errorf("a small value is exact: got %v, want 3ns", got)
	}
}

func TestHistBucketsCoverEveryValue(t *testing.T) {
	for _, v := range []uint64{0, 1, 15, 16, 17, 31, 32, 1000, 1 << 40, math.MaxInt64, math.MaxUint64} {
		i := histIndex(v)
		if i < 0 || i >= histBuckets {
			t.Fatalf("histIndex(%d) = %d, outside [0, %d)", v, i, histBuckets)
		}
		lo, hi := histBounds(i)
		if v < lo || (hi > lo && v >= hi) {
			t.Errorf("value %d in bucket %d = [%d, %d)", v, i, lo, hi)
		}
	}
}

func TestNextN(t *testing.T) {
	// A fast op grows at most 100× per step and never beyond maxN.
	if got := nextN(1, time.Nanosecond, time.Second, 1e9); got != 100 {
		t.Errorf("nextN from 1 fast op = %d, want 100", got)
	}
	if got := nextN(1000, time.Millisecond, 10*time.Millisecond, 5000); got != 5000 {
		t.Errorf("nextN capped = %d, want 5000", got)
	}
	// A slow op still grows at least 2×.
	if got := nextN(10, 9*time.Millisecond, 10*time.Millisecond, 1e9); got != 20 {
		t.Errorf("nextN near target = %d, want 20", got)
	}
}

func TestMeasureLoopCountsAllocations(t *testing.T) {
	var sink []byte
	r, err := measureLoop(time.Millisecond, 1000, func(n int) error {
		for range n {
			sink = make([]byte, 64)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = sink
	if r.N < 1 || r.N > 1000 {
		t.Errorf("N = %d, want within [1, 1000]", r.N)
	}
	if r.AllocsPerOp < 0.9 || r.AllocsPerOp > 1.5 {
		t.Errorf("AllocsPerOp = %v for one make per op", r.AllocsPerOp)
	}
	if r.BytesPerOp < 64 {
		t.Errorf("BytesPerOp = %v, want at least 64", r.BytesPerOp)
	}
}

func TestPairedAdvantage(t *testing.T) {
	// Round 2 ran on a busy machine: both rows slowed down by 3×. Paired,
	// the ratio stays 2; the ratio of medians would say 1.5.
	ours := []float64{200, 70, 210}
	peer := []float64{100, 35, 140}
	got, ok := pairedAdvantage(ours, peer, HigherIsBetter)
	if !ok || got != 2 {
		t.Errorf("pairedAdvantage = %v, %v; want 2 (median of 2, 2, 1.5)", got, ok)
	}
	// Unequal counts: the ratio of the medians.
	got, ok = pairedAdvantage([]float64{10, 20, 30}, []float64{10}, HigherIsBetter)
	if !ok || got != 2 {
		t.Errorf("unequal counts: %v, %v; want 2", got, ok)
	}
	if _, ok := pairedAdvantage(nil, peer, HigherIsBetter); ok {
		t.Error("no trials, yet a ratio")
	}
	got, ok = pairedAdvantage([]float64{50, 60}, []float64{100, 120}, LowerIsBetter)
	if !ok || got != 2 {
		t.Errorf("lower is better: %v, %v; want 2", got, ok)
	}
}
