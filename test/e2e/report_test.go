//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuxray/gpuxray/agent"
	"github.com/gpuxray/gpuxray/collector/sim"
	"github.com/gpuxray/gpuxray/report"
)

// reportNodes are the three nodes of the report's cluster, two days each.
var reportNodes = []string{"testdata/report-a.yaml", "testdata/report-b.yaml", "testdata/report-c.yaml"}

// pendingPod is a pod kube-state-metrics reports as Pending from `from` to
// `to` (offsets from the scenarios' start), requesting gpus.
type pendingPod struct {
	namespace, name string
	gpus            int
	from, to        time.Duration
	// node is set when the pod is bound and pulling its image: not waiting for a GPU.
	node string
}

// reportPending: Monday, a two-GPU job waits 10:00-16:00 while the training
// job idles and node c is unallocated; Tuesday, three two-GPU sweeps wait
// all peak long while only the notebook's GPU is idle.
var reportPending = []pendingPod{
	{namespace: "research", name: "big-0", gpus: 2, from: 10 * time.Hour, to: 16 * time.Hour},
	{namespace: "research", name: "sweep-0", gpus: 2, from: 33 * time.Hour, to: 42 * time.Hour},
	{namespace: "research", name: "sweep-1", gpus: 2, from: 33 * time.Hour, to: 42 * time.Hour},
	{namespace: "research", name: "sweep-2", gpus: 2, from: 33 * time.Hour, to: 42 * time.Hour},
	{namespace: "inference", name: "pull-0", gpus: 1, from: 36 * time.Hour, to: 37 * time.Hour, node: "report-b"},
}

// ksmOpenMetrics writes kube-state-metrics' series for the pending pods and
// a running one, a scrape every `every` from start for d.
func ksmOpenMetrics(start time.Time, d, every time.Duration) []byte {
	var phase, req bytes.Buffer
	for at := time.Duration(0); at <= d; at += every {
		ts := fmt.Sprintf("%d.000", start.Add(at).Unix())
		fmt.Fprintf(&phase, "kube_pod_status_phase{instance=\"ksm:8080\",job=\"kube-state-metrics\",namespace=\"inference\",phase=\"Running\",pod=\"vllm-0\"} 1 %s\n", ts)
		fmt.Fprintf(&req, "kube_pod_container_resource_requests{container=\"vllm\",instance=\"ksm:8080\",job=\"kube-state-metrics\",namespace=\"inference\",node=\"report-b\",pod=\"vllm-0\",resource=\"nvidia_com_gpu\",unit=\"integer\"} 1 %s\n", ts)
		for _, p := range reportPending {
			if at < p.from || at >= p.to {
				continue
			}
			node := ""
			if p.node != "" {
				node = fmt.Sprintf(",node=%q", p.node)
			}
			for _, ph := range []string{"Pending", "Running"} {
				v := 0
				if ph == "Pending" {
					v = 1
				}
				fmt.Fprintf(&phase, "kube_pod_status_phase{instance=\"ksm:8080\",job=\"kube-state-metrics\",namespace=%q,phase=%q,pod=%q} %d %s\n", p.namespace, ph, p.name, v, ts)
			}
			fmt.Fprintf(&req, "kube_pod_container_resource_requests{container=\"main\",instance=\"ksm:8080\",job=\"kube-state-metrics\",namespace=%q%s,pod=%q,resource=\"nvidia_com_gpu\",unit=\"integer\"} %d %s\n", p.namespace, node, p.name, p.gpus, ts)
			fmt.Fprintf(&req, "kube_pod_container_resource_requests{container=\"main\",instance=\"ksm:8080\",job=\"kube-state-metrics\",namespace=%q%s,pod=%q,resource=\"cpu\",unit=\"core\"} 8 %s\n", p.namespace, node, p.name, ts)
		}
	}
	// OpenMetrics wants each series' samples together: sort the lines.
	sorted := func(b *bytes.Buffer) string {
		lines := strings.Split(strings.TrimSpace(b.String()), "\n")
		sort.SliceStable(lines, func(i, j int) bool { return seriesOf(lines[i]) < seriesOf(lines[j]) })
		return strings.Join(lines, "\n") + "\n"
	}
	var out bytes.Buffer
	out.WriteString("# TYPE kube_pod_status_phase gauge\n# HELP kube_pod_status_phase The pods current phase.\n")
	out.WriteString(sorted(&phase))
	out.WriteString("# TYPE kube_pod_container_resource_requests gauge\n# HELP kube_pod_container_resource_requests The number of requested request resource by a container.\n")
	out.WriteString(sorted(&req))
	out.WriteString("# EOF\n")
	return out.Bytes()
}

func seriesOf(line string) string {
	return line[:strings.LastIndex(line[:strings.LastIndex(line, " ")], " ")]
}

