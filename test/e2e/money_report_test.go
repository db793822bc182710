//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gpuxray/gpuxray/agent"
	"github.com/gpuxray/gpuxray/report"
)

// backfillNodes replays each scenario into blocks and moves them into one
// data directory, which a real Prometheus then serves.
func backfillNodes(t *testing.T, promtool, dir string, scenarios ...string) string {
	t.Helper()
	data := filepath.Join(dir, "data")
	for i, sc := range scenarios {
		blocks := filepath.Join(dir, fmt.Sprintf("node-%d", i))
		replayBlocks(t, promtool, sc, blocks, "1m", "10s")
		moveBlocks(t, blocks, data)
	}
	return data
}

func workloadByName(t *testing.T, r report.Report, namespace, name string) report.Workload {
	t.Helper()
	for _, w := range r.TopWorkloads {
		if w.Namespace == namespace && w.Name == name {
			return w
		}
	}
	t.Fatalf("workload %s/%s not in the top workloads", namespace, name)
	return report.Workload{}
}

func ptr(t *testing.T, what string, v *float64) float64 {
	t.Helper()
	if v == nil {
		t.Fatalf("%s is null", what)
	}
	return *v
}

// TestReportEngines backfills a quiet vLLM server, three engines of known
// throughput and a vLLM V0 server into a real Prometheus with their own
// series (replay --format openmetrics writes them as job="<kind>" with
// namespace and pod labels) and checks the report against the scenarios'
// headers within 1%: no memory_bound on vLLM's reservation but a MIG slice
// that holds its need, and the tokens per allocated and per active
// GPU-hour of each engine.
func TestReportEngines(t *testing.T) {
	t.Parallel()
	promtool := need(t, "promtool")
	prom := need(t, "prometheus")
	dir := t.TempDir()
	data := backfillNodes(t, promtool, dir, "testdata/money-vllm-quiet.yaml", "testdata/money-engines.yaml", "testdata/money-engines-v0.yaml")
	// Triton's TensorRT-LLM backend on chat/trt-0, as its README shows its
	// KV-cache blocks, scraped by a pod-discovering job.
	var trt []point
	for at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC); !at.After(time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC)); at = at.Add(time.Minute) {
		for typ, v := range map[string]float64{"used": 1560, "max": 6240, "free": 4680, "tokens_per": 64} {
			trt = append(trt, point{map[string]string{"__name__": "nv_trt_llm_kv_cache_block_metrics", "job": "triton", "instance": "10.0.3.7:8002",
				"namespace": "chat", "pod": "trt-0", "model": "tensorrt_llm", "version": "1", "kv_cache_block_type": typ}, at, v})
		}
	}
	om := filepath.Join(dir, "triton.om")
	if err := os.WriteFile(om, openMetrics(trt), 0o644); err != nil {
		t.Fatal(err)
	}
	backfillOpenMetrics(t, promtool, om, filepath.Join(dir, "triton"))
	moveBlocks(t, filepath.Join(dir, "triton"), data)
	_, addr := startPrometheus(t, prom, filepath.Join(dir, "prom"), data, "global: {}\n")
	r := reportJSON(t, addr, "--step=10m", "--range=2h", "--end=2026-12-01T11:00:00Z", "--top=20")

	// The quiet vLLM server: 90% reserved, a tenth of the KV cache used.
	const gib = 1 << 30
	used := 73403.0 * (1 << 20)
	weights := 16e9
	need := weights + 0.1*(used-weights-2*gib) + 2*gib
	quiet := workloadByName(t, r, "chat", "llama")
	if quiet.Engine == nil || !slices.Equal(quiet.Engine.Kinds, []string{"vllm"}) || !slices.Equal(quiet.Engine.Models, []string{"meta-llama/Llama-3.1-8B-Instruct"}) {
		t.Fatalf("quiet vLLM's engine %+v", quiet.Engine)
	}
	near(t, "quiet vLLM peak KV-cache usage", quiet.Engine.PeakKVCacheUsage, 0.1)
	near(t, "quiet vLLM peak memory (its reservation)", quiet.PeakMemoryBytes, used)
	var found bool
	for _, h := range r.Hints {
		if h.Namespace != "chat" || h.Name != "llama" {
			continue
		}
		found = true
		if h.Hint != report.HintMIG || h.Profile != "3g.40gb" {
			t.Errorf("quiet vLLM's hint %s %s (%s), want mig 3g.40gb", h.Hint, h.Profile, h.Message)
		}
		near(t, "quiet vLLM's need", h.Arithmetic["need_bytes"], need)
		near(t, "quiet vLLM's weights", h.Arithmetic["weights_bytes"], weights)
		near(t, "GPU-hours the slice frees", h.FreesGPUHours, 2*4.0/7)
	}
	if !found {
		t.Errorf("no hint for the quiet vLLM server: %+v", r.Hints)
	}
	for _, h := range r.Hints {
		if h.Hint == report.HintMemoryBound {
			t.Errorf("%s/%s is memory_bound: %s", h.Namespace, h.Name, h.Message)
		}
	}

	// Tokens per allocated GPU-hour (one GPU each, so tokens/s × 3600) and
	// per active GPU-hour (over the busy ratio), all hours and at peak.
	for _, e := range []struct {
		ns, name, kind string
		tps, util      float64
	}{
		{"chat", "llama", "vllm", 40, 0.05},
		{"chat", "big", "vllm", 250, 0.5},
		{"chat", "qwen", "sglang", 80, 0.4},
		{"chat", "tgi", "tgi", 143872.0 / 7200, 0.25},
		{"legacy", "opt", "vllm", 100, 0.2},
	} {
		w := workloadByName(t, r, e.ns, e.name)
		what := fmt.Sprintf("%s/%s (%s)", e.ns, e.name, e.kind)
		if w.Engine == nil || !slices.Contains(w.Engine.Kinds, e.kind) {
			t.Errorf("%s: engine %+v", what, w.Engine)
			continue
		}
		near(t, what+" tokens", w.Engine.Tokens, e.tps*7200)
		near(t, what+" tokens per GPU-hour", ptr(t, what+" tokens_per_gpu_hour", w.TokensPerGPUHour), e.tps*3600)
		near(t, what+" tokens per GPU-hour at peak", ptr(t, what+" peak_tokens_per_gpu_hour", w.PeakTokensPerGPUHour), e.tps*3600)
		near(t, what+" tokens per active GPU-hour", ptr(t, what+" tokens_per_active_gpu_hour", w.TokensPerActiveGPUHour), e.tps*3600/e.util)
	}
	// The V0 server is read through vllm:gpu_cache_usage_perc.
	if v0 := workloadByName(t, r, "legacy", "opt"); v0.Engine == nil || !v0.Engine.KVKnown {
		t.Errorf("V0 vLLM: engine %+v", v0.Engine)
	} else {
		near(t, "V0 vLLM peak KV-cache usage", v0.Engine.PeakKVCacheUsage, 0.3)
	}
	// Triton: a quarter of its KV-cache blocks, and no tokens (null, not 0).
	trtW := workloadByName(t, r, "chat", "trt")
	if trtW.Engine == nil || !slices.Equal(trtW.Engine.Kinds, []string{"triton"}) || trtW.Engine.TokensKnown || trtW.TokensPerGPUHour != nil {
		t.Errorf("Triton: engine %+v, tokens per GPU-hour %v", trtW.Engine, trtW.TokensPerGPUHour)
	} else {
		near(t, "Triton peak KV-cache usage", trtW.Engine.PeakKVCacheUsage, 0.25)
	}
	if r.Cost != nil || r.Money != nil {
		t.Errorf("no prices, yet cost %+v money %+v", r.Cost, r.Money)
	}

	// The text report says it too.
	text := string(runReport(t, addr, "--step=10m", "--range=2h", "--end=2026-12-01T11:00:00Z"))
	for _, s := range []string{"USEFUL WORK", "chat/big", "tokens/GPU-h", "BUY DATE", "3g.40gb"} {
		if !strings.Contains(text, s) {
			t.Errorf("text report lacks %q:\n%s", s, text)
		}
	}
}

