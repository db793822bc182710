package grafana

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPendingDemandPanels: every panel query that shows pending GPU demand
// counts what the alert GPUPodsPendingWhileGPUsIdle and the report count:
// GPUs requested by unscheduled Pending pods
// (cluster:kube_pod_container_resource_requests_gpu_pending:sum) and GPUs of
// unallocated DRA claims (cluster:kube_resourceclaim_gpu_devices_unallocated:sum),
// each alone or both, summed over clusters. promtool evaluates each query on
// series where, in turn, only DRA claims wait (a DRA cluster: no
// kube_pod_container_resource_requests for them), both wait, and only
// device-plugin pods wait.
func TestPendingDemandPanels(t *testing.T) {
	t.Parallel()
	qs, err := Queries(TestVars)
	if err != nil {
		t.Fatal(err)
	}
	var pending []Query
	for _, q := range qs {
		if strings.Contains(q.Expr, "cluster:kube_pod_container_resource_requests_gpu_pending:sum") {
			pending = append(pending, q)
		}
	}
	if len(pending) < 2 {
		t.Fatalf("%d panel queries read pending demand, want the fleet's stat and its time series", len(pending))
	}
	promtool := need(t, "promtool")
	var b strings.Builder
	b.WriteString(`rule_files: []
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      # Device-plugin demand from 2m on; DRA demand in two clusters until 3m.
      - {series: 'cluster:kube_pod_container_resource_requests_gpu_pending:sum{cluster="a"}', values: '_ _ 2 2 2'}
      - {series: 'cluster:kube_resourceclaim_gpu_devices_unallocated:sum{cluster="a"}', values: '3 3 3 stale'}
      - {series: 'cluster:kube_resourceclaim_gpu_devices_unallocated:sum{cluster="b"}', values: '4 4 4 stale'}
    promql_expr_test:
`)
	for _, q := range pending {
		expr, _ := json.Marshal(q.Expr)
		for _, at := range []struct {
			t    string
			want int
		}{{"0m", 3 + 4}, {"2m", 2 + 3 + 4}, {"4m", 2}} {
			fmt.Fprintf(&b, "      - {expr: %s, eval_time: %s, exp_samples: [{labels: '{}', value: %d}]}\n", expr, at.t, at.want)
		}
	}
	f := filepath.Join(t.TempDir(), "pending_test.yaml")
	if err := os.WriteFile(f, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "test", "rules", f).CombinedOutput(); err != nil {
		var panels []string
		for _, q := range pending {
			panels = append(panels, fmt.Sprintf("%s %q %s", q.Dashboard, q.Panel, q.RefID))
		}
		t.Errorf("pending-demand queries of %s, want device-plugin and DRA demand summed: %v\n%s", strings.Join(panels, "; "), err, out)
	}
}
