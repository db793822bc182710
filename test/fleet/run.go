package fleet

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/gpuxray/gpuxray/agent"
	promrules "github.com/gpuxray/gpuxray/deploy/prometheus"
	"github.com/gpuxray/gpuxray/report"
)

// Config is one fleet run.
type Config struct {
	Seed  uint64
	Nodes int
	// Dir holds the run's files (engine data, logs); a temporary directory
	// when empty, removed after the run unless Keep.
	Dir  string
	Keep bool
	// Log gets progress lines; nil for none.
	Log io.Writer

	// Live: the shards' scrape interval, vmalert's evaluation interval,
	// the agents' lead-in and poll interval, and how long to wait at most
	// for the alerts that must arrive.
	Scrape, Eval time.Duration
	LeadIn, Poll time.Duration
	LiveTimeout  time.Duration

	// History: its length in days (a week: 7), how many of its nodes are
	// replayed (the others are copies of those, each under its own name),
	// replay's poll and scrape intervals, and the report's step.
	HistoryDays     int
	Distinct        int
	HistoryPoll     time.Duration
	HistoryScrape   time.Duration
	ReportStep      time.Duration
	HistoryParallel int
	// HistoryAfterLive starts the history's replays and import once the
	// live phase's agents, scrapers and vmalert have stopped, rather than
	// beside them: on 2 cores, a thousand agents and vmalert's rounds over
	// them need what CPU there is, and so does the engine to import a
	// thousand node-weeks.
	HistoryAfterLive bool

	// Engines: nodes of a shorter history set in both VictoriaMetrics and
	// Prometheus (0: none), their scrape interval.
	CompareNodes  int
	CompareScrape time.Duration
}

// DefaultConfig is `make fleet`'s run for n nodes.
func DefaultConfig(n int) Config {
	c := Config{
		Seed: 1, Nodes: n,
		Scrape: 5 * time.Second, Eval: 15 * time.Second,
		LeadIn: 32 * time.Minute, Poll: time.Second, LiveTimeout: 6 * time.Minute,
		HistoryDays: 7, Distinct: 2, HistoryPoll: 15 * time.Second, HistoryScrape: 5 * time.Minute,
		ReportStep: 15 * time.Minute, HistoryParallel: runtime.NumCPU(),
		CompareNodes: 2, CompareScrape: 30 * time.Second,
	}
	if n > bigFleet {
		// Past bigFleet nodes, the live agents' 1 s polls (a kubelet List
		// and the NVML reads, ≈ 1.5 ms of CPU each with the simulator)
		// and 5 s scrapes would take both of this machine's cores. A node
		// polled every 5 s integrates the same samples, and rates over 5
		// minutes need no finer scrape than 15 s (a multiple of the poll:
		// every scrape then reads a counter as old).
		// A workload's series is then judged on windows of at least 250 s
		// (liveRun.workloadWindow), which the live phase waits for.
		// vmalert's rounds over 1,000 nodes took 25 s of a 15 s interval
		// on these cores, beside the agents: it evaluates every 30 s, as
		// docs/fleet.md advises past the interval.
		c.Poll, c.Scrape, c.Eval, c.LiveTimeout = 5*time.Second, 15*time.Second, 30*time.Second, 12*time.Minute
		c.HistoryAfterLive = true
	}
	return c
}

// bigFleet is the most nodes DefaultConfig polls every second.
const bigFleet = 250

func (c Config) validate() error {
	switch {
	case c.Nodes < 1:
		return fmt.Errorf("fleet: %d nodes, want at least 1", c.Nodes)
	case c.HistoryDays < 1:
		return fmt.Errorf("fleet: a history of %d days, want at least 1", c.HistoryDays)
	case c.Distinct < 1:
		return fmt.Errorf("fleet: %d distinct nodes in the history, want at least 1", c.Distinct)
	case c.HistoryPoll > 20*time.Second:
		return fmt.Errorf("fleet: history poll %s loses samples: the driver keeps 20 s of them", c.HistoryPoll)
	case c.HistoryScrape%c.HistoryPoll != 0 || c.ReportStep%c.HistoryScrape != 0:
		return fmt.Errorf("fleet: the history's scrapes (%s) must fall on its polls (%s) and its report's steps (%s) on scrapes", c.HistoryScrape, c.HistoryPoll, c.ReportStep)
	}
	return nil
}

