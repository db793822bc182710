package fleet

import (
	"math"
	"testing"
	"time"

	"github.com/gpuxray/gpuxray/agent"
	"github.com/gpuxray/gpuxray/collector/sim"
)

const truthScenario = `start: 2026-11-23T08:00:00Z
duration: 3h
node: t
system: dgxh100
gpus: 3
pods:
  - {namespace: ml, name: a-0, owner: {kind: Job, name: a}, devices: ["gpu:0", "gpu:1"], from: 10m, to: 2h,
     util: [{at: 10m, value: 0.8}, {at: 1h, value: 0}, {at: 1h30m, value: 0.5}]}
  - {namespace: ml, name: b-0, owner: {kind: ReplicaSet, name: b-5f6c8d9b4z}, labels: {pod-template-hash: 5f6c8d9b4z, model: m},
     devices: ["gpu:2"], util: {duty: {period: 4s, busy: 1s, value: 0.9}}}
unallocated:
  - {device: "gpu:0", at: 2h30m, value: 0.4}
`

func parse(t *testing.T, y string) *sim.Scenario {
	t.Helper()
	sc, err := sim.ParseScenario([]byte(y), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(1, math.Abs(b)) }

// TestTrutherAddsUp: the truth of the whole scenario is GPUTruth's and
// Truth's, and spans add up to it whatever the cuts.
func TestTrutherAddsUp(t *testing.T) {
	t.Parallel()
	sc := parse(t, truthScenario)
	tr := newTruther(sc)
	whole := tr.cumulative(sc.Duration)
	var alloc, idle float64
	for _, g := range sc.GPUTruth(idleThreshold) {
		alloc += g.AllocatedSeconds
		idle += g.AllocatedIdleSeconds
	}
	if !near(whole.Allocated, alloc) || !near(whole.AllocIdle, idle) {
		t.Errorf("cumulative at the end: allocated %g idle %g, want GPUTruth's %g %g", whole.Allocated, whole.AllocIdle, alloc, idle)
	}
	var podAlloc float64
	for _, r := range sc.Truth(idleThreshold) {
		podAlloc += r.AllocatedSeconds
	}
	if p := whole.pods(); !near(p.Allocated, podAlloc) {
		t.Errorf("pod-seconds %g, want Truth's %g", p.Allocated, podAlloc)
	}
	if w := whole.Work[wkey{"ml", "Deployment", "b", "m"}]; !near(w.Allocated, 3*3600) {
		t.Errorf("workload b (Deployment of ReplicaSet b-5f6c8d9b4z): %+v, want 3h allocated", w)
	}
	sched, _ := agent.ParseSchedule(agent.DefaultPeakSchedule, time.UTC)
	sum := newTotals()
	for _, cut := range [][2]time.Duration{{0, 37 * time.Minute}, {37 * time.Minute, time.Hour + 17*time.Second}, {time.Hour + 17*time.Second, 3 * time.Hour}} {
		pk, op := tr.span(cut[0], cut[1], sched)
		sum.add(pk, 1, nil)
		sum.add(op, 1, nil)
	}
	for name, p := range map[string][2]float64{
		"observed": {sum.Observed, whole.Observed}, "allocated": {sum.Allocated, whole.Allocated},
		"idle": {sum.AllocIdle, whole.AllocIdle}, "active": {sum.AllocActive, whole.AllocActive},
		"unallocated active": {sum.UnallocActive, whole.UnallocActive}, "pod idle": {sum.pods().Idle, whole.pods().Idle},
	} {
		if !near(p[0], p[1]) {
			t.Errorf("%s: spans add up to %g, want %g", name, p[0], p[1])
		}
	}
	// 08:00-11:00 under Mon-Fri 09:00-18:00: two hours of peak.
	pk, op := tr.span(0, sc.Duration, sched)
	if !near(pk.Observed, 2*3600*3) || !near(op.Observed, 3600*3) {
		t.Errorf("observed at peak %g, off-peak %g; want 2 and 1 hours of 3 GPUs", pk.Observed, op.Observed)
	}
}

func TestWindowSplit(t *testing.T) {
	t.Parallel()
	sched, _ := agent.ParseSchedule(agent.DefaultPeakSchedule, time.UTC)
	start := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC) // a Monday
	got := windowSplit(start, 58*time.Minute+30*time.Second, 62*time.Minute, sched)
	want := []piece{{58*time.Minute + 30*time.Second, time.Hour, false}, {time.Hour, 62 * time.Minute, true}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("windowSplit across 09:00 = %+v, want %+v", got, want)
	}
	if got := windowSplit(start, 0, 30*time.Minute, sched); len(got) != 1 || got[0].peak {
		t.Errorf("08:00-08:30 = %+v, want one off-peak piece", got)
	}
}

