package deploy

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// expect is what one rendering of the manifests must hold beyond the
// invariants every rendering keeps.
type expect struct {
	namespace      string
	hostPID        bool
	serviceMonitor bool
	podMonitor     bool
	rule           bool // a PrometheusRule
	dashboards     int  // ConfigMaps for Grafana's sidecar
	// The VictoriaMetrics operator's: a VMServiceScrape, a VMPodScrape, a VMRule.
	vmServiceScrape, vmPodScrape, vmRule bool
	noDRA                                bool // --dra.enabled=false: no resourceslices access
	// release is the label release on every Prometheus Operator object
	// (kube-prometheus-stack selects them by it); "" for none.
	release string
	// gkeDriver: NVML from the driver folder of GKE's own driver install,
	// in a privileged container (GKE has no NVIDIA container toolkit).
	gkeDriver bool
	// critical is the system-*-critical class the agents run at, with a
	// ResourceQuota scoped to it (GKE admits them only so); "" for the
	// default, the manifests' own PriorityClass.
	critical string
}

// checkManifest asserts what every gpuxray deployment keeps: the agent's
// security, mounts, placement, probes, and the objects that point at each
// other agreeing.
func checkManifest(t *testing.T, m *manifest, want expect) {
	t.Helper()
	ds := one[appsv1.DaemonSet](t, m)
	pod := ds.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	if sc == nil {
		t.Fatal("the container has no securityContext")
	}
	is := func(p *bool, v bool) bool { return p != nil && *p == v }
	checks := []struct {
		what string
		ok   bool
	}{
		{"namespace " + want.namespace, ds.Namespace == want.namespace},
		{"selector matches the pod's labels", selects(ds.Spec.Selector.MatchLabels, ds.Spec.Template.Labels)},
		{"hostPID only with process attribution", pod.HostPID == want.hostPID},
		{"no host network", !pod.HostNetwork},
		{"no host IPC", !pod.HostIPC},
		{"seccomp RuntimeDefault", pod.SecurityContext != nil && pod.SecurityContext.SeccompProfile != nil && pod.SecurityContext.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault},
		{"read-only root filesystem", is(sc.ReadOnlyRootFilesystem, true)},
		// GKE's driver install: the GPUs' device nodes need a privileged
		// container, and the API server refuses privileged with
		// allowPrivilegeEscalation false.
		{"no privilege escalation", want.gkeDriver || is(sc.AllowPrivilegeEscalation, false)},
		{"not privileged (privileged only for GKE's driver)", is(sc.Privileged, want.gkeDriver) && !(want.gkeDriver && is(sc.AllowPrivilegeEscalation, false))},
		{"LD_LIBRARY_PATH to the driver only with GKE's driver", (envValue(c.Env, "LD_LIBRARY_PATH") == "/usr/local/nvidia/lib64") == want.gkeDriver},
		{"all capabilities dropped, none added", sc.Capabilities != nil && slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) && len(sc.Capabilities.Add) == 0},
		{"uid 0 for the kubelet's root-owned socket", sc.RunAsUser != nil && *sc.RunAsUser == 0},
		{"memory limit", !c.Resources.Limits.Memory().IsZero()},
		{"cpu and memory requests", !c.Resources.Requests.Cpu().IsZero() && !c.Resources.Requests.Memory().IsZero()},
		{"liveness on /healthz at the health port", c.LivenessProbe != nil && c.LivenessProbe.HTTPGet != nil && c.LivenessProbe.HTTPGet.Path == "/healthz" && c.LivenessProbe.HTTPGet.Port.StrVal == "health"},
		{"readiness on /readyz at the health port", c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet != nil && c.ReadinessProbe.HTTPGet.Path == "/readyz" && c.ReadinessProbe.HTTPGet.Port.StrVal == "health"},
		{"probes in plain HTTP", c.LivenessProbe.HTTPGet.Scheme == "" && c.ReadinessProbe.HTTPGet.Scheme == ""},
		{"NODE_NAME from the downward API", hasEnvFrom(c.Env, "NODE_NAME", "spec.nodeName")},
		{"GPU taint tolerated", slices.ContainsFunc(pod.Tolerations, func(tl corev1.Toleration) bool {
			return tl.Key == "nvidia.com/gpu" && tl.Operator == corev1.TolerationOpExists && tl.Effect == corev1.TaintEffectNoSchedule
		})},
		{"GPU Operator label selects", affinityAccepts(pod.Affinity, map[string]string{"nvidia.com/gpu.present": "true"})},
		{"NFD's NVIDIA PCI label selects", affinityAccepts(pod.Affinity, map[string]string{"feature.node.kubernetes.io/pci-10de.present": "true"})},
		{"a node without a GPU label is not selected", !affinityAccepts(pod.Affinity, map[string]string{"kubernetes.io/os": "linux"})},
	}
	for _, ch := range checks {
		if !ch.ok {
			t.Errorf("DaemonSet: %s: no", ch.what)
		}
	}
	checkPriority(t, m, pod.PriorityClassName, want)
	checkGoMemLimit(t, c)

	// The health port is the one --web.health-listen-address binds.
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["metrics"] == 0 || ports["health"] == 0 || ports["metrics"] == ports["health"] {
		t.Errorf("container ports %v, want distinct metrics and health", ports)
	}
	if a := flagValue(c.Args, "web.health-listen-address"); a != ":"+itoa(ports["health"]) {
		t.Errorf("--web.health-listen-address=%q, want the health port %d", a, ports["health"])
	}
	if a := flagValue(c.Args, "web.listen-address"); a != "" && a != ":"+itoa(ports["metrics"]) {
		t.Errorf("--web.listen-address=%q, want the metrics port %d", a, ports["metrics"])
	}

	// The only host paths, read-only: the kubelet's pod-resources folder,
	// and with GKE's driver install its driver folder where GKE's own
	// exporters mount it.
	mounts := map[string]corev1.VolumeMount{}
	for _, vm := range c.VolumeMounts {
		mounts[vm.Name] = vm
	}
	wantPaths := map[string]string{"/var/lib/kubelet/pod-resources": "/var/lib/kubelet/pod-resources"}
	if want.gkeDriver {
		wantPaths["/home/kubernetes/bin/nvidia"] = "/usr/local/nvidia"
	}
	hostPaths := 0
	for _, v := range pod.Volumes {
		if v.HostPath == nil {
			continue
		}
		hostPaths++
		vm := mounts[v.Name]
		at, ok := wantPaths[v.HostPath.Path]
		if !ok || v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathDirectory {
			t.Errorf("host path %q (%v), want only %v", v.HostPath.Path, v.HostPath.Type, wantPaths)
		}
		if vm.MountPath != at || !vm.ReadOnly {
			t.Errorf("host path %s mounted at %q read-only=%v, want at %s, read-only", v.HostPath.Path, vm.MountPath, vm.ReadOnly, at)
		}
	}
	if hostPaths != len(wantPaths) {
		t.Errorf("%d host paths, want %v", hostPaths, wantPaths)
	}

	// The ServiceAccount, its ClusterRole and binding agree.
	sa := one[corev1.ServiceAccount](t, m)
	if pod.ServiceAccountName != sa.Name || sa.Namespace != want.namespace {
		t.Errorf("pod's service account %q, ServiceAccount %s/%s", pod.ServiceAccountName, sa.Namespace, sa.Name)
	}
	role := one[rbacv1.ClusterRole](t, m)
	read := []string{"get", "list", "watch"}
	wantRules := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: read},
		// The node watch's GET of its own Node (collector/node).
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}},
		// The pod source's PriorityClass values, for the queue X-ray.
		{APIGroups: []string{"scheduling.k8s.io"}, Resources: []string{"priorityclasses"}, Verbs: read}}
	if !want.noDRA {
		wantRules = append(wantRules, rbacv1.PolicyRule{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices", "resourceclaims"}, Verbs: read})
	}
	if !slices.EqualFunc(role.Rules, wantRules, func(a, b rbacv1.PolicyRule) bool {
		return slices.Equal(a.APIGroups, b.APIGroups) && slices.Equal(a.Resources, b.Resources) && slices.Equal(a.Verbs, b.Verbs) &&
			len(a.ResourceNames) == 0 && len(a.NonResourceURLs) == 0
	}) {
		t.Errorf("ClusterRole rules %+v, want only %+v", role.Rules, wantRules)
	}
	if dra := flagValue(c.Args, "dra.enabled"); (dra == "false") != want.noDRA {
		t.Errorf("--dra.enabled=%q with resourceslices access %v: the flag and the ClusterRole disagree", dra, !want.noDRA)
	}
	rb := one[rbacv1.ClusterRoleBinding](t, m)
	if rb.RoleRef.Name != role.Name || rb.RoleRef.Kind != "ClusterRole" || len(rb.Subjects) != 1 ||
		rb.Subjects[0].Name != sa.Name || rb.Subjects[0].Namespace != sa.Namespace || rb.Subjects[0].Kind != "ServiceAccount" {
		t.Errorf("ClusterRoleBinding %+v does not bind %s to %s/%s", rb, role.Name, sa.Namespace, sa.Name)
	}

	// The Service selects the agents and names the metrics port.
	svc := one[corev1.Service](t, m)
	if !selects(svc.Spec.Selector, ds.Spec.Template.Labels) || svc.Namespace != want.namespace {
		t.Errorf("Service %s/%s selector %v does not select the agents %v", svc.Namespace, svc.Name, svc.Spec.Selector, ds.Spec.Template.Labels)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "metrics" || svc.Spec.Ports[0].TargetPort.StrVal != "metrics" {
		t.Errorf("Service ports %+v, want the metrics port", svc.Spec.Ports)
	}

	sms := all[monitoringv1.ServiceMonitor](m)
	if (len(sms) == 1) != want.serviceMonitor || len(sms) > 1 {
		t.Errorf("%d ServiceMonitors, want %v", len(sms), want.serviceMonitor)
	}
	for _, sm := range sms {
		if !selects(sm.Spec.Selector.MatchLabels, svc.Labels) || len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "metrics" {
			t.Errorf("ServiceMonitor selector %v, endpoints %+v: want the Service %v, port metrics", sm.Spec.Selector.MatchLabels, sm.Spec.Endpoints, svc.Labels)
		}
	}
	pms := all[monitoringv1.PodMonitor](m)
	if (len(pms) == 1) != want.podMonitor || len(pms) > 1 {
		t.Errorf("%d PodMonitors, want %v", len(pms), want.podMonitor)
	}
	for _, pm := range pms {
		if !selects(pm.Spec.Selector.MatchLabels, ds.Spec.Template.Labels) || len(pm.Spec.PodMetricsEndpoints) != 1 || pm.Spec.PodMetricsEndpoints[0].Port == nil || *pm.Spec.PodMetricsEndpoints[0].Port != "metrics" {
			t.Errorf("PodMonitor selector %v, endpoints %+v: want the agents %v, port metrics", pm.Spec.Selector.MatchLabels, pm.Spec.PodMetricsEndpoints, ds.Spec.Template.Labels)
		}
	}
	rules := all[monitoringv1.PrometheusRule](m)
	if (len(rules) == 1) != want.rule || len(rules) > 1 {
		t.Errorf("%d PrometheusRules, want %v", len(rules), want.rule)
	}
	for _, r := range rules {
		if len(r.Spec.Groups) == 0 {
			t.Error("the PrometheusRule has no group")
		}
	}
	for _, o := range m.objects {
		if g := groupOf(o); g != "monitoring.coreos.com" {
			if l := labelsOf(o)["release"]; l != "" && g != "" {
				t.Errorf("%T %s has the release label %q, meant for the Prometheus Operator's objects", o, nameOf(o), l)
			}
			continue
		}
		if l := labelsOf(o)["release"]; l != want.release {
			t.Errorf("%T %s: label release=%q, want %q", o, nameOf(o), l, want.release)
		}
	}
	checkVMObjects(t, m, want, svc.Labels, ds.Spec.Template.Labels)
	n := 0
	for _, cm := range all[corev1.ConfigMap](m) {
		if cm.Labels["grafana_dashboard"] != "1" {
			continue
		}
		n++
		if len(cm.Data) != 1 {
			t.Errorf("dashboard ConfigMap %s holds %d files, want 1", cm.Name, len(cm.Data))
		}
		for k, v := range cm.Data {
			if !strings.HasSuffix(k, ".json") || !strings.HasPrefix(strings.TrimSpace(v), "{") {
				t.Errorf("dashboard ConfigMap %s: key %q does not hold a JSON dashboard", cm.Name, k)
			}
		}
	}
	if n != want.dashboards {
		t.Errorf("%d dashboard ConfigMaps, want %d", n, want.dashboards)
	}
	for _, o := range m.objects {
		switch o.(type) {
		case *corev1.Namespace, *rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding, *schedulingv1.PriorityClass:
			continue // cluster-scoped
		}
		if ns := namespaceOf(o); ns != want.namespace {
			t.Errorf("%T in namespace %q, want %q", o, ns, want.namespace)
		}
	}
}

func selects(selector, podLabels map[string]string) bool {
	return len(selector) > 0 && labels.SelectorFromSet(selector).Matches(labels.Set(podLabels))
}

func hasEnvFrom(env []corev1.EnvVar, name, fieldPath string) bool {
	return slices.ContainsFunc(env, func(e corev1.EnvVar) bool {
		return e.Name == name && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == fieldPath
	})
}

func envValue(env []corev1.EnvVar, name string) string {
	for _, e := range env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// affinityAccepts reports whether a node with these labels satisfies the
// required node affinity (terms are ORed, expressions ANDed).
func affinityAccepts(a *corev1.Affinity, node map[string]string) bool {
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return false
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		ok := len(term.MatchExpressions) > 0
		for _, e := range term.MatchExpressions {
			v, has := node[e.Key]
			switch e.Operator {
			case corev1.NodeSelectorOpIn:
				ok = ok && has && slices.Contains(e.Values, v)
			case corev1.NodeSelectorOpExists:
				ok = ok && has
			default:
				ok = false
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// flagValue returns the value of --name=value in args.
func flagValue(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }

func namespaceOf(o any) string {
	type namespaced interface{ GetNamespace() string }
	if v, ok := o.(namespaced); ok {
		return v.GetNamespace()
	}
	return ""
}

// maxUserPriority is the highest value a PriorityClass other than the
// system-* ones may have (k8s.io/api/scheduling/v1's HighestUserDefinablePriority).
const maxUserPriority = 1_000_000_000

// checkPriority: by default the agents run at a PriorityClass the manifests
// ship, above ordinary pods and below every system class, that never
// preempts (a telemetry agent must not evict user pods), installable in any
// namespace of any cluster. Raised to a system-*-critical class outside
// kube-system, the manifests hold the ResourceQuota scoped to it that GKE
// requires ("insufficient quota to match these scopes: [{PriorityClass In
// [system-node-critical system-cluster-critical]}]"; GKE's own is
// kube-system's gcp-critical-pods).
func checkPriority(t *testing.T, m *manifest, class string, want expect) {
	t.Helper()
	pcs := all[schedulingv1.PriorityClass](m)
	quotas := all[corev1.ResourceQuota](m)
	if want.critical == "" {
		if len(pcs) != 1 || pcs[0].Name != class {
			t.Errorf("priorityClassName %q with PriorityClasses %v: want the manifests' own class", class, pcs)
			return
		}
		pc := pcs[0]
		if pc.Value <= 0 || pc.Value >= maxUserPriority || pc.GlobalDefault || pc.PreemptionPolicy == nil ||
			*pc.PreemptionPolicy != corev1.PreemptNever || pc.Description == "" {
			t.Errorf("PriorityClass %s: value %d, globalDefault %v, preemptionPolicy %v: want above 0 and a user value, not the default, never preempting, described",
				pc.Name, pc.Value, pc.GlobalDefault, pc.PreemptionPolicy)
		}
		if len(quotas) != 0 {
			t.Errorf("%d ResourceQuotas without a critical class", len(quotas))
		}
		return
	}
	if class != want.critical || len(pcs) != 0 {
		t.Errorf("priorityClassName %q, PriorityClasses %d: want %s and none of our own", class, len(pcs), want.critical)
	}
	if want.namespace == "kube-system" {
		if len(quotas) != 0 {
			t.Errorf("a ResourceQuota in kube-system, which GKE's gcp-critical-pods already covers")
		}
		return
	}
	ok := false
	for _, q := range quotas {
		sel := q.Spec.ScopeSelector
		if sel == nil || len(sel.MatchExpressions) != 1 {
			continue
		}
		e := sel.MatchExpressions[0]
		pods := q.Spec.Hard[corev1.ResourcePods]
		ok = ok || e.ScopeName == corev1.ResourceQuotaScopePriorityClass && e.Operator == corev1.ScopeSelectorOpIn &&
			slices.Contains(e.Values, want.critical) && pods.Value() >= 1_000_000 && q.Namespace == want.namespace
	}
	if !ok {
		t.Errorf("no ResourceQuota in %s scoped to PriorityClass %s with room for the pods: %+v", want.namespace, want.critical, quotas)
	}
}

// checkGoMemLimit: GOMEMLIMIT, the Go runtime's soft limit, sits well below
// the container's hard limit: the rest holds the binary's own mapped pages
// (≈ 32 MiB when hot, docs/benchmarks.md) and NVML's C allocations, which
// the runtime does not count, so that the GC works harder before the kernel
// kills the pod.
func checkGoMemLimit(t *testing.T, c corev1.Container) {
	t.Helper()
	limit := c.Resources.Limits.Memory().Value()
	var soft int64 = -1
	for _, e := range c.Env {
		if e.Name == "GOMEMLIMIT" {
			if e.ValueFrom != nil {
				t.Errorf("GOMEMLIMIT from %+v: want a size below the limit, not the limit itself", e.ValueFrom)
				return
			}
			soft = goMemLimitBytes(t, e.Value)
		}
	}
	switch {
	case soft < 0:
		t.Error("no GOMEMLIMIT")
	case limit == 0:
		t.Error("no memory limit")
	case soft > limit-32<<20 || float64(soft) > 0.8*float64(limit):
		t.Errorf("GOMEMLIMIT %d MiB with a limit of %d MiB: want at most 80%% of it and 32 MiB below", soft>>20, limit>>20)
	}
}

// goMemLimitBytes parses GOMEMLIMIT as the Go runtime does (runtime/debug:
// a number of bytes with an optional B, KiB, MiB, GiB or TiB).
func goMemLimitBytes(t *testing.T, v string) int64 {
	t.Helper()
	m := regexp.MustCompile(`^([0-9]+)(B|KiB|MiB|GiB|TiB)?$`).FindStringSubmatch(v)
	if m == nil {
		t.Errorf("GOMEMLIMIT=%q is not a size the Go runtime reads", v)
		return -1
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n << map[string]int{"": 0, "B": 0, "KiB": 10, "MiB": 20, "GiB": 30, "TiB": 40}[m[2]]
}

type objectMeta interface {
	GetName() string
	GetLabels() map[string]string
}

type typed interface {
	GetObjectKind() schema.ObjectKind
}

func labelsOf(o any) map[string]string {
	if v, ok := o.(objectMeta); ok {
		return v.GetLabels()
	}
	return nil
}

func nameOf(o any) string {
	if v, ok := o.(objectMeta); ok {
		return v.GetName()
	}
	return ""
}

// groupOf is an object's API group, "" for core objects.
func groupOf(o any) string {
	if v, ok := o.(typed); ok {
		return v.GetObjectKind().GroupVersionKind().Group
	}
	return ""
}
