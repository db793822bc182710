package fleet

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gpuxray/gpuxray/agent"
	"github.com/gpuxray/gpuxray/collector/sim"
	promrules "github.com/gpuxray/gpuxray/deploy/prometheus"
	"github.com/gpuxray/gpuxray/report"
)

// liveRun is what the live phase's checks need.
type liveRun struct {
	agents []*liveAgent
	// targetsAt is when the targets file was written: no scrape before.
	targetsAt time.Time
	// end is when the live phase stopped looking.
	end time.Time
	// scrape and eval: the shards' scrape interval, vmalert's evaluation
	// interval.
	scrape, eval time.Duration
	// poll is the agents' poll interval.
	poll  time.Duration
	sched *agent.Schedule
	vm    string
	// ksm are the kube-state-metrics shards' addresses.
	ksm    []string
	shards []string
	alert  string
	hook   *webhook
	// nodeOf is each target's node, by address.
	nodeOf map[string]string
	// sourceFailed are, by node, the sources whose calls failed in the
	// agent while live (failedSources).
	sourceFailed map[string][]string
	// failedScrapes are, by target (a node's name, or a kube-state-metrics
	// shard's address), the times of its scrapes that failed (up 0).
	failedScrapes map[string][]time.Time

	mu    sync.Mutex
	spans map[[2]time.Time]*windowTruth
}

// windowTruth is every node's truth over one window, peak and off-peak,
// and which nodes hold each workload in it: a workload's rule sums its
// nodes only.
type windowTruth struct {
	nodes [][2]*totals
	work  map[wkey][]int
	// young is, by workload, what MetricsQL reads in the series of pods
	// younger than the window (see youngPods).
	young map[wkey]*youngRead
}

// youngRead is what MetricsQL reads in one workload's series younger than
// a window: extra is how many GPUs more than their mean over the window,
// peak and off-peak; shortest is the shortest span such a series has in
// the window.
type youngRead struct {
	extra    [2]podSeconds
	shortest time.Duration
}

// alertKey is an alert's subject: the node, and the pod and GPU or
// namespace its rule names.
type alertKey struct{ alert, node, namespace, pod, gpu string }

func (k alertKey) String() string {
	s := k.alert
	for _, p := range []string{k.node, k.namespace, k.pod} {
		if p != "" {
			s += " " + p
		}
	}
	if k.gpu != "" {
		s += " gpu " + k.gpu
	}
	return s
}

// firingMargin is the margin of the live alert checks. vmalert sees a
// series some 35 s after its scrape (VictoriaMetrics' -search.latencyOffset,
// 30 s, and a scrape interval), and an alert fires one `for:` after it is
// first seen pending, each a round of evaluations late at most, then
// Alertmanager sends it within its group_wait: an allocation idle for 30
// minutes plus this margin must have reached the webhook.
func (l *liveRun) firingMargin() time.Duration {
	return 120*time.Second + 2*l.eval
}

// idleAllocations are the allocations (pod × GPU) the GPUAllocatedButIdle
// rule must have fired for by the end (idle for 30 minutes and the margin,
// and still), and those it must not have fired for (never idle for 30
// minutes while live).
func (l *liveRun) idleAllocations() (must, mustNot map[alertKey]bool) {
	must, mustNot = map[alertKey]bool{}, map[alertKey]bool{}
	for _, a := range l.agents {
		sc := a.scenario
		end := l.end.Sub(sc.Start)
		from := l.targetsAt.Sub(sc.Start)
		blind := noMIGActivity(sc.System)
		for _, p := range sc.Pods {
			for _, d := range p.Devices {
				k := alertKey{alert: "GPUAllocatedButIdle", node: a.node.Name, namespace: p.Namespace, pod: p.Name, gpu: fmt.Sprint(d.GPU)}
				if blind && d.MIG {
					mustNot[k] = true
					continue
				}
				// The longest streak while live, checked every 5 s.
				longest := time.Duration(0)
				for t := from; t <= end; t += 5 * time.Second {
					if t >= p.From && t < p.To {
						longest = max(longest, streakAt(p, t))
					}
				}
				switch {
				case end < p.To && streakAt(p, end) >= 30*time.Minute+l.firingMargin():
					must[k] = true
				case longest < 30*time.Minute:
					mustNot[k] = true
				}
			}
		}
	}
	return must, mustNot
}

