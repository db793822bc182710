package report

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Funnel is where a range's GPU time went, in GPU-hours.
type Funnel struct {
	// Hours is the time the agents' data covers (all of it, or its peak
	// part): the hours its GPU-hours are averaged over.
	Hours float64 `json:"hours"`
	// Owned is the GPU time of whole GPUs observed (MIG instances are part of their GPU).
	Owned float64 `json:"owned_gpu_hours"`
	// Allocated is the GPU time held by pods.
	Allocated float64 `json:"allocated_gpu_hours"`
	// Active is allocated time weighted by utilization: effective GPU-hours.
	Active float64 `json:"active_gpu_hours"`
	// Idle is allocated time whose samples were idle.
	Idle float64 `json:"idle_gpu_hours"`
	// Unallocated is GPU time no pod held.
	Unallocated float64 `json:"unallocated_gpu_hours"`
	// UnallocatedActive is utilization-weighted time busy while no pod held the GPU.
	UnallocatedActive float64 `json:"unallocated_active_gpu_hours"`
}

// GPUs is a number of GPU-hours as a mean number of GPUs over the funnel's hours.
func (f Funnel) GPUs(gpuHours float64) float64 { return ratio(gpuHours, f.Hours) }

// Efficiency is active over allocated GPU time, 0 when nothing was allocated.
func (f Funnel) Efficiency() float64 { return ratio(f.Active, f.Allocated) }

func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

// DemandStep is one step of the range, set side by side: what waited and
// what could have taken it at that time.
type DemandStep struct {
	// Hours is the part of the step the agents' data covers: the weight of
	// its figures.
	Hours float64
	// Peak is the share of the step inside the peak window, 0..1.
	Peak float64
	// Pending is the GPUs requested by Pending, unscheduled pods.
	Pending float64
	// IdleAllocated is GPUs allocated and idle; Unallocated GPUs held by
	// nobody; UnallocatedActive the busy part of those.
	IdleAllocated, Unallocated, UnallocatedActive float64
	// Short, when Matched, is the part of Pending the queue X-ray found no
	// free or idle GPU of its type for (its shortfall and other type):
	// what a GPU of the right type, not a better placement, would have
	// run. Without it a step's shortfall is Pending less Reclaimable.
	Short   float64
	Matched bool
}

// shortfall is the step's pending GPUs no reclaimable GPU could take.
func (s DemandStep) shortfall() float64 {
	if s.Matched {
		return min(max(0, s.Short), max(0, s.Pending))
	}
	return max(0, s.Pending-s.Reclaimable())
}

// Reclaimable is the capacity that could take work at the step: idle
// allocated GPUs plus unallocated ones, less what runs on those outside
// Kubernetes (cluster:gpuxray_idle_gpus:rate5m of the rules).
func (s DemandStep) Reclaimable() float64 {
	return max(0, s.IdleAllocated+s.Unallocated-s.UnallocatedActive)
}

// Bases of the demand figures.
const (
	// BasisPeak: the figures are at peak, each step weighted by its share of peak.
	BasisPeak = "peak"
	// BasisAll: the range has no peak time; the figures are over all hours.
	BasisAll = "all"
)

// Demand is pending demand at peak set against reclaimable capacity at the
// same times. GPU-hours are weighted by each step's share of peak (or,
// when the range has no peak time, over all hours: Basis).
type Demand struct {
	// Available is false when no kube-state-metrics series were found: demand is unknown.
	Available bool `json:"available"`
	// PeakHours is the peak time the figures cover.
	PeakHours float64 `json:"peak_hours"`
	// Basis is BasisPeak, or BasisAll when the range has no peak time: the
	// figures are then over all hours, each step weighted in full.
	Basis string `json:"basis"`
	// Hours is the time the figures cover: PeakHours, or every hour the
	// data covers when Basis is BasisAll.
	Hours float64 `json:"hours"`
	// PendingGPUHours is GPU time requested by pending pods at peak.
	PendingGPUHours float64 `json:"pending_gpu_hours"`
	// IdleAllocatedGPUHours, UnallocatedGPUHours and UnallocatedActiveGPUHours
	// make up ReclaimableGPUHours, at peak.
	IdleAllocatedGPUHours     float64 `json:"idle_allocated_gpu_hours"`
	UnallocatedGPUHours       float64 `json:"unallocated_gpu_hours"`
	UnallocatedActiveGPUHours float64 `json:"unallocated_active_gpu_hours"`
	ReclaimableGPUHours       float64 `json:"reclaimable_gpu_hours"`
	// CoveredGPUHours is pending demand that reclaimable capacity could have
	// run at the same step; ShortfallGPUHours the rest.
	CoveredGPUHours   float64 `json:"covered_gpu_hours"`
	ShortfallGPUHours float64 `json:"shortfall_gpu_hours"`
	// PendingGPUs and ReclaimableGPUs are the means over peak time.
	PendingGPUs     float64 `json:"pending_gpus"`
	ReclaimableGPUs float64 `json:"reclaimable_gpus"`
	// MaxPendingGPUs is the most GPUs pending at once at peak.
	MaxPendingGPUs float64 `json:"max_pending_gpus"`
	// Quantile is the share of peak steps ShortfallGPUs is taken at.
	Quantile float64 `json:"quantile"`
	// ShortfallGPUs is that quantile of pending less reclaimable GPUs over
	// the steps that are mostly peak (where the queue X-ray matched the
	// waiting, of the waiting no free or idle GPU of its type could hold).
	ShortfallGPUs float64 `json:"shortfall_gpus"`
	// matched is whether the steps' shortfall came from the queue X-ray.
	matched bool
}

