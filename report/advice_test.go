package report

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
)

const gib = 1 << 30

func TestModelWeights(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		bytes float64
		quant string
		ok    bool
	}{
		{"meta-llama/Llama-3.1-8B-Instruct", 16e9, "", true},
		{"Qwen/Qwen2.5-0.5B-Instruct", 1e9, "", true},
		{"facebook/opt-125m", 250e6, "", true},
		{"mistralai/Mixtral-8x7B-Instruct-v0.1", 112e9, "", true},
		{"TheBloke/Llama-2-70B-AWQ", 35e9, "4-bit", true},
		{"neuralmagic/Meta-Llama-3.1-70B-Instruct-FP8", 70e9, "8-bit", true},
		{"llama3", 0, "", false},
		{"mistral", 0, "", false},
		{"", 0, "", false},
	} {
		b, q, ok := ModelWeights(tt.name)
		if ok != tt.ok || q != tt.quant || math.Abs(b-tt.bytes) > 1 {
			t.Errorf("%s: %g %q %v, want %g %q %v", tt.name, b, q, ok, tt.bytes, tt.quant, tt.ok)
		}
	}
}

// quietVLLM is a vLLM server on an H100 that reserved 90% of the memory
// (72 GiB) and used a tenth of its KV cache at most.
func quietVLLM() Workload {
	w := Workload{Namespace: "chat", Kind: "Deployment", Name: "llama", Model: "meta-llama/Llama-3.1-8B-Instruct",
		Usage: Usage{Allocated: 100, Active: 4, Idle: 60}, PeakActivity: 0.08, PeakMemoryBytes: 72 * gib, MemoryTotalBytes: 80 * gib,
		GPUNames: []string{h100}}
	w.finish()
	w.Engine = &EngineUse{Kinds: []string{EngineVLLM}, Models: []string{"meta-llama/Llama-3.1-8B-Instruct"}, Pods: 1, KVKnown: true, PeakKVCacheUsage: 0.1, GPUsPerPod: 1, MaxReplicas: 1}
	return w
}

var hintCfg = HintConfig{ActivityThreshold: 0.2, MemoryBound: 0.5, Headroom: 1.1}

// TestEngineMemory: an engine's reservation never makes it memory-bound;
// its need at peak is weights + peak KV share of the cache + overhead.
func TestEngineMemory(t *testing.T) {
	t.Parallel()
	w := quietVLLM()
	n, ok := needOf(w)
	if !ok {
		t.Fatal("need unknown")
	}
	weights := 16e9
	cache := 72*gib - weights - engineOverheadBytes
	approx(t, "need", n.need, weights+0.1*cache+engineOverheadBytes)
	h, ok := hintFor(w, hintCfg)
	// 22.4 GiB × 1.1 = 24.7 GiB: more than 2g's 20 GiB, within 3g's 40.
	if !ok || h.Hint != HintMIG || h.Profile != "3g.40gb" {
		t.Fatalf("hint %+v, want mig 3g.40gb", h)
	}
	h = explain(h, w, hintCfg)
	approx(t, "frees", h.FreesGPUHours, 100*4.0/7)
	approx(t, "arithmetic need", h.Arithmetic["need_bytes"], n.need)
	if !strings.Contains(h.Message, "3g.40gb") || !strings.Contains(h.Message, "--gpu-memory-utilization") {
		t.Errorf("message %q", h.Message)
	}

	// Without the engine's series, 72 of 80 GiB and 4% busy is memory-bound,
	// as before: the report cannot tell a reservation from use.
	bare := w
	bare.Engine = nil
	if h, _ := hintFor(bare, hintCfg); h.Hint != HintMemoryBound {
		t.Errorf("no engine: %+v, want memory_bound", h)
	}
	// An engine whose model's size is unknown: never memory-bound; only
	// its activity is judged.
	unknown := w
	unknown.Engine = &EngineUse{Kinds: []string{EngineTGI}, KVKnown: true, PeakKVCacheUsage: 0.1, GPUsPerPod: 1}
	unknown.Model = "chat-model"
	if h, ok := hintFor(unknown, hintCfg); !ok || h.Hint != HintLowActivity {
		t.Errorf("unknown size: %+v %v, want low_activity", h, ok)
	}
}

