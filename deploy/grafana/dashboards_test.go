package grafana

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuxray/gpuxray/internal/testtool"
)

// need is testtool.Need: a missing tool skips locally and fails in CI.
var need = testtool.Need

// TestVars are values for every template variable of the dashboards, as
// Grafana would substitute them with "All" selected.
var TestVars = map[string]string{
	"cluster": ".*", "namespace": ".*", "window": ".*", "instance": ".*", "gpu": ".*",
	"utc_offset": "0", "__range": "1h", "__interval": "1m", "__interval_ms": "60000", "__rate_interval": "1m",
}

// TestDashboards: every dashboard parses, takes its data source from the
// ${datasource} variable everywhere (no UID written in), has a stable UID and
// a title, and every panel has a query.
func TestDashboards(t *testing.T) {
	t.Parallel()
	ds, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) < 2 {
		t.Fatalf("%d dashboards, want the fleet view and the node drill-down", len(ds))
	}
	for name, d := range ds {
		t.Run(name, func(t *testing.T) {
			if d.UID == "" || !strings.HasPrefix(d.UID, "gpuxray-") || d.Title == "" {
				t.Errorf("uid %q title %q, want a gpuxray-* uid and a title", d.UID, d.Title)
			}
			hasDS := false
			for _, v := range d.Templating.List {
				if v.Name == "datasource" && v.Type == "datasource" && string(v.Query) == `"prometheus"` {
					hasDS = true
				}
				if v.Type == "query" {
					checkDatasource(t, "variable "+v.Name, v.Datasource)
				}
			}
			if !hasDS {
				t.Error("no datasource variable of type datasource for prometheus")
			}
			if len(d.AllPanels()) < 5 {
				t.Errorf("%d panels", len(d.AllPanels()))
			}
			for _, p := range d.AllPanels() {
				if p.Type == "row" {
					continue
				}
				checkDatasource(t, "panel "+p.Title, p.Datasource)
				if len(p.Targets) == 0 || p.Title == "" {
					t.Errorf("panel %d %q has no title or no query", p.ID, p.Title)
				}
				for _, tg := range p.Targets {
					checkDatasource(t, fmt.Sprintf("panel %s query %s", p.Title, tg.RefID), tg.Datasource)
					if strings.TrimSpace(tg.Expr) == "" {
						t.Errorf("panel %q query %s is empty", p.Title, tg.RefID)
					}
				}
			}
			// No data source UID anywhere but the variable.
			b, err := Files.ReadFile(name)
			if err != nil {
				t.Fatal(err)
			}
			var raw any
			if err := json.Unmarshal(b, &raw); err != nil {
				t.Fatal(err)
			}
			walk(raw, func(key string, v any) {
				if key == "uid" {
					if s, _ := v.(string); s != "${datasource}" && s != d.UID {
						t.Errorf("hard-coded uid %q", s)
					}
				}
			})
		})
	}
}

func checkDatasource(t *testing.T, what string, raw json.RawMessage) {
	t.Helper()
	var ds struct{ Type, UID string }
	if err := json.Unmarshal(raw, &ds); err != nil || ds.Type != "prometheus" || ds.UID != "${datasource}" {
		t.Errorf("%s: datasource %s, want {\"type\":\"prometheus\",\"uid\":\"${datasource}\"}", what, raw)
	}
}

func walk(v any, f func(key string, v any)) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			f(k, e)
			walk(e, f)
		}
	case []any:
		for _, e := range x {
			walk(e, f)
		}
	}
}

func TestSubstitute(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"cluster": ".*", "__range": "1h"}
	got, err := Substitute(`sum(x{cluster=~"$cluster"}[$__range]) + y{cluster=~"${cluster}"}`, vars)
	if want := `sum(x{cluster=~".*"}[1h]) + y{cluster=~".*"}`; err != nil || got != want {
		t.Errorf("Substitute = %q, %v; want %q", got, err, want)
	}
	if _, err := Substitute(`x{gpu=~"$gpu"}`, vars); err == nil || !strings.Contains(err.Error(), "no value for gpu") {
		t.Errorf("a missing variable: %v", err)
	}
}

// TestQueriesParse: every panel query, its variables substituted, is valid
// PromQL, as promtool checks it in a rule file.
func TestQueriesParse(t *testing.T) {
	t.Parallel()
	qs, err := Queries(TestVars)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) < 20 {
		t.Fatalf("%d queries", len(qs))
	}
	promtool := need(t, "promtool")
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboards\n    rules:\n")
	for i, q := range qs {
		expr, _ := json.Marshal(q.Expr)
		fmt.Fprintf(&b, "      - record: dashboard_query_%d\n        expr: %s\n", i, expr)
	}
	f := filepath.Join(t.TempDir(), "queries.yaml")
	if err := os.WriteFile(f, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", f).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules on the dashboards' queries: %v\n%s", err, out)
	}
}
