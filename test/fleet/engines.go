package fleet

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	promrules "github.com/gpuxray/gpuxray/deploy/prometheus"
	"github.com/gpuxray/gpuxray/report"
)

// engines sets the same history in VictoriaMetrics and in Prometheus and
// compares their answers with each other and with the truth: every
// recording rule's expression over the range, and the report. The history
// is a few hours across the 09:00 start of peak, scraped every
// CompareScrape by scrapers out of step with each other (each node's
// samples shifted by a few seconds), as real scrapes are.
func (r *run) engines(ctx context.Context) error {
	c := r.c
	start := lastMonday(time.Now(), 7).Add(7 * time.Hour)
	dur := 5 * time.Hour
	nodes, err := Generate(GenConfig{Seed: c.Seed, Nodes: c.CompareNodes, Start: start, Duration: dur})
	if err != nil {
		return err
	}
	dir := filepath.Join(r.dir, "engines")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	vmAddr, vmProc, err := startVM(ctx, r.ps, r.t, "victoria-metrics-engines", filepath.Join(dir, "vm"))
	if err != nil {
		return err
	}
	hc := HistoryConfig{Poll: c.HistoryPoll, Scrape: c.CompareScrape, Retention: 15 * time.Minute}
	var members []member
	shifts := map[string]time.Duration{}
	data := filepath.Join(dir, "prometheus-data")
	for i, n := range nodes {
		shift := time.Duration(i+1) * c.CompareScrape / time.Duration(len(nodes)+1)
		shift = shift.Truncate(time.Millisecond)
		shifts[n.Name] = shift
		om := filepath.Join(dir, n.Name+".om")
		if _, err := replayImport(ctx, r.t, dir, n, []identity{{from: n.Name, to: n.Name, shiftMS: shift.Milliseconds()}}, vmAddr, hc, om); err != nil {
			return err
		}
		blocks := filepath.Join(dir, "blocks-"+n.Name)
		out, err := exec.CommandContext(ctx, r.t.Promtool, "tsdb", "create-blocks-from", "openmetrics", "--quiet",
			"--max-block-duration=24h", om, blocks).CombinedOutput()
		if err != nil {
			return fmt.Errorf("promtool tsdb create-blocks-from openmetrics %s: %v\n%s", om, err, out)
		}
		if err := moveBlocks(blocks, data); err != nil {
			return err
		}
		members = append(members, member{tr: newTruther(asPolled(n.Scenario, c.HistoryPoll)), rename: func(s string) string { return s }, shift: shift})
	}
	if err := forceFlush(ctx, vmAddr); err != nil {
		return err
	}
	promAddr, err := startPrometheus(ctx, r.ps, r.t, dir, data)
	if err != nil {
		return err
	}
	r.log("engines: %d nodes × %s at %s scrapes in VictoriaMetrics %s and Prometheus %s", len(nodes), dur, c.CompareScrape, vmAddr, promAddr)

	// The report on both, and against the truth: 08:00 to 11:00, a whole
	// hour before peak and two of it, an hour inside the scenarios either
	// side.
	end := start.Add(dur - time.Hour)
	rng := dur - 2*time.Hour
	vr, err := runReport(ctx, r.t.Gpuxray, vmAddr, end, rng, c.ReportStep)
	if err != nil {
		return err
	}
	pr, err := runReport(ctx, r.t.Gpuxray, promAddr, end, rng, c.ReportStep)
	if err != nil {
		return err
	}
	rc := report.DefaultConfig()
	// Each engine's report against the truth as that engine's increase()
	// reads the steps (engineReads), and against each other's: where
	// they read a step differently (a window switch), the difference is
	// each one's from the truth, within the tolerance apart.
	wantVM := historyTruth(members, end.Add(-rng), rng, c.ReportStep, c.CompareScrape, r.sched, rc, readsVictoriaMetrics)
	wantProm := historyTruth(members, end.Add(-rng), rng, c.ReportStep, c.CompareScrape, r.sched, rc, readsPrometheus)
	compareReports(r.res, "engines", "report, VictoriaMetrics vs Prometheus: ", &vr.r, asReadBy(&pr.r, &wantProm.Report, &wantVM.Report))
	compareReports(r.res, "engines", "report on VictoriaMetrics: ", &vr.r, &wantVM.Report)
	compareReports(r.res, "engines", "report on Prometheus: ", &pr.r, &wantProm.Report)

	// Every recording rule's expression, on both, every minute.
	rules, err := promrules.Parse(promrules.Rules)
	if err != nil {
		return err
	}
	exprs := fleetRules(rules.Inlined())
	trs := make([]*truther, len(nodes))
	for i, m := range members {
		trs[i] = m.tr
	}
	l := &liveRun{sched: r.sched, poll: c.HistoryPoll, scrape: c.CompareScrape}
	for _, n := range nodes {
		sc := asPolled(n.Scenario, c.HistoryPoll)
		sc.Start = sc.Start.Add(shifts[n.Name])
		l.agents = append(l.agents, &liveAgent{node: n, scenario: sc})
	}
	for i := range trs {
		trs[i] = newTruther(l.agents[i].scenario)
	}
	from := end.Add(-rng).Add(10 * time.Minute)
	names := make([]string, 0, len(exprs))
	for n := range exprs {
		names = append(names, n)
	}
	sort.Strings(names)
	var diffPoints, points int
	worstDiff := 0.0
	worstWhere := ""
	for _, name := range names {
		q := exprs[name]
		var got [2]map[string]map[int64]float64
		for e, addr := range []string{vmAddr, promAddr} {
			var m matrix
			if err := query(ctx, addr, queryRangePath(q, from, end, time.Minute), &m); err != nil {
				return fmt.Errorf("rule %s on %s: %w", name, addr, err)
			}
			got[e] = map[string]map[int64]float64{}
			for _, s := range m {
				k := seriesKey(s.Metric)
				got[e][k] = map[int64]float64{}
				for _, v := range s.Values {
					got[e][k][sampleTime(v[0]).Unix()] = sampleValue(v[1])
				}
			}
		}
		vsTruth := [2]*worst{
			newWorst("engines", "rule "+name+" on VictoriaMetrics", "GPUs", floorGPUs),
			newWorst("engines", "rule "+name+" on Prometheus", "GPUs", floorGPUs),
		}
		vsTruth[0].mayNotJudge, vsTruth[1].mayNotJudge = true, true
		skipped := 0
		for k, byT := range got[0] {
			labels := parseKey(k)
			for ts, v := range byT {
				at := time.Unix(ts, 0)
				pv, ok := got[1][k][ts]
				if !ok {
					pv = math.NaN()
				}
				points++
				if d := relErr(v, pv, floorGPUs); d > Tolerance || math.IsNaN(d) {
					diffPoints++
					if math.IsNaN(d) {
						d = math.Inf(1)
					}
					if d > worstDiff {
						worstDiff, worstWhere = d, fmt.Sprintf("%s%v at %s: %.4g vs %.4g", name, labels, at.Format("15:04"), v, pv)
					}
				}
				rec := recorded{name: name, labels: labels, at: at}
				// The truth as each engine reads young series: MetricsQL
				// over their own span, Prometheus over the window.
				var truths [2]spread
				for lag := time.Duration(0); lag <= c.CompareScrape; lag += c.CompareScrape / 2 {
					for _, before := range []time.Duration{0, c.CompareScrape} {
						e := at.Add(-lag)
						for i := range truths {
							truths[i].add(l.truthOf(trs, rec, e.Add(-5*time.Minute-before), e, i == 0))
						}
					}
				}
				if !truths[0].stable() || !truths[1].stable() {
					skipped++
					continue
				}
				for i, got := range []float64{v, pv} {
					vsTruth[i].add(fmt.Sprintf("%v at %s", labels, at.Format("15:04")), got, truths[i].mean())
				}
			}
		}
		for _, w := range vsTruth {
			if skipped > 0 {
				w.notes = append(w.notes, fmt.Sprintf("%d points near a change skipped", skipped))
			}
			r.res.addWorst(w)
		}
	}
	if err := r.splitUnderLimit(ctx, vmProc, filepath.Join(dir, "vm"), end, rng, &vr.r); err != nil {
		return err
	}
	r.res.measure("engines: rule points where VictoriaMetrics and Prometheus differ by over 1%", 100*float64(diffPoints)/float64(max(points, 1)), "%")
	r.res.measure("engines: largest difference of a rule point, VictoriaMetrics vs Prometheus", 100*worstDiff, "%")
	r.log("engines: %d of %d rule points differ by over 1%% between the engines, the most %.1f%% (%s)", diffPoints, points, 100*worstDiff, worstWhere)
	r.log("engines checks done")
	return nil
}

