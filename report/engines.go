package report

import (
	"math"
	"slices"
	"strings"
)

// The inference engines' own series (docs/report.md, "Inference
// engines"), each pod's, joined to gpuxray's allocations by namespace and
// pod: the labels a Prometheus that discovers pods gives every target
// (__meta_kubernetes_namespace, __meta_kubernetes_pod_name). The newest
// name of a figure comes first and older names only where it is absent
// (`or` keeps the left side's series): vLLM V1's vllm:kv_cache_usage_perc,
// then V0's vllm:gpu_cache_usage_perc.
const (
	// engineKVvLLM etc. are the highest KV-cache usage (0..1) in each
	// step, by pod and served model.
	engineKVvLLM   = `max by (namespace, pod, model_name) (max_over_time(vllm:kv_cache_usage_perc[S])) or max by (namespace, pod, model_name) (max_over_time(vllm:gpu_cache_usage_perc[S]))`
	engineKVSGLang = `max by (namespace, pod, model_name) (max_over_time(sglang:token_usage[S]))`
	// TGI sizes its batches' token budget to the memory left after the
	// weights: the share of it the current batch takes is its KV-cache use.
	engineKVTGI = `max by (namespace, pod) (max_over_time(tgi_batch_current_max_tokens[S]) / max_over_time(tgi_batch_max_total_tokens[S]))`
	// Triton's TensorRT-LLM backend counts KV-cache blocks; trtllm-serve
	// says the ratio.
	engineKVTriton = `max by (namespace, pod, model_name) (label_replace(max_over_time(nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used"}[S]) / ignoring (kv_cache_block_type) max_over_time(nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max"}[S]), "model_name", "$1", "model", "(.*)")) or max by (namespace, pod, model_name) (max_over_time(trtllm_kv_cache_utilization[S]))`
	qEngineKV      = `label_replace(` + engineKVvLLM + `, "engine_kind", "vllm", "", "") or label_replace(` + engineKVSGLang + `, "engine_kind", "sglang", "", "") or label_replace(` +
		engineKVTGI + `, "engine_kind", "tgi", "", "") or label_replace(` + engineKVTriton + `, "engine_kind", "triton", "", "")`
	// qEngineTokens is the tokens each pod's engine generated in each
	// step: vLLM's and SGLang's counters; TGI counts a request's tokens
	// when it finishes (the _sum of tgi_request_generated_tokens).
	qEngineTokens = `label_replace(sum by (namespace, pod) (increase(vllm:generation_tokens_total[S])), "engine_kind", "vllm", "", "") or label_replace(sum by (namespace, pod) (increase(sglang:generation_tokens_total[S])), "engine_kind", "sglang", "", "") or label_replace(sum by (namespace, pod) (increase(tgi_request_generated_tokens_sum[S])), "engine_kind", "tgi", "", "")`
	// qEngineWaiting is the most requests each pod's engine kept waiting
	// in each step.
	qEngineWaiting = `max by (namespace, pod) (max_over_time(vllm:num_requests_waiting[S])) or max by (namespace, pod) (max_over_time(sglang:num_queue_reqs[S])) or max by (namespace, pod) (max_over_time(tgi_queue_size[S])) or max by (namespace, pod) (max_over_time(nv_trt_llm_request_metrics{request_type="waiting"}[S]))`
	// engineUp is the pods with an engine's series in the step.
	engineUp = `group by (namespace, pod) (max_over_time(vllm:kv_cache_usage_perc[S]) or max_over_time(vllm:gpu_cache_usage_perc[S]) or max_over_time(sglang:token_usage[S]) or max_over_time(tgi_batch_max_total_tokens[S]) or max_over_time(nv_trt_llm_kv_cache_block_metrics[S]) or max_over_time(trtllm_kv_cache_utilization[S]))`
	// qEngineAllocated and qEngineActive are the pod-seconds of the pods
	// that run an engine, by pod, workload and window.
	qEngineAllocated = `sum by (namespace, pod, workload_kind, workload, model, window) (increase(gpuxray_allocated_seconds_total[S])) and on (namespace, pod) ` + engineUp
	qEngineActive    = `sum by (namespace, pod, workload_kind, workload, model, window) (increase(gpuxray_allocated_active_seconds_total[S])) and on (namespace, pod) ` + engineUp
)

// Engine kinds the report reads.
const (
	EngineVLLM   = "vllm"
	EngineSGLang = "sglang"
	EngineTGI    = "tgi"
	EngineTriton = "triton"
)

// engineInput is the engines' series, on the grid.
type engineInput struct {
	kv, tokens, waiting, allocated, active []series
}

