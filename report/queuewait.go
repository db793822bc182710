package report

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// QueueWait is how long a set of waiters (pending pods and suspended Kueue
// workloads) waited: each from its creation (kube_pod_created, or the
// Workload's) until it stopped waiting, or until the range's end for one
// still waiting then. A wait's end is known to the step: the last step a
// waiter was seen waiting ends it.
type QueueWait struct {
	// Pods is how many waiters; StillWaiting how many of them waited
	// still at the range's end.
	Pods         int     `json:"pods"`
	StillWaiting int     `json:"still_waiting"`
	MeanSeconds  float64 `json:"mean_seconds"`
	P50Seconds   float64 `json:"p50_seconds"`
	P95Seconds   float64 `json:"p95_seconds"`
	MaxSeconds   float64 `json:"max_seconds"`
	// SLOSeconds is the --slo.wait target that applies, and SLOMet
	// whether the 95th percentile kept to it; both null when none does.
	SLOSeconds *float64 `json:"slo_seconds"`
	SLOMet     *bool    `json:"slo_met"`
}

// QueueSLO is one priority class's --slo.wait target, judged: whether its
// waiters' 95th-percentile wait kept to it, and what reclaiming would have
// done for the class: the waiting that free or idle GPUs of its type on
// one node could have run.
type QueueSLO struct {
	// PriorityClass is the class ("" for pods of none).
	PriorityClass string  `json:"priority_class"`
	TargetSeconds float64 `json:"target_seconds"`
	// Target is how the flag named it: the class, or "*".
	Target            string    `json:"target"`
	Wait              QueueWait `json:"wait"`
	Met               bool      `json:"met"`
	PendingGPUHours   float64   `json:"pending_gpu_hours"`
	OnOneNodeGPUHours float64   `json:"on_one_node_gpu_hours"`
	Sentence          string    `json:"sentence"`
}

// waitSpan is one waiter's time waiting, on the grid.
type waitSpan struct {
	first, last int
	created     float64 // Unix seconds; NaN when unknown
	class       int     // its QueueClass
	gpuType     string
	peak        bool // seen waiting in a step with peak time
}

// seconds is the span's wait, and whether it still waited at the end of
// a grid of n steps.
func (w waitSpan) seconds(g grid) (float64, bool) {
	still := w.last == g.n-1
	end := g.at(w.last)
	start := g.at(w.first).Add(-g.step)
	if !math.IsNaN(w.created) && !math.IsInf(w.created, 0) {
		if c := time.Unix(0, int64(w.created*1e9)); !c.After(end) {
			start = c
		}
	}
	return max(0, end.Sub(start).Seconds()), still
}

// waitOf sums up waits; slo, when set, is the target the 95th percentile
// is held to.
func waitOf(secs []float64, still int, slo *float64) QueueWait {
	w := QueueWait{Pods: len(secs), StillWaiting: still}
	if len(secs) > 0 {
		w.MeanSeconds = sum(secs) / float64(len(secs))
		w.P50Seconds = Quantile(secs, 0.5)
		w.P95Seconds = Quantile(secs, 0.95)
		w.MaxSeconds = slices.Max(secs)
	}
	if slo != nil {
		t, met := *slo, w.P95Seconds <= *slo
		w.SLOSeconds, w.SLOMet = &t, &met
	}
	return w
}

// waitGroup collects the waits of one set of waiters.
type waitGroup struct {
	all, peak           []float64
	stillAll, stillPeak int
}

func (g *waitGroup) add(secs float64, still, peak bool) {
	g.all = append(g.all, secs)
	if still {
		g.stillAll++
	}
	if peak {
		g.peak = append(g.peak, secs)
		if still {
			g.stillPeak++
		}
	}
}

func (g *waitGroup) waits(slo *float64) (all, peak QueueWait) {
	if g == nil {
		return waitOf(nil, 0, slo), waitOf(nil, 0, slo)
	}
	return waitOf(g.all, g.stillAll, slo), waitOf(g.peak, g.stillPeak, slo)
}

// sloFor is the target --slo.wait sets for priority class c: its own, or
// "*"'s; and how it was named.
func sloFor(slo map[string]time.Duration, c string) (*float64, string) {
	if d, ok := slo[c]; ok {
		s := d.Seconds()
		return &s, c
	}
	if d, ok := slo["*"]; ok {
		s := d.Seconds()
		return &s, "*"
	}
	return nil, ""
}

