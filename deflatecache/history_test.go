package deflatecache

import (
	"bytes"
	"testing"
)

func TestHistoryKeepsTheTail(t *testing.T) {
	h := newHistory(1000)
	var all []byte
	for i, n := range []int{10, 300, 700, 1, 999, 1000, 2500, 3, 0, 640} {
		p := noise(uint64(i), n)
		h.add(p)
		all = append(all, p...)
		want := all[max(0, len(all)-1000):]
		if !bytes.Equal(h.bytes(), want) {
			t.Fatalf("after %d adds: history of %d bytes, want the last %d", i+1, len(h.bytes()), len(want))
		}
		if cap(h.bytes()) > 1000 {
			t.Fatalf("capacity %d beyond the window", cap(h.bytes()))
		}
	}
}

func TestHistoryGrowsWithTraffic(t *testing.T) {
	h := newHistory(1 << 15)
	h.add(make([]byte, 100))
	if c := cap(h.bytes()); c != minHistoryAlloc {
		t.Fatalf("one short message made a %d-byte history", c)
	}
}
