package agent

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/collector"
)

var t0 = time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)

const period = time.Second / 6

type fakeClock struct{ t time.Time }

func (c *fakeClock) Now() time.Time { return c.t }

func uuidOf(gpu int) string { return fmt.Sprintf("GPU-%08d-0000-0000-0000-000000000000", gpu) }

// fakeDevices produces NVML-like samples: on a grid of `period` from t0, each
// newer than the last one read, at most `buffer` of them, valued util(t) at
// the middle of the sample's period.
type fakeDevices struct {
	clock  *fakeClock
	util   []func(d time.Duration) float64 // per GPU, of time since t0
	buffer int
	down   func(d time.Duration) bool
	last   []time.Time
}

func (f *fakeDevices) Read(context.Context) (collector.DeviceSnapshot, error) {
	now := f.clock.Now()
	if f.down != nil && f.down(now.Sub(t0)) {
		return collector.DeviceSnapshot{At: now}, collector.NewSourceError(collector.SourceNVML, "init", errors.New("driver not loaded"))
	}
	if f.last == nil {
		f.last = make([]time.Time, len(f.util))
	}
	snap := collector.DeviceSnapshot{At: now}
	for gpu, util := range f.util {
		var samples []collector.Sample
		for k := int64(now.Sub(t0) / period); k >= 0; k-- {
			ts := t0.Add(time.Duration(k) * period)
			if !ts.After(f.last[gpu]) || len(samples) == f.buffer {
				break
			}
			samples = append(samples, collector.Sample{Time: ts, Value: util(ts.Sub(t0) - period/2)})
		}
		slices.Reverse(samples)
		if n := len(samples); n > 0 {
			f.last[gpu] = samples[n-1].Time
		}
		snap.Devices = append(snap.Devices, collector.DeviceReading{
			Device:  collector.Device{UUID: uuidOf(gpu), GPU: gpu, Name: "NVIDIA H100 80GB HBM3", UtilizationSource: collector.UtilizationSamples},
			Samples: samples,
		})
	}
	return snap, nil
}

type holding struct {
	pod      string
	gpu      int
	from, to time.Duration
}

// fakeKubelet lists the holdings current at the clock's time, or fails while
// down, returning the last good list marked stale.
type fakeKubelet struct {
	clock *fakeClock
	hold  []holding
	down  func(d time.Duration) bool
	last  collector.AllocationList
}

func (f *fakeKubelet) List(context.Context) (collector.AllocationList, error) {
	now := f.clock.Now()
	d := now.Sub(t0)
	if f.down != nil && f.down(d) {
		stale := f.last
		stale.Stale = true
		return stale, collector.NewSourceError(collector.SourceKubelet, "unavailable", errors.New("connection refused"))
	}
	l := collector.AllocationList{At: now}
	for _, h := range f.hold {
		if d >= h.from && d < h.to {
			ref, _ := collector.ParseDeviceID(uuidOf(h.gpu))
			l.Allocations = append(l.Allocations, collector.Allocation{
				Namespace: "ml", Pod: h.pod, Container: "main", Resource: "nvidia.com/gpu", Device: ref,
			})
		}
	}
	f.last = l
	return l, nil
}

func constant(v float64) func(time.Duration) float64 { return func(time.Duration) float64 { return v } }

func steps(at time.Duration, before, after float64) func(time.Duration) float64 {
	return func(d time.Duration) float64 {
		if d < at {
			return before
		}
		return after
	}
}

type harness struct {
	clock *fakeClock
	dev   *fakeDevices
	kube  *fakeKubelet
	e     *Engine
}

