//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/gpuxray/gpuxray/agent"
	"github.com/gpuxray/gpuxray/collector/sim"
	"github.com/gpuxray/gpuxray/deploy/grafana"
	promrules "github.com/gpuxray/gpuxray/deploy/prometheus"
)

// sample is one element of an instant vector from the query API.
type sample struct {
	Labels map[string]string
	Value  float64
}

// promQuery runs an instant query at t (now when t is zero).
func promQuery(addr, q string, t time.Time) ([]sample, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v := url.Values{"query": {q}}
	if !t.IsZero() {
		v.Set("time", strconv.FormatInt(t.Unix(), 10))
	}
	code, body, err := get(ctx, "http://"+addr+"/api/v1/query?"+v.Encode())
	if err != nil {
		return nil, err
	}
	var r struct {
		Status string
		Error  string
		Data   struct {
			ResultType string
			Result     []struct {
				Metric map[string]string
				Value  [2]any
			}
		}
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("HTTP %d: %w", code, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query %s: %s", q, r.Error)
	}
	if r.Data.ResultType != "vector" {
		return nil, fmt.Errorf("query %s: result type %s, want vector", q, r.Data.ResultType)
	}
	out := make([]sample, 0, len(r.Data.Result))
	for _, e := range r.Data.Result {
		s, _ := e.Value[1].(string)
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, fmt.Errorf("query %s: value %v: %w", q, e.Value[1], err)
		}
		out = append(out, sample{Labels: e.Metric, Value: f})
	}
	return out, nil
}

