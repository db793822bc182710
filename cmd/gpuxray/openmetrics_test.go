//go:build e2e && !nosim

package main

import (
	"bufio"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// TestReplayOpenMetrics replays a scenario as OpenMetrics and checks what
// promtool's backfill needs: one block per family (never interleaved), each
// series in time order, a scrape at the start, every interval and at the
// end, timestamps in seconds, and last values equal to the text output.
func TestReplayOpenMetrics(t *testing.T) {
	t.Parallel()
	const path = "../../test/scenarios/piecewise.yaml" // one hour from 08:00 UTC
	code, om, errs := runCmd(t, "replay", "--format=openmetrics", "--scrape.interval=5m", path)
	if code != 0 {
		t.Fatalf("replay exited %d: %s", code, errs)
	}
	_, text, _ := runCmd(t, "replay", path)
	p := expfmt.NewTextParser(model.UTF8Validation)
	final, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(om, "\n# EOF\n") {
		t.Fatalf("output does not end with # EOF: ...%q", om[max(0, len(om)-80):])
	}
	start := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC).Unix()
	typed := map[string]string{}
	lastFamily := ""
	type point struct {
		ts float64
		v  float64
	}
	series := map[string][]point{}
	sc := bufio.NewScanner(strings.NewReader(om))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			if _, dup := typed[f[2]]; dup {
				t.Fatalf("family %s appears twice: families must not be interleaved", f[2])
			}
			typed[f[2]], lastFamily = f[3], f[2]
			continue
		}
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, '}')
		name := line[:strings.IndexByte(line, '{')]
		if want := lastFamily; name != want && !(typed[want] == "counter" && name == want+"_total") {
			t.Fatalf("sample %s outside its family (current family %s)", name, want)
		}
		f := strings.Fields(line[i+1:])
		if len(f) != 2 {
			t.Fatalf("want a value and a timestamp: %q", line)
		}
		v, err1 := strconv.ParseFloat(f[0], 64)
		ts, err2 := strconv.ParseFloat(f[1], 64)
		if err1 != nil || err2 != nil {
			t.Fatalf("bad sample %q", line)
		}
		key := line[:i+1]
		if p := series[key]; len(p) > 0 && ts <= p[len(p)-1].ts {
			t.Fatalf("%s: timestamp %v after %v", key, ts, p[len(p)-1].ts)
		}
		series[key] = append(series[key], point{ts, v})
	}
	if typed["gpuxray_allocated_seconds"] != "counter" || typed["gpuxray_source_up"] != "gauge" {
		t.Errorf("families typed %v", typed)
	}
	// A device counter is scraped at 08:00, every 5 minutes, and at 09:00.
	key := ""
	for k := range series {
		if strings.HasPrefix(k, `gpuxray_device_observed_seconds_total{gpu="0",`) && strings.Contains(k, `window="offpeak"`) {
			key = k
		}
	}
	pts := series[key]
	if len(pts) != 13 || pts[0].ts != float64(start) || pts[12].ts != float64(start+3600) || pts[1].ts != float64(start+300) {
		t.Fatalf("%s has %d scrapes %v, want 13 from %d every 300s", key, len(pts), pts, start)
	}
	if !strings.Contains(key, `instance="test-node",job="gpuxray"`) {
		t.Errorf("%s lacks the scrape's target labels", key)
	}
	// The last scrape is the text format's final exposition.
	checked := 0
	for _, mf := range final {
		for _, m := range mf.GetMetric() {
			var b strings.Builder
			b.WriteString(mf.GetName() + "{")
			labels := []string{}
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+strconv.Quote(l.GetValue()))
			}
			labels = append(labels, `instance="test-node"`, `job="gpuxray"`)
			slices.Sort(labels)
			b.WriteString(strings.Join(labels, ",") + "}")
			p := series[b.String()]
			if len(p) == 0 {
				t.Errorf("%s missing from the OpenMetrics output", b.String())
				continue
			}
			want := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			if got := p[len(p)-1].v; math.Abs(got-want) > 1e-9*math.Max(1, want) {
				t.Errorf("%s last value %v, want %v", b.String(), got, want)
			}
			checked++
		}
	}
	if checked < 50 {
		t.Errorf("checked %d series, want every series of the final exposition", checked)
	}
}