// SetAgainst computes Demand from steps, each weighted by its covered
// Hours and its share of peak; q is the quantile of the per-step shortfall
// that decides the verdict (0.95: a shortfall that lasts under 5% of peak
// time is left to queueing). A range with no peak time is taken over all
// its hours instead, so the verdict still rests on something.
func SetAgainst(steps []DemandStep, q float64, available bool) Demand {
	d := against(steps, q, available, func(s DemandStep) float64 { return s.Peak })
	d.Basis, d.PeakHours = BasisPeak, d.Hours
	if d.Hours == 0 {
		d = against(steps, q, available, func(DemandStep) float64 { return 1 })
		d.Basis = BasisAll
	}
	return d
}

// against sets demand against reclaimable capacity with each step weighted
// by share(step) × its covered hours.
func against(steps []DemandStep, q float64, available bool, share func(DemandStep) float64) Demand {
	d := Demand{Available: available, Quantile: q}
	var short []float64
	for _, s := range steps {
		sh := share(s)
		if sh <= 0 || s.Hours <= 0 {
			continue
		}
		w := sh * s.Hours
		r := s.Reclaimable()
		d.Hours += w
		d.PendingGPUHours += s.Pending * w
		d.IdleAllocatedGPUHours += s.IdleAllocated * w
		d.UnallocatedGPUHours += s.Unallocated * w
		d.UnallocatedActiveGPUHours += s.UnallocatedActive * w
		d.ReclaimableGPUHours += r * w
		sf := s.shortfall()
		d.matched = d.matched || s.Matched
		d.CoveredGPUHours += (max(0, s.Pending) - sf) * w
		d.ShortfallGPUHours += sf * w
		if sh >= 0.5 {
			short = append(short, sf)
			d.MaxPendingGPUs = max(d.MaxPendingGPUs, s.Pending)
		}
	}
	d.PendingGPUs = ratio(d.PendingGPUHours, d.Hours)
	d.ReclaimableGPUs = ratio(d.ReclaimableGPUHours, d.Hours)
	d.ShortfallGPUs = Quantile(short, q)
	return d
}

// Quantile is the q-quantile of xs by the nearest-rank method; 0 for none.
func Quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// Verdict kinds.
const (
	// VerdictFixFirst: reclaimable capacity covers the demand at peak.
	VerdictFixFirst = "fix_first"
	// VerdictShort: demand exceeds capacity even after reclaiming.
	VerdictShort = "short"
	// VerdictNoDemandData: no kube-state-metrics series, demand unknown.
	VerdictNoDemandData = "no_demand_data"
)

// measurementSlack is the part of a GPU a shortfall may exceed a whole
// number by and still round down: rates sampled at step boundaries are not
// exact, and a shortfall of 2.03 GPUs is 2 GPUs.
const measurementSlack = 0.1

// Verdict answers "do we need more GPUs?" and shows its arithmetic.
type Verdict struct {
	Kind string `json:"kind"`
	// ReclaimableGPUs (N), PendingGPUs (M) and GPUsShort (K) are the numbers of the sentence.
	ReclaimableGPUs float64 `json:"reclaimable_gpus"`
	PendingGPUs     float64 `json:"pending_gpus"`
	GPUsShort       int     `json:"gpus_short"`
	Sentence        string  `json:"sentence"`
	// Arithmetic is the verdict's working, one line a step.
	Arithmetic []string `json:"arithmetic"`
	// Queue is the queue X-ray's sentence: whether the waiting came from
	// scheduling or from capacity, and what to look at (Queue.Sentence).
	Queue string `json:"queue_sentence"`
	// GPUTypes is the verdict by GPU type, where the queue X-ray could
	// match waiters to GPUs: one entry per type that waited or idled,
	// most short first. GPUsShort is then the sum of theirs.
	GPUTypes []VerdictGPUType `json:"gpu_types"`
}

