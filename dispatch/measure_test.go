package dispatch

import (
	"slices"
	"testing"
	"time"
)

// shape is one candidate of a shape benchmark: run performs iterations
// [from, from+n) of its loop.
type shape struct {
	name string
	run  func(from, n int) error
}

// batchSize is the number of iterations a shape runs between clock reads:
// a few microseconds of work, long against the cost of reading the clock,
// short against a scheduler time slice.
const batchSize = 1024

// measureShapes runs the shapes in turn, one batch each, until each has run
// b.N iterations, and reports for each shape the median time of its batches
// per iteration, as the metric "ns/<shape>". The benchmark's own ns/op is
// the sum over the shapes.
//
// Shapes are compared this way because the machines we measure on are
// shared: alternating batches puts every shape under the same load, and
// the median drops the batches the scheduler interrupted. Separate
// benchmarks run seconds apart, and their means include preemptions.
func measureShapes(b *testing.B, shapes []shape) {
	b.Helper()
	times := make([][]time.Duration, len(shapes))
	for from := 0; from < b.N; from += batchSize {
		for i, sh := range shapes {
			start := time.Now()
			if err := sh.run(from, batchSize); err != nil {
				b.Fatalf("%s: %v", sh.name, err)
			}
			times[i] = append(times[i], time.Since(start))
		}
	}
	for i, sh := range shapes {
		slices.Sort(times[i])
		median := times[i][len(times[i])/2]
		b.ReportMetric(float64(median.Nanoseconds())/batchSize, "ns/"+sh.name)
	}
}