func TestSmallerGPUAndQuantize(t *testing.T) {
	t.Parallel()
	c := hintCfg
	c.types = []gpuTypeInfo{
		{Type: "NVIDIA-H100-80GB-HBM3", MemoryBytes: 80 * gib, Rate: 4},
		{Type: "NVIDIA-L40S", MemoryBytes: 48 * gib, Rate: 1.5},
		{Type: "NVIDIA-L4", MemoryBytes: 24 * gib, Rate: 0.8},
	}
	// Too busy for a MIG slice (0.6 × 1.1 > 4/7): a smaller type instead.
	w := quietVLLM()
	w.PeakActivity = 0.6
	h, ok := hintFor(w, c)
	if !ok || h.Hint != HintSmallerGPU || h.Target != "NVIDIA-L40S" {
		t.Fatalf("hint %+v, want smaller_gpu NVIDIA-L40S (24.7 GiB does not fit an L4's 24)", h)
	}
	approx(t, "frees", h.FreesGPUHours, 100)
	approx(t, "saving", *h.Saving, 100*(4-1.5))

	// A 70B model over two GPUs: 65 GiB of weights a GPU dominate the 68
	// GiB it needs; at 8 bits it needs 35.5 GiB, × 1.1 within 3g's 40.
	big := quietVLLM()
	big.Model = "meta-llama/Llama-3.1-70B-Instruct"
	big.Engine.Models = []string{big.Model}
	big.Engine.GPUsPerPod = 2
	big.PeakMemoryBytes = 76 * gib
	big.PeakActivity = 0.3
	h, ok = hintFor(big, c)
	if !ok || h.Hint != HintQuantize || h.Profile != "3g.40gb" {
		t.Fatalf("hint %+v, want quantize 3g.40gb", h)
	}
	approx(t, "quantized weights", h.Arithmetic["quantized_weights_bytes"], 35e9)
	approx(t, "frees", h.FreesGPUHours, 100*4.0/7)
	approx(t, "saving", *h.Saving, 100*4.0/7*4)
	// Already quantised: no quantize hint.
	q := big
	q.Engine = &EngineUse{Kinds: []string{EngineVLLM}, Models: []string{"neuralmagic/Meta-Llama-3.1-70B-Instruct-FP8"}, KVKnown: true, PeakKVCacheUsage: 0.1, GPUsPerPod: 1, MaxReplicas: 1}
	q.PeakMemoryBytes = 78 * gib
	if h, _ := hintFor(q, c); h.Hint == HintQuantize || h.Hint == HintMemoryBound {
		t.Errorf("FP8 model: %+v", h)
	}
}

func TestConsolidate(t *testing.T) {
	t.Parallel()
	w := quietVLLM()
	w.PeakActivity = 0.7 // no slice, no sharing
	w.PeakMemoryBytes = 72 * gib
	e := w.Engine
	e.PeakKVCacheUsage = 0.7 // too full for a smaller GPU
	e.MaxReplicas, e.stepHours = 4, 1
	// Four replicas on four GPUs for ten hours carrying at most 1.5 GPUs
	// of load: 1.5 × 1.1 → 2 GPUs do, freeing 2 GPUs × 10 h.
	e.held, e.load = make([]float64, 10), make([]float64, 10)
	for i := range e.held {
		e.held[i], e.load[i] = 4, 1.2
	}
	e.load[3] = 1.5
	e.PeakLoadGPUs = 1.5
	h, ok := hintFor(w, hintCfg)
	if !ok || h.Hint != HintConsolidate {
		t.Fatalf("hint %+v, want consolidate", h)
	}
	approx(t, "gpus needed", h.Arithmetic["gpus_needed"], 2)
	approx(t, "frees", h.FreesGPUHours, 20)
	// A request waited: the replicas are needed.
	e.MaxWaiting = 3
	if h, _ := hintFor(w, hintCfg); h.Hint == HintConsolidate {
		t.Errorf("waiting requests: %+v", h)
	}
}

func TestPrecision(t *testing.T) {
	t.Parallel()
	tensor := func(v float64) *float64 { return &v }
	w := Workload{Namespace: "research", Kind: "Job", Name: "train", Usage: Usage{Allocated: 80, Active: 72}, PeakActivity: 0.95, PeakMemoryBytes: 60 * gib, MemoryTotalBytes: 80 * gib}
	w.finish()
	w.TensorActive = tensor(0.01)
	h, ok := hintFor(w, hintCfg)
	if !ok || h.Hint != HintPrecision {
		t.Fatalf("hint %+v, want precision", h)
	}
	approx(t, "frees", h.FreesGPUHours, 40)
	approx(t, "tensor", h.Arithmetic["tensor_active_ratio"], 0.01)
	for _, tt := range []struct {
		name   string
		tensor *float64
		active float64
	}{{"tensor cores busy", tensor(0.4), 72}, {"not busy", tensor(0.01), 20}, {"no GPM", nil, 72}} {
		x := w
		x.TensorActive, x.Active = tt.tensor, tt.active
		x.finish()
		if h, _ := hintFor(x, hintCfg); h.Hint == HintPrecision {
			t.Errorf("%s: %+v", tt.name, h)
		}
	}
}