// reportTruth is what the report must say about [from, to), from the
// scenarios and the pending pods alone.
type reportTruth struct {
	all, peak report.Funnel
	demand    report.Demand
	workloads map[string]*report.Workload // by namespace/workload
	heatmap   map[string]float64          // "weekday/hour" → mean idle allocated GPUs
}

func truthOf(t *testing.T, scs []*sim.Scenario, from, to time.Time, quantile float64) reportTruth {
	t.Helper()
	sched, err := agent.ParseSchedule(agent.DefaultPeakSchedule, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	const step = 10 * time.Second
	h := step.Hours()
	tr := reportTruth{workloads: map[string]*report.Workload{}, heatmap: map[string]float64{}}
	idleSince := map[string]time.Duration{} // pod → start of its idle run, -1 when busy
	var shortfall []float64
	heatSum := map[string]float64{}
	heatN := map[string]float64{}
	start := scs[0].Start
	for d := time.Duration(0); d < scs[0].Duration; d += step {
		mid := d + step/2
		at := start.Add(mid)
		inRange := !at.Before(from) && at.Before(to)
		peak := sched.At(at)
		var idleGPUs, unalloc, unallocActive float64
		// room is what each node could give a waiting pod: its GPUs held
		// by idle pods, and the free part of those nobody holds.
		room := make([]float64, len(scs))
		for n, sc := range scs {
			held := map[int]bool{}
			for i, p := range sc.Pods {
				key := sc.Node + "/" + p.Namespace + "/" + p.Name
				if mid < p.From || mid >= p.To {
					delete(idleSince, key)
					continue
				}
				u := sc.UtilAt(i, mid)
				n := float64(len(p.Devices))
				for _, dev := range p.Devices {
					held[dev.GPU] = true
				}
				w := tr.workloads[p.Namespace+"/"+p.Owner.Name]
				if w == nil {
					w = &report.Workload{Namespace: p.Namespace, Kind: p.Owner.Kind, Name: p.Owner.Name, Model: p.Labels["model"]}
					tr.workloads[p.Namespace+"/"+p.Owner.Name] = w
				}
				idle := u < 0.05
				if idle {
					if _, ok := idleSince[key]; !ok {
						idleSince[key] = d
					}
				} else {
					delete(idleSince, key)
				}
				if !inRange {
					continue
				}
				w.Allocated += n * h
				w.Active += n * u * h
				if peak {
					w.PeakAllocated += n * h
					w.PeakActive += n * u * h
				}
				if idle {
					idleGPUs += n
					room[slices.Index(scs, sc)] += n
					w.Idle += n * h
					if peak {
						w.PeakIdle += n * h
					}
					w.LongestIdleStreakSeconds = max(w.LongestIdleStreakSeconds, (d + step - idleSince[key]).Seconds())
				}
			}
			for gpu := 0; gpu < sc.GPUs; gpu++ {
				if !held[gpu] {
					unalloc++
					unallocActive += sc.GPUUtilAt(gpu, mid)
					room[n] += 1 - sc.GPUUtilAt(gpu, mid)
				}
			}
		}
		if !inRange {
			continue
		}
		owned := 0.0
		for _, sc := range scs {
			owned += float64(sc.GPUs)
		}
		var pending float64
		var waiting []float64
		for _, p := range reportPending {
			if p.node == "" && mid >= p.from && mid < p.to {
				pending += float64(p.gpus)
				waiting = append(waiting, float64(p.gpus))
			}
		}
		// A pod runs on one node with room for all its GPUs (the waiters
		// here are of one size, so the order does not matter); what no
		// node holds could run had the idle GPUs been on one node when the
		// cluster's room left holds it (fragmented), else it is short.
		short := 0.0
		left := slices.Clone(room)
		var unplaced []float64
		for _, g := range waiting {
			if n := slices.IndexFunc(left, func(r float64) bool { return r >= g-1e-9 }); n >= 0 {
				left[n] -= g
			} else {
				unplaced = append(unplaced, g)
			}
		}
		total := 0.0
		for _, r := range left {
			total += r
		}
		for _, g := range unplaced {
			if total >= g-1e-9 {
				total -= g
			} else {
				short += g
			}
		}
		for _, f := range []*report.Funnel{&tr.all, &tr.peak} {
			if f == &tr.peak && !peak {
				continue
			}
			f.Hours += h
			f.Owned += owned * h
			f.Idle += idleGPUs * h
			f.Unallocated += unalloc * h
			f.UnallocatedActive += unallocActive * h
		}
		key := fmt.Sprintf("%d/%02d", int(at.Weekday()), at.Hour())
		heatSum[key] += idleGPUs
		heatN[key]++
		if peak {
			reclaim := idleGPUs + unalloc - unallocActive
			dm := &tr.demand
			dm.PeakHours += h
			dm.PendingGPUHours += pending * h
			dm.ReclaimableGPUHours += reclaim * h
			dm.CoveredGPUHours += (pending - short) * h
			dm.ShortfallGPUHours += short * h
			shortfall = append(shortfall, short)
		}
	}
	for _, w := range tr.workloads {
		tr.all.Allocated += w.Allocated
		tr.all.Active += w.Active
		tr.peak.Allocated += w.PeakAllocated
		tr.peak.Active += w.PeakActive
		w.Efficiency = w.Active / w.Allocated
	}
	for k, s := range heatSum {
		tr.heatmap[k] = s / heatN[k]
	}
	dm := &tr.demand
	dm.PendingGPUs, dm.ReclaimableGPUs = dm.PendingGPUHours/dm.PeakHours, dm.ReclaimableGPUHours/dm.PeakHours
	dm.ShortfallGPUs = report.Quantile(shortfall, quantile)
	return tr
}

// near fails unless got is within 1% of want (or 0.02 of it, near zero).
func near(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > math.Max(0.01*math.Abs(want), 0.02) || math.IsNaN(got) {
		t.Errorf("%s = %.4f, want %.4f ± 1%%", what, got, want)
	}
}

// TestReport replays two days of a three-node cluster, backfills them with
// kube-state-metrics' pending pods into a real Prometheus, and checks every
// figure of `gpuxray report --format json` against the scenarios for Monday
// (idle allocation covers the waiting job: fix first) and Tuesday (demand
// exceeds capacity by 6 GPUs after reclaiming); then renders the HTML report
// in headless Chromium.
func TestReport(t *testing.T) {
	t.Parallel()
	promtool := need(t, "promtool")
	prom := need(t, "prometheus")
	started := time.Now()
	var scs []*sim.Scenario
	for _, p := range reportNodes {
		sc, err := sim.LoadScenario(p)
		if err != nil {
			t.Fatal(err)
		}
		scs = append(scs, sc)
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "data")

	// 1. Replay each node (a scrape every 2 minutes, polls every 15s: the
	// driver keeps 20s of samples) and backfill it, all at once.
	var wg sync.WaitGroup
	errs := make([]error, len(scs)+1)
	backfill := func(i int, om string) {
		blocks := filepath.Join(dir, fmt.Sprintf("blocks-%d", i))
		if out, err := exec.Command(promtool, "tsdb", "create-blocks-from", "openmetrics", om, blocks).CombinedOutput(); err != nil {
			errs[i] = fmt.Errorf("promtool tsdb create-blocks-from openmetrics %s: %v\n%s", om, err, out)
		}
	}
	for i, p := range reportNodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			om := filepath.Join(dir, fmt.Sprintf("node-%d.om", i))
			f, err := os.Create(om)
			if err != nil {
				errs[i] = err
				return
			}
			var stderr bytes.Buffer
			cmd := exec.Command(binary, "replay", "--format=openmetrics", "--scrape.interval=2m", "--poll.interval=15s", p)
			cmd.Stdout, cmd.Stderr = f, &stderr
			err = cmd.Run()
			f.Close()
			if err != nil {
				errs[i] = fmt.Errorf("replay %s: %v\n%s", p, err, stderr.String())
				return
			}
			backfill(i, om)
		}()
	}
	ksm := filepath.Join(dir, "ksm.om")
	if err := os.WriteFile(ksm, ksmOpenMetrics(scs[0].Start, scs[0].Duration, 2*time.Minute), 0o644); err != nil {
		t.Fatal(err)
	}
	backfill(len(scs), ksm)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := range errs {
		moveBlocks(t, filepath.Join(dir, fmt.Sprintf("blocks-%d", i)), data)
	}
	backfilled := time.Since(started)
	_, addr := startPrometheus(t, prom, filepath.Join(dir, "prom"), data, "global: {}\n")
	ready := time.Since(started)

	for _, c := range []struct {
		name      string
		end       time.Time
		kind      string
		gpusShort int
	}{
		{"Monday: fix first", scs[0].Start.Add(24 * time.Hour), report.VerdictFixFirst, 0},
		// Three pods of 2 GPUs wait while one GPU is idle: none fits a
		// node, all six are short (pending less reclaimable would say 5).
		{"Tuesday: short", scs[0].Start.Add(48 * time.Hour), report.VerdictShort, 6},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := reportJSON(t, addr, "--step=10m", "--range=1d", "--end="+c.end.Format(time.RFC3339))
			want := truthOf(t, scs, c.end.Add(-24*time.Hour), c.end, r.Demand.Quantile)
			if r.Verdict.Kind != c.kind || r.Verdict.GPUsShort != c.gpusShort {
				t.Errorf("verdict %s with %d GPUs short, want %s with %d: %s", r.Verdict.Kind, r.Verdict.GPUsShort, c.kind, c.gpusShort, r.Verdict.Sentence)
			}
			for _, f := range []struct {
				name      string
				got, want report.Funnel
			}{{"all", r.Funnel.All, want.all}, {"peak", r.Funnel.Peak, want.peak}} {
				near(t, f.name+" hours", f.got.Hours, f.want.Hours)
				near(t, f.name+" owned", f.got.Owned, f.want.Owned)
				near(t, f.name+" allocated", f.got.Allocated, f.want.Allocated)
				near(t, f.name+" active", f.got.Active, f.want.Active)
				near(t, f.name+" idle", f.got.Idle, f.want.Idle)
				near(t, f.name+" unallocated", f.got.Unallocated, f.want.Unallocated)
				near(t, f.name+" unallocated active", f.got.UnallocatedActive, f.want.UnallocatedActive)
			}
			d, wd := r.Demand, want.demand
			if !d.Available {
				t.Error("demand not available, want kube-state-metrics' series found")
			}
			near(t, "peak hours", d.PeakHours, wd.PeakHours)
			near(t, "pending GPU-hours", d.PendingGPUHours, wd.PendingGPUHours)
			near(t, "reclaimable GPU-hours", d.ReclaimableGPUHours, wd.ReclaimableGPUHours)
			near(t, "covered GPU-hours", d.CoveredGPUHours, wd.CoveredGPUHours)
			near(t, "shortfall GPU-hours", d.ShortfallGPUHours, wd.ShortfallGPUHours)
			near(t, "pending GPUs", d.PendingGPUs, wd.PendingGPUs)
			near(t, "reclaimable GPUs", d.ReclaimableGPUs, wd.ReclaimableGPUs)
			near(t, "shortfall GPUs", d.ShortfallGPUs, wd.ShortfallGPUs)
			near(t, "verdict's reclaimable GPUs", r.Verdict.ReclaimableGPUs, wd.ReclaimableGPUs)
			near(t, "verdict's pending GPUs", r.Verdict.PendingGPUs, wd.PendingGPUs)

			got := map[string]report.Workload{}
			for _, w := range r.TopWorkloads {
				got[w.Namespace+"/"+w.Name] = w
			}
			for id, w := range want.workloads {
				g, ok := got[id]
				if w.Allocated == 0 {
					if ok && g.Allocated > 0.02 {
						t.Errorf("workload %s: %.2f GPU-hours allocated, want none", id, g.Allocated)
					}
					continue
				}
				if !ok {
					t.Errorf("workload %s missing from the top workloads %v", id, got)
					continue
				}
				if g.Kind != w.Kind || g.Model != w.Model {
					t.Errorf("workload %s: kind %q model %q, want %q %q", id, g.Kind, g.Model, w.Kind, w.Model)
				}
				near(t, id+" allocated", g.Allocated, w.Allocated)
				near(t, id+" idle", g.Idle, w.Idle)
				near(t, id+" active", g.Active, w.Active)
				near(t, id+" idle at peak", g.PeakIdle, w.PeakIdle)
				near(t, id+" efficiency", g.Efficiency, w.Efficiency)
				near(t, id+" longest idle streak (hours)", g.LongestIdleStreakSeconds/3600, w.LongestIdleStreakSeconds/3600)
			}
			for i := 1; i < len(r.TopWorkloads); i++ {
				if r.TopWorkloads[i].PeakIdle > r.TopWorkloads[i-1].PeakIdle {
					t.Errorf("top workloads not sorted by idle at peak: %s before %s", r.TopWorkloads[i-1].ID(), r.TopWorkloads[i].ID())
				}
			}
			models := map[string]float64{}
			for _, w := range want.workloads {
				m := w.Model
				if m == "" {
					m = "(unknown)"
				}
				models[m] += w.PeakIdle
			}
			for _, m := range r.TopModels {
				near(t, "model "+m.Model+" idle at peak", m.PeakIdle, models[m.Model])
			}

			cells := 0
			for wd := range r.Heatmap.IdleAllocatedGPUs {
				for h, v := range r.Heatmap.IdleAllocatedGPUs[wd] {
					key := fmt.Sprintf("%d/%02d", wd, h)
					w, ok := want.heatmap[key]
					switch {
					case v == nil && ok:
						t.Errorf("heatmap %s: no data, want %.3f", key, w)
					case v != nil && !ok:
						t.Errorf("heatmap %s: %.3f, outside the range", key, *v)
					case v != nil:
						cells++
						near(t, "heatmap "+key, *v, w)
					}
				}
			}
			if cells != 24 {
				t.Errorf("heatmap has %d cells, want 24", cells)
			}
			if len(r.Missing) != 0 {
				t.Errorf("missing data %+v, want none", r.Missing)
			}

			// One hint a workload: the notebook fits a slice (it could also
			// share a GPU and is idle), vllm is memory-bound (and idle).
			hints := map[string]bool{}
			perWorkload := map[string]int{}
			for _, h := range r.Hints {
				hints[h.Namespace+"/"+h.Name+" "+h.Hint+" "+h.Profile] = true
				perWorkload[h.Namespace+"/"+h.Name]++
			}
			for _, h := range []string{"data-science/notebook mig 1g.10gb", "inference/vllm memory_bound "} {
				if !hints[h] {
					t.Errorf("no hint %q in %v", h, hints)
				}
			}
			for w, n := range perWorkload {
				if n != 1 {
					t.Errorf("%s has %d hints, want one: %v", w, n, hints)
				}
			}
			for _, w := range r.TopWorkloads {
				if w.SharedGPU || len(w.GPUNames) != 1 || !strings.Contains(w.GPUNames[0], "H100") {
					t.Errorf("workload %s: shared %v, GPUs %q; want an unshared H100", w.ID(), w.SharedGPU, w.GPUNames)
				}
			}
			for h := range hints {
				if strings.HasPrefix(h, "research/") || strings.HasPrefix(h, "batch/") {
					t.Errorf("hint %q for a busy workload", h)
				}
			}
		})
	}
	reported := time.Since(started)

	// The text report names the verdict; the HTML report renders in Chromium.
	text := string(runReport(t, addr, "--step=10m", "--range=2d", "--end=2026-12-02"))
	for _, want := range []string{"VERDICT  After reclaiming", "research/train", "TOP MODELS", "RIGHT-SIZING"} {
		if !strings.Contains(text, want) {
			t.Errorf("text report lacks %q:\n%s", want, text)
		}
	}
	if testing.Verbose() {
		t.Logf("gpuxray report --range=2d --end=2026-12-02:\n%s", text)
	}
	page := filepath.Join(dir, "report.html")
	runReport(t, addr, "--step=10m", "--range=2d", "--end=2026-12-02T00:00:00Z", "--format=html", "--output="+page)
	if a := os.Getenv("ARTIFACTS"); a != "" {
		if b, err := os.ReadFile(page); err == nil {
			_ = os.WriteFile(filepath.Join(a, "gpuxray-report.html"), b, 0o644)
		}
	}
	checkHTMLInChromium(t, page)
	t.Logf("backfilled in %s, Prometheus ready at %s, JSON reports checked at %s, done at %s",
		backfilled.Round(time.Millisecond), ready.Round(time.Millisecond), reported.Round(time.Millisecond), time.Since(started).Round(time.Millisecond))
}

