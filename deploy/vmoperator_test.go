package deploy

import (
	"reflect"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	promrules "github.com/gpuxray/gpuxray/deploy/prometheus"
)

// The VictoriaMetrics operator's objects (operator.victoriametrics.com/v1beta1)
// as far as gpuxray's manifests use them, with the operator's field names
// (api/operator/v1beta1 of github.com/VictoriaMetrics/operator): a strict
// decode refuses a field the operator does not have. Its Go module brings
// VictoriaMetrics itself along, too much for a test of field names.

// vmRelabelConfig is the operator's RelabelConfig (camelCase spelling).
type vmRelabelConfig struct {
	SourceLabels []string `json:"sourceLabels,omitempty"`
	Separator    string   `json:"separator,omitempty"`
	TargetLabel  string   `json:"targetLabel,omitempty"`
	Regex        string   `json:"regex,omitempty"`
	Modulus      uint64   `json:"modulus,omitempty"`
	Replacement  string   `json:"replacement,omitempty"`
	Action       string   `json:"action,omitempty"`
}

// vmEndpoint is the operator's Endpoint and PodMetricsEndpoint: the port,
// EndpointScrapeParams, EndpointAuth and EndpointRelabelings.
type vmEndpoint struct {
	Port                 string            `json:"port,omitempty"`
	Path                 string            `json:"path,omitempty"`
	Scheme               string            `json:"scheme,omitempty"`
	Interval             string            `json:"interval,omitempty"`
	ScrapeTimeout        string            `json:"scrapeTimeout,omitempty"`
	TLSConfig            map[string]any    `json:"tlsConfig,omitempty"`
	BasicAuth            map[string]any    `json:"basicAuth,omitempty"`
	RelabelConfigs       []vmRelabelConfig `json:"relabelConfigs,omitempty"`
	MetricRelabelConfigs []vmRelabelConfig `json:"metricRelabelConfigs,omitempty"`
}

type vmServiceScrape struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		Selector  metav1.LabelSelector `json:"selector,omitempty"`
		Endpoints []vmEndpoint         `json:"endpoints"`
	} `json:"spec"`
}

type vmPodScrape struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		Selector            metav1.LabelSelector `json:"selector,omitempty"`
		PodMetricsEndpoints []vmEndpoint         `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

type vmRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		Groups []struct {
			Name     string `json:"name"`
			Interval string `json:"interval,omitempty"`
			Rules    []struct {
				Record      string            `json:"record,omitempty"`
				Alert       string            `json:"alert,omitempty"`
				Expr        string            `json:"expr"`
				For         string            `json:"for,omitempty"`
				Labels      map[string]string `json:"labels,omitempty"`
				Annotations map[string]string `json:"annotations,omitempty"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

// ruleFile is the VMRule's spec as a rule file.
func (r *vmRule) ruleFile() promrules.RuleFile {
	var f promrules.RuleFile
	for _, g := range r.Spec.Groups {
		rg := promrules.RuleGroup{Name: g.Name, Interval: g.Interval}
		for _, x := range g.Rules {
			rg.Rules = append(rg.Rules, promrules.Rule{Record: x.Record, Alert: x.Alert, Expr: x.Expr, For: x.For, Labels: x.Labels, Annotations: x.Annotations})
		}
		f.Groups = append(f.Groups, rg)
	}
	return f
}

func init() {
	kinds["operator.victoriametrics.com/v1beta1/VMServiceScrape"] = func() any { return &vmServiceScrape{} }
	kinds["operator.victoriametrics.com/v1beta1/VMPodScrape"] = func() any { return &vmPodScrape{} }
	kinds["operator.victoriametrics.com/v1beta1/VMRule"] = func() any { return &vmRule{} }
}

// checkVMObjects: the VictoriaMetrics operator's objects, when wanted,
// scrape the agents' metrics port with the node relabelled.
func checkVMObjects(t *testing.T, m *manifest, want expect, svcLabels, podLabels map[string]string) {
	t.Helper()
	hasNode := func(rc []vmRelabelConfig) bool {
		return slices.ContainsFunc(rc, func(r vmRelabelConfig) bool {
			return slices.Equal(r.SourceLabels, []string{"__meta_kubernetes_pod_node_name"}) && r.TargetLabel == "node"
		})
	}
	ss := all[vmServiceScrape](m)
	if (len(ss) == 1) != want.vmServiceScrape || len(ss) > 1 {
		t.Errorf("%d VMServiceScrapes, want %v", len(ss), want.vmServiceScrape)
	}
	for _, s := range ss {
		if !selects(s.Spec.Selector.MatchLabels, svcLabels) || len(s.Spec.Endpoints) != 1 || s.Spec.Endpoints[0].Port != "metrics" || !hasNode(s.Spec.Endpoints[0].RelabelConfigs) {
			t.Errorf("VMServiceScrape selector %v, endpoints %+v: want the Service %v, port metrics, node relabelled", s.Spec.Selector.MatchLabels, s.Spec.Endpoints, svcLabels)
		}
	}
	ps := all[vmPodScrape](m)
	if (len(ps) == 1) != want.vmPodScrape || len(ps) > 1 {
		t.Errorf("%d VMPodScrapes, want %v", len(ps), want.vmPodScrape)
	}
	for _, p := range ps {
		if !selects(p.Spec.Selector.MatchLabels, podLabels) || len(p.Spec.PodMetricsEndpoints) != 1 || p.Spec.PodMetricsEndpoints[0].Port != "metrics" || !hasNode(p.Spec.PodMetricsEndpoints[0].RelabelConfigs) {
			t.Errorf("VMPodScrape selector %v, endpoints %+v: want the agents %v, port metrics, node relabelled", p.Spec.Selector.MatchLabels, p.Spec.PodMetricsEndpoints, podLabels)
		}
	}
	rs := all[vmRule](m)
	if (len(rs) == 1) != want.vmRule || len(rs) > 1 {
		t.Errorf("%d VMRules, want %v", len(rs), want.vmRule)
	}
	for _, r := range rs {
		if len(r.Spec.Groups) == 0 {
			t.Error("the VMRule has no group")
		}
	}
}

// checkVMRuleIsTheRuleFile: the VMRule holds gpuxray-rules.yaml's groups.
func checkVMRuleIsTheRuleFile(t *testing.T, m *manifest) {
	t.Helper()
	src, err := promrules.Parse(promrules.Rules)
	if err != nil {
		t.Fatal(err)
	}
	if got := one[vmRule](t, m).ruleFile(); !reflect.DeepEqual(got, *src) {
		t.Errorf("the VMRule's groups differ from %s", promrules.RulesFile)
	}
}
