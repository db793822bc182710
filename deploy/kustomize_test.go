package deploy

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// kustomizeBuild renders a kustomization folder.
func kustomizeBuild(t *testing.T, dir string) *manifest {
	t.Helper()
	out, err := output(t, need(t, "kustomize"), "build", dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	m, err := decodeManifest(out)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	return m
}

func TestKustomizeOverlays(t *testing.T) {
	t.Parallel()
	rule, dashboards := monitoringSources(t, ".")
	appVersion := chartAppVersion(t, "helm/gpuxray")
	tests := []struct {
		overlay string
		want    expect
	}{
		{"base", expect{namespace: "gpuxray"}},
		{"overlays/servicemonitor", expect{namespace: "gpuxray", serviceMonitor: true, rule: rule != "", dashboards: len(dashboards)}},
		{"overlays/kube-prometheus-stack", expect{namespace: "gpuxray", serviceMonitor: true, rule: rule != "", dashboards: len(dashboards), release: "kube-prometheus-stack"}},
		{"overlays/podmonitor", expect{namespace: "gpuxray", podMonitor: true, rule: rule != "", dashboards: len(dashboards)}},
		{"overlays/process-attribution", expect{namespace: "gpuxray", hostPID: true, serviceMonitor: true, rule: rule != "", dashboards: len(dashboards)}},
		{"overlays/victoriametrics", expect{namespace: "gpuxray", vmServiceScrape: true, vmRule: true, dashboards: len(dashboards)}},
		{"overlays/dra", expect{namespace: "gpuxray", hostPID: true, serviceMonitor: true, rule: rule != "", dashboards: len(dashboards)}},
	}
	for _, tc := range tests {
		t.Run(tc.overlay, func(t *testing.T) {
			t.Parallel()
			m := kustomizeBuild(t, filepath.Join("kubernetes", tc.overlay))
			checkManifest(t, m, tc.want)
			if tc.want.vmRule {
				checkVMRuleIsTheRuleFile(t, m)
			}
			ns := one[corev1.Namespace](t, m)
			if ns.Name != "gpuxray" || ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
				t.Errorf("Namespace %s labels %v: the agent's hostPath needs the privileged Pod Security level", ns.Name, ns.Labels)
			}
			c := one[appsv1.DaemonSet](t, m).Spec.Template.Spec.Containers[0]
			if want := "ghcr.io/gpuxray/gpuxray:" + appVersion; c.Image != want {
				t.Errorf("image %s, want %s (the chart's appVersion)", c.Image, want)
			}
			if tc.overlay == "overlays/dra" {
				for _, f := range []string{"--dra.drivers=gpu.nvidia.com", "--dra.uuid-attribute=uuid"} {
					if !slices.Contains(c.Args, f) {
						t.Errorf("args %q lack %s", c.Args, f)
					}
				}
			}
			for name, want := range map[string]string{"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "utility"} {
				if got := envValue(c.Env, name); got != want {
					t.Errorf("%s=%q, want %q: NVML comes through the NVIDIA container toolkit", name, got, want)
				}
			}
		})
	}
}

func chartAppVersion(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil || c.AppVersion == "" {
		t.Fatalf("Chart.yaml appVersion: %q, %v", c.AppVersion, err)
	}
	return c.AppVersion
}

// TestKustomizeVMPodScrape: an overlay that scrapes the agents' pods for
// the VictoriaMetrics operator, as the vmpodscrape component's comment
// says to build one.
func TestKustomizeVMPodScrape(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// kustomize takes other kustomizations by relative path only.
	abs := func(p string) string {
		a, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		r, err := filepath.Rel(dir, a)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: gpuxray\nresources:\n  - " + abs("kubernetes/base") +
		"\ncomponents:\n  - " + abs("kubernetes/components/vmpodscrape") + "\n  - " + abs("kubernetes/components/vmrule") + "\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	m := kustomizeBuild(t, dir)
	checkManifest(t, m, expect{namespace: "gpuxray", vmPodScrape: true, vmRule: true})
	checkVMRuleIsTheRuleFile(t, m)
}

// TestKustomizeReleaseLabel: the kube-prometheus-stack component labels the
// Prometheus Operator objects of whatever overlay it is added to, PodMonitor
// included, and nothing else.
func TestKustomizeReleaseLabel(t *testing.T) {
	t.Parallel()
	rule, dashboards := monitoringSources(t, ".")
	dir := overlayDir(t, "kubernetes/base", nil, []string{"kubernetes/components/podmonitor", "kubernetes/components/monitoring", "kubernetes/components/kube-prometheus-stack"}, "")
	checkManifest(t, kustomizeBuild(t, dir), expect{namespace: "gpuxray", podMonitor: true, rule: rule != "", dashboards: len(dashboards), release: "kube-prometheus-stack"})
}
