package report

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

func approx(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-9 {
		t.Errorf("%s = %g, want %g", what, got, want)
	}
}

func TestQuantile(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		q    float64
		want float64
	}{
		{nil, 0.95, 0},
		{[]float64{3}, 0.95, 3},
		{[]float64{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5}, 0.95, 0}, // one step in 20 is 5%
		{[]float64{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 5}, 0.95, 5},
		{[]float64{4, 1, 3, 2}, 0.5, 2},
		{[]float64{4, 1, 3, 2}, 1, 4},
	} {
		t.Run(fmt.Sprintf("q%g of %v", c.q, c.xs), func(t *testing.T) {
			approx(t, "quantile", Quantile(c.xs, c.q), c.want)
		})
	}
}

func TestSetAgainstAndDecide(t *testing.T) {
	// Hour steps. Peak is 4 hours: two with 2 GPUs pending while 5 are
	// reclaimable, two with 6 pending while 1 is; off-peak demand is ignored.
	steps := []DemandStep{
		{Hours: 1, Peak: 0, Pending: 9, IdleAllocated: 0},
		{Hours: 1, Peak: 1, Pending: 2, IdleAllocated: 3, Unallocated: 2.5, UnallocatedActive: 0.5},
		{Hours: 1, Peak: 1, Pending: 2, IdleAllocated: 3, Unallocated: 2},
		{Hours: 1, Peak: 1, Pending: 6, IdleAllocated: 1},
		{Hours: 1, Peak: 1, Pending: 6, IdleAllocated: 1},
		// A peak step without data weighs nothing.
		{Hours: 0, Peak: 1, Pending: 20},
	}
	d := SetAgainst(steps, 0.95, true)
	approx(t, "peak hours", d.PeakHours, 4)
	approx(t, "pending GPU-hours", d.PendingGPUHours, 16)
	approx(t, "reclaimable GPU-hours", d.ReclaimableGPUHours, 12)
	approx(t, "idle allocated GPU-hours", d.IdleAllocatedGPUHours, 8)
	approx(t, "unallocated GPU-hours", d.UnallocatedGPUHours, 4.5)
	approx(t, "busy unallocated GPU-hours", d.UnallocatedActiveGPUHours, 0.5)
	approx(t, "covered", d.CoveredGPUHours, 2+2+1+1)
	approx(t, "shortfall", d.ShortfallGPUHours, 10)
	approx(t, "pending GPUs", d.PendingGPUs, 4)
	approx(t, "reclaimable GPUs", d.ReclaimableGPUs, 3)
	approx(t, "shortfall GPUs", d.ShortfallGPUs, 5)
	approx(t, "max pending", d.MaxPendingGPUs, 6)
	v := Decide(d)
	if v.Kind != VerdictShort || v.GPUsShort != 5 {
		t.Fatalf("verdict %s, %d short; want short by 5", v.Kind, v.GPUsShort)
	}
	if want := "After reclaiming 3.0 GPUs at peak, peak demand (4.0 GPUs pending) still exceeds capacity by 5 GPUs."; v.Sentence != want {
		t.Errorf("sentence %q, want %q", v.Sentence, want)
	}
	for _, want := range []string{"idle allocated 8.0 + unallocated 4.5 − busy unallocated 0.50 = 12 GPU-h over 4h of peak time = 3.00 GPUs",
		"16 GPU-h over 4h of peak time = 4.00 GPUs (at most 6 at once)", "6.0 GPU-h of that demand fit in reclaimable GPUs, 10 GPU-h did not", "95th percentile of peak time: 5.00 GPUs → 5 GPUs short"} {
		if !strings.Contains(strings.Join(v.Arithmetic, "\n"), want) {
			t.Errorf("arithmetic lacks %q:\n%s", want, strings.Join(v.Arithmetic, "\n"))
		}
	}
}

