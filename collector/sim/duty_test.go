package sim

import (
	"math"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// bruteMean is the mean of f over [a, b) sampled every step: exact when every
// change of f falls on a multiple of step.
func bruteMean(f func(time.Duration) float64, a, b, step time.Duration) float64 {
	var sum float64
	n := 0
	for t := a; t < b; t += step {
		sum += f(t)
		n++
	}
	return sum / float64(n)
}

// bruteDuty is the duty cycle's value at t, by its definition.
func bruteDuty(d Duty, at, t time.Duration) float64 {
	if t < at {
		return 0
	}
	if (t-at)%d.Period < d.Busy {
		return d.Value
	}
	return d.Idle
}

func TestDutySeriesExact(t *testing.T) {
	t.Parallel()
	bursty := Duty{Period: 2 * time.Second, Busy: 200 * time.Millisecond, Value: 1}
	other := Duty{Period: 700 * time.Millisecond, Busy: 300 * time.Millisecond, Value: 0.5, Idle: 0.1}
	a := stepSeries([]Step{{At: 0, Value: 0.3}, {At: 3 * time.Second, Duty: &bursty}, {At: 17*time.Second + 100*time.Millisecond, Value: 0}})
	b := stepSeries([]Step{{At: 5 * time.Second, Duty: &other}})
	truthA := func(t time.Duration) float64 {
		switch {
		case t < 3*time.Second:
			return 0.3
		case t < 17*time.Second+100*time.Millisecond:
			return bruteDuty(bursty, 3*time.Second, t)
		}
		return 0
	}
	truthB := func(t time.Duration) float64 { return bruteDuty(other, 5*time.Second, t) }
	// A window of a, as podSeries cuts a pod's steps to [from, to).
	from, to := 4*time.Second+50*time.Millisecond, 16*time.Second
	win := combine([]time.Duration{from, to}, []series{a}, func(t time.Duration) float64 {
		if t < from || t >= to {
			return 0
		}
		return a.value(t)
	})
	truthWin := func(t time.Duration) float64 {
		if t < from || t >= to {
			return 0
		}
		return truthA(t)
	}
	// Two overlapping duty cycles, summed and capped as a GPU's series is.
	sum := combine(nil, []series{a, b}, func(t time.Duration) float64 { return min(a.value(t)+b.value(t), 1) })
	truthSum := func(t time.Duration) float64 { return min(truthA(t)+truthB(t), 1) }

	for _, c := range []struct {
		name  string
		s     series
		truth func(time.Duration) float64
	}{{"steps with a duty step", a, truthA}, {"window", win, truthWin}, {"sum of two cycles", sum, truthSum}} {
		for _, span := range [][2]time.Duration{
			{0, 20 * time.Second},
			{3*time.Second + 150*time.Millisecond, 3*time.Second + 316*time.Millisecond},
			{4*time.Second + 166*time.Millisecond, 4*time.Second + 334*time.Millisecond},
			{6 * time.Second, 19*time.Second + 999*time.Millisecond},
			{11*time.Second + 7*time.Millisecond, 11*time.Second + 9*time.Millisecond},
		} {
			lo, hi := span[0], span[1]
			got := c.s.integral(lo, hi) / (hi - lo).Seconds()
			want := bruteMean(c.truth, lo, hi, time.Millisecond/2)
			if math.Abs(got-want) > 1e-9 {
				t.Errorf("%s: mean over [%s, %s) = %.12f, want %.12f", c.name, lo, hi, got, want)
			}
			for _, th := range []float64{0.05, 0.2, 0.55} {
				gotB := c.s.below(th, lo, hi)
				wantB := 0.0
				for tt := lo; tt < hi; tt += time.Millisecond / 2 {
					if c.truth(tt) < th {
						wantB += (time.Millisecond / 2).Seconds()
					}
				}
				if math.Abs(gotB-wantB) > 1e-6 {
					t.Errorf("%s: below(%g) over [%s, %s) = %.9f s, want %.9f s", c.name, th, lo, hi, gotB, wantB)
				}
			}
		}
		for tt := time.Duration(0); tt < 20*time.Second; tt += 13 * time.Millisecond {
			if got, want := c.s.value(tt), c.truth(tt); got != want {
				t.Fatalf("%s: value(%s) = %g, want %g", c.name, tt, got, want)
			}
		}
	}
}

func TestParseDuty(t *testing.T) {
	t.Parallel()
	sc, err := ParseScenario([]byte(head+pod+
		"    from: 10m\n"+
		"    util: {duty: {period: 2s, busy: 200ms, value: 1}}\n"+
		"  - namespace: a\n    name: q\n    devices: [\"gpu:1\"]\n"+
		"    util:\n"+
		"      - {at: 0s, value: 0.5}\n"+
		"      - {at: 1h, duty: {period: 1s, busy: 250ms, value: 0.9, idle: 0.02}}\n"+
		"      - {at: 2h, value: 0}\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want0 := []Step{{At: 10 * time.Minute, Duty: &Duty{Period: 2 * time.Second, Busy: 200 * time.Millisecond, Value: 1}}}
	if got := sc.Pods[0].Util; len(got) != 1 || got[0].At != want0[0].At || *got[0].Duty != *want0[0].Duty {
		t.Errorf("mapping form: %+v, want %+v", got, want0)
	}
	if got := sc.Pods[1].Util[1]; got.At != time.Hour || got.Duty == nil ||
		*got.Duty != (Duty{Period: time.Second, Busy: 250 * time.Millisecond, Value: 0.9, Idle: 0.02}) {
		t.Errorf("step form: %+v", got)
	}
	if got := sc.UtilAt(0, 10*time.Minute+100*time.Millisecond); got != 1 {
		t.Errorf("UtilAt in a burst = %g, want 1", got)
	}
	if got := sc.UtilAt(0, 10*time.Minute+time.Second); got != 0 {
		t.Errorf("UtilAt between bursts = %g, want 0", got)
	}

	tests := []struct{ name, util, want string }{
		{"unknown key", "    util: {duty: {period: 2s, busy: 1s, value: 1, phase: 1s}}\n",
			"t.yaml:9: pods[0].util.duty.phase: unknown key; want one of period, busy, value, idle"},
		{"period missing", "    util: {duty: {busy: 1s, value: 1}}\n", "t.yaml:9: pods[0].util.duty.period: missing"},
		{"period too short", "    util: {duty: {period: 1ms, busy: 1ms, value: 1}}\n",
			"t.yaml:9: pods[0].util.duty.period: 1ms is shorter than 10ms"},
		{"busy beyond period", "    util: {duty: {period: 1s, busy: 2s, value: 1}}\n",
			"t.yaml:9: pods[0].util.duty.busy: 2s is not within the period (more than 0s, at most 1s)"},
		{"busy zero", "    util: {duty: {period: 1s, busy: 0s, value: 1}}\n",
			"t.yaml:9: pods[0].util.duty.busy: 0s is not within the period (more than 0s, at most 1s)"},
		{"value out of range", "    util: {duty: {period: 1s, busy: 1ms, value: 2}}\n",
			"t.yaml:9: pods[0].util.duty.value: 2 is not a ratio between 0 and 1"},
		{"idle out of range", "    util: {duty: {period: 1s, busy: 1ms, value: 1, idle: -1}}\n",
			"t.yaml:9: pods[0].util.duty.idle: -1 is not a ratio between 0 and 1"},
		{"mapping without duty", "    util: {value: 1}\n", "t.yaml:9: pods[0].util.value: unknown key; want one of duty"},
		{"value and duty", "    util:\n      - {at: 0s, value: 1, duty: {period: 1s, busy: 1ms, value: 1}}\n",
			"t.yaml:10: pods[0].util[0].value: give value or duty, not both"},
		{"duty step without at", "    util:\n      - {duty: {period: 1s, busy: 1ms, value: 1}}\n",
			"t.yaml:10: pods[0].util[0].at: missing"},
		{"duty step in the wrong order", "    util:\n      - {at: 1h, value: 1}\n      - {at: 30m, duty: {period: 1s, busy: 1ms, value: 1}}\n",
			"t.yaml:11: pods[0].util[1].at: 30m does not come after the previous step's 1h"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseScenario([]byte(head+pod+tt.util), "t.yaml")
			if err == nil || err.Error() != tt.want {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
}

// TestDutyDriver checks that the simulated driver's samples, per-process
// samples, energy and GPM follow a duty cycle exactly, and that the truth
// counts its bursts.
func TestDutyDriver(t *testing.T) {
	t.Parallel()
	n, clock := yamlNode(t, head+
		"driver: {process_samples: per-period}\n"+
		"pods:\n"+
		"  - {namespace: a, name: bursty, devices: [\"gpu:0\"], from: 1s, to: 1h, util: {duty: {period: 2s, busy: 200ms, value: 1}}}\n"+
		"  - {namespace: a, name: s0, resource: nvidia.com/gpu.shared, devices: [\"gpu:1::0\"], util: {duty: {period: 3s, busy: 500ms, value: 0.8}}}\n"+
		"  - {namespace: a, name: s1, resource: nvidia.com/gpu.shared, devices: [\"gpu:1::1\"], util: [{at: 0s, duty: {period: 700ms, busy: 100ms, value: 0.6, idle: 0.1}}]}\n")
	sc := n.Scenario()
	d0 := Duty{Period: 2 * time.Second, Busy: 200 * time.Millisecond, Value: 1}
	s0 := Duty{Period: 3 * time.Second, Busy: 500 * time.Millisecond, Value: 0.8}
	s1 := Duty{Period: 700 * time.Millisecond, Busy: 100 * time.Millisecond, Value: 0.6, Idle: 0.1}
	pods := []func(time.Duration) float64{
		func(t time.Duration) float64 {
			if t < time.Second || t >= time.Hour {
				return 0
			}
			return bruteDuty(d0, time.Second, t)
		},
		func(t time.Duration) float64 { return bruteDuty(s0, 0, t) },
		func(t time.Duration) float64 { return bruteDuty(s1, 0, t) },
	}
	gpu := []func(time.Duration) float64{pods[0], func(t time.Duration) float64 { return min(pods[1](t)+pods[2](t), 1) }}
	const step = 10 * time.Microsecond
	end := 90 * SamplePeriod
	clock.Set(sc.Start.Add(end))
	for g := 0; g < 2; g++ {
		h := device(t, n, g)
		_, samples, ret := h.GetSamples(nvml.GPU_UTILIZATION_SAMPLES, 0)
		if ret != nvml.SUCCESS || len(samples) != 90 {
			t.Fatalf("gpu:%d: %d samples, %v", g, len(samples), ret)
		}
		for k, s := range samples {
			a := time.Duration(k) * SamplePeriod
			want := uint32(math.Round(100 * bruteMean(gpu[g], a, a+SamplePeriod, step)))
			if got := value(s); got != want {
				t.Errorf("gpu:%d sample %d: %d%%, want %d%%", g, k+1, got, want)
			}
		}
		mj, _ := h.GetTotalEnergyConsumption()
		sys := systems[sc.System]
		wantJ := (sys.idleWatts + (sys.maxWatts-sys.idleWatts)*bruteMean(gpu[g], 0, end, step)) * end.Seconds()
		if math.Abs(float64(mj)/1000-wantJ) > 0.002 {
			t.Errorf("gpu:%d energy %.3f J, want %.3f J", g, float64(mj)/1000, wantJ)
		}
	}
	procs, ret := device(t, n, 1).GetProcessUtilization(0)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	for _, p := range procs {
		k := int64((p.TimeStamp - stamp(n, 0)) / 166667)
		a := time.Duration(k-1) * SamplePeriod
		i := 1 + int(p.Pid-sc.PID(1, 0))/100
		want := uint32(math.Round(100 * bruteMean(pods[i], a, a+SamplePeriod, step)))
		if p.SmUtil != want {
			t.Errorf("pid %d sample %d: %d%%, want %d%%", p.Pid, k, p.SmUtil, want)
		}
	}

	// GPM: SM activity between two samples is the exact mean.
	lib := n.NVML()
	s1g, _ := lib.GpmSampleAlloc()
	s2g, _ := lib.GpmSampleAlloc()
	clock.Set(sc.Start.Add(20*time.Second + 50*time.Millisecond))
	lib.GpmSampleGet(device(t, n, 0), s1g)
	clock.Set(sc.Start.Add(21*time.Second + 130*time.Millisecond))
	lib.GpmSampleGet(device(t, n, 0), s2g)
	mg := nvml.GpmMetricsGetType{NumMetrics: 1, Sample1: s1g, Sample2: s2g}
	mg.Metrics[0].MetricId = uint32(nvml.GPM_METRIC_SM_UTIL)
	if ret := lib.GpmMetricsGet(&mg); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if want := 100 * bruteMean(gpu[0], 20*time.Second+50*time.Millisecond, 21*time.Second+130*time.Millisecond, step); math.Abs(mg.Metrics[0].Value-want) > 1e-6 {
		t.Errorf("GPM SM activity %g%%, want %g%%", mg.Metrics[0].Value, want)
	}

	truth := sc.Truth(0.05)
	// 3599 s from 1s: 1799 whole periods and one second that holds a
	// burst too, so 1800 bursts of 200ms.
	if r := truth[0]; r.AllocatedSeconds != 3599 || math.Abs(r.IdleSeconds-3239) > 1e-9 || math.Abs(r.ActiveSeconds-360) > 1e-9 {
		t.Errorf("bursty truth %+v, want idle 3239 s, active 360 s of 3599 s", r)
	}
}