func TestStreakAt(t *testing.T) {
	t.Parallel()
	sc := parse(t, truthScenario)
	a, b := sc.Pods[0], sc.Pods[1]
	for _, c := range []struct {
		name string
		p    sim.Pod
		at   time.Duration
		want time.Duration
	}{
		{"busy", a, 30 * time.Minute, 0},
		{"idle since 1h", a, 80 * time.Minute, 20 * time.Minute},
		{"just before busy again", a, 90 * time.Minute, 30 * time.Minute},
		{"busy again", a, 100 * time.Minute, 0},
		{"before it starts", a, 5 * time.Minute, 0},
		{"in a burst", b, 10*time.Minute + 500*time.Millisecond, 0},
		{"between bursts", b, 10*time.Minute + 2500*time.Millisecond, 1500 * time.Millisecond},
		{"at a burst's start", b, 10*time.Minute + 4*time.Second, 3 * time.Second},
	} {
		if got := streakAt(c.p, c.at); got != c.want {
			t.Errorf("%s: streak at %s = %s, want %s", c.name, c.at, got, c.want)
		}
	}
}

// TestAsPolled: pods move half a poll earlier on whole GPUs, a whole poll
// on MIG instances; none moves before the start.
func TestAsPolled(t *testing.T) {
	t.Parallel()
	sc := parse(t, `start: 2026-11-23T08:00:00Z
duration: 1h
system: dgxh100
gpus: 2
mig:
  "gpu:1": [7g.80gb]
pods:
  - {namespace: ml, name: a-0, devices: ["gpu:0"], from: 10m, to: 20m}
  - {namespace: ml, name: b-0, devices: ["mig:1/0"], from: 10m, to: 20m}
  - {namespace: ml, name: c-0, devices: ["gpu:0"], from: 30m}
`)
	p := asPolled(sc, 15*time.Second).Pods
	for i, want := range [][2]time.Duration{
		{10*time.Minute - 7500*time.Millisecond, 20*time.Minute - 7500*time.Millisecond},
		{10*time.Minute - 15*time.Second, 20*time.Minute - 15*time.Second},
		{30*time.Minute - 7500*time.Millisecond, time.Hour - 7500*time.Millisecond},
	} {
		if p[i].From != want[0] || p[i].To != want[1] {
			t.Errorf("pod %d as polled: [%s, %s), want [%s, %s)", i, p[i].From, p[i].To, want[0], want[1])
		}
	}
	if sc.Pods[0].From != 10*time.Minute {
		t.Error("asPolled changed the scenario it was given")
	}
}

// TestYoungSeries: as MetricsQL reads them, the series of a pod that starts
// inside a rate's window count its GPUs over their own samples, where the
// mean over the window counts them for the part of it the pod held them;
// a series with one sample in the window counts nothing.
func TestYoungSeries(t *testing.T) {
	t.Parallel()
	sc := parse(t, truthScenario) // a-0: 2 GPUs from 10m; b-0: 1 GPU throughout
	sched, _ := agent.ParseSchedule(agent.DefaultPeakSchedule, time.UTC)
	l := &liveRun{agents: []*liveAgent{{scenario: sc}}, poll: time.Second, scrape: 15 * time.Second, sched: sched}
	trs := []*truther{newTruther(sc)}
	cluster := recorded{name: "cluster_window:gpuxray_allocated_seconds:rate5m", labels: map[string]string{"window": "offpeak"}}
	job := recorded{name: "namespace_workload_model_window:gpuxray_allocated_seconds:rate5m",
		labels: map[string]string{"namespace": "ml", "workload_kind": "Job", "workload": "a", "model": "", "window": "offpeak"}}
	device := recorded{name: "cluster_window:gpuxray_device_allocated_seconds:rate5m", labels: map[string]string{"window": "offpeak"}}
	at := func(d time.Duration) time.Time { return sc.Start.Add(d) }
	for _, c := range []struct {
		name      string
		r         recorded
		from, to  time.Duration
		mean, mql float64
	}{
		// 08:08-08:13, off-peak: a-0 holds its 2 GPUs for 3 of the 5
		// minutes; its first sample is at 10m8.5s.
		{"cluster", cluster, 8 * time.Minute, 13 * time.Minute, 1 + 2*3.0/5, 3},
		{"workload", job, 8 * time.Minute, 13 * time.Minute, 2 * 3.0 / 5, 2},
		// The devices' series are as old as the node: no difference.
		{"device", device, 8 * time.Minute, 13 * time.Minute, 1 + 2*3.0/5, 1 + 2*3.0/5},
		// One sample of a-0 in the window: no rate.
		{"one sample", cluster, 5*time.Minute + 10*time.Second, 10*time.Minute + 10*time.Second, 1 + 2*10.0/300, 1},
		// a-0 older than the window: no difference.
		{"old", cluster, 20 * time.Minute, 25 * time.Minute, 3, 3},
		// A workload's series 51.5 s old, under a minute of 1 s polls: too
		// young to judge alone; the cluster's sum reads it.
		{"workload too young", job, 6 * time.Minute, 11 * time.Minute, 2 * 1.0 / 5, math.NaN()},
		{"cluster with it", cluster, 6 * time.Minute, 11 * time.Minute, 1 + 2*1.0/5, 3},
	} {
		mean := l.truthOf(trs, c.r, at(c.from), at(c.to), false)
		mql := l.truthOf(trs, c.r, at(c.from), at(c.to), true)
		if !near(mean, c.mean) || !(near(mql, c.mql) || math.IsNaN(mql) && math.IsNaN(c.mql)) {
			t.Errorf("%s: mean over the window %g (want %g), as MetricsQL reads it %g (want %g)", c.name, mean, c.mean, mql, c.mql)
		}
	}
}

