// Package prometheus holds gpuxray's Prometheus rules: gpuxray-rules.yaml, a
// plain rule file and the one source; gpuxray-prometheusrule.yaml, the same
// rules as a PrometheusRule for the Prometheus Operator; and
// gpuxray-vmrule.yaml, as a VMRule for the VictoriaMetrics operator. Both
// are generated from it by `go generate ./deploy/prometheus` (which runs the
// tests below with -update). The tests check the rules with promtool and
// vmalert and fail when a generated file is out of date.
package prometheus

import (
	_ "embed"
	"fmt"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

//go:generate go test -run TestPrometheusRuleUpToDate|TestVMRuleUpToDate -update .

// Paths of the rule files, relative to this directory.
const (
	RulesFile          = "gpuxray-rules.yaml"
	PrometheusRuleFile = "gpuxray-prometheusrule.yaml"
	VMRuleFile         = "gpuxray-vmrule.yaml"
)

// Rules is the content of gpuxray-rules.yaml.
//
//go:embed gpuxray-rules.yaml
var Rules []byte

// RuleFile is a Prometheus rule file, as far as gpuxray's rules use it.
type RuleFile struct {
	Groups []RuleGroup `yaml:"groups"`
}

// RuleGroup is a group of rules evaluated together.
type RuleGroup struct {
	Name     string `yaml:"name"`
	Interval string `yaml:"interval,omitempty"`
	Rules    []Rule `yaml:"rules"`
}

// Rule is a recording rule (Record set) or an alerting rule (Alert set).
type Rule struct {
	Record      string            `yaml:"record,omitempty"`
	Alert       string            `yaml:"alert,omitempty"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for,omitempty"`
	Labels      map[string]string `yaml:"labels,omitempty"`
	Annotations map[string]string `yaml:"annotations,omitempty"`
}

// Parse decodes a rule file, refusing unknown keys.
func Parse(b []byte) (*RuleFile, error) {
	var f RuleFile
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("rule file: %w", err)
	}
	return &f, nil
}

// Inlined returns every recording rule's expression, by the name it
// records, with the recorded series it reads replaced by their own
// expressions: an engine that has not evaluated the rules (a fresh
// Prometheus over backfilled series, another engine) answers them all from
// the raw series.
func (f *RuleFile) Inlined() map[string]string {
	out := map[string]string{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				out[r.Record] = strings.TrimSpace(r.Expr)
			}
		}
	}
	for changed := true; changed; {
		changed = false
		for name, e := range out {
			for other, oe := range out {
				re := regexp.MustCompile(`(^|[^a-zA-Z0-9_:])` + regexp.QuoteMeta(other) + `($|[^a-zA-Z0-9_:])`)
				if other != name && re.MatchString(e) {
					// $ in oe (label_replace's "$1") is the expression's, not a group.
					e = re.ReplaceAllString(e, "${1}("+strings.ReplaceAll(oe, "$", "$$")+")${2}")
					changed = true
				}
			}
			out[name] = e
		}
	}
	return out
}

// PrometheusRule renders a rule file as a PrometheusRule
// (monitoring.coreos.com/v1) whose spec is the file itself: the groups are
// copied line by line, comments included, so the two cannot differ.
func PrometheusRule(rules []byte) []byte {
	return ruleObject(`# Code generated from gpuxray-rules.yaml by "go generate ./deploy/prometheus"; DO NOT EDIT.
#
# gpuxray's Prometheus rules for the Prometheus Operator. Add the labels your
# Prometheus' ruleSelector expects (kustomize, or the Helm chart, does).
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
`, rules)
}

// VMRule renders a rule file as a VMRule
// (operator.victoriametrics.com/v1beta1), whose spec is the file itself, as
// PrometheusRule does: vmalert evaluates the same groups.
func VMRule(rules []byte) []byte {
	return ruleObject(`# Code generated from gpuxray-rules.yaml by "go generate ./deploy/prometheus"; DO NOT EDIT.
#
# gpuxray's rules for the VictoriaMetrics operator, evaluated by vmalert.
# Add the labels your VMAlert's ruleSelector expects (kustomize, or the Helm
# chart, does).
apiVersion: operator.victoriametrics.com/v1beta1
kind: VMRule
`, rules)
}

// ruleObject is head, then the metadata and a spec holding the rule file's
// groups, copied line by line with their comments.
func ruleObject(head string, rules []byte) []byte {
	var b strings.Builder
	b.WriteString(head)
	b.WriteString(`metadata:
  name: gpuxray
  labels:
    app.kubernetes.io/name: gpuxray
    app.kubernetes.io/component: rules
spec:
`)
	lines := strings.Split(strings.TrimRight(string(rules), "\n"), "\n")
	// The source's header comment speaks of the plain file; the spec starts
	// at its first line of YAML.
	start := 0
	for start < len(lines) && (strings.HasPrefix(lines[start], "#") || strings.TrimSpace(lines[start]) == "") {
		start++
	}
	for _, l := range lines[start:] {
		if l != "" {
			b.WriteString("  ")
		}
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return []byte(b.String())
}