// checkAlerts: the allocations idle for 30 minutes reached Alertmanager,
// with their node, pod and GPU, and no other alert fired; vmalert holds
// the slower alerts pending for the right subjects.
func (l *liveRun) checkAlerts(ctx context.Context, res *Result) {
	must, mustNot := l.idleAllocations()
	got := map[alertKey]bool{}
	var others []string
	for _, n := range l.hook.received() {
		if n.Status != "firing" {
			continue
		}
		lb := n.Labels
		k := alertKey{alert: lb["alertname"], node: lb["node"], namespace: lb["namespace"], pod: lb["pod"], gpu: lb["gpu"]}
		if k.alert != "GPUAllocatedButIdle" {
			others = append(others, k.String())
			continue
		}
		got[k] = true
	}
	var missing, wrong []string
	for k := range must {
		if !got[k] {
			missing = append(missing, k.String())
		}
	}
	for k := range got {
		if mustNot[k] || (!must[k] && !l.known(k)) {
			wrong = append(wrong, k.String())
		}
	}
	sort.Strings(missing)
	sort.Strings(wrong)
	res.pass("live", fmt.Sprintf("Alertmanager: GPUAllocatedButIdle for the %d allocations idle 30 min", len(must)),
		len(must) > 0 && len(missing) == 0, fmt.Sprintf("%d received; missing %s", len(got), firstOf(missing)))
	res.pass("live", "Alertmanager: no alert for a busy or younger allocation", len(wrong) == 0, "unexpected "+firstOf(wrong))
	res.pass("live", "Alertmanager: no other alert fires within minutes", len(others) == 0, "fired "+firstOf(others))
	res.summary(fmt.Sprintf("%d/%d idle allocations alerted at Alertmanager", len(must)-len(missing), len(must)))

	// The slower alerts, pending in vmalert: its ALERTS series over the run.
	span := l.end.Sub(l.targetsAt).Truncate(time.Second)
	q := fmt.Sprintf(`max by (alertname, node, instance, namespace, pod, gpu) (max_over_time(ALERTS[%ds]))`, int(span.Seconds()))
	var v vector
	if err := query(ctx, l.vm, queryPath(q, l.end), &v); err != nil {
		res.pass("live", "vmalert: alerts", false, err.Error())
		return
	}
	active := map[alertKey]string{}
	for _, a := range v {
		lb := a.Metric
		k := alertKey{alert: lb["alertname"], node: lb["node"], namespace: lb["namespace"], pod: lb["pod"], gpu: lb["gpu"]}
		if k.node == "" {
			// GPUUnattributedActivity keeps the target's instance, not node.
			k.node = l.nodeOf[lb["instance"]]
		}
		if k.alert == "GPUIdleAtPeak" {
			k.node, k.pod, k.gpu = "", "", ""
		}
		active[k] = "pending or firing"
	}
	unattributed := l.unattributed()
	var miss, extra []string
	for k := range unattributed {
		if active[k] == "" {
			miss = append(miss, k.String())
		}
	}
	for k := range active {
		if k.alert == "GPUUnattributedActivity" && !unattributed[k] {
			extra = append(extra, k.String())
		}
	}
	res.pass("live", fmt.Sprintf("vmalert: GPUUnattributedActivity pending on the %d GPUs busy with no pod", len(unattributed)),
		len(unattributed) > 0 && len(miss) == 0 && len(extra) == 0, fmt.Sprintf("missing %s; unexpected %s", firstOf(miss), firstOf(extra)))
	pendingK := alertKey{alert: "GPUPodsPendingWhileGPUsIdle"}
	res.pass("live", "vmalert: GPUPodsPendingWhileGPUsIdle pending", active[pendingK] != "", fmt.Sprintf("state %q", active[pendingK]))
	l.checkSourceDown(ctx, res, span)
}

// checkSourceDown: GpuxraySourceDown fires for no node, and is pending
// only for a node whose agent's own counters say that source failed
// while live. On a machine too busy for the fleet, a call to the
// simulated kubelet times out now and then (the agent's 5 s deadline),
// and the alert rightly goes pending on that scrape; the table counts
// those nodes.
func (l *liveRun) checkSourceDown(ctx context.Context, res *Result, span time.Duration) {
	q := fmt.Sprintf(`max by (instance, source, alertstate) (max_over_time(ALERTS{alertname="GpuxraySourceDown"}[%ds]))`, int(span.Seconds()))
	var v vector
	if err := query(ctx, l.vm, queryPath(q, l.end), &v); err != nil {
		res.pass("live", "vmalert: GpuxraySourceDown", false, err.Error())
		return
	}
	var fired, unfounded, founded []string
	for _, a := range v {
		node, src := l.nodeOf[a.Metric["instance"]], a.Metric["source"]
		what := node + " " + src
		switch {
		case a.Metric["alertstate"] == "firing":
			fired = append(fired, what)
		case !slices.Contains(l.sourceFailed[node], src):
			unfounded = append(unfounded, what)
		default:
			founded = append(founded, what)
		}
	}
	sort.Strings(fired)
	sort.Strings(unfounded)
	note := fmt.Sprintf("firing %s; pending with no failed call %s", firstOf(fired), firstOf(unfounded))
	if len(founded) > 0 {
		note += fmt.Sprintf("; pending on %d sources whose calls failed while live (a busy machine)", len(founded))
	}
	res.pass("live", "vmalert: GpuxraySourceDown fires for no node, pending only where a source failed", len(fired) == 0 && len(unfounded) == 0, note)
}

// known reports whether k names a pod and GPU of the fleet.
func (l *liveRun) known(k alertKey) bool {
	for _, a := range l.agents {
		if a.node.Name != k.node {
			continue
		}
		for _, p := range a.scenario.Pods {
			if p.Namespace == k.namespace && p.Name == k.pod {
				for _, d := range p.Devices {
					if fmt.Sprint(d.GPU) == k.gpu {
						return true
					}
				}
			}
		}
	}
	return false
}

