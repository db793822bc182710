package agent

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/collector"
)

// gpuProc is a process on a simulated device: util is its busy ratio.
type gpuProc struct {
	pid    uint32
	memory uint64
	util   func(time.Duration) float64
	// memoryUnknown: NVML said NVML_VALUE_NOT_AVAILABLE for its memory.
	memoryUnknown bool
}

// richDevice is a device of richDevices: samples from util, or — for a
// device whose source is not "samples" — one sample per poll.
type richDevice struct {
	info  collector.Device
	util  func(time.Duration) float64
	procs []gpuProc
	last  time.Time
}

// richDevices produces device samples on the 1/6 s grid plus per-process
// samples on the same grid for processes whose util is above zero, as NVML
// lists only active processes.
type richDevices struct {
	clock *fakeClock
	devs  []*richDevice
}

func (f *richDevices) Read(context.Context) (collector.DeviceSnapshot, error) {
	now := f.clock.Now()
	snap := collector.DeviceSnapshot{At: now}
	for _, d := range f.devs {
		rd := collector.DeviceReading{Device: d.info, HasProcesses: true, HasProcessSamples: d.info.ParentUUID == "" && !d.info.MIGEnabled}
		for _, p := range d.procs {
			rd.Processes = append(rd.Processes, collector.Process{PID: p.pid, UsedMemoryBytes: p.memory, MemoryUnknown: p.memoryUnknown})
		}
		switch {
		case d.info.MIGEnabled, d.info.UtilizationSource == collector.UtilizationNone:
		case d.info.UtilizationSource == collector.UtilizationGPM:
			// One GPM sample per poll, covering the time since the last.
			if !d.last.IsZero() {
				rd.Samples = []collector.Sample{{Time: now, Value: d.util(now.Sub(t0) - time.Millisecond)}}
			} else {
				rd.Samples = []collector.Sample{{Time: now}}
			}
			d.last = now
		default:
			if d.last.IsZero() {
				d.last = t0.Add(-20 * period) // the driver's ring holds earlier samples
			}
			for k := int64(d.last.Sub(t0)/period) + 1; ; k++ {
				ts := t0.Add(time.Duration(k) * period)
				if ts.After(now) {
					break
				}
				mid := ts.Sub(t0) - period/2
				rd.Samples = append(rd.Samples, collector.Sample{Time: ts, Value: d.util(mid)})
				for _, p := range d.procs {
					if v := p.util(mid); v > 0 {
						rd.ProcessSamples = append(rd.ProcessSamples, collector.ProcessSample{PID: p.pid, Time: ts, Value: v})
					}
				}
				d.last = ts
			}
		}
		snap.Devices = append(snap.Devices, rd)
	}
	return snap, nil
}

// listKubelet lists fixed allocations for the whole run, except those whose
// pod the pod source says has finished.
type listKubelet struct {
	clock  *fakeClock
	allocs []collector.Allocation
}

func (f *listKubelet) List(context.Context) (collector.AllocationList, error) {
	return collector.AllocationList{At: f.clock.Now(), Allocations: f.allocs}, nil
}

func alloc(pod, deviceID string) collector.Allocation {
	ref, err := collector.ParseDeviceID(deviceID)
	if err != nil {
		panic(err)
	}
	res := "nvidia.com/gpu"
	if ref.Replicated {
		res = "nvidia.com/gpu.shared"
	}
	return collector.Allocation{Namespace: "ml", Pod: pod, Container: "main", Resource: res, Device: ref, Shared: ref.Replicated}
}

// fakePods knows pods by name; pod UIDs are "uid-<name>".
type fakePods struct {
	pods map[string]collector.Pod
}

func newFakePods(names ...string) *fakePods {
	f := &fakePods{pods: map[string]collector.Pod{}}
	for _, n := range names {
		f.pods[n] = collector.Pod{UID: "uid-" + n, Namespace: "ml", Name: n, Phase: "Running",
			WorkloadKind: "Job", Workload: n + "-job", Model: "llama",
			ContainerIDs: map[string]string{"main": fmt.Sprintf("%064x", len(n))}}
	}
	return f
}

func (f *fakePods) Pod(ns, name string) (collector.Pod, bool) {
	p, ok := f.pods[name]
	return p, ok && ns == "ml"
}

func (f *fakePods) PodByUID(uid string) (collector.Pod, bool) {
	for _, p := range f.pods {
		if p.UID == uid {
			return p, true
		}
	}
	return collector.Pod{}, false
}

// fakeProcs maps PIDs to pods: pid → pod name ("" = not in a pod); every
// process's command line is cmdline.
type fakeProcs map[uint32]string

