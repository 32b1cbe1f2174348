package main

import "testing"

// TestDeadlineRace: the runner forgives go.dev/issue/75804 and nothing
// else: a run whose only failure is "context deadline exceeded" with no
// failing input in sight.
func TestDeadlineRace(t *testing.T) {
	race := "fuzz: elapsed: 21s, execs: 54513 (4166/sec), new interesting: 34 (total: 207)\n" +
		"--- FAIL: FuzzQueue (21.41s)\n    context deadline exceeded\nFAIL\nexit status 1\n"
	minimizing := "fuzz: minimizing 110-byte failing input file\nfuzz: elapsed: 7s, minimizing\n" +
		"--- FAIL: FuzzServer (7.07s)\n    context deadline exceeded\nFAIL\n"
	crash := "--- FAIL: FuzzServer (7.07s)\n    --- FAIL: FuzzServer (0.01s)\n        server_test.go:442: boom\n" +
		"    Failing input written to testdata/fuzz/FuzzServer/64bf54bdd8e3cbe4\nFAIL\n"
	own := "--- FAIL: FuzzX (1.00s)\n    --- FAIL: FuzzX (0.00s)\n        x_test.go:9: context deadline exceeded\nFAIL\n"
	for _, c := range []struct {
		out  string
		want bool
	}{{race, true}, {minimizing, false}, {crash, false}, {own, false}} {
		if got := deadlineRace(c.out); got != c.want {
			t.Errorf("deadlineRace(%q) = %v, want %v", c.out, got, c.want)
		}
	}
}