// TestEnginesFold: engine series of two pods of one Deployment, joined to
// the workload by namespace and pod; V1 and V0 names both read; tokens per
// allocated and per active GPU-hour, over all hours and at peak.
func TestEnginesFold(t *testing.T) {
	t.Parallel()
	g := grid{start: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), step: time.Hour, n: 4}
	peak := []float64{1, 1, 0, 0}
	m := func(kv ...string) model.Metric {
		out := model.Metric{}
		for i := 0; i+1 < len(kv); i += 2 {
			out[model.LabelName(kv[i])] = model.LabelValue(kv[i+1])
		}
		return out
	}
	nan := math.NaN()
	wl := []string{"namespace", "chat", "workload_kind", "Deployment", "workload", "llama", "model", "llama"}
	ei := engineInput{
		kv: []series{
			{m("namespace", "chat", "pod", "a", "engine_kind", "vllm", "model_name", "meta-llama/Llama-3.1-8B"), []float64{0.1, 0.3, 0.2, nan}},
			{m("namespace", "chat", "pod", "b", "engine_kind", "vllm", "model_name", "meta-llama/Llama-3.1-8B"), []float64{0.2, 0.1, nan, nan}},
			{m("namespace", "other", "pod", "c", "engine_kind", "sglang"), []float64{0.9, 0.9, 0.9, 0.9}}, // on no gpuxray node
		},
		tokens: []series{
			{m("namespace", "chat", "pod", "a", "engine_kind", "vllm"), []float64{3600, 7200, 3600, nan}},
			{m("namespace", "chat", "pod", "b", "engine_kind", "vllm"), []float64{3600, 3600, nan, nan}},
		},
		waiting: []series{{m("namespace", "chat", "pod", "a"), []float64{0, 2, 0, nan}}},
		allocated: []series{
			{m(append(wl, "pod", "a", "window", "peak")...), []float64{3600, 3600, nan, nan}},
			{m(append(wl, "pod", "a", "window", "offpeak")...), []float64{nan, nan, 3600, nan}},
			{m(append(wl, "pod", "b", "window", "peak")...), []float64{3600, 3600, nan, nan}},
		},
		active: []series{
			{m(append(wl, "pod", "a", "window", "peak")...), []float64{1800, 3600, nan, nan}},
			{m(append(wl, "pod", "a", "window", "offpeak")...), []float64{nan, nan, 360, nan}},
			{m(append(wl, "pod", "b", "window", "peak")...), []float64{360, 360, nan, nan}},
		},
	}
	out := engines(ei, g, peak)
	if len(out) != 1 {
		t.Fatalf("%d workloads, want 1 (pod c holds no GPU)", len(out))
	}
	e := out[wlKey{"chat", "Deployment", "llama", "llama"}]
	if e == nil || e.Pods != 2 || e.MaxReplicas != 2 || e.GPUsPerPod != 1 || e.MaxWaiting != 2 || !e.KVKnown || !e.TokensKnown {
		t.Fatalf("engine use %+v", e)
	}
	approx(t, "peak kv", e.PeakKVCacheUsage, 0.3)
	approx(t, "tokens", e.Tokens, 21600)
	approx(t, "peak tokens", e.PeakTokens, 18000)
	approx(t, "allocated", e.AllocatedGPUHours, 5)
	approx(t, "peak allocated", e.PeakAllocatedGPUHours, 4)
	approx(t, "active", e.ActiveGPUHours, 1.8)
	// Step 1: a carries max(0.3, 1) = 1, b max(0.1, 0.1) = 0.1.
	approx(t, "peak load", e.PeakLoadGPUs, 1.1)
	all, pk := e.TokensPerGPUHour()
	approx(t, "tokens per GPU-hour", *all, 21600.0/5)
	approx(t, "peak tokens per GPU-hour", *pk, 18000.0/4)
	act, _ := e.TokensPerActiveGPUHour()
	approx(t, "tokens per active GPU-hour", *act, 21600/1.8)
	var none *EngineUse
	if a, p := none.TokensPerGPUHour(); a != nil || p != nil {
		t.Error("no engine: tokens per GPU-hour not nil")
	}
}
