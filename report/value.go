package report

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"golang.org/x/sync/errgroup"
)

// Work is what a workload's (or a model's) GPU time bought and what it
// cost (docs/report.md, "Useful work" and "Money").
type Work struct {
	// Engine is what its inference engines said; nil when none did.
	Engine *EngineUse `json:"engine"`
	// TokensPerGPUHour is generated tokens per allocated pod-hour of its
	// engine pods over all hours, TokensPerActiveGPUHour per active
	// (utilization-weighted) one; Peak* at peak. nil without an engine
	// that reports tokens.
	TokensPerGPUHour           *float64 `json:"tokens_per_gpu_hour"`
	TokensPerActiveGPUHour     *float64 `json:"tokens_per_active_gpu_hour"`
	PeakTokensPerGPUHour       *float64 `json:"peak_tokens_per_gpu_hour"`
	PeakTokensPerActiveGPUHour *float64 `json:"peak_tokens_per_active_gpu_hour"`
	// CostPerMillionTokens is its engine pods' allocated GPU time's cost
	// per million tokens; nil without prices or tokens.
	CostPerMillionTokens *float64 `json:"cost_per_million_tokens"`
	// IdleCost and PeakIdleCost are its idle pod-hours priced at the idle
	// rate of the GPU types they ran on (a MIG instance by its share of the
	// GPU); nil without prices, or when some ran on an unpriced type.
	IdleCost     *float64 `json:"idle_cost"`
	PeakIdleCost *float64 `json:"peak_idle_cost"`
	// TensorActive is the mean GPM tensor-pipe activity of its GPUs
	// (gpuxray_device_tensor_active_ratio, Hopper and newer); nil where
	// unknown.
	TensorActive *float64 `json:"tensor_active_ratio"`

	typed         []typedWork
	allocatedCost *float64
}

// The queries of the work and money figures.
const (
	// qWLTensor is each workload's GPUs' mean tensor activity in the step.
	qWLTensor = `avg by (` + wl + `) (max_over_time(gpuxray_allocation_info[S]) * on (cluster, job, instance, uuid) group_left () avg by (cluster, job, instance, uuid) (avg_over_time(gpuxray_device_tensor_active_ratio[S])))`
	// qTypeMemory is each whole-GPU type's memory.
	qTypeMemory = `max by (name) (max_over_time(gpuxray_device_memory_total_bytes[S])` + typedGPUs
	// typedGPUs keeps whole GPUs and names their product.
	typedGPUs = ` * on (cluster, job, instance, uuid) group_left (name) max by (cluster, job, instance, uuid, name) (gpuxray_device_info{parent_uuid=""}))`
	// The funnel by GPU type and window.
	qTypeObserved    = `sum by (name, window) (increase(gpuxray_device_observed_seconds_total[S])` + typedGPUs
	qTypeAllocated   = `sum by (name, window) (increase(gpuxray_device_allocated_seconds_total[S])` + typedGPUs
	qTypeActive      = `sum by (name, window) (increase(gpuxray_device_allocated_active_seconds_total[S])` + typedGPUs
	qTypeIdle        = `sum by (name, window) (increase(gpuxray_device_allocated_idle_seconds_total[S])` + typedGPUs
	qTypeUnallocated = `sum by (name, window) (increase(gpuxray_device_unallocated_seconds_total[S])` + typedGPUs
	// deviceEnergy and deviceObserved are each GPU's joules and observed
	// seconds in the step: the energy of a state is the GPU's energy times
	// the share of the step it spent in the state.
	deviceEnergy   = `sum by (cluster, job, instance, uuid) (increase(gpuxray_device_energy_joules_total[S]))`
	deviceObserved = `sum by (cluster, job, instance, uuid) (increase(gpuxray_device_observed_seconds_total[S]))`
	// devTypes names every device's GPU type: a whole GPU's product, and a
	// MIG instance's GPU's, with its profile.
	devTypes = `(max by (cluster, job, instance, uuid, name) (gpuxray_device_info{parent_uuid=""}) or max by (cluster, job, instance, uuid, name, mig_profile) (max by (cluster, job, instance, uuid, parent_uuid, mig_profile) (gpuxray_device_info{parent_uuid!=""}) * on (cluster, job, instance, parent_uuid) group_left (name) label_replace(max by (cluster, job, instance, uuid, name) (gpuxray_device_info{parent_uuid=""}), "parent_uuid", "$1", "uuid", "(.*)")))`
	// qWLTypedIdle and qWLTypedAllocated are each workload's pod-seconds
	// by the GPU type and MIG profile they ran on.
	qWLTypedIdle      = `sum by (` + wl + `, window, name, mig_profile) (increase(gpuxray_allocated_idle_seconds_total[S]) * on (cluster, job, instance, uuid) group_left (name, mig_profile) ` + devTypes + `)`
	qWLTypedAllocated = `sum by (` + wl + `, window, name, mig_profile) (increase(gpuxray_allocated_seconds_total[S]) * on (cluster, job, instance, uuid) group_left (name, mig_profile) ` + devTypes + `)`
)

