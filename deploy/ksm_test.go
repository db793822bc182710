package deploy

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
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

// TestKSMResourceClaims: the kube-state-metrics configuration for
// ResourceClaims is well formed, and produces every metric and label the
// DRA demand rules read.
func TestKSMResourceClaims(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("kube-state-metrics/resourceclaims.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c ksmConfig
	if err := yaml.UnmarshalStrict(b, &c); err != nil {
		t.Fatalf("resourceclaims.yaml: %v", err)
	}
	if c.Kind != "CustomResourceStateMetrics" || len(c.Spec.Resources) != 1 {
		t.Fatalf("kind %q with %d resources, want CustomResourceStateMetrics with one", c.Kind, len(c.Spec.Resources))
	}
	r := c.Spec.Resources[0]
	if gvk := r.GroupVersionKind; gvk.Group != "resource.k8s.io" || gvk.Version != "v1" || gvk.Kind != "ResourceClaim" {
		t.Errorf("groupVersionKind %+v, want resource.k8s.io/v1 ResourceClaim", gvk)
	}
	// Each metric's labels: the resource's and its own.
	labels := map[string][]string{}
	for _, m := range r.Metrics {
		each := m.Each.Gauge
		if m.Each.Type == "Info" {
			each = m.Each.Info
		}
		if each == nil || m.Help == "" || (m.Each.Type != "Gauge" && m.Each.Type != "Info") {
			t.Errorf("metric %s: type %q without its settings or help", m.Name, m.Each.Type)
			continue
		}
		name := "kube_customresource_" + m.Name
		for l := range r.LabelsFromPath {
			labels[name] = append(labels[name], l)
		}
		for l := range each.LabelsFromPath {
			labels[name] = append(labels[name], l)
		}
	}

	rules, err := os.ReadFile("prometheus/gpuxray-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	used := regexp.MustCompile(`kube_customresource_[a-z_]+`).FindAllString(string(rules), -1)
	if len(used) == 0 {
		t.Fatal("the rules read no kube_customresource_ metric")
	}
	for _, name := range used {
		if labels[name] == nil {
			t.Errorf("the rules read %s, which the configuration does not produce", name)
		}
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