func TestDecide(t *testing.T) {
	for _, c := range []struct {
		name  string
		d     Demand
		kind  string
		short int
		says  string
	}{
		{"covered", Demand{Available: true, PendingGPUs: 1.33, ReclaimableGPUs: 4.27, Quantile: 0.95}, VerdictFixFirst, 0,
			"Reclaimable capacity at peak (4.3 GPUs) covers pending demand (1.3 GPUs): fix idle allocation and scheduling first."},
		{"noise under a tenth of a GPU rounds down", Demand{Available: true, ShortfallGPUs: 2.05, Quantile: 0.95}, VerdictShort, 2, "by 2 GPUs"},
		{"a fraction of a GPU over is one more", Demand{Available: true, ShortfallGPUs: 0.4, Quantile: 0.9}, VerdictShort, 1, "by 1 GPU."},
		{"tiny shortfall is none", Demand{Available: true, ReclaimableGPUs: 1, ShortfallGPUs: 0.08, Quantile: 0.95}, VerdictFixFirst, 0, "covers"},
		{"no kube-state-metrics", Demand{ReclaimableGPUs: 2}, VerdictNoDemandData, 0, "pending demand is unknown"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := Decide(c.d)
			if v.Kind != c.kind || v.GPUsShort != c.short || !strings.Contains(v.Sentence, c.says) {
				t.Errorf("got %s, %d short, %q; want %s, %d, containing %q", v.Kind, v.GPUsShort, v.Sentence, c.kind, c.short, c.says)
			}
		})
	}
}

func TestFunnel(t *testing.T) {
	f := Funnel{Hours: 24, Owned: 144, Allocated: 96, Active: 48}
	approx(t, "owned GPUs", f.GPUs(f.Owned), 6)
	approx(t, "efficiency", f.Efficiency(), 0.5)
	approx(t, "empty efficiency", Funnel{}.Efficiency(), 0)
}

func TestWorkloadsAndHints(t *testing.T) {
	const gib = 1 << 30
	ws := []Workload{
		{Namespace: "a", Name: "train", Model: "llama3", Usage: Usage{Allocated: 48, Active: 40, PeakIdle: 2, Idle: 3, LongestIdleStreakSeconds: 3600}, PeakActivity: 0.9, PeakMemoryBytes: 60 * gib, MemoryTotalBytes: 80 * gib},
		{Namespace: "b", Name: "notebook", Usage: Usage{Allocated: 24, Idle: 24, PeakIdle: 9, LongestIdleStreakSeconds: 86400}, PeakActivity: 0, PeakMemoryBytes: 8 * gib, MemoryTotalBytes: 80 * gib},
		// vLLM reserved 70 GiB up front; its own series say a fifth of
		// its KV cache was ever used (TestEngineMemory).
		{Namespace: "c", Name: "vllm", Model: "mistral", Usage: Usage{Allocated: 24, Active: 3.6}, PeakActivity: 0.15, PeakMemoryBytes: 70 * gib, MemoryTotalBytes: 80 * gib,
			Work: Work{Engine: &EngineUse{Kinds: []string{EngineVLLM}, Models: []string{"mistralai/Mistral-7B-Instruct-v0.3"}, KVKnown: true, PeakKVCacheUsage: 0.2, GPUsPerPod: 1}}},
		{Namespace: "d", Name: "embed", Model: "llama3", Usage: Usage{Allocated: 10, Active: 2, PeakIdle: 2, Idle: 1}, PeakActivity: 0.25, PeakMemoryBytes: 15 * gib, MemoryTotalBytes: 80 * gib},
	}
	for i := range ws {
		ws[i].finish()
	}
	top := TopByPeakIdle(ws, 3)
	if got := []string{top[0].ID(), top[1].ID(), top[2].ID()}; strings.Join(got, " ") != "b/notebook a/train d/embed" {
		t.Errorf("top = %v", got)
	}
	ms := Models(ws, 10)
	if ms[0].Model != "(unknown)" || ms[1].Model != "llama3" || ms[1].Workloads != 2 {
		t.Fatalf("models %+v", ms)
	}
	approx(t, "llama3 idle at peak", ms[1].PeakIdle, 4)
	approx(t, "llama3 efficiency", ms[1].Efficiency, 42.0/58)
	approx(t, "llama3 streak", ms[1].LongestIdleStreakSeconds, 3600)

	// One hint a workload, the one that matters (TestHintPrecedence).
	got := map[string]string{}
	for _, h := range Hints(withGPU(ws, h100), HintConfig{ActivityThreshold: 0.2, MemoryBound: 0.5, Headroom: 1.1}) {
		got[h.Namespace+"/"+h.Name+" "+h.Hint] = h.Profile
	}
	want := map[string]string{
		"b/notebook mig": "1g.10gb",
		// Not memory_bound: 70 GiB is vLLM's reservation. It needs 7B × 2
		// bytes of weights + 2 GiB + a fifth of the 55 GiB KV cache = 26 GiB,
		// × 1.1 fits 3g.40gb.
		"c/vllm mig": "3g.40gb",
		// 15 GiB × 1.1 needs 2 memory slices, 0.25 × 1.1 two of seven compute slices.
		"d/embed mig": "2g.20gb",
	}
	for k, p := range want {
		if gp, ok := got[k]; !ok || gp != p {
			t.Errorf("hint %s: got %q (present %v), want %q", k, gp, ok, p)
		}
	}
	if len(got) != len(want) {
		t.Errorf("hints %v, want %v", got, want)
	}
}

