package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/agent"
	"github.com/gpuxray/gpuxray/collector/nvml"
	"github.com/gpuxray/gpuxray/collector/sim"
	"github.com/gpuxray/gpuxray/internal/app"
)

// faultBase is the node every fault test plays: pod a holds gpu:0 busy at
// 0.6 throughout, pod b holds gpu:1 idle for 10 minutes then busy at 0.9
// for one.
// Every fault lies within [5m, 8m), where both ratios are constant.
const faultBase = `start: 2026-12-01T08:00:00Z
duration: 11m
node: faulty
system: dgxa100
gpus: 2
pods:
  - {namespace: ml, name: a, devices: ["gpu:0"], util: [{at: 0s, value: 0.6}]}
  - {namespace: ml, name: b, devices: ["gpu:1"], util: [{at: 0s, value: 0}, {at: 10m, value: 0.9}]}
faults:
`

// ring is how far back the simulated driver keeps samples: a read after a
// failure recovers this much of it.
const ring = sim.SampleBuffer * sim.SamplePeriod

type span struct{ from, to time.Duration }

func (s span) seconds() float64 { return max(s.to-s.from, 0).Seconds() }

// faultCase is one fault, what time it makes unobservable or unattributed
// on each GPU, and the series it must show while it lasts (at 6m30s).
type faultCase struct {
	name  string
	fault string
	// lost is time that no sample covers afterwards, per GPU: a gap.
	lost map[int]span
	// unattributed is observed time whose holder was unknown, per GPU.
	unattributed map[int]span
	// split is time an exclusive GPU was listed under a ghost pod as well:
	// the holders share it.
	split map[int]span
	// during are series values at 6m30s, "name{label=value,...}" → value;
	// errors are source_errors_total reasons (source/reason) that must
	// have counted by the end.
	during map[string]float64
	errors []string
	// mayErrors are reasons the fault may count but need not: a List in
	// flight while the kubelet restarts fails as the real one does.
	mayErrors []string
}

