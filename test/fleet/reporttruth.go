package fleet

import (
	"math"
	"slices"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"

	"github.com/gpuxray/gpuxray/agent"
	"github.com/gpuxray/gpuxray/collector/sim"
	"github.com/gpuxray/gpuxray/report"
)

// memTotal is each system's GPU memory as the simulated driver reports
// it: the go-nvml mock's, which the simulation is built on.
var memTotal = map[string]float64{
	"dgxa100": float64(gpus.A100_SXM4_40GB.MemoryMB << 20),
	"dgxh100": float64(gpus.H100_SXM5_80GB.MemoryMB << 20),
	"dgxh200": float64(gpus.H200_SXM5_141GB.MemoryMB << 20),
	"dgxb200": float64(gpus.B200_SXM5_180GB.MemoryMB << 20),
}

// gpuName is each system's GPU product name as the simulated driver
// reports it, which the report's MIG hint reads from gpuxray_device_info.
var gpuName = map[string]string{
	"dgxa100": sim.ProductName("dgxa100"),
	"dgxh100": sim.ProductName("dgxh100"),
	"dgxh200": sim.ProductName("dgxh200"),
	"dgxb200": sim.ProductName("dgxb200"),
}

// member is a node of a fleet whose history is a copy of another's: its
// scenario's truth, its workloads renamed.
type member struct {
	tr     *truther
	rename func(string) string
	// shift is how much later than the scenario's own time its samples
	// are stamped: a scraper that is not in step with the replay's.
	shift time.Duration
}

// reportTruth is what `gpuxray report` must answer over a range, from the
// scenarios alone.
type reportTruth struct {
	report.Report
	// steps are the figures of each step of the range, fleet-wide.
	steps []stepTruth
}

type stepTruth struct {
	// peak is the step's share of observed time in the peak window, as
	// the agents' window label says.
	peak, peakObserved                                        float64
	observed, allocated, active, idle, unallocated, unallocAc float64 // GPUs
	pending                                                   float64
	// covered is the seconds of the step the engine's data covers, as
	// the report reads them (qCovered).
	covered float64
	// waiting is the pending GPUs by the GPU type their pods select
	// ("any" for none); supply the free or idle GPUs not in MIG mode by
	// type: the queue X-ray's two sides.
	waiting, supply map[string]float64
}

// engineReads is how the engine a report reads takes a step's increase()
// of counters scraped on a grid.
type engineReads int

const (
	// readsExact: the step's own time. VictoriaMetrics' reading where the
	// scrapes fall on the steps' edges, as in the history.
	readsExact engineReads = iota
	// readsVictoriaMetrics: from the last sample at or before the step's
	// start to the last at or before its end. The steps tile the samples:
	// nothing is lost, a boundary's seconds land a step late.
	readsVictoriaMetrics
	// readsPrometheus: from the first sample in the step to the last,
	// extrapolated to its edges at the series' mean slope, up to 1.1 mean
	// intervals (half an interval beyond), never to before the counter's
	// zero (Prometheus 2.42's extrapolatedRate, its range including its
	// start). A series that stops growing in the step's first seconds
	// (the off-peak counters at 09:00, the peak ones at 18:00) is not
	// extrapolated over them: up to a scrape of every GPU's time is lost
	// at each window switch, 0.8% of an hour's heatmap cell at a 30 s
	// scrape where two nodes' idle GPUs switch at once.
	readsPrometheus
)

// stepSpan is tr's truth over the step [a, b) (scenario offsets), peak and
// off-peak, as an engine reads counters scraped every scrape on the grid
// from the scenario's start (at virtual time: a shifted scraper stamps
// them later, which the caller's offsets carry).
func stepSpan(tr *truther, a, b, scrape time.Duration, sched *agent.Schedule, reads engineReads) (peak, offpeak *totals) {
	floor := func(t time.Duration) time.Duration { return max(0, t-t%scrape) }
	switch reads {
	case readsVictoriaMetrics:
		return tr.span(floor(a), floor(b), sched)
	case readsPrometheus:
		first, last := floor(a), floor(b)
		if first < a {
			first += scrape
		}
		if last-first < scrape {
			return newTotals(), newTotals() // one sample: no increase
		}
		p0, o0 := tr.span(0, first, sched)
		p1, o1 := tr.span(0, last, sched)
		x := promExtrapolation{toStart: (first - a).Seconds(), toEnd: (b - last).Seconds(), sampled: (last - first).Seconds(), mean: scrape.Seconds()}
		return x.totals(p0, p1), x.totals(o0, o1)
	}
	return tr.span(a, b, sched)
}

