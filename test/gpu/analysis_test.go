// Package gpu checks the agent's idle and active seconds against a GPU load
// whose truth is known (issue #10): TestRealGPU on a real GPU (with -gpu),
// TestDryRunOnSimulator on the simulated driver in every `go test`. Both run
// the same collection and the same analysis; only the driver, the clock and
// the load differ. See README.md.
package gpu

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
)

// Targets of issue #10.
const (
	// Trim is cut from each end of every phase: the load's phase changes,
	// sample periods straddling them and one poll's lag are not measured.
	Trim = 2.0 // seconds
	// IdleTolerance: in the busy and idle phases, the pod's idle seconds are
	// within 2% of the (trimmed) phase length of the truth (0 and the whole
	// length); so are its allocated seconds of the length, in every phase.
	IdleTolerance = 0.02
	// DutyTolerance: in the duty phase, the pod's active seconds are within
	// 5% OF THE LOAD'S MEASURED BUSY TIME inside the trimmed phase (the sum
	// of its bursts' CUDA-event times clipped to the window, ~20% of the
	// length), not of the phase length: at 20% duty over 26 s that is
	// ±0.26 s on ~5.2 s.
	DutyTolerance = 0.05
	// TinyGPMRatio: in the tiny phase, GPM's mean SM activity is below a
	// quarter of the mean utilization sample ("a kernel was running").
	TinyGPMRatio = 0.25
)

// Phase is one line of the load's ground truth (load.py --out).
type Phase struct {
	Name  string  `json:"phase"`
	Start float64 `json:"start"` // Unix seconds
	End   float64 `json:"end"`
	// Bursts are the duty phase's busy intervals [start, end], Unix seconds.
	Bursts [][2]float64 `json:"bursts,omitempty"`
	// BusyS is the duty phase's summed measured busy time.
	BusyS  float64 `json:"busy_s,omitempty"`
	Kernel string  `json:"kernel,omitempty"`
	DryRun bool    `json:"dry_run,omitempty"`
	// BusyPID and SpinPID are the pair phase's two processes: one running
	// matmuls back to back, one spinning a single block.
	BusyPID uint32 `json:"busy_pid,omitempty"`
	SpinPID uint32 `json:"spin_pid,omitempty"`
}

// ReadTruth parses load.py's JSON lines.
func ReadTruth(r io.Reader) ([]Phase, error) {
	var out []Phase
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var p Phase
		if err := json.Unmarshal([]byte(line), &p); err != nil {
			return nil, fmt.Errorf("truth line %d: %w", n, err)
		}
		if p.Name == "" || p.End <= p.Start {
			return nil, fmt.Errorf("truth line %d: phase %q [%f, %f] is not a phase", n, p.Name, p.Start, p.End)
		}
		out = append(out, p)
	}
	return out, sc.Err()
}

// ReadTruthFile is ReadTruth on a file.
func ReadTruthFile(path string) ([]Phase, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadTruth(f)
}

// Record is one poll: the engine's cumulative counters for the pod and the
// device, and what the reader returned at that poll.
type Record struct {
	T float64 `json:"t"` // the snapshot's time, Unix seconds
	// The pod's cumulative seconds on the device (all windows summed).
	Allocated float64 `json:"allocated"`
	Idle      float64 `json:"idle"`
	Active    float64 `json:"active"`
	// The device's cumulative seconds.
	Observed float64 `json:"observed"`
	DevIdle  float64 `json:"dev_idle"`
	Gap      float64 `json:"gap"`

	HasUtil bool    `json:"has_util"`
	Util    float64 `json:"util"` // the device's utilization gauge
	HasGPM  bool    `json:"has_gpm"`
	// GPM ratios over the last poll interval.
	SMActive     float64 `json:"sm_active"`
	SMOccupancy  float64 `json:"sm_occupancy"`
	TensorActive float64 `json:"tensor_active"`
	MemoryUsed   uint64  `json:"memory_used"`
	// Samples are the utilization samples this poll read, [Unix s, ratio].
	Samples [][2]float64 `json:"samples"`
	// ProcSamples are the process samples this poll read, [pid, Unix s, ratio].
	ProcSamples [][3]float64 `json:"proc_samples,omitempty"`
	Errors      []string     `json:"errors,omitempty"`
}