// VerdictGPUType is the verdict for one GPU type (the GFD product label,
// or "any" for waiters that select none), on the verdict's basis.
type VerdictGPUType struct {
	GPUType string `json:"gpu_type"`
	// PendingGPUs and IdleGPUs are means: the GPUs its waiters waited for,
	// and its GPUs free or held idle (0 for "any").
	PendingGPUs float64 `json:"pending_gpus"`
	IdleGPUs    float64 `json:"idle_gpus"`
	// ShortfallGPUs is the quantile of its waiting that no free or idle
	// GPU of its type could have run, per step; GPUsShort rounds it as the
	// verdict does. ShortShare is the share of the basis' steps with any
	// such waiting.
	ShortfallGPUs float64 `json:"shortfall_gpus"`
	GPUsShort     int     `json:"gpus_short"`
	ShortShare    float64 `json:"short_share"`
}

// nothingIdle is less reclaimable capacity than the sentences' precision
// shows: there is no idle allocation to fix.
const nothingIdle = 0.05

// Decide turns the demand at peak (or over all hours, when the range has
// no peak time) into the verdict.
func Decide(d Demand) Verdict {
	v := Verdict{ReclaimableGPUs: d.ReclaimableGPUs, PendingGPUs: d.PendingGPUs}
	// at names when the figures hold; lead says why they are not at peak.
	at, lead, of, span, peakDemand := " at peak", "", "of peak time", "peak time", "peak "
	if d.Basis == BasisAll {
		at, lead, of, span, peakDemand = "", "The range has no peak time; over all hours, ", "covered (the range has no peak time)", "all hours", ""
	}
	say := func(format string, a ...any) string {
		s := lead + fmt.Sprintf(format, a...)
		return strings.ToUpper(s[:1]) + s[1:]
	}
	idle := d.ReclaimableGPUs >= nothingIdle
	v.Arithmetic = []string{
		fmt.Sprintf("reclaimable%s: idle allocated %s + unallocated %s − busy unallocated %s = %s over %s %s = %.2f GPUs",
			at, gpuHoursNum(d.IdleAllocatedGPUHours), gpuHoursNum(d.UnallocatedGPUHours), gpuHoursNum(d.UnallocatedActiveGPUHours), gpuHours(d.ReclaimableGPUHours), humanDuration(d.Hours), of, d.ReclaimableGPUs),
	}
	if !d.Available {
		v.Kind = VerdictNoDemandData
		if !idle {
			v.Sentence = say("reclaimable capacity%s is %.2f GPUs, nothing idle to reclaim; pending demand is unknown (no kube-state-metrics series): measure demand.", at, d.ReclaimableGPUs)
			return v
		}
		v.Sentence = say("reclaimable capacity%s is %.1f GPUs; pending demand is unknown (no kube-state-metrics series): fix idle allocation first, then measure demand.", at, d.ReclaimableGPUs)
		return v
	}
	v.GPUsShort = int(math.Max(0, math.Ceil(d.ShortfallGPUs-measurementSlack)))
	v.Arithmetic = append(v.Arithmetic,
		fmt.Sprintf("pending demand%s: %s over %s %s = %.2f GPUs (at most %.0f at once)",
			at, gpuHours(d.PendingGPUHours), humanDuration(d.Hours), of, d.PendingGPUs, d.MaxPendingGPUs),
		fmt.Sprintf("at the same times: %s of that demand fit in reclaimable GPUs, %s did not",
			gpuHours(d.CoveredGPUHours), gpuHours(d.ShortfallGPUHours)),
		fmt.Sprintf("pending − reclaimable at the %s of %s: %.2f GPUs → %d GPUs short",
			percentile(d.Quantile), span, d.ShortfallGPUs, v.GPUsShort),
	)
	if d.matched {
		v.Arithmetic[len(v.Arithmetic)-2] = fmt.Sprintf("at the same times: %s of that demand fit free or idle GPUs of its type (on one node, or scattered over several), %s did not",
			gpuHours(d.CoveredGPUHours), gpuHours(d.ShortfallGPUHours))
		v.Arithmetic[len(v.Arithmetic)-1] = fmt.Sprintf("waiting on no free or idle GPU of its type at the %s of %s: %.2f GPUs → %d GPUs short",
			percentile(d.Quantile), span, d.ShortfallGPUs, v.GPUsShort)
	}
	if v.GPUsShort == 0 {
		v.Kind = VerdictFixFirst
		if !idle {
			v.Sentence = say("nothing was idle to reclaim%s (%.2f GPUs) and pending demand (%.1f GPUs) stayed within capacity: no GPUs are missing.", at, d.ReclaimableGPUs, d.PendingGPUs)
			return v
		}
		v.Sentence = say("reclaimable capacity%s (%.1f GPUs) covers pending demand (%.1f GPUs): fix idle allocation and scheduling first.",
			at, d.ReclaimableGPUs, d.PendingGPUs)
		return v
	}
	v.Kind = VerdictShort
	v.Sentence = say("after reclaiming %.1f GPUs%s, %sdemand (%.1f GPUs pending) still exceeds capacity by %d %s.",
		d.ReclaimableGPUs, at, peakDemand, d.PendingGPUs, v.GPUsShort, plural(v.GPUsShort, "GPU", "GPUs"))
	return v
}

