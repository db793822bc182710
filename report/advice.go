package report

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// Model hints (docs/report.md, "Model advice").
const (
	// HintSmallerGPU: another GPU type of the cluster, with less memory
	// (or cheaper), holds the weights and the peak KV cache.
	HintSmallerGPU = "smaller_gpu"
	// HintQuantize: the weights dominate; an 8-bit model would fit a
	// smaller slice or type.
	HintQuantize = "quantize"
	// HintConsolidate: the replicas' peak load fits fewer GPUs.
	HintConsolidate = "consolidate"
	// HintPrecision: a busy job whose tensor pipes are idle.
	HintPrecision = "precision"
)

// engineOverheadBytes is what an inference engine holds besides its
// weights and KV cache: the CUDA context, CUDA graphs and the activations
// of the largest batch it profiles (vLLM's profile run). An allowance, not
// a measurement: docs/report.md says so.
const engineOverheadBytes = 2 << 30

// Precision hint thresholds: a job busy at least precisionBusy of its
// allocated time whose GPUs' tensor pipes were active under
// precisionTensorIdle of the cycles; assumedSpeedup is what moving its
// matrix work to the tensor cores at least gives (bf16 on an A100: 312
// TFLOPS on tensor cores against 19.5 FP32 on CUDA cores).
const (
	precisionBusy       = 0.5
	precisionTensorIdle = 0.05
	assumedSpeedup      = 2
)

// HintMath is a hint's arithmetic, kept in the JSON: the figures it rests
// on, by name (bytes, GPU-hours, ratios), what acting on it frees, and
// what that saves with prices.
type HintMath struct {
	// Arithmetic are the figures the hint rests on, by name.
	Arithmetic map[string]float64 `json:"arithmetic"`
	// Target is the GPU type (smaller_gpu, quantize onto one) or MIG
	// profile the workload would move to.
	Target string `json:"target,omitempty"`
	// FreesGPUHours is the GPU time of its present GPU type acting on the
	// hint frees over the range.
	FreesGPUHours float64 `json:"frees_gpu_hours"`
	// Saving is what that is worth at the report's prices, less the price
	// of a target type; nil without prices.
	Saving *float64 `json:"saving"`
}

// gpuTypeInfo is one GPU type the cluster owns: its GFD product label,
// memory, and price per GPU-hour (NaN when unpriced).
type gpuTypeInfo struct {
	Type        string
	MemoryBytes float64
	Rate        float64
}

// paramsRE finds a parameter count in a model name: "Llama-3.1-8B",
// "Qwen2.5-0.5B-Instruct", "opt-125m", "Mixtral-8x7B" (8 experts of 7B).
var paramsRE = regexp.MustCompile(`(?i)(?:^|[-_/.\s])(?:(\d+)x)?(\d+(?:\.\d+)?)([bm])(?:$|[-_/.\s])`)

// quantRE are the spellings of quantised weights in model names, with the
// bytes a parameter takes.
var quantRE = []struct {
	re    *regexp.Regexp
	bytes float64
	name  string
}{
	{regexp.MustCompile(`(?i)(awq|gptq|int4|4bit|4-bit|w4a16|nf4|bnb-4|q4_|exl2|fp4|nvfp4|mxfp4)`), 0.5, "4-bit"},
	{regexp.MustCompile(`(?i)(fp8|int8|8bit|8-bit|w8a8|w8a16|q8_)`), 1, "8-bit"},
}

// ModelWeights estimates a model's weights from its name: the parameter
// count it states times the bytes a parameter takes (2, bf16, unless the
// name says a quantisation). ok is false when the name states no size.
func ModelWeights(name string) (bytes float64, quant string, ok bool) {
	m := paramsRE.FindStringSubmatch(name)
	if m == nil {
		return 0, "", false
	}
	n, err := strconv.ParseFloat(m[2], 64)
	if err != nil || n <= 0 {
		return 0, "", false
	}
	if m[1] != "" {
		experts, _ := strconv.ParseFloat(m[1], 64)
		n *= max(experts, 1)
	}
	unit := 1e9
	if strings.EqualFold(m[3], "m") {
		unit = 1e6
	}
	per := 2.0
	for _, q := range quantRE {
		if q.re.MatchString(name) {
			per, quant = q.bytes, q.name
			break
		}
	}
	return n * unit * per, quant, true
}