// Check is one asserted target.
type Check struct {
	Name string  `json:"name"`
	Got  float64 `json:"got"`
	Want float64 `json:"want"`
	// Tol is the allowed |Got-Want|, or for a "<" check the bound Got must
	// stay under (then Want is unused).
	Tol  float64 `json:"tol"`
	Less bool    `json:"less,omitempty"`
	Pass bool    `json:"pass"`
	// Skip says why the check was not made (then Pass is true).
	Skip string `json:"skip,omitempty"`
}

func (c Check) String() string {
	verdict := "ok"
	switch {
	case c.Skip != "":
		return fmt.Sprintf("%-34s skipped: %s", c.Name, c.Skip)
	case !c.Pass:
		verdict = "FAIL"
	}
	if c.Less {
		return fmt.Sprintf("%-34s %8.4f < %8.4f            %s", c.Name, c.Got, c.Tol, verdict)
	}
	return fmt.Sprintf("%-34s %8.4f vs %8.4f ± %7.4f  %s", c.Name, c.Got, c.Want, c.Tol, verdict)
}

func near(name string, got, want, tol float64) Check {
	return Check{Name: name, Got: got, Want: want, Tol: tol, Pass: math.Abs(got-want) <= tol}
}

func below(name string, got, bound float64) Check {
	return Check{Name: name, Got: got, Tol: bound, Less: true, Pass: got < bound}
}

// PhaseResult is one phase, measured on its trimmed window [From, To].
type PhaseResult struct {
	Phase    string  `json:"phase"`
	From     float64 `json:"from"`
	To       float64 `json:"to"`
	Length   float64 `json:"length"`
	Polls    int     `json:"polls"`
	NSamples int     `json:"samples"`
	// The pod's seconds in the window, the cumulative counters interpolated
	// at From and To.
	Allocated float64 `json:"allocated"`
	Idle      float64 `json:"idle"`
	Active    float64 `json:"active"`
	Gap       float64 `json:"gap"`
	// TruthBusy is the load's measured busy time in the window (duty).
	TruthBusy float64 `json:"truth_busy,omitempty"`
	// MeanUtil is the mean utilization sample stamped in the window.
	MeanUtil float64 `json:"mean_util"`
	// MeanSMActive is the mean GPM SM activity of the polls in the window
	// (each over the poll interval before it); NaN-free: HasGPM says.
	HasGPM       bool    `json:"has_gpm"`
	MeanSMActive float64 `json:"mean_sm_active"`
	Checks       []Check `json:"checks"`
}

// Options change what Analyze asserts.
type Options struct {
	// SkipTinyGPM, when set, is why the tiny phase's GPM check is not made.
	SkipTinyGPM string
	// NoAssert reports the checks without failing the test (a rehearsal
	// whose load does not follow the simulated pattern).
	NoAssert bool
}

// Result is the whole comparison.
type Result struct {
	Phases []PhaseResult `json:"phases"`
	Pass   bool          `json:"pass"`
}

// Failures lists the failed checks.
func (r Result) Failures() []string {
	var out []string
	for _, p := range r.Phases {
		for _, c := range p.Checks {
			if !c.Pass {
				out = append(out, p.Phase+": "+c.String())
			}
		}
	}
	return out
}