const h100 = "NVIDIA H100 80GB HBM3"

func withGPU(ws []Workload, name string) []Workload {
	out := slices.Clone(ws)
	for i := range out {
		out[i].GPUNames = []string{name}
	}
	return out
}

// TestHintPrecedence: each workload gets one right-sizing hint, the first
// that applies of: a MIG slice it fits (on a GPU with MIG), memory-bound,
// share the GPU (unless it already shares one), low activity.
func TestHintPrecedence(t *testing.T) {
	const gib = 1 << 30
	c := HintConfig{ActivityThreshold: 0.2, MemoryBound: 0.5, Headroom: 1.1}
	idle := Usage{Allocated: 24, Idle: 24}
	for _, tc := range []struct {
		name string
		w    Workload
		c    HintConfig
		want string // hint kind, "" for none
	}{
		{"fits a slice, could share, low activity: the slice", Workload{Usage: idle, PeakMemoryBytes: 8 * gib, MemoryTotalBytes: 80 * gib, GPUNames: []string{h100}}, c, HintMIG},
		{"fits a slice and memory-bound at a low bound: the slice", Workload{Usage: Usage{Allocated: 24, Active: 1}, PeakActivity: 0.1, PeakMemoryBytes: 30 * gib, MemoryTotalBytes: 80 * gib, GPUNames: []string{h100}},
			HintConfig{ActivityThreshold: 0.2, MemoryBound: 0.3, Headroom: 1.1}, HintMIG},
		{"memory-bound and low activity: memory-bound", Workload{Usage: Usage{Allocated: 24, Active: 3.6}, PeakActivity: 0.15, PeakMemoryBytes: 70 * gib, MemoryTotalBytes: 80 * gib, GPUNames: []string{h100}}, c, HintMemoryBound},
		{"no MIG on an L4: share it", Workload{Usage: idle, PeakActivity: 0.1, PeakMemoryBytes: 4 * gib, MemoryTotalBytes: 24 * gib, GPUNames: []string{"NVIDIA L4"}}, c, HintShared},
		{"GPU unknown: no slice, share it", Workload{Usage: idle, PeakMemoryBytes: 4 * gib, MemoryTotalBytes: 24 * gib}, c, HintShared},
		{"already on a shared GPU: not told to share it", Workload{Usage: idle, PeakActivity: 0.1, PeakMemoryBytes: 4 * gib, MemoryTotalBytes: 24 * gib, GPUNames: []string{"NVIDIA L4"}, SharedGPU: true}, c, HintLowActivity},
		{"already shared, busy: nothing", Workload{Usage: Usage{Allocated: 24, Active: 8}, PeakActivity: 0.4, PeakMemoryBytes: 4 * gib, MemoryTotalBytes: 24 * gib, GPUNames: []string{"NVIDIA L4"}, SharedGPU: true}, c, ""},
		{"already shared on an H100, fits a slice: the slice", Workload{Usage: idle, PeakMemoryBytes: 4 * gib, MemoryTotalBytes: 80 * gib, GPUNames: []string{h100}, SharedGPU: true}, c, HintMIG},
		{"a MIG instance (memory unknown), idle: low activity", Workload{Usage: idle}, c, HintLowActivity},
		{"busy and big: nothing", Workload{Usage: Usage{Allocated: 24, Active: 20}, PeakActivity: 0.9, PeakMemoryBytes: 60 * gib, MemoryTotalBytes: 80 * gib, GPUNames: []string{h100}}, c, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.w.Namespace, tc.w.Name = "ns", "w"
			tc.w.finish()
			hs := Hints([]Workload{tc.w}, tc.c)
			var kinds []string
			for _, h := range hs {
				kinds = append(kinds, h.Hint)
			}
			if tc.want == "" && len(hs) != 0 || tc.want != "" && (len(hs) != 1 || hs[0].Hint != tc.want) {
				t.Errorf("hints %v, want [%s]", kinds, tc.want)
			}
			for _, h := range hs {
				if tc.w.SharedGPU && strings.Contains(h.Message, "share the GPU") {
					t.Errorf("a workload on a shared GPU is told: %s", h.Message)
				}
			}
		})
	}
}