// unattributed are the GPUs busy beyond GPUUnattributedActivity's 5% with
// no pod holding them, over the live run.
func (l *liveRun) unattributed() map[alertKey]bool {
	out := map[alertKey]bool{}
	for _, a := range l.agents {
		from, to := l.targetsAt.Sub(a.scenario.Start), l.end.Sub(a.scenario.Start)
		for gpu := 0; gpu < a.scenario.GPUs; gpu++ {
			if _, mig := a.scenario.MIG[gpu]; mig || len(a.scenario.Unallocated) == 0 {
				continue
			}
			if g := gpuBusyUnheld(a, gpu, from, to); g > 0.05*1.2 {
				out[alertKey{alert: "GPUUnattributedActivity", node: a.node.Name, gpu: fmt.Sprint(gpu)}] = true
			}
		}
	}
	return out
}

// gpuBusyUnheld is gpu's mean busy ratio with no pod holding it over [a, b).
func gpuBusyUnheld(a *liveAgent, gpu int, from, to time.Duration) float64 {
	sc := a.scenario
	var sum float64
	n := 0
	for t := from; t < to; t += 10 * time.Second {
		held := false
		for _, p := range sc.Pods {
			if t >= p.From && t < p.To {
				for _, d := range p.Devices {
					held = held || (d.GPU == gpu && !d.MIG)
				}
			}
		}
		if !held {
			sum += sc.GPUUtilAt(gpu, t)
		}
		n++
	}
	return sum / float64(max(n, 1))
}

// checkTargets: every agent is a target of exactly one shard, both shards
// have some, and the engine holds one scrape of each agent per interval.
func (l *liveRun) checkTargets(ctx context.Context, res *Result) {
	owner := map[string][]int{}
	perShard := make([]int, len(l.shards))
	for i, s := range l.shards {
		var t struct {
			ActiveTargets []struct {
				Labels    map[string]string `json:"labels"`
				Health    string            `json:"health"`
				ScrapeURL string            `json:"scrapeUrl"`
			} `json:"activeTargets"`
		}
		if err := apiGet(ctx, s, "/api/v1/targets", &t); err != nil {
			res.pass("live", "shards' targets", false, err.Error())
			return
		}
		for _, at := range t.ActiveTargets {
			if at.Labels["job"] != "gpuxray" {
				continue
			}
			owner[at.Labels["node"]] = append(owner[at.Labels["node"]], i)
			perShard[i]++
		}
	}
	var twice, none []string
	for _, a := range l.agents {
		switch n := len(owner[a.node.Name]); {
		case n == 0:
			none = append(none, a.node.Name)
		case n > 1:
			twice = append(twice, a.node.Name)
		}
	}
	split := fmt.Sprint(perShard)
	// Both shards take a share; with fewer than 16 targets, the hash of
	// their (random) addresses may give one shard all of them.
	res.pass("live", fmt.Sprintf("shards: each of %d agents a target of exactly one shard (%s)", len(l.agents), split),
		len(none) == 0 && len(twice) == 0 && (len(l.agents) < 16 || !slicesHasZero(perShard)),
		fmt.Sprintf("unscraped %s; scraped twice %s", firstOf(none), firstOf(twice)))

	// In the engine: one `up` series per node, a sample per scrape
	// interval (two shards scraping one target would give two).
	at := l.end.Add(-40 * time.Second) // VictoriaMetrics' latency, and a scrape
	span := at.Sub(l.targetsAt.Add(20 * time.Second)).Truncate(time.Second)
	q := fmt.Sprintf(`count_over_time(up{job="gpuxray"}[%ds])`, int(span.Seconds()))
	var v vector
	if err := query(ctx, l.vm, queryPath(q, at), &v); err != nil {
		res.pass("live", "engine: scrapes per node", false, err.Error())
		return
	}
	want := span.Seconds() / l.scrape.Seconds()
	seen := map[string]int{}
	var off []string
	missed := 0.0
	for _, s := range v {
		seen[s.Metric["node"]]++
		// Two shards scraping one target would give twice as many; a
		// scrape that a busy shard started late gives one fewer, which is
		// counted, not judged (the checks of the rules judge its effect).
		n := sampleValue(s.Value[1])
		if n > want+1 || n < 1 {
			off = append(off, fmt.Sprintf("%s: %.0f", s.Metric["node"], n))
		}
		missed += max(0, want-1-n)
	}
	for _, a := range l.agents {
		if seen[a.node.Name] != 1 {
			off = append(off, fmt.Sprintf("%s: %d series", a.node.Name, seen[a.node.Name]))
		}
	}
	sort.Strings(off)
	res.pass("live", fmt.Sprintf("engine: one series of up per agent, at most %.0f+1 samples in %s", want, span), len(off) == 0, "off: "+firstOf(off))
	res.measure("live: scrapes missed (started late by a busy shard), of those due", 100*missed/(want*float64(len(l.agents))), "%")
	res.summary(fmt.Sprintf("%d targets on %d shards %s", len(l.agents), len(l.shards), split))
}