// TestReportPriceSheet backfills an H100 node and an A100 node and prices
// them with a price file: the H100 at 4 a GPU-hour plus its measured
// energy at 0.5 a kWh, the A100 at 1.5. Every cost is the
// scenarios' GPU-hours × price (plus kWh × price) within 1%.
func TestReportPriceSheet(t *testing.T) {
	t.Parallel()
	promtool := need(t, "promtool")
	prom := need(t, "prometheus")
	dir := t.TempDir()
	data := backfillNodes(t, promtool, dir, "testdata/money-h100.yaml", "testdata/money-a100.yaml")
	_, addr := startPrometheus(t, prom, filepath.Join(dir, "prom"), data, "global: {}\n")
	prices := filepath.Join(dir, "prices.yaml")
	// * must price nothing: both types have their own.
	if err := os.WriteFile(prices, []byte("currency: EUR\ngpu_types:\n  NVIDIA-H100-80GB-HBM3: {per_hour: 4, power_per_kwh: 0.5}\n  NVIDIA-A100-SXM4-40GB: {per_hour: 1.5}\n  \"*\": {per_hour: 99}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--step=10m", "--range=2h", "--end=2026-12-01T11:00:00Z"}
	r := reportJSON(t, addr, append(args, "--price.file="+prices)...)
	if r.Cost == nil || r.Money == nil {
		t.Fatal("no cost with a price file")
	}
	// H100: train 574 W and notebook 70 W for 2 h; A100 at 1.5, no power.
	const (
		trainKWh, notebookKWh = 2 * 0.574, 2 * 0.070
		h100, kwh, other      = 4.0, 0.5, 1.5
	)
	if r.Cost.Currency != "EUR" {
		t.Errorf("currency %q", r.Cost.Currency)
	}
	for _, c := range []struct {
		name string
		got  report.CostFigures
	}{{"all", r.Cost.All}, {"peak", r.Cost.Peak}} {
		near(t, c.name+" owned cost", c.got.Owned, 4*h100+kwh*(trainKWh+notebookKWh)+4*other)
		near(t, c.name+" allocated cost", c.got.Allocated, 4*h100+kwh*(trainKWh+notebookKWh)+2*other)
		near(t, c.name+" active cost", c.got.Active, 1.6*h100+kwh*(trainKWh+notebookKWh)*1.6/4)
		near(t, c.name+" idle allocated cost", c.got.IdleAllocated, 2*h100+kwh*notebookKWh+2*other)
		near(t, c.name+" unallocated cost", c.got.Unallocated, 2*other)
	}
	near(t, "notebook's idle cost", ptr(t, "notebook idle_cost", workloadByName(t, r, "data-science", "notebook").IdleCost), 2*h100+kwh*notebookKWh)
	near(t, "notebook's idle cost at peak", ptr(t, "notebook peak_idle_cost", workloadByName(t, r, "data-science", "notebook").PeakIdleCost), 2*h100+kwh*notebookKWh)
	near(t, "nb-a's idle cost", ptr(t, "nb-a idle_cost", workloadByName(t, r, "lab", "nb-a").IdleCost), 2*other)
	near(t, "train's idle cost", ptr(t, "train idle_cost", workloadByName(t, r, "research", "train").IdleCost), 0)
	var h100Type *report.TypeMoney
	for i := range r.Money.GPUTypes {
		if r.Money.GPUTypes[i].GPUType == "NVIDIA-H100-80GB-HBM3" {
			h100Type = &r.Money.GPUTypes[i]
		}
	}
	if len(r.Money.GPUTypes) != 2 || h100Type == nil || !r.Money.GPUTypes[0].Priced || !r.Money.GPUTypes[1].Priced {
		t.Fatalf("GPU types %+v", r.Money.GPUTypes)
	}
	near(t, "H100 mean power", h100Type.MeanPowerWatts, (574+70)/2.0)
	near(t, "H100 idle rate", h100Type.IdleRate, h100+kwh*0.070)
	if len(r.Money.Levers) == 0 || r.Money.Levers[0].Lever != report.LeverCulling {
		t.Fatalf("levers %+v", r.Money.Levers)
	}
	near(t, "culling's GPU-hours", r.Money.Levers[0].GPUHours, 4)
	near(t, "culling's worth", ptr(t, "culling cost", r.Money.Levers[0].Cost), 2*h100+kwh*notebookKWh+2*other)

	// --price and --currency: per GPU-hour only.
	r = reportJSON(t, addr, append(args, "--price=NVIDIA-H100-80GB-HBM3=3", "--price=*=1", "--currency=USD")...)
	near(t, "flag-priced idle cost", r.Cost.All.IdleAllocated, 2*3+2*1)
	if r.Cost.Currency != "USD" {
		t.Errorf("currency %q", r.Cost.Currency)
	}
	text := string(runReport(t, addr, append(args, "--price=NVIDIA-H100-80GB-HBM3=3", "--price=*=1")...))
	for _, s := range []string{"MONEY (USD)", "idle while allocated", "NVIDIA-H100-80GB-HBM3: 3.00 USD a GPU-hour", "culling", "IDLE COST OF THE TOP WORKLOADS"} {
		if !strings.Contains(text, s) {
			t.Errorf("text report lacks %q:\n%s", s, text)
		}
	}
}

// TestReportBuyDate: four weeks in which pending demand at peak grows a GPU
// a week (1, 2, 3, 4 GPUs) beside 5 idle, unallocated H100s. The weekly
// peaks' line −4 + (week − 0.5) crosses zero half a week after the range
// ends: day 31.5 from the start. With three weeks the report still
// projects; with two it does not.
//
// A replay of four weeks costs about 50 s of CPU, so the test writes the
// agent's and kube-state-metrics' series itself, as a node of unallocated
// GPUs exports them (TestBuyDateSeriesShape checks the shape against a
// replay).
func TestReportBuyDate(t *testing.T) {
	t.Parallel()
	promtool := need(t, "promtool")
	prom := need(t, "prometheus")
	start := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC) // a Monday
	const weeks = 4
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	om := filepath.Join(dir, "weeks.om")
	if err := os.WriteFile(om, openMetrics(growingWeeks(t, start, weeks)), 0o644); err != nil {
		t.Fatal(err)
	}
	// Blocks of up to four weeks, not promtool's two hours: each block is
	// a pass over the input and a sync to disk.
	if out, err := exec.Command(promtool, "tsdb", "create-blocks-from", "openmetrics", "--max-block-duration=672h", om, filepath.Join(dir, "blocks")).CombinedOutput(); err != nil {
		t.Fatalf("promtool tsdb create-blocks-from openmetrics %s: %v\n%s", om, err, out)
	}
	moveBlocks(t, filepath.Join(dir, "blocks"), data)
	_, addr := startPrometheus(t, prom, filepath.Join(dir, "prom"), data, "global: {}\n")

	end := start.Add(weeks * 7 * 24 * time.Hour)
	r := reportJSON(t, addr, "--step=1h", "--range=28d", "--end="+end.Format(time.RFC3339))
	f := r.Forecast
	if !f.EnoughData || f.Weeks != 4 || len(f.GPUTypes) != 1 || f.GPUTypes[0].GPUType != "NVIDIA-H100-80GB-HBM3" {
		t.Fatalf("forecast %+v, want one type, the waiters' NVIDIA-H100-80GB-HBM3", f)
	}
	ft := f.GPUTypes[0]
	near(t, "weekly growth", ft.WeeklyGrowthGPUs, 1)
	wantDays := 31.5
	for name, got := range map[string]*time.Time{"short_from": ft.ShortFrom, "short_from_earliest": ft.ShortFromEarliest, "short_from_latest": ft.ShortFromLatest} {
		if got == nil {
			t.Errorf("%s is null", name)
			continue
		}
		near(t, name+" in days from the start", got.Sub(start).Hours()/24, wantDays)
	}
	for i, w := range ft.Weeks {
		near(t, fmt.Sprintf("week %d's pending GPUs", i), w.PendingGPUs, float64(i+1))
		near(t, fmt.Sprintf("week %d's net GPUs", i), w.NetGPUs, float64(i+1)-buyDateGPUs)
	}
	// Three weeks still project; two do not.
	r = reportJSON(t, addr, "--step=1h", "--range=21d", "--end="+end.Format(time.RFC3339))
	if !r.Forecast.EnoughData || len(r.Forecast.GPUTypes) != 1 {
		t.Errorf("three weeks: %+v", r.Forecast)
	} else if sf := r.Forecast.GPUTypes[0].ShortFrom; sf == nil {
		t.Error("three weeks: no short_from")
	} else {
		near(t, "three weeks' short_from in days", sf.Sub(start).Hours()/24, wantDays)
	}
	r = reportJSON(t, addr, "--step=1h", "--range=14d", "--end="+end.Format(time.RFC3339))
	if r.Forecast.EnoughData || len(r.Forecast.GPUTypes) != 0 || r.Forecast.Weeks != 2 {
		t.Errorf("two weeks: %+v, want enough_data false", r.Forecast)
	}
	text := string(runReport(t, addr, "--step=1h", "--range=28d", "--end="+end.Format(time.RFC3339)))
	if !strings.Contains(text, "short after reclaiming from 2026-12-03") {
		t.Errorf("text report's buy date:\n%s", text)
	}
}