// asReadBy is report r, read from an engine whose truth is from, with its
// heatmap as an engine whose truth is to would read it: each cell moved
// by the two truths' ratio. An hour's cell is where the engines' readings
// of a window switch part most (engineReads); elsewhere they agree within
// the tolerance as they are.
func asReadBy(r, from, to *report.Report) *report.Report {
	out := *r
	for d := range out.Heatmap.IdleAllocatedGPUs {
		for h, v := range out.Heatmap.IdleAllocatedGPUs[d] {
			f, t := from.Heatmap.IdleAllocatedGPUs[d][h], to.Heatmap.IdleAllocatedGPUs[d][h]
			if v != nil && f != nil && t != nil && *f > 0 {
				x := *v * *t / *f
				out.Heatmap.IdleAllocatedGPUs[d][h] = &x
			}
		}
	}
	return &out
}

// fleetRules is the recording rules the fleet can check. Left out:
//   - those that read ResourceClaims from kube-state-metrics'
//     custom-resource-state metrics (DRA demand), for the fleet's
//     kube-state-metrics, like collector/sim's, serves pods only;
//   - the queue X-ray's (gpuxray.queue.rules), for the generated fleet has
//     no priority classes or Kueue queues: its pods all rank 0;
//   - those that count no GPUs (notGPUs).
//
// deploy/prometheus/tests checks both with promtool, and report's tests the
// queue X-ray's matching.
func fleetRules(exprs map[string]string) map[string]string {
	out := map[string]string{}
	for name, e := range exprs {
		if !strings.Contains(e, "kube_customresource_") && !queueRule(e) && !notGPUs(name) {
			out[name] = e
		}
	}
	return out
}