// TestIdleByTypeTruth: the truth of gpu_type:gpuxray_idle_gpus:rate5m is
// the free or idle GPUs not in MIG mode of the nodes of the type, and of
// all of them for "any": a GPU in MIG mode takes no pod that asks for a
// whole GPU.
func TestIdleByTypeTruth(t *testing.T) {
	t.Parallel()
	h := parse(t, `start: 2026-11-23T08:00:00Z
duration: 1h
node: h
system: dgxh100
gpus: 3
mig:
  "gpu:2": [7g.80gb]
pods:
  - {namespace: ml, name: a-0, devices: ["gpu:0"], util: [{at: 0s, value: 0.9}]}
  - {namespace: ml, name: nb-0, devices: ["mig:2/0"]}
`)
	a := parse(t, `start: 2026-11-23T08:00:00Z
duration: 1h
node: a
system: dgxa100
gpus: 2
pods:
  - {namespace: ml, name: nb-1, devices: ["gpu:0"]}
`)
	sched, _ := agent.ParseSchedule(agent.DefaultPeakSchedule, time.UTC)
	l := &liveRun{agents: []*liveAgent{{scenario: h}, {scenario: a}}, poll: time.Second, scrape: 15 * time.Second, sched: sched}
	trs := []*truther{newTruther(h), newTruther(a)}
	at := func(d time.Duration) time.Time { return h.Start.Add(d) }
	// h: gpu:1 free (gpu:0 busy, gpu:2 in MIG mode, idle but no whole
	// GPU); a: gpu:0 held idle, gpu:1 free.
	for typ, want := range map[string]float64{"NVIDIA-H100-80GB-HBM3": 1, "NVIDIA-A100-SXM4-40GB": 2, "any": 3} {
		r := recorded{name: "gpu_type:gpuxray_idle_gpus:rate5m", labels: map[string]string{"gpu_type": typ}}
		if got := l.truthOf(trs, r, at(20*time.Minute), at(25*time.Minute), false); math.Abs(got-want) > 1e-9 {
			t.Errorf("%s: %g idle or free GPUs, want %g", typ, got, want)
		}
	}
}