// at interpolates a cumulative counter linearly between the polls around t.
func at(recs []Record, t float64, field func(Record) float64) float64 {
	i := sort.Search(len(recs), func(i int) bool { return recs[i].T >= t })
	switch {
	case i == 0:
		return field(recs[0])
	case i == len(recs):
		return field(recs[len(recs)-1])
	}
	a, b := recs[i-1], recs[i]
	if b.T == a.T {
		return field(b)
	}
	f := (t - a.T) / (b.T - a.T)
	return field(a) + f*(field(b)-field(a))
}

// Analyze measures every phase of truth on the polls recs (in time order).
// Every phase must lie inside the polls.
func Analyze(recs []Record, truth []Phase, opt Options) (Result, error) {
	if len(recs) < 2 {
		return Result{}, fmt.Errorf("%d polls: nothing to measure", len(recs))
	}
	res := Result{Pass: true}
	for _, ph := range truth {
		from, to := ph.Start+Trim, ph.End-Trim
		if to <= from {
			return Result{}, fmt.Errorf("phase %s is %.1fs: shorter than the trims", ph.Name, ph.End-ph.Start)
		}
		if from < recs[0].T || to > recs[len(recs)-1].T {
			return Result{}, fmt.Errorf("phase %s [%.3f, %.3f] is not inside the polls [%.3f, %.3f]", ph.Name, from, to, recs[0].T, recs[len(recs)-1].T)
		}
		delta := func(f func(Record) float64) float64 { return at(recs, to, f) - at(recs, from, f) }
		pr := PhaseResult{
			Phase: ph.Name, From: from, To: to, Length: to - from,
			Allocated: delta(func(r Record) float64 { return r.Allocated }),
			Idle:      delta(func(r Record) float64 { return r.Idle }),
			Active:    delta(func(r Record) float64 { return r.Active }),
			Gap:       delta(func(r Record) float64 { return r.Gap }),
		}
		var utilSum, gpmSum float64
		var gpmN int
		for _, r := range recs {
			for _, s := range r.Samples {
				if s[0] > from && s[0] <= to {
					utilSum += s[1]
					pr.NSamples++
				}
			}
			// A poll's GPM covers the poll interval before it.
			if r.T > from+1 && r.T <= to {
				pr.Polls++
				if r.HasGPM {
					gpmSum += r.SMActive
					gpmN++
				}
			}
		}
		if pr.NSamples > 0 {
			pr.MeanUtil = utilSum / float64(pr.NSamples)
		}
		if gpmN > 0 {
			pr.HasGPM, pr.MeanSMActive = true, gpmSum/float64(gpmN)
		}
		L := pr.Length
		pr.Checks = append(pr.Checks, near("allocated s vs length", pr.Allocated, L, IdleTolerance*L))
		switch ph.Name {
		case "busy":
			pr.Checks = append(pr.Checks, near("idle s vs 0", pr.Idle, 0, IdleTolerance*L))
		case "idle":
			pr.Checks = append(pr.Checks, near("idle s vs length", pr.Idle, L, IdleTolerance*L))
		case "duty":
			for _, b := range ph.Bursts {
				pr.TruthBusy += max(0, min(b[1], to)-max(b[0], from))
			}
			pr.Checks = append(pr.Checks, near("active s vs measured busy s", pr.Active, pr.TruthBusy, DutyTolerance*pr.TruthBusy))
		case "tiny":
			switch {
			case opt.SkipTinyGPM != "":
				pr.Checks = append(pr.Checks, Check{Name: "GPM SM active < util/4", Pass: true, Skip: opt.SkipTinyGPM})
			case !pr.HasGPM:
				pr.Checks = append(pr.Checks, Check{Name: "GPM SM active < util/4 (NO GPM)", Less: true, Pass: false})
			default:
				pr.Checks = append(pr.Checks, below("GPM SM active < util/4", pr.MeanSMActive, TinyGPMRatio*pr.MeanUtil))
			}
		}
		for _, c := range pr.Checks {
			res.Pass = res.Pass && c.Pass
		}
		res.Phases = append(res.Phases, pr)
	}
	for _, want := range []string{"busy", "idle", "duty", "tiny"} {
		found := false
		for _, p := range res.Phases {
			found = found || p.Phase == want
		}
		if !found {
			return res, fmt.Errorf("the truth has no %s phase", want)
		}
	}
	return res, nil
}