// checkHTMLInChromium opens the page in headless Chromium: no console
// message (a blocked fetch or a broken chart would log one), every chart in
// the rendered DOM, and the screenshot showing the charts' colours. The
// screenshot is kept in $ARTIFACTS when set.
func checkHTMLInChromium(t *testing.T, page string) {
	t.Helper()
	chromium := needChromium(t)
	html, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`(?i)(src|href)\s*=\s*"(https?:)?//`).Find(html); m != nil {
		t.Errorf("the page fetches from the network: %s", m)
	}
	shotDir := os.Getenv("ARTIFACTS")
	if shotDir == "" {
		shotDir = t.TempDir()
	}
	shot := filepath.Join(shotDir, "gpuxray-report.png")
	flags := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
		"--disable-sync", "--no-first-run", "--hide-scrollbars", "--enable-logging=stderr", "--v=0", "--user-data-dir=" + t.TempDir()}
	url := "file://" + page
	dom, errOut := chromiumRun(t, chromium, append(flags, "--dump-dom", url)...)
	for _, id := range []string{`id="funnel"`, `id="heatmap"`, `id="wasters"`, `id="timeline"`, `class="cell"`, `class="bar"`} {
		if !strings.Contains(dom, id) {
			t.Errorf("rendered DOM lacks %s", id)
		}
	}
	console := regexp.MustCompile(`(?m)^.*(CONSOLE|Refused to|Uncaught|ERR_).*$`)
	if m := console.FindAllString(errOut, -1); len(m) > 0 {
		t.Errorf("console messages while rendering:\n%s", strings.Join(m, "\n"))
	}
	_, errOut = chromiumRun(t, chromium, append(flags, "--screenshot="+shot, "--window-size=1200,2400", url)...)
	if m := console.FindAllString(errOut, -1); len(m) > 0 {
		t.Errorf("console messages while taking the screenshot:\n%s", strings.Join(m, "\n"))
	}
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v\n%s", err, errOut)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	// The charts' own colours are on screen: idle red, active green, allocated blue.
	for name, c := range map[string][3]uint32{"idle red": {0xd1, 0x49, 0x5b}, "active green": {0x2e, 0x9d, 0x5b}, "allocated blue": {0x3b, 0x82, 0xc4}} {
		if n := countColor(img, c); n < 500 {
			t.Errorf("screenshot has %d pixels of the %s, want a chart's worth", n, name)
		}
	}
	t.Logf("screenshot: %s", shot)
}

