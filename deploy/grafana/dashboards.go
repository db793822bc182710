// Package grafana holds gpuxray's Grafana dashboards, importable as they are:
// the data source is the ${datasource} variable, never a fixed UID. Queries
// extracts every panel's PromQL with the template variables substituted, so
// tests can run them against a real Prometheus.
package grafana

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strings"
)

// Files holds the dashboards, one JSON file each.
//
//go:embed *.json
var Files embed.FS

// Dashboard is the part of a Grafana dashboard the tests read.
type Dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []Panel `json:"panels"`
	Templating struct {
		List []Variable `json:"list"`
	} `json:"templating"`
}

// Variable is a template variable.
type Variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Datasource json.RawMessage `json:"datasource"`
}

// Panel is a dashboard panel (rows may nest panels).
type Panel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource json.RawMessage `json:"datasource"`
	Targets    []Target        `json:"targets"`
	Panels     []Panel         `json:"panels"`
}

// Target is one query of a panel.
type Target struct {
	RefID      string          `json:"refId"`
	Expr       string          `json:"expr"`
	Instant    bool            `json:"instant"`
	Datasource json.RawMessage `json:"datasource"`
}

// Query is one panel query ready to run.
type Query struct {
	Dashboard, Panel, RefID string
	// Expr is the PromQL with every template variable substituted.
	Expr    string
	Instant bool
}

// Load parses every dashboard in Files.
func Load() (map[string]*Dashboard, error) {
	names, err := fs.Glob(Files, "*.json")
	if err != nil {
		return nil, err
	}
	out := map[string]*Dashboard{}
	for _, n := range names {
		b, err := Files.ReadFile(n)
		if err != nil {
			return nil, err
		}
		var d Dashboard
		if err := json.Unmarshal(b, &d); err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		out[n] = &d
	}
	return out, nil
}

// AllPanels returns the dashboard's panels, those inside rows included.
func (d *Dashboard) AllPanels() []Panel {
	var out []Panel
	var walk func([]Panel)
	walk = func(ps []Panel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// variableRef matches $name and ${name} (${name:format} too); $1 in a
// label_replace replacement is not a variable, for Grafana as here.
var variableRef = regexp.MustCompile(`\$\{([A-Za-z_]\w*)(?::\w+)?\}|\$([A-Za-z_]\w*)`)

// Substitute replaces $name and ${name} in expr with vars[name]; a variable
// missing from vars is an error, so no query runs half-substituted.
func Substitute(expr string, vars map[string]string) (string, error) {
	var missing []string
	out := variableRef.ReplaceAllStringFunc(expr, func(m string) string {
		sm := variableRef.FindStringSubmatch(m)
		name := sm[1] + sm[2]
		v, ok := vars[name]
		if !ok {
			missing = append(missing, name)
			return m
		}
		return v
	})
	if len(missing) > 0 {
		slices.Sort(missing)
		return "", fmt.Errorf("no value for %s in %q", strings.Join(slices.Compact(missing), ", "), expr)
	}
	return out, nil
}

// Queries returns every panel query of every dashboard, with vars
// substituted (Grafana's own, such as __range and __rate_interval, too).
func Queries(vars map[string]string) ([]Query, error) {
	ds, err := Load()
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(ds))
	for n := range ds {
		names = append(names, n)
	}
	slices.Sort(names)
	var out []Query
	for _, n := range names {
		for _, p := range ds[n].AllPanels() {
			for _, t := range p.Targets {
				expr, err := Substitute(t.Expr, vars)
				if err != nil {
					return nil, fmt.Errorf("%s: panel %q: %w", n, p.Title, err)
				}
				out = append(out, Query{Dashboard: n, Panel: p.Title, RefID: t.RefID, Expr: expr, Instant: t.Instant})
			}
		}
	}
	return out, nil
}