var cmdline = []string{"vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--api-key", "sk-secret-123"}

func (f fakeProcs) Resolve(pids []uint32) (map[uint32]collector.ProcessInfo, []error) {
	out := map[uint32]collector.ProcessInfo{}
	for _, pid := range pids {
		if pod, ok := f[pid]; ok && pod != "" {
			out[pid] = collector.ProcessInfo{PID: pid, PodUID: "uid-" + pod, ContainerID: fmt.Sprintf("%064x", len(pod)), Cmdline: cmdline}
		} else {
			out[pid] = collector.ProcessInfo{PID: pid, Cmdline: cmdline}
		}
	}
	return out, nil
}

// hidden is a resolver that cannot see one PID, as without hostPID.
type hidden struct {
	fakeProcs
	pid uint32
}

func (h hidden) Resolve(pids []uint32) (map[uint32]collector.ProcessInfo, []error) {
	out, errs := h.fakeProcs.Resolve(pids)
	delete(out, h.pid)
	return out, errs
}

func wholeGPU(i int) collector.Device {
	return collector.Device{UUID: uuidOf(i), GPU: i, UtilizationSource: collector.UtilizationSamples}
}

func runRich(t *testing.T, devs []*richDevice, allocs []collector.Allocation, until time.Duration, opts ...Option) *Snapshot {
	t.Helper()
	c := &fakeClock{t: t0}
	e, err := New(DefaultConfig(), &richDevices{clock: c, devs: devs}, &listKubelet{clock: c, allocs: allocs}, c, zap.NewNop(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	for {
		e.Poll(context.Background())
		if c.t.Sub(t0) >= until {
			return e.Snapshot()
		}
		c.t = c.t.Add(time.Second)
	}
}

func TestSharedGPUProcessAttribution(t *testing.T) {
	t.Parallel()
	// Two pods time-slice GPU 0: "busy" runs at 70%, "idle" holds its slice
	// and does nothing. A process outside Kubernetes uses 20% of GPU 1,
	// which "solo" holds exclusively and uses at 50%.
	devs := func() []*richDevice {
		return []*richDevice{
			{info: wholeGPU(0), util: constant(0.7), procs: []gpuProc{
				{pid: 100, memory: 10 << 30, util: constant(0.7)},
				{pid: 200, memory: 2 << 30, util: constant(0)},
			}},
			{info: wholeGPU(1), util: constant(0.7), procs: []gpuProc{
				{pid: 300, memory: 5 << 30, util: constant(0.5)},
				{pid: 999, memory: 1 << 30, util: constant(0.2)},
			}},
			{info: wholeGPU(2), util: constant(0), procs: []gpuProc{
				{pid: 400, memory: 1 << 30, util: constant(0)},
				{pid: 500, memory: 1 << 30, util: constant(0)},
			}},
		}
	}
	allocs := []collector.Allocation{
		alloc("busy", uuidOf(0)+"::0"), alloc("idle", uuidOf(0)+"::1"), alloc("solo", uuidOf(1)),
		alloc("nap-a", uuidOf(2)+"::0"), alloc("nap-b", uuidOf(2)+"::1"),
	}
	procs := fakeProcs{100: "busy", 200: "idle", 300: "solo", 400: "nap-a", 500: "nap-b", 999: ""}
	pods := newFakePods("busy", "idle", "solo", "nap-a", "nap-b")
	// A GPU's own time counts once however many pods share it: GPU 0 is
	// allocated 60 s (not 120), busy at 0.7 and never idle because one of
	// its holders works; GPU 2 is idle because both of its holders are.
	device := map[int][3]float64{0: {60, 0, 42}, 1: {60, 0, 42}, 2: {60, 60, 0}}

	type want struct {
		allocated, idle, active float64
		attribution             string
		memory                  uint64
		hasMemory               bool
	}
	tests := []struct {
		name       string
		opts       []Option
		want       map[string]want
		unattrMem  map[int]uint64 // by GPU; absent: no gauge
		unallocAct map[int]float64
	}{
		{
			name: "with process attribution",
			opts: []Option{WithPods(pods), WithProcesses(procs)},
			want: map[string]want{
				"busy": {allocated: 60, idle: 0, active: 42, attribution: "process", memory: 10 << 30, hasMemory: true},
				"idle": {allocated: 60, idle: 60, active: 0, attribution: "process", memory: 2 << 30, hasMemory: true},
				"solo": {allocated: 60, idle: 0, active: 42, attribution: "device", memory: 5 << 30, hasMemory: true},
			},
			unattrMem:  map[int]uint64{0: 0, 1: 1 << 30, 2: 0},
			unallocAct: map[int]float64{0: 0, 1: 12},
		},
		{
			// Without hostPID the agent cannot see pid 200: rather than call
			// its pod idle, GPU 0 falls back to the device's samples.
			name: "a process that cannot be resolved",
			opts: []Option{WithPods(pods), WithProcesses(hidden{procs, 200})},
			want: map[string]want{
				"busy": {allocated: 60, idle: 0, active: 42, attribution: "device"},
				"idle": {allocated: 60, idle: 0, active: 42, attribution: "device"},
				"solo": {allocated: 60, idle: 0, active: 42, attribution: "device", memory: 5 << 30, hasMemory: true},
			},
			unattrMem:  map[int]uint64{1: 1 << 30, 2: 0},
			unallocAct: map[int]float64{0: 0, 1: 12},
		},
		{
			name: "without a pod source: the device's samples, marked device",
			want: map[string]want{
				"busy": {allocated: 60, idle: 0, active: 42, attribution: "device"},
				"idle": {allocated: 60, idle: 0, active: 42, attribution: "device"},
				"solo": {allocated: 60, idle: 0, active: 42, attribution: "device", memory: 6 << 30, hasMemory: true},
			},
			unattrMem:  map[int]uint64{},
			unallocAct: map[int]float64{0: 0, 1: 0},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := runRich(t, devs(), allocs, 60*time.Second, tc.opts...)
			for pod, w := range tc.want {
				a := findAlloc(s, pod)
				if a == nil {
					t.Fatalf("%s missing", pod)
				}
				c := a.Counters[Offpeak]
				near(t, pod+" allocated", c.Allocated, w.allocated)
				near(t, pod+" idle", c.Idle, w.idle)
				near(t, pod+" active", c.Active, w.active)
				if a.Attribution != w.attribution || a.HasMemory != w.hasMemory || a.MemoryUsedBytes != w.memory {
					t.Errorf("%s attribution %q memory %v/%d, want %q %v/%d", pod, a.Attribution, a.HasMemory, a.MemoryUsedBytes, w.attribution, w.hasMemory, w.memory)
				}
				if len(tc.opts) > 0 && (a.Workload != pod+"-job" || a.WorkloadKind != "Job" || a.Model != "llama") {
					t.Errorf("%s identity %q/%q/%q, want Job/%s-job/llama", pod, a.WorkloadKind, a.Workload, a.Model, pod)
				}
			}
			for _, d := range s.Devices {
				want, ok := tc.unattrMem[d.GPU]
				if d.HasUnattributedMemory != ok || d.UnattributedMemoryBytes != want {
					t.Errorf("gpu %d unattributed memory %v/%d, want %v/%d", d.GPU, d.HasUnattributedMemory, d.UnattributedMemoryBytes, ok, want)
				}
				c := d.Counters[Offpeak]
				near(t, fmt.Sprintf("gpu %d unallocated active", d.GPU), c.UnallocatedActive, tc.unallocAct[d.GPU])
				w := device[d.GPU]
				near(t, fmt.Sprintf("gpu %d allocated", d.GPU), c.Allocated, w[0])
				near(t, fmt.Sprintf("gpu %d allocated idle", d.GPU), c.AllocatedIdle, w[1])
				near(t, fmt.Sprintf("gpu %d allocated active", d.GPU), c.AllocatedActive, w[2])
				near(t, fmt.Sprintf("gpu %d observed = allocated + unallocated", d.GPU), c.Observed, c.Allocated+c.Unallocated)
			}
			if len(tc.opts) > 0 {
				if src := source(s, collector.SourceProc); !src.Up {
					t.Errorf("proc source down: %+v", src)
				}
				if src := source(s, collector.SourcePods); !src.Up {
					t.Errorf("pods source down: %+v", src)
				}
			} else if slices.ContainsFunc(s.Sources, func(x SourceSnapshot) bool { return x.Name == collector.SourceProc }) {
				t.Error("proc source exported without process attribution")
			}
		})
	}
}

func TestMIGDevices(t *testing.T) {
	t.Parallel()
	// GKE names the GPU by its minor number, 2 here, not its index.
	parent := collector.Device{UUID: uuidOf(0), GPU: 0, UtilizationSource: collector.UtilizationNone, MIGEnabled: true, Minor: 2, HasMinor: true}
	// Instances of 3, 2 and 1 of the GPU's 7 slices; one slice is free.
	sliceOf := map[int]int{1: 3, 2: 2, 5: 1}
	mig := func(gi int, source string) collector.Device {
		return collector.Device{UUID: fmt.Sprintf("MIG-%08d-0000-0000-0000-000000000000", gi), GPU: 0, ParentUUID: parent.UUID,
			MIGProfile: fmt.Sprintf("%dg.40gb", sliceOf[gi]), GPUInstance: gi, ComputeInstance: 0, UtilizationSource: source,
			Slices: sliceOf[gi], ParentSlices: 7, Minor: 2, HasMinor: true}
	}
	devs := []*richDevice{
		{info: parent},
		{info: mig(1, collector.UtilizationGPM), util: steps(30*time.Second, 0.9, 0)},
		{info: mig(2, collector.UtilizationGPM), util: constant(0.01)},
		{info: mig(5, collector.UtilizationNone)},
	}
	allocs := []collector.Allocation{
		alloc("by-uuid", mig(1, "").UUID),
		alloc("legacy", fmt.Sprintf("MIG-%s/2/0", parent.UUID)),
		alloc("gke", "nvidia2/gi5"),
	}
	s := runRich(t, devs, allocs, 60*time.Second)
	for _, w := range []struct {
		pod                     string
		allocated, idle, active float64
		gpu                     int
	}{
		// GPM's first sample is a baseline; then one period per poll.
		{"by-uuid", 60, 30, 30 * 0.9, 0},
		{"legacy", 60, 60, 0.6, 0},
		// No activity source: allocated time counts, idle and active never.
		{"gke", 60, 0, 0, 0},
	} {
		a := findAlloc(s, w.pod)
		if a == nil {
			t.Fatalf("%s not resolved", w.pod)
		}
		c := a.Counters[Offpeak]
		near(t, w.pod+" allocated", c.Allocated, w.allocated)
		near(t, w.pod+" idle", c.Idle, w.idle)
		near(t, w.pod+" active", c.Active, w.active)
		if a.GPU != w.gpu {
			t.Errorf("%s gpu %d, want %d", w.pod, a.GPU, w.gpu)
		}
	}
	// The GPU counts its own time once: each instance's time weighted by
	// its share, and the free slice as observed and unallocated.
	for _, d := range s.Devices {
		if !d.MIGEnabled {
			continue
		}
		c := d.Counters[Offpeak]
		near(t, "GPU observed", c.Observed, 60)
		near(t, "GPU allocated", c.Allocated, 60*6.0/7)
		near(t, "GPU unallocated", c.Unallocated, 60*1.0/7)
		near(t, "GPU allocated idle", c.AllocatedIdle, 30*3.0/7+60*2.0/7)
		near(t, "GPU allocated active", c.AllocatedActive, 27*3.0/7+0.6*2.0/7)
		near(t, "GPU idle", c.Idle, 30*3.0/7+60*2.0/7)
	}
	if n := source(s, collector.SourceKubelet).Errors["unresolved_device"]; n != 0 {
		t.Errorf("%d unresolved devices", n)
	}
}

func TestTerminalPodsStopAccruing(t *testing.T) {
	t.Parallel()
	pods := newFakePods("done", "running")
	p := pods.pods["done"]
	p.Phase = "Succeeded"
	pods.pods["done"] = p
	devs := []*richDevice{{info: wholeGPU(0), util: constant(0)}, {info: wholeGPU(1), util: constant(0)}}
	s := runRich(t, devs, []collector.Allocation{alloc("done", uuidOf(0)), alloc("running", uuidOf(1))}, 20*time.Second, WithPods(pods))
	if a := findAlloc(s, "done"); a != nil {
		t.Errorf("a Succeeded pod still listed by the kubelet accrued %+v", a.Counters[Offpeak])
	}
	near(t, "gpu 0 unallocated", s.Devices[0].Counters[Offpeak].Unallocated, 20)
	a := findAlloc(s, "running")
	if a == nil {
		t.Fatal("running pod missing")
	}
	near(t, "running allocated", a.Counters[Offpeak].Allocated, 20)
}

func TestOverflowGuard(t *testing.T) {
	t.Parallel()
	c := &fakeClock{t: t0}
	devs := []*richDevice{{info: wholeGPU(0), util: constant(0)}, {info: wholeGPU(1), util: constant(0)}}
	allocs := []collector.Allocation{
		alloc("a", uuidOf(0)+"::0"), alloc("b", uuidOf(0)+"::1"), alloc("c", uuidOf(0)+"::2"), alloc("d", uuidOf(1)),
	}
	cfg := DefaultConfig()
	cfg.MaxAllocations = 2
	e, err := New(cfg, &richDevices{clock: c, devs: devs}, &listKubelet{clock: c, allocs: allocs}, c, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i <= 10; i++ {
		e.Poll(context.Background())
		c.t = c.t.Add(time.Second)
	}
	s := e.Snapshot()
	var pods []string
	for _, a := range s.Allocations {
		pods = append(pods, a.UUID[:12]+"/"+a.Pod)
	}
	want := []string{"GPU-00000000/__overflow__", "GPU-00000000/a", "GPU-00000000/b", "GPU-00000001/__overflow__"}
	if !slices.Equal(pods, want) {
		t.Errorf("series %v, want %v", pods, want)
	}
	// c and d are folded, each counted once.
	if s.Overflowed != 2 {
		t.Errorf("overflowed %d, want 2", s.Overflowed)
	}
	for _, a := range s.Allocations {
		near(t, a.Pod+" allocated", a.Counters[Offpeak].Allocated, 10)
	}
}

func TestModelFromCommandLine(t *testing.T) {
	t.Parallel()
	pods := newFakePods("labelled", "bare")
	p := pods.pods["bare"]
	p.Model = "" // no model label: the command line names it
	pods.pods["bare"] = p
	devs := []*richDevice{
		{info: wholeGPU(0), util: constant(0.5), procs: []gpuProc{{pid: 10, memory: 1 << 30, util: constant(0.5)}}},
		{info: wholeGPU(1), util: constant(0.5), procs: []gpuProc{{pid: 20, memory: 1 << 30, util: constant(0.5)}}},
	}
	s := runRich(t, devs, []collector.Allocation{alloc("labelled", uuidOf(0)), alloc("bare", uuidOf(1))}, 5*time.Second,
		WithPods(pods), WithProcesses(fakeProcs{10: "labelled", 20: "bare"}))
	for pod, want := range map[string]string{"labelled": "llama", "bare": "meta-llama/Llama-3.1-8B-Instruct"} {
		if a := findAlloc(s, pod); a == nil || a.Model != want {
			t.Errorf("%s model = %+v, want %q", pod, a, want)
		}
	}
	if dump := fmt.Sprintf("%+v", *s); strings.Contains(dump, "sk-secret") {
		t.Error("a secret from a command line reached the snapshot")
	}
}

// reusedPID is a resolver with one process, PID 20 in pod "bare", whose
// start time and command line the test sets. Like a reader that reuses
// its buffers, it answers every process's command line in one slice.
type reusedPID struct {
	start   uint64
	cmdline []string
}

func (r *reusedPID) Resolve(pids []uint32) (map[uint32]collector.ProcessInfo, []error) {
	out := map[uint32]collector.ProcessInfo{}
	for _, pid := range pids {
		if pid == 20 {
			out[pid] = collector.ProcessInfo{PID: pid, StartTime: r.start, PodUID: "uid-bare",
				ContainerID: fmt.Sprintf("%064x", len("bare")), Cmdline: r.cmdline}
		}
	}
	return out, nil
}

// TestModelCachePIDReused: a command line that names no model is parsed
// once per process, told apart by PID and start time, so that a process
// that reuses the PID is parsed afresh.
func TestModelCachePIDReused(t *testing.T) {
	t.Parallel()
	pods := newFakePods("bare")
	p := pods.pods["bare"]
	p.Model = ""
	pods.pods["bare"] = p
	devs := []*richDevice{{info: wholeGPU(0), util: constant(0.5), procs: []gpuProc{{pid: 20, memory: 1 << 30, util: constant(0.5)}}}}
	procs := &reusedPID{start: 100, cmdline: []string{"python3", "serve.py", "--port", "8000"}}
	c := &fakeClock{t: t0}
	e, err := New(DefaultConfig(), &richDevices{clock: c, devs: devs}, &listKubelet{clock: c, allocs: []collector.Allocation{alloc("bare", uuidOf(0))}},
		c, zap.NewNop(), WithPods(pods), WithProcesses(procs))
	if err != nil {
		t.Fatal(err)
	}
	model := func(polls int) string {
		for range polls {
			e.Poll(context.Background())
			c.t = c.t.Add(time.Second)
		}
		return findAlloc(e.Snapshot(), "bare").Model
	}
	if m := model(3); m != "" {
		t.Fatalf("model %q from a command line that names none", m)
	}
	// The same process, its command line answered in place: not parsed again.
	copy(procs.cmdline, []string{"vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"})
	procs.cmdline = procs.cmdline[:3]
	if m := model(2); m != "" {
		t.Errorf("model %q: the process was parsed again", m)
	}
	// The PID reused by a process that started later.
	procs.start = 200
	if m, want := model(2), "meta-llama/Llama-3.1-8B-Instruct"; m != want {
		t.Errorf("model %q after the PID was reused, want %q", m, want)
	}
}