// memoryNeed is what an engine workload needs of each GPU at its peak: its
// share of the weights, the KV cache the engine reserved times the peak
// KV-cache usage, and engineOverheadBytes. The cache is what NVML saw it
// hold less weights and overhead. ok is false when the model's size is
// unknown or does not fit what NVML saw.
type memoryNeed struct {
	weights, cache, need, used float64
	quant                      string
	model                      string
}

func needOf(w Workload) (memoryNeed, bool) {
	e := w.Engine
	if e == nil || !e.KVKnown || w.PeakMemoryBytes <= 0 {
		return memoryNeed{}, false
	}
	names := append(slices.Clone(e.Models), w.Model)
	for _, name := range names {
		bytes, quant, ok := ModelWeights(name)
		if !ok {
			continue
		}
		per := bytes / max(1, e.GPUsPerPod)
		cache := w.PeakMemoryBytes - per - engineOverheadBytes
		if cache < 0 {
			return memoryNeed{}, false
		}
		n := memoryNeed{weights: per, cache: cache, used: w.PeakMemoryBytes, quant: quant, model: name}
		n.need = per + e.PeakKVCacheUsage*cache + engineOverheadBytes
		return n, true
	}
	return memoryNeed{}, false
}

// modelHint is the hint of a workload that runs an inference engine, or of
// a busy job whose tensor pipes are idle; done is false for the others,
// which hintFor judges as before. An engine's reserved memory never makes
// it memory-bound: its memory is what it needs at peak (needOf).
func modelHint(w Workload, c HintConfig) (h Hint, ok, done bool) {
	if w.Engine == nil {
		if h, ok := precisionHint(w); ok {
			return h, true, true
		}
		return Hint{}, false, false
	}
	legacy := w
	legacy.Engine, legacy.TensorActive = nil, nil
	lc := c
	lc.MemoryBound = math.Inf(1)
	need, known := needOf(w)
	if known {
		legacy.PeakMemoryBytes = need.need
	} else {
		// Its memory is unknown: only activity can be judged.
		legacy.MemoryTotalBytes = 0
	}
	if h, ok := hintFor(legacy, lc); ok && h.Hint == HintMIG {
		if !known {
			return h, true, true
		}
		slots, _ := migCompute(h.Profile)
		frees := w.Allocated * (1 - float64(slots)/7)
		m := HintMath{Arithmetic: need.arithmetic(w, c), Target: h.Profile, FreesGPUHours: frees, Saving: saving(frees, c.rateOf(currentType(w)))}
		m.Arithmetic["compute_slices"] = float64(slots)
		m.Arithmetic["peak_activity"] = w.PeakActivity
		m.Arithmetic["memory_total_bytes"] = w.MemoryTotalBytes
		return engineHint(w, HintMIG, h.Profile, m, "needs %s a GPU at peak (weights %s + %.0f%% of its %s KV cache + %s), not the %s it reserved: with activity at most %.0f%% it fits a MIG %s slice (%d/7 of the compute), freeing %s",
			bytesString(need.need), bytesString(need.weights), 100*w.Engine.PeakKVCacheUsage, bytesString(need.cache), bytesString(engineOverheadBytes), bytesString(need.used),
			100*w.PeakActivity, h.Profile, slots, gpuHours(frees)), true, true
	}
	if known {
		if h, ok := smallerGPU(w, need, c); ok {
			return h, true, true
		}
		if h, ok := quantize(w, need, c); ok {
			return h, true, true
		}
	}
	if h, ok := consolidate(w, c); ok {
		return h, true, true
	}
	h, ok = hintFor(legacy, lc)
	return h, ok, true
}