// Table is the human-readable results.
func (r Result) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-5s %7s %9s %8s %8s %6s %9s %9s %9s %8s\n",
		"phase", "length", "allocated", "idle", "active", "gap", "truth_busy", "mean_util", "sm_active", "samples")
	for _, p := range r.Phases {
		sm := "n/a"
		if p.HasGPM {
			sm = fmt.Sprintf("%.4f", p.MeanSMActive)
		}
		tb := "-"
		if p.Phase == "duty" {
			tb = fmt.Sprintf("%.3f", p.TruthBusy)
		}
		fmt.Fprintf(&b, "%-5s %7.3f %9.3f %8.3f %8.3f %6.3f %10s %9.4f %9s %8d\n",
			p.Phase, p.Length, p.Allocated, p.Idle, p.Active, p.Gap, tb, p.MeanUtil, sm, p.NSamples)
	}
	b.WriteString("\nchecks:\n")
	for _, p := range r.Phases {
		for _, c := range p.Checks {
			fmt.Fprintf(&b, "  %-5s %s\n", p.Phase, c)
		}
	}
	verdict := "PASS"
	if !r.Pass {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "\nresult: %s\n", verdict)
	return b.String()
}

// SampleStats describes the utilization samples' timestamps: the period
// between consecutive samples and how many samples one read returned.
type SampleStats struct {
	N                 int     `json:"n"`
	PeriodMedianS     float64 `json:"period_median_s"`
	PeriodMinS        float64 `json:"period_min_s"`
	PeriodMaxS        float64 `json:"period_max_s"`
	MaxPerPoll        int     `json:"max_samples_per_poll"`
	ProcSamples       int     `json:"proc_samples"`
	ProcAlignedFrac   float64 `json:"proc_aligned_fraction"`     // process stamps equal to a device stamp
	ProcOffsetMedianS float64 `json:"proc_offset_median_s"`      // |process stamp - nearest device stamp|
	GapsOverSecond    int     `json:"sample_gaps_over_1s_count"` // consecutive samples more than 1 s apart
}

// Stats computes SampleStats over every poll.
func Stats(recs []Record) SampleStats {
	var ts []float64
	var st SampleStats
	for _, r := range recs {
		st.MaxPerPoll = max(st.MaxPerPoll, len(r.Samples))
		for _, s := range r.Samples {
			ts = append(ts, s[0])
		}
	}
	sort.Float64s(ts)
	st.N = len(ts)
	var d []float64
	for i := 1; i < len(ts); i++ {
		d = append(d, ts[i]-ts[i-1])
		if ts[i]-ts[i-1] > 1 {
			st.GapsOverSecond++
		}
	}
	if len(d) > 0 {
		sort.Float64s(d)
		st.PeriodMedianS, st.PeriodMinS, st.PeriodMaxS = d[len(d)/2], d[0], d[len(d)-1]
	}
	var offs []float64
	aligned := 0
	for _, r := range recs {
		for _, p := range r.ProcSamples {
			st.ProcSamples++
			i := sort.SearchFloat64s(ts, p[1])
			best := math.Inf(1)
			for _, j := range []int{i - 1, i} {
				if j >= 0 && j < len(ts) {
					best = min(best, math.Abs(ts[j]-p[1]))
				}
			}
			if best < 1e-6 {
				aligned++
			}
			offs = append(offs, best)
		}
	}
	if len(offs) > 0 {
		sort.Float64s(offs)
		st.ProcAlignedFrac = float64(aligned) / float64(len(offs))
		st.ProcOffsetMedianS = offs[len(offs)/2]
	}
	return st
}
