package deploy

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"

	"github.com/gpuxray/gpuxray/collector/sim"
)

// ksmConfig is the part of kube-state-metrics' custom-resource-state schema
// (pkg/customresourcestate) that deploy/kube-state-metrics uses; decoding
// strictly into it catches a misspelt key, which kube-state-metrics would
// ignore.
type ksmConfig struct {
	Kind string `json:"kind"`
	Spec struct {
		Resources []struct {
			GroupVersionKind struct {
				Group   string `json:"group"`
				Version string `json:"version"`
				Kind    string `json:"kind"`
			} `json:"groupVersionKind"`
			LabelsFromPath map[string][]string `json:"labelsFromPath"`
			Metrics        []struct {
				Name string `json:"name"`
				Help string `json:"help"`
				Each struct {
					Type  string   `json:"type"`
					Gauge *ksmEach `json:"gauge"`
					Info  *ksmEach `json:"info"`
				} `json:"each"`
			} `json:"metrics"`
		} `json:"resources"`
	} `json:"spec"`
}

type ksmEach struct {
	Path           []string            `json:"path"`
	LabelsFromPath map[string][]string `json:"labelsFromPath"`
	ValueFrom      []string            `json:"valueFrom"`
	NilIsZero      bool                `json:"nilIsZero"`
}

// ksmFile decodes a custom-resource-state configuration strictly, and
// returns it with each metric's labels (the resource's and its own, and
// the group, kind and version labels custom-resource-state adds), by the
// name kube-state-metrics gives it.
func ksmFile(t *testing.T, file string) (ksmConfig, map[string][]string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var c ksmConfig
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if c.Kind != "CustomResourceStateMetrics" || len(c.Spec.Resources) == 0 {
		t.Fatalf("%s: kind %q with %d resources, want CustomResourceStateMetrics", file, c.Kind, len(c.Spec.Resources))
	}
	labels := map[string][]string{}
	for _, r := range c.Spec.Resources {
		for _, m := range r.Metrics {
			each := m.Each.Gauge
			if m.Each.Type == "Info" {
				each = m.Each.Info
			}
			if each == nil || m.Help == "" || (m.Each.Type != "Gauge" && m.Each.Type != "Info") {
				t.Errorf("%s: metric %s: type %q without its settings or help", file, m.Name, m.Each.Type)
				continue
			}
			name := "kube_customresource_" + m.Name
			labels[name] = []string{"customresource_group", "customresource_kind", "customresource_version"}
			for l := range r.LabelsFromPath {
				labels[name] = append(labels[name], l)
			}
			for l := range each.LabelsFromPath {
				labels[name] = append(labels[name], l)
			}
			slices.Sort(labels[name])
		}
	}
	return c, labels
}