// currentType is the one GPU type a workload held, "" when it held none
// or several.
func currentType(w Workload) string {
	if len(w.GPUNames) != 1 {
		return ""
	}
	return GPUProduct(w.GPUNames[0])
}

// rateOf is the price per GPU-hour of a type, NaN when unknown.
func (c HintConfig) rateOf(t string) float64 {
	for _, g := range c.types {
		if g.Type == t {
			return g.Rate
		}
	}
	return math.NaN()
}

// saving is gpuHours × rate, nil when the rate is unknown.
func saving(gpuHours, rate float64) *float64 {
	if math.IsNaN(rate) {
		return nil
	}
	v := gpuHours * rate
	return &v
}

func (n memoryNeed) arithmetic(w Workload, c HintConfig) map[string]float64 {
	return map[string]float64{
		"memory_used_bytes":   n.used,
		"weights_bytes":       n.weights,
		"kv_cache_bytes":      n.cache,
		"peak_kv_cache_usage": w.Engine.PeakKVCacheUsage,
		"overhead_bytes":      engineOverheadBytes,
		"need_bytes":          n.need,
		"headroom":            c.Headroom,
		"allocated_gpu_hours": w.Allocated,
	}
}

// smallerGPU finds the cluster's GPU type that holds the need with
// headroom and costs less (or, without prices, has less memory) than the
// workload's: the cheapest such, else the smallest.
func smallerGPU(w Workload, n memoryNeed, c HintConfig) (Hint, bool) {
	cur := currentType(w)
	if cur == "" || w.MemoryTotalBytes <= 0 {
		return Hint{}, false
	}
	curRate := c.rateOf(cur)
	var best *gpuTypeInfo
	for i := range c.types {
		t := &c.types[i]
		if t.Type == cur || t.MemoryBytes < n.need*c.Headroom {
			continue
		}
		// Smaller: cheaper where both are priced, else less memory.
		if priced := !math.IsNaN(t.Rate) && !math.IsNaN(curRate); priced && t.Rate >= curRate || !priced && t.MemoryBytes >= w.MemoryTotalBytes {
			continue
		}
		if best == nil || less(t, best) {
			best = t
		}
	}
	if best == nil {
		return Hint{}, false
	}
	m := HintMath{Arithmetic: n.arithmetic(w, c), Target: best.Type, FreesGPUHours: w.Allocated}
	m.Arithmetic["target_memory_bytes"] = best.MemoryBytes
	m.Arithmetic["memory_total_bytes"] = w.MemoryTotalBytes
	if !math.IsNaN(curRate) && !math.IsNaN(best.Rate) {
		m.Saving = saving(w.Allocated, curRate-best.Rate)
		m.Arithmetic["rate"], m.Arithmetic["target_rate"] = curRate, best.Rate
	}
	return engineHint(w, HintSmallerGPU, "", m, "needs %s a GPU at peak (weights %s + %.0f%% of its %s KV cache + %s), not the %s it reserved: a %s (%s) holds it and frees %s of %s",
		bytesString(n.need), bytesString(n.weights), 100*w.Engine.PeakKVCacheUsage, bytesString(n.cache), bytesString(engineOverheadBytes), bytesString(n.used),
		best.Type, bytesString(best.MemoryBytes), gpuHours(w.Allocated), cur), true
}

// less orders candidate types: priced and cheaper first, then less memory.
func less(a, b *gpuTypeInfo) bool {
	switch {
	case !math.IsNaN(a.Rate) && !math.IsNaN(b.Rate) && a.Rate != b.Rate:
		return a.Rate < b.Rate
	case !math.IsNaN(a.Rate) && math.IsNaN(b.Rate):
		return true
	case math.IsNaN(a.Rate) && !math.IsNaN(b.Rate):
		return false
	}
	return a.MemoryBytes < b.MemoryBytes
}

