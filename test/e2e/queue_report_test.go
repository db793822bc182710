//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuxray/gpuxray/collector/sim"
	promrules "github.com/gpuxray/gpuxray/deploy/prometheus"
	"github.com/gpuxray/gpuxray/report"
)

// queueTruth is what the queue X-ray must say about a scenario, worked out
// by hand in the scenario's header.
type queueTruth struct {
	kind      string
	all, peak report.QueueFigures
	// classes: "priority_class/queue" → pending GPU-hours, all hours and at peak.
	classes map[string][2]float64
	// holders: "namespace/workload" → what waiters could have run on its
	// idle GPUs at peak (quota, preemption, outranked), and all hours
	// (quota + preemption + outranked).
	holders   map[string]queueHolderTruth
	topHolder string
	// The queue sentence holds sentence, and none of absent.
	sentence, absent []string
	// clusterQueues: name → borrowed GPU-hours, all and at peak; idle and
	// borrowed idle GPU-hours, all hours.
	clusterQueues map[string][4]float64
	rules         []queueRuleTruth
}

// queueRuleTruth is a recording rule of gpuxray.queue.rules, evaluated
// from the raw series at offset at from the scenario's start: the sum of
// its series whose labels hold match is want (0: none, or all 0).
type queueRuleTruth struct {
	record string
	match  map[string]string
	at     time.Duration
	want   float64
}

type queueHolderTruth struct {
	peakQuota, peakPreemption, peakOutranked, blockedAll float64
}