// promExtrapolation is Prometheus' extrapolation of one step's increase
// of counters sampled at the same times.
type promExtrapolation struct{ toStart, toEnd, sampled, mean float64 }

// of is the increase of a counter that reads c0 at the step's first sample
// and c1 at its last, as Prometheus extrapolates it to the step's edges.
func (x promExtrapolation) of(c0, c1 float64) float64 {
	d := c1 - c0
	if d <= 0 {
		return max(d, 0)
	}
	toStart := x.toStart
	if c0 >= 0 {
		toStart = min(toStart, x.sampled*c0/d)
	}
	to := x.sampled
	for _, e := range []float64{toStart, x.toEnd} {
		if e < 1.1*x.mean {
			to += e
		} else {
			to += x.mean / 2
		}
	}
	return d * to / x.sampled
}

// totals is the step's increase of every counter of c0 (at the first
// sample) and c1 (at the last). The counters of a node's devices are
// taken summed, those of a workload summed over its pods on the node: a
// counter that starts from zero in the step (a window's, after a switch)
// starts from zero on every device at once; a pod's mostly has the
// workload's alone.
func (x promExtrapolation) totals(c0, c1 *totals) *totals {
	t := newTotals()
	t.Observed = x.of(c0.Observed, c1.Observed)
	t.Allocated = x.of(c0.Allocated, c1.Allocated)
	t.AllocIdle = x.of(c0.AllocIdle, c1.AllocIdle)
	t.AllocActive = x.of(c0.AllocActive, c1.AllocActive)
	t.Unallocated = x.of(c0.Unallocated, c1.Unallocated)
	t.UnallocActive = x.of(c0.UnallocActive, c1.UnallocActive)
	t.WholeIdle = x.of(c0.WholeIdle, c1.WholeIdle)
	t.WholeFree = x.of(c0.WholeFree, c1.WholeFree)
	for k, v1 := range c1.Work {
		v0 := c0.Work[k]
		t.Work[k] = podSeconds{Allocated: x.of(v0.Allocated, v1.Allocated), Idle: x.of(v0.Idle, v1.Idle), Active: x.of(v0.Active, v1.Active)}
	}
	return t
}