func newHarness(t *testing.T, cfg Config, utils []func(time.Duration) float64, hold []holding) *harness {
	t.Helper()
	c := &fakeClock{t: t0}
	h := &harness{
		clock: c,
		dev:   &fakeDevices{clock: c, util: utils, buffer: 120},
		kube:  &fakeKubelet{clock: c, hold: hold},
	}
	e, err := New(cfg, h.dev, h.kube, c, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	h.e = e
	return h
}

// run polls every second from the current time up to and including `until`
// after t0.
func (h *harness) run(until time.Duration) *Snapshot {
	for {
		h.e.Poll(context.Background())
		if h.clock.t.Sub(t0) >= until {
			return h.e.Snapshot()
		}
		h.clock.t = h.clock.t.Add(time.Second)
	}
}

func findAlloc(s *Snapshot, pod string) *AllocationSnapshot {
	for _, a := range s.Allocations {
		if a.Pod == pod {
			return a
		}
	}
	return nil
}

func near(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-6*max(1, math.Abs(want)) {
		t.Errorf("%s = %.6f, want %.6f", what, got, want)
	}
}

func source(s *Snapshot, name string) SourceSnapshot {
	for _, src := range s.Sources {
		if src.Name == name {
			return src
		}
	}
	return SourceSnapshot{}
}

func TestEngine(t *testing.T) {
	type allocWant struct {
		pod                     string
		allocated, idle, active float64
		streak                  float64 // -1: no streak gauge
		live, stale             bool
	}
	type devWant struct {
		gpu                                              int
		observed, idle, unallocated, unallocActive, gaps float64
	}
	tests := []struct {
		name     string
		cfg      func(*Config)
		utils    []func(time.Duration) float64
		hold     []holding
		devDown  func(time.Duration) bool
		kubeDown func(time.Duration) bool
		until    time.Duration
		allocs   []allocWant
		absent   []string
		devs     []devWant
		nvmlUp   bool
		kubeUp   bool
		nvmlErrs uint64
		kubeErrs uint64
	}{
		{
			name:   "exclusive pod idle then busy",
			utils:  []func(time.Duration) float64{steps(60*time.Second, 0, 0.8)},
			hold:   []holding{{"train", 0, 0, time.Hour}},
			until:  120 * time.Second,
			allocs: []allocWant{{pod: "train", allocated: 120, idle: 60, active: 48, streak: 0, live: true}},
			devs:   []devWant{{gpu: 0, observed: 120, idle: 60}},
			nvmlUp: true, kubeUp: true,
		},
		{
			name:   "idle streak grows while idle",
			utils:  []func(time.Duration) float64{steps(30*time.Second, 1, 0.01)},
			hold:   []holding{{"notebook", 0, 0, time.Hour}},
			until:  100 * time.Second,
			allocs: []allocWant{{pod: "notebook", allocated: 100, idle: 70, active: 30 + 0.7, streak: 70, live: true}},
			devs:   []devWant{{gpu: 0, observed: 100, idle: 70}},
			nvmlUp: true, kubeUp: true,
		},
		{
			// A ends between the polls at 30s and 31s, B starts then: the change
			// is placed at the midpoint, 30.5s.
			name:  "pod ends and another starts on the same GPU mid-poll",
			utils: []func(time.Duration) float64{steps(30500*time.Millisecond, 0.5, 0)},
			hold: []holding{
				{"a", 0, 0, 30500 * time.Millisecond},
				{"b", 0, 30500 * time.Millisecond, time.Hour},
			},
			until: 60 * time.Second,
			allocs: []allocWant{
				{pod: "a", allocated: 30.5, idle: 0, active: 15.25, streak: -1, live: false},
				{pod: "b", allocated: 29.5, idle: 29.5, active: 0, streak: 29.5, live: true},
			},
			devs:   []devWant{{gpu: 0, observed: 60, idle: 29.5}},
			nvmlUp: true, kubeUp: true,
		},
		{
			name:   "a GPU nobody holds",
			utils:  []func(time.Duration) float64{constant(0.3), constant(0)},
			hold:   []holding{{"svc", 1, 0, time.Hour}},
			until:  50 * time.Second,
			allocs: []allocWant{{pod: "svc", allocated: 50, idle: 50, streak: 50, live: true}},
			devs: []devWant{
				{gpu: 0, observed: 50, unallocated: 50, unallocActive: 15},
				{gpu: 1, observed: 50, idle: 50},
			},
			nvmlUp: true, kubeUp: true,
		},
		{
			// Reads fail from 10s to 40s; the ring keeps 20s of samples, so
			// 10s are lost: a gap, neither idle nor allocated.
			name:    "polls missed past the driver's buffer are a gap",
			utils:   []func(time.Duration) float64{constant(0)},
			hold:    []holding{{"p", 0, 0, time.Hour}},
			devDown: func(d time.Duration) bool { return d > 10*time.Second && d < 40*time.Second },
			until:   60 * time.Second,
			allocs:  []allocWant{{pod: "p", allocated: 50, idle: 50, streak: 50, live: true}},
			devs:    []devWant{{gpu: 0, observed: 50, idle: 50, gaps: 10}},
			nvmlUp:  true, kubeUp: true, nvmlErrs: 29,
		},
		{
			name:     "kubelet down: device metrics continue, allocations stale",
			utils:    []func(time.Duration) float64{constant(0.5)},
			hold:     []holding{{"p", 0, 0, time.Hour}},
			kubeDown: func(d time.Duration) bool { return d > 20*time.Second },
			until:    60 * time.Second,
			allocs:   []allocWant{{pod: "p", allocated: 60, active: 30, streak: 0, live: true, stale: true}},
			devs:     []devWant{{gpu: 0, observed: 60}},
			nvmlUp:   true, kubeUp: false, kubeErrs: 40,
		},
		{
			name:   "ended allocation is kept for the retention, then dropped",
			cfg:    func(c *Config) { c.Retention = 30 * time.Second },
			utils:  []func(time.Duration) float64{constant(0)},
			hold:   []holding{{"gone", 0, 0, 10500 * time.Millisecond}, {"kept", 0, 20500 * time.Millisecond, time.Hour}},
			until:  45 * time.Second,
			allocs: []allocWant{{pod: "kept", allocated: 24.5, idle: 24.5, streak: 24.5, live: true}},
			absent: []string{"gone"},
			devs:   []devWant{{gpu: 0, observed: 45, idle: 45, unallocated: 10}},
			nvmlUp: true, kubeUp: true,
		},
		{
			name:   "ended allocation still exported within the retention",
			cfg:    func(c *Config) { c.Retention = 30 * time.Second },
			utils:  []func(time.Duration) float64{constant(0)},
			hold:   []holding{{"gone", 0, 0, 10500 * time.Millisecond}},
			until:  39 * time.Second,
			allocs: []allocWant{{pod: "gone", allocated: 10.5, idle: 10.5, streak: -1, live: false}},
			devs:   []devWant{{gpu: 0, observed: 39, idle: 39, unallocated: 28.5}},
			nvmlUp: true, kubeUp: true,
		},
		{
			name:    "NVML down from the start: allocations listed, nothing invented",
			utils:   []func(time.Duration) float64{constant(1)},
			hold:    []holding{{"p", 0, 0, time.Hour}},
			devDown: func(time.Duration) bool { return true },
			until:   10 * time.Second,
			allocs:  []allocWant{{pod: "p", streak: -1, live: true}},
			nvmlUp:  false, kubeUp: true, nvmlErrs: 11,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := DefaultConfig()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			h := newHarness(t, cfg, tc.utils, tc.hold)
			h.dev.down, h.kube.down = tc.devDown, tc.kubeDown
			s := h.run(tc.until)

			for _, w := range tc.allocs {
				a := findAlloc(s, w.pod)
				if a == nil {
					t.Fatalf("allocation %s missing", w.pod)
				}
				c := a.Counters[Offpeak]
				near(t, w.pod+" allocated", c.Allocated, w.allocated)
				near(t, w.pod+" idle", c.Idle, w.idle)
				near(t, w.pod+" active", c.Active, w.active)
				if w.streak < 0 {
					if a.HasIdleStreak {
						t.Errorf("%s has idle streak %g, want none", w.pod, a.IdleStreak)
					}
				} else if !a.HasIdleStreak {
					t.Errorf("%s has no idle streak, want %g", w.pod, w.streak)
				} else {
					near(t, w.pod+" streak", a.IdleStreak, w.streak)
				}
				if a.Live != w.live || a.Stale != w.stale {
					t.Errorf("%s live=%v stale=%v, want %v %v", w.pod, a.Live, a.Stale, w.live, w.stale)
				}
				if a.Counters[Peak] != (AllocationCounters{}) {
					t.Errorf("%s has peak counters %+v with no peak schedule", w.pod, a.Counters[Peak])
				}
			}
			for _, pod := range tc.absent {
				if findAlloc(s, pod) != nil {
					t.Errorf("allocation %s still exported", pod)
				}
			}
			if len(s.Devices) != len(tc.devs) {
				t.Fatalf("%d devices, want %d", len(s.Devices), len(tc.devs))
			}
			for i, w := range tc.devs {
				d := s.Devices[i]
				c := d.Counters[Offpeak]
				name := fmt.Sprintf("gpu%d ", w.gpu)
				near(t, name+"observed", c.Observed, w.observed)
				near(t, name+"idle", c.Idle, w.idle)
				near(t, name+"unallocated", c.Unallocated, w.unallocated)
				near(t, name+"unallocated active", c.UnallocatedActive, w.unallocActive)
				near(t, name+"gap", c.Gap, w.gaps)
			}
			for _, x := range []struct {
				name string
				up   bool
				errs uint64
			}{{collector.SourceNVML, tc.nvmlUp, tc.nvmlErrs}, {collector.SourceKubelet, tc.kubeUp, tc.kubeErrs}} {
				src := source(s, x.name)
				var n uint64
				for _, v := range src.Errors {
					n += v
				}
				if src.Up != x.up || n != x.errs {
					t.Errorf("source %s up=%v errors=%d (%v), want up=%v errors=%d", x.name, src.Up, n, src.Errors, x.up, x.errs)
				}
			}
		})
	}
}

