package sim

import (
	"math"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// TestProcessSamplesPerRead checks the default shape of
// GetProcessUtilization against what real drivers answer (go-nvml #51,
// nvtop #110): one entry per busy process per call, stamped at the
// process's own refresh, off the device's sample grid, valued over the
// refreshes newer than lastSeen.
func TestProcessSamplesPerRead(t *testing.T) {
	t.Parallel()
	n, clock := yamlNode(t, head+`driver: {process_refresh: 3s}
pods:
  - {namespace: a, name: steady, resource: nvidia.com/gpu.shared, devices: ["gpu:0::0"], util: [{at: 0s, value: 0.7}]}
  - {namespace: a, name: step, resource: nvidia.com/gpu.shared, devices: ["gpu:0::1"], util: [{at: 0s, value: 0.2}, {at: 50s, value: 0.8}]}
  - {namespace: a, name: idle, resource: nvidia.com/gpu.shared, devices: ["gpu:0::2"]}
`)
	sc := n.Scenario()
	if sc.Driver.ProcessSamples != ProcessSamplesPerRead || sc.Driver.ProcessRefresh != 3*time.Second {
		t.Fatalf("driver %+v, want per-read every 3s", sc.Driver)
	}
	steady, step, idle := sc.PID(0, 0), sc.PID(1, 0), sc.PID(2, 0)
	d := device(t, n, 0)
	start := uint64(sc.Start.UnixMicro())
	refresh := uint64(3_000_000)
	at := func(p nvml.ProcessUtilizationSample) uint64 { return p.TimeStamp - start }

	clock.Set(sc.Start.Add(60 * time.Second))
	all, ret := d.GetProcessUtilization(0)
	if ret != nvml.SUCCESS || len(all) != 2 {
		t.Fatalf("GetProcessUtilization(0) = %+v, %v; want the two busy processes once each", all, ret)
	}
	phases := map[uint32]uint64{}
	for _, p := range all {
		if p.Pid == idle {
			t.Errorf("the idle process is listed: %+v", p)
		}
		if at(p) > 60_000_000 || 60_000_000-at(p) >= refresh {
			t.Errorf("process %d stamped %d µs in, want its newest refresh within 3 s of 60 s", p.Pid, at(p))
		}
		if at(p)%166667 == 0 {
			t.Errorf("process %d stamped on the device's sample grid (%d µs)", p.Pid, at(p))
		}
		phases[p.Pid] = at(p) % refresh
	}
	if phases[steady] == phases[step] {
		t.Errorf("both processes refreshed at the same phase %d µs", phases[steady])
	}

	// The same refresh read with an older lastSeen averages more windows:
	// the step's 0.2 before 50 s drags the mean down.
	byPID := func(ps []nvml.ProcessUtilizationSample) map[uint32]nvml.ProcessUtilizationSample {
		out := map[uint32]nvml.ProcessUtilizationSample{}
		for _, p := range ps {
			out[p.Pid] = p
		}
		return out
	}
	newest := byPID(all)[step]
	recent, _ := d.GetProcessUtilization(newest.TimeStamp - 1)
	wide, _ := d.GetProcessUtilization(newest.TimeStamp - 15*1_000_000)
	r, w := byPID(recent)[step], byPID(wide)[step]
	if r.TimeStamp != newest.TimeStamp || w.TimeStamp != newest.TimeStamp {
		t.Fatalf("stamps %d and %d, want both %d", r.TimeStamp, w.TimeStamp, newest.TimeStamp)
	}
	if r.SmUtil != 80 || !(w.SmUtil > 20 && w.SmUtil < 80) {
		t.Errorf("since the last refresh %d%%, over 15 s %d%%; want 80%% and between 20%% and 80%%", r.SmUtil, w.SmUtil)
	}
	// Nothing new since the newest stamp of both: not found.
	latest := max(at(all[0]), at(all[1])) + start
	if got, ret := d.GetProcessUtilization(latest); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("GetProcessUtilization(newest) = %+v, %v; want ERROR_NOT_FOUND", got, ret)
	}

	// Read every second, the entries tile each process's time: summed over
	// the time since each one's previous entry, they give its busy seconds.
	clock.Set(sc.Start)
	prev := map[uint32]uint64{steady: start, step: start}
	got := map[uint32]float64{}
	var lastSeen uint64
	for s := 1; s <= 300; s++ {
		clock.Set(sc.Start.Add(time.Duration(s) * time.Second))
		ps, _ := d.GetProcessUtilization(lastSeen)
		for _, p := range ps {
			got[p.Pid] += float64(p.TimeStamp-prev[p.Pid]) / 1e6 * float64(p.SmUtil) / 100
			prev[p.Pid], lastSeen = p.TimeStamp, max(lastSeen, p.TimeStamp)
		}
	}
	for pid, want := range map[uint32]func(float64) float64{
		steady: func(s float64) float64 { return 0.7 * s },
		step:   func(s float64) float64 { return 0.2*50 + 0.8*(s-50) },
	} {
		end := float64(prev[pid]-start) / 1e6
		// Each entry is a whole percent: the window across the step is
		// off by up to 0.5% of its 3 s.
		if math.Abs(got[pid]-want(end)) > 0.015 {
			t.Errorf("process %d: %.4f busy seconds to its last refresh at %.3f s, want %.4f", pid, got[pid], end, want(end))
		}
	}
}

