package main

import (
	"strings"
	"testing"
)

func TestTargets(t *testing.T) {
	s := sampleScenario() // ns/op: lower is better
	s.Targets = []Target{
		// hotpath 45 vs gorilla 90 per round: 2× at the median.
		{Goal: "twice gorilla", Case: "200 B", Row: "hotpath", Against: "gorilla/websocket", Min: 2},
		{Goal: "three times gorilla", Case: "200 B", Row: "hotpath", Against: "gorilla/websocket", Min: 3},
		// Across cases: medians 4,500 against 45.
		{Goal: "64 KiB within 200× of 200 B", Case: "64 KiB", Row: "hotpath", AgainstCase: "200 B", Against: "hotpath", Min: 0.005},
		{Goal: "at most 50 ns", Case: "200 B", Row: "hotpath", Bound: 50},
		{Goal: "at most 40 ns", Case: "200 B", Row: "hotpath", Bound: 40},
		{Goal: "against an invalid row", Case: "200 B", Row: "hotpath", Against: "lxzan/gws", Min: 1},
	}
	got := checkTargets(s)
	want := []struct {
		ok, met bool
		value   float64
	}{{true, true, 2}, {true, false, 2}, {true, true, 0.01}, {true, true, 45}, {true, false, 45}, {false, false, 0}}
	for i, w := range want {
		if got[i].OK != w.ok || got[i].Met != w.met || (w.ok && got[i].Value != w.value) {
			t.Errorf("%s: got ok=%v met=%v value=%v, want %+v", got[i].Goal, got[i].OK, got[i].Met, got[i].Value, w)
		}
	}
	md := renderScenarioMarkdown(s, 2, "")
	for _, line := range []string{
		"- twice gorilla — hotpath is 2.00× gorilla/websocket (ns/op): **met**",
		"- three times gorilla — hotpath is 2.00× gorilla/websocket (ns/op): **not met**",
		"- 64 KiB within 200× of 200 B — hotpath is 0.01× hotpath (200 B) (ns/op): **met**",
		"- at most 40 ns — hotpath: 45 ns/op: **not met**",
		"- against an invalid row — lxzan/gws is invalid: **not measured**",
	} {
		if !strings.Contains(md, line) {
			t.Errorf("markdown lacks %q:\n%s", line, md)
		}
	}
}