// EngineUse is what the inference engines of a workload's pods said over
// the range, and the GPU time of those pods.
type EngineUse struct {
	// Kinds are the engines seen (vllm, sglang, tgi, triton); Models the
	// served model names they report.
	Kinds  []string `json:"kinds"`
	Models []string `json:"models"`
	// Pods is how many of the workload's pods ran an engine.
	Pods int `json:"pods"`
	// PeakKVCacheUsage is the highest KV-cache usage (0..1 of the cache
	// the engine reserved) of any of them at any step; KVKnown whether any
	// reported one.
	PeakKVCacheUsage float64 `json:"peak_kv_cache_usage"`
	KVKnown          bool    `json:"kv_known"`
	// Tokens are the tokens they generated; PeakTokens those at peak.
	Tokens     float64 `json:"tokens"`
	PeakTokens float64 `json:"peak_tokens"`
	// TokensKnown is whether any engine reports generated tokens (Triton's
	// TensorRT-LLM backend does not).
	TokensKnown bool `json:"tokens_known"`
	// AllocatedGPUHours and ActiveGPUHours are their pods' pod-hours;
	// Peak* at peak.
	AllocatedGPUHours     float64 `json:"allocated_gpu_hours"`
	ActiveGPUHours        float64 `json:"active_gpu_hours"`
	PeakAllocatedGPUHours float64 `json:"peak_allocated_gpu_hours"`
	PeakActiveGPUHours    float64 `json:"peak_active_gpu_hours"`
	// MaxWaiting is the most requests any of them kept waiting.
	MaxWaiting float64 `json:"max_waiting_requests"`
	// GPUsPerPod is the most GPUs one of the pods held (tensor
	// parallelism spreads a model over them).
	GPUsPerPod float64 `json:"gpus_per_pod"`
	// MaxReplicas is the most engine pods at once; PeakLoadGPUs the most
	// GPUs' worth of load they carried at once, each pod's GPUs × the
	// larger of its KV-cache usage and its activity.
	MaxReplicas  int     `json:"max_replicas"`
	PeakLoadGPUs float64 `json:"peak_load_gpus"`

	// held and load are, each step, the GPUs the engine pods held and the
	// GPUs' worth of load they carried (NaN for no data); stepHours is a
	// step's length.
	held, load []float64
	stepHours  float64
}

// TokensPerGPUHour is tokens per allocated pod-hour of the engine pods,
// over all hours and at peak; nil where no engine reports tokens.
func (e *EngineUse) TokensPerGPUHour() (all, peak *float64) {
	if e == nil || !e.TokensKnown {
		return nil, nil
	}
	return perHour(e.Tokens, e.AllocatedGPUHours), perHour(e.PeakTokens, e.PeakAllocatedGPUHours)
}

// TokensPerActiveGPUHour is tokens per active (utilization-weighted) GPU-hour.
func (e *EngineUse) TokensPerActiveGPUHour() (all, peak *float64) {
	if e == nil || !e.TokensKnown {
		return nil, nil
	}
	return perHour(e.Tokens, e.ActiveGPUHours), perHour(e.PeakTokens, e.PeakActiveGPUHours)
}

// perHour is a/b, nil when b is 0: tokens per no GPU time say nothing.
func perHour(a, b float64) *float64 {
	if b <= 0 {
		return nil
	}
	v := a / b
	return &v
}

// enginePod is one pod's engine figures on the grid.
type enginePod struct {
	kinds, models              []string
	kv, tokens, waiting        []float64
	allocated, active, peakAll []float64 // seconds per step; peakAll: the allocated seconds labelled peak
	peakActive                 []float64
	key                        wlKey
	hasKey                     bool
}