// TestProcessRefreshRing checks that per-read windows older than the
// driver's ring are gone: lastSeen 0 averages the last 20 s only.
func TestProcessRefreshRing(t *testing.T) {
	t.Parallel()
	n, clock := yamlNode(t, head+"pods:\n  - {namespace: a, name: p, devices: [\"gpu:0\"], util: [{at: 0s, value: 1}, {at: 1m, value: 0.5}]}\n")
	clock.Set(n.Scenario().Start.Add(90 * time.Second))
	ps, ret := device(t, n, 0).GetProcessUtilization(0)
	if ret != nvml.SUCCESS || len(ps) != 1 || ps[0].SmUtil != 50 {
		t.Errorf("GetProcessUtilization(0) = %+v, %v; want one entry at 50%%", ps, ret)
	}
}

// TestSampleClockBoot checks the boot-time sample clock: every stamp the
// driver hands out, and every lastSeen it is given, counts microseconds
// from the node's boot.
func TestSampleClockBoot(t *testing.T) {
	t.Parallel()
	n, clock := yamlNode(t, head+"driver: {sample_clock: boot}\npods:\n  - {namespace: a, name: p, devices: [\"gpu:0\"], util: [{at: 0s, value: 0.5}]}\n")
	sc := n.Scenario()
	boot := sc.BootTime().UnixMicro()
	if want := sc.Start.Add(-bootUptime); !sc.BootTime().Equal(want) {
		t.Fatalf("BootTime %s, want %s", sc.BootTime(), want)
	}
	clock.Set(sc.Start.Add(10 * time.Second))
	d := device(t, n, 0)
	_, all, ret := d.GetSamples(nvml.GPU_UTILIZATION_SAMPLES, 0)
	if ret != nvml.SUCCESS || len(all) != 59 {
		t.Fatalf("GetSamples(0) = %d samples, %v; want the 59 periods of 10 s", len(all), ret)
	}
	newest := all[len(all)-1].TimeStamp
	if want := uint64(sc.Start.UnixMicro() + 59*166667 - boot); newest != want {
		t.Errorf("newest stamp %d, want %d µs since boot", newest, want)
	}
	_, since, ret := d.GetSamples(nvml.GPU_UTILIZATION_SAMPLES, all[len(all)-7].TimeStamp)
	if ret != nvml.SUCCESS || len(since) != 6 || since[5].TimeStamp != newest {
		t.Errorf("GetSamples(a boot stamp) = %d samples, %v; want the 6 newer", len(since), ret)
	}
	ps, ret := d.GetProcessUtilization(0)
	if ret != nvml.SUCCESS || len(ps) != 1 || ps[0].TimeStamp > newest+uint64(time.Second.Microseconds()) || ps[0].TimeStamp < newest-uint64(DefaultProcessRefresh.Microseconds()) {
		t.Errorf("GetProcessUtilization(0) = %+v, %v; want one entry stamped since boot near %d", ps, ret, newest)
	}
}

