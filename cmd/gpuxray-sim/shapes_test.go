//go:build e2e

package main

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpuxray/gpuxray/collector/sim"
)

// shapesScenario is one node with every kind of GPU a pod can hold: a
// time-sliced GPU with a steady pod and an idle one; another with an
// inference server answering a request every 2 s (200 ms of kernels) and
// an idle notebook; an exclusive GPU that stops working halfway; and a
// GPU in MIG mode whose one instance runs a decode server's kernels all
// the time on 3% of its SMs while the other idles. DRIVER is replaced by
// each shape of the driver.
const shapesScenario = `start: 2026-12-01T08:00:00Z
duration: 20m
node: shapes-node
system: dgxh100
gpus: 4
DRIVER
mig: {"gpu:3": [3g.40gb, 3g.40gb]}
pods:
  - {namespace: ml, name: steady, resource: nvidia.com/gpu.shared, devices: ["gpu:0::0"], util: [{at: 0s, value: 0.7}, {at: 8m, value: 0.45}]}
  - {namespace: ml, name: idle, resource: nvidia.com/gpu.shared, devices: ["gpu:0::1"], from: 2m}
  - {namespace: ml, name: bursty, resource: nvidia.com/gpu.shared, devices: ["gpu:1::0"], util: {duty: {period: 2s, busy: 200ms, value: 1}}}
  - {namespace: ml, name: notebook, resource: nvidia.com/gpu.shared, devices: ["gpu:1::1"], to: 15m}
  - {namespace: ml, name: train, devices: ["gpu:2"], util: [{at: 0s, value: 0.9}, {at: 10m, value: 0}]}
  - {namespace: ml, name: decode, devices: ["mig:3/0"], sm_fraction: 0.03, util: [{at: 0s, value: 1}]}
  - {namespace: ml, name: spare, devices: ["mig:3/1"]}
`

// TestReplayDriverShapes replays one node under each shape a real driver
// may have (issue 26): per-process samples one per sample period or one
// per process per read (refreshed every 2 s or 3 s), sample stamps in Unix
// time or since boot, a ring that records idle periods or runs dry. Every
// pod's allocated, idle and active seconds are within 2% of its time of
// the truth (idle at NVML's resolution, Scenario.SampledTruth: a 200 ms
// burst keeps two 1/6 s periods busy), no time is a gap, and the shapes
// agree with each other as closely.
func TestReplayDriverShapes(t *testing.T) {
	skipLongUnderRace(t)
	t.Parallel()
	shapes := []struct{ name, driver string }{
		{"per-period", "driver: {process_samples: per-period}"},
		{"default", ""},
		{"per-read-3s-boot-dry", "driver: {process_refresh: 3s, sample_clock: boot, idle_samples: false}"},
		{"per-read-2s-dry", "driver: {idle_samples: false}"},
	}
	type counts struct{ allocated, idle, active float64 }
	got := make([]map[string]counts, len(shapes))
	var sc *sim.Scenario
	for i, sh := range shapes {
		src := strings.Replace(shapesScenario, "DRIVER", sh.driver, 1)
		path := filepath.Join(t.TempDir(), sh.name+".yaml")
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := sim.LoadScenario(path)
		if err != nil {
			t.Fatal(err)
		}
		sc = s
		code, out, errs := runCmd(t, "replay", path)
		if code != 0 {
			t.Fatalf("%s: replay exited %d: %s", sh.name, code, errs)
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		mfs, err := parser.TextToMetricFamilies(strings.NewReader(out))
		if err != nil {
			t.Fatal(err)
		}
		sum := func(metric, pod string) float64 {
			var v float64
			for _, m := range mfs[metric].GetMetric() {
				if label(m, "pod") == pod {
					v += m.GetCounter().GetValue()
				}
			}
			return v
		}
		got[i] = map[string]counts{}
		for _, p := range s.Pods {
			got[i][p.Name] = counts{
				sum("gpuxray_allocated_seconds_total", p.Name),
				sum("gpuxray_allocated_idle_seconds_total", p.Name),
				sum("gpuxray_allocated_active_seconds_total", p.Name),
			}
		}
		var gap float64
		for _, m := range mfs["gpuxray_device_sample_gap_seconds_total"].GetMetric() {
			gap += m.GetCounter().GetValue()
		}
		if gap != 0 {
			t.Errorf("%s: %.3f s of gap", sh.name, gap)
		}
		// The decode server's MIG instance is busy all the time (GPM's
		// GRAPHICS_UTIL) on 3% of its SMs (SM_UTIL, the SM activity gauge).
		decode := ""
		for _, row := range s.Truth(0.05) {
			if row.Pod == "decode" {
				decode = row.UUID
			}
		}
		gauge := func(metric string) float64 {
			for _, m := range mfs[metric].GetMetric() {
				if label(m, "uuid") == decode {
					return m.GetGauge().GetValue()
				}
			}
			return math.NaN()
		}
		if u, sm := gauge("gpuxray_device_utilization_ratio"), gauge("gpuxray_device_sm_active_ratio"); math.Abs(u-1) > 1e-9 || math.Abs(sm-0.03) > 1e-9 {
			t.Errorf("%s: the decode server's instance is %g busy and %g SM-active, want 1 and 0.03", sh.name, u, sm)
		}
	}
	exact := sc.Truth(0.05)
	for r, row := range sc.SampledTruth(0.05) {
		want := counts{row.AllocatedSeconds, row.IdleSeconds, exact[r].ActiveSeconds}
		tol := 0.02 * row.AllocatedSeconds
		for i, sh := range shapes {
			g := got[i][row.Pod]
			for _, c := range []struct {
				what      string
				got, want float64
			}{
				{"allocated", g.allocated, want.allocated},
				{"idle", g.idle, want.idle},
				{"active", g.active, want.active},
			} {
				if math.Abs(c.got-c.want) > tol {
					t.Errorf("%s: %s %s = %.2f s, truth %.2f s ± %.1f", sh.name, row.Pod, c.what, c.got, c.want, tol)
				}
			}
			if i > 0 {
				b := got[0][row.Pod]
				if math.Abs(g.idle-b.idle) > tol || math.Abs(g.active-b.active) > tol {
					t.Errorf("%s: %s idle %.2f s, active %.2f s; %s: %.2f s, %.2f s", sh.name, row.Pod, g.idle, g.active, shapes[0].name, b.idle, b.active)
				}
			}
		}
		t.Logf("%-9s truth idle %7.2f active %7.2f | %s", row.Pod, want.idle, want.active, func() string {
			var b strings.Builder
			for i, sh := range shapes {
				g := got[i][row.Pod]
				b.WriteString(sh.name + " " + strconv.FormatFloat(g.idle, 'f', 2, 64) + " " + strconv.FormatFloat(g.active, 'f', 2, 64) + "  ")
			}
			return b.String()
		}())
	}
}