var faultCases = []faultCase{
	{
		name:   "nvml GPU_IS_LOST on samples",
		fault:  `{kind: nvml_error, gpu: "gpu:0", call: samples, error: GPU_IS_LOST, from: 5m, to: 8m}`,
		lost:   map[int]span{0: {5 * time.Minute, 8*time.Minute - ring}},
		during: map[string]float64{`gpuxray_device_up{gpu=0}`: 0, `gpuxray_device_up{gpu=1}`: 1, `gpuxray_source_up{source=nvml}`: 1},
		errors: []string{"nvml/gpu_lost"},
	},
	{
		name:   "nvml UNKNOWN on every call",
		fault:  `{kind: nvml_error, gpu: "gpu:0", error: UNKNOWN, from: 5m, to: 8m}`,
		lost:   map[int]span{0: {5 * time.Minute, 8*time.Minute - ring}},
		during: map[string]float64{`gpuxray_device_up{gpu=0}`: 0, `gpuxray_device_up{gpu=1}`: 1},
		errors: []string{"nvml/samples"},
	},
	{
		name:   "nvml TIMEOUT on samples",
		fault:  `{kind: nvml_error, gpu: "gpu:1", call: samples, error: TIMEOUT, from: 5m, to: 8m}`,
		lost:   map[int]span{1: {5 * time.Minute, 8*time.Minute - ring}},
		during: map[string]float64{`gpuxray_device_up{gpu=0}`: 1, `gpuxray_device_up{gpu=1}`: 0},
		errors: []string{"nvml/samples"},
	},
	{
		name:   "nvml NOT_SUPPORTED on samples, then supported again",
		fault:  `{kind: nvml_error, gpu: "gpu:0", call: samples, error: NOT_SUPPORTED, from: 5m, to: 8m}`,
		lost:   map[int]span{0: {5 * time.Minute, 8*time.Minute - ring}},
		during: map[string]float64{`gpuxray_device_up{gpu=0}`: 0},
		errors: []string{"nvml/samples"},
	},
	{
		name:   "nvml NO_PERMISSION on memory: gauge gone, counting goes on",
		fault:  `{kind: nvml_error, gpu: "gpu:0", call: memory, error: NO_PERMISSION, from: 5m, to: 8m}`,
		during: map[string]float64{`gpuxray_device_up{gpu=0}`: 1, `gpuxray_device_memory_used_bytes{gpu=0}`: -1},
		errors: []string{"nvml/memory"},
	},
	{
		name:   "nvml NO_PERMISSION on processes",
		fault:  `{kind: nvml_error, gpu: "gpu:1", call: processes, error: NO_PERMISSION, from: 5m, to: 8m}`,
		during: map[string]float64{`gpuxray_device_up{gpu=1}`: 1},
		errors: []string{"nvml/processes"},
	},
	{
		name:   "GPU falls off the bus and is back after a reset",
		fault:  `{kind: gpu_lost, gpu: "gpu:0", from: 5m, to: 8m}`,
		lost:   map[int]span{0: {5 * time.Minute, 8 * time.Minute}},
		during: map[string]float64{`gpuxray_device_up{gpu=0}`: 0, `gpuxray_device_power_watts{gpu=0}`: -1, `gpuxray_device_power_watts{gpu=1}`: -2},
		errors: []string{"nvml/gpu_lost"},
	},
	{
		name:   "an NVML call hangs",
		fault:  `{kind: nvml_hang, gpu: "gpu:0", call: samples, from: 5m, to: 8m}`,
		lost:   map[int]span{0: {5 * time.Minute, 8*time.Minute - ring}},
		during: map[string]float64{`gpuxray_device_up{gpu=0}`: 0, `gpuxray_device_up{gpu=1}`: 1, `gpuxray_source_up{source=nvml}`: 1},
		errors: []string{"nvml/hung"},
	},
	{
		name:   "an NVML call hangs for a few seconds only",
		fault:  `{kind: nvml_hang, gpu: "gpu:1", call: energy, from: 5m, to: 5m5s}`,
		errors: []string{"nvml/hung"},
	},
	{
		name:   "samples stamped far in the future",
		fault:  `{kind: bad_timestamp, gpu: "gpu:0", stamp: future, from: 5m, to: 8m}`,
		during: map[string]float64{`gpuxray_device_up{gpu=0}`: 1},
		errors: []string{"nvml/bad_timestamp"},
	},
	{
		name:   "samples stamped in 1999",
		fault:  `{kind: bad_timestamp, gpu: "gpu:1", stamp: past, from: 5m, to: 8m}`,
		errors: []string{"nvml/bad_timestamp"},
	},
	{
		name:  "samples stamped zero",
		fault: `{kind: bad_timestamp, gpu: "gpu:0", stamp: zero, from: 5m, to: 8m}`,
	},
	{
		name:         "kubelet socket removed beyond the stale grace",
		fault:        `{kind: kubelet_down, from: 5m, to: 8m}`,
		unattributed: map[int]span{0: {7 * time.Minute, 8 * time.Minute}, 1: {7 * time.Minute, 8 * time.Minute}},
		during:       map[string]float64{`gpuxray_source_up{source=kubelet}`: 0, `gpuxray_allocation_info{pod=a,stale=true}`: 1},
		errors:       []string{"kubelet/unavailable"},
	},
	{
		name:   "kubelet socket removed within the stale grace",
		fault:  `{kind: kubelet_down, from: 5m, to: 6m}`,
		errors: []string{"kubelet/unavailable"},
	},
	{
		name:      "kubelet restarted",
		fault:     `{kind: kubelet_restart, at: 5m}`,
		mayErrors: []string{"kubelet/unavailable"},
	},
	{
		name:         "kubelet slower than the deadline",
		fault:        `{kind: kubelet_slow, delay: 30s, from: 5m, to: 8m}`,
		unattributed: map[int]span{0: {7 * time.Minute, 8 * time.Minute}, 1: {7 * time.Minute, 8 * time.Minute}},
		during:       map[string]float64{`gpuxray_source_up{source=kubelet}`: 0},
		errors:       []string{"kubelet/deadline"},
	},
	{
		name:  "kubelet slow within the deadline",
		fault: `{kind: kubelet_slow, delay: 1s, from: 5m, to: 8m}`,
	},
	{
		name:   "kubelet answers ResourceExhausted",
		fault:  `{kind: kubelet_error, code: ResourceExhausted, from: 5m, to: 6m}`,
		during: map[string]float64{`gpuxray_source_up{source=kubelet}`: 1},
		errors: []string{"kubelet/exhausted"},
	},
	{
		name:   "malformed device IDs and a UUID this node lacks",
		fault:  `{kind: device_ids, pod: ml/ghost, ids: ["not-a-gpu", "GPU-00000000-0000-0000-0000-000000000000", "GPU-x::y"], from: 5m, to: 8m}`,
		errors: []string{"kubelet/malformed_device_id", "kubelet/unknown_device"},
	},
	{
		name:  "a terminated pod still listed on an exclusive GPU",
		fault: `{kind: ghost_pod, pod: ml/ghost, gpu: "gpu:0", phase: Succeeded, from: 5m, to: 8m}`,
	},
	{
		name:   "two running pods listed on one exclusive GPU",
		fault:  `{kind: ghost_pod, pod: ml/ghost, gpu: "gpu:0", phase: Running, from: 5m, to: 8m}`,
		split:  map[int]span{0: {5 * time.Minute, 8 * time.Minute}},
		errors: []string{"kubelet/exclusive_conflict"},
	},
	{
		// The pod source knows b runs there: the pod it does not know
		// (deleted, or another node's) is not a holder.
		name:  "a pod the pod source does not know listed on an exclusive GPU",
		fault: `{kind: ghost_pod, pod: ml/ghost, gpu: "gpu:1", phase: unknown, from: 5m, to: 8m}`,
	},
}