// qTypeEnergy is each type's energy in joules, by window, in a state
// whose per-GPU counter is counter (observed, allocated, idle, unallocated).
func qTypeEnergy(counter string) string {
	return `sum by (name, window) (` + deviceEnergy + ` * on (cluster, job, instance, uuid) group_right () sum by (cluster, job, instance, uuid, window) (increase(` +
		counter + `[S])) / on (cluster, job, instance, uuid) group_left () ` + deviceObserved + typedGPUs
}

// valueInput is what the work and money figures read.
type valueInput struct {
	engines                                        engineInput
	tensor, typeMemory                             []series
	observed, allocated, active, idle, unallocated []series
	eObserved, eAllocated, eIdle, eUnallocated     []series
	wlTypedIdle, wlTypedAllocated                  []series
	priced, powered                                bool
}

// valueJob is one of the work and money figures' queries and where its
// series go.
type valueJob struct {
	expr string
	dst  *[]series
}

// valueJobs are the work and money figures' queries: the money ones only
// with prices, the energy ones only with a price per kWh.
func valueJobs(c Config, vi *valueInput) []valueJob {
	vi.priced = !c.Prices.Empty()
	for _, p := range c.Prices.Types {
		vi.powered = vi.powered || p.PowerPerKWh > 0
	}
	jobs := []valueJob{{qEngineKV, &vi.engines.kv}, {qEngineTokens, &vi.engines.tokens}, {qEngineWaiting, &vi.engines.waiting},
		{qEngineAllocated, &vi.engines.allocated}, {qEngineActive, &vi.engines.active}, {qWLTensor, &vi.tensor}, {qTypeMemory, &vi.typeMemory}}
	if vi.priced {
		jobs = append(jobs, valueJob{qTypeObserved, &vi.observed}, valueJob{qTypeAllocated, &vi.allocated}, valueJob{qTypeActive, &vi.active},
			valueJob{qTypeIdle, &vi.idle}, valueJob{qTypeUnallocated, &vi.unallocated}, valueJob{qWLTypedIdle, &vi.wlTypedIdle}, valueJob{qWLTypedAllocated, &vi.wlTypedAllocated})
	}
	if vi.powered {
		jobs = append(jobs, valueJob{qTypeEnergy("gpuxray_device_observed_seconds_total"), &vi.eObserved},
			valueJob{qTypeEnergy("gpuxray_device_allocated_seconds_total"), &vi.eAllocated},
			valueJob{qTypeEnergy("gpuxray_device_allocated_idle_seconds_total"), &vi.eIdle},
			valueJob{qTypeEnergy("gpuxray_device_unallocated_seconds_total"), &vi.eUnallocated})
	}
	return jobs
}

// startValue schedules jobs on eg; their series are in place when eg.Wait
// returns.
func startValue(ctx context.Context, eg *errgroup.Group, q *querier, jobs []valueJob) {
	S := "[" + stepString(q.g.step) + "]"
	for _, j := range jobs {
		eg.Go(func() error {
			out, err := q.valueQuery(ctx, strings.ReplaceAll(j.expr, "[S]", S))
			*j.dst = out
			return err
		})
	}
}