// buyDateGPUs are the unallocated H100s of TestReportBuyDate's node.
const buyDateGPUs = 5

// point is one sample of one series.
type point struct {
	labels map[string]string
	at     time.Time
	v      float64
}

// growingWeeks is, every 10 minutes over the weeks from start, what the
// agent of a node of buyDateGPUs unallocated H100s exports (device info and
// the windowed counters the report reads: observed, unallocated, gap and
// busy unallocated time)
// and what kube-state-metrics exports: a running pod throughout, and in
// week w a pod waiting for w+1 GPUs (selecting H100s) during the peak
// hours of the agents' default schedule.
func growingWeeks(t *testing.T, start time.Time, weeks int) []point {
	t.Helper()
	sched, err := agent.ParseSchedule(agent.DefaultPeakSchedule, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	const every = 10 * time.Minute
	end := start.Add(time.Duration(weeks) * 7 * 24 * time.Hour)
	var out []point
	add := func(at time.Time, v float64, kv ...string) {
		l := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			l[kv[i]] = kv[i+1]
		}
		out = append(out, point{l, at, v})
	}
	var peakS, offS float64
	for at := start; !at.After(end); at = at.Add(every) {
		if at.After(start) {
			// The agent credits each second to the window it falls in.
			for m := at.Add(-every); m.Before(at); m = m.Add(time.Minute) {
				if sched.At(m) {
					peakS += 60
				} else {
					offS += 60
				}
			}
		}
		for g := range buyDateGPUs {
			dev := []string{"job", "gpuxray", "instance", "growing", "uuid", fmt.Sprintf("GPU-%d", g), "gpu", fmt.Sprint(g)}
			add(at, 1, append(dev, "__name__", "gpuxray_device_info", "name", "NVIDIA H100 80GB HBM3", "mig_mode", "disabled",
				"driver_version", "550.54.15", "utilization_source", "samples")...)
			for _, w := range []struct {
				name string
				v    float64
			}{{"peak", peakS}, {"offpeak", offS}} {
				for _, c := range []string{"gpuxray_device_observed_seconds_total", "gpuxray_device_unallocated_seconds_total"} {
					add(at, w.v, append(dev, "__name__", c, "window", w.name)...)
				}
				for _, c := range []string{"gpuxray_device_sample_gap_seconds_total", "gpuxray_device_unallocated_active_seconds_total"} {
					add(at, 0, append(dev, "__name__", c, "window", w.name)...)
				}
			}
		}
		ksm := []string{"job", "kube-state-metrics", "instance", "ksm:8080"}
		add(at, 1, append(ksm, "__name__", "kube_pod_status_phase", "namespace", "serving", "pod", "api-0", "phase", "Running")...)
		if w := int(at.Sub(start) / (7 * 24 * time.Hour)); w < weeks && sched.At(at.Add(-every/2)) {
			pod := append(ksm, "namespace", "research", "pod", fmt.Sprintf("grow-%d", w))
			add(at, 1, append(pod, "__name__", "kube_pod_status_phase", "phase", "Pending")...)
			add(at, float64(w+1), append(pod, "__name__", "kube_pod_container_resource_requests", "container", "main", "resource", "nvidia_com_gpu", "unit", "integer")...)
			add(at, 1, append(pod, "__name__", "kube_pod_nodeselectors", "nodeselector_nvidia_com_gpu_product", "NVIDIA-H100-80GB-HBM3")...)
		}
	}
	return out
}