// run is the state of one fleet run.
type run struct {
	c     Config
	t     Tools
	dir   string
	ps    *procs
	res   *Result
	sched *agent.Schedule
	log   func(format string, a ...any)
	// liveDone tells the history that the live phase no longer needs
	// the CPU (Config.HistoryAfterLive).
	liveDone func()
}

// Run runs the fleet: the live phase, the history and the engines'
// comparison at once, then their checks. The error is for a run that could
// not be made; figures off the truth are in the result.
func Run(ctx context.Context, t Tools, c Config) (*Result, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	sched, err := agent.ParseSchedule(agent.DefaultPeakSchedule, time.UTC)
	if err != nil {
		return nil, err
	}
	dir := c.Dir
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
	} else {
		if dir, err = os.MkdirTemp("", "gpuxray-fleet"); err != nil {
			return nil, err
		}
		if !c.Keep {
			defer os.RemoveAll(dir)
		}
	}
	var mu sync.Mutex
	began := time.Now()
	r := &run{c: c, t: t, dir: dir, ps: &procs{dir: dir}, res: &Result{Nodes: c.Nodes, GPUs: c.Nodes * GPUsPerNode}, sched: sched,
		log: func(format string, a ...any) {
			if c.Log != nil {
				mu.Lock()
				fmt.Fprintf(c.Log, "%6.1fs  %s\n", time.Since(began).Seconds(), fmt.Sprintf(format, a...))
				mu.Unlock()
			}
		}}
	defer r.ps.Stop()

	vmAddr, _, err := startVM(ctx, r.ps, t, "victoria-metrics", filepath.Join(dir, "vm"))
	if err != nil {
		return nil, err
	}
	r.log("victoria-metrics on %s", vmAddr)
	g, gctx := errgroup.WithContext(ctx)
	liveDone := make(chan struct{})
	r.liveDone = sync.OnceFunc(func() { close(liveDone) })
	g.Go(func() error {
		if c.HistoryAfterLive {
			select {
			case <-liveDone:
			case <-gctx.Done():
				return gctx.Err()
			}
			r.log("history: starts, the live phase done")
		}
		return r.history(gctx, vmAddr)
	})
	if c.CompareNodes > 0 {
		g.Go(func() error { return r.engines(gctx) })
	}
	g.Go(func() error {
		defer r.liveDone()
		return r.live(gctx, vmAddr)
	})
	if err := g.Wait(); err != nil {
		return r.res, err
	}
	r.measureDisk(ctx, vmAddr)
	r.res.measure("run: wall time", time.Since(began).Seconds(), "s")
	return r.res, nil
}

// lastMonday is the Monday 00:00 UTC that starts the last run of days,
// with an hour either side, wholly before now: the history lies inside the
// engine's retention and before its clock.
func lastMonday(now time.Time, days int) time.Time {
	d := now.UTC().Truncate(24 * time.Hour)
	for d.Weekday() != time.Monday || d.Add(time.Duration(days)*24*time.Hour+2*time.Hour).After(now) {
		d = d.Add(-24 * time.Hour)
	}
	return d
}