// series is a gathered exposition keyed by metric name and every label.
type series map[string]float64

func gatherSeries(t *testing.T, g prometheus.Gatherer) series {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := series{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var lv []string
			for _, l := range m.GetLabel() {
				lv = append(lv, l.GetName()+"="+l.GetValue())
			}
			out[mf.GetName()+"{"+strings.Join(lv, ",")+"}"] = value(m)
		}
	}
	return out
}

func value(m *dto.Metric) float64 {
	switch {
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue()
	}
	return math.NaN()
}

// sum adds every series of metric whose labels include all of sel
// ("gpu=0", …); found says whether any matched.
func (s series) sum(metric string, sel ...string) (float64, bool) {
	var v float64
	found := false
	for k, x := range s {
		name, labels, _ := strings.Cut(k, "{")
		if name != metric {
			continue
		}
		ls := strings.Split(strings.TrimSuffix(labels, "}"), ",")
		ok := true
		for _, want := range sel {
			ok = ok && containsString(ls, want)
		}
		if ok {
			v += x
			found = true
		}
	}
	return v, found
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// parseSelector splits `name{a=b,c=d}` into the name and its selectors.
func parseSelector(sel string) (string, []string) {
	name, rest, _ := strings.Cut(sel, "{")
	rest = strings.TrimSuffix(rest, "}")
	if rest == "" {
		return name, nil
	}
	return name, strings.Split(rest, ",")
}

// replayFaults replays sc in-process and returns the series at 6m30s and at
// the end.
func replayFaults(t *testing.T, sc *sim.Scenario, cfg agent.Config, at time.Duration) (during, final series) {
	t.Helper()
	mark := sc.Start.Add(at)
	end := sc.Start.Add(sc.Duration)
	scrape := func(ts time.Time, g, _ prometheus.Gatherer) error {
		switch {
		case ts.Equal(mark):
			during = gatherSeries(t, g)
		case ts.Equal(end):
			final = gatherSeries(t, g)
		}
		return nil
	}
	_, err := replay(context.Background(), sc, app.ReplayConfig{Engine: cfg, NVML: nvml.DefaultConfig(), DRA: app.DefaultDRA(), Logger: zap.NewNop()}, 10*time.Second, scrape)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	return during, final
}

// keepAll is replay's default retention (internal/app): every allocation
// of the scenario is reported, however early it ended.
const keepAll = 100 * 365 * 24 * time.Hour

// TestFaults plays each fault on the virtual clock through the real NVML
// reader, kubelet client, engine and exporter, and checks the series while
// it lasts and every counter against the scenario's ground truth afterwards,
// within 1%: time no sample covered is a gap (never idle), time nobody was
// known to hold is unattributed, holders listed twice split the GPU, and
// allocated seconds never exceed observed seconds.
func TestFaults(t *testing.T) {
	t.Parallel()
	for _, tc := range faultCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sc, err := sim.ParseScenario([]byte(faultBase+"  - "+tc.fault+"\n"), "faults.yaml")
			if err != nil {
				t.Fatal(err)
			}
			cfg := agent.DefaultConfig()
			cfg.Retention = keepAll
			during, final := replayFaults(t, sc, cfg, 6*time.Minute+30*time.Second)
			if during == nil {
				t.Fatal("no scrape at 6m30s")
			}
			for sel, want := range tc.during {
				name, labels := parseSelector(sel)
				got, found := during.sum(name, labels...)
				switch {
				case want == -1 && found:
					t.Errorf("at 6m30s %s = %g, want it absent", sel, got)
				case want == -2 && !found:
					t.Errorf("at 6m30s %s is absent", sel)
				case want >= 0 && (!found || got != want):
					t.Errorf("at 6m30s %s = %g (found %v), want %g", sel, got, found, want)
				}
			}
			for _, e := range tc.errors {
				src, reason, _ := strings.Cut(e, "/")
				if n, _ := final.sum("gpuxray_source_errors_total", "source="+src, "reason="+reason); n == 0 {
					t.Errorf("gpuxray_source_errors_total{source=%q,reason=%q} did not count", src, reason)
				}
			}
			// And nothing else counted: a reason no fault causes is a bug
			// (a hang's late answer once counted bad_timestamp).
			for k, v := range final {
				name, labels, _ := strings.Cut(k, "{")
				if name != "gpuxray_source_errors_total" || v == 0 {
					continue
				}
				ls := strings.Split(strings.TrimSuffix(labels, "}"), ",")
				if !slices.ContainsFunc(append(slices.Clone(tc.errors), tc.mayErrors...), func(e string) bool {
					src, reason, _ := strings.Cut(e, "/")
					return containsString(ls, "source="+src) && containsString(ls, "reason="+reason)
				}) {
					t.Errorf("%s = %g, a reason the fault does not cause", k, v)
				}
			}
			checkFaultTruth(t, sc, tc, final)
			// Recovery: every source and device is up at the end.
			for _, s := range []string{"source=nvml", "source=kubelet"} {
				if v, _ := final.sum("gpuxray_source_up", s); v != 1 {
					t.Errorf("gpuxray_source_up{%s} = %g at the end, want 1", s, v)
				}
			}
			for gpu := range 2 {
				if v, _ := final.sum("gpuxray_device_up", fmt.Sprintf("gpu=%d", gpu)); v != 1 {
					t.Errorf("gpuxray_device_up{gpu=%d} = %g at the end, want 1", gpu, v)
				}
			}
		})
	}
}

