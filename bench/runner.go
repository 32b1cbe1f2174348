package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// Role says what a row stands for in a comparison.
type Role int

const (
	// Peer is a library people would otherwise pick. Peers are the
	// yardstick: their drift between two runs tells machine noise from a
	// real change.
	Peer Role = iota
	// Ours is the hotpath row every other row of its case is compared with.
	Ours
	// Limit is a physical limit no library can beat (a copy of the payload,
	// a raw TCP echo); it shows how much headroom is left.
	Limit
)

var roleNames = [...]string{Peer: "peer", Ours: "ours", Limit: "limit"}

func (r Role) String() string {
	if r < 0 || int(r) >= len(roleNames) {
		return fmt.Sprintf("Role(%d)", int(r))
	}
	return roleNames[r]
}

// MarshalText writes the role by name so saved runs stay readable.
func (r Role) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText reads a role written by MarshalText.
func (r *Role) UnmarshalText(b []byte) error {
	for i, name := range roleNames {
		if string(b) == name {
			*r = Role(i)
			return nil
		}
	}
	return fmt.Errorf("unknown role %q", b)
}

// Better says which direction of a metric is an improvement; ratios are
// always oriented so that a value above 1 means "better".
type Better int

const (
	HigherIsBetter Better = iota // rates: msgs/s, MB/s
	LowerIsBetter                // costs: ns/op, allocs/op, B/conn
)

// MarshalText writes the direction as "higher" or "lower".
func (b Better) MarshalText() ([]byte, error) {
	if b == LowerIsBetter {
		return []byte("lower"), nil
	}
	return []byte("higher"), nil
}

// UnmarshalText reads a direction written by MarshalText.
func (b *Better) UnmarshalText(t []byte) error {
	switch string(t) {
	case "higher":
		*b = HigherIsBetter
	case "lower":
		*b = LowerIsBetter
	default:
		return fmt.Errorf("unknown direction %q", t)
	}
	return nil
}

// A Metric is one number a scenario reports for every row. The first metric
// of a scenario is its headline: ratios, baseline verdicts and the chart use
// it.
type Metric struct {
	Key    string `json:"key"`    // stable name in saved runs, e.g. "rate"
	Unit   string `json:"unit"`   // what a reader sees, e.g. "msgs/s"
	Better Better `json:"better"` // which direction is an improvement
}

// An Outcome is what one trial of one row measured.
type Outcome struct {
	// Values holds one number per metric key of the scenario.
	Values map[string]float64
	// Invalid, when set, says why this trial's numbers must not be compared
	// (for example: a fan-out member missed a message). The row is shown
	// with the reason and gets no ratio.
	Invalid string
}

// An Instance is a row made ready to run trials: a server started, a
// connection dialed, a writer bound to its conn. The runner opens every
// row of a case before the first trial, so trials interleave without paying
// for setup, and closes them after the last.
type Instance interface {
	Trial(ctx context.Context) (Outcome, error)
	Close() error
}

// TrialFunc adapts a trial that holds nothing between runs to an Instance.
type TrialFunc func(ctx context.Context) (Outcome, error)

// Trial runs f.
func (f TrialFunc) Trial(ctx context.Context) (Outcome, error) { return f(ctx) }

// Close does nothing: a TrialFunc holds nothing.
func (TrialFunc) Close() error { return nil }

// A Row is one library (or limit) in one case of a scenario.
type Row struct {
	Library string
	Role    Role
	Open    func(ctx context.Context) (Instance, error)
}

// A Case is one table section of a scenario, e.g. "4 KiB" or
// "32 B, 64 in flight". Its rows run interleaved and are compared with
// each other, never with rows of another case.
type Case struct {
	Label string
	Rows  []Row
}

// Config is what a scenario may adapt its cases to.
type Config struct {
	// Quick asks for a short sanity run: fewer connections, shorter
	// trials. Its numbers are never for publishing.
	Quick bool
}

// A Scenario is one table of the report. Adding one is adding a file whose
// init calls register; adding a row to it is adding an entry to the list
// the scenario builds its cases from (see framewrite.go, echoservers.go).
type Scenario struct {
	Number   int    // position in the report, as numbered in the issue
	Name     string // short id matched by -only, e.g. "echo"
	Title    string // table heading
	About    string // what it measures and how, in a few sentences
	Loopback bool   // client and server share this machine's cores
	// Trials, when set, caps the trials per row unless -count is given:
	// for a scenario whose figures hardly move from trial to trial and
	// whose trials are long (idle memory).
	Trials  int
	Metrics []Metric
	// Cases builds the cases at run time, after every init has run, so
	// rows registered from other files are included.
	Cases func(cfg Config) ([]Case, error)
}

var scenarios []*Scenario

// register adds a scenario; it is called from init, so a duplicate name is
// a programming error reported at start-up.
func register(s *Scenario) {
	for _, o := range scenarios {
		if o.Name == s.Name {
			panic("bench: scenario " + s.Name + " registered twice")
		}
	}
	scenarios = append(scenarios, s)
}

// selectScenarios returns the registered scenarios whose name matches
// pattern (all of them when it is empty), in report order.
func selectScenarios(pattern string) ([]*Scenario, error) {
	var re *regexp.Regexp
	if pattern != "" {
		var err error
		if re, err = regexp.Compile(pattern); err != nil {
			return nil, fmt.Errorf("bad -only pattern: %w", err)
		}
	}
	var out []*Scenario
	for _, s := range scenarios {
		if re == nil || re.MatchString(s.Name) {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Number < out[j].Number })
	return out, nil
}

