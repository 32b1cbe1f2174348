package dictionary

import "encoding/binary"

// MaxSampleBytes bounds how much of BuildOptions.Samples Build reads: the
// samples are taken in order until the next would pass this total.
const MaxSampleBytes = 1 << 20

// Learning picks segments of the samples in the manner of zstd's COVER
// trainer (Liao, Petri, Moffat, Wirth, "Effective construction of relative
// Lempel-Ziv dictionaries", 2016): every gramLen-byte gram scores the number
// of samples it occurs in; the samples are cut into one epoch per segment
// the budget holds, and from each epoch the segLen-byte window whose
// not-yet-covered grams score most is kept, its grams then scoring zero.
// Everything is counted in maps but decided by explicit comparisons, so the
// result does not depend on map iteration order.
const (
	gramLen = 6
	segLen  = 64
	// minSegment: shorter segments are mostly one number or word that
	// happened to repeat, and cost more room than they save.
	minSegment = 10
)

type segment struct {
	text   string
	weight int
}

func limitSamples(samples [][]byte) [][]byte {
	total := 0
	for i, s := range samples {
		if total+len(s) > MaxSampleBytes {
			return samples[:i]
		}
		total += len(s)
	}
	return samples
}

func gramAt(b []byte, i int) uint64 {
	var g [8]byte
	copy(g[:], b[i:i+gramLen])
	return binary.LittleEndian.Uint64(g[:])
}

// learn returns up to budget bytes of segments common to the samples, each
// weighted by the most samples any of its grams occurs in.
func learn(samples [][]byte, budget int) []segment {
	type count struct{ samples, last int32 }
	df := make(map[uint64]*count)
	for si, s := range samples {
		for i := 0; i+gramLen <= len(s); i++ {
			g := gramAt(s, i)
			c := df[g]
			if c == nil {
				c = &count{last: -1}
				df[g] = c
			}
			if c.last != int32(si) {
				c.samples++
				c.last = int32(si)
			}
		}
	}
	// A gram in fewer than 2 samples, or fewer than 1% of them, is noise.
	minSamples := int32(max(2, len(samples)/100))
	score := make(map[uint64]int32)
	for g, c := range df {
		if c.samples >= minSamples {
			score[g] = c.samples
		}
	}
	if len(score) == 0 {
		return nil
	}

	total := 0
	for _, s := range samples {
		total += len(s)
	}
	epochs := max(1, budget/segLen)
	epochLen := max(segLen, (total+epochs-1)/epochs)

	var out []segment
	size := 0
	inWindow := make(map[uint64]int32)
	// offset is where the current sample starts in the concatenation of
	// all samples; an epoch is a range of that concatenation.
	si, offset := 0, 0
	for epochStart := 0; epochStart < total && size < budget; epochStart += epochLen {
		epochEnd := min(epochStart+epochLen, total)
		bestSample, bestOff, bestScore := -1, 0, int32(0)
		for ; si < len(samples) && offset < epochEnd; si, offset = si+1, offset+len(samples[si]) {
			s := samples[si]
			// Window starts of this sample that fall in the epoch.
			from := max(0, epochStart-offset)
			to := min(len(s)-segLen, epochEnd-offset-1)
			if len(s) < segLen {
				from, to = 0, 0
			}
			if from > to || len(s) < gramLen {
				if offset+len(s) > epochEnd {
					break
				}
				continue
			}
			clear(inWindow)
			var sc int32
			addGram := func(i int) {
				g := gramAt(s, i)
				if inWindow[g]++; inWindow[g] == 1 {
					sc += score[g]
				}
			}
			lastGram := min(from+segLen, len(s)) - gramLen
			for i := from; i <= lastGram; i++ {
				addGram(i)
			}
			for i := from; ; i++ {
				if sc > bestScore {
					bestSample, bestOff, bestScore = si, i, sc
				}
				if i == to {
					break
				}
				g := gramAt(s, i)
				if inWindow[g]--; inWindow[g] == 0 {
					sc -= score[g]
				}
				addGram(i + segLen - gramLen + 1)
			}
			if offset+len(s) > epochEnd {
				// The sample goes on into the next epoch.
				break
			}
		}
		if bestSample < 0 {
			continue
		}
		s := samples[bestSample]
		w := s[bestOff:min(bestOff+segLen, len(s))]
		// Trim the ends whose grams add nothing.
		lo, hi := 0, len(w)-gramLen
		for lo < hi && score[gramAt(w, lo)] == 0 {
			lo++
		}
		for hi > lo && score[gramAt(w, hi)] == 0 {
			hi--
		}
		var weight int32
		for i := lo; i <= hi; i++ {
			g := gramAt(w, i)
			weight = max(weight, df[g].samples)
			score[g] = 0
		}
		text := string(w[lo : hi+gramLen])
		if len(text) < minSegment {
			continue
		}
		out = append(out, segment{text: text, weight: int(weight)})
		size += len(text)
	}
	return out
}