func percentile(q float64) string {
	n := fmt.Sprintf("%g", q*100)
	suffix := "th"
	switch {
	case strings.HasSuffix(n, "1") && !strings.HasSuffix(n, "11"):
		suffix = "st"
	case strings.HasSuffix(n, "2") && !strings.HasSuffix(n, "12"):
		suffix = "nd"
	case strings.HasSuffix(n, "3") && !strings.HasSuffix(n, "13"):
		suffix = "rd"
	}
	return n + suffix + " percentile"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// judge sets demand against capacity and decides the verdict. Where the
// queue X-ray matched waiters to GPUs (kube-state-metrics was found), a
// step's demand is its waiting, Kueue's suspended workloads included, and
// its shortfall the waiting no free or idle GPU of its type could have
// run; the verdict is then given per GPU type, and says why it may
// disagree with the queue's: the queue weighs all the waiting, the verdict
// its worst steps.
func judge(steps []DemandStep, q Queue, quantile float64, available bool) (Demand, Verdict) {
	matched := available && q.Available && len(q.types) > 0
	if matched {
		for i := range steps {
			var pending, short float64
			for _, t := range q.types {
				pending += t.pending[i]
				short += t.short[i]
			}
			steps[i].Pending, steps[i].Short, steps[i].Matched = pending, short, true
		}
	}
	d := SetAgainst(steps, quantile, available)
	v := Decide(d)
	v.Queue = q.Sentence
	v.GPUTypes = []VerdictGPUType{}
	if matched {
		v.byType(d, steps, q, quantile)
	}
	return d, v
}

// byType gives the verdict per GPU type: each type's shortfall at the
// quantile of the basis' steps, and the idle GPUs nobody waited for.
func (v *Verdict) byType(d Demand, steps []DemandStep, q Queue, quantile float64) {
	share := func(s DemandStep) float64 { return s.Peak }
	at, of := " at peak", "peak time"
	if d.Basis == BasisAll {
		share, at, of = func(DemandStep) float64 { return 1 }, "", "the covered time"
	}
	names := make([]string, 0, len(q.types))
	for n := range q.types {
		names = append(names, n)
	}
	slices.Sort(names)
	total := 0
	for _, n := range names {
		ts := q.types[n]
		t := VerdictGPUType{GPUType: n}
		var hours, pending, idle float64
		var short []float64
		shortSteps := 0
		for i, s := range steps {
			sh := share(s)
			if sh <= 0 || s.Hours <= 0 {
				continue
			}
			w := sh * s.Hours
			hours += w
			pending += ts.pending[i] * w
			idle += ts.idle[i] * w
			if sh >= 0.5 {
				short = append(short, ts.short[i])
				if ts.short[i] > measurementSlack {
					shortSteps++
				}
			}
		}
		t.PendingGPUs, t.IdleGPUs = ratio(pending, hours), ratio(idle, hours)
		t.ShortfallGPUs = Quantile(short, quantile)
		t.GPUsShort = int(math.Max(0, math.Ceil(t.ShortfallGPUs-measurementSlack)))
		t.ShortShare = ratio(float64(shortSteps), float64(len(short)))
		if t.PendingGPUs < nothingIdle && t.IdleGPUs < nothingIdle && t.GPUsShort == 0 {
			continue
		}
		total += t.GPUsShort
		v.GPUTypes = append(v.GPUTypes, t)
	}
	slices.SortStableFunc(v.GPUTypes, func(a, b VerdictGPUType) int {
		return cmp.Or(cmp.Compare(b.GPUsShort, a.GPUsShort), cmp.Compare(b.PendingGPUs, a.PendingGPUs), cmp.Compare(b.IdleGPUs, a.IdleGPUs), cmp.Compare(a.GPUType, b.GPUType))
	})
	v.GPUsShort = total

	// The clauses, one per type that is short or idles with nobody
	// waiting: for it, or for any type.
	anyWaits := false
	for _, t := range v.GPUTypes {
		anyWaits = anyWaits || (t.GPUType == GPUTypeAny && t.PendingGPUs >= nothingIdle)
	}
	var short, idle []string
	for _, t := range v.GPUTypes {
		name := t.GPUType
		if name == GPUTypeAny {
			name = "any GPU type"
		}
		switch {
		case t.GPUsShort > 0:
			short = append(short, fmt.Sprintf("%s is %d %s short (for %.0f%% of %s its waiting found no free or idle GPU of its type: buy %s)",
				name, t.GPUsShort, plural(t.GPUsShort, "GPU", "GPUs"), 100*t.ShortShare, of, buyWhat(t.GPUType)))
		case t.PendingGPUs < nothingIdle && t.IdleGPUs >= nothingIdle && !anyWaits:
			idle = append(idle, fmt.Sprintf("%s: %.1f idle, nobody waits for them", name, t.IdleGPUs))
		}
	}
	f := q.Peak
	if q.Basis == BasisAll {
		f = q.All
	}
	placeable := f.OnOneNodeGPUHours() + f.FragmentedGPUHours
	lead := ""
	if d.Basis == BasisAll {
		lead = "The range has no peak time; over all hours, "
	}
	switch {
	case total > 0:
		v.Kind = VerdictShort
		s := fmt.Sprintf("%safter reclaiming what fits, demand%s still exceeds capacity at the %s of %s: %s", lead, at, percentile(quantile), of, strings.Join(short, "; "))
		if len(idle) > 0 {
			s += "; " + strings.Join(idle, "; ")
		}
		s += "."
		if p := ratio(placeable, f.PendingGPUHours); p >= 0.005 && q.Kind != QueueCapacity {
			// The queue weighs all the waiting, the verdict its worst steps.
			s += fmt.Sprintf(" The rest of the time it fits: %.0f%% of the waiting%s could have run on free or idle GPUs of its type (%s, see the queue); fix that first, then buy.", 100*p, at, q.Kind)
		}
		v.Sentence = strings.ToUpper(s[:1]) + s[1:]
	default:
		v.Kind = VerdictFixFirst
		// The lever is the queue's: name it.
		what, ok := fixFirst[q.Kind]
		if ok && strings.Contains(q.Sentence, "a quota problem") {
			what = "Kueue's quota"
		}
		if ok && strings.HasSuffix(v.Sentence, "fix idle allocation and scheduling first.") {
			v.Sentence = strings.TrimSuffix(v.Sentence, "fix idle allocation and scheduling first.") + "fix " + what + " first"
			if len(q.Knobs) > 0 {
				v.Sentence += " (look at " + strings.Join(knobLeads(q.Knobs), "; ") + ")"
			}
			v.Sentence += "."
		}
		if len(idle) > 0 && len(v.GPUTypes) > 1 {
			v.Sentence = strings.TrimSuffix(v.Sentence, ".") + "; " + strings.Join(idle, "; ") + "."
		}
	}
	for _, t := range v.GPUTypes {
		v.Arithmetic = append(v.Arithmetic, fmt.Sprintf("%s%s: %.2f GPUs pending, %.2f free or idle; waiting on no free or idle GPU of its type at the %s of %s: %.2f GPUs → %d short",
			t.GPUType, at, t.PendingGPUs, t.IdleGPUs, percentile(quantile), of, t.ShortfallGPUs, t.GPUsShort))
	}
	if len(v.GPUTypes) > 0 {
		v.Arithmetic = append(v.Arithmetic, fmt.Sprintf("GPUs short: the sum over types = %d; a step's shortfall is its waiting that no free or idle GPU of its type could hold on one node, nor the cluster's of its type together (the queue's shortfall and other type), so means of reclaimable and pending GPUs can cover each other and a type still be short at its worst steps", v.GPUsShort))
	}
}

// buyWhat names the GPUs to buy for a type's waiting.
func buyWhat(gpuType string) string {
	if gpuType == GPUTypeAny {
		return "GPUs"
	}
	return gpuType + " GPUs"
}

// fixFirst is what to fix first, by the queue's kind, when no GPU type is
// short.
var fixFirst = map[string]string{
	QueueScheduling:    "scheduling",
	QueueIdle:          "idle allocation",
	QueueFragmentation: "fragmentation",
}