// readFailedScrapes reads, by target, the scrapes that failed (up 0) from
// the first scrape to the end of the live phase, and measures them.
func (l *liveRun) readFailedScrapes(ctx context.Context, res *Result) error {
	code, b, err := httpGet(ctx, fmt.Sprintf("http://%s/api/v1/export?match[]=%s&start=%d&end=%d", l.vm,
		url.QueryEscape(`up{job=~"gpuxray|kube-state-metrics"}`), l.targetsAt.Unix(), l.end.Unix()+1))
	if err != nil {
		return err
	}
	if code != 200 {
		return fmt.Errorf("export of up: HTTP %d: %s", code, b)
	}
	l.failedScrapes = map[string][]time.Time{}
	var all, failed int
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		var line struct {
			Metric     map[string]string `json:"metric"`
			Values     []float64         `json:"values"`
			Timestamps []int64           `json:"timestamps"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return err
		}
		target := line.Metric["node"]
		if target == "" {
			target = line.Metric["instance"]
		}
		for i, v := range line.Values {
			all++
			if v == 0 {
				failed++
				l.failedScrapes[target] = append(l.failedScrapes[target], time.UnixMilli(line.Timestamps[i]))
			}
		}
	}
	res.measure("live: scrapes that failed (up 0, a target too slow to answer in time)", 100*float64(failed)/float64(max(all, 1)), "%")
	return sc.Err()
}

// staleAt reports whether an evaluation at t may have found a series of
// one of targets stale: a scrape of it that failed at most lag and a
// scrape before t. A failed scrape ends the target's series with a
// staleness marker, and a rate whose window ends there leaves them out of
// the sum until the next scrape (a cluster-wide sum read 99.7 GPUs for
// 569.5 while 124 of 600 scrapes failed in 30 s on a machine at a load of
// 50): the truth cannot know which the engine left out, and the sample is
// not judged. A failed scrape inside the window changes nothing: the rate
// reads the samples either side.
func (l *liveRun) staleAt(targets []string, t time.Time, lag time.Duration) bool {
	lo := t.Add(-lag - l.scrape)
	for _, tg := range targets {
		for _, f := range l.failedScrapes[tg] {
			if !f.Before(lo) && !f.After(t) {
				return true
			}
		}
	}
	return false
}

func slicesHasZero(xs []int) bool {
	for _, x := range xs {
		if x == 0 {
			return true
		}
	}
	return false
}

// recorded is one sample of a recording rule, as vmalert wrote it.
type recorded struct {
	name   string
	labels map[string]string
	at     time.Time
	value  float64
}

// exportRecorded reads back every sample the recording rules wrote.
func exportRecorded(ctx context.Context, vm string, from time.Time) ([]recorded, error) {
	q := `{__name__=~"cluster_window:gpuxray_.+|cluster_gpu_type_window:gpuxray_device_.+|namespace_gpu_type_window:gpuxray_allocated_.+|namespace_workload_model_window:gpuxray_.+|cluster:gpuxray_idle_gpus:rate5m|namespace:kube_pod_container_resource_requests_gpu_pending:sum|cluster:kube_pod_container_resource_requests_gpu_pending:sum"}`
	code, b, err := httpGet(ctx, fmt.Sprintf("http://%s/api/v1/export?match[]=%s&start=%d", vm, url.QueryEscape(q), from.Unix()))
	if err != nil {
		return nil, err
	}
	if code != 200 {
		return nil, fmt.Errorf("export: HTTP %d: %s", code, b)
	}
	var out []recorded
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		var line struct {
			Metric     map[string]string `json:"metric"`
			Values     []float64         `json:"values"`
			Timestamps []int64           `json:"timestamps"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return nil, err
		}
		name := line.Metric["__name__"]
		delete(line.Metric, "__name__")
		for i, ts := range line.Timestamps {
			out = append(out, recorded{name: name, labels: line.Metric, at: time.UnixMilli(ts), value: line.Values[i]})
		}
	}
	return out, sc.Err()
}

// Windows the truth of a recorded rate is taken over. A rule evaluated at
// T reads a rate over the samples VictoriaMetrics holds at T less its
// latency (-search.latencyOffset, 30 s), from the last sample before the
// window (or the first, for a series younger than the window): the
// window's end lags T by 0 to a minute, its start by a scrape interval
// more or less. The truth is taken over each such window; a recorded
// value is checked against their mean where they agree within
// stableSpread (no pod came, went or changed near the window's edges);
// otherwise a cluster-wide sum is checked against the one nearest its
// value (from workloadFrom), and a workload's sample is skipped.
const (
	maxLag       = 60 * time.Second
	stableSpread = 0.002
	// minWorkloadEvals: 90 s of vmalert's 15 s evaluations.
	minWorkloadEvals = 6
)

// minWindow is the shortest window a recorded rate is judged on: a
// window's rate is off by up to a poll over its length (see
// workloadWindow), 1.7% of a minute at a 1 s poll on one series, a
// fraction of that summed over a fleet whose polls are out of step.
const minWindow = time.Minute

// judgedFrom is the first evaluation of a recording rule the checks
// judge: the first at which every window the engine may have read (see
// maxLag) is at least minWindow long, from the first scrape. Earlier the
// sample cannot be judged: some of those windows are too short to mean
// anything, and which one the engine read is not known. A rule built on
// recorded series (derived) reads them up to derivedLag later.
func (l *liveRun) judgedFrom(derived bool) time.Time {
	first := l.targetsAt.Add(l.scrape + maxLag + minWindow)
	if derived {
		first = first.Add(l.derivedLag())
	}
	return first
}