// historyTruth is the report's truth over [start, start+rng) at step, for
// a fleet of members, with the history scraped every scrape (the idle
// streak is a gauge, read at scrapes), as reads reads the counters.
func historyTruth(members []member, start time.Time, rng, step, scrape time.Duration, sched *agent.Schedule, c report.Config, reads engineReads) reportTruth {
	n := int(rng / step)
	stepS, stepH := step.Seconds(), step.Hours()
	var rt reportTruth
	rt.steps = make([]stepTruth, n)
	for i := range rt.steps {
		rt.steps[i].waiting, rt.steps[i].supply = map[string]float64{}, map[string]float64{}
	}
	type wacc struct {
		w            report.Workload
		alloc, activ []float64
	}
	work := map[wkey]*wacc{}
	get := func(k wkey) *wacc {
		a := work[k]
		if a == nil {
			a = &wacc{w: report.Workload{Namespace: k.Namespace, Kind: k.Kind, Name: k.Workload, Model: k.Model, GPUNames: []string{}},
				alloc: make([]float64, n), activ: make([]float64, n)}
			work[k] = a
		}
		return a
	}
	for _, m := range members {
		sc := m.tr.sc
		off := start.Sub(sc.Start) - m.shift
		for i := 0; i < n; i++ {
			a, b := off+time.Duration(i)*step, off+time.Duration(i+1)*step
			pk, op := stepSpan(m.tr, a, b, scrape, sched, reads)
			st := &rt.steps[i]
			// The report divides by the step's covered time: the longest
			// any GPU's observed time reads (the same for every GPU of a
			// node, whole or in MIG mode).
			if g := float64(sc.GPUs); g > 0 {
				st.covered = max(st.covered, (pk.Observed+op.Observed)/g)
			}
			st.peakObserved += pk.Observed / stepS
			product := report.GPUProduct(sim.ProductName(sc.System))
			for _, t := range []*totals{pk, op} {
				st.supply[product] += (t.WholeIdle + t.WholeFree) / stepS
				st.observed += t.Observed / stepS
				st.allocated += t.Allocated / stepS
				st.active += t.AllocActive / stepS
				st.idle += t.AllocIdle / stepS
				st.unallocated += t.Unallocated / stepS
				st.unallocAc += t.UnallocActive / stepS
				isPeak := t == pk
				if isPeak {
					fp := &rt.Report.Funnel.Peak
					fp.Owned += t.Observed / 3600
					fp.Allocated += t.Allocated / 3600
					fp.Active += t.AllocActive / 3600
					fp.Idle += t.AllocIdle / 3600
					fp.Unallocated += t.Unallocated / 3600
					fp.UnallocatedActive += t.UnallocActive / 3600
				}
				for k, v := range t.Work {
					k.Workload = m.rename(k.Workload)
					acc := get(k)
					w := &acc.w
					w.Allocated += v.Allocated / 3600
					w.Idle += v.Idle / 3600
					w.Active += v.Active / 3600
					if isPeak {
						w.PeakAllocated += v.Allocated / 3600
						w.PeakIdle += v.Idle / 3600
						w.PeakActive += v.Active / 3600
					}
					acc.alloc[i] += v.Allocated
					acc.activ[i] += v.Active
				}
			}
			// Pending demand is a gauge, read at the middle of the step.
			mid := a + step/2
			for _, u := range sc.Unscheduled {
				if mid >= u.From && mid < u.To {
					st.pending += float64(u.GPUs)
					t := strings.TrimSuffix(u.NodeSelector[sim.ProductLabel], "-SHARED")
					if t == "" {
						t = report.GPUTypeAny
					}
					st.waiting[t] += float64(u.GPUs)
				}
			}
		}
		// The idle streak, memory: per pod, at the scrapes in range.
		for _, p := range sc.Pods {
			k := workloadOf(p)
			k.Workload = m.rename(k.Workload)
			acc := get(k)
			w := &acc.w
			blind := noMIGActivity(sc.System) && len(p.Devices) > 0 && p.Devices[0].MIG
			if !blind {
				// The scrapes in range, on the replay's grid from the start.
				first := (off + scrape) / scrape * scrape
				for t := first; t <= off+rng; t += scrape {
					if t >= p.From && t < p.To {
						w.LongestIdleStreakSeconds = max(w.LongestIdleStreakSeconds, streakAt(p, t).Seconds())
					}
				}
			}
			if p.From < off+rng && p.To > off {
				w.PeakMemoryBytes = max(w.PeakMemoryBytes, float64(p.Memory))
				if len(p.Devices) > 0 && !p.Devices[0].MIG {
					w.MemoryTotalBytes = max(w.MemoryTotalBytes, memTotal[sc.System])
				}
				// As the agent marks an allocation shared: a
				// time-slicing replica or the shared resource.
				for _, d := range p.Devices {
					w.SharedGPU = w.SharedGPU || d.Replicated || p.Resource == sim.ResourceGPUShared
					// Whole GPUs (replicas included) carry a name; MIG
					// instances none.
					if n := gpuName[sc.System]; !d.MIG && !slices.Contains(w.GPUNames, n) {
						w.GPUNames = append(w.GPUNames, n)
						slices.Sort(w.GPUNames)
					}
				}
			}
		}
	}
	var ws []report.Workload
	for _, acc := range work {
		w := acc.w
		for i := range acc.alloc {
			if a := acc.alloc[i]; a >= stepS/2 {
				w.PeakActivity = max(w.PeakActivity, acc.activ[i]/a)
				w.ActivityHours += stepH
			}
		}
		w.Efficiency = ratio(w.Active, w.Allocated)
		w.PeakEfficiency = ratio(w.PeakActive, w.PeakAllocated)
		if w.Allocated == 0 {
			w.LongestIdleStreakSeconds, w.PeakMemoryBytes, w.MemoryTotalBytes = 0, 0, 0
		}
		ws = append(ws, w)
	}
	r := &rt.Report
	f := &r.Funnel
	f.All.Hours = rng.Hours()
	demand := make([]report.DemandStep, n)
	var idle, obs [7][24]float64
	for i := range rt.steps {
		st := &rt.steps[i]
		f.All.Owned += st.observed * stepH
		f.All.Allocated += st.allocated * stepH
		f.All.Active += st.active * stepH
		f.All.Idle += st.idle * stepH
		f.All.Unallocated += st.unallocated * stepH
		f.All.UnallocatedActive += st.unallocAc * stepH
		st.peak = ratio(st.peakObserved, st.observed)
		f.Peak.Hours += st.peak * stepH
		// Per covered second, as the report divides: the step's, unless
		// the engine reads less of it (readsPrometheus at a switch).
		perCovered := stepS / st.covered
		if st.covered <= 0 {
			perCovered = 1
		}
		demand[i] = report.DemandStep{Hours: stepH, Peak: st.peak, Pending: st.pending, IdleAllocated: st.idle * perCovered, Unallocated: st.unallocated * perCovered,
			UnallocatedActive: st.unallocAc * perCovered, Short: st.shortTotal(), Matched: true}
		mid := start.Add(time.Duration(i)*step + step/2).In(c.Location)
		idle[mid.Weekday()][mid.Hour()] += st.idle * stepS
		obs[mid.Weekday()][mid.Hour()] += stepS / perCovered
	}
	for d := range idle {
		for h := range idle[d] {
			if obs[d][h] > 0 {
				v := idle[d][h] / obs[d][h]
				r.Heatmap.IdleAllocatedGPUs[d][h] = &v
			}
		}
	}
	r.Demand = report.SetAgainst(demand, c.Quantile, true)
	r.Verdict = report.Decide(r.Demand)
	r.Verdict.GPUsShort = shortByType(rt.steps, r.Demand.Basis, c.Quantile)
	r.Verdict.Kind = report.VerdictFixFirst
	if r.Verdict.GPUsShort > 0 {
		r.Verdict.Kind = report.VerdictShort
	}
	r.TopWorkloads = report.TopByPeakIdle(ws, len(ws))
	r.TopModels = report.Models(ws, len(ws))
	r.Hints = report.Hints(r.TopWorkloads, c.Hints.Over(f.All.Hours))
	return rt
}