// checkFaultTruth checks the final counters of faultBase against the ground
// truth less what the fault made unobservable or unattributed.
func checkFaultTruth(t *testing.T, sc *sim.Scenario, tc faultCase, s series) {
	t.Helper()
	total := sc.Duration.Seconds()
	// 1% of the truth, and a poll: a fault starts and ends on a poll.
	within := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 0.01*want+1 {
			t.Errorf("%s = %.2f, want %.2f ± 1%% and a poll", what, got, want)
		}
	}
	for gpu, pod := range []string{"a", "b"} {
		g := fmt.Sprintf("gpu=%d", gpu)
		lost, unattr, split := tc.lost[gpu].seconds(), tc.unattributed[gpu].seconds(), tc.split[gpu].seconds()
		observed, _ := s.sum("gpuxray_device_observed_seconds_total", g)
		gap, _ := s.sum("gpuxray_device_sample_gap_seconds_total", g)
		un, _ := s.sum("gpuxray_device_unattributed_seconds_total", g)
		within(g+" observed", observed, total-lost)
		// Nothing lost: every second of the device is observed or a gap.
		within(g+" observed + gap", observed+gap, total)
		within(g+" unattributed", un, unattr)

		allocated, _ := s.sum("gpuxray_allocated_seconds_total", g, "pod="+pod)
		idle, _ := s.sum("gpuxray_allocated_idle_seconds_total", g, "pod="+pod)
		active, _ := s.sum("gpuxray_allocated_active_seconds_total", g, "pod="+pod)
		own := total - lost - unattr - split/2
		within(g+" allocated to "+pod, allocated, own)
		var wantIdle, wantActive float64
		if pod == "a" {
			wantActive = 0.6 * own
		} else {
			wantIdle, wantActive = 600-lost-unattr-split/2, 0.9*60
		}
		within(g+" idle of "+pod, idle, wantIdle)
		within(g+" active of "+pod, active, wantActive)

		// Nothing invented: an exclusive GPU's allocated seconds, every
		// holder together, never exceed its observed seconds.
		all, _ := s.sum("gpuxray_allocated_seconds_total", g)
		if all > observed+1e-6 {
			t.Errorf("%s: allocated %.2f exceeds observed %.2f", g, all, observed)
		}
		if ghost, found := s.sum("gpuxray_allocated_seconds_total", g, "pod=ghost"); split > 0 {
			within(g+" allocated to the ghost", ghost, split/2)
		} else if found && ghost != 0 {
			t.Errorf("%s: ghost pod credited %.2f s", g, ghost)
		}
	}
	var keys []string
	for k := range s {
		if strings.Contains(k, "pod=ghost") && strings.HasPrefix(k, "gpuxray_allocated_seconds_total") && len(tc.split) == 0 {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		if s[k] != 0 {
			t.Errorf("%s = %g, want 0", k, s[k])
		}
	}
}
