package fleet

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
)

// Tolerance is the largest error a figure may have: 1%.
const Tolerance = 0.01

// Check is one figure the engine answered, set against the truth; or a
// check with no figure (an alert that must arrive), which passes or fails.
type Check struct {
	// Phase is live (the shards and vmalert), history (the replayed week
	// and the report) or engines (VictoriaMetrics against Prometheus).
	Phase string
	Name  string
	// Want is the truth (or the other engine's answer), Got the engine's.
	Want, Got float64
	Unit      string
	// Err is |Got−Want| / max(|Want|, floor): relative, with a floor near zero.
	Err float64
	// Of counts the figures a "worst of" check covers.
	Of int
	// Failed marks a check without a figure that failed; Note says why.
	Failed bool
	// Unjudged marks a check that had nothing it could judge: every
	// figure was one the truth cannot be set against (near a change, too
	// few evaluations). It neither passes nor fails; the table says so and
	// the last line counts it, and Note says why.
	Unjudged bool
	Note     string
}

// Pass reports whether the check is within Tolerance. An unjudged check
// does not fail.
func (c Check) Pass() bool {
	return c.Unjudged || (!c.Failed && !math.IsNaN(c.Err) && c.Err <= Tolerance)
}

// Measure is a figure the run measured for docs/fleet.md.
type Measure struct {
	Name  string
	Value float64
	Unit  string
}

// Result is a fleet run's checks and measurements.
type Result struct {
	Nodes, GPUs int
	// HistoryNodes and HistoryGPUs are the week's fleet; Distinct of its
	// nodes were replayed, the others are copies of those.
	HistoryNodes, HistoryGPUs, Distinct int

	mu       sync.Mutex
	Checks   []Check
	Measures []Measure
	// Summary are short phrases for the last line.
	Summary []string
}

func relErr(got, want, floor float64) float64 {
	if math.IsNaN(got) || math.IsNaN(want) {
		return math.NaN()
	}
	return math.Abs(got-want) / math.Max(math.Abs(want), floor)
}

// figure records one figure against its truth.
func (r *Result) figure(phase, name, unit string, got, want, floor float64) {
	r.add(Check{Phase: phase, Name: name, Want: want, Got: got, Unit: unit, Err: relErr(got, want, floor), Of: 1})
}

// worst records the worst of many figures of one kind.
type worst struct {
	phase, name, unit string
	floor             float64
	c                 Check
	n                 int
	notes             []string
	// mayNotJudge: with no figure added, the check is unjudged (the
	// truth could not be set against any), not failed.
	mayNotJudge bool
}

func newWorst(phase, name, unit string, floor float64) *worst {
	return &worst{phase: phase, name: name, unit: unit, floor: floor, c: Check{Err: -1}}
}

func (w *worst) add(what string, got, want float64) {
	w.n++
	e := relErr(got, want, w.floor)
	if math.IsNaN(e) {
		e = math.Inf(1)
	}
	if e > w.c.Err {
		w.c = Check{Want: want, Got: got, Err: e, Note: what}
	}
	if e > Tolerance && len(w.notes) < 5 {
		w.notes = append(w.notes, fmt.Sprintf("%s: %.4g, want %.4g", what, got, want))
	}
}

func (r *Result) addWorst(w *worst) {
	c := w.c
	c.Phase, c.Name, c.Unit, c.Of = w.phase, w.name, w.unit, w.n
	switch {
	case w.n == 0 && w.mayNotJudge:
		c.Err, c.Unjudged, c.Note = 0, true, "nothing the truth could judge"
	case w.n == 0:
		c.Err, c.Failed, c.Note = 0, true, "nothing to check"
	}
	if len(w.notes) > 0 {
		c.Note = strings.Join(w.notes, "; ")
	}
	r.add(c)
}

// pass records a check without a figure.
func (r *Result) pass(phase, name string, ok bool, note string) {
	r.add(Check{Phase: phase, Name: name, Failed: !ok, Note: note, Of: 1})
}

func (r *Result) add(c Check) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Checks = append(r.Checks, c)
}

func (r *Result) measure(name string, v float64, unit string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Measures = append(r.Measures, Measure{name, v, unit})
}

func (r *Result) summary(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Summary = append(r.Summary, s)
}

// Failed lists the checks that did not pass.
func (r *Result) Failed() []Check {
	var out []Check
	for _, c := range r.Checks {
		if !c.Pass() {
			out = append(out, c)
		}
	}
	return out
}

// WorstError is the largest error of any figure, and its check.
func (r *Result) WorstError() (float64, Check) {
	var w Check
	max := 0.0
	for _, c := range r.Checks {
		if !c.Failed && !c.Unjudged && c.Err > max {
			max, w = c.Err, c
		}
	}
	return max, w
}

// Write prints the table of truth against the engine's answers, the
// measurements, and the last line.
func (r *Result) Write(w io.Writer) {
	phases := map[string]int{"live": 0, "history": 1, "engines": 2}
	checks := append([]Check(nil), r.Checks...)
	sort.SliceStable(checks, func(i, j int) bool { return phases[checks[i].Phase] < phases[checks[j].Phase] })
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "PHASE\tFIGURE\tTRUTH\tENGINE\tERROR\tOF\t")
	for _, c := range checks {
		status := fmt.Sprintf("%.3f%%", 100*c.Err)
		if c.Unjudged {
			status = "NOT JUDGED"
		} else if c.Failed {
			status = "FAIL"
		} else if !c.Pass() {
			status += " FAIL"
		}
		want, got := fmtFigure(c.Want, c.Unit), fmtFigure(c.Got, c.Unit)
		if c.Unit == "" && c.Want == 0 && c.Got == 0 {
			want, got = "", ""
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", c.Phase, c.Name, want, got, status, c.Of, c.Note)
	}
	tw.Flush()
	if len(r.Measures) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "MEASURED\tVALUE\t")
		for _, m := range r.Measures {
			fmt.Fprintf(tw, "%s\t%s\t\n", m.Name, fmtFigure(m.Value, m.Unit))
		}
		tw.Flush()
	}
	worstErr, wc := r.WorstError()
	line := fmt.Sprintf("fleet: %d nodes, %d GPUs, worst error %.3f%% (%s %s)", r.Nodes, r.GPUs, 100*worstErr, wc.Phase, wc.Name)
	unjudged := 0
	for _, c := range r.Checks {
		if c.Unjudged {
			unjudged++
		}
	}
	if f := r.Failed(); len(f) > 0 {
		line += fmt.Sprintf(", %d of %d checks FAILED", len(f), len(r.Checks))
	} else {
		line += fmt.Sprintf(", %d checks passed", len(r.Checks)-unjudged)
	}
	if unjudged > 0 {
		line += fmt.Sprintf(" (%d NOT JUDGED: nothing the truth could judge)", unjudged)
	}
	for _, s := range r.Summary {
		line += ", " + s
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, line)
}

func fmtFigure(v float64, unit string) string {
	switch unit {
	case "":
		return fmt.Sprintf("%.4g", v)
	case "s":
		return fmt.Sprintf("%.1f s", v)
	case "MiB":
		return fmt.Sprintf("%.1f MiB", v)
	case "B":
		return fmt.Sprintf("%.0f B", v)
	}
	return fmt.Sprintf("%.4g %s", v, unit)
}
