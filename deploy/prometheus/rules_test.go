package prometheus

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gpuxray/gpuxray/internal/testtool"

	"go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "rewrite "+PrometheusRuleFile+" from "+RulesFile)

// need is testtool.Need: a missing tool skips locally and fails in CI.
var need = testtool.Need

func TestPrometheusRuleUpToDate(t *testing.T) {
	want := PrometheusRule(Rules)
	if *update {
		if err := os.WriteFile(PrometheusRuleFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(PrometheusRuleFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is out of date with %s: run go generate ./deploy/prometheus", PrometheusRuleFile, RulesFile)
	}
}

// TestPrometheusRuleSpec: the PrometheusRule is a monitoring.coreos.com/v1
// object whose spec holds exactly the rule file's groups.
func TestPrometheusRuleSpec(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(PrometheusRuleFile)
	if err != nil {
		t.Fatal(err)
	}
	var obj struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Metadata   struct {
			Name string `yaml:"name"`
		} `yaml:"metadata"`
		Spec RuleFile `yaml:"spec"`
	}
	if err := yaml.Unmarshal(b, &obj); err != nil {
		t.Fatal(err)
	}
	if obj.APIVersion != "monitoring.coreos.com/v1" || obj.Kind != "PrometheusRule" || obj.Metadata.Name != "gpuxray" {
		t.Errorf("got %s %s %q, want monitoring.coreos.com/v1 PrometheusRule \"gpuxray\"", obj.APIVersion, obj.Kind, obj.Metadata.Name)
	}
	src, err := Parse(Rules)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(obj.Spec, *src) {
		t.Errorf("the PrometheusRule's spec differs from %s", RulesFile)
	}
}

var (
	recordName = regexp.MustCompile(`^[a-z_]+:[a-z0-9_]+:[a-z0-9_]+$`)
	alertName  = regexp.MustCompile(`^[A-Z][A-Za-z]+$`)
)

// TestRuleConventions: recording rules are named level:metric:operations and
// aggregate by the labels their level names; alerts carry a severity, a
// summary and a description; every rule has promtool tests, every alert
// both firing and not firing.
func TestRuleConventions(t *testing.T) {
	t.Parallel()
	f, err := Parse(Rules)
	if err != nil {
		t.Fatal(err)
	}
	tested := promtoolTests(t)
	var records, alerts int
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			switch {
			case r.Record != "":
				records++
				if !recordName.MatchString(r.Record) {
					t.Errorf("recording rule %s is not named level:metric:operations", r.Record)
				}
				level := strings.Split(r.Record, ":")[0]
				for _, l := range strings.Split(level, "_") {
					if l == "workload" || l == "model" || l == "namespace" || l == "window" {
						if !regexp.MustCompile(`\b` + l + `\b`).MatchString(r.Expr) {
							t.Errorf("%s: the level names %s but the expression does not keep it", r.Record, l)
						}
					}
				}
				if !tested.exprs[r.Record] {
					t.Errorf("recording rule %s has no promql_expr_test", r.Record)
				}
			case r.Alert != "":
				alerts++
				if !alertName.MatchString(r.Alert) {
					t.Errorf("alert %s is not CamelCase", r.Alert)
				}
				if s := r.Labels["severity"]; !slices.Contains([]string{"info", "warning", "critical"}, s) {
					t.Errorf("alert %s has severity %q, want info, warning or critical", r.Alert, s)
				}
				for _, a := range []string{"summary", "description"} {
					if strings.TrimSpace(r.Annotations[a]) == "" {
						t.Errorf("alert %s has no %s", r.Alert, a)
					}
				}
				if !tested.fires[r.Alert] || !tested.quiet[r.Alert] {
					t.Errorf("alert %s: promtool tests fire=%v quiet=%v, want both", r.Alert, tested.fires[r.Alert], tested.quiet[r.Alert])
				}
			default:
				t.Errorf("group %s has a rule that neither records nor alerts: %q", g.Name, r.Expr)
			}
		}
	}
	if records < 10 || alerts != 7 {
		t.Errorf("%d recording rules and %d alerts, want at least 10 and the 7 alerts docs/promql.md describes", records, alerts)
	}
}

type testedRules struct {
	exprs, fires, quiet map[string]bool
}

// promtoolTests reads tests/*.yaml: which expressions are checked, and which
// alerts are expected to fire and not to fire.
func promtoolTests(t *testing.T) testedRules {
	t.Helper()
	files, err := filepath.Glob("tests/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no promtool tests in tests/: %v", err)
	}
	out := testedRules{map[string]bool{}, map[string]bool{}, map[string]bool{}}
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var tf struct {
			Tests []struct {
				PromQL []struct {
					Expr string `yaml:"expr"`
				} `yaml:"promql_expr_test"`
				Alerts []struct {
					Name string `yaml:"alertname"`
					Exp  []any  `yaml:"exp_alerts"`
				} `yaml:"alert_rule_test"`
			} `yaml:"tests"`
		}
		if err := yaml.Unmarshal(b, &tf); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for _, tc := range tf.Tests {
			for _, p := range tc.PromQL {
				out.exprs[strings.TrimSpace(p.Expr)] = true
			}
			for _, a := range tc.Alerts {
				if len(a.Exp) > 0 {
					out.fires[a.Name] = true
				} else {
					out.quiet[a.Name] = true
				}
			}
		}
	}
	return out
}