// withValue attaches to each workload what its engines said, its tokens
// per GPU-hour, its tensor activity and its GPU types' hours; and gives
// the hints the cluster's GPU types.
func withValue(ws []Workload, in input, c Config, peak []float64) ([]Workload, HintConfig) {
	vi := in.value
	g := in.g
	eng := engines(vi.engines, g, peak)
	tensor := map[wlKey][2]float64{}
	for _, s := range vi.tensor {
		k := keyOf(s.labels)
		t := tensor[k]
		for _, v := range s.vals {
			if !math.IsNaN(v) && v >= 0 && v <= 1 {
				t[0] += v
				t[1]++
			}
		}
		tensor[k] = t
	}
	typed := typedWorkloads(vi.wlTypedIdle, vi.wlTypedAllocated)
	hc := c.Hints
	hc.types = gpuTypes(vi, c.Prices)
	for i := range ws {
		w := &ws[i]
		k := wlKey{w.Namespace, w.Kind, w.Name, w.Model}
		if e := eng[k]; e != nil {
			e.stepHours = g.step.Hours()
			w.Engine = e
			w.TokensPerGPUHour, w.PeakTokensPerGPUHour = e.TokensPerGPUHour()
			w.TokensPerActiveGPUHour, w.PeakTokensPerActiveGPUHour = e.TokensPerActiveGPUHour()
		}
		if t := tensor[k]; t[1] > 0 {
			v := t[0] / t[1]
			w.TensorActive = &v
		}
		w.typed = typed[k]
	}
	return ws, hc
}

// typedWorkloads folds the typed pod-seconds into hours by workload, GPU
// type and MIG profile.
func typedWorkloads(idle, allocated []series) map[wlKey][]typedWork {
	out := map[wlKey][]typedWork{}
	add := func(ss []series, all, pk func(*typedWork) *float64) {
		for _, s := range ss {
			k := keyOf(s.labels)
			t, profile := GPUProduct(string(s.labels["name"])), string(s.labels["mig_profile"])
			share := migShare(profile, t)
			list := out[k]
			j := slices.IndexFunc(list, func(x typedWork) bool { return x.gpuType == t && x.share == share })
			if j < 0 {
				list = append(list, typedWork{gpuType: t, share: share})
				j = len(list) - 1
			}
			for _, v := range s.vals {
				if math.IsNaN(v) || v < 0 {
					continue
				}
				*all(&list[j]) += v / 3600
				if s.labels["window"] == "peak" {
					*pk(&list[j]) += v / 3600
				}
			}
			out[k] = list
		}
	}
	add(idle, func(t *typedWork) *float64 { return &t.idle }, func(t *typedWork) *float64 { return &t.peakIdle })
	add(allocated, func(t *typedWork) *float64 { return &t.allocated }, func(t *typedWork) *float64 { return &t.peakAllocated })
	return out
}

// gpuTypes are the cluster's whole-GPU types with their memory and the
// price of an allocated GPU-hour (capital only here: the energy is added
// once the funnel by type is known, in addMoney).
func gpuTypes(vi valueInput, sheet PriceSheet) []gpuTypeInfo {
	var out []gpuTypeInfo
	for _, s := range vi.typeMemory {
		t := GPUProduct(string(s.labels["name"]))
		if t == "" {
			continue
		}
		var m float64
		for _, v := range s.vals {
			if !math.IsNaN(v) {
				m = max(m, v)
			}
		}
		rate := math.NaN()
		if p, ok := sheet.For(t); ok {
			rate = p.Capital()
		}
		if i := slices.IndexFunc(out, func(g gpuTypeInfo) bool { return g.Type == t }); i >= 0 {
			out[i].MemoryBytes = max(out[i].MemoryBytes, m)
			continue
		}
		out = append(out, gpuTypeInfo{Type: t, MemoryBytes: m, Rate: rate})
	}
	slices.SortFunc(out, func(a, b gpuTypeInfo) int { return strings.Compare(a.Type, b.Type) })
	return out
}

// Money is the report's prices, costs by GPU type, what each lever is
// worth and what the shortfall would cost (docs/report.md, "Money"); nil
// without prices.
type Money struct {
	Currency string      `json:"currency"`
	GPUTypes []TypeMoney `json:"gpu_types"`
	// Unpriced are the GPU types no price names: in no cost.
	Unpriced []string `json:"unpriced_gpu_types"`
	// Basis is the levers' and the shortfall's: peak, or all hours when
	// the range has no peak time (the verdict's).
	Basis     string         `json:"basis"`
	Levers    []Lever        `json:"levers"`
	Shortfall *ShortfallCost `json:"shortfall"`
}