// workloadWindow is the shortest rate window a workload's series is
// judged on. A scrape reads the counters of the agent's last poll, up to a
// poll old, and which poll it reads can change from one scrape to the next
// when the two nearly coincide: a window's rate is off by up to a poll
// over its length. At a 1 s poll, the shortest window checked (a minute)
// holds 60 polls; a slower poll needs a window as many polls long (at
// 5 s, 5 minutes less a lag), or one workload's series reads 3–5% off
// in the live phase's first minutes.
func (l *liveRun) workloadWindow() time.Duration {
	return max(minWindow, 50*l.poll)
}

// workloadFrom is the first evaluation at which every window a workload's
// series may have been read over is workloadWindow long; a cluster-wide
// sample near a change is judged from it too.
func (l *liveRun) workloadFrom() time.Time {
	return l.targetsAt.Add(l.scrape + l.workloadWindow() + maxLag)
}

// derivedLag is how much later than the series it reads a rule built on
// recorded series may read them: two rounds of evaluations.
func (l *liveRun) derivedLag() time.Duration { return 2 * l.eval }

// checkRules sets every recorded sample of every recording rule against
// the truth of its window.
func (l *liveRun) checkRules(ctx context.Context, res *Result) {
	rs, err := exportRecorded(ctx, l.vm, l.targetsAt)
	if err != nil {
		res.pass("live", "recording rules", false, err.Error())
		return
	}
	if err := l.readFailedScrapes(ctx, res); err != nil {
		res.pass("live", "recording rules: scrapes read", false, err.Error())
		return
	}
	trs := make([]*truther, len(l.agents))
	for i, a := range l.agents {
		trs[i] = newTruther(asPolled(a.scenario, l.poll))
	}
	derived := derivedRules()
	means := map[string]*seriesMean{}
	byRule := map[string]*worst{}
	skipped, nearChange, early, stale := map[string]int{}, map[string]int{}, map[string]int{}, map[string]int{}
	workFrom := l.workloadFrom()
	var names []string
	for _, r := range rs {
		w := byRule[r.name]
		if w == nil {
			unit := "GPUs"
			w = newWorst("live", "rule "+r.name, unit, floorGPUs)
			w.mayNotJudge = true
			byRule[r.name] = w
			names = append(names, r.name)
		}
		first, lagMax := l.judgedFrom(derived[r.name]), maxLag
		if derived[r.name] {
			lagMax += l.derivedLag()
		}
		// Too late: the agents stop serving at the end of the live phase,
		// and the rules then read their series going stale.
		if r.at.After(l.end) {
			continue
		}
		if r.at.Before(first) || (perWorkload(r.name) && r.at.Before(workFrom)) {
			early[r.name]++
			continue
		}
		if l.staleAt(l.targetsOf(r), r.at, lagMax) {
			stale[r.name]++
			continue
		}
		var truth spread
		for lag := time.Duration(0); lag <= lagMax; lag += l.scrape {
			for _, before := range []time.Duration{0, l.scrape} {
				for _, first := range []time.Duration{0, l.scrape} {
					end := r.at.Add(-lag)
					start := end.Add(-5*time.Minute - before)
					if min := l.targetsAt.Add(first); start.Before(min) {
						start = min
					}
					if end.Sub(start) < minWindow {
						truth.unfit = true // judgedFrom: not judged
						continue
					}
					truth.add(l.truthOf(trs, r, start, end, true))
				}
			}
		}
		if truth.n == 0 && !truth.unfit {
			continue
		}
		if !truth.stable() {
			if perWorkload(r.name) || truth.unfit || r.at.Before(workFrom) {
				skipped[r.name]++
				continue
			}
			// A cluster-wide sum near a change: judged against the truth
			// of the window nearest its value. Without it a rule read
			// where pods came and went all run long (the offpeak sum of
			// 1,000 churning nodes) would go unjudged. Not on the first
			// windows, shorter than workloadWindow: the agents started
			// together, their polls in step, and a window's rate is off
			// by up to a poll over its length in all of them at once
			// (1,000 nodes read 1.05% under the nearest truth of active
			// GPUs on a 1-minute window at 5 s polls).
			nearChange[r.name]++
			w.add(fmt.Sprintf("%v at %s, near a change", r.labels, r.at.Format("15:04:05")), r.value, min(max(r.value, truth.lo), truth.hi))
			continue
		}
		mean := truth.mean()
		if perWorkload(r.name) {
			k := r.name + "\x00" + seriesKey(r.labels)
			m := means[k]
			if m == nil {
				m = &seriesMean{labels: r.labels}
				means[k] = m
			}
			m.got, m.want, m.n = m.got+r.value, m.want+mean, m.n+1
			continue
		}
		w.add(fmt.Sprintf("%v at %s", r.labels, r.at.Format("15:04:05")), r.value, mean)
	}
	few := map[string]int{}
	for k, m := range means {
		name := k[:strings.IndexByte(k, 0)]
		if m.n < minWorkloadEvals {
			few[name]++
			continue
		}
		byRule[name].add(fmt.Sprintf("%v, mean of %d", m.labels, m.n), m.got/float64(m.n), m.want/float64(m.n))
	}
	sort.Strings(names)
	for _, n := range names {
		w := byRule[n]
		if s := early[n]; s > 0 {
			w.notes = append(w.notes, fmt.Sprintf("%d samples of windows too short to judge skipped", s))
		}
		if s := stale[n]; s > 0 {
			w.notes = append(w.notes, fmt.Sprintf("%d samples that may have read a failed scrape's stale series skipped", s))
		}
		if s := skipped[n]; s > 0 {
			w.notes = append(w.notes, fmt.Sprintf("%d samples near a change skipped", s))
		}
		if s := nearChange[n]; s > 0 {
			w.notes = append(w.notes, fmt.Sprintf("%d samples near a change judged against the nearest window's truth", s))
		}
		if f := few[n]; f > 0 {
			w.notes = append(w.notes, fmt.Sprintf("%d series with fewer than %d stable evaluations not judged alone", f, minWorkloadEvals))
		}
		res.addWorst(w)
	}
	if len(names) == 0 {
		res.pass("live", "recording rules", false, "vmalert recorded nothing")
	}
}

