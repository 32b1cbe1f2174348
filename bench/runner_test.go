package main

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// fakeRow returns a row whose trials append its name to log and report
// the values next() gives.
func fakeRow(lib string, role Role, log *[]string, next func(trial int) Outcome) Row {
	return Row{Library: lib, Role: role, Open: func(context.Context) (Instance, error) {
		trial := 0
		return TrialFunc(func(context.Context) (Outcome, error) {
			*log = append(*log, lib)
			trial++
			return next(trial), nil
		}), nil
	}}
}

func rate(v float64) Outcome { return Outcome{Values: map[string]float64{"rate": v}} }

var rateScenario = &Scenario{Name: "test", Metrics: []Metric{{Key: "rate", Unit: "msgs/s"}}}

func TestRunCaseInterleavesAfterWarmup(t *testing.T) {
	var log []string
	c := Case{Label: "case", Rows: []Row{
		fakeRow("limit", Limit, &log, func(int) Outcome { return rate(1) }),
		fakeRow("peer", Peer, &log, func(int) Outcome { return rate(2) }),
		fakeRow("ours", Ours, &log, func(n int) Outcome { return rate(float64(n)) }),
	}}
	res, err := runCase(context.Background(), rateScenario, c, runOptions{Count: 3})
	if err != nil {
		t.Fatal(err)
	}
	// Warm-up, then three rounds, each starting one row later.
	want := []string{
		"ours", "peer", "limit",
		"ours", "peer", "limit",
		"peer", "limit", "ours",
		"limit", "ours", "peer",
	}
	if !reflect.DeepEqual(log, want) {
		t.Errorf("trial order = %v, want %v", log, want)
	}
	var libs []string
	for _, r := range res.Rows {
		libs = append(libs, r.Library)
	}
	if !reflect.DeepEqual(libs, []string{"ours", "peer", "limit"}) {
		t.Errorf("row order = %v, want ours, peers, limits", libs)
	}
	// The warm-up (trial 1) is not recorded.
	if got := res.Rows[0].Samples["rate"]; !reflect.DeepEqual(got, []float64{2, 3, 4}) {
		t.Errorf("ours samples = %v, want [2 3 4]", got)
	}
}

func TestRunCaseInvalidAndFailedRows(t *testing.T) {
	var log []string
	c := Case{Label: "case", Rows: []Row{
		fakeRow("lossy", Peer, &log, func(n int) Outcome {
			o := rate(5)
			if n == 3 {
				o.Invalid = "member 7 missed 2 messages"
			}
			return o
		}),
		fakeRow("forgetful", Peer, &log, func(int) Outcome { return Outcome{Values: map[string]float64{}} }),
		{Library: "broken", Role: Peer, Open: func(context.Context) (Instance, error) { return nil, errors.New("no port") }},
		{Library: "crashy", Role: Peer, Open: func(context.Context) (Instance, error) {
			return TrialFunc(func(context.Context) (Outcome, error) { return Outcome{}, errors.New("reset by peer") }), nil
		}},
	}}
	res, err := runCase(context.Background(), rateScenario, c, runOptions{Count: 3})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"lossy":     "member 7 missed 2 messages (1 of 3 trials)",
		"forgetful": "failed: trial reported no value for rate",
		"broken":    "did not start: no port",
		"crashy":    "failed: reset by peer",
	}
	for _, r := range res.Rows {
		if r.Invalid != want[r.Library] {
			t.Errorf("%s: invalid = %q, want %q", r.Library, r.Invalid, want[r.Library])
		}
		if r.Valid() {
			t.Errorf("%s is valid", r.Library)
		}
	}
	if n := strings.Count(strings.Join(log, " "), "forgetful"); n != 1 {
		t.Errorf("a failed row ran %d trials, want 1 (it stops at the first failure)", n)
	}
}

func TestRunCaseStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var log []string
	c := Case{Label: "case", Rows: []Row{fakeRow("a", Peer, &log, func(int) Outcome { cancel(); return rate(1) })}}
	if _, err := runCase(ctx, rateScenario, c, runOptions{Count: 5}); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
	if len(log) != 1 {
		t.Errorf("%d trials ran after cancel, want 1", len(log))
	}
}

func TestSelectScenarios(t *testing.T) {
	all, err := selectScenarios("")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for i, s := range all {
		names = append(names, s.Name)
		if i > 0 && all[i-1].Number >= s.Number {
			t.Errorf("scenarios out of order: %v", names)
		}
		if len(s.Metrics) == 0 || s.Cases == nil || s.Title == "" || s.About == "" {
			t.Errorf("scenario %s is incomplete", s.Name)
		}
	}
	for _, want := range []string{"framewrite", "echo", "idle"} {
		if !strings.Contains(" "+strings.Join(names, " ")+" ", " "+want+" ") {
			t.Errorf("scenario %s not registered: %v", want, names)
		}
	}
	one, _ := selectScenarios("^echo$")
	if len(one) != 1 || one[0].Name != "echo" {
		t.Errorf("-only ^echo$ selected %v", one)
	}
	if _, err := selectScenarios("("); err == nil {
		t.Error("a bad pattern was accepted")
	}
}

func TestRoleAndBetterText(t *testing.T) {
	for _, r := range []Role{Peer, Ours, Limit} {
		b, _ := r.MarshalText()
		var back Role
		if err := back.UnmarshalText(b); err != nil || back != r {
			t.Errorf("role %v round-trips to %v, %v", r, back, err)
		}
	}
	var r Role
	if r.UnmarshalText([]byte("boss")) == nil {
		t.Error("unknown role accepted")
	}
	for _, d := range []Better{HigherIsBetter, LowerIsBetter} {
		b, _ := d.MarshalText()
		var back Better
		if err := back.UnmarshalText(b); err != nil || back != d {
			t.Errorf("direction %v round-trips to %v, %v", d, back, err)
		}
	}
}