func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

// renameNode is the rename of a copy of node from's history as node to's.
func renameNode(from, to string) func(string) string {
	id := identity{from: from, to: to}
	return func(s string) string {
		if id.from == id.to {
			return s
		}
		out := &series{labels: []label{{"x", s}}}
		return id.apply(out).labels[0].value
	}
}

// short is, by GPU type, the step's waiting that no free or idle GPU of
// its type could have run. The fleet's waiters are one-GPU pods of one
// priority (none), so each type's waiters take its free and idle GPUs,
// wherever they are, before those of any type take what is left: a type
// is short of what it waits for beyond its supply, and waiters of any
// type of what they wait for beyond what the typed ones left. (The
// report's matching does this per node, best fit; for one-GPU pods the
// node does not matter.)
func (st *stepTruth) short() map[string]float64 {
	out := map[string]float64{}
	left := 0.0
	for t, s := range st.supply {
		left += max(0, s-st.waiting[t])
	}
	for t, w := range st.waiting {
		if t == report.GPUTypeAny {
			out[t] = max(0, w-left)
			continue
		}
		out[t] = max(0, w-st.supply[t])
	}
	return out
}

func (st *stepTruth) shortTotal() float64 {
	var s float64
	for _, v := range st.short() {
		s += v
	}
	return s
}

// shortByType is the verdict's GPUs short: per GPU type, the quantile of
// its shortfall over the steps mostly in the basis (peak, or all when the
// range has none), less the verdict's slack of a tenth of a GPU and
// rounded up; summed over types.
func shortByType(steps []stepTruth, basis string, q float64) int {
	by := map[string][]float64{}
	types := map[string]bool{}
	for _, st := range steps {
		for t := range st.waiting {
			types[t] = true
		}
	}
	for _, st := range steps {
		if basis == report.BasisPeak && st.peak < 0.5 {
			continue
		}
		sh := st.short()
		for t := range types {
			by[t] = append(by[t], sh[t])
		}
	}
	total := 0
	for _, xs := range by {
		total += int(math.Max(0, math.Ceil(report.Quantile(xs, q)-0.1)))
	}
	return total
}
