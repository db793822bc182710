//go:build e2e

package main

import (
	"bufio"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestReplayOpenMetrics replays a scenario as OpenMetrics and checks what
// promtool's backfill needs: one block per family (never interleaved), each
// series in time order, a scrape at the start, every interval and at the
// end, timestamps in seconds, and last values equal to the text output.
func TestReplayOpenMetrics(t *testing.T) {
	t.Parallel()
	const path = "../../test/scenarios/piecewise.yaml" // one hour from 08:00 UTC
	code, om, errs := runCmd(t, "replay", "--format=openmetrics", "--scrape.interval=5m", path)
	if code != 0 {
		t.Fatalf("replay exited %d: %s", code, errs)
	}
	_, text, _ := runCmd(t, "replay", path)
	p := expfmt.NewTextParser(model.UTF8Validation)
	final, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(om, "\n# EOF\n") {
		t.Fatalf("output does not end with # EOF: ...%q", om[max(0, len(om)-80):])
	}
	start := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC).Unix()
	typed := map[string]string{}
	lastFamily := ""
	type point struct {
		ts float64
		v  float64
	}
	series := map[string][]point{}
	sc := bufio.NewScanner(strings.NewReader(om))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			if _, dup := typed[f[2]]; dup {
				t.Fatalf("family %s appears twice: families must not be interleaved", f[2])
			}
			typed[f[2]], lastFamily = f[3], f[2]
			continue
		}
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, '}')
		name := line[:strings.IndexByte(line, '{')]
		if want := lastFamily; name != want && !(typed[want] == "counter" && name == want+"_total") {
			t.Fatalf("sample %s outside its family (current family %s)", name, want)
		}
		f := strings.Fields(line[i+1:])
		if len(f) != 2 {
			t.Fatalf("want a value and a timestamp: %q", line)
		}
		v, err1 := strconv.ParseFloat(f[0], 64)
		ts, err2 := strconv.ParseFloat(f[1], 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("bad sample %q", line)
		}
		key := line[:i+1]
		if p := series[key]; len(p) > 0 && ts <= p[len(p)-1].ts {
			t.Fatalf("%s: timestamp %v after %v", key, ts, p[len(p)-1].ts)
		}
		series[key] = append(series[key], point{ts, v})
	}
	if typed["gpuxray_allocated_seconds"] != "counter" || typed["gpuxray_source_up"] != "gauge" {
		t.Errorf("families typed %v", typed)
	}
	// A device counter is scraped at 08:00, every 5 minutes, and at 09:00.
	key := ""
	for k := range series {
		if strings.HasPrefix(k, `gpuxray_device_observed_seconds_total{gpu="0",`) && strings.Contains(k, `window="offpeak"`) {
			key = k
		}
	}
	pts := series[key]
	if len(pts) != 13 || pts[0].ts != float64(start) || pts[12].ts != float64(start+3600) || pts[1].ts != float64(start+300) {
		t.Fatalf("%s has %d scrapes %v, want 13 from %d every 300s", key, len(pts), pts, start)
	}
	if !strings.Contains(key, `instance="test-node",job="gpuxray"`) {
		t.Errorf("%s lacks the scrape's target labels", key)
	}
	// The last scrape is the text format's final exposition.
	checked := 0
	for _, mf := range final {
		for _, m := range mf.GetMetric() {
			var b strings.Builder
			b.WriteString(mf.GetName() + "{")
			labels := []string{}
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+strconv.Quote(l.GetValue()))
			}
			labels = append(labels, `instance="test-node"`, `job="gpuxray"`)
			slices.Sort(labels)
			b.WriteString(strings.Join(labels, ",") + "}")
			p := series[b.String()]
			if len(p) == 0 {
				t.Errorf("%s missing from the OpenMetrics output", b.String())
				continue
			}
			want := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			if got := p[len(p)-1].v; math.Abs(got-want) > 1e-9*math.Max(1, want) {
				t.Errorf("%s last value %v, want %v", b.String(), got, want)
			}
			checked++
		}
	}
	if checked < 50 {
		t.Errorf("checked %d series, want every series of the final exposition", checked)
	}
}