// notGPUs: a recorded series that is no number of GPUs: the join of a
// GPU's type (1 per GPU) and the priced rules (currency per hour, from a
// price series the fleet does not serve).
func notGPUs(name string) bool {
	return strings.HasSuffix(name, ":info") || strings.Contains(name, "_cost:")
}

// queueRule is whether expression e is one of the queue X-ray's: it reads
// PriorityClass values, pods' priority classes or Kueue.
func queueRule(e string) bool {
	for _, s := range []string{"gpuxray_priority_class_value", "kube_pod_info", "kueue_", "cluster_queue"} {
		if strings.Contains(e, s) {
			return true
		}
	}
	return false
}

func seriesKey(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k + "\x00" + m[k] + "\x00")
	}
	return b.String()
}

func parseKey(k string) map[string]string {
	parts := strings.Split(k, "\x00")
	m := map[string]string{}
	for i := 0; i+1 < len(parts); i += 2 {
		m[parts[i]] = parts[i+1]
	}
	return m
}

// moveBlocks moves promtool's blocks into a Prometheus data directory.
func moveBlocks(from, to string) error {
	if err := os.MkdirAll(to, 0o755); err != nil {
		return err
	}
	bs, err := os.ReadDir(from)
	if err != nil || len(bs) == 0 {
		return fmt.Errorf("no blocks in %s: %v", from, err)
	}
	for _, b := range bs {
		if err := os.Rename(filepath.Join(from, b.Name()), filepath.Join(to, b.Name())); err != nil {
			return err
		}
	}
	return nil
}

// splitUnderLimit restarts VictoriaMetrics on the same data with a limit of
// points per series far under the report's queries
// (-search.maxPointsPerTimeseries, 30,000 by default): the report must
// split its queries where the engine refuses them, and answer the same.
func (r *run) splitUnderLimit(ctx context.Context, vm *proc, data string, end time.Time, rng time.Duration, want *report.Report) error {
	vm.stop(10 * time.Second)
	const limit = 5
	addr, _, err := startVM(ctx, r.ps, r.t, "victoria-metrics-limited", data, fmt.Sprintf("-search.maxPointsPerTimeseries=%d", limit))
	if err != nil {
		return err
	}
	got, err := runReport(ctx, r.t.Gpuxray, addr, end, rng, r.c.ReportStep)
	if err != nil {
		r.res.pass("engines", fmt.Sprintf("report under -search.maxPointsPerTimeseries=%d: answered", limit), false, err.Error())
		return nil
	}
	compareReports(r.res, "engines", fmt.Sprintf("report split under -search.maxPointsPerTimeseries=%d vs whole: ", limit), &got.r, want)
	r.log("engines: report split under -search.maxPointsPerTimeseries=%d in %s", limit, got.took.Round(time.Millisecond))
	return nil
}