// openMetrics renders points family by family, each series' samples
// together and in time order, as OpenMetrics wants them.
func openMetrics(points []point) []byte {
	series := map[string][]point{}
	for _, p := range points {
		var keys []string
		for k := range p.labels {
			if k != "__name__" {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		var b strings.Builder
		b.WriteString(p.labels["__name__"] + "{")
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%s=%q", k, p.labels[k])
		}
		b.WriteByte('}')
		series[b.String()] = append(series[b.String()], p)
	}
	names := make([]string, 0, len(series))
	for n := range series {
		names = append(names, n)
	}
	sort.Strings(names)
	var out bytes.Buffer
	family := ""
	for _, n := range names {
		metric := n[:strings.IndexByte(n, '{')]
		if fam, typ := strings.TrimSuffix(metric, "_total"), "counter"; metric != family {
			if fam == metric {
				typ = "gauge"
			}
			fmt.Fprintf(&out, "# TYPE %s %s\n", fam, typ)
			family = metric
		}
		ps := series[n]
		sort.SliceStable(ps, func(i, j int) bool { return ps[i].at.Before(ps[j].at) })
		for _, p := range ps {
			fmt.Fprintf(&out, "%s %g %d.000\n", n, p.v, p.at.Unix())
		}
	}
	out.WriteString("# EOF\n")
	return out.Bytes()
}

// TestBuyDateSeriesShape: the gpuxray series growingWeeks writes have the
// names and labels a replay of such a node writes.
func TestBuyDateSeriesShape(t *testing.T) {
	t.Parallel()
	sc := filepath.Join(t.TempDir(), "growing.yaml")
	if err := os.WriteFile(sc, []byte(fmt.Sprintf("start: 2026-11-02T08:50:00Z\nduration: 20m\nnode: growing\nsystem: dgxh100\ngpus: %d\n", buyDateGPUs)), 0o644); err != nil {
		t.Fatal(err)
	}
	var replayed bytes.Buffer
	cmd := exec.Command(binary, "replay", "--format=openmetrics", "--scrape.interval=10m", "--poll.interval=10s", sc)
	cmd.Stdout = &replayed
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, line := range strings.Split(replayed.String(), "\n") {
		if !strings.HasPrefix(line, "gpuxray_device_") {
			continue
		}
		name, rest, _ := strings.Cut(line, "{")
		var keys []string
		for _, kv := range strings.Split(rest[:strings.Index(rest, "}")], ",") {
			if k, v, _ := strings.Cut(kv, "="); v != `""` {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		want[name+" "+strings.Join(keys, ",")] = true
	}
	seen := map[string]bool{}
	for _, p := range growingWeeks(t, time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC), 1) {
		name := p.labels["__name__"]
		if !strings.HasPrefix(name, "gpuxray_") {
			continue
		}
		var keys []string
		for k := range p.labels {
			if k != "__name__" {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		s := name + " " + strings.Join(keys, ",")
		if !seen[s] && !want[s] {
			t.Errorf("growingWeeks writes %s, which a replay does not", s)
		}
		seen[s] = true
	}
	if len(seen) == 0 {
		t.Fatal("growingWeeks writes no gpuxray series")
	}
}