// typeTotals sums the typed funnel's series into hours (and kWh) by type,
// all hours and at peak.
func typeTotals(vi valueInput) (all, peak map[string]typeHours) {
	all, peak = map[string]typeHours{}, map[string]typeHours{}
	add := func(ss []series, f func(*typeHours) *float64, scale float64) {
		for _, s := range ss {
			t := GPUProduct(string(s.labels["name"]))
			if t == "" {
				continue
			}
			var v float64
			for _, x := range s.vals {
				if !math.IsNaN(x) && x > 0 {
					v += x * scale
				}
			}
			a := all[t]
			*f(&a) += v
			all[t] = a
			if s.labels["window"] == "peak" {
				p := peak[t]
				*f(&p) += v
				peak[t] = p
			}
		}
	}
	const hour, kWh = 1.0 / 3600, 1.0 / 3.6e6
	add(vi.observed, func(h *typeHours) *float64 { return &h.owned }, hour)
	add(vi.allocated, func(h *typeHours) *float64 { return &h.allocated }, hour)
	add(vi.active, func(h *typeHours) *float64 { return &h.active }, hour)
	add(vi.idle, func(h *typeHours) *float64 { return &h.idle }, hour)
	add(vi.unallocated, func(h *typeHours) *float64 { return &h.unallocated }, hour)
	add(vi.eObserved, func(h *typeHours) *float64 { return &h.eOwned }, kWh)
	add(vi.eAllocated, func(h *typeHours) *float64 { return &h.eAllocated }, kWh)
	add(vi.eIdle, func(h *typeHours) *float64 { return &h.eIdle }, kWh)
	add(vi.eUnallocated, func(h *typeHours) *float64 { return &h.eUnallocated }, kWh)
	return all, peak
}

// addMoney prices the report: the funnel (Cost), each type, the top
// workloads' and models' idle time and tokens, the hints' savings, the
// levers and the shortfall; and explains every hint. Without prices it
// only explains the hints and sets the models' tokens.
func addMoney(r *Report, in input, c Config, ws []Workload) {
	byKey := map[wlKey]Workload{}
	for _, w := range ws {
		byKey[wlKey{w.Namespace, w.Kind, w.Name, w.Model}] = w
	}
	hc := c.Hints
	var types map[string]TypeMoney
	if in.value.priced {
		all, peak := typeTotals(in.value)
		cost, tms := priceTypes(all, peak, c.Prices)
		r.Cost = &cost
		types = map[string]TypeMoney{}
		r.Money = &Money{Currency: c.Prices.Currency, GPUTypes: tms, Unpriced: []string{}, Basis: r.Demand.Basis, Levers: []Lever{}}
		for _, t := range tms {
			types[t.GPUType] = t
			if !t.Priced {
				r.Money.Unpriced = append(r.Money.Unpriced, t.GPUType)
			}
			if t.Priced && t.PowerPerKWh > 0 && t.OwnedGPUHours > 0 && t.MeanPowerWatts == 0 {
				r.warn(sectionData, fmt.Sprintf("no energy counted for %s (gpuxray_device_energy_joules_total): its power is priced at 0", t.GPUType))
			}
		}
		if len(r.Money.Unpriced) > 0 {
			r.warn(sectionData, fmt.Sprintf("no price for %s (and no * price): its GPU-hours are in no cost", strings.Join(r.Money.Unpriced, ", ")))
		}
		hc.types = gpuTypes(in.value, c.Prices)
		for i := range hc.types {
			if t, ok := types[hc.types[i].Type]; ok && t.Priced {
				hc.types[i].Rate = t.AllocatedRate
			}
		}
		for k, w := range byKey {
			w.priceWork(types)
			byKey[k] = w
		}
	}
	for i, w := range r.TopWorkloads {
		if pw, ok := byKey[wlKey{w.Namespace, w.Kind, w.Name, w.Model}]; ok {
			r.TopWorkloads[i].Work = pw.Work
		}
	}
	for i, h := range r.Hints {
		if w, ok := byKey[wlKey{h.Namespace, h.Kind, h.Name, h.Model}]; ok {
			if h.Arithmetic == nil || h.Saving == nil && in.value.priced {
				// Re-judged with the energy-inclusive rates.
				if nh, ok := hintFor(w, hc); ok && nh.Hint == h.Hint {
					h.HintMath = nh.HintMath
				}
			}
			r.Hints[i] = explain(h, w, hc)
		}
	}
	modelsWork(r.TopModels, ws, byKey)
	if r.Money != nil {
		r.Money.Levers = levers(r, types)
		r.Money.Shortfall = shortfallCost(r, types, c.Prices)
	}
}

