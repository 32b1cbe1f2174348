package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
)

// A Run is what -save writes as JSON and -baseline and -render read back:
// every trial of every row, so any table, chart or comparison can be
// rebuilt from it without running anything.
type Run struct {
	Scenarios []ScenarioResult `json:"scenarios"`
}

// ScenarioResult is one scenario of a run. It carries its own Env because
// a saved file may merge scenarios run at different times (-only).
type ScenarioResult struct {
	Number   int          `json:"number"`
	Name     string       `json:"name"`
	Title    string       `json:"title"`
	About    string       `json:"about"`
	Loopback bool         `json:"loopback"`
	Metrics  []Metric     `json:"metrics"`
	Env      Env          `json:"env"`
	Cases    []CaseResult `json:"cases"`
	Targets  []Target     `json:"targets,omitempty"`
}

// CaseResult is one case of a scenario: rows in table order.
type CaseResult struct {
	Label string      `json:"label"`
	Rows  []RowResult `json:"rows"`
}

// RowResult holds the trials of one row, per metric key, in the order they
// ran (the warm-up excluded).
type RowResult struct {
	Library string               `json:"library"`
	Role    Role                 `json:"role"`
	Invalid string               `json:"invalid,omitempty"`
	Samples map[string][]float64 `json:"samples"`
}

// Headline is the metric ratios, verdicts and charts use.
func (s ScenarioResult) Headline() Metric {
	if len(s.Metrics) == 0 {
		return Metric{}
	}
	return s.Metrics[0]
}

// Summary summarizes the trials of one metric.
func (r RowResult) Summary(key string) Summary { return summarize(r.Samples[key]) }

// Valid reports whether the row's numbers may be compared: it ran, and no
// trial reported itself invalid.
func (r RowResult) Valid() bool { return r.Invalid == "" && len(r.Samples) > 0 }

// reference returns the first valid row with the given role: the row the
// others are compared with.
func (c CaseResult) reference(role Role) (RowResult, bool) {
	for _, r := range c.Rows {
		if r.Role == role && r.Valid() {
			return r, true
		}
	}
	return RowResult{}, false
}

// hasRole reports whether any row of any case has the role, valid or not:
// it decides whether a table gets the column.
func (s ScenarioResult) hasRole(role Role) bool {
	for _, c := range s.Cases {
		for _, r := range c.Rows {
			if r.Role == role {
				return true
			}
		}
	}
	return false
}

// loadRun reads a run saved by saveRun.
func loadRun(path string) (Run, error) {
	var run Run
	b, err := os.ReadFile(path)
	if err != nil {
		return run, err
	}
	if err := json.Unmarshal(b, &run); err != nil {
		return run, fmt.Errorf("%s: %w", path, err)
	}
	return run, nil
}

// saveRun writes run as indented JSON.
func saveRun(path string, run Run) error {
	b, err := json.MarshalIndent(run, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// mergeInto adds the scenarios of next to the run saved at path (if any),
// replacing scenarios of the same name, so "-only echo -save" updates one
// table of today's file instead of dropping the others.
func mergeInto(path string, next Run) (Run, error) {
	prev, err := loadRun(path)
	if errors.Is(err, fs.ErrNotExist) {
		return next, nil
	}
	if err != nil {
		return Run{}, err
	}
	byName := map[string]ScenarioResult{}
	for _, s := range prev.Scenarios {
		byName[s.Name] = s
	}
	for _, s := range next.Scenarios {
		byName[s.Name] = s
	}
	var out Run
	for _, s := range byName {
		out.Scenarios = append(out.Scenarios, s)
	}
	sort.Slice(out.Scenarios, func(i, j int) bool { return out.Scenarios[i].Number < out.Scenarios[j].Number })
	return out, nil
}