// queueScenarios are test/scenarios' queue scenarios, from 08:00 to 12:00
// UTC on a Tuesday: peak (Mon-Fri 09:00-18:00) is the last 3 hours.
var queueScenarios = []struct {
	file  string
	truth queueTruth
}{
	{"../scenarios/queue-scheduling.yaml", queueTruth{
		kind: report.QueueScheduling,
		// 08:00-09:00: 1 GPU outranked by the notebook's own class.
		// 09:00-10:00: 4 wanted, 2 by preempting the notebook, 2 short.
		// 10:00-12:00: 4 wanted, 2 on vision's borrowed quota, 2 by
		// preempting the sweep.
		peak: report.QueueFigures{Hours: 3, PendingGPUHours: 4 * 3, QuotaGPUHours: 2 * 2, PreemptionGPUHours: 2*1 + 2*2, ShortfallGPUHours: 2 * 1},
		all:  report.QueueFigures{Hours: 4, PendingGPUHours: 1 + 4*3, QuotaGPUHours: 2 * 2, PreemptionGPUHours: 2*1 + 2*2, OutrankedGPUHours: 1, ShortfallGPUHours: 2 * 1},
		classes: map[string][2]float64{
			"training/team-a": {4 * 3, 4 * 3},
			"interactive/":    {1, 0},
		},
		holders: map[string]queueHolderTruth{
			"vision/sweep":          {peakQuota: 2 * 2, peakPreemption: 2 * 2, blockedAll: 2*2 + 2*2},
			"data-science/notebook": {peakPreemption: 2 * 1, blockedAll: 2*1 + 1},
		},
		topHolder: "vision/sweep",
		// (4 + 6) / 12 = 83%: 6/12 = 50% by preemption, 4/12 = 33% by quota.
		sentence: []string{"83% of the waiting at peak", "50% by preemption", "33% by reclaiming borrowed quota", "a scheduling problem, not a capacity one"},
		// No GPU is free but for the last poll's five seconds, after the
		// pods end at 12:00: under 1%, not named.
		absent: []string{"nobody held", "placement", "culling"},
		// vision uses 4 of its 2 nominal GPUs for 4 hours (3 at peak); its
		// sweep holds 4 GPUs idle 10:00-12:00, 2 of them borrowed.
		clusterQueues: map[string][4]float64{
			"vision":   {2 * 4, 2 * 3, 4 * 2, 2 * 2},
			"research": {0, 0, 0, 0},
		},
		rules: []queueRuleTruth{
			// 08:30: the interactive pod waits for 1, through its DRA claim
			// (the claim path of the rules); the notebooks idle
			// at its own rank, not below it.
			{"priority_class:gpuxray_pending_gpus:sum", map[string]string{"priority_class": "interactive"}, 30 * time.Minute, 1},
			{"cluster:gpuxray_pending_priority:max", nil, 30 * time.Minute, 100},
			{"cluster:gpuxray_idle_gpus_below_pending_priority:rate5m", nil, 30 * time.Minute, 0},
			// 09:30: training waits for 4 in team-a; the notebooks' 2 idle
			// GPUs rank below it, the sweep is busy.
			{"priority_class:gpuxray_pending_gpus:sum", map[string]string{"priority_class": "training"}, 90 * time.Minute, 4},
			{"priority_class:gpuxray_pending_gpus:sum", map[string]string{"priority_class": "interactive"}, 90 * time.Minute, 0},
			{"namespace_queue:kube_pod_container_resource_requests_gpu_pending:sum", map[string]string{"namespace": "research", "queue": "team-a"}, 90 * time.Minute, 4},
			{"cluster:gpuxray_pending_priority:max", nil, 90 * time.Minute, 1000},
			{"cluster:gpuxray_idle_gpus_below_pending_priority:rate5m", nil, 90 * time.Minute, 2},
			// 11:00: the stalled sweep's 4 join them; vision borrows 2,
			// and idles on 4, 2 of them borrowed.
			{"cluster:gpuxray_idle_gpus_below_pending_priority:rate5m", nil, 3 * time.Hour, 6},
			{"cluster_queue:kueue_cluster_queue_gpus_borrowed:max", map[string]string{"cluster_queue": "vision"}, 3 * time.Hour, 2},
			{"cluster_queue:kueue_cluster_queue_gpus_borrowed:max", map[string]string{"cluster_queue": "research"}, 3 * time.Hour, 0},
			{"cluster_queue:gpuxray_idle_gpus:rate5m", map[string]string{"cluster_queue": "vision"}, 3 * time.Hour, 4},
			{"cluster_queue:gpuxray_idle_gpus:rate5m", map[string]string{"cluster_queue": "research"}, 3 * time.Hour, 0},
			{"cluster_queue:gpuxray_idle_gpus_borrowed:rate5m", map[string]string{"cluster_queue": "vision"}, 3 * time.Hour, 2},
		},
	}},
	{"../scenarios/queue-capacity.yaml", queueTruth{
		kind: report.QueueCapacity,
		// 08:00-09:00: 1 GPU short. 09:00-10:00: 4 short. 10:00-11:00: 1
		// outranked by eval (the waiter's own class), 3 short.
		// 11:00-11:40: 4 short. 11:40-12:00: 1 free, 3 short.
		peak: report.QueueFigures{Hours: 3, PendingGPUHours: 4 * 3, FreeGPUHours: 1.0 / 3, OutrankedGPUHours: 1 * 1, ShortfallGPUHours: 4*1 + 3*1 + 4*2.0/3 + 3*1.0/3},
		all:  report.QueueFigures{Hours: 4, PendingGPUHours: 1 + 4*3, FreeGPUHours: 1.0 / 3, OutrankedGPUHours: 1 * 1, ShortfallGPUHours: 1 + 4*1 + 3*1 + 4*2.0/3 + 3*1.0/3},
		classes: map[string][2]float64{
			"training/team-a": {4 * 3, 4 * 3},
			"interactive/":    {1, 0},
		},
		holders: map[string]queueHolderTruth{
			"research/eval": {peakOutranked: 1 * 1, blockedAll: 1 * 1},
		},
		topHolder: "research/eval",
		// 10.67 / 12 = 89% short; 0.33 / 12 = 3% on the free GPU.
		sentence: []string{"89% of the waiting at peak found no idle GPU", "a capacity problem, not a scheduling one", "3% on GPUs nobody held"},
		absent:   []string{"preemption", "quota"},
		rules: []queueRuleTruth{
			// 10:30: training waits for 4; eval idles on 1 at training's
			// own rank: nothing idles below the waiter.
			{"priority_class:gpuxray_pending_gpus:sum", map[string]string{"priority_class": "training"}, 150 * time.Minute, 4},
			{"cluster:gpuxray_pending_priority:max", nil, 150 * time.Minute, 1000},
			{"cluster:gpuxray_idle_gpus_below_pending_priority:rate5m", nil, 150 * time.Minute, 0},
			{"cluster:gpuxray_idle_gpus:rate5m", nil, 150 * time.Minute, 1},
		},
	}},
}