// TestKSMConfigsServeTheRules: every kube_customresource_ metric the rules
// read, one of the configurations produces.
func TestKSMConfigsServeTheRules(t *testing.T) {
	t.Parallel()
	_, claims := ksmFile(t, "kube-state-metrics/resourceclaims.yaml")
	_, kueue := ksmFile(t, "kube-state-metrics/kueue.yaml")
	rules, err := os.ReadFile("prometheus/gpuxray-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	used := regexp.MustCompile(`kube_customresource_[a-z_]+`).FindAllString(string(rules), -1)
	if len(used) == 0 {
		t.Fatal("the rules read no kube_customresource_ metric")
	}
	for _, name := range used {
		if claims[name] == nil && kueue[name] == nil {
			t.Errorf("the rules read %s, which no configuration produces", name)
		}
	}
}

// TestKSMKueue: the configuration for Kueue's Workloads and LocalQueues is
// well formed, reads Kueue's v1beta2 fields, and produces the metrics the
// report and the rules read with the labels they join on; the simulated
// kube-state-metrics (collector/sim) serves exactly those metrics and
// labels for a suspended job.
func TestKSMKueue(t *testing.T) {
	t.Parallel()
	c, labels := ksmFile(t, "kube-state-metrics/kueue.yaml")
	kinds := map[string]bool{}
	for _, r := range c.Spec.Resources {
		gvk := r.GroupVersionKind
		if gvk.Group != "kueue.x-k8s.io" || gvk.Version != "v1beta2" {
			t.Errorf("groupVersionKind %+v, want kueue.x-k8s.io/v1beta2", gvk)
		}
		kinds[gvk.Kind] = true
	}
	if !kinds["Workload"] || !kinds["LocalQueue"] {
		t.Errorf("kinds %v, want Workload and LocalQueue", kinds)
	}
	for name, want := range map[string][]string{
		"kube_customresource_kueue_workload_pending_gpus": {"namespace", "workload", "podset"},
		"kube_customresource_kueue_workload_podset_pods":  {"namespace", "workload", "podset", "gpu_type"},
		"kube_customresource_kueue_workload_info":         {"namespace", "workload", "queue", "priority_class"},
		"kube_customresource_kueue_workload_priority":     {"namespace", "workload"},
		"kube_customresource_kueue_workload_created":      {"namespace", "workload"},
		"kube_customresource_kueue_workload_owner_info":   {"namespace", "workload", "owner_kind", "owner_name"},
		"kube_customresource_kueue_localqueue_info":       {"namespace", "local_queue", "cluster_queue"},
	} {
		for _, l := range want {
			if !slices.Contains(labels[name], l) {
				t.Errorf("%s has no %s label (%v)", name, l, labels[name])
			}
		}
	}
	// The simulator serves what this configuration makes of a Workload.
	sc, err := sim.ParseScenario([]byte(`start: 2026-12-01T08:00:00Z
duration: 1h
node: n
system: dgxh100
gpus: 1
priority_classes: {training: 1000}
kueue:
  - {cluster_queue: research, nominal_quota: 1, local_queues: [research/team-a]}
unscheduled:
  - {namespace: research, name: job-0, gpus: 2, queue: team-a, priority_class: training, suspended: true}
`), "k.yaml")
	if err != nil {
		t.Fatal(err)
	}
	n, err := sim.NewNode(sc, sim.NewVirtualClock(sc.Start.Add(time.Minute)))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(n.KubeState()); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	served := map[string][]string{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "kube_customresource_kueue_") || len(mf.GetMetric()) == 0 {
			continue
		}
		for _, l := range mf.GetMetric()[0].GetLabel() {
			served[mf.GetName()] = append(served[mf.GetName()], l.GetName())
		}
		slices.Sort(served[mf.GetName()])
	}
	if len(served) != len(labels) {
		t.Errorf("the simulator serves %v, the configuration makes %v", served, labels)
	}
	for name, ls := range labels {
		if !slices.Equal(served[name], ls) {
			t.Errorf("%s: the simulator's labels %v, the configuration's %v", name, served[name], ls)
		}
	}
}

// TestKSMResourceClaims: the kube-state-metrics configuration for
// ResourceClaims is well formed, and produces every metric and label the
// DRA demand rules read.
func TestKSMResourceClaims(t *testing.T) {
	t.Parallel()
	c, labels := ksmFile(t, "kube-state-metrics/resourceclaims.yaml")
	if len(c.Spec.Resources) != 1 {
		t.Fatalf("%d resources, want one", len(c.Spec.Resources))
	}
	r := c.Spec.Resources[0]
	if gvk := r.GroupVersionKind; gvk.Group != "resource.k8s.io" || gvk.Version != "v1" || gvk.Kind != "ResourceClaim" {
		t.Errorf("groupVersionKind %+v, want resource.k8s.io/v1 ResourceClaim", gvk)
	}
	for _, l := range []string{"namespace", "resourceclaim", "request", "device_class"} {
		if !slices.Contains(labels["kube_customresource_resourceclaim_request_devices"], l) {
			t.Errorf("kube_customresource_resourceclaim_request_devices has no %s label (%s)", l, strings.Join(labels["kube_customresource_resourceclaim_request_devices"], ", "))
		}
	}
	for _, l := range []string{"namespace", "resourceclaim"} {
		if !slices.Contains(labels["kube_customresource_resourceclaim_allocated_device_info"], l) {
			t.Errorf("kube_customresource_resourceclaim_allocated_device_info has no %s label", l)
		}
	}
	// The queue X-ray joins a claim to its pod through its owner.
	for _, l := range []string{"namespace", "resourceclaim", "owner_kind", "owner_name"} {
		if !slices.Contains(labels["kube_customresource_resourceclaim_owner_info"], l) {
			t.Errorf("kube_customresource_resourceclaim_owner_info has no %s label", l)
		}
	}
}