// TestIdleSamplesFalse checks a ring that runs dry while the GPU is idle:
// idle periods leave no sample, a read with nothing busy since lastSeen is
// ERROR_NOT_FOUND, and GetUtilizationRates still answers.
func TestIdleSamplesFalse(t *testing.T) {
	t.Parallel()
	n, clock := yamlNode(t, head+`driver: {idle_samples: false}
pods:
  - {namespace: a, name: p, devices: ["gpu:0"], util: [{at: 0s, value: 0.4}, {at: 10s, value: 0}, {at: 20s, duty: {period: 1s, busy: 500ms, value: 1}}]}
`)
	sc := n.Scenario()
	d := device(t, n, 0)
	clock.Set(sc.Start.Add(15 * time.Second))
	if _, s, ret := d.GetSamples(nvml.GPU_UTILIZATION_SAMPLES, stamp(n, 61)); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("idle since 10s: GetSamples = %d samples, %v; want ERROR_NOT_FOUND", len(s), ret)
	}
	if u, ret := d.GetUtilizationRates(); ret != nvml.SUCCESS || u.Gpu != 0 {
		t.Errorf("GetUtilizationRates while idle = %+v, %v", u, ret)
	}
	_, s, ret := d.GetSamples(nvml.GPU_UTILIZATION_SAMPLES, 0)
	if ret != nvml.SUCCESS || len(s) != 60 || value(s[59]) != 40 || s[59].TimeStamp != stamp(n, 60) {
		t.Errorf("GetSamples(0) = %d samples, %v; want the 60 busy ones before 10 s", len(s), ret)
	}
	clock.Set(sc.Start.Add(23 * time.Second))
	_, s, ret = d.GetSamples(nvml.GPU_UTILIZATION_SAMPLES, stamp(n, 120))
	if ret != nvml.SUCCESS || len(s) != 9 {
		t.Fatalf("half-busy: GetSamples = %d samples, %v; want the 9 busy periods of 3 s", len(s), ret)
	}
	for _, x := range s {
		if value(x) == 0 {
			t.Errorf("an idle period left a sample: %+v", x)
		}
	}
	if u, ret := d.GetUtilizationRates(); ret != nvml.SUCCESS || u.Gpu != percent(n.gpus[0].util, 138) {
		t.Errorf("GetUtilizationRates = %+v, %v; want the latest period's %d%%", u, ret, percent(n.gpus[0].util, 138))
	}
}

