package main

import (
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpuxray/gpuxray/collector/sim"
)

// TestReplayAPIServerDown replays two dynamic-MIG DRA nodes whose API
// server is down. In dra-apiserver-down.yaml it is down while the driver
// makes a MIG device: NVIDIA's driver does not change its slices for that,
// so embed-0 is credited from its start and nothing is unattributed. In
// dra-apiserver-down-start.yaml it is down from the agent's start: the
// claims' devices' time until the slices are first listed is
// unattributed, no second of it is invented as unallocated or idle, the
// pods are credited from then on, and the DRA source says it was down.
func TestReplayAPIServerDown(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		path string
		// outage is how long each of the pods was held by an unknown
		// holder: the slices are listed again at 2m.
		outage float64
		pods   []string
	}{
		{"testdata/dra-apiserver-down.yaml", 0, []string{"embed-0"}},
		{"testdata/dra-apiserver-down-start.yaml", 120, []string{"finetune-0", "eval-0"}},
	} {
		t.Run(filepath.Base(tc.path), func(t *testing.T) {
			t.Parallel()
			code, out, errs := runCmd(t, "replay", tc.path)
			if code != 0 {
				t.Fatalf("replay exited %d: %s", code, errs)
			}
			parser := expfmt.NewTextParser(model.UTF8Validation)
			mfs, err := parser.TextToMetricFamilies(strings.NewReader(out))
			if err != nil {
				t.Fatal(err)
			}
			sc, err := sim.LoadScenario(tc.path)
			if err != nil {
				t.Fatal(err)
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
			for _, r := range sc.Truth(0.05) {
				if !slices.Contains(tc.pods, r.Pod) {
					continue
				}
				onDevice := func(m *dto.Metric) bool { return label(m, "uuid") == r.UUID }
				for _, c := range []struct {
					what      string
					got, want float64
				}{
					{r.Pod + " allocated", sum("gpuxray_allocated_seconds_total", func(m *dto.Metric) bool { return label(m, "pod") == r.Pod }), r.AllocatedSeconds - tc.outage},
					{"its device unattributed", sum("gpuxray_device_unattributed_seconds_total", onDevice), tc.outage},
					{"its device allocated", sum("gpuxray_device_allocated_seconds_total", onDevice), r.AllocatedSeconds - tc.outage},
				} {
					if math.Abs(c.got-c.want) > 0.01*r.AllocatedSeconds {
						t.Errorf("%s = %.1f s, want %.1f ± 1%%", c.what, c.got, c.want)
					}
				}
				// Never invented: the device was held all the pod's life.
				if v := sum("gpuxray_device_unallocated_seconds_total", onDevice); v > 2 {
					t.Errorf("%s's device counted %.1f s unallocated while held", r.Pod, v)
				}
			}
			if v := sum("gpuxray_source_errors_total", func(m *dto.Metric) bool { return label(m, "source") == "dra" && label(m, "reason") == "unavailable" }); v == 0 {
				t.Error("no DRA source error counted while the API server was down")
			}
			if v := sum("gpuxray_source_up", func(m *dto.Metric) bool { return label(m, "source") == "dra" }); v != 1 {
				t.Errorf("gpuxray_source_up{source=\"dra\"} = %g at the end, want 1", v)
			}
		})
	}
}