// A workload's series is mostly one GPU of one node, whose rate is off by
// as much as its agent's poll or its scrape lags (on a loaded machine,
// seconds: a 5-minute rate of one GPU off by 2 or 3%), in one window and
// not the next. Such a series is checked by its mean over the run's
// evaluations against the mean of its truths; a cluster-wide rule, which
// sums many nodes, evaluation by evaluation.
//
// A mean of a few evaluations is still one lagging window: an agent that
// falls seconds behind and catches up inside a window reads more than
// real time in every window that holds the catch-up (at 125 nodes on 2
// cores, five notebooks of one node read 1.019 GPUs for a minute of
// evaluations). A series with fewer than minWorkloadEvals stable
// evaluations (a pod that held a window for a minute of the run, or a
// window that opened during it) is not judged alone; the run's table
// counts them. Its seconds are still judged, in the cluster-wide rules
// that sum them.

// sharedChange: whether a pod came to, left or changed its use of a
// shared GPU that a pod of workload k holds, from agent.MaxProcessWait and
// a scrape before start to end. A shared GPU's periods wait in the agent
// for their processes' samples (docs/accounting.md), and NVML gives none
// for an idle process: its counters run behind by a lag that changes when
// a process comes, goes, or starts or stops working. A window's rate over
// such a change reads the lag's change (up to 10 s of a 5-minute window:
// 1.028 GPUs for 1 at seed 13), which the agent makes up after. The
// agents' own counters are judged without it (agentcheck.go).
func (l *liveRun) sharedChange(k wkey, start, end time.Time) bool {
	from := start.Add(-agent.MaxProcessWait - l.scrape)
	for _, a := range l.agents {
		sc := a.scenario
		gpus := map[int]bool{}
		for _, p := range sc.Pods {
			if p.Resource == sim.ResourceGPUShared && workloadOf(p) == k {
				for _, d := range p.Devices {
					gpus[d.GPU] = !d.MIG
				}
			}
		}
		if len(gpus) == 0 {
			continue
		}
		for _, p := range sc.Pods {
			if p.Resource != sim.ResourceGPUShared || !slices.ContainsFunc(p.Devices, func(d sim.DeviceSpec) bool { return !d.MIG && gpus[d.GPU] }) {
				continue
			}
			changes := []time.Duration{p.From, p.To}
			for _, u := range p.Util {
				changes = append(changes, u.At)
			}
			for _, b := range changes {
				if at := sc.Start.Add(b); b > 0 && b < sc.Duration && !at.Before(from) && !at.After(end) {
					return true
				}
			}
		}
	}
	return false
}

// typedRule: the recorded idle allocated time by GPU type and window
// (cluster_gpu_type_window: of the devices, namespace_gpu_type_window: of
// the pods), which the price rules multiply.
func typedRule(rule string) bool {
	return strings.HasPrefix(rule, "cluster_gpu_type_window:gpuxray_device_allocated_idle_seconds") ||
		strings.HasPrefix(rule, "namespace_gpu_type_window:gpuxray_allocated_idle_seconds")
}

func perWorkload(rule string) bool {
	return strings.HasPrefix(rule, "namespace_workload_model_window:")
}

// spread gathers the truths of the windows a recorded sample may have been
// read over.
type spread struct {
	lo, hi, sum float64
	n           int
	// unfit: a truth could not be judged (NaN).
	unfit bool
}

func (s *spread) add(v float64) {
	if math.IsNaN(v) {
		s.unfit = true
		return
	}
	if s.n == 0 {
		s.lo, s.hi = v, v
	}
	s.lo, s.hi, s.sum, s.n = math.Min(s.lo, v), math.Max(s.hi, v), s.sum+v, s.n+1
}

func (s *spread) mean() float64 { return s.sum / float64(s.n) }

// stable tells whether the truths agree within stableSpread (no pod came,
// went or changed near the windows' edges) and each could be judged.
func (s *spread) stable() bool {
	return !s.unfit && s.hi-s.lo <= stableSpread*math.Max(math.Abs(s.mean()), floorGPUs*10)
}

type seriesMean struct {
	labels    map[string]string
	got, want float64
	n         int
}