func TestMIGCapable(t *testing.T) {
	for name, want := range map[string]bool{
		"NVIDIA A100-SXM4-80GB": true, "NVIDIA H100 80GB HBM3": true, "NVIDIA H200": true, "NVIDIA GH200 480GB": true,
		"NVIDIA B200": true, "NVIDIA H20": true, "NVIDIA A800 80GB PCIe": true, "NVIDIA H800": true,
		"NVIDIA L4": false, "Tesla T4": false, "NVIDIA A10G": false, "NVIDIA L40S": false, "NVIDIA A30": false, "": false,
	} {
		if got := migCapable([]string{name}); got != want {
			t.Errorf("migCapable(%q) = %v, want %v", name, got, want)
		}
	}
	if migCapable(nil) || migCapable([]string{h100, "NVIDIA L4"}) {
		t.Error("no GPU, or one without MIG among them, must not be MIG-capable")
	}
}

func TestMIGName(t *testing.T) {
	for _, c := range []struct {
		compute, memory int
		gib             float64
		want            string
	}{{1, 1, 80, "1g.10gb"}, {3, 4, 80, "3g.40gb"}, {2, 2, 141, "2g.35gb"}, {1, 1, 40, "1g.5gb"}} {
		t.Run(c.want, func(t *testing.T) {
			if got := migName(c.compute, c.memory, c.gib*(1<<30)); got != c.want {
				t.Errorf("migName(%d, %d, %g GiB) = %s, want %s", c.compute, c.memory, c.gib, got, c.want)
			}
		})
	}
}

// TestNoPeakTime: a range without peak time gives a verdict over all hours
// that says so, never "fix idle allocation first" about 0.0 GPUs at peak.
func TestNoPeakTime(t *testing.T) {
	steps := []DemandStep{
		{Hours: 1, Peak: 0, Pending: 1, IdleAllocated: 2, Unallocated: 1},
		{Hours: 1, Peak: 0, Pending: 3, IdleAllocated: 2, Unallocated: 1},
		{Hours: 0.5, Peak: 0, Pending: 0, IdleAllocated: 2, Unallocated: 1},
	}
	for _, available := range []bool{true, false} {
		d := SetAgainst(steps, 0.95, available)
		if d.Basis != BasisAll {
			t.Errorf("basis %q, want %q", d.Basis, BasisAll)
		}
		approx(t, "peak hours", d.PeakHours, 0)
		approx(t, "hours", d.Hours, 2.5)
		approx(t, "reclaimable GPUs", d.ReclaimableGPUs, 3)
		approx(t, "pending GPUs", d.PendingGPUs, 4/2.5)
		v := Decide(d)
		all := v.Sentence + "\n" + strings.Join(v.Arithmetic, "\n")
		if !strings.Contains(v.Sentence, "The range has no peak time; over all hours, ") || strings.Contains(all, "at peak") || strings.Contains(all, "0.0 GPUs") {
			t.Errorf("available %v: %q\n%s", available, v.Sentence, strings.Join(v.Arithmetic, "\n"))
		}
		if available && (v.Kind != VerdictFixFirst || !strings.Contains(v.Sentence, "reclaimable capacity (3.0 GPUs) covers pending demand (1.6 GPUs)")) {
			t.Errorf("verdict %s: %q", v.Kind, v.Sentence)
		}
	}
	// With peak time the verdict stays at peak.
	steps[1].Peak = 1
	if d := SetAgainst(steps, 0.95, true); d.Basis != BasisPeak || d.Hours != 1 || d.PeakHours != 1 {
		t.Errorf("one peak hour: basis %q over %gh (%gh peak), want peak over 1h", d.Basis, d.Hours, d.PeakHours)
	}
}

// TestNothingIdle: with nothing to reclaim the verdict does not tell anyone
// to fix idle allocation.
func TestNothingIdle(t *testing.T) {
	for _, d := range []Demand{
		{Basis: BasisPeak, Hours: 4, PeakHours: 4, Quantile: 0.95},
		{Basis: BasisPeak, Hours: 4, PeakHours: 4, Available: true, Quantile: 0.95, ReclaimableGPUs: 0.01},
	} {
		v := Decide(d)
		if strings.Contains(v.Sentence, "fix idle allocation") || !strings.Contains(strings.ToLower(v.Sentence), "nothing") {
			t.Errorf("%s: %q, want it to say nothing was idle", v.Kind, v.Sentence)
		}
	}
}