// TestCountersMonotonic drives churn, failures and recovery, and checks every
// counter of every series never decreases between snapshots.
func TestCountersMonotonic(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.Retention = 20 * time.Second
	var hold []holding
	for i := 0; i < 20; i++ {
		hold = append(hold, holding{fmt.Sprintf("p%d", i), i % 3, time.Duration(i*7) * time.Second, time.Duration(i*7+15) * time.Second})
	}
	h := newHarness(t, cfg, []func(time.Duration) float64{constant(0.2), steps(40*time.Second, 0, 1), constant(0)}, hold)
	h.dev.down = func(d time.Duration) bool { return d > 50*time.Second && d < 80*time.Second }
	h.kube.down = func(d time.Duration) bool { return d > 90*time.Second && d < 100*time.Second }
	prev := map[string]float64{}
	for step := 0; step < 160; step++ {
		h.e.Poll(context.Background())
		s := h.e.Snapshot()
		cur := map[string]float64{}
		for _, d := range s.Devices {
			for w, c := range d.Counters {
				for i, v := range []float64{c.Observed, c.Idle, c.Unallocated, c.UnallocatedActive, c.Gap} {
					cur[fmt.Sprintf("%s/%d/%d", d.UUID, w, i)] = v
				}
			}
		}
		for _, a := range s.Allocations {
			for w, c := range a.Counters {
				for i, v := range []float64{c.Allocated, c.Idle, c.Active} {
					cur[fmt.Sprintf("%s/%s/%d/%d", a.UUID, a.Pod, w, i)] = v
				}
				if c.Idle > c.Allocated+1e-9 || c.Active > c.Allocated+1e-9 {
					t.Fatalf("step %d: %s idle %g or active %g exceeds allocated %g", step, a.Pod, c.Idle, c.Active, c.Allocated)
				}
			}
		}
		for k, v := range cur {
			if p, ok := prev[k]; ok && v < p {
				t.Fatalf("step %d: counter %s went back from %g to %g", step, k, p, v)
			}
		}
		prev = cur
		h.clock.t = h.clock.t.Add(time.Second)
	}
	// Exclusive GPUs: allocated seconds on a device never exceed its observed seconds.
	s := h.e.Snapshot()
	for _, d := range s.Devices {
		var sum float64
		for _, a := range s.Allocations {
			if a.UUID == d.UUID {
				sum += a.Counters[Offpeak].Allocated
			}
		}
		if sum > d.Counters[Offpeak].Observed+1e-6 {
			t.Errorf("%s: allocated %g exceeds observed %g", d.UUID, sum, d.Counters[Offpeak].Observed)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"defaults", func(*Config) {}, ""},
		{"threshold zero", func(c *Config) { c.IdleThreshold = 0 }, "idle threshold 0 must be a ratio in (0, 1]"},
		{"threshold above one", func(c *Config) { c.IdleThreshold = 5 }, "idle threshold 5 must be a ratio in (0, 1]"},
		{"poll too short", func(c *Config) { c.PollInterval = time.Millisecond }, "poll interval 1ms is too short (at least 10ms)"},
		{"negative retention", func(c *Config) { c.Retention = -time.Second }, "retention -1s must not be negative"},
		{"negative stale grace", func(c *Config) { c.StaleGrace = -time.Second }, "kubelet stale grace -1s must not be negative"},
		{"two bad values", func(c *Config) { c.IdleThreshold, c.Retention = 0, -time.Second },
			"idle threshold 0 must be a ratio in (0, 1]\nretention -1s must not be negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.mod(&c)
			err := c.Validate()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Errorf("Validate() = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestStaleGrace: while the kubelet cannot be read, its last good list is
// credited for StaleGrace; beyond, the device's time is unattributed, the
// allocation stays exported and stale, and nothing is dropped: every
// observed second is allocated, unallocated or unattributed.
func TestStaleGrace(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.StaleGrace = 10 * time.Second
	h := newHarness(t, cfg, []func(time.Duration) float64{constant(0.5)}, []holding{{"p", 0, 0, time.Hour}})
	// Down after the list at 20s, back at 50s.
	h.kube.down = func(d time.Duration) bool { return d > 20*time.Second && d < 50*time.Second }
	s := h.run(40 * time.Second)
	a := findAlloc(s, "p")
	if a == nil || !a.Live || !a.Stale {
		t.Fatalf("allocation during the outage = %+v, want live and stale", a)
	}
	d := s.Devices[0].Counters[Offpeak]
	// Credited up to the last poll within the grace (30s) and the half
	// poll after it; unattributed since.
	near(t, "allocated at 40s", a.Counters[Offpeak].Allocated, 31)
	near(t, "unattributed at 40s", d.Unattributed, 9)
	s = h.run(60 * time.Second)
	a, d = findAlloc(s, "p"), s.Devices[0].Counters[Offpeak]
	if a.Stale {
		t.Error("allocation still stale after the kubelet came back")
	}
	// The fresh list at 50s also covers the poll before it.
	near(t, "allocated at 60s", a.Counters[Offpeak].Allocated, 42)
	near(t, "unattributed at 60s", d.Unattributed, 18)
	near(t, "observed", d.Observed, a.Counters[Offpeak].Allocated+d.Unallocated+d.Unattributed)
}

// TestExclusiveConflict: two pods listed on one exclusive GPU (an older
// kubelet still listing a terminated pod, with no pod source to tell) split
// its time, so that allocated seconds never exceed observed ones, and the
// conflict is counted.
func TestExclusiveConflict(t *testing.T) {
	t.Parallel()
	h := newHarness(t, DefaultConfig(), []func(time.Duration) float64{constant(0.8)},
		[]holding{{"new", 0, 0, time.Hour}, {"old", 0, 0, 20500 * time.Millisecond}})
	s := h.run(40 * time.Second)
	old, cur := findAlloc(s, "old"), findAlloc(s, "new")
	near(t, "old allocated", old.Counters[Offpeak].Allocated, 10.25)
	near(t, "new allocated", cur.Counters[Offpeak].Allocated, 29.75)
	near(t, "new active", cur.Counters[Offpeak].Active, 0.8*29.75)
	if old.Shared || cur.Shared {
		t.Error("an exclusive GPU listed twice is not shared")
	}
	near(t, "observed", s.Devices[0].Counters[Offpeak].Observed, 40)
	if n := source(s, collector.SourceKubelet).Errors["exclusive_conflict"]; n != 21 {
		t.Errorf("exclusive_conflict counted %d times, want once per list (21)", n)
	}
}