// ruleFile writes rules to dir/name and returns its path.
func ruleFile(t *testing.T, dir, name string, f *promrules.RuleFile) string {
	t.Helper()
	b, err := yaml.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func startPrometheus(t *testing.T, prom, dir, dataDir, config string) (*process, string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	p := start(t, prom,
		"--config.file="+cfgPath,
		"--storage.tsdb.path="+dataDir,
		"--storage.tsdb.retention.time=100y",
		"--web.listen-address="+addr,
		"--log.level=warn",
	)
	waitFor(t, "http://"+addr+"/-/ready", 30*time.Second)
	return p, addr
}

// ksmMetrics is kube-state-metrics' exposition for a research pod that has
// waited, unscheduled, for two H100s, and a running serving pod; from
// deploy/kube-state-metrics/resourceclaims.yaml, a DRA claim of research's
// train-2 (priority class training, as train-1) waiting for one GPU and one
// allocated; and from deploy/kube-state-metrics/kueue.yaml, a Job Kueue
// keeps suspended, waiting for eight GPUs.
const ksmMetrics = `# HELP kube_pod_status_phase The pods current phase.
# TYPE kube_pod_status_phase gauge
kube_pod_status_phase{namespace="research",pod="train-1",uid="2b9c",phase="Pending"} 1
kube_pod_status_phase{namespace="research",pod="train-1",uid="2b9c",phase="Succeeded"} 0
kube_pod_status_phase{namespace="research",pod="train-1",uid="2b9c",phase="Failed"} 0
kube_pod_status_phase{namespace="research",pod="train-1",uid="2b9c",phase="Unknown"} 0
kube_pod_status_phase{namespace="research",pod="train-1",uid="2b9c",phase="Running"} 0
kube_pod_status_phase{namespace="inference",pod="vllm-0",uid="8f1e",phase="Pending"} 0
kube_pod_status_phase{namespace="inference",pod="vllm-0",uid="8f1e",phase="Running"} 1
# HELP kube_pod_container_resource_requests The number of requested request resource by a container. It is recommended to use the kube_pod_resource_requests metric exposed by kube-scheduler instead, as it is more precise.
# TYPE kube_pod_container_resource_requests gauge
kube_pod_container_resource_requests{namespace="research",pod="train-1",uid="2b9c",container="trainer",node="",resource="nvidia_com_gpu",unit="integer"} 2
kube_pod_container_resource_requests{namespace="research",pod="train-1",uid="2b9c",container="trainer",node="",resource="cpu",unit="core"} 16
kube_pod_container_resource_requests{namespace="inference",pod="vllm-0",uid="8f1e",container="vllm",node="demo-node",resource="nvidia_com_gpu",unit="integer"} 1
# HELP kube_pod_info [STABLE] Information about pod.
# TYPE kube_pod_info gauge
kube_pod_info{namespace="research",pod="train-1",uid="2b9c",node="",priority_class="training",created_by_kind="Job",created_by_name="train"} 1
kube_pod_info{namespace="inference",pod="vllm-0",uid="8f1e",node="demo-node",priority_class="",created_by_kind="StatefulSet",created_by_name="vllm"} 1
kube_pod_info{namespace="research",pod="train-2",uid="5d0a",node="",priority_class="training",created_by_kind="Job",created_by_name="train"} 1
# HELP kube_pod_labels [STABLE] Kubernetes labels converted to Prometheus labels.
# TYPE kube_pod_labels gauge
kube_pod_labels{namespace="research",pod="train-1",uid="2b9c",label_kueue_x_k8s_io_queue_name="team-a"} 1
kube_pod_labels{namespace="inference",pod="vllm-0",uid="8f1e",label_kueue_x_k8s_io_queue_name=""} 1
# HELP kueue_cluster_queue_nominal_quota Reports the cluster_queue's resource nominal quota within all the flavors
# TYPE kueue_cluster_queue_nominal_quota gauge
kueue_cluster_queue_nominal_quota{cohort="ml",cluster_queue="research",flavor="default",resource="nvidia.com/gpu"} 4
# HELP kueue_cluster_queue_resource_usage Reports the cluster_queue's total resource usage within all the flavors
# TYPE kueue_cluster_queue_resource_usage gauge
kueue_cluster_queue_resource_usage{cohort="ml",cluster_queue="research",flavor="default",resource="nvidia.com/gpu"} 4
# HELP kueue_cluster_queue_resource_pending Reports the cluster_queue's total pending resource requests. Unlike resource_reservation, pending workloads have not yet been assigned to flavors.
# TYPE kueue_cluster_queue_resource_pending gauge
kueue_cluster_queue_resource_pending{cluster_queue="research",resource="nvidia.com/gpu"} 10
# HELP kube_pod_created [STABLE] Unix creation timestamp
# TYPE kube_pod_created gauge
kube_pod_created{namespace="research",pod="train-1",uid="2b9c"} 1.7648e+09
kube_pod_created{namespace="research",pod="train-2",uid="5d0a"} 1.7648e+09
kube_pod_created{namespace="inference",pod="vllm-0",uid="8f1e"} 1.7648e+09
# HELP kube_pod_nodeselectors Describes the Pod nodeSelectors.
# TYPE kube_pod_nodeselectors gauge
kube_pod_nodeselectors{namespace="research",pod="train-1",uid="2b9c",nodeselector_nvidia_com_gpu_product="NVIDIA-H100-80GB-HBM3"} 1
kube_pod_nodeselectors{namespace="inference",pod="vllm-0",uid="8f1e"} 1
# HELP kube_customresource_kueue_workload_pending_gpus GPUs (nvidia.com/gpu) a pod set of a Kueue Workload not admitted asks for, all its pods (status.resourceRequests).
# TYPE kube_customresource_kueue_workload_pending_gpus gauge
kube_customresource_kueue_workload_pending_gpus{customresource_group="kueue.x-k8s.io",customresource_kind="Workload",customresource_version="v1beta2",namespace="research",workload="job-sweep-4f2a1",podset="main"} 8
# HELP kube_customresource_kueue_workload_info A Kueue Workload's LocalQueue and priority class.
# TYPE kube_customresource_kueue_workload_info gauge
kube_customresource_kueue_workload_info{customresource_group="kueue.x-k8s.io",customresource_kind="Workload",customresource_version="v1beta2",namespace="research",workload="job-sweep-4f2a1",queue="team-a",priority_class="training"} 1
# HELP kube_customresource_kueue_workload_podset_pods Pods of a pod set of a Kueue Workload, with the GPU product its node selector names.
# TYPE kube_customresource_kueue_workload_podset_pods gauge
kube_customresource_kueue_workload_podset_pods{customresource_group="kueue.x-k8s.io",customresource_kind="Workload",customresource_version="v1beta2",namespace="research",workload="job-sweep-4f2a1",podset="main"} 2
# HELP kube_customresource_kueue_workload_created A Kueue Workload's creation time, Unix seconds.
# TYPE kube_customresource_kueue_workload_created gauge
kube_customresource_kueue_workload_created{customresource_group="kueue.x-k8s.io",customresource_kind="Workload",customresource_version="v1beta2",namespace="research",workload="job-sweep-4f2a1"} 1.7648e+09
# HELP kube_customresource_kueue_workload_owner_info An owner of a Kueue Workload (the Job or Pod it stands for).
# TYPE kube_customresource_kueue_workload_owner_info gauge
kube_customresource_kueue_workload_owner_info{customresource_group="kueue.x-k8s.io",customresource_kind="Workload",customresource_version="v1beta2",namespace="research",workload="job-sweep-4f2a1",owner_kind="Job",owner_name="sweep"} 1
# HELP kube_customresource_resourceclaim_request_devices Devices a request of a DRA ResourceClaim asks for (exactly.count).
# TYPE kube_customresource_resourceclaim_request_devices gauge
kube_customresource_resourceclaim_request_devices{customresource_group="resource.k8s.io",customresource_kind="ResourceClaim",customresource_version="v1",namespace="research",resourceclaim="train-2-gpu",request="gpu",device_class="gpu.nvidia.com",allocation_mode="ExactCount"} 1
kube_customresource_resourceclaim_request_devices{customresource_group="resource.k8s.io",customresource_kind="ResourceClaim",customresource_version="v1",namespace="inference",resourceclaim="embed-0-gpu",request="gpu",device_class="gpu.nvidia.com",allocation_mode="ExactCount"} 1
# HELP kube_customresource_resourceclaim_allocated_device_info A device the scheduler allocated to a DRA ResourceClaim.
# TYPE kube_customresource_resourceclaim_allocated_device_info gauge
kube_customresource_resourceclaim_allocated_device_info{customresource_group="resource.k8s.io",customresource_kind="ResourceClaim",customresource_version="v1",namespace="inference",resourceclaim="embed-0-gpu",request="gpu",driver="gpu.nvidia.com",pool="demo-node",device="gpu-6"} 1
# HELP kube_customresource_resourceclaim_owner_info An owner of a DRA ResourceClaim (the pod of a claim made from a template).
# TYPE kube_customresource_resourceclaim_owner_info gauge
kube_customresource_resourceclaim_owner_info{customresource_group="resource.k8s.io",customresource_kind="ResourceClaim",customresource_version="v1",namespace="research",resourceclaim="train-2-gpu",owner_kind="Pod",owner_name="train-2"} 1
`

// TestRulesAndDashboardsLive: the demo agent and a kube-state-metrics
// exposition are scraped by a real Prometheus that loads the rule file (its
// alerts' `for:` shortened). Every recording rule and every dashboard query
// returns data, the numbers are the demo's, and GPUPodsPendingWhileGPUsIdle
// reaches firing: the research pod waits for two GPUs while the demo's
// notebook holds one idle.
func TestRulesAndDashboardsLive(t *testing.T) {
	t.Parallel()
	prom := need(t, "prometheus")
	// The demo plays on the wall clock: make every hour of the week peak, so
	// that the test does not depend on the time of day it runs at.
	agentAddr := freeAddr(t)
	start(t, binary, "agent", "--simulate", "--web.listen-address="+agentAddr, "--log.format=json",
		"--peak.schedule=00:00-24:00")
	ksm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		fmt.Fprint(w, ksmMetrics)
	}))
	defer ksm.Close()

	rules, err := promrules.Parse(promrules.Rules)
	if err != nil {
		t.Fatal(err)
	}
	// Minutes of data in seconds: rate windows of 10s and `for: 1s`, so that
	// rates are whole within seconds of the start (a 5m rate over 20s of data
	// is a fifteenth of the truth).
	window := regexp.MustCompile(`\[(5m|10m|15m|1h)\]`)
	var records []string
	for gi := range rules.Groups {
		for ri := range rules.Groups[gi].Rules {
			r := &rules.Groups[gi].Rules[ri]
			r.Expr = window.ReplaceAllString(r.Expr, "[10s]")
			if r.Alert != "" {
				r.For = "1s"
			} else {
				records = append(records, r.Record)
			}
		}
	}
	// The cost rules price idle GPUs at a price series the user records.
	rules.Groups = append(rules.Groups, promrules.RuleGroup{Name: "gpuxray.prices", Rules: []promrules.Rule{
		{Record: "gpuxray_gpu_hourly_price", Expr: "vector(2.5)", Labels: map[string]string{"gpu_type": "*", "currency": "USD"}}}})
	dir := t.TempDir()
	rulePath := ruleFile(t, dir, "rules.yaml", rules)
	_, promAddr := startPrometheus(t, prom, dir, filepath.Join(dir, "data"), fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: gpuxray
    static_configs: [{targets: [%q]}]
  - job_name: kube-state-metrics
    honor_labels: true
    static_configs: [{targets: [%q]}]
`, rulePath, agentAddr, strings.TrimPrefix(ksm.URL, "http://")))

	queries, err := grafana.Queries(map[string]string{
		"cluster": ".*", "namespace": ".*", "window": ".*", "instance": ".*", "gpu": ".*", "utc_offset": "0",
		"__range": "1m", "__interval": "1s", "__interval_ms": "1000", "__rate_interval": "5s",
	})
	if err != nil {
		t.Fatal(err)
	}
	type check struct{ what, q string }
	var pending []check
	for _, r := range records {
		pending = append(pending, check{"recording rule " + r, r})
	}
	for _, q := range queries {
		pending = append(pending, check{fmt.Sprintf("%s panel %q query %s", q.Dashboard, q.Panel, q.RefID), q.Expr})
	}
	// Poll until every query has returned data once.
	deadline := time.Now().Add(45 * time.Second)
	for len(pending) > 0 {
		var left []check
		for _, c := range pending {
			res, err := promQuery(promAddr, c.q, time.Time{})
			if err != nil {
				t.Fatalf("%s: %v", c.what, err)
			}
			if len(res) == 0 {
				left = append(left, c)
			}
		}
		pending = left
		if len(pending) > 0 && time.Now().After(deadline) {
			for _, c := range pending {
				t.Errorf("%s returned no data within 45s: %s", c.what, c.q)
			}
			t.FailNow()
		}
		if len(pending) > 0 {
			time.Sleep(500 * time.Millisecond)
		}
	}
	t.Logf("%d recording rules and %d dashboard queries return data", len(records), len(queries))

	// The values settle once the rate windows are full.
	type valueCheck struct {
		q        string
		min, max float64
		what     string
	}
	checks := []valueCheck{
		{`cluster:kube_pod_container_resource_requests_gpu_pending:sum`, 2, 2, "two GPUs wait (the bound vllm pod does not count)"},
		{`cluster:kube_resourceclaim_gpu_devices_unallocated:sum`, 1, 1, "one GPU waits on a DRA claim (the allocated claim does not count)"},
		{`priority_class:gpuxray_pending_gpus:sum{priority_class="training"}`, 3, 3, "training waits for three GPUs: train-1's two requested, train-2's one claimed"},
		{`sum(cluster_window:gpuxray_device_observed_seconds:rate5m{window="peak"})`, 7, 9, "eight GPUs observed, at peak"},
		{`sum(cluster_window:gpuxray_device_observed_seconds:rate5m{window="offpeak"})`, 0, 0, "nothing off-peak"},
		{`sum(namespace_workload_model_window:gpuxray_allocated_idle_seconds:rate5m{namespace="data-science"})`, 0.9, 1.1, "the notebook holds one GPU idle"},
		{`cluster:gpuxray_idle_gpus:rate5m`, 6.5, 8.5, "idle capacity: the stalled training job's four GPUs, the notebook, the idle slice, the quiet vLLM server, half the GPU nobody holds"},
		{`sum(cluster_gpu_type_window:gpuxray_idle_allocated_cost:rate5m) / sum(cluster_gpu_type_window:gpuxray_device_allocated_idle_seconds:rate5m)`, 2.4999, 2.5001, "idle GPUs priced at the * price"},
		{`count(uuid:gpuxray_device_gpu_type:info{gpu_type="NVIDIA-H100-80GB-HBM3"})`, 8, 8, "the demo's eight GPUs are of GFD type NVIDIA-H100-80GB-HBM3"},
	}
	deadline = time.Now().Add(30 * time.Second)
	for len(checks) > 0 {
		var left []valueCheck
		for _, c := range checks {
			res, err := promQuery(promAddr, c.q, time.Time{})
			if err != nil || len(res) != 1 || res[0].Value < c.min || res[0].Value > c.max {
				if time.Now().After(deadline) {
					t.Errorf("%s: %s = %+v (%v), want one value in [%g, %g]", c.what, c.q, res, err, c.min, c.max)
					continue
				}
				left = append(left, c)
			}
		}
		if checks = left; len(checks) > 0 {
			time.Sleep(500 * time.Millisecond)
		}
	}

	// The alert fires.
	deadline = time.Now().Add(30 * time.Second)
	for {
		res, err := promQuery(promAddr, `ALERTS{alertname="GPUPodsPendingWhileGPUsIdle",alertstate="firing"}`, time.Time{})
		if err == nil && len(res) == 1 {
			if res[0].Labels["severity"] != "warning" {
				t.Errorf("alert labels %v, want severity=warning", res[0].Labels)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GPUPodsPendingWhileGPUsIdle did not fire within 30s (last: %v %v)", res, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// TestBackfilledDays replays two days (testdata/backfill.yaml) as
// OpenMetrics, backfills them with promtool, backfills the recording rules
// from them, and checks the fleet dashboard's hour-of-day × weekday matrix and
// top-workloads table against what the scenario says.
func TestBackfilledDays(t *testing.T) {
	t.Parallel()
	promtool := need(t, "promtool")
	prom := need(t, "prometheus")
	const scenario = "testdata/backfill.yaml"
	sc, err := sim.LoadScenario(scenario)
	if err != nil {
		t.Fatal(err)
	}
	end := sc.Start.Add(sc.Duration)
	dir := t.TempDir()
	started := time.Now()

	// 1. Replay: a scrape every 2 minutes; polls every 10s (the driver keeps
	// 20s of samples, so none is lost) keep the replay short. 2. Backfill
	// the raw series.
	data := filepath.Join(dir, "data")
	replayBlocks(t, promtool, scenario, data, "2m", "10s")
	backfilled := time.Since(started)

	// The two panels checked below.
	queries, err := grafana.Queries(map[string]string{
		"cluster": ".*", "namespace": ".*", "window": ".*", "instance": ".*", "gpu": ".*", "utc_offset": "0",
		"__range": sc.Duration.String(), "__interval": "5m", "__interval_ms": "300000", "__rate_interval": "4m",
	})
	if err != nil {
		t.Fatal(err)
	}
	byPanel := func(title string) string {
		for _, q := range queries {
			if q.Panel == title {
				return q.Expr
			}
		}
		t.Fatalf("no panel %q", title)
		return ""
	}
	heatmap := byPanel("Idle allocated GPUs by hour of day and weekday")
	top := byPanel("Top workloads by idle GPU-hours")

	// 3. Backfill the recording rules these panels read, from a Prometheus
	// serving the raw series, every minute as Prometheus evaluates them by
	// default. (promtool writes a block per rule and two hours, so all the
	// rules would take a minute here; rules built on other recorded series
	// need a second pass.)
	rules, err := promrules.Parse(promrules.Rules)
	if err != nil {
		t.Fatal(err)
	}
	recording := &promrules.RuleFile{}
	for _, g := range rules.Groups {
		var rs []promrules.Rule
		for _, r := range g.Rules {
			if r.Record != "" && strings.Contains(heatmap+top, r.Record) {
				rs = append(rs, r)
			}
		}
		if len(rs) > 0 {
			recording.Groups = append(recording.Groups, promrules.RuleGroup{Name: g.Name, Rules: rs})
		}
	}
	// promtool offsets a group's evaluations within the minute by a hash
	// of its name and file path, as Prometheus does: a path relative to the
	// working directory keeps the offset, and so the result, the same from
	// run to run (the temporary directory's name changes).
	const ruleName = "recording.yaml"
	ruleFile(t, dir, ruleName, recording)
	config := "global:\n  evaluation_interval: 1m\n"
	p1, addr := startPrometheus(t, prom, filepath.Join(dir, "p1"), data, config)
	ruleBlocks := filepath.Join(dir, "rule-blocks")
	backfill := exec.Command(promtool, "tsdb", "create-blocks-from", "rules", "--quiet",
		"--url=http://"+addr, "--start="+sc.Start.Format(time.RFC3339), "--end="+end.Format(time.RFC3339),
		"--eval-interval=1m", "--output-dir="+ruleBlocks, ruleName)
	backfill.Dir = dir
	if out, err := backfill.CombinedOutput(); err != nil {
		t.Fatalf("promtool tsdb create-blocks-from rules: %v\n%s", err, out)
	}
	rulesBackfilled := time.Since(started)

	// 4. Prometheus on both: stop it, add the rule blocks, start it again.
	if code := p1.stop(t); code != 0 {
		t.Fatalf("Prometheus exited %d after SIGTERM", code)
	}
	blocks, err := os.ReadDir(ruleBlocks)
	if err != nil || len(blocks) == 0 {
		t.Fatalf("no rule blocks: %v", err)
	}
	for _, b := range blocks {
		if err := os.Rename(filepath.Join(ruleBlocks, b.Name()), filepath.Join(data, b.Name())); err != nil {
			t.Fatal(err)
		}
	}
	_, addr = startPrometheus(t, prom, filepath.Join(dir, "p2"), data, config)

	want := expectedIdle(t, sc)

	// The hour-of-day × weekday matrix: every hour of the two days. In an
	// hour in which a GPU turns idle or busy (or its series is born, as the
	// window label turns to peak), the first 5-minute step reads a rate
	// that lags by up to one rule interval (the group's offset within the
	// minute) and whose extrapolation loses up to one scrape interval: three
	// minutes of a GPU at worst, 0.05 of the hour's mean. Sweeping the
	// offset over ten group paths gave errors from 0 to 0.030.
	res, err := promQuery(addr, heatmap, end)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != len(want.cells) {
		t.Errorf("heatmap has %d cells, want %d (every hour of the scenario)", len(res), len(want.cells))
	}
	for _, s := range res {
		key := s.Labels["weekday"] + "/" + s.Labels["hour"]
		w, ok := want.cells[key]
		if !ok {
			t.Errorf("heatmap cell weekday=%s hour=%s is not in the scenario", s.Labels["weekday"], s.Labels["hour"])
			continue
		}
		if math.Abs(s.Value-w) > 0.05 {
			t.Errorf("heatmap weekday=%s hour=%s: %.3f idle GPUs, want %.3f", s.Labels["weekday"], s.Labels["hour"], s.Value, w)
		}
	}

	// Top workloads by idle GPU-hours, all windows and peak only.
	for _, c := range []struct {
		window string
		want   map[string]float64
	}{{".*", want.hours}, {"peak", want.peakHours}} {
		t.Run("window "+c.window, func(t *testing.T) {
			q := strings.ReplaceAll(top, `window=~".*"`, `window=~"`+c.window+`"`)
			res, err := promQuery(addr, q, end)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]float64{}
			for _, s := range res {
				got[s.Labels["namespace"]] += s.Value
				if wl := s.Labels["workload"]; wl != "" && wl != want.workload[s.Labels["namespace"]] {
					t.Errorf("namespace %s: workload %q, want %q", s.Labels["namespace"], wl, want.workload[s.Labels["namespace"]])
				}
			}
			for ns, w := range c.want {
				if math.Abs(got[ns]-w) > 0.02*w {
					t.Errorf("window %s: %s has %.2f idle GPU-hours, want %.2f ± 2%%", c.window, ns, got[ns], w)
				}
			}
			if len(got) != len(c.want) {
				t.Errorf("window %s: top workloads %v, want %v", c.window, got, c.want)
			}
		})
	}
	t.Logf("replayed and backfilled in %s, rule backfill %s, checked at %s",
		backfilled.Round(time.Millisecond), (rulesBackfilled - backfilled).Round(time.Millisecond),
		time.Since(started).Round(time.Millisecond))
}

type idleAnswer struct {
	// cells: mean idle GPUs by "weekday/hour" (day_of_week, zero-padded hour, UTC).
	cells map[string]float64
	// hours and peakHours: idle GPU-hours by namespace.
	hours, peakHours map[string]float64
	workload         map[string]string
}

// expectedIdle computes, from the scenario alone, the idle allocated GPUs of
// each hour of the week and the idle GPU-hours of each namespace, in all
// windows and at peak under the default schedule.
func expectedIdle(t *testing.T, sc *sim.Scenario) idleAnswer {
	t.Helper()
	peak, err := agent.ParseSchedule(agent.DefaultPeakSchedule, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	a := idleAnswer{cells: map[string]float64{}, hours: map[string]float64{}, peakHours: map[string]float64{}, workload: map[string]string{}}
	const step = 10 * time.Second
	perHour := float64(time.Hour / step)
	for d := time.Duration(0); d < sc.Duration; d += step {
		at := sc.Start.Add(d)
		key := fmt.Sprintf("%d/%02d", int(at.Weekday()), at.Hour())
		a.cells[key] += 0 // every hour of the scenario is a cell
		for i, p := range sc.Pods {
			mid := d + step/2
			if mid < p.From || mid >= p.To || sc.UtilAt(i, mid) >= 0.05 {
				continue
			}
			n := float64(len(p.Devices))
			a.cells[key] += n / perHour
			a.hours[p.Namespace] += n * step.Hours()
			if peak.At(sc.Start.Add(mid)) {
				a.peakHours[p.Namespace] += n * step.Hours()
			}
			a.workload[p.Namespace] = p.Owner.Name
		}
	}
	return a
}
