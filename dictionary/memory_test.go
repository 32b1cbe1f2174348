package dictionary

import (
	"runtime"
	"testing"
)

// TestCodecMemory measures what the README says a Deflate holds: its
// dictionary index, shared by all goroutines, and each pooled encoder and
// decoder (heap after a GC, per object, over 64 of them). The figures are
// logged for the README; the bounds only catch a table that grew by
// accident.
func TestCodecMemory(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes memory figures")
	}
	router, err := Build(testSource(), BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 64
	perObject := func(alloc func() any) float64 {
		keep := make([]any, 0, n)
		before := heapInUse()
		for range n {
			keep = append(keep, alloc())
		}
		after := heapInUse()
		runtime.KeepAlive(keep)
		return float64(after-before) / n
	}
	c := NewDeflate(router, CodecOptions{})
	index := perObject(func() any { return newDictIndex(router.data) })
	enc := perObject(func() any { return c.encoders.New() })
	dec := perObject(func() any { return c.decoders.New() })
	t.Logf("dictionary index %.1f KiB, pooled encoder %.1f KiB, pooled decoder %.1f KiB", index/1024, enc/1024, dec/1024)
	for _, m := range []struct {
		what       string
		got, limit float64
	}{{"index", index, 128 << 10}, {"encoder", enc, 256 << 10}, {"decoder", dec, 64 << 10}} {
		if m.got > m.limit {
			t.Errorf("a %s holds %.0f B, over %.0f", m.what, m.got, m.limit)
		}
	}
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