// live runs the fleet's agents for a few minutes, scraped by two vmagent
// shards into the engine, with vmalert and Alertmanager.
func (r *run) live(ctx context.Context, vmAddr string) error {
	c := r.c
	nodes, err := Generate(GenConfig{Seed: c.Seed, Nodes: c.Nodes, Start: lastMonday(time.Now(), 7), Duration: 7 * 24 * time.Hour})
	if err != nil {
		return err
	}
	hook, err := startWebhook()
	if err != nil {
		return err
	}
	defer hook.close()
	amAddr, err := startAlertmanager(ctx, r.ps, r.t, r.dir, hook.url)
	if err != nil {
		return err
	}
	rules := filepath.Join(r.dir, promrules.RulesFile)
	if err := os.WriteFile(rules, promrules.Rules, 0o644); err != nil {
		return err
	}
	alertAddr, err := startVMAlert(ctx, r.ps, r.t, rules, vmAddr, amAddr, c.Eval)
	if err != nil {
		return err
	}
	r.log("alertmanager on %s, vmalert on %s evaluating %s every %s", amAddr, alertAddr, promrules.RulesFile, c.Eval)
	started := time.Now()
	fleet, err := ServeFleet(ctx, nodes, LiveConfig{LeadIn: c.LeadIn, LeadInStep: 10 * time.Second, Poll: c.Poll, Parallel: max(1, runtime.NumCPU())},
		r.sched, zap.NewNop())
	if err != nil {
		return err
	}
	defer fleet.Stop()
	r.res.measure("live: agents' lead-in, all nodes", time.Since(started).Seconds(), "s")
	// A shared GPU's time waits in the agent until its processes' samples
	// have come (agent.MaxProcessWait): live, its counters run that much
	// behind, where the lead-in's last poll left them current. Scraped
	// from the moment an agent goes live, the first windows would read
	// that wait as lost time (5-7 s of each shared GPU, 4% of a
	// developer's pod over its first minutes at 100 nodes).
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(agent.MaxProcessWait + 2*c.Poll):
	}
	targets := filepath.Join(r.dir, "targets.json")
	if err := writeTargets(targets, map[string]string{}); err != nil {
		return err
	}
	shards, err := startShards(ctx, r.ps, r.t, r.dir, scrapeConfig(targets, fleet.KubeStateAddrs(), c.Scrape), vmAddr, 2)
	if err != nil {
		return err
	}
	if err := writeTargets(targets, fleet.Targets()); err != nil {
		return err
	}
	l := &liveRun{agents: fleet.agents, targetsAt: time.Now(), scrape: c.Scrape, eval: c.Eval, poll: c.Poll, sched: r.sched, vm: vmAddr, shards: shards, alert: alertAddr, hook: hook,
		nodeOf: map[string]string{}, ksm: fleet.KubeStateAddrs()}
	for n, addr := range fleet.Targets() {
		l.nodeOf[addr] = n
	}
	countedFrom := snapshotAgents(fleet.agents)
	r.log("%d agents serving, scraped every %s by vmagent shards %s", len(nodes), c.Scrape, strings.Join(shards, ", "))

	// Wait for the idle allocations' alerts, and for enough evaluations of
	// the recording rules from the first the checks judge of a workload's
	// series (l.workloadFrom): minWorkloadEvals and one more. vmalert's
	// rounds take 0.3 s at 40 nodes and 12–26 s at 1,000 on 2 cores, and a
	// round that runs late delays the next: its rounds are counted, not
	// the time.
	deadline := l.targetsAt.Add(c.LiveTimeout)
	base := math.NaN()
	evaluated := func() float64 {
		_, b, err := httpGet(ctx, "http://"+alertAddr+"/metrics")
		if err != nil {
			return math.NaN()
		}
		return promMetric(b, "vmalert_iteration_total", `group="gpuxray.rules"`)
	}
	for {
		l.end = time.Now()
		rounds := 0.0
		if l.end.After(l.workloadFrom()) {
			n := evaluated()
			if math.IsNaN(base) {
				base = n
			}
			rounds = n - base
		}
		must, _ := l.idleAllocations()
		got := 0
		seen := map[alertKey]bool{}
		for _, n := range hook.received() {
			k := alertKey{alert: n.Labels["alertname"], node: n.Labels["node"], namespace: n.Labels["namespace"], pod: n.Labels["pod"], gpu: n.Labels["gpu"]}
			if must[k] && !seen[k] && n.Status == "firing" {
				seen[k] = true
				got++
			}
		}
		if (got == len(must) && len(must) > 0 && rounds >= minWorkloadEvals+1) || l.end.After(deadline) {
			r.log("%d of %d idle allocations' alerts at Alertmanager after %s, %.0f rounds of rules since the first judged", got, len(must), l.end.Sub(l.targetsAt).Round(time.Second), rounds)
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
	countedTo := snapshotAgents(fleet.agents)
	r.measureLive(ctx, l, alertAddr)
	// The checks read the engine up to l.end: the agents' CPU goes to them
	// and to the history's replays.
	fleet.Stop()
	if c.Keep {
		_ = writeAgentCounters(r.dir, "from", countedFrom)
		_ = writeAgentCounters(r.dir, "to", countedTo)
	}
	l.checkAgentCounters(r.res, countedFrom, countedTo)
	l.sourceFailed = failedSources(countedFrom, countedTo)
	l.checkTargets(ctx, r.res)
	r.countSeries(ctx, l)
	// The rest of the checks read the engine and what the webhook got. The
	// history needs the engine alone: its replays run at nice 19, and at
	// 1,000 nodes the scrapers of stopped agents, vmalert and
	// Alertmanager's resolved alerts left them a tenth of a core.
	live := []string{"vmalert", "alertmanager"}
	for i := range l.shards {
		live = append(live, shardName(i))
	}
	r.ps.stopNamed(live...)
	r.liveDone()
	l.checkAlerts(ctx, r.res)
	l.checkRules(ctx, r.res)
	r.log("live checks done")
	return nil
}

// history replays the week's distinct nodes, imports every node's week,
// and checks `gpuxray report` over it against the scenarios.
func (r *run) history(ctx context.Context, vmAddr string) error {
	c := r.c
	days := time.Duration(c.HistoryDays) * 24 * time.Hour
	start := lastMonday(time.Now(), c.HistoryDays)
	// The scenarios begin an hour before the report's range and end an hour
	// after it: the agent counts from its second poll (its first reads the
	// driver's samples as a baseline), and a pod still held at the end of a
	// replay loses its last poll.
	nodes, err := Generate(GenConfig{Seed: c.Seed, Nodes: c.Nodes, Start: start.Add(-time.Hour), Duration: days + 2*time.Hour})
	if err != nil {
		return err
	}
	k := min(c.Distinct, len(nodes))
	r.res.HistoryNodes, r.res.HistoryGPUs, r.res.Distinct = len(nodes), len(nodes)*GPUsPerNode, k
	hc := HistoryConfig{Poll: c.HistoryPoll, Scrape: c.HistoryScrape, Retention: 15 * time.Minute}
	began := time.Now()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(1, c.HistoryParallel))
	var mu sync.Mutex
	var total importStats
	var members []member
	for i := 0; i < k; i++ {
		src := nodes[i]
		var ids []identity
		tr := newTruther(asPolled(src.Scenario, c.HistoryPoll))
		for j := i; j < len(nodes); j += k {
			ids = append(ids, identity{from: src.Name, to: nodes[j].Name})
			members = append(members, member{tr: tr, rename: renameNode(src.Name, nodes[j].Name)})
		}
		g.Go(func() error {
			st, err := replayImport(gctx, r.t, r.dir, src, ids, vmAddr, hc, "")
			if err != nil {
				return err
			}
			mu.Lock()
			total.series += st.series
			total.samples += st.samples
			total.bytes += st.bytes
			total.replay += st.replay
			mu.Unlock()
			r.log("history: %s replayed in %s and imported as %d nodes", src.Name, st.replay.Round(time.Second), len(ids))
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if err := forceFlush(ctx, vmAddr); err != nil {
		return err
	}
	imported := time.Since(began)
	r.res.measure(fmt.Sprintf("history: %d node-days replayed (CPU time of the replays)", k*c.HistoryDays), total.replay.Seconds(), "s")
	r.res.measure(fmt.Sprintf("history: %d node-days imported (wall time, replays included)", len(nodes)*c.HistoryDays), imported.Seconds(), "s")
	r.res.measure("history: samples imported", float64(total.samples), "")
	r.res.measure("history: series imported", float64(total.series), "")

	rc := report.DefaultConfig()
	rr, err := runReport(ctx, r.t.Gpuxray, vmAddr, start.Add(days), days, c.ReportStep)
	if err != nil {
		return err
	}
	r.log("history: gpuxray report over %d GPUs and %d days took %s, %.0f MiB", len(nodes)*GPUsPerNode, c.HistoryDays, rr.took.Round(time.Millisecond), float64(rr.maxRSS)/(1<<20))
	r.res.measure(fmt.Sprintf("report: %d GPUs over %d days, wall time", len(nodes)*GPUsPerNode, c.HistoryDays), rr.took.Seconds(), "s")
	r.res.measure("report: CPU time", rr.cpu.Seconds(), "s")
	r.res.measure("report: peak memory (max RSS)", float64(rr.maxRSS)/(1<<20), "MiB")
	r.res.summary(fmt.Sprintf("report of %d GPUs over %dd in %.1fs, %.0f MiB", len(nodes)*GPUsPerNode, c.HistoryDays, rr.took.Seconds(), float64(rr.maxRSS)/(1<<20)))
	want := historyTruth(members, start, days, c.ReportStep, c.HistoryScrape, r.sched, rc, readsExact)
	compareReports(r.res, "history", "report: ", &rr.r, &want.Report)
	compareTimeline(r.res, "history", "report: ", &rr.r, want.steps, c.ReportStep)
	r.log("history checks done")
	return nil
}

// measureLive records what the live fleet cost the engine: series per
// node, samples ingested per second, and vmalert's evaluation time; and
// checks that the rules evaluated without errors on MetricsQL.
func (r *run) measureLive(ctx context.Context, l *liveRun, alertAddr string) {
	rows := func() float64 {
		_, b, err := httpGet(ctx, "http://"+l.vm+"/metrics")
		if err != nil {
			return math.NaN()
		}
		return promMetric(b, "vm_rows_inserted_total", `type="promremotewrite"`)
	}
	a, t0 := rows(), time.Now()
	time.Sleep(10 * time.Second)
	b := rows()
	r.res.measure("live: rows ingested per second (remote write)", (b-a)/time.Since(t0).Seconds(), "")
	_, m, err := httpGet(ctx, "http://"+alertAddr+"/metrics")
	if err != nil {
		r.res.pass("live", "vmalert: rules evaluate", false, err.Error())
		return
	}
	for _, g := range []string{"gpuxray.rules", "gpuxray.alerts"} {
		sum := promMetric(m, "vmalert_iteration_duration_seconds_sum", `group="`+g+`"`)
		n := promMetric(m, "vmalert_iteration_duration_seconds_count", `group="`+g+`"`)
		r.res.measure("live: vmalert evaluation of group "+g+" (mean)", 1000*sum/n, "ms")
	}
	errs := promMetric(m, "vmalert_recording_rules_errors_total", "") + promMetric(m, "vmalert_alerting_rules_errors_total", "")
	evals := promMetric(m, "vmalert_iteration_total", "")
	r.res.pass("live", fmt.Sprintf("vmalert: every rule evaluates on MetricsQL (%.0f group evaluations)", evals), errs == 0 && evals > 0,
		fmt.Sprintf("%.0f errors", errs))
}

// countSeries records the series per node the engine held at the live
// phase's end. It reads the engine at that time, so it runs once the
// agents have stopped and left it the CPU.
func (r *run) countSeries(ctx context.Context, l *liveRun) {
	// Counted nodesPerQuery nodes at a time: a thousand nodes' series are
	// over the engine's -search.maxUniqueTimeseries (300,000 by default in
	// 1.79), which refuses the query whole.
	var sum, most float64
	nodes := 0
	var qerr error
	for lo := 0; lo < len(l.agents) && qerr == nil; lo += nodesPerQuery {
		var names []string
		for _, a := range l.agents[lo:min(lo+nodesPerQuery, len(l.agents))] {
			names = append(names, a.node.Name)
		}
		var v vector
		qerr = query(ctx, l.vm, queryPath(fmt.Sprintf(`count by (node) ({job="gpuxray", node=~%q})`, strings.Join(names, "|")), l.end), &v)
		for _, s := range v {
			x := sampleValue(s.Value[1])
			sum += x
			most = max(most, x)
			nodes++
		}
	}
	if qerr == nil && nodes > 0 {
		r.res.measure("live: series per node (mean)", sum/float64(nodes), "")
		r.res.measure("live: series per node (most)", most, "")
		r.res.measure(fmt.Sprintf("live: samples per second, %d nodes at a %s scrape", nodes, r.c.Scrape), sum/r.c.Scrape.Seconds(), "")
	}
	detail := fmt.Sprintf("%d of %d nodes", nodes, len(l.agents))
	if qerr != nil {
		detail += ": " + qerr.Error()
	}
	r.res.pass("live", "engine: series of every node counted", qerr == nil && nodes == len(l.agents), detail)
}

// promMetric sums the samples of name whose labels contain match in a text
// exposition.
func promMetric(b []byte, name, match string) float64 {
	var sum float64
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, name) || (len(line) > len(name) && line[len(name)] != '{' && line[len(name)] != ' ') {
			continue
		}
		if match != "" && !strings.Contains(line, match) {
			continue
		}
		f := strings.Fields(line)
		var x float64
		if _, err := fmt.Sscan(f[len(f)-1], &x); err == nil {
			sum += x
		}
	}
	return sum
}

// nodesPerQuery is how many nodes' series one query of the live checks
// reads at most: 25 nodes of at most a thousand series each. A query over
// 100 nodes' took more than VictoriaMetrics' -search.maxQueryDuration
// (30 s) beside the history's import on 2 cores at a load of 30.
const nodesPerQuery = 25

// measureDisk records the engine's data size per GPU-day of history.
func (r *run) measureDisk(ctx context.Context, vmAddr string) {
	_, b, err := httpGet(ctx, "http://"+vmAddr+"/metrics")
	if err != nil {
		return
	}
	size := promMetric(b, "vm_data_size_bytes", "")
	gpuDays := float64(r.res.HistoryGPUs * r.c.HistoryDays)
	r.res.measure(fmt.Sprintf("engine: data size after a %s-scraped history of %d GPU-days", r.c.HistoryScrape, int(gpuDays)), size/(1<<20), "MiB")
	r.res.measure("engine: bytes on disk per GPU-day at that scrape", size/gpuDays, "B")
}
