package compat

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"testing"
	"time"
)

var ratioSlice = flag.Duration("ratio.slice", 50*time.Millisecond,
	"BenchmarkCarrierRatio: how long one way (raw, or compat) runs in one slice; a round is two slices of each way")

// BenchmarkCarrierRatio measures issue 14's ratio itself: compat's call
// path against the raw echo over the same carrier (BenchmarkCarrierEcho's
// two sides), as raw time per round trip ÷ compat's, so that above 1
// compat is faster. BenchmarkCarrierEcho runs raw and compat seconds
// apart, and the machine's speed drifts between them by more than the
// goal's margin; here both run on connections dialled and warmed once,
// in short slices (-ratio.slice, about 50 ms) that alternate in ABBA
// order: raw, compat, compat, raw, which cancels a drift that is steady
// over a round.
//
// One op is one round, so -test.benchtime 10x runs ten rounds and ns/op
// is a round's length; -test.benchtime 1x (CI) runs one. The metrics are
// the median of the rounds' ratios (raw/rpc) and their least and
// greatest (raw/rpc-min, raw/rpc-max). With 64 in flight compat's side is
// GoAll, as issue 14's reading of the goal; 64 goroutines blocked in Call
// run as a third way in the same rounds (raw, GoAll, Call, Call, GoAll,
// raw), reported as raw/rpc-call.
func BenchmarkCarrierRatio(b *testing.B) {
	for _, carrier := range benchCarriers {
		for _, sc := range carrierEchoCases {
			b.Run(fmt.Sprintf("%s/%s", carrier, sc.name), func(b *testing.B) {
				msg := make([]byte, sc.size)
				c := dialBench(b, carrier)
				e := dialRawEcho(b, carrier)
				// ways[0] is raw; every other way's ratio is against it.
				ways := []echoRun{rawRun(e, msg, sc.inFlight)}
				units := []string{"raw/rpc"}
				if sc.inFlight == 1 {
					ways = append(ways, callsRun(c, msg, 1))
				} else {
					ways = append(ways, goAllRun(c, msg, sc.inFlight), callsRun(c, msg, sc.inFlight))
					units = append(units, "raw/rpc-call")
				}
				counts := make([]int, len(ways))
				for i, run := range ways {
					n, err := sliceCount(run, sc.inFlight, *ratioSlice)
					if err != nil {
						b.Fatal(err)
					}
					counts[i] = n
				}
				ratios := make([][]float64, len(units))
				for b.Loop() {
					t, err := abbaRound(len(ways), func(i int) (time.Duration, error) {
						start := time.Now()
						err := ways[i](counts[i])
						return time.Since(start), err
					})
					if err != nil {
						b.Fatal(err)
					}
					for i := range ratios {
						ratios[i] = append(ratios[i], perOpRatio(t[0], counts[0], t[i+1], counts[i+1]))
					}
				}
				for i, unit := range units {
					med, lo, hi := spread(ratios[i])
					b.ReportMetric(med, unit)
					b.ReportMetric(lo, unit+"-min")
					b.ReportMetric(hi, unit+"-max")
				}
			})
		}
	}
}

// sliceCount returns how many round trips of run last about d (at least
// least), from runs doubled until one lasts a quarter of d. Those runs,
// about half of d in all, are the way's warm-up too.
func sliceCount(run echoRun, least int, d time.Duration) (int, error) {
	for n := least; ; n *= 2 {
		start := time.Now()
		if err := run(n); err != nil {
			return 0, err
		}
		took := max(time.Since(start), 1)
		if took >= d/4 || n >= 1<<30 {
			return max(least, int(float64(n)*float64(d)/float64(took))), nil
		}
	}
}

// abbaRound runs one slice of each way in order, then one of each in the
// reverse order, and returns each way's time over its two slices. Every
// way's two slices sit around the round's middle, so a speed that drifts
// steadily over the round adds as much to each way's time per slice; run
// in the same order twice, the ways run first would gain on the others.
func abbaRound(ways int, slice func(way int) (time.Duration, error)) ([]time.Duration, error) {
	t := make([]time.Duration, ways)
	for i := range 2 * ways {
		w := i
		if i >= ways {
			w = 2*ways - 1 - i
		}
		d, err := slice(w)
		if err != nil {
			return nil, err
		}
		t[w] += d
	}
	return t, nil
}

