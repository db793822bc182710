//go:build e2e && !nosim

package main

import (
	"math"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpuxray/gpuxray/collector/sim"
)

// TestReplayAPIServerDown replays a dynamic-MIG DRA node whose API server
// is down while the driver makes a MIG device: the device's time until the
// agent can read its slice again is unattributed, no second of it is
// invented as unallocated or idle, embed-0 is credited from then on, and
// the DRA source says it was down.
func TestReplayAPIServerDown(t *testing.T) {
	t.Parallel()
	const path = "testdata/dra-apiserver-down.yaml"
	code, out, errs := runCmd(t, "replay", path)
	if code != 0 {
		t.Fatalf("replay exited %d: %s", code, errs)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := sim.LoadScenario(path)
	if err != nil {
		t.Fatal(err)
	}
	var embed sim.TruthRow
	for _, r := range sc.Truth(0.05) {
		if r.Pod == "embed-0" {
			embed = r
		}
	}
	sum := func(metric string, match func(*dto.Metric) bool) float64 {
		var v float64
		for _, m := range mfs[metric].GetMetric() {
			if match(m) {
				v += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
		return v
	}
	onDevice := func(m *dto.Metric) bool { return label(m, "uuid") == embed.UUID }
	const outage = 60.0 // the device exists from 5m; the slices are read again at 6m
	for _, c := range []struct {
		what      string
		got, want float64
	}{
		{"embed-0 allocated", sum("gpuxray_allocated_seconds_total", func(m *dto.Metric) bool { return label(m, "pod") == "embed-0" }), embed.AllocatedSeconds - outage},
		{"its device unattributed", sum("gpuxray_device_unattributed_seconds_total", onDevice), outage},
		{"its device allocated", sum("gpuxray_device_allocated_seconds_total", onDevice), embed.AllocatedSeconds - outage},
	} {
		if math.Abs(c.got-c.want) > 0.01*embed.AllocatedSeconds {
			t.Errorf("%s = %.1f s, want %.1f ± 1%%", c.what, c.got, c.want)
		}
	}
	// Never invented: its device was held all its life.
	if v := sum("gpuxray_device_unallocated_seconds_total", onDevice); v > 2 {
		t.Errorf("embed-0's device counted %.1f s unallocated while its claim was unresolved", v)
	}
	if v := sum("gpuxray_source_errors_total", func(m *dto.Metric) bool { return label(m, "source") == "dra" }); v == 0 {
		t.Error("no DRA source error counted while the API server was down")
	}
	if v := sum("gpuxray_source_up", func(m *dto.Metric) bool { return label(m, "source") == "dra" }); v != 1 {
		t.Errorf("gpuxray_source_up{source=\"dra\"} = %g at the end, want 1", v)
	}
}
