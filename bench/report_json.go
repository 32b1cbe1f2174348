package main

import (
	"encoding/json"
	"io"
)

// jsonLine is one object of the -json stream: one metric of one row, so a
// tool can read a run line by line without knowing the scenarios. Row is
// the case within the scenario ("4 KiB", "32 B, 64 in flight"); library
// and row together name a table row.
type jsonLine struct {
	Scenario string  `json:"scenario"`
	Row      string  `json:"row"`
	Library  string  `json:"library"`
	Metric   string  `json:"metric"`
	Unit     string  `json:"unit"`
	Median   float64 `json:"median"`
	Min      float64 `json:"min"`
	Max      float64 `json:"max"`
	N        int     `json:"n"`
	Role     string  `json:"role"`
	Invalid  string  `json:"invalid,omitempty"`
}

// writeJSONLines writes one line per row and metric of s.
func writeJSONLines(w io.Writer, s ScenarioResult) error {
	enc := json.NewEncoder(w)
	for _, c := range s.Cases {
		for _, r := range c.Rows {
			for _, m := range s.Metrics {
				sum := r.Summary(m.Key)
				line := jsonLine{
					Scenario: s.Name,
					Row:      c.Label,
					Library:  r.Library,
					Metric:   m.Key,
					Unit:     m.Unit,
					Median:   sum.Median,
					Min:      sum.Min,
					Max:      sum.Max,
					N:        sum.N,
					Role:     r.Role.String(),
					Invalid:  r.Invalid,
				}
				if err := enc.Encode(line); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
