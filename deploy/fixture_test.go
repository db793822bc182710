package deploy

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	corev1 "k8s.io/api/core/v1"
)

// copyTree copies the folder src to dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

const fixtureRule = `apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: gpuxray
spec:
  groups:
    - name: gpuxray.recording
      interval: 1m
      rules:
        - record: namespace:gpuxray_allocated_idle_gpus:rate5m
          expr: sum by (namespace) (rate(gpuxray_allocated_idle_seconds_total[5m]))
    - name: gpuxray.alerts
      rules:
        - alert: GPUAllocatedButIdle
          expr: gpuxray_allocation_idle_streak_seconds > 1800
          for: 5m
          labels: {severity: warning}
          annotations: {summary: An allocated GPU has been idle for 30 minutes.}
        - alert: GpuxraySourceDown
          expr: gpuxray_source_up == 0
          for: 5m
          labels: {severity: warning}
`

const fixtureDashboard = `{"title": "gpuxray fleet", "panels": [], "templating": {"list": []}}`

// TestMonitoringPackagingFixture runs the packaging of rules and dashboards
// on a copy of the deploy folder holding a known rule and dashboards, so the
// mechanism is checked whatever deploy/prometheus and deploy/grafana hold.
func TestMonitoringPackagingFixture(t *testing.T) {
	t.Parallel()
	need(t, "kustomize")
	need(t, "helm")
	root := t.TempDir()
	copyTree(t, "kubernetes", filepath.Join(root, "kubernetes"))
	copyTree(t, "helm", filepath.Join(root, "helm"))
	chartDir := filepath.Join(root, chart)

	// With no packaged rule, asking for one is an install error, not silence.
	for _, p := range []string{filepath.Join(root, chartFilesDir, "gpuxray-prometheusrule.yaml")} {
		_ = os.Remove(p)
	}
	_, err := helmTemplate(t, chartDir, "gpuxray", writeValues(t, "prometheusRule: {enabled: true}\n"))
	if err == nil || !strings.Contains(err.Error(), "holds no files/gpuxray-prometheusrule.yaml") {
		t.Errorf("prometheusRule.enabled without a packaged rule: %v, want a clear error", err)
	}

	for p, text := range map[string]string{
		ruleSource:                      fixtureRule,
		vmRuleSource:                    strings.Replace(fixtureRule, "apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule", "apiVersion: operator.victoriametrics.com/v1beta1\nkind: VMRule", 1),
		dashboardSource + "/fleet.json": fixtureDashboard,
		dashboardSource + "/node.json":  strings.Replace(fixtureDashboard, "fleet", "node", 1),
	} {
		p = filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writePackagedMonitoring(t, root)

	t.Run("kustomize", func(t *testing.T) {
		m := kustomizeBuild(t, filepath.Join(root, "kubernetes/overlays/servicemonitor"))
		checkManifest(t, m, expect{namespace: "gpuxray", serviceMonitor: true, rule: true, dashboards: 2})
		r := one[monitoringv1.PrometheusRule](t, m)
		if r.Namespace != "gpuxray" || len(r.Spec.Groups) != 2 || len(r.Spec.Groups[1].Rules) != 2 || r.Spec.Groups[1].Rules[0].Alert != "GPUAllocatedButIdle" {
			t.Errorf("PrometheusRule %s/%s groups %+v, want the fixture's", r.Namespace, r.Name, r.Spec.Groups)
		}
		checkDashboards(t, m, "gpuxray-dashboard-")
	})
	t.Run("helm", func(t *testing.T) {
		m := helmManifest(t, chartDir, "monitoring", writeValues(t, `
prometheusRule:
  enabled: true
  additionalLabels: {release: kube-prometheus-stack}
  alerts:
    GPUAllocatedButIdle: {expr: gpuxray_allocation_idle_streak_seconds >= 3600, for: 1h, severity: info, labels: {team: platform}}
    GpuxraySourceDown: {enabled: false}
vmRule: {enabled: true}
dashboards: {enabled: true}
`))
		// The VMRule, from its own packaged copy, takes the same overrides.
		vr := one[vmRule](t, m).ruleFile()
		if len(vr.Groups) != 2 || len(vr.Groups[1].Rules) != 1 || vr.Groups[1].Rules[0].Expr != "gpuxray_allocation_idle_streak_seconds >= 3600" ||
			vr.Groups[1].Rules[0].For != "1h" || vr.Groups[1].Rules[0].Labels["team"] != "platform" || vr.Groups[0].Interval != "1m" {
			t.Errorf("VMRule groups %+v, want the PrometheusRule's overrides", vr.Groups)
		}
		checkManifest(t, m, expect{namespace: "monitoring", rule: true, vmRule: true, dashboards: 2, release: "kube-prometheus-stack"})
		r := one[monitoringv1.PrometheusRule](t, m)
		if r.Labels["release"] != "kube-prometheus-stack" || len(r.Spec.Groups) != 2 {
			t.Fatalf("PrometheusRule labels %v, %d groups", r.Labels, len(r.Spec.Groups))
		}
		rec, alerts := r.Spec.Groups[0], r.Spec.Groups[1]
		if rec.Interval == nil || *rec.Interval != "1m" || len(rec.Rules) != 1 || rec.Rules[0].Record != "namespace:gpuxray_allocated_idle_gpus:rate5m" {
			t.Errorf("recording group %+v, want the fixture's unchanged", rec)
		}
		if len(alerts.Rules) != 1 {
			t.Fatalf("alerts %+v, want GpuxraySourceDown dropped", alerts.Rules)
		}
		a := alerts.Rules[0]
		if a.Alert != "GPUAllocatedButIdle" || a.For == nil || *a.For != "1h" || a.Labels["severity"] != "info" || a.Labels["team"] != "platform" ||
			a.Annotations["summary"] == "" || a.Expr.String() != "gpuxray_allocation_idle_streak_seconds >= 3600" {
			t.Errorf("GPUAllocatedButIdle = %+v, want the expr, for 1h, severity info, team platform, the rest as in the file", a)
		}
		checkDashboards(t, m, "gpuxray-dashboard-")
	})
}

// checkDashboards: one ConfigMap per dashboard file, holding it unchanged.
func checkDashboards(t *testing.T, m *manifest, prefix string) {
	t.Helper()
	var names []string
	for _, cm := range all[corev1.ConfigMap](m) {
		names = append(names, cm.Name)
		key := strings.TrimPrefix(cm.Name, prefix) + ".json"
		want := fixtureDashboard
		if key == "node.json" {
			want = strings.Replace(fixtureDashboard, "fleet", "node", 1)
		}
		if cm.Data[key] != want {
			t.Errorf("ConfigMap %s[%s] = %q, want the dashboard file", cm.Name, key, cm.Data[key])
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{prefix + "fleet", prefix + "node"}) {
		t.Errorf("dashboard ConfigMaps %v", names)
	}
}