// TestGPMSMFraction checks that GRAPHICS_UTIL is time and SM_UTIL space: a
// decode server whose kernels always run on 3% of the SMs is 100% busy and
// 3% SM-active, on a whole GPU and on a MIG device.
func TestGPMSMFraction(t *testing.T) {
	t.Parallel()
	n, clock := yamlNode(t, head+`mig: {"gpu:1": [3g.40gb]}
pods:
  - {namespace: a, name: decode, devices: ["gpu:0"], sm_fraction: 0.03, util: [{at: 0s, value: 1}]}
  - {namespace: a, name: mig, devices: ["mig:1/0"], sm_fraction: 0.03, util: [{at: 0s, value: 0.5}]}
  - {namespace: a, name: full, devices: ["gpu:2"], util: [{at: 0s, value: 0.5}]}
`)
	sc := n.Scenario()
	if sc.Pods[0].SMFraction != 0.03 || sc.Pods[2].SMFraction != 1 {
		t.Fatalf("sm_fraction %g and %g, want 0.03 and the default 1", sc.Pods[0].SMFraction, sc.Pods[2].SMFraction)
	}
	lib := n.NVML()
	mh, _ := device(t, n, 1).GetMigDeviceHandleByIndex(0)
	for _, c := range []struct {
		name         string
		dev          nvml.Device
		graphics, sm float64
	}{
		{"whole GPU", device(t, n, 0), 100, 3},
		{"MIG device", mh, 50, 1.5},
		{"fills its GPU", device(t, n, 2), 50, 50},
	} {
		a, _ := lib.GpmSampleAlloc()
		b, _ := lib.GpmSampleAlloc()
		clock.Set(sc.Start.Add(10 * time.Second))
		lib.GpmSampleGet(c.dev, a)
		clock.Set(sc.Start.Add(11 * time.Second))
		lib.GpmSampleGet(c.dev, b)
		mg := nvml.GpmMetricsGetType{NumMetrics: 2, Sample1: a, Sample2: b}
		mg.Metrics[0].MetricId = uint32(nvml.GPM_METRIC_GRAPHICS_UTIL)
		mg.Metrics[1].MetricId = uint32(nvml.GPM_METRIC_SM_UTIL)
		if ret := lib.GpmMetricsGet(&mg); ret != nvml.SUCCESS {
			t.Fatalf("%s: %v", c.name, ret)
		}
		if g, s := mg.Metrics[0].Value, mg.Metrics[1].Value; math.Abs(g-c.graphics) > 1e-9 || math.Abs(s-c.sm) > 1e-9 {
			t.Errorf("%s: GRAPHICS_UTIL %g%%, SM_UTIL %g%%; want %g%% and %g%%", c.name, g, s, c.graphics, c.sm)
		}
	}
}

func TestParseDriverErrors(t *testing.T) {
	t.Parallel()
	tests := []parseErrorCase{
		{"unknown key", head + "driver: {process_sample: per-read}\n",
			"t.yaml:5: driver.process_sample: unknown key; want one of process_samples, process_refresh, sample_clock, idle_samples, version, mig_parent_permission, mps, graphics, memory_not_available, zombies, compute_instances, mig_mode, reloads, node_labels"},
		{"unknown shape", head + "driver: {process_samples: per-call}\n",
			`t.yaml:5: driver.process_samples: "per-call" is not one of per-read, per-period`},
		{"unknown clock", head + "driver: {sample_clock: tai}\n",
			`t.yaml:5: driver.sample_clock: "tai" is not one of unix, boot`},
		{"refresh too short", head + "driver: {process_refresh: 10ms}\n",
			"t.yaml:5: driver.process_refresh: 10ms is not from one sample period (166.667ms) to 1m"},
		{"idle samples not a bool", head + "driver: {idle_samples: sometimes}\n",
			`t.yaml:5: driver.idle_samples: want true or false, got "sometimes"`},
		{"not a mapping", head + "driver: per-read\n",
			`t.yaml:5: driver: want a mapping for driver, got "per-read"`},
		{"sm_fraction zero", head + pod + "    sm_fraction: 0\n",
			"t.yaml:9: pods[0].sm_fraction: 0 is no share of the SMs; a pod whose kernels run occupies some"},
		{"sm_fraction above one", head + pod + "    sm_fraction: 1.5\n",
			"t.yaml:9: pods[0].sm_fraction: 1.5 is not a ratio between 0 and 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseScenario([]byte(tt.yaml), "t.yaml")
			if err == nil || err.Error() != tt.want {
				t.Errorf("error %v\nwant  %s", err, tt.want)
			}
		})
	}
	sc, err := ParseScenario([]byte(head), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if want := (Driver{ProcessSamples: ProcessSamplesPerRead, ProcessRefresh: 2 * time.Second, SampleClock: SampleClockUnix}); sc.Driver != want {
		t.Errorf("default driver %+v, want %+v", sc.Driver, want)
	}
}