func TestPromtoolCheckRules(t *testing.T) {
	t.Parallel()
	promtool := need(t, "promtool")
	// The PrometheusRule's spec is a rule file too.
	var obj struct {
		Spec yaml.Node `yaml:"spec"`
	}
	b, err := os.ReadFile(PrometheusRuleFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &obj); err != nil {
		t.Fatal(err)
	}
	spec, err := yaml.Marshal(&obj.Spec)
	if err != nil {
		t.Fatal(err)
	}
	specFile := filepath.Join(t.TempDir(), "spec.yaml")
	if err := os.WriteFile(specFile, spec, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Parse(Rules)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range f.Groups {
		n += len(g.Rules)
	}
	want := fmt.Sprintf("SUCCESS: %d rules found", n)
	for _, f := range []string{RulesFile, specFile} {
		out, err := exec.Command(promtool, "check", "rules", f).CombinedOutput()
		if err != nil || !strings.Contains(string(out), want) {
			t.Errorf("promtool check rules %s: %v\n%s", f, err, out)
		}
	}
}

func TestPromtoolTestRules(t *testing.T) {
	t.Parallel()
	promtool := need(t, "promtool")
	files, err := filepath.Glob("tests/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no promtool tests in tests/: %v", err)
	}
	out, err := exec.Command(promtool, append([]string{"test", "rules"}, files...)...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "SUCCESS") {
		t.Errorf("promtool test rules: %v\n%s", err, out)
	}
}

// TestRecipesParse: every PromQL block of docs/promql.md is valid PromQL, as
// promtool checks it in a rule file.
func TestRecipesParse(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/promql.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```promql\n(.*?)```").FindAllStringSubmatch(string(b), -1)
	if len(blocks) < 10 {
		t.Fatalf("%d PromQL recipes in docs/promql.md", len(blocks))
	}
	promtool := need(t, "promtool")
	f := &RuleFile{Groups: []RuleGroup{{Name: "recipes"}}}
	for i, m := range blocks {
		f.Groups[0].Rules = append(f.Groups[0].Rules, Rule{Record: fmt.Sprintf("recipe_%d", i), Expr: m[1]})
	}
	out, err := yaml.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "recipes.yaml")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	if res, err := exec.Command(promtool, "check", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules on docs/promql.md's recipes: %v\n%s", err, res)
	}
}

func TestVMRuleUpToDate(t *testing.T) {
	want := VMRule(Rules)
	if *update {
		if err := os.WriteFile(VMRuleFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(VMRuleFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is out of date with %s: run go generate ./deploy/prometheus", VMRuleFile, RulesFile)
	}
}

// vmRule is a VMRule (operator.victoriametrics.com/v1beta1) as far as
// gpuxray uses it, with the operator's field names: a strict decode refuses
// any other.
type vmRule struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Spec RuleFile `yaml:"spec"`
}

// TestVMRuleSpec: the VMRule's spec holds exactly the rule file's groups,
// and vmalert accepts them (-dryRun validates the rules with MetricsQL and
// their templates).
func TestVMRuleSpec(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(VMRuleFile)
	if err != nil {
		t.Fatal(err)
	}
	var obj vmRule
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&obj); err != nil {
		t.Fatal(err)
	}
	if obj.APIVersion != "operator.victoriametrics.com/v1beta1" || obj.Kind != "VMRule" || obj.Metadata.Name != "gpuxray" {
		t.Errorf("got %s %s %q, want operator.victoriametrics.com/v1beta1 VMRule \"gpuxray\"", obj.APIVersion, obj.Kind, obj.Metadata.Name)
	}
	src, err := Parse(Rules)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(obj.Spec, *src) {
		t.Errorf("the VMRule's spec differs from %s", RulesFile)
	}
	vmalert := need(t, "vmalert")
	spec, err := yaml.Marshal(obj.Spec)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "vmrule-spec.yaml")
	if err := os.WriteFile(f, spec, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(vmalert, "-dryRun", "-rule="+f, "-loggerLevel=ERROR").CombinedOutput(); err != nil {
		t.Errorf("vmalert -dryRun -rule=%s: %v\n%s", f, err, out)
	}
}

// TestInlined: the rules built on recorded series read the raw
// series once inlined, for an engine that has not evaluated the rules.
func TestInlined(t *testing.T) {
	t.Parallel()
	rules, err := Parse(Rules)
	if err != nil {
		t.Fatal(err)
	}
	exprs := rules.Inlined()
	for name, e := range exprs {
		for other := range exprs {
			if regexp.MustCompile(`(^|[^a-zA-Z0-9_:])` + regexp.QuoteMeta(other) + `($|[^a-zA-Z0-9_:])`).MatchString(e) {
				t.Errorf("%s still reads the recorded %s: %s", name, other, e)
			}
		}
	}
	if e := exprs["cluster:gpuxray_idle_gpus:rate5m"]; !strings.Contains(e, "rate(gpuxray_device_allocated_idle_seconds_total[5m])") {
		t.Errorf("cluster:gpuxray_idle_gpus:rate5m inlined: %s", e)
	}
	// label_replace's "$1" stays as it is.
	if e := exprs["priority_class:gpuxray_pending_gpus:sum"]; !strings.Contains(e, `"pod", "$1", "owner_name", "(.*)"`) {
		t.Errorf("priority_class:gpuxray_pending_gpus:sum inlined: %s", e)
	}
	if len(exprs) < 15 {
		t.Errorf("%d recording rules", len(exprs))
	}
}