// truthOf is the truth of recorded sample r over [start, end): a mean
// number of GPUs, or pending GPUs at end. metricsQL: as MetricsQL reads
// the series of pods younger than the window (see youngPods); NaN for a
// workload's series too young to judge.
func (l *liveRun) truthOf(trs []*truther, r recorded, start, end time.Time, metricsQL bool) float64 {
	secs := end.Sub(start).Seconds()
	name := r.name
	if strings.Contains(name, "resource_requests_gpu_pending") {
		v := 0.0
		for _, a := range l.agents {
			t := end.Sub(a.scenario.Start)
			for _, u := range a.scenario.Unscheduled {
				if (r.labels["namespace"] == "" || r.labels["namespace"] == u.Namespace) && t >= u.From && t < u.To {
					v += float64(u.GPUs)
				}
			}
		}
		return v
	}
	window := r.labels["window"]
	wt := l.nodeSpans(trs, start, end)
	if strings.HasPrefix(name, "gpu_type:") {
		// Free or idle GPUs not in MIG mode, of the nodes whose GPUs are
		// of the type ("any": all of them). The rule adds counters of
		// both windows and of allocated and unallocated time, whose sum
		// does not change where one series begins and another ends: at a
		// peak window's edge, or where a pod takes or leaves a GPU. A
		// series that begins within the rate's window (a scrape wide)
		// Prometheus extrapolates back at most half a scrape, not to its
		// start, so such points are not judged.
		for t := start.Add(-l.scrape); t.Before(end); t = t.Add(time.Minute) {
			if l.sched != nil && l.sched.At(t) != l.sched.At(end) {
				return math.NaN()
			}
		}
		typ := r.labels["gpu_type"]
		ofType := func(i int) bool {
			return typ == report.GPUTypeAny || typ == report.GPUProduct(sim.ProductName(l.agents[i].scenario.System))
		}
		for i, a := range l.agents {
			if !ofType(i) {
				continue
			}
			sc := a.scenario
			for _, p := range sc.Pods {
				for _, b := range []time.Duration{p.From, p.To} {
					if at := sc.Start.Add(b); b > 0 && b < sc.Duration && !at.Before(start.Add(-l.scrape)) && !at.After(end) {
						return math.NaN()
					}
				}
			}
		}
		var v float64
		for i, sp := range wt.nodes {
			if !ofType(i) {
				continue
			}
			for _, t := range sp {
				v += t.WholeIdle + t.WholeFree
			}
		}
		return v / secs
	}
	metric := strings.SplitN(name, ":", 3)[1]
	if typedRule(name) {
		// Idle allocated time on the type's GPUs: the devices' (a GPU in
		// MIG mode carries its instances' time weighted by their slices,
		// as GPUTruth), or the namespace's pods' on GPUs not in MIG mode
		// (an instance's UUID has no type in the rules' join).
		typ := r.labels["gpu_type"]
		var v float64
		for i, sp := range wt.nodes {
			if typ != report.GPUProduct(sim.ProductName(l.agents[i].scenario.System)) {
				continue
			}
			for _, t := range sp {
				if window != "" && (window == "peak") != (t == sp[0]) {
					continue
				}
				if strings.HasPrefix(name, "namespace_") {
					v += podField(metric, t.WholeNS[r.labels["namespace"]])
				} else {
					v += totalsFor(name, metric, r.labels, t)
				}
			}
		}
		return v / secs
	}
	var v float64
	add := func(sp [2]*totals) {
		for _, t := range sp {
			if window != "" && (window == "peak") != (t == sp[0]) {
				continue
			}
			v += totalsFor(name, metric, r.labels, t)
		}
	}
	// extra: GPUs that young series read beyond their mean (youngPods).
	var extra float64
	young := func(y *youngRead) {
		for w, s := range y.extra {
			if window != "" && (window == "peak") != (w == 0) {
				continue
			}
			extra += podField(metric, s)
		}
	}
	podSeries := metricsQL && strings.HasPrefix(metric, "gpuxray_allocated_")
	if perWorkload(name) {
		k := labelsWkey(r.labels)
		if l.sharedChange(k, start, end) {
			return math.NaN()
		}
		for _, i := range wt.work[k] {
			add(wt.nodes[i])
		}
		if y := wt.young[k]; podSeries && y != nil {
			// A series' rate is off by up to a poll over its span, the
			// workload's mostly one series: not judged on short spans
			// (see workloadWindow).
			if y.shortest < l.workloadWindow() {
				return math.NaN()
			}
			young(y)
		}
		return v/secs + extra
	}
	for _, sp := range wt.nodes {
		add(sp)
	}
	if podSeries {
		for _, y := range wt.young {
			young(y)
		}
	}
	return v/secs + extra
}

// targetsOf are the targets whose series recorded sample r sums: a
// workload's nodes, kube-state-metrics for pending demand, every node for
// the rest.
func (l *liveRun) targetsOf(r recorded) []string {
	if strings.Contains(r.name, "resource_requests_gpu_pending") {
		return l.ksm
	}
	var out []string
	k := labelsWkey(r.labels)
	for _, a := range l.agents {
		if perWorkload(r.name) && !slices.ContainsFunc(a.scenario.Pods, func(p sim.Pod) bool { return workloadOf(p) == k }) {
			continue
		}
		out = append(out, a.node.Name)
	}
	return out
}

