package agent

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/collector"
)

// shapeProc is a process on a shapeDevice, refreshed at phase within every
// refresh in the per-read shape.
type shapeProc struct {
	pid   uint32
	phase time.Duration
	util  func(time.Duration) float64
}

// shapeDevice is one GPU as a driver shows it in either shape of
// per-process samples: device samples on the 1/6 s grid (valued at the
// exact mean of the processes' summed ratios, capped at 1; with dryIdle,
// none for an idle period, as a ring that runs dry while idle), and per
// process either one sample per busy period on the same grid (perPeriod),
// or one entry per busy process per read, stamped at its newest refresh
// and valued over the refreshes since the previous read's newest stamp, as
// go-nvml #51 and nvtop #110 show real drivers do.
type shapeDevice struct {
	info      collector.Device
	procs     []shapeProc
	perPeriod bool
	dryIdle   bool
	refresh   time.Duration
	last      time.Time // newest device sample read
	lastProc  time.Time // newest process sample read
}

func (d *shapeDevice) devUtil(t time.Duration) float64 {
	v := 0.0
	for _, p := range d.procs {
		v += p.util(t)
	}
	return min(v, 1)
}

// mean is f's mean over (a, b], by 1 ms steps.
func mean(f func(time.Duration) float64, a, b time.Duration) float64 {
	if b <= a {
		return 0
	}
	var sum float64
	n := 0
	for t := a + time.Millisecond/2; t < b; t += time.Millisecond {
		sum += f(t)
		n++
	}
	return sum / float64(n)
}

func (d *shapeDevice) read(now time.Time) collector.DeviceReading {
	rd := collector.DeviceReading{Device: d.info, HasProcesses: true, HasProcessSamples: true}
	for _, p := range d.procs {
		rd.Processes = append(rd.Processes, collector.Process{PID: p.pid})
	}
	if d.last.IsZero() {
		d.last = t0.Add(-20 * period)
		d.lastProc = d.last
	}
	for k := int64(d.last.Sub(t0)/period) + 1; ; k++ {
		ts := t0.Add(time.Duration(k) * period)
		if ts.After(now) {
			break
		}
		a, b := ts.Sub(t0)-period, ts.Sub(t0)
		if v := mean(d.devUtil, a, b); v > 0 || !d.dryIdle {
			rd.Samples = append(rd.Samples, collector.Sample{Time: ts, Value: v})
		}
		if d.perPeriod {
			for _, p := range d.procs {
				if v := mean(p.util, a, b); v > 0 {
					rd.ProcessSamples = append(rd.ProcessSamples, collector.ProcessSample{PID: p.pid, Time: ts, Value: v})
				}
			}
		}
		d.last = ts
	}
	if !d.perPeriod {
		since := d.lastProc
		for _, p := range d.procs {
			// Refreshes at phase + k·refresh; the newest one by now.
			newest := p.phase + (now.Sub(t0)-p.phase)/d.refresh*d.refresh
			if !t0.Add(newest).After(since) {
				continue
			}
			first := p.phase + ((since.Sub(t0)-p.phase)/d.refresh+1)*d.refresh
			if v := mean(p.util, first-d.refresh, newest); v > 0 {
				rd.ProcessSamples = append(rd.ProcessSamples, collector.ProcessSample{PID: p.pid, Time: t0.Add(newest), Value: v})
				d.lastProc = maxTime(d.lastProc, t0.Add(newest))
			}
		}
	}
	return rd
}

type shapeDevices struct {
	clock *fakeClock
	devs  []*shapeDevice
}

func (f *shapeDevices) Read(context.Context) (collector.DeviceSnapshot, error) {
	snap := collector.DeviceSnapshot{At: f.clock.Now()}
	for _, d := range f.devs {
		snap.Devices = append(snap.Devices, d.read(f.clock.Now()))
	}
	return snap, nil
}

// runShapes polls devs every second from t0 to until, settles the
// engine, and returns its snapshot.
func runShapes(t *testing.T, devs []*shapeDevice, allocs []collector.Allocation, procs fakeProcs, pods *fakePods, until time.Duration) *Snapshot {
	t.Helper()
	c := &fakeClock{t: t0}
	e, err := New(DefaultConfig(), &shapeDevices{clock: c, devs: devs}, &listKubelet{clock: c, allocs: allocs}, c, zap.NewNop(),
		WithPods(pods), WithProcesses(procs))
	if err != nil {
		t.Fatal(err)
	}
	for {
		e.Poll(context.Background())
		if c.t.Sub(t0) >= until {
			break
		}
		c.t = c.t.Add(time.Second)
	}
	e.Settle()
	return e.Snapshot()
}