func countColor(img image.Image, c [3]uint32) int {
	n := 0
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if absDiff(r>>8, c[0]) <= 3 && absDiff(g>>8, c[1]) <= 3 && absDiff(bl>>8, c[2]) <= 3 {
				n++
			}
		}
	}
	return n
}

func absDiff(a, b uint32) uint32 {
	if a > b {
		return a - b
	}
	return b - a
}

func chromiumRun(t *testing.T, chromium string, args ...string) (stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(chromium, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("chromium %v: %v\n%s", args, err, errb.String())
		}
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("chromium did not finish within 60s\n%s", errb.String())
	}
	return out.String(), errb.String()
}

// needChromium is need for Debian's chromium (or chromium-browser elsewhere).
func needChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return need(t, "chromium")
}

// TestReportFewMinutes: a Prometheus holding the first minutes of a node's
// data (an agent that has run 21 minutes, on a Sunday night, without
// kube-state-metrics). The default week's report, its end minutes after
// the first sample, covers those minutes and lists the rest as missing
// (it failed: the end, rounded down to the step, fell before any data),
// from the real time of the first sample; every GPU count is over the time
// covered, so the 8-GPU node owns 8 GPUs, not 2.8; the verdict, with no
// peak time, is over all hours and says so; the HTML chart draws no pending
// line for unknown demand; the pods time-slicing a GPU are not told to
// share one; right-sizing hints are withheld from 21 minutes of data unless
// --hints.min-time allows them.
func TestReportFewMinutes(t *testing.T) {
	t.Parallel()
	promtool := need(t, "promtool")
	prom := need(t, "prometheus")
	const scenario = "testdata/report-minutes.yaml"
	sc, err := sim.LoadScenario(scenario)
	if err != nil {
		t.Fatal(err)
	}
	d0 := sc.Start
	dir := t.TempDir()
	om := filepath.Join(dir, "node.om")
	f, err := os.Create(om)
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(binary, "replay", "--format=openmetrics", "--scrape.interval=15s", "--poll.interval=5s", scenario)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if err == nil {
		// Without kube-state-metrics: the agent's series only, not the
		// cluster series replay writes beside them.
		_, err = f.Write(agentOnly(stdout.Bytes()))
	}
	f.Close()
	if err != nil {
		t.Fatalf("replay %s: %v\n%s", scenario, err, stderr.String())
	}
	data := filepath.Join(dir, "data")
	if out, err := exec.Command(promtool, "tsdb", "create-blocks-from", "openmetrics", om, data).CombinedOutput(); err != nil {
		t.Fatalf("promtool tsdb create-blocks-from openmetrics: %v\n%s", err, out)
	}
	_, addr := startPrometheus(t, prom, filepath.Join(dir, "prom"), data, "global: {}\n")

	gpuxrayReport := func(args ...string) []byte {
		t.Helper()
		cmd := exec.Command(binary, append([]string{"report", "--prometheus=http://" + addr}, args...)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("gpuxray report %v: %v\n%s", args, err, stderr.String())
		}
		return stdout.Bytes()
	}
	jsonReport := func(args ...string) report.Report {
		t.Helper()
		var r report.Report
		if err := json.Unmarshal(gpuxrayReport(append(args, "--format=json")...), &r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	// within: a covered time within a scrape interval or two of want.
	within := func(what string, hours float64, want time.Duration) {
		t.Helper()
		if got := time.Duration(hours * float64(time.Hour)); got < want-30*time.Second || got > want+30*time.Second {
			t.Errorf("%s: %s covered, want %s", what, got.Round(time.Second), want)
		}
	}
	missing := func(what string, r report.Report, from, to time.Time) {
		t.Helper()
		want := []report.Missing{{Source: "gpuxray", Instance: "minutes-node:9471", Start: from, End: to}}
		if len(r.Missing) != 1 || !r.Missing[0].Start.Equal(from) || !r.Missing[0].End.Equal(to) || r.Missing[0].Source != "gpuxray" {
			t.Errorf("%s: missing %+v, want %+v", what, r.Missing, want)
		}
	}

	t.Run("the default week, four minutes after the first sample", func(t *testing.T) {
		end := d0.Add(4 * time.Minute)
		r := jsonReport("--range=7d", "--end="+end.Format(time.RFC3339))
		if !r.Range.End.Equal(end) {
			t.Errorf("range ends %s, want %s", r.Range.End, end)
		}
		within("week", r.Funnel.All.Hours, 4*time.Minute)
		near(t, "owned GPUs", r.Funnel.All.GPUs(r.Funnel.All.Owned), 8)
		// The data begins at the first scrape, 02:00:20, not at 01:59:20
		// (the start of the step it fell in).
		missing("week", r, end.Add(-7*24*time.Hour), d0)
	})

	end := d0.Add(21 * time.Minute)
	r := jsonReport("--range=1h", "--end="+end.Format(time.RFC3339), "--hints.min-time=10m")
	t.Run("an hour with 21 minutes of data", func(t *testing.T) {
		approx := func(what string, got, want float64) { t.Helper(); near(t, what, got, want) }
		approx("range hours", r.Range.Hours, 1)
		within("hour", r.Funnel.All.Hours, 21*time.Minute)
		approx("owned GPUs", r.Funnel.All.GPUs(r.Funnel.All.Owned), 8)
		missing("hour", r, end.Add(-time.Hour), d0)
		for _, p := range r.Timeline {
			if p.Covered > 0.5 {
				approx("timeline owned GPUs at "+p.Start.Format("15:04"), p.OwnedGPUs, 8)
			}
		}
	})
	t.Run("no peak time: the verdict is over all hours", func(t *testing.T) {
		if r.Range.PeakHours != 0 || r.Demand.Basis != report.BasisAll || r.Verdict.Kind != report.VerdictNoDemandData ||
			!strings.HasPrefix(r.Verdict.Sentence, "The range has no peak time; over all hours, reclaimable capacity is ") {
			t.Errorf("%gh of peak, basis %q, verdict %s: %q", r.Range.PeakHours, r.Demand.Basis, r.Verdict.Kind, r.Verdict.Sentence)
		}
		if r.Demand.ReclaimableGPUs < 1 {
			t.Errorf("reclaimable %.2f GPUs over all hours, want the idle notebook's and the unallocated GPUs", r.Demand.ReclaimableGPUs)
		}
	})
	t.Run("pods on a shared GPU", func(t *testing.T) {
		for _, w := range r.TopWorkloads {
			if shared := w.Namespace == "ml"; w.SharedGPU != shared {
				t.Errorf("%s: shared_gpu %v, want %v", w.ID(), w.SharedGPU, shared)
			}
		}
		kinds := map[string]string{}
		for _, h := range r.Hints {
			if _, dup := kinds[h.Namespace+"/"+h.Name]; dup {
				t.Errorf("%s/%s has more than one hint", h.Namespace, h.Name)
			}
			kinds[h.Namespace+"/"+h.Name] = h.Hint + " " + h.Profile
			if h.Namespace == "ml" && h.Hint == report.HintShared {
				t.Errorf("%s/%s already shares a GPU and is told: %s", h.Namespace, h.Name, h.Message)
			}
		}
		if kinds["data-science/notebook"] != "mig 1g.10gb" || kinds["ml/scratch"] != "mig 1g.10gb" {
			t.Errorf("hints %v, want the notebook and the idle time-sliced pod to fit a 1g.10gb slice", kinds)
		}
	})
	t.Run("no hints from 21 minutes by default", func(t *testing.T) {
		d := jsonReport("--range=1h", "--end="+end.Format(time.RFC3339))
		if len(d.Hints) != 0 || d.HintsWithheld.Workloads != len(r.Hints) || d.HintsWithheld.MinHours != 1 {
			t.Errorf("hints %+v, withheld %+v; want none, the %d of --hints.min-time=10m withheld for want of an hour", d.Hints, d.HintsWithheld, len(r.Hints))
		}
		text := string(gpuxrayReport("--range=1h", "--end="+end.Format(time.RFC3339)))
		if !strings.Contains(text, fmt.Sprintf("%d hints withheld for lack of data: a hint needs 1h of a workload's activity", len(r.Hints))) {
			t.Errorf("the text report does not say hints were withheld:\n%s", text)
		}
	})
	t.Run("text and HTML", func(t *testing.T) {
		text := string(gpuxrayReport("--range=1h", "--end="+end.Format(time.RFC3339)))
		if header, _, _ := strings.Cut(text, "\n"); !strings.Contains(header, "(1h range, 21m covered by gpuxray data, 0m of it peak)") {
			t.Errorf("header %q", header)
		}
		if !strings.Contains(text, "8.00 GPUs") {
			t.Errorf("the text report does not say 8.00 GPUs owned:\n%s", text)
		}
		page := string(gpuxrayReport("--range=1h", "--end="+end.Format(time.RFC3339), "--format=html"))
		if strings.Contains(page, `id="pending"`) || !strings.Contains(page, "pending demand unknown (no kube-state-metrics series)") {
			t.Error("the HTML chart draws a pending line, or no note, for unknown demand")
		}
	})
}

// waitingOpenMetrics is kube-state-metrics' series of one pod that waits,
// unscheduled, for gpus GPUs: a scrape every `every` from start for d.
func waitingOpenMetrics(start time.Time, d, every time.Duration, namespace, pod string, gpus int) []byte {
	var phase, req bytes.Buffer
	for _, ph := range []string{"Pending", "Running"} {
		v := 0
		if ph == "Pending" {
			v = 1
		}
		for at := time.Duration(0); at <= d; at += every {
			fmt.Fprintf(&phase, "kube_pod_status_phase{instance=\"ksm:8080\",job=\"kube-state-metrics\",namespace=%q,phase=%q,pod=%q} %d %d.000\n", namespace, ph, pod, v, start.Add(at).Unix())
		}
	}
	for at := time.Duration(0); at <= d; at += every {
		fmt.Fprintf(&req, "kube_pod_container_resource_requests{container=\"main\",instance=\"ksm:8080\",job=\"kube-state-metrics\",namespace=%q,pod=%q,resource=\"nvidia_com_gpu\",unit=\"integer\"} %d %d.000\n", namespace, pod, gpus, start.Add(at).Unix())
	}
	return []byte("# TYPE kube_pod_status_phase gauge\n# HELP kube_pod_status_phase The pods current phase.\n" + phase.String() +
		"# TYPE kube_pod_container_resource_requests gauge\n# HELP kube_pod_container_resource_requests The number of requested request resource by a container.\n" + req.String() + "# EOF\n")
}

// TestReportWaitingFromFirstScrape: the agent's first 21 minutes
// (report-minutes.yaml) and kube-state-metrics' from the same first scrape,
// in which a pod waits for 2 GPUs all along, in a real Prometheus. Seven
// minutes in, as a demo's first report is, the report's first step began
// before the data, and its middle fell before the first scrape while its
// covered time counted: demand read 1.38 GPUs. It reads 2, over an hour's
// range and the default week's, in the verdict, the timeline and the queue.
func TestReportWaitingFromFirstScrape(t *testing.T) {
	t.Parallel()
	promtool := need(t, "promtool")
	prom := need(t, "prometheus")
	const scenario = "testdata/report-minutes.yaml"
	sc, err := sim.LoadScenario(scenario)
	if err != nil {
		t.Fatal(err)
	}
	d0 := sc.Start
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	replayBlocks(t, promtool, scenario, filepath.Join(dir, "agent"), "15s", "5s")
	moveBlocks(t, filepath.Join(dir, "agent"), data)
	ksm := filepath.Join(dir, "ksm.om")
	if err := os.WriteFile(ksm, waitingOpenMetrics(d0, sc.Duration, 30*time.Second, "research", "waiter-0", 2), 0o644); err != nil {
		t.Fatal(err)
	}
	backfillOpenMetrics(t, promtool, ksm, filepath.Join(dir, "ksm"))
	moveBlocks(t, filepath.Join(dir, "ksm"), data)
	_, addr := startPrometheus(t, prom, filepath.Join(dir, "prom"), data, "global: {}\n")

	end := d0.Add(7 * time.Minute)
	for _, rng := range []string{"1h", "7d"} {
		r := reportJSON(t, addr, "--range="+rng, "--end="+end.Format(time.RFC3339))
		what := rng + " range: "
		if !r.Demand.Available {
			t.Fatalf("%sdemand unknown: no kube-state-metrics series found", what)
		}
		near(t, what+"pending GPUs", r.Demand.PendingGPUs, 2)
		near(t, what+"most pending at once", r.Demand.MaxPendingGPUs, 2)
		near(t, what+"the queue's pending GPUs", r.Queue.All.PendingGPUHours/r.Queue.All.Hours, 2)
		for _, p := range r.Timeline {
			if p.Covered > 0 {
				near(t, what+"timeline pending GPUs at "+p.Start.Format("15:04:05"), p.PendingGPUs, 2)
			}
		}
	}
}

// agentOnly is an OpenMetrics exposition of `gpuxray replay` without the
// cluster series it writes as job="kube-state-metrics": the families of
// the agent, gpuxray_*, and the end.
func agentOnly(om []byte) []byte {
	var out bytes.Buffer
	keep := false
	for _, line := range strings.SplitAfter(string(om), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "#" && (f[1] == "TYPE" || f[1] == "HELP") {
			keep = strings.HasPrefix(f[2], "gpuxray_")
		}
		if keep || strings.HasPrefix(line, "# EOF") {
			out.WriteString(line)
		}
	}
	return out.Bytes()
}