// TestStaleAt: an evaluation is not judged when a scrape of a target it
// sums failed at most its lag and a scrape before it (the engine may have
// read that target's series as stale, and left them out); a failed scrape
// older than that, or of another target, changes nothing.
func TestStaleAt(t *testing.T) {
	t.Parallel()
	sc := parse(t, truthScenario)
	t0 := sc.Start.Add(time.Hour)
	l := &liveRun{agents: []*liveAgent{{node: &Node{Name: "n1"}, scenario: sc}, {node: &Node{Name: "n2"}, scenario: sc}},
		scrape: 5 * time.Second, ksm: []string{"127.0.0.1:9"},
		failedScrapes: map[string][]time.Time{"n1": {t0}, "127.0.0.1:9": {t0.Add(time.Minute)}}}
	cluster := recorded{name: "cluster_window:gpuxray_allocated_seconds:rate5m"}
	job := recorded{name: "namespace_workload_model_window:gpuxray_allocated_seconds:rate5m",
		labels: map[string]string{"namespace": "ml", "workload_kind": "Job", "workload": "a", "model": ""}}
	other := recorded{name: job.name, labels: map[string]string{"namespace": "ml", "workload_kind": "Job", "workload": "nobody", "model": ""}}
	pending := recorded{name: "cluster:kube_pod_container_resource_requests_gpu_pending:sum"}
	for _, c := range []struct {
		name string
		r    recorded
		at   time.Duration
		want bool
	}{
		{"at the failed scrape", cluster, 0, true},
		{"a lag and a scrape after it", cluster, time.Minute + 5*time.Second, true},
		{"later: inside the window only", cluster, time.Minute + 6*time.Second, false},
		{"before it", cluster, -time.Second, false},
		{"a workload on the node", job, 30 * time.Second, true},
		{"a workload on no node", other, 30 * time.Second, false},
		{"pending demand: kube-state-metrics' scrape", pending, 90 * time.Second, true},
		{"pending demand: a node's failed scrape", pending, 0, false},
	} {
		if got := l.staleAt(l.targetsOf(c.r), t0.Add(c.at), time.Minute); got != c.want {
			t.Errorf("%s: stale %v, want %v", c.name, got, c.want)
		}
	}
}

// TestJudgedFrom: from the first evaluation judged, every window the
// engine may have read is at least minWindow long, and a workload's at
// least workloadWindow.
func TestJudgedFrom(t *testing.T) {
	t.Parallel()
	for _, poll := range []time.Duration{time.Second, 5 * time.Second} {
		l := &liveRun{targetsAt: time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC), poll: poll, scrape: 5 * time.Second, eval: 15 * time.Second}
		for _, derived := range []bool{false, true} {
			lag := maxLag
			if derived {
				lag += l.derivedLag()
			}
			// The shortest window: the latest start (the second scrape),
			// the longest lag.
			if w := l.judgedFrom(derived).Add(-lag).Sub(l.targetsAt.Add(l.scrape)); w < minWindow {
				t.Errorf("poll %s, derived %v: a window of %s at the first evaluation judged", poll, derived, w)
			}
		}
		if w := l.workloadFrom().Add(-maxLag).Sub(l.targetsAt.Add(l.scrape)); w < l.workloadWindow() {
			t.Errorf("poll %s: a workload's window of %s at the first evaluation judged, want %s", poll, w, l.workloadWindow())
		}
	}
}

// TestEngineReads: a GPU held idle throughout, scraped every 30 s by a
// scraper 10 s late, across the 09:00 switch to peak. VictoriaMetrics
// reads each 15-minute step from its last sample before the step, so
// the steps tile the samples and the switch's seconds land a step late;
// Prometheus extrapolates each window's series over its own samples, and
// the off-peak series, flat from the step's first sample, gives none of
// the 10 s before it: 890 s of 900.
func TestEngineReads(t *testing.T) {
	t.Parallel()
	sc := parse(t, `start: 2026-11-23T07:00:00Z
duration: 4h
node: e
system: dgxh100
gpus: 1
pods:
  - {namespace: ml, name: nb-0, devices: ["gpu:0"], util: [{at: 0s, value: 0}]}
`)
	sched, _ := agent.ParseSchedule(agent.DefaultPeakSchedule, time.UTC)
	tr := newTruther(sc)
	const shift = 10 * time.Second
	// The steps 08:45 and 09:00 on the scraper's clock, at virtual time.
	before := [2]time.Duration{105*time.Minute - shift, 120*time.Minute - shift}
	after := [2]time.Duration{120*time.Minute - shift, 135*time.Minute - shift}
	for _, c := range []struct {
		reads                 engineReads
		before, after, atPeak float64
	}{
		{readsExact, 900, 900, 890},
		{readsVictoriaMetrics, 900, 900, 870}, // from 08:59:30: 30 s off-peak
		{readsPrometheus, 900, 890, 890},
	} {
		got := func(s [2]time.Duration) (all, peak float64) {
			pk, op := stepSpan(tr, s[0], s[1], 30*time.Second, sched, c.reads)
			return pk.AllocIdle + op.AllocIdle, pk.AllocIdle
		}
		b, _ := got(before)
		a, p := got(after)
		if !near(b, c.before) || !near(a, c.after) || !near(p, c.atPeak) {
			t.Errorf("reads %d: idle %g s in the step before 09:00 (want %g), %g after (want %g), %g of it at peak (want %g)", c.reads, b, c.before, a, c.after, p, c.atPeak)
		}
	}
}