// TestReplayOpenMetricsCluster: replay's OpenMetrics carries the scenario's
// cluster series too, as `agent --simulate` serves them at
// /simulate/kube-state-metrics, labelled job="kube-state-metrics", one
// sample per scrape: a waiting pod's phase, creation and node selector
// while it waits, and a suspended job only in Kueue's pending series and
// its Workload's.
func TestReplayOpenMetricsCluster(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "q.yaml")
	if err := os.WriteFile(path, []byte(`start: 2026-12-01T08:00:00Z
duration: 30m
node: q-node
system: dgxh100
gpus: 1
priority_classes: {training: 1000}
kueue:
  - {cluster_queue: research, nominal_quota: 8, local_queues: [research/team-a]}
unscheduled:
  - {namespace: research, name: wait-0, gpus: 2, from: 10m, to: 20m, node_selector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}}
  - {namespace: research, name: big-0, gpus: 8, from: 0s, queue: team-a, priority_class: training, suspended: true}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, om, errs := runCmd(t, "replay", "--format=openmetrics", "--scrape.interval=5m", path)
	if code != 0 {
		t.Fatalf("replay exited %d: %s", code, errs)
	}
	samples := func(prefix string) []string {
		var out []string
		for _, l := range strings.Split(om, "\n") {
			if strings.HasPrefix(l, prefix) {
				out = append(out, l)
			}
		}
		return out
	}
	start := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC).Unix()
	ksm := `instance="kube-state-metrics",job="kube-state-metrics"`
	// Pending at the scrapes of 10m and 15m; gone at 20m.
	pending := samples(`kube_pod_status_phase{` + ksm + `,namespace="research",phase="Pending",pod="wait-0"`)
	if len(pending) != 2 || !strings.HasSuffix(pending[0], " 1 "+strconv.FormatInt(start+600, 10)+".000") {
		t.Errorf("wait-0's Pending phase: %q, want 1 at %d and %d", pending, start+600, start+900)
	}
	if s := samples(`kube_pod_created{` + ksm + `,namespace="research",pod="wait-0"`); len(s) != 2 || !strings.Contains(s[0], " 1.7961126e+09 ") {
		t.Errorf("wait-0's creation: %q, want 1.7961126e+09 (08:10) twice", s)
	}
	if s := samples(`kube_pod_nodeselectors{` + ksm + `,namespace="research",nodeselector_nvidia_com_gpu_product="NVIDIA-H100-80GB-HBM3",pod="wait-0"`); len(s) != 2 {
		t.Errorf("wait-0's node selector: %q", s)
	}
	// The suspended job waits over [0s, 30m): Kueue's pending GPUs are 8
	// at the scrapes from 08:00 to 08:25 and 0 at the end, its Workload's
	// series are there until then, and it has no pod.
	if s := samples(`kueue_cluster_queue_resource_pending{cluster_queue="research",` + ksm); len(s) != 7 ||
		!strings.HasSuffix(s[5], " 8 "+strconv.FormatInt(start+1500, 10)+".000") || !strings.HasSuffix(s[6], " 0 "+strconv.FormatInt(start+1800, 10)+".000") {
		t.Errorf("Kueue's pending GPUs: %q, want 8 at 6 scrapes, then 0", s)
	}
	if s := samples(`kube_customresource_kueue_workload_pending_gpus{`); len(s) != 6 {
		t.Errorf("the Workload's pending GPUs: %q, want 6 scrapes", s)
	}
	if s := samples(`kube_pod_info{`); len(s) != 2 {
		t.Errorf("kube_pod_info: %q, want wait-0's two scrapes only", s)
	}
}
