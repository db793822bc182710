package deploy

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
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
		{"system-node-critical", pod.PriorityClassName == "system-node-critical"},
		{"seccomp RuntimeDefault", pod.SecurityContext != nil && pod.SecurityContext.SeccompProfile != nil && pod.SecurityContext.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault},
		{"read-only root filesystem", is(sc.ReadOnlyRootFilesystem, true)},
		{"no privilege escalation", is(sc.AllowPrivilegeEscalation, false)},
		{"not privileged", is(sc.Privileged, false)},
		{"all capabilities dropped, none added", sc.Capabilities != nil && slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) && len(sc.Capabilities.Add) == 0},
		{"uid 0 for the kubelet's root-owned socket", sc.RunAsUser != nil && *sc.RunAsUser == 0},
		{"memory limit", !c.Resources.Limits.Memory().IsZero()},
		{"cpu and memory requests", !c.Resources.Requests.Cpu().IsZero() && !c.Resources.Requests.Memory().IsZero()},
		{"liveness on /healthz at the health port", c.LivenessProbe != nil && c.LivenessProbe.HTTPGet != nil && c.LivenessProbe.HTTPGet.Path == "/healthz" && c.LivenessProbe.HTTPGet.Port.StrVal == "health"},
		{"readiness on /readyz at the health port", c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet != nil && c.ReadinessProbe.HTTPGet.Path == "/readyz" && c.ReadinessProbe.HTTPGet.Port.StrVal == "health"},
		{"probes in plain HTTP", c.LivenessProbe.HTTPGet.Scheme == "" && c.ReadinessProbe.HTTPGet.Scheme == ""},
		{"NODE_NAME from the downward API", hasEnvFrom(c.Env, "NODE_NAME", "spec.nodeName")},
		{"GOMEMLIMIT from the memory limit", slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
			return e.Name == "GOMEMLIMIT" && e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil &&
				e.ValueFrom.ResourceFieldRef.Resource == "limits.memory" && e.ValueFrom.ResourceFieldRef.Divisor.IsZero()
		})},
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

	// The only host path: the kubelet's pod-resources folder, read-only.
	mounts := map[string]corev1.VolumeMount{}
	for _, vm := range c.VolumeMounts {
		mounts[vm.Name] = vm
	}
	hostPaths := 0
	for _, v := range pod.Volumes {
		if v.HostPath == nil {
			continue
		}
		hostPaths++
		vm := mounts[v.Name]
		if v.HostPath.Path != "/var/lib/kubelet/pod-resources" || v.HostPath.Type == nil || *v.HostPath.Type != corev1.HostPathDirectory {
			t.Errorf("host path %q (%v), want only the pod-resources folder", v.HostPath.Path, v.HostPath.Type)
		}
		if vm.MountPath != v.HostPath.Path || !vm.ReadOnly {
			t.Errorf("host path %s mounted at %q read-only=%v, want at the same path, read-only", v.HostPath.Path, vm.MountPath, vm.ReadOnly)
		}
	}
	if hostPaths != 1 {
		t.Errorf("%d host paths, want the pod-resources folder only", hostPaths)
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
		wantRules = append(wantRules, rbacv1.PolicyRule{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"}, Verbs: read})
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
		case *corev1.Namespace, *rbacv1.ClusterRole, *rbacv1.ClusterRoleBinding:
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
