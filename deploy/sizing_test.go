package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
)

// sizingPeakRSS reads the agent's peak resident memory that the manifests
// are sized from, written once in docs/benchmarks.md ("Sizing the
// DaemonSet"), in bytes.
func sizingPeakRSS(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("../docs/benchmarks.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`sizing peak RSS: \*\*([0-9]+(?:\.[0-9]+)?) MiB\*\*`).FindSubmatch(b)
	if m == nil {
		t.Fatal(`docs/benchmarks.md has no "sizing peak RSS: **N MiB**"`)
	}
	mib, _ := strconv.ParseFloat(string(m[1]), 64)
	if mib < 20 {
		t.Fatalf("sizing peak RSS %g MiB: not a figure for the agent", mib)
	}
	return int64(mib * (1 << 20))
}

// TestMemorySizing: the shipped manifests request at least the measured peak
// (so that the scheduler places the agent where it fits and the kubelet
// does not evict it first under memory pressure), and their GOMEMLIMIT
// stays well below the hard limit (checkManifest). In Helm, GOMEMLIMIT
// follows a changed limit, and one set at or above the limit is refused.
func TestMemorySizing(t *testing.T) {
	t.Parallel()
	peak := sizingPeakRSS(t)
	request := func(t *testing.T, m *manifest) {
		t.Helper()
		c := one[appsv1.DaemonSet](t, m).Spec.Template.Spec.Containers[0]
		if r := c.Resources.Requests.Memory().Value(); r < peak {
			t.Errorf("memory request %d MiB, below the measured peak %.1f MiB (docs/benchmarks.md)", r>>20, float64(peak)/(1<<20))
		}
	}
	t.Run("helm defaults", func(t *testing.T) {
		t.Parallel()
		m := helmManifest(t, chart, "gpuxray")
		checkManifest(t, m, expect{namespace: "gpuxray"})
		request(t, m)
	})
	for _, o := range []string{"base", "overlays/servicemonitor", "overlays/victoriametrics", "overlays/dra"} {
		t.Run("kustomize "+o, func(t *testing.T) {
			t.Parallel()
			request(t, kustomizeBuild(t, filepath.Join("kubernetes", o)))
		})
	}
	for _, tc := range []struct {
		values, want string // want: GOMEMLIMIT, or a part of the error
	}{
		{"", "96MiB"},
		{"resources: {limits: {memory: 256Mi}}\n", "192MiB"},
		{"resources: {limits: {memory: 1Gi}}\n", "768MiB"},
		{"resources: {limits: {memory: 0.5Gi}}\n", "384MiB"},
		{"resources: {limits: {memory: 200M}}\n", "143MiB"},
		{"resources: {limits: {memory: 268435456}}\n", "192MiB"},
		{"resources: {limits: {memory: 256Mi}}\ngoMemLimit: 200MiB\n", "200MiB"},
		{"goMemLimit: 128MiB\n", "goMemLimit 128MiB is not below"},
		{"goMemLimit: 1GiB\n", "goMemLimit 1GiB is not below"},
		{"resources: {limits: {memory: 96Mi}}\n", "too small"},
		{"resources: {limits: {memory: null}}\n", "no memory limit"},
	} {
		t.Run("helm "+strings.TrimSpace(tc.values), func(t *testing.T) {
			t.Parallel()
			out, err := helmTemplate(t, chart, "gpuxray", writeValues(t, tc.values))
			if !strings.HasSuffix(tc.want, "MiB") {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("values %q: %v; want an error saying %q", tc.values, err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("values %q: %v", tc.values, err)
			}
			m, err := decodeManifest(out)
			if err != nil {
				t.Fatal(err)
			}
			c := one[appsv1.DaemonSet](t, m).Spec.Template.Spec.Containers[0]
			if got := envValue(c.Env, "GOMEMLIMIT"); got != tc.want {
				t.Errorf("values %q: GOMEMLIMIT=%q, want %s", tc.values, got, tc.want)
			}
			if tc.values != "" && !strings.Contains(tc.values, "goMemLimit") {
				checkGoMemLimit(t, c)
			}
		})
	}
}

// TestPriority: the agents' priority in Helm and kustomize: by default their
// own class (checkManifest), installable anywhere; raised to
// system-node-critical, with the ResourceQuota GKE needs outside kube-system.
func TestPriority(t *testing.T) {
	t.Parallel()
	critical := "priorityClassName: system-node-critical\n"
	for _, tc := range []struct {
		name, ns, values string
		want             expect
	}{
		{"default", "gpuxray", "", expect{namespace: "gpuxray"}},
		{"own class with another value", "gpuxray", "priorityClass: {value: 2000}\n", expect{namespace: "gpuxray"}},
		{"system-node-critical", "gpuxray", critical, expect{namespace: "gpuxray", critical: "system-node-critical"}},
		{"system-node-critical in kube-system", "kube-system", critical, expect{namespace: "kube-system", critical: "system-node-critical"}},
		{"system-cluster-critical", "monitoring", "priorityClassName: system-cluster-critical\n", expect{namespace: "monitoring", critical: "system-cluster-critical"}},
	} {
		t.Run("helm "+tc.name, func(t *testing.T) {
			t.Parallel()
			checkManifest(t, helmManifest(t, chart, tc.ns, writeValues(t, tc.values)), tc.want)
		})
	}
	t.Run("helm another class", func(t *testing.T) {
		t.Parallel()
		m := helmManifest(t, chart, "gpuxray", writeValues(t, "priorityClassName: monitoring-high\n"))
		if c := one[appsv1.DaemonSet](t, m).Spec.Template.Spec.PriorityClassName; c != "monitoring-high" || len(m.objects) == 0 ||
			len(all[corev1.ResourceQuota](m)) != 0 || strings.Contains(objectKinds(m), "PriorityClass") {
			t.Errorf("priorityClassName monitoring-high: the pod's %q, objects %s; want it alone", c, objectKinds(m))
		}
	})
	t.Run("helm no class", func(t *testing.T) {
		t.Parallel()
		m := helmManifest(t, chart, "gpuxray", writeValues(t, "priorityClass: {create: false}\n"))
		if c := one[appsv1.DaemonSet](t, m).Spec.Template.Spec.PriorityClassName; c != "" || strings.Contains(objectKinds(m), "PriorityClass") {
			t.Errorf("priorityClass.create=false: the pod's %q, objects %s; want none", c, objectKinds(m))
		}
	})
	t.Run("helm own class's value", func(t *testing.T) {
		t.Parallel()
		m := helmManifest(t, chart, "gpuxray", writeValues(t, "priorityClass: {value: 2000}\n"))
		if v := one[schedulingv1.PriorityClass](t, m).Value; v != 2000 {
			t.Errorf("PriorityClass value %d, want 2000", v)
		}
	})
	t.Run("kustomize system-node-critical", func(t *testing.T) {
		t.Parallel()
		dir := overlayDir(t, "kubernetes/base", nil, []string{"kubernetes/components/system-node-critical"}, "")
		checkManifest(t, kustomizeBuild(t, dir), expect{namespace: "gpuxray", critical: "system-node-critical"})
	})
}

// overlayDir writes a kustomization in a temporary folder over the given
// resources and components (paths under deploy/), with more YAML appended.
func overlayDir(t *testing.T, base string, resources, components []string, more string) string {
	t.Helper()
	dir := t.TempDir()
	// kustomize takes other kustomizations by relative path only.
	rel := func(p string) string {
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
	var b strings.Builder
	b.WriteString("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: gpuxray\nresources:\n  - " + rel(base) + "\n")
	for _, r := range resources {
		b.WriteString("  - " + rel(r) + "\n")
	}
	if len(components) > 0 {
		b.WriteString("components:\n")
		for _, c := range components {
			b.WriteString("  - " + rel(c) + "\n")
		}
	}
	b.WriteString(more)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func objectKinds(m *manifest) string {
	var kinds []string
	for _, o := range m.objects {
		kinds = append(kinds, strings.TrimPrefix(fmt.Sprintf("%T", o), "*v1."))
	}
	return strings.Join(kinds, ",")
}