func labelsWkey(labels map[string]string) wkey {
	return wkey{labels["namespace"], labels["workload_kind"], labels["workload"], labels["model"]}
}

// nodeSpans is each node's truth over [start, end), peak and off-peak,
// cached: every rule evaluated at one time reads the same spans.
func (l *liveRun) nodeSpans(trs []*truther, start, end time.Time) *windowTruth {
	k := [2]time.Time{start, end}
	l.mu.Lock()
	c, ok := l.spans[k]
	l.mu.Unlock()
	if ok {
		return c
	}
	c = &windowTruth{nodes: make([][2]*totals, len(l.agents)), work: map[wkey][]int{}, young: map[wkey]*youngRead{}}
	for i, a := range l.agents {
		pk, op := trs[i].span(start.Sub(a.scenario.Start), end.Sub(a.scenario.Start), l.sched)
		c.nodes[i] = [2]*totals{pk, op}
		l.youngPods(trs[i], start.Sub(a.scenario.Start), end.Sub(a.scenario.Start), c.young)
		for _, t := range c.nodes[i] {
			for w := range t.Work {
				if ns := c.work[w]; len(ns) == 0 || ns[len(ns)-1] != i {
					c.work[w] = append(ns, i)
				}
			}
		}
	}
	l.mu.Lock()
	if l.spans == nil {
		l.spans = map[[2]time.Time]*windowTruth{}
	}
	l.spans[k] = c
	l.mu.Unlock()
	return c
}

// youngPods adds to young what MetricsQL reads more than the truth in the
// series of tr's pods that start inside window [a, b) (scenario offsets),
// and their shortest span.
//
// MetricsQL's rate divides a series' increase from the last sample before
// the window by the time since that sample; a series younger than the
// window has none, and its rate is its increase from its first sample by
// the time since that sample: the pod's GPUs while it ran, where
// Prometheus extrapolates its increase over the window. In a fleet's
// churn the difference adds up: at 300 nodes 116 pods younger than the
// window read 116 GPUs where their mean over the window was 67, 2% of the
// cluster's allocated GPUs. A series with a single sample in the window
// has no rate.
//
// The first sample lands l.firstSample() after the pod's start in the
// polled scenario, on average; each pod's own phase of poll and scrape
// is not known, and over many pods the mean serves.
func (l *liveRun) youngPods(tr *truther, a, b time.Duration, young map[wkey]*youngRead) {
	secs := (b - a).Seconds()
	for i, p := range tr.sc.Pods {
		t0 := p.From + l.firstSample()
		if p.From <= 0 || t0 <= a || t0 >= b {
			continue
		}
		var got [2]podSeconds
		if b-t0 >= l.scrape {
			pk, op := tr.podSpan(i, t0, b, l.sched)
			got[0].add(pk, 1/(b-t0).Seconds())
			got[1].add(op, 1/(b-t0).Seconds())
		}
		pk, op := tr.podSpan(i, a, b, l.sched)
		got[0].add(pk, -1/secs)
		got[1].add(op, -1/secs)
		k := workloadOf(p)
		y := young[k]
		if y == nil {
			y = &youngRead{shortest: b - t0}
			young[k] = y
		}
		y.extra[0].add(got[0], 1)
		y.extra[1].add(got[1], 1)
		y.shortest = min(y.shortest, b-t0)
	}
}

// firstSample is how long after a pod's start in the polled scenario its
// series' first sample is, on average: the agent lists the pod at its
// next poll (half a poll after that start, and half a poll later on
// average), and the next scrape reads it (half a scrape on average).
func (l *liveRun) firstSample() time.Duration { return l.poll + l.scrape/2 }

// totalsFor is the seconds rule name (of the metric it sums) sums, for the
// labels it keeps.
func totalsFor(name, metric string, labels map[string]string, t *totals) float64 {
	if perWorkload(name) {
		return podField(metric, t.Work[labelsWkey(labels)])
	}
	switch metric {
	case "gpuxray_device_observed_seconds":
		return t.Observed
	case "gpuxray_device_allocated_seconds":
		return t.Allocated
	case "gpuxray_device_allocated_idle_seconds":
		return t.AllocIdle
	case "gpuxray_device_allocated_active_seconds":
		return t.AllocActive
	case "gpuxray_device_unallocated_seconds":
		return t.Unallocated
	case "gpuxray_device_unallocated_active_seconds":
		return t.UnallocActive
	case "gpuxray_idle_gpus":
		return t.reclaimable()
	}
	return podField(metric, t.pods())
}

func podField(metric string, p podSeconds) float64 {
	switch metric {
	case "gpuxray_allocated_idle_seconds":
		return p.Idle
	case "gpuxray_allocated_active_seconds":
		return p.Active
	}
	return p.Allocated
}

// derivedRules are the recording rules that read other recorded series.
func derivedRules() map[string]bool {
	f, err := promrules.Parse(promrules.Rules)
	if err != nil {
		return nil
	}
	out := map[string]bool{}
	inlined := f.Inlined()
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Record != "" && strings.TrimSpace(r.Expr) != inlined[r.Record] {
				out[r.Record] = true
			}
		}
	}
	return out
}