// engines folds the engines' series into each workload's EngineUse: pods
// are joined to their workload by the allocation series' labels, and a pod
// with engine series but no GPU allocation is left out (it is not on a
// gpuxray node). peak is each step's share of peak time.
func engines(ei engineInput, g grid, peak []float64) map[wlKey]*EngineUse {
	type podKey struct{ ns, pod string }
	pods := map[podKey]*enginePod{}
	get := func(s series) *enginePod {
		k := podKey{string(s.labels["namespace"]), string(s.labels["pod"])}
		p := pods[k]
		if p == nil {
			p = &enginePod{}
			for _, f := range []*[]float64{&p.kv, &p.tokens, &p.waiting, &p.allocated, &p.active, &p.peakAll, &p.peakActive} {
				*f = nanSlice(g.n)
			}
			pods[k] = p
		}
		return p
	}
	addLabel := func(dst *[]string, v string) {
		if v != "" && !slices.Contains(*dst, v) {
			*dst = append(*dst, v)
			slices.Sort(*dst)
		}
	}
	maxInto := func(dst []float64, vals []float64) {
		for i, v := range vals {
			if !math.IsNaN(v) && !math.IsInf(v, 0) && (math.IsNaN(dst[i]) || v > dst[i]) {
				dst[i] = v
			}
		}
	}
	sumInto := func(dst []float64, vals []float64) {
		for i, v := range vals {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				dst[i] = nanAdd(dst[i], v)
			}
		}
	}
	for _, s := range ei.kv {
		p := get(s)
		addLabel(&p.kinds, string(s.labels["engine_kind"]))
		addLabel(&p.models, string(s.labels["model_name"]))
		// A ratio: an engine's figure out of 0..1 is a bug of its own.
		vals := make([]float64, len(s.vals))
		for i, v := range s.vals {
			vals[i] = math.NaN()
			if v >= 0 && v <= 1 {
				vals[i] = v
			}
		}
		maxInto(p.kv, vals)
	}
	for _, s := range ei.tokens {
		p := get(s)
		addLabel(&p.kinds, string(s.labels["engine_kind"]))
		sumInto(p.tokens, s.vals)
	}
	for _, s := range ei.waiting {
		maxInto(get(s).waiting, s.vals)
	}
	for _, pair := range []struct {
		ss        []series
		all, peak func(*enginePod) []float64
	}{
		{ei.allocated, func(p *enginePod) []float64 { return p.allocated }, func(p *enginePod) []float64 { return p.peakAll }},
		{ei.active, func(p *enginePod) []float64 { return p.active }, func(p *enginePod) []float64 { return p.peakActive }},
	} {
		for _, s := range pair.ss {
			p := get(s)
			if !p.hasKey {
				p.key, p.hasKey = keyOf(s.labels), true
			}
			sumInto(pair.all(p), s.vals)
			if s.labels["window"] == "peak" {
				sumInto(pair.peak(p), s.vals)
			}
		}
	}

	out := map[wlKey]*EngineUse{}
	stepS := g.step.Seconds()
	keys := make([]podKey, 0, len(pods))
	for k := range pods {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b podKey) int { return strings.Compare(a.ns+"/"+a.pod, b.ns+"/"+b.pod) })
	for _, k := range keys {
		p := pods[k]
		if !p.hasKey || len(p.kinds) == 0 {
			continue
		}
		e := out[p.key]
		if e == nil {
			e = &EngineUse{Kinds: []string{}, Models: []string{}, held: nanSlice(g.n), load: nanSlice(g.n)}
			out[p.key] = e
		}
		e.Pods++
		for _, kd := range p.kinds {
			addLabel(&e.Kinds, kd)
		}
		for _, m := range p.models {
			addLabel(&e.Models, m)
		}
		for i := 0; i < g.n; i++ {
			a := zeroNaN(p.allocated[i])
			e.AllocatedGPUHours += a / 3600
			e.ActiveGPUHours += zeroNaN(p.active[i]) / 3600
			e.PeakAllocatedGPUHours += zeroNaN(p.peakAll[i]) / 3600
			e.PeakActiveGPUHours += zeroNaN(p.peakActive[i]) / 3600
			if t := p.tokens[i]; !math.IsNaN(t) {
				e.TokensKnown = true
				e.Tokens += t
				e.PeakTokens += t * peak[i]
			}
			if kv := p.kv[i]; !math.IsNaN(kv) {
				e.KVKnown = true
				e.PeakKVCacheUsage = max(e.PeakKVCacheUsage, kv)
			}
			if w := p.waiting[i]; !math.IsNaN(w) {
				e.MaxWaiting = max(e.MaxWaiting, w)
			}
			if a <= 0 {
				continue
			}
			gpus := a / stepS
			e.GPUsPerPod = max(e.GPUsPerPod, math.Round(gpus))
			busy := max(zeroNaN(p.kv[i]), min(1, zeroNaN(p.active[i])/a))
			e.held[i] = nanAdd(e.held[i], gpus)
			e.load[i] = nanAdd(e.load[i], gpus*busy)
		}
	}
	for _, e := range out {
		for i := range e.held {
			if !math.IsNaN(e.load[i]) {
				e.PeakLoadGPUs = max(e.PeakLoadGPUs, e.load[i])
			}
		}
	}
	countReplicas(pods, out, g.n)
	return out
}

// countReplicas sets each workload's MaxReplicas: the most of its engine
// pods that held GPUs in one step.
func countReplicas[K comparable](pods map[K]*enginePod, out map[wlKey]*EngineUse, n int) {
	at := map[wlKey][]int{}
	for _, p := range pods {
		if !p.hasKey || len(p.kinds) == 0 {
			continue
		}
		c := at[p.key]
		if c == nil {
			c = make([]int, n)
			at[p.key] = c
		}
		for i, a := range p.allocated {
			if a > 0 {
				c[i]++
			}
		}
	}
	for k, c := range at {
		out[k].MaxReplicas = slices.Max(c)
	}
}

func nanSlice(n int) []float64 {
	s := make([]float64, n)
	for i := range s {
		s[i] = math.NaN()
	}
	return s
}

// nanAdd adds v to a value that may still be NaN (no data yet).
func nanAdd(acc, v float64) float64 {
	if math.IsNaN(acc) {
		return v
	}
	return acc + v
}

func zeroNaN(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}