// within fails unless got is within tol of want.
func within(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol {
		t.Errorf("%s = %.3f, want %.3f ± %.3f", what, got, want, tol)
	}
}

// TestSharedGPUPerReadSamples is issue 26's case: a pod keeps a shared GPU
// 70% busy for 60 s while its neighbour idles, and the driver lists each
// busy process once per read, refreshed every 2 s off the sample grid.
// Crediting each process sample to one device period, the engine counted
// the busy pod 50 s idle and 7 s active; the truth is 0 and 42 (less what
// the last refresh before the end has not reported yet, at most 0.3 s
// here).
func TestSharedGPUPerReadSamples(t *testing.T) {
	t.Parallel()
	devs := []*shapeDevice{{info: wholeGPU(0), refresh: 2 * time.Second, procs: []shapeProc{
		{pid: 100, phase: 1700 * time.Millisecond, util: constant(0.7)},
		{pid: 200, phase: 300 * time.Millisecond, util: constant(0)},
	}}}
	allocs := []collector.Allocation{alloc("busy", uuidOf(0)+"::0"), alloc("idle", uuidOf(0)+"::1")}
	s := runShapes(t, devs, allocs, fakeProcs{100: "busy", 200: "idle"}, newFakePods("busy", "idle"), 60*time.Second)
	for _, w := range []struct {
		pod                     string
		allocated, idle, active float64
	}{
		{"busy", 60, 0, 42},
		{"idle", 60, 60, 0},
	} {
		a := findAlloc(s, w.pod)
		if a == nil {
			t.Fatalf("%s missing", w.pod)
		}
		c := a.Counters[Offpeak]
		within(t, w.pod+" allocated", c.Allocated, w.allocated, 1e-6)
		within(t, w.pod+" idle", c.Idle, w.idle, 0.3+1e-6)
		within(t, w.pod+" active", c.Active, w.active, 0.21+1e-6)
		if a.Attribution != "process" {
			t.Errorf("%s attribution %q, want process", w.pod, a.Attribution)
		}
	}
	d := s.Devices[0].Counters[Offpeak]
	within(t, "GPU allocated", d.Allocated, 60, 1e-6)
	within(t, "GPU allocated idle", d.AllocatedIdle, 0, 0.3+1e-6)
	within(t, "GPU allocated active", d.AllocatedActive, 42, 0.21+1e-6)
	within(t, "GPU gap", d.Gap, 0, 0)
}

// burst is busy at value for the first busy of every period.
func burst(period, busy time.Duration, value float64) func(time.Duration) float64 {
	return func(t time.Duration) float64 {
		if t%period < busy {
			return value
		}
		return 0
	}
}

// TestProcessShapesAgree plays the same load with per-process samples in
// either shape: one per sample period, or one per process per read at
// refreshes of 2 s and 3 s. Each pod's idle and active seconds agree with
// the truth within 2% of its time in every shape: a steady process and an
// idle one sharing a GPU, two processes stepping down (a per-read sample
// blurs a step over its refresh), and an inference server answering a
// request every 2 s (200 ms of kernels) alone on a shared GPU, which is
// idle between its bursts. The truth is at NVML's resolution: a 200 ms
// burst keeps two 1/6 s sample periods busy.
func TestProcessShapesAgree(t *testing.T) {
	t.Parallel()
	const until = 300 * time.Second
	type truth struct{ idle, active float64 }
	cases := []struct {
		name  string
		procs []shapeProc
		truth map[string]truth
	}{
		{"steady and idle", []shapeProc{
			{pid: 100, phase: 700 * time.Millisecond, util: constant(0.7)},
			{pid: 200, phase: 1900 * time.Millisecond, util: constant(0)},
		}, map[string]truth{"a": {0, 210}, "b": {300, 0}}},
		{"two steps", []shapeProc{
			{pid: 100, phase: 500 * time.Millisecond, util: steps(40*time.Second, 0.6, 0.02)},
			{pid: 200, phase: 1100 * time.Millisecond, util: steps(70*time.Second, 0.3, 0)},
		}, map[string]truth{"a": {260, 0.6*40 + 0.02*260}, "b": {230, 0.3 * 70}}},
		{"bursty alone", []shapeProc{
			{pid: 100, phase: 900 * time.Millisecond, util: burst(2*time.Second, 200*time.Millisecond, 1)},
			{pid: 200, phase: 100 * time.Millisecond, util: constant(0)},
		}, map[string]truth{"a": {250, 30}, "b": {300, 0}}},
	}
	shapes := []struct {
		name      string
		perPeriod bool
		refresh   time.Duration
	}{
		{"per-period", true, 0},
		{"per-read 2s", false, 2 * time.Second},
		{"per-read 3s", false, 3 * time.Second},
	}
	for _, tc := range cases {
		for _, sh := range shapes {
			t.Run(tc.name+"/"+sh.name, func(t *testing.T) {
				t.Parallel()
				procs := append([]shapeProc(nil), tc.procs...)
				for i := range procs {
					procs[i].phase %= max(sh.refresh, time.Millisecond)
				}
				devs := []*shapeDevice{{info: wholeGPU(0), perPeriod: sh.perPeriod, refresh: sh.refresh, procs: procs}}
				allocs := []collector.Allocation{alloc("a", uuidOf(0)+"::0"), alloc("b", uuidOf(0)+"::1")}
				s := runShapes(t, devs, allocs, fakeProcs{100: "a", 200: "b"}, newFakePods("a", "b"), until)
				for pod, w := range tc.truth {
					a := findAlloc(s, pod)
					if a == nil {
						t.Fatalf("%s missing", pod)
					}
					c := a.Counters[Offpeak]
					tol := 0.02 * until.Seconds()
					within(t, pod+" allocated", c.Allocated, until.Seconds(), 1e-3)
					within(t, pod+" idle", c.Idle, w.idle, tol)
					within(t, pod+" active", c.Active, w.active, tol)
				}
				if g := s.Devices[0].Counters[Offpeak].Gap; g != 0 {
					t.Errorf("gap %.3f s", g)
				}
			})
		}
	}
}