// setWaits fills the waits of q, its classes and GPU types from spans, and
// judges the --slo.wait targets.
func setWaits(q *Queue, spans []waitSpan, g grid, slo map[string]time.Duration) {
	var all waitGroup
	byClass := map[int]*waitGroup{}
	byType := map[string]*waitGroup{}
	byPriority := map[string]*waitGroup{}
	for _, sp := range spans {
		secs, still := sp.seconds(g)
		all.add(secs, still, sp.peak)
		for _, m := range []struct {
			by  map[string]*waitGroup
			key string
		}{{byType, sp.gpuType}, {byPriority, q.Classes[sp.class].PriorityClass}} {
			if m.by[m.key] == nil {
				m.by[m.key] = &waitGroup{}
			}
			m.by[m.key].add(secs, still, sp.peak)
		}
		if byClass[sp.class] == nil {
			byClass[sp.class] = &waitGroup{}
		}
		byClass[sp.class].add(secs, still, sp.peak)
	}
	var star *float64
	if d, ok := slo["*"]; ok {
		s := d.Seconds()
		star = &s
	}
	q.Wait, q.PeakWait = all.waits(star)
	for i := range q.Classes {
		s, _ := sloFor(slo, q.Classes[i].PriorityClass)
		q.Classes[i].Wait, q.Classes[i].PeakWait = byClass[i].waits(s)
	}
	for i := range q.GPUTypes {
		q.GPUTypes[i].Wait, q.GPUTypes[i].PeakWait = byType[q.GPUTypes[i].GPUType].waits(star)
	}

	// The targets, one per priority class that has one and waited, or
	// that a target names.
	classes := map[string]bool{}
	for c := range byPriority {
		if s, _ := sloFor(slo, c); s != nil {
			classes[c] = true
		}
	}
	for c := range slo {
		if c != "*" {
			classes[c] = true
		}
	}
	q.SLO = []QueueSLO{}
	for c := range classes {
		target, name := sloFor(slo, c)
		w, _ := byPriority[c].waits(target)
		s := QueueSLO{PriorityClass: c, TargetSeconds: *target, Target: name, Wait: w, Met: *w.SLOMet}
		for _, cl := range q.Classes {
			if cl.PriorityClass == c {
				s.PendingGPUHours += cl.All.PendingGPUHours
				s.OnOneNodeGPUHours += cl.All.OnOneNodeGPUHours()
			}
		}
		s.Sentence = sloSentence(s)
		q.SLO = append(q.SLO, s)
	}
	slices.SortFunc(q.SLO, func(a, b QueueSLO) int {
		return cmp.Or(cmp.Compare(boolInt(a.Met), boolInt(b.Met)), cmp.Compare(a.PriorityClass, b.PriorityClass))
	})
}

// sloSentence says whether a class kept to its wait target, and what
// reclaiming would have done for it.
func sloSentence(s QueueSLO) string {
	class := s.PriorityClass
	if class == "" {
		class = "pods of no priority class"
	}
	target := humanSeconds(s.TargetSeconds)
	if s.Wait.Pods == 0 {
		return fmt.Sprintf("%s: nothing waited; the target of %s was met.", class, target)
	}
	var b strings.Builder
	verdict := "met"
	if !s.Met {
		verdict = "missed"
	}
	fmt.Fprintf(&b, "%s: p95 wait %s over %d %s (target %s): %s", class, humanSeconds(s.Wait.P95Seconds), s.Wait.Pods, plural(s.Wait.Pods, "waiter", "waiters"), target, verdict)
	if s.Wait.StillWaiting > 0 {
		fmt.Fprintf(&b, ", %d still waiting at the end", s.Wait.StillWaiting)
	}
	if !s.Met && s.PendingGPUHours > 0 {
		share := ratio(s.OnOneNodeGPUHours, s.PendingGPUHours)
		if share > 0.005 {
			fmt.Fprintf(&b, "; reclaiming the free and idle GPUs of its type on one node could have run %.0f%% of its waiting (%s of %s)", 100*share, gpuHours(s.OnOneNodeGPUHours), gpuHours(s.PendingGPUHours))
		} else {
			b.WriteString("; no free or idle GPU of its type on one node could have run its waiting: only more GPUs of its type would have")
		}
	}
	b.WriteString(".")
	return b.String()
}

// badSLO says what is wrong with --slo.wait targets, "" when nothing is.
func badSLO(slo map[string]time.Duration) string {
	for c, d := range slo {
		if d <= 0 {
			return fmt.Sprintf("--slo.wait %s=%s: the target must be a positive duration", c, d)
		}
	}
	return ""
}