// quantize: weights of 16 bits that are most of the need, and at 8 bits
// (half the bytes) the need fits a MIG slice of the workload's GPU or a
// smaller type where it did not.
func quantize(w Workload, n memoryNeed, c HintConfig) (Hint, bool) {
	if n.quant != "" || n.weights < n.need/2 || w.MemoryTotalBytes <= 0 {
		return Hint{}, false
	}
	q := n
	q.weights = n.weights / 2
	q.need = n.need - n.weights/2
	math8 := func(m HintMath) HintMath {
		m.Arithmetic["quantized_weights_bytes"] = q.weights
		m.Arithmetic["quantized_need_bytes"] = q.need
		return m
	}
	act := w.PeakActivity * c.Headroom
	if migCapable(w.GPUNames) {
		for _, p := range migProfiles {
			if act <= float64(p.compute)/7 && q.need*c.Headroom <= w.MemoryTotalBytes*float64(p.memory)/8 {
				name := migName(p.compute, p.memory, w.MemoryTotalBytes)
				frees := w.Allocated * (1 - float64(p.compute)/7)
				m := math8(HintMath{Arithmetic: n.arithmetic(w, c), Target: name, FreesGPUHours: frees, Saving: saving(frees, c.rateOf(currentType(w)))})
				m.Arithmetic["compute_slices"] = float64(p.compute)
				return engineHint(w, HintQuantize, name, m, "the weights (%s of the %s it needs at peak) dominate: at 8 bits (FP8 or INT8) it needs %s and fits a MIG %s slice, freeing %s",
					bytesString(n.weights), bytesString(n.need), bytesString(q.need), name, gpuHours(frees)), true
			}
		}
	}
	if h, ok := smallerGPU(w, q, c); ok {
		h.Hint = HintQuantize
		h.HintMath = math8(h.HintMath)
		h.Message = fmt.Sprintf("the weights (%s of the %s it needs at peak) dominate: at 8 bits (FP8 or INT8) it needs %s and a %s holds it, freeing %s",
			bytesString(n.weights), bytesString(n.need), bytesString(q.need), h.Target, gpuHours(h.FreesGPUHours))
		return h, true
	}
	return Hint{}, false
}

// consolidate: two or more replicas whose load at its peak (each pod's
// GPUs × the larger of its KV-cache usage and its activity), with
// headroom, fits fewer GPUs than they held, and no request waited.
func consolidate(w Workload, c HintConfig) (Hint, bool) {
	e := w.Engine
	if e.MaxReplicas < 2 || e.MaxWaiting > 0 || e.PeakLoadGPUs <= 0 || e.stepHours <= 0 {
		return Hint{}, false
	}
	need := math.Max(math.Ceil(e.PeakLoadGPUs*c.Headroom-1e-9), max(1, e.GPUsPerPod))
	var frees, held float64
	for _, h := range e.held {
		if math.IsNaN(h) {
			continue
		}
		held = max(held, h)
		frees += max(0, h-need) * e.stepHours
	}
	if need >= math.Round(held) || frees <= 0 {
		return Hint{}, false
	}
	m := HintMath{Arithmetic: map[string]float64{
		"max_replicas": float64(e.MaxReplicas), "max_gpus_held": held, "peak_load_gpus": e.PeakLoadGPUs, "headroom": c.Headroom,
		"gpus_needed": need, "max_waiting_requests": e.MaxWaiting, "allocated_gpu_hours": w.Allocated,
	}, FreesGPUHours: frees, Saving: saving(frees, c.rateOf(currentType(w)))}
	return engineHint(w, HintConsolidate, "", m, "%d replicas on up to %.0f GPUs carried at most %.2f GPUs' worth of load (KV cache or activity) and kept no request waiting: %.0f GPUs would do, freeing %s",
		e.MaxReplicas, held, e.PeakLoadGPUs, need, gpuHours(frees)), true
}

