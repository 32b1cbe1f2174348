package emitter

import (
	"slices"
	"testing"
	"time"
)

// candidate is one loop of an interleaved benchmark: run performs n
// iterations of it.
type candidate struct {
	name string
	run  func(n int)
}

// batchSize is the number of iterations a candidate runs between clock
// reads: a few microseconds of work, long against the cost of reading the
// clock, short against a scheduler time slice.
const batchSize = 1024

// measureInterleaved runs the candidates in turn, one batch each, until each
// has run b.N iterations, and returns for each the median time of its
// batches per iteration, also reported as the metric "ns/<name>". The
// benchmark's own ns/op is the sum over the candidates.
//
// Candidates are compared this way because the machines we measure on are
// shared: alternating batches puts every candidate under the same load, and
// the median drops the batches the scheduler interrupted. Separate
// benchmarks run seconds apart, and their means include preemptions.
func measureInterleaved(b *testing.B, candidates []candidate) []float64 {
	b.Helper()
	times := make([][]time.Duration, len(candidates))
	for done := 0; done < b.N; done += batchSize {
		for i, c := range candidates {
			start := time.Now()
			c.run(batchSize)
			times[i] = append(times[i], time.Since(start))
		}
	}
	perOp := make([]float64, len(candidates))
	for i, c := range candidates {
		slices.Sort(times[i])
		perOp[i] = float64(times[i][len(times[i])/2].Nanoseconds()) / batchSize
		b.ReportMetric(perOp[i], "ns/"+c.name)
	}
	return perOp
}