// TestQueueReport replays each queue scenario, backfills the agent's series
// and the simulated cluster's kube-state-metrics and Kueue series into a
// real Prometheus, and checks the queue X-ray of `gpuxray report` against
// the figures the scenarios' headers work out by hand: one scenario is a
// scheduling problem (the waiting could have run on idle GPUs held by
// lower-priority or borrowing work), the other a capacity problem. The
// queue X-ray's recording rules, inlined, are evaluated on the same series
// at a few times.
func TestQueueReport(t *testing.T) {
	t.Parallel()
	promtool := need(t, "promtool")
	prom := need(t, "prometheus")
	rules, err := promrules.Parse(promrules.Rules)
	if err != nil {
		t.Fatal(err)
	}
	recorded := rules.Inlined()
	for _, c := range queueScenarios {
		name := strings.TrimSuffix(filepath.Base(c.file), ".yaml")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			sc, err := sim.LoadScenario(c.file)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			data := filepath.Join(dir, "data")
			replayBlocks(t, promtool, c.file, filepath.Join(dir, "agent"), "1m", "10s")
			moveBlocks(t, filepath.Join(dir, "agent"), data)
			cluster, err := sim.NewCluster(sc)
			if err != nil {
				t.Fatal(err)
			}
			om := filepath.Join(dir, "cluster.om")
			f, err := os.Create(om)
			if err != nil {
				t.Fatal(err)
			}
			end := sc.Start.Add(sc.Duration)
			err = cluster.WriteOpenMetrics(f, sc.Start, end, time.Minute, map[string]string{"job": "kube-state-metrics", "instance": "ksm:8080"})
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				t.Fatal(err)
			}
			backfillOpenMetrics(t, promtool, om, filepath.Join(dir, "cluster"))
			moveBlocks(t, filepath.Join(dir, "cluster"), data)
			_, addr := startPrometheus(t, prom, filepath.Join(dir, "prom"), data, "global: {}\n")

			args := []string{"--step=10m", "--range=" + sc.Duration.String(), "--end=" + end.Format(time.RFC3339)}
			r := reportJSON(t, addr, args...)
			q, w := r.Queue, c.truth
			if !q.Available || !q.PrioritiesKnown || q.Basis != report.BasisPeak {
				t.Errorf("queue available %v, priorities known %v, basis %q; want true, true, peak", q.Available, q.PrioritiesKnown, q.Basis)
			}
			if q.Kind != w.kind {
				t.Errorf("queue kind %q, want %q: %s", q.Kind, w.kind, q.Sentence)
			}
			for _, s := range w.sentence {
				if !strings.Contains(q.Sentence, s) {
					t.Errorf("queue sentence lacks %q: %s", s, q.Sentence)
				}
			}
			for _, s := range w.absent {
				if strings.Contains(q.Sentence, s) {
					t.Errorf("queue sentence has %q: %s", s, q.Sentence)
				}
			}
			if r.Verdict.Queue != q.Sentence {
				t.Errorf("verdict's queue sentence %q, want the queue's %q", r.Verdict.Queue, q.Sentence)
			}
			for _, f := range []struct {
				name      string
				got, want report.QueueFigures
			}{{"all", q.All, w.all}, {"peak", q.Peak, w.peak}} {
				near(t, f.name+" hours", f.got.Hours, f.want.Hours)
				near(t, f.name+" pending GPU-hours", f.got.PendingGPUHours, f.want.PendingGPUHours)
				near(t, f.name+" free GPU-hours", f.got.FreeGPUHours, f.want.FreeGPUHours)
				near(t, f.name+" quota GPU-hours", f.got.QuotaGPUHours, f.want.QuotaGPUHours)
				near(t, f.name+" preemption GPU-hours", f.got.PreemptionGPUHours, f.want.PreemptionGPUHours)
				near(t, f.name+" outranked GPU-hours", f.got.OutrankedGPUHours, f.want.OutrankedGPUHours)
				near(t, f.name+" shortfall GPU-hours", f.got.ShortfallGPUHours, f.want.ShortfallGPUHours)
			}
			classes := map[string]report.QueueClass{}
			for _, cl := range q.Classes {
				classes[cl.PriorityClass+"/"+cl.Queue] = cl
			}
			if len(classes) != len(w.classes) {
				t.Errorf("classes %v, want %v", classes, w.classes)
			}
			for k, v := range w.classes {
				cl, ok := classes[k]
				if !ok {
					t.Errorf("class %s missing from %v", k, classes)
					continue
				}
				near(t, k+" pending GPU-hours", cl.All.PendingGPUHours, v[0])
				near(t, k+" pending GPU-hours at peak", cl.Peak.PendingGPUHours, v[1])
				if want := float64(sc.PriorityOf(cl.PriorityClass)); cl.Priority != want {
					t.Errorf("class %s priority %v, want %v", k, cl.Priority, want)
				}
			}
			if len(q.TopHolders) == 0 || q.TopHolders[0].ID() != w.topHolder {
				t.Errorf("top holders %+v, want %s first", q.TopHolders, w.topHolder)
			}
			holders := map[string]report.QueueHolder{}
			for _, h := range q.TopHolders {
				holders[h.ID()] = h
			}
			if len(holders) != len(w.holders) {
				t.Errorf("top holders %v, want %v", holders, w.holders)
			}
			for id, v := range w.holders {
				h, ok := holders[id]
				if !ok {
					t.Errorf("holder %s missing from %v", id, holders)
					continue
				}
				near(t, id+" quota GPU-hours at peak", h.PeakQuotaGPUHours, v.peakQuota)
				near(t, id+" preemption GPU-hours at peak", h.PeakPreemptionGPUHours, v.peakPreemption)
				near(t, id+" outranked GPU-hours at peak", h.PeakOutrankedGPUHours, v.peakOutranked)
				near(t, id+" blocked GPU-hours", h.Blocked(report.BasisAll), v.blockedAll)
			}
			cqs := map[string]report.ClusterQueueUse{}
			for _, u := range q.ClusterQueues {
				cqs[u.Name] = u
			}
			if q.Kueue != (len(w.clusterQueues) > 0) || len(cqs) != len(w.clusterQueues) {
				t.Errorf("Kueue %v, cluster queues %v; want %v", q.Kueue, cqs, w.clusterQueues)
			}
			for name, v := range w.clusterQueues {
				u, ok := cqs[name]
				if !ok {
					t.Errorf("ClusterQueue %s missing from %v", name, cqs)
					continue
				}
				near(t, name+" borrowed GPU-hours", u.BorrowedGPUHours, v[0])
				near(t, name+" borrowed GPU-hours at peak", u.PeakBorrowedGPUHours, v[1])
				near(t, name+" idle GPU-hours", u.IdleGPUHours, v[2])
				near(t, name+" borrowed idle GPU-hours", u.BorrowedIdleGPUHours, v[3])
			}

			// The queue X-ray's recording rules, from the same raw series.
			for _, rt := range w.rules {
				e, ok := recorded[rt.record]
				if !ok {
					t.Fatalf("no recording rule %s", rt.record)
				}
				res, err := promQuery(addr, e, sc.Start.Add(rt.at))
				if err != nil {
					t.Fatal(err)
				}
				got, found := 0.0, false
			next:
				for _, r := range res {
					for k, v := range rt.match {
						if r.Labels[k] != v {
							continue next
						}
					}
					got += r.Value
					found = true
				}
				what := fmt.Sprintf("%s %v at +%s", rt.record, rt.match, rt.at)
				if rt.want != 0 && !found {
					t.Errorf("%s: no series in %v, want %g", what, res, rt.want)
					continue
				}
				near(t, what, got, rt.want)
			}

			text := string(runReport(t, addr, args...))
			if !strings.Contains(text, "QUEUE  "+q.Sentence) {
				t.Errorf("text report lacks the queue sentence %q:\n%s", q.Sentence, text)
			}
			if !strings.Contains(text, w.topHolder) {
				t.Errorf("text report does not name the top holder %s:\n%s", w.topHolder, text)
			}
			if testing.Verbose() {
				t.Logf("gpuxray report %s:\n%s", strings.Join(args, " "), text)
			}
		})
	}
}