// precisionHint: a job that is not an inference engine, busy most of its
// allocated time, whose GPUs' tensor pipes were all but idle (GPM, Hopper
// and newer): its math runs in FP32 on the CUDA cores; mixed precision
// (bf16 autocast, or TF32) moves it to the tensor cores.
func precisionHint(w Workload) (Hint, bool) {
	if w.TensorActive == nil || w.Allocated <= 0 || w.Efficiency < precisionBusy || *w.TensorActive >= precisionTensorIdle {
		return Hint{}, false
	}
	frees := w.Allocated * (1 - 1.0/assumedSpeedup)
	m := HintMath{Arithmetic: map[string]float64{
		"efficiency": w.Efficiency, "tensor_active_ratio": *w.TensorActive, "tensor_idle_below": precisionTensorIdle,
		"assumed_speedup": assumedSpeedup, "allocated_gpu_hours": w.Allocated,
	}, FreesGPUHours: frees}
	return Hint{Namespace: w.Namespace, Kind: w.Kind, Name: w.Name, Model: w.Model, Hint: HintPrecision, HintMath: m,
		Message: fmt.Sprintf("busy %.0f%% of its GPU time with the tensor cores active %.1f%% of cycles: its math runs in FP32 on the CUDA cores; mixed precision (bf16 autocast, or TF32) would run it at least %d× faster and free %s",
			100*w.Efficiency, 100**w.TensorActive, assumedSpeedup, gpuHours(frees))}, true
}

// engineHint builds an engine workload's hint; for vLLM it says the
// --gpu-memory-utilization that holds the need on its present GPU.
func engineHint(w Workload, kind, profile string, m HintMath, format string, a ...any) Hint {
	msg := fmt.Sprintf(format, a...)
	if slices.Contains(w.Engine.Kinds, EngineVLLM) {
		if n, ok := needOf(w); ok && w.MemoryTotalBytes > 0 && kind != HintConsolidate {
			msg += fmt.Sprintf("; vLLM reserves what --gpu-memory-utilization says (%.2f of the GPU would hold it)", math.Ceil(100*n.need*1.1/w.MemoryTotalBytes)/100)
		}
	}
	if m.Target == "" && profile != "" {
		m.Target = profile
	}
	return Hint{Namespace: w.Namespace, Kind: w.Kind, Name: w.Name, Model: w.Model, Hint: kind, Profile: profile, HintMath: m, Message: msg}
}

// explain fills the arithmetic of the hints hintFor gives (mig, shared,
// memory_bound, low_activity), with what they free and save.
func explain(h Hint, w Workload, c HintConfig) Hint {
	if h.Arithmetic != nil {
		return h
	}
	rate := c.rateOf(currentType(w))
	a := map[string]float64{
		"peak_memory_bytes": w.PeakMemoryBytes, "memory_total_bytes": w.MemoryTotalBytes, "peak_activity": w.PeakActivity,
		"efficiency": w.Efficiency, "headroom": c.Headroom, "allocated_gpu_hours": w.Allocated, "idle_gpu_hours": w.Idle,
	}
	if w.Engine != nil {
		if n, ok := needOf(w); ok {
			for k, v := range n.arithmetic(w, c) {
				a[k] = v
			}
			a["peak_memory_bytes"] = n.need
		}
	}
	var frees float64
	switch h.Hint {
	case HintMIG:
		if c, ok := migCompute(h.Profile); ok {
			a["compute_slices"] = float64(c)
			frees = w.Allocated * (1 - float64(c)/7)
		}
		h.Target = h.Profile
	case HintShared:
		frees = w.Allocated / 2
	case HintLowActivity:
		frees = w.Idle
	case HintMemoryBound:
		a["memory_bound_share"] = c.MemoryBound
	}
	h.HintMath = HintMath{Arithmetic: a, Target: h.Target, FreesGPUHours: frees, Saving: saving(frees, rate)}
	return h
}

// migCompute is the compute slices of a profile named "3g.40gb".
func migCompute(profile string) (int, bool) {
	g, _, ok := strings.Cut(profile, "g.")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(g)
	return n, err == nil && n > 0
}