// perOpRatio is raw's time per round trip ÷ rpc's: rpc's throughput as a
// fraction of raw's.
func perOpRatio(raw time.Duration, rawN int, rpc time.Duration, rpcN int) float64 {
	return (float64(raw) / float64(rawN)) / (float64(rpc) / float64(rpcN))
}

// spread returns the median of xs (of an even count, the mean of the two
// middle ones), its least and its greatest. It sorts xs, which is not
// empty.
func spread(xs []float64) (med, lo, hi float64) {
	slices.Sort(xs)
	m := len(xs) / 2
	med = xs[m]
	if len(xs)%2 == 0 {
		med = (xs[m-1] + xs[m]) / 2
	}
	return med, xs[0], xs[len(xs)-1]
}

// TestABBARoundCancelsDrift runs rounds on a clock that slows by 3.7 % at
// every slice: each way's time per op, and so the ratio, comes out as if
// the clock held still.
func TestABBARoundCancelsDrift(t *testing.T) {
	for _, work := range [][]time.Duration{{1e6, 2e6}, {1e6, 3e6, 5e6}} {
		var order []int
		k := time.Duration(0)
		slice := func(w int) (time.Duration, error) {
			order = append(order, w)
			d := work[w] * (1000 + 37*k) / 1000
			k++
			return d, nil
		}
		for round := range 3 {
			order = order[:0]
			got, err := abbaRound(len(work), slice)
			if err != nil {
				t.Fatal(err)
			}
			want := []int{0, 1, 1, 0}
			if len(work) == 3 {
				want = []int{0, 1, 2, 2, 1, 0}
			}
			if !slices.Equal(order, want) {
				t.Fatalf("round %d ran %v, want %v", round, order, want)
			}
			for w := 1; w < len(work); w++ {
				// Equal per-op counts: the time ratio is the work ratio.
				if got[0]*work[w] != got[w]*work[0] {
					t.Errorf("round %d, %d ways: way %d took %v against raw's %v, want the ratio %v/%v",
						round, len(work), w, got[w], got[0], work[w], work[0])
				}
			}
		}
	}
}

func TestABBARoundStopsAtError(t *testing.T) {
	boom := errors.New("boom")
	var ran []int
	_, err := abbaRound(2, func(w int) (time.Duration, error) {
		ran = append(ran, w)
		if w == 1 {
			return 0, boom
		}
		return 1, nil
	})
	if !errors.Is(err, boom) || !slices.Equal(ran, []int{0, 1}) {
		t.Fatalf("got %v after slices %v, want boom after [0 1]", err, ran)
	}
}

func TestPerOpRatio(t *testing.T) {
	// raw: 2 µs per op; rpc: 4 µs per op.
	if got := perOpRatio(2*time.Millisecond, 1000, time.Millisecond, 250); got != 0.5 {
		t.Errorf("got %v, want 0.5", got)
	}
	// rpc faster than raw reads above 1.
	if got := perOpRatio(3*time.Second, 1000, time.Second, 1000); got != 3 {
		t.Errorf("got %v, want 3", got)
	}
}

func TestSpread(t *testing.T) {
	for _, tc := range []struct {
		xs          []float64
		med, lo, hi float64
	}{
		{[]float64{0.9}, 0.9, 0.9, 0.9},
		{[]float64{1.1, 0.8, 0.95}, 0.95, 0.8, 1.1},
		{[]float64{0.75, 0.5, 1.25, 1}, 0.875, 0.5, 1.25},
		{[]float64{3, 1, 2, 5, 4, 1}, 2.5, 1, 5},
	} {
		med, lo, hi := spread(slices.Clone(tc.xs))
		if med != tc.med || lo != tc.lo || hi != tc.hi {
			t.Errorf("spread(%v) = %v, %v, %v; want %v, %v, %v", tc.xs, med, lo, hi, tc.med, tc.lo, tc.hi)
		}
	}
}