// TestDryRingIsIdle: a ring that runs dry while the GPU idles leaves no
// sample for idle periods, within a read and for whole reads; the reader
// then gives a sample covering the time since the ring last spoke, at the
// busy ratio another source gives. The idle time is idle, not a gap; the
// time before a read that failed stays a gap.
func TestDryRingIsIdle(t *testing.T) {
	t.Parallel()
	c := &fakeClock{t: t0}
	util := func(d time.Duration) float64 {
		switch {
		case d < 20*time.Second:
			return 0.5
		case d < 40*time.Second:
			return 0
		default:
			return burst(2*time.Second, 500*time.Millisecond, 1)(d)
		}
	}
	dev := &shapeDevice{info: wholeGPU(0), dryIdle: true, perPeriod: true, procs: []shapeProc{{pid: 1, util: util}}}
	var failed bool
	var ringSince time.Time
	src := deviceFunc(func() (collector.DeviceSnapshot, error) {
		now := c.Now()
		if now.Sub(t0) >= 30*time.Second && now.Sub(t0) < 33*time.Second {
			failed, ringSince = true, now
			return collector.DeviceSnapshot{At: now}, nil // the device left out: its read failed
		}
		rd := dev.read(now)
		rd.ProcessSamples, rd.HasProcessSamples = nil, false
		switch {
		case len(rd.Samples) > 0:
			ringSince = rd.Samples[len(rd.Samples)-1].Time
		case now.Sub(ringSince) >= time.Second:
			rd.Samples = []collector.Sample{{Time: now, Value: 0, Since: ringSince, Dry: true}}
			ringSince = now
		}
		return collector.DeviceSnapshot{At: now, Devices: []collector.DeviceReading{rd}}, nil
	})
	e, err := New(DefaultConfig(), src, &listKubelet{clock: c, allocs: []collector.Allocation{alloc("p", uuidOf(0))}}, c, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	for ; c.t.Sub(t0) <= 60*time.Second; c.t = c.t.Add(time.Second) {
		e.Poll(context.Background())
	}
	if !failed {
		t.Fatal("no read failed")
	}
	s := e.Snapshot()
	d := s.Devices[0].Counters[Offpeak]
	a := findAlloc(s, "p").Counters[Offpeak]
	// 60 s: 20 s at 0.5, 20 s idle of which the 3 s of failed reads are a
	// gap, then 20 s of 500 ms bursts every 2 s: 15 s idle, 5 s active.
	within(t, "gap", d.Gap, 3, 1e-6)
	within(t, "observed", d.Observed, 57, 1e-6)
	within(t, "allocated", a.Allocated, 57, 1e-6)
	within(t, "idle", a.Idle, 17+15, 2*period.Seconds())
	within(t, "active", a.Active, 10+5, 1e-3)
}

type deviceFunc func() (collector.DeviceSnapshot, error)

func (f deviceFunc) Read(context.Context) (collector.DeviceSnapshot, error) { return f() }

// TestGPMSinceAGap: a GPM sample covers the time since the previous one;
// when the engine missed the previous one, the time before it is a gap,
// not the new sample's.
func TestGPMSinceAGap(t *testing.T) {
	t.Parallel()
	c := &fakeClock{t: t0}
	info := collector.Device{UUID: uuidOf(0), UtilizationSource: collector.UtilizationGPM}
	var prev time.Time
	src := deviceFunc(func() (collector.DeviceSnapshot, error) {
		now := c.Now()
		rd := collector.DeviceReading{Device: info}
		if !prev.IsZero() {
			rd.Samples = []collector.Sample{{Time: now, Value: 0.8, Since: prev}}
		}
		prev = now
		if d := now.Sub(t0); d >= 10*time.Second && d < 12*time.Second {
			return collector.DeviceSnapshot{At: now}, nil // read, then left out
		}
		return collector.DeviceSnapshot{At: now, Devices: []collector.DeviceReading{rd}}, nil
	})
	e, err := New(DefaultConfig(), src, &listKubelet{clock: c, allocs: []collector.Allocation{alloc("p", uuidOf(0))}}, c, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	for ; c.t.Sub(t0) <= 20*time.Second; c.t = c.t.Add(time.Second) {
		e.Poll(context.Background())
	}
	s := e.Snapshot()
	d := s.Devices[0].Counters[Offpeak]
	// The first sample is the baseline (1 s); 12 s's covers 11 to 12.
	within(t, "gap", d.Gap, 2, 1e-6)
	within(t, "observed", d.Observed, 17, 1e-6)
	within(t, "active", findAlloc(s, "p").Counters[Offpeak].Active, 17*0.8, 1e-6)
}

// TestSettleCreditsWhatWaits: periods of a shared GPU wait for their
// processes' samples; Settle credits them as the samples in hand say.
func TestSettleCreditsWhatWaits(t *testing.T) {
	t.Parallel()
	c := &fakeClock{t: t0}
	dev := &shapeDevice{info: wholeGPU(0), refresh: 2 * time.Second, procs: []shapeProc{
		{pid: 100, phase: 1700 * time.Millisecond, util: constant(0.5)},
		{pid: 200, util: constant(0)},
	}}
	e, err := New(DefaultConfig(), &shapeDevices{clock: c, devs: []*shapeDevice{dev}},
		&listKubelet{clock: c, allocs: []collector.Allocation{alloc("a", uuidOf(0)+"::0"), alloc("b", uuidOf(0)+"::1")}},
		c, zap.NewNop(), WithPods(newFakePods("a", "b")), WithProcesses(fakeProcs{100: "a", 200: "b"}))
	if err != nil {
		t.Fatal(err)
	}
	for ; c.t.Sub(t0) <= 30*time.Second; c.t = c.t.Add(time.Second) {
		e.Poll(context.Background())
	}
	c.t = c.t.Add(-time.Second)
	before := findAlloc(e.Snapshot(), "b").Counters[Offpeak].Allocated
	// b's process is never sampled: its periods wait the whole bound.
	if wait := e.wait(&e.dev[uuidOf(0)].share); before > 30-wait.Seconds()+1 || before < 30-wait.Seconds()-1 {
		t.Errorf("before Settle: %.3f s allocated, want 30 s less the %s wait", before, wait)
	}
	e.Settle()
	within(t, "after Settle: allocated", findAlloc(e.Snapshot(), "b").Counters[Offpeak].Allocated, 30, 1e-6)
	if got := len(e.dev[uuidOf(0)].share.pending); got != 0 {
		t.Errorf("%d periods still pending", got)
	}
}

// TestHolderSetsBounded: a time-sliced GPU whose queue never runs empty,
// its holders changing every period, keeps only the holder sets its
// pending periods name, each still the set it was queued with. Reset only
// when the queue ran empty, the sets grew by one a change: on node-110 the
// heap grew 0.5 MiB every 10 minutes until an idle moment.
func TestHolderSetsBounded(t *testing.T) {
	t.Parallel()
	var sh shareState
	holdersOf := func(i int) []allocKey {
		return []allocKey{{UUID: uuidOf(0), Namespace: "ns", Pod: fmt.Sprint("pod-", i%7), Container: "c"}}
	}
	for i := range 10000 {
		sh.enqueue(pendingPeriod{from: t0.Add(time.Duration(i) * time.Second), to: t0.Add(time.Duration(i+1) * time.Second)}, holdersOf(i))
		if len(sh.pending) > 3 {
			sh.drop(1)
		}
		for j, p := range sh.pending {
			k := i - len(sh.pending) + 1 + j
			if !slices.Equal(sh.sets[p.set], holdersOf(k)) {
				t.Fatalf("after %d periods, pending period %d names %v, want %v", i+1, j, sh.sets[p.set], holdersOf(k))
			}
		}
	}
	if len(sh.sets) > 4 {
		t.Errorf("%d holder sets kept for %d pending periods", len(sh.sets), len(sh.pending))
	}
}