// priceWork sets a workload's idle costs and cost per million tokens.
func (w *Workload) priceWork(types map[string]TypeMoney) {
	idle, peakIdle, allocated, ok := workloadCost(w.typed, types)
	if !ok || len(w.typed) == 0 {
		return
	}
	w.IdleCost, w.PeakIdleCost, w.allocatedCost = &idle, &peakIdle, &allocated
	if e := w.Engine; e != nil && e.TokensKnown && e.Tokens > 0 && w.Allocated > 0 {
		v := allocated * min(1, e.AllocatedGPUHours/w.Allocated) / e.Tokens * 1e6
		w.CostPerMillionTokens = &v
	}
}

// modelsWork sums each model's workloads' work: its engines, tokens per
// GPU-hour and idle cost.
func modelsWork(ms []Model, ws []Workload, byKey map[wlKey]Workload) {
	for i := range ms {
		var e *EngineUse
		var idle, peakIdle, allocated float64
		priced, any := true, false
		for _, w := range ws {
			name := w.Model
			if name == "" {
				name = "(unknown)"
			}
			if name != ms[i].Model {
				continue
			}
			pw := byKey[wlKey{w.Namespace, w.Kind, w.Name, w.Model}]
			any = true
			if pw.Engine != nil {
				e = mergeEngines(e, pw.Engine)
			}
			if pw.IdleCost == nil {
				priced = false
			} else {
				idle, peakIdle = idle+*pw.IdleCost, peakIdle+*pw.PeakIdleCost
				if pw.allocatedCost != nil {
					allocated += *pw.allocatedCost * ratio(pw.engineHours(), pw.Allocated)
				}
			}
		}
		if !any {
			continue
		}
		m := &ms[i].Work
		if e != nil {
			m.Engine = e
			m.TokensPerGPUHour, m.PeakTokensPerGPUHour = e.TokensPerGPUHour()
			m.TokensPerActiveGPUHour, m.PeakTokensPerActiveGPUHour = e.TokensPerActiveGPUHour()
		}
		if priced {
			m.IdleCost, m.PeakIdleCost = &idle, &peakIdle
			if e != nil && e.TokensKnown && e.Tokens > 0 {
				v := allocated / e.Tokens * 1e6
				m.CostPerMillionTokens = &v
			}
		}
	}
}

func (w Workload) engineHours() float64 {
	if w.Engine == nil {
		return 0
	}
	return w.Engine.AllocatedGPUHours
}

// mergeEngines adds b's figures to a (nil: a copy of b).
func mergeEngines(a, b *EngineUse) *EngineUse {
	if a == nil {
		c := *b
		c.Kinds, c.Models = slices.Clone(b.Kinds), slices.Clone(b.Models)
		c.held, c.load = nil, nil
		return &c
	}
	for _, k := range b.Kinds {
		if !slices.Contains(a.Kinds, k) {
			a.Kinds = append(a.Kinds, k)
		}
	}
	for _, m := range b.Models {
		if !slices.Contains(a.Models, m) {
			a.Models = append(a.Models, m)
		}
	}
	slices.Sort(a.Kinds)
	slices.Sort(a.Models)
	a.Pods += b.Pods
	a.KVKnown = a.KVKnown || b.KVKnown
	a.PeakKVCacheUsage = max(a.PeakKVCacheUsage, b.PeakKVCacheUsage)
	a.TokensKnown = a.TokensKnown || b.TokensKnown
	a.Tokens += b.Tokens
	a.PeakTokens += b.PeakTokens
	a.AllocatedGPUHours += b.AllocatedGPUHours
	a.ActiveGPUHours += b.ActiveGPUHours
	a.PeakAllocatedGPUHours += b.PeakAllocatedGPUHours
	a.PeakActiveGPUHours += b.PeakActiveGPUHours
	a.MaxWaiting = max(a.MaxWaiting, b.MaxWaiting)
	a.GPUsPerPod = max(a.GPUsPerPod, b.GPUsPerPod)
	a.MaxReplicas += b.MaxReplicas
	a.PeakLoadGPUs += b.PeakLoadGPUs
	return a
}

