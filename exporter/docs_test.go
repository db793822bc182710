package exporter

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestMetricsDocumented checks docs/metrics.md and README's metrics table
// against the exporter's descriptors: every metric has a row in both, the
// page names each label the common sets do not explain, and neither
// documents a gpuxray metric the exporter does not export.
func TestMetricsDocumented(t *testing.T) {
	d := newDescs(nil)
	descRe := regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)
	exported := map[string][]string{}
	for _, desc := range append(d.all(), priorityClassValue) {
		m := descRe.FindStringSubmatch(desc.String())
		if m == nil {
			t.Fatalf("cannot read descriptor %s", desc)
		}
		var labels []string
		if m[2] != "" {
			labels = strings.Split(m[2], ",")
		}
		exported[m[1]] = labels
	}
	// Labels the page explains once, above its table.
	common := append(slices.Clone(allocBaseLabels), "window")

	rows := func(file string) map[string]string {
		b, err := os.ReadFile("../" + file)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		nameRe := regexp.MustCompile("`(gpuxray_[a-z_]+)(?:\\{[a-z,]+\\})?`")
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(line, "| `gpuxray_") {
				continue
			}
			cells := strings.SplitN(line, "|", 3)
			for _, m := range nameRe.FindAllStringSubmatch(cells[1], -1) {
				out[m[1]] = line
			}
		}
		if len(out) == 0 {
			t.Fatalf("%s has no metrics table", file)
		}
		return out
	}
	page, readme := rows("docs/metrics.md"), rows("README.md")
	for name, labels := range exported {
		row, ok := page[name]
		if !ok {
			t.Errorf("docs/metrics.md has no row for %s", name)
		}
		if _, ok := readme[name]; !ok {
			t.Errorf("README's metrics table lacks %s", name)
		}
		for _, l := range labels {
			if ok && !slices.Contains(common, l) && !strings.Contains(row, "`"+l+"`") && !regexp.MustCompile(`[{,]`+l+`[,}]`).MatchString(row) {
				t.Errorf("docs/metrics.md's row for %s does not name its label %s", name, l)
			}
		}
	}
	for _, doc := range []struct {
		file string
		rows map[string]string
	}{{"docs/metrics.md", page}, {"README.md", readme}} {
		for name := range doc.rows {
			if _, ok := exported[name]; !ok {
				t.Errorf("%s documents %s, which the exporter does not export", doc.file, name)
			}
		}
	}
}