// orderRows puts our rows first, then peers in the order they were
// declared, then limits, so tables read the same whatever file declared a
// row.
func orderRows(rows []Row) []Row {
	out := append([]Row(nil), rows...)
	rank := func(r Role) int {
		switch r {
		case Ours:
			return 0
		case Peer:
			return 1
		}
		return 2
	}
	sort.SliceStable(out, func(i, j int) bool { return rank(out[i].Role) < rank(out[j].Role) })
	return out
}

// runOptions are the knobs of one run that every scenario shares.
type runOptions struct {
	Count    int
	CountSet bool // -count was given: no scenario caps it
	Quick    bool
	Progress *progress
	// Rows, when set, keeps only the rows whose library it matches.
	Rows *regexp.Regexp
}

// runScenario runs every case of s and returns its results.
func runScenario(ctx context.Context, s *Scenario, env Env, opts runOptions) (ScenarioResult, error) {
	res := ScenarioResult{
		Number:   s.Number,
		Name:     s.Name,
		Title:    s.Title,
		About:    s.About,
		Loopback: s.Loopback,
		Metrics:  s.Metrics,
		Targets:  targets[s.Name],
	}
	cases, err := s.Cases(Config{Quick: opts.Quick})
	if err != nil {
		return res, fmt.Errorf("%s: %w", s.Name, err)
	}
	if s.Trials > 0 && !opts.CountSet && opts.Count > s.Trials {
		opts.Count = s.Trials
		env.Count = s.Trials
	}
	env.LoadStart = loadAverage()
	for _, c := range cases {
		if opts.Rows != nil {
			var keep []Row
			for _, r := range c.Rows {
				if opts.Rows.MatchString(r.Library) {
					keep = append(keep, r)
				}
			}
			if c.Rows = keep; len(keep) == 0 {
				continue
			}
		}
		cr, err := runCase(ctx, s, c, opts)
		if err != nil {
			return res, err
		}
		res.Cases = append(res.Cases, cr)
	}
	env.LoadEnd = loadAverage()
	res.Env = env
	return res, nil
}

// rowState is what the runner tracks for one row while its case runs.
type rowState struct {
	row      Row
	inst     Instance
	failed   bool     // open or a trial returned an error: no more trials
	invalid  []string // reasons given by invalid trials, in order
	result   RowResult
	nTrials  int
	nInvalid int
}

// runCase opens every row, runs one warm-up trial per row, then Count
// rounds in which every row runs one trial: A B C, B C A, C A B ... The
// rotation spreads the advantage of going first (a cooler CPU, a freshly
// collected heap) over every row instead of handing it to the same one.
func runCase(ctx context.Context, s *Scenario, c Case, opts runOptions) (CaseResult, error) {
	rows := orderRows(c.Rows)
	states := make([]*rowState, len(rows))
	for i, r := range rows {
		st := &rowState{row: r, result: RowResult{Library: r.Library, Role: r.Role, Samples: map[string][]float64{}}}
		states[i] = st
		opts.Progress.show(s.Name, c.Label, r.Library, "opening")
		inst, err := r.Open(ctx)
		if err != nil {
			st.failed = true
			st.result.Invalid = "did not start: " + err.Error()
			continue
		}
		st.inst = inst
	}
	defer func() {
		for _, st := range states {
			if st.inst != nil {
				_ = st.inst.Close()
			}
		}
	}()

	for round := -1; round < opts.Count; round++ {
		for k := range states {
			st := states[(k+max(round, 0))%len(states)]
			if st.failed {
				continue
			}
			what := fmt.Sprintf("trial %d/%d", round+1, opts.Count)
			if round < 0 {
				what = "warm-up"
			}
			opts.Progress.show(s.Name, c.Label, st.row.Library, what)
			out, err := st.inst.Trial(ctx)
			if ctxErr := ctx.Err(); ctxErr != nil {
				return CaseResult{}, ctxErr
			}
			if err == nil {
				err = checkOutcome(s.Metrics, out)
			}
			if err != nil {
				st.failed = true
				st.result.Invalid = "failed: " + err.Error()
				continue
			}
			if out.Invalid != "" {
				st.invalid = append(st.invalid, out.Invalid)
			}
			if round < 0 {
				continue
			}
			st.nTrials++
			if out.Invalid != "" {
				st.nInvalid++
			}
			for _, m := range s.Metrics {
				st.result.Samples[m.Key] = append(st.result.Samples[m.Key], out.Values[m.Key])
			}
		}
	}

	cr := CaseResult{Label: c.Label}
	for _, st := range states {
		if st.result.Invalid == "" && len(st.invalid) > 0 {
			st.result.Invalid = invalidReason(st.invalid, st.nInvalid, st.nTrials)
		}
		cr.Rows = append(cr.Rows, st.result)
	}
	return cr, nil
}

// invalidReason sums up why trials were invalid: the first reason, and how
// many trials (the warm-up included in the reasons) were affected.
func invalidReason(reasons []string, nInvalid, nTrials int) string {
	if nInvalid == 0 {
		return "warm-up: " + reasons[0]
	}
	return fmt.Sprintf("%s (%d of %d trials)", reasons[0], nInvalid, nTrials)
}

// checkOutcome reports a trial that left out a metric its scenario
// declares: that is a bug in the scenario, not a measurement.
func checkOutcome(metrics []Metric, out Outcome) error {
	var missing []string
	for _, m := range metrics {
		if _, ok := out.Values[m.Key]; !ok {
			missing = append(missing, m.Key)
		}
	}
	if len(missing) > 0 {
		return errors.New("trial reported no value for " + strings.Join(missing, ", "))
	}
	return nil
}