// meanIdleRate is the cluster's price of an idle GPU-hour: the priced
// idle cost over the priced idle hours.
func meanIdleRate(types map[string]TypeMoney) float64 {
	var cost, hours float64
	for _, t := range types {
		if t.Priced {
			cost += t.All.IdleAllocated
			hours += t.IdleAllocatedGPUHours
		}
	}
	if hours <= 0 {
		var n float64
		for _, t := range types {
			if t.Priced {
				cost += t.IdleRate
				n++
			}
		}
		return ratio(cost, n)
	}
	return cost / hours
}

// levers prices each lever on the verdict's basis. The queue's levers
// are priced by the type its waiters wanted, at that type's idle rate
// (waiters of any type, or a type without a price, at the cluster's).
func levers(r *Report, types map[string]TypeMoney) []Lever {
	peak := r.Demand.Basis != BasisAll
	idleHours, idleCost := r.Funnel.All.Idle, r.Cost.All.IdleAllocated
	qf := r.Queue.All
	if peak {
		idleHours, idleCost = r.Funnel.Peak.Idle, r.Cost.Peak.IdleAllocated
		qf = r.Queue.Peak
	}
	mean := meanIdleRate(types)
	// rate is a GPU type's idle rate, the cluster's mean where unknown.
	rate := func(t string) float64 {
		if tm, ok := types[t]; ok && tm.Priced {
			return tm.IdleRate
		}
		return mean
	}
	queueLever := func(lever string, hours func(QueueFigures) float64) Lever {
		l := Lever{Lever: lever, GPUHours: hours(qf)}
		if len(types) == 0 {
			return l
		}
		v := 0.0
		if len(r.Queue.GPUTypes) == 0 {
			v = l.GPUHours * mean
		}
		for _, t := range r.Queue.GPUTypes {
			f := t.All
			if peak {
				f = t.Peak
			}
			v += hours(f) * rate(t.GPUType)
		}
		l.Cost = &v
		return l
	}
	out := []Lever{{Lever: LeverCulling, GPUHours: idleHours, Cost: &idleCost},
		queueLever(LeverPreemption, func(f QueueFigures) float64 { return f.PreemptionGPUHours }),
		queueLever(LeverQuota, func(f QueueFigures) float64 { return f.QuotaGPUHours }),
		queueLever(LeverDefragmentation, func(f QueueFigures) float64 { return f.FragmentedGPUHours })}
	var frees, saved float64
	savedKnown := true
	for _, h := range r.Hints {
		frees += h.FreesGPUHours
		if h.Saving != nil {
			saved += *h.Saving
		} else if h.FreesGPUHours > 0 {
			savedKnown = false
		}
	}
	rs := Lever{Lever: LeverRightSizing, GPUHours: frees}
	if savedKnown {
		rs.Cost = &saved
	}
	return append(out, rs)
}

// shortfallCost prices the verdict's missing GPUs: bought at their
// purchase price, or rented for a year at their hourly price.
func shortfallCost(r *Report, types map[string]TypeMoney, sheet PriceSheet) *ShortfallCost {
	if r.Verdict.GPUsShort <= 0 {
		return nil
	}
	sc := &ShortfallCost{GPUTypes: []ShortfallType{}}
	short := verdictShortByType(r)
	var purchase, yearly float64
	purchaseKnown, yearlyKnown := true, true
	for _, s := range short {
		st := ShortfallType{GPUType: s.gpuType, GPUs: s.gpus}
		if p, ok := sheet.For(s.gpuType); ok {
			if p.PurchasePrice > 0 {
				v := p.PurchasePrice * float64(s.gpus)
				st.PurchaseCost = &v
			}
			rate := p.Capital()
			if t, ok := types[s.gpuType]; ok && t.Priced {
				rate = t.AllocatedRate
			}
			v := rate * hoursPerYear * float64(s.gpus)
			st.YearlyCost = &v
		} else if len(types) > 0 {
			v := meanIdleRate(types) * hoursPerYear * float64(s.gpus)
			st.YearlyCost = &v
		}
		if st.PurchaseCost == nil {
			purchaseKnown = false
		} else {
			purchase += *st.PurchaseCost
		}
		if st.YearlyCost == nil {
			yearlyKnown = false
		} else {
			yearly += *st.YearlyCost
		}
		sc.GPUTypes = append(sc.GPUTypes, st)
	}
	if purchaseKnown {
		sc.PurchaseCost = &purchase
	}
	if yearlyKnown {
		sc.YearlyCost = &yearly
	}
	return sc
}

// typedCount is a number of GPUs of one type.
type typedCount struct {
	gpuType string
	gpus    int
}
