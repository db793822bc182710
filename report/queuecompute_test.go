package report

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
)

// ser is a series of the given labels whose value at step i is v(i), NaN
// where v says ok false.
func ser(labels map[string]string, n int, v func(i int) (float64, bool)) series {
	m := model.Metric{}
	for k, x := range labels {
		m[model.LabelName(k)] = model.LabelValue(x)
	}
	s := series{labels: m, vals: make([]float64, n)}
	for i := range s.vals {
		x, ok := v(i)
		if !ok {
			x = math.NaN()
		}
		s.vals[i] = x
	}
	return s
}

func always(x float64) func(int) (float64, bool) { return func(int) (float64, bool) { return x, true } }

func steps(from, to int, x float64) func(int) (float64, bool) {
	return func(i int) (float64, bool) { return x, i >= from && i < to }
}

// TestComputeQueue: from the answers' labels the queue X-ray builds its
// waiters and supply: pods by the GPU type their node selector names, a
// suspended Kueue workload's pods all at once, the part of Kueue's pending
// GPUs no series explains as a waiter of its ClusterQueue, nodes by their
// GPUs' product; and it measures each waiter's wait and judges the
// --slo.wait targets.
//
// Six 10-minute steps, all peak. Node n1 has 3 free H100s, n2 10 free
// A100s. Waiting:
//   - ml/h, 1 GPU, selects H100, training, created 10m before the range,
//     waiting still at its end: free (n1);
//   - ml/x, 2 GPUs, selects a V100 (no such node), no class, steps 0-2,
//     created at the start: other type (the A100s);
//   - workload ml/job-w, two pods of 4 GPUs, A100s, LocalQueue team-a
//     (ClusterQueue research), priority 1000, created an hour before:
//     both on n2, held back by Kueue: quota;
//   - Kueue says research waits for 10 GPUs: 8 are job-w's, 2 a waiter of
//     research, held back from n1's free GPUs: quota.
func TestComputeQueue(t *testing.T) {
	t.Parallel()
	const n = 6
	start := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	g := grid{start: start, step: 10 * time.Minute, n: n}
	in := input{g: g, covered: []float64{600, 600, 600, 600, 600, 600}}
	in.demandCovered = in.covered
	peak := []float64{1, 1, 1, 1, 1, 1}
	pod := func(name string) map[string]string { return map[string]string{"namespace": "ml", "pod": name} }
	with := func(m map[string]string, k, v string) map[string]string {
		out := map[string]string{k: v}
		for a, b := range m {
			out[a] = b
		}
		return out
	}
	wl := map[string]string{"namespace": "ml", "workload": "job-w"}
	qi := queueInput{
		pods:     []series{ser(pod("h"), n, always(1)), ser(pod("x"), n, steps(0, 3, 2))},
		podClass: []series{ser(with(pod("h"), "priority_class", "training"), n, always(1)), ser(pod("x"), n, steps(0, 3, 1))},
		podType: []series{ser(with(pod("h"), "gpu_type", "NVIDIA-H100-80GB-HBM3"), n, always(1)),
			ser(with(pod("x"), "gpu_type", "NVIDIA-V100-SXM2-16GB-SHARED"), n, steps(0, 3, 1))},
		podCreated:  []series{ser(pod("h"), n, always(float64(start.Add(-10*time.Minute).Unix()))), ser(pod("x"), n, steps(0, 3, float64(start.Unix())))},
		workloads:   []series{ser(with(wl, "podset", "main"), n, always(8))},
		wlInfo:      []series{ser(with(with(wl, "queue", "team-a"), "priority_class", "training"), n, always(1))},
		wlPriority:  []series{ser(wl, n, always(1000))},
		wlPodSets:   []series{ser(with(with(wl, "podset", "main"), "gpu_type", "NVIDIA-A100-SXM4-40GB"), n, always(2))},
		wlCreated:   []series{ser(wl, n, always(float64(start.Add(-time.Hour).Unix())))},
		localQueues: []series{ser(map[string]string{"namespace": "ml", "local_queue": "team-a", "cluster_queue": "research"}, n, always(1))},
		classes:     []series{ser(map[string]string{"priority_class": "training"}, n, always(1000))},
		free: []series{ser(map[string]string{"job": "gpuxray", "instance": "n1", "name": "NVIDIA H100 80GB HBM3"}, n, always(3*600)),
			ser(map[string]string{"job": "gpuxray", "instance": "n2", "name": "NVIDIA A100-SXM4-40GB"}, n, always(10*600))},
		kueuePendingGPUs: []series{ser(map[string]string{"cluster_queue": "research"}, n, always(10))},
	}
	slo := map[string]time.Duration{"training": time.Hour, "*": 90 * time.Minute}
	q := computeQueue(in, qi, peak, queueConfig{top: 10, slo: slo, available: true})

	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-6 {
			t.Errorf("%s = %g, want %g", what, got, want)
		}
	}
	// An hour: h 1 GPU free; x 2 GPUs for half of it, other type; job-w 8
	// and research's other 2 held back by quota.
	f := q.All
	near("hours", f.Hours, 1)
	near("pending", f.PendingGPUHours, 1+1+8+2)
	near("free", f.FreeGPUHours, 1)
	near("quota", f.QuotaGPUHours, 10)
	near("other type", f.OtherTypeGPUHours, 1)
	near("shortfall", f.ShortfallGPUHours+f.FragmentedGPUHours+f.PreemptionGPUHours+f.OutrankedGPUHours, 0)
	if q.Kind != QueueScheduling || !strings.Contains(q.Sentence, "a quota problem (Kueue held it back while GPUs were free)") {
		t.Errorf("kind %s: %s", q.Kind, q.Sentence)
	}
	types := map[string]QueueGPUType{}
	for _, x := range q.GPUTypes {
		types[x.GPUType] = x
	}
	for name, want := range map[string][3]float64{ // pending, its part, idle
		"NVIDIA-H100-80GB-HBM3": {1, 1, 3},
		"NVIDIA-A100-SXM4-40GB": {8, 8, 10},
		"NVIDIA-V100-SXM2-16GB": {1, 1, 0},
		GPUTypeAny:              {2, 2, 0},
	} {
		x, ok := types[name]
		if !ok {
			t.Errorf("no GPU type %s in %v", name, q.GPUTypes)
			continue
		}
		part := map[string]float64{"NVIDIA-H100-80GB-HBM3": x.All.FreeGPUHours, "NVIDIA-A100-SXM4-40GB": x.All.QuotaGPUHours,
			"NVIDIA-V100-SXM2-16GB": x.All.OtherTypeGPUHours, GPUTypeAny: x.All.QuotaGPUHours}[name]
		near(name+" pending", x.All.PendingGPUHours, want[0])
		near(name+" served", part, want[1])
		near(name+" idle", x.IdleGPUHours, want[2])
	}
	classes := map[string]QueueClass{}
	for _, c := range q.Classes {
		classes[c.PriorityClass+"/"+c.Queue+"/"+c.ClusterQueue] = c
	}
	for k, want := range map[string]float64{"training//": 1, "training/team-a/research": 8, "//": 1, "//research": 2} {
		c, ok := classes[k]
		if !ok {
			t.Errorf("no class %s in %v", k, q.Classes)
			continue
		}
		near(k+" pending", c.All.PendingGPUHours, want)
	}
	if c := classes["training/team-a/research"]; c.Priority != 1000 {
		t.Errorf("job-w's class ranks %g, want its workload's priority 1000", c.Priority)
	}
	// Waits: x 30m; h 70m, still waiting; job-w 2h, still waiting. Kueue's
	// unexplained GPUs are no waiter with a wait.
	w := q.Wait
	if w.Pods != 3 || w.StillWaiting != 2 {
		t.Errorf("waits %+v, want 3 waiters, 2 still waiting", w)
	}
	near("mean wait", w.MeanSeconds, (30+70+120)*60/3.0)
	near("p50 wait", w.P50Seconds, 70*60)
	near("p95 wait", w.P95Seconds, 120*60)
	near("max wait", w.MaxSeconds, 120*60)
	if w.SLOSeconds == nil || *w.SLOSeconds != 90*60 || w.SLOMet == nil || *w.SLOMet {
		t.Errorf("overall SLO %v %v, want 90m, missed", w.SLOSeconds, w.SLOMet)
	}
	if x := types["NVIDIA-V100-SXM2-16GB"].Wait; x.Pods != 1 || x.P95Seconds != 30*60 {
		t.Errorf("V100 waits %+v, want one of 30m", x)
	}
	// Targets: training (h, job-w) misses 1h at p95 2h, and reclaiming
	// would have run all of its waiting; pods of no class keep to "*".
	if len(q.SLO) != 2 {
		t.Fatalf("SLOs %+v, want training and no class", q.SLO)
	}
	tr, none := q.SLO[0], q.SLO[1]
	if tr.PriorityClass != "training" || tr.Met || tr.Target != "training" || tr.Wait.P95Seconds != 7200 || math.Abs(tr.PendingGPUHours-9) > 1e-9 || math.Abs(tr.OnOneNodeGPUHours-9) > 1e-9 {
		t.Errorf("training SLO %+v", tr)
	}
	if !strings.Contains(tr.Sentence, "training: p95 wait 2h over 2 waiters (target 1h): missed, 2 still waiting at the end; reclaiming the free and idle GPUs of its type on one node could have run 100% of its waiting") {
		t.Errorf("training SLO sentence %q", tr.Sentence)
	}
	if none.PriorityClass != "" || !none.Met || none.Target != "*" || none.TargetSeconds != 5400 {
		t.Errorf("no-class SLO %+v", none)
	}

	// The verdict by type: the V100 waiting had no V100 for half the
	// time: 2 short; the queue's quota problem is said to be the rest.
	stepsIn := make([]DemandStep, n)
	for i := range stepsIn {
		stepsIn[i] = DemandStep{Hours: 1.0 / 6, Peak: 1}
	}
	d, v := judge(stepsIn, q, 0.95, true)
	near("demand pending", d.PendingGPUHours, 12)
	near("demand shortfall", d.ShortfallGPUHours, 1)
	if v.Kind != VerdictShort || v.GPUsShort != 2 {
		t.Errorf("verdict %s, %d short, want short, 2: %s", v.Kind, v.GPUsShort, v.Sentence)
	}
	for _, want := range []string{"NVIDIA-V100-SXM2-16GB is 2 GPUs short (for 50% of peak time its waiting found no free or idle GPU of its type: buy NVIDIA-V100-SXM2-16GB GPUs)",
		"The rest of the time it fits: 92% of the waiting at peak could have run on free or idle GPUs of its type (scheduling, see the queue); fix that first, then buy."} {
		if !strings.Contains(v.Sentence, want) {
			t.Errorf("verdict lacks %q: %s", want, v.Sentence)
		}
	}

	// Text, HTML and JSON carry the waits, the targets and the types.
	r := &Report{Range: Range{Timezone: "UTC"}, Queue: q, Verdict: v}
	var b strings.Builder
	if err := WriteText(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"waits: 3 waiters: mean 1h13m, p50 1h10m, p95 2h, max 2h (2 still waiting at the end)", "  SLO training: p95 wait 2h",
		"NVIDIA-V100-SXM2-16GB", "only on idle GPUs of another type", "cluster queue", "research"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	if err := WriteHTML(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`id="queue-waits"`, `<ul id="queue-slo"><li class="warn">training: p95 wait 2h`, `<table id="queue-types">`, "NVIDIA-A100-SXM4-40GB"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("HTML lacks %q", want)
		}
	}
	b.Reset()
	if err := WriteJSON(&b, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"fragmented_gpu_hours": 0`, `"other_type_gpu_hours": 1`, `"gpu_type": "any"`, `"p95_seconds": 7200`, `"slo_seconds": 5400`, `"slo_met": false`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("JSON lacks %q", want)
		}
	}
}
