package agent

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/collector"
)

// draList is an allocation source whose answer at each time since t0 is
// given by a function, as collector/dra's Resolver hands it on.
type draList struct {
	clock *fakeClock
	at    func(d time.Duration) collector.AllocationList
}

func (f *draList) List(context.Context) (collector.AllocationList, error) {
	l := f.at(f.clock.Now().Sub(t0))
	l.At = f.clock.Now()
	return l, nil
}

// draHealth is a ResourceSlice source's health, changing with time.
type draHealth struct {
	clock *fakeClock
	up    func(d time.Duration) bool
}

func (h *draHealth) Health() (bool, []error) {
	if h.up(h.clock.Now().Sub(t0)) {
		return true, nil
	}
	return false, []error{collector.NewSourceError(collector.SourceDRA, "unavailable", errors.New("connection refused"))}
}

// resolvedDRA is a DRA allocation of GPU gpu as collector/dra resolves it.
func resolvedDRA(pod, claim string, gpu int, shared bool) collector.Allocation {
	ref, _ := collector.ParseDeviceID(uuidOf(gpu))
	return collector.Allocation{Namespace: "ml", Pod: pod, Container: "main", Resource: "gpu.nvidia.com", Device: ref, Shared: shared,
		DRA: collector.DRADevice{ClaimNamespace: "ml", Claim: claim, Driver: "gpu.nvidia.com", Pool: "node-1", Device: "gpu-" + string(rune('0'+gpu))}}
}

func unresolvedProblem() error {
	return collector.NewSourceError(collector.SourceDRA, "unresolved_device", errors.New("the node's ResourceSlices are not listed yet"))
}

func newDRAEngine(t *testing.T, utils []func(time.Duration) float64, at func(time.Duration) collector.AllocationList, opts ...func(*fakeClock) Option) (*harness, *Engine) {
	t.Helper()
	c := &fakeClock{t: t0}
	h := &harness{clock: c, dev: &fakeDevices{clock: c, util: utils, buffer: 120}}
	var o []Option
	for _, f := range opts {
		o = append(o, f(c))
	}
	e, err := New(DefaultConfig(), h.dev, &draList{clock: c, at: at}, c, zap.NewNop(), o...)
	if err != nil {
		t.Fatal(err)
	}
	h.e = e
	return h, e
}

// TestUnresolvedDRADevice: while a claim's device cannot be resolved (the
// API server is down, the slices are not listed), no device's time is
// called unallocated or idle-allocated: a resolved claim's GPU is credited
// to it, every other GPU's time is unattributed. Once the claim resolves,
// its GPU is its holder's and a GPU nobody holds is unallocated again.
func TestUnresolvedDRADevice(t *testing.T) {
	t.Parallel()
	const resolveAt = 30 * time.Second
	h, _ := newDRAEngine(t,
		[]func(time.Duration) float64{constant(0), constant(0), constant(0.3)},
		func(d time.Duration) collector.AllocationList {
			l := collector.AllocationList{Allocations: []collector.Allocation{resolvedDRA("train", "train-gpu", 0, false)}}
			if d < resolveAt {
				l.Unresolved, l.Problems = 1, []error{unresolvedProblem()}
			} else {
				l.Allocations = append(l.Allocations, resolvedDRA("late", "late-gpu", 1, false))
			}
			return l
		},
		func(c *fakeClock) Option {
			return WithDRA(&draHealth{clock: c, up: func(d time.Duration) bool { return d >= resolveAt }})
		})

	s := h.run(resolveAt - time.Second)
	dra := source(s, collector.SourceDRA)
	if dra.Up || dra.Errors["unavailable"] != 30 || dra.Errors["unresolved_device"] != 30 {
		t.Errorf("dra source while down = %+v, want down with 30 unavailable and 30 unresolved_device", dra)
	}
	if n := source(s, collector.SourceKubelet).Errors["unresolved_device"]; n != 0 {
		t.Errorf("the DRA source's problems were counted under kubelet too: %d", n)
	}
	near(t, "train allocated", findAlloc(s, "train").Counters[Offpeak].Allocated, 29)
	near(t, "train idle", findAlloc(s, "train").Counters[Offpeak].Idle, 29)
	if a := findAlloc(s, "late"); a != nil {
		t.Errorf("the unresolved claim's GPU has an allocation: %+v", a)
	}
	for _, gpu := range []int{1, 2} {
		c := s.Devices[gpu].Counters[Offpeak]
		near(t, "unresolved: unallocated", c.Unallocated, 0)
		near(t, "unresolved: unallocated active", c.UnallocatedActive, 0)
		near(t, "unresolved: unattributed", c.Unattributed, 29)
		near(t, "unresolved: observed", c.Observed, 29)
	}
	near(t, "GPU 0 unattributed", s.Devices[0].Counters[Offpeak].Unattributed, 0)

	s = h.run(60 * time.Second)
	if !source(s, collector.SourceDRA).Up {
		t.Error("dra source still down after it recovered")
	}
	late := findAlloc(s, "late").Counters[Offpeak]
	near(t, "late allocated", late.Allocated, 31)
	near(t, "late idle", late.Idle, 31)
	g1, g2 := s.Devices[1].Counters[Offpeak], s.Devices[2].Counters[Offpeak]
	near(t, "GPU 1 unattributed", g1.Unattributed, 29)
	near(t, "GPU 1 unallocated", g1.Unallocated, 0)
	near(t, "GPU 2 unattributed", g2.Unattributed, 29)
	near(t, "GPU 2 unallocated", g2.Unallocated, 31)
	near(t, "GPU 2 unallocated active", g2.UnallocatedActive, 0.3*31)
	near(t, "train allocated", findAlloc(s, "train").Counters[Offpeak].Allocated, 60)
}

// TestDRAWithoutResolver: DRA devices that reach the engine unresolved
// (no collector/dra in front of the kubelet) are counted, and make the
// node's other devices' time unattributed, not unallocated.
func TestDRAWithoutResolver(t *testing.T) {
	t.Parallel()
	raw := collector.Allocation{Namespace: "ml", Pod: "p", Container: "main", Resource: "gpu.nvidia.com",
		Device: collector.DeviceRef{ID: "gpu.nvidia.com/node-1/gpu-0", Kind: collector.RefDRA},
		DRA:    collector.DRADevice{ClaimNamespace: "ml", Claim: "c", Driver: "gpu.nvidia.com", Pool: "node-1", Device: "gpu-0"}}
	h, _ := newDRAEngine(t, []func(time.Duration) float64{constant(0), constant(0)},
		func(time.Duration) collector.AllocationList {
			return collector.AllocationList{Allocations: []collector.Allocation{raw}}
		})
	s := h.run(10 * time.Second)
	if n := source(s, collector.SourceKubelet).Errors["unresolved_device"]; n != 11 {
		t.Errorf("kubelet unresolved_device = %d, want 11", n)
	}
	for gpu := range 2 {
		c := s.Devices[gpu].Counters[Offpeak]
		near(t, "unallocated", c.Unallocated, 0)
		near(t, "unattributed", c.Unattributed, 10)
	}
}

// TestDRAUnknownUUID: a slice that names a UUID NVML has not listed (a MIG
// device NVML has not enumerated yet) leaves the claim unresolved.
func TestDRAUnknownUUID(t *testing.T) {
	t.Parallel()
	h, _ := newDRAEngine(t, []func(time.Duration) float64{constant(0)},
		func(time.Duration) collector.AllocationList {
			return collector.AllocationList{Allocations: []collector.Allocation{resolvedDRA("p", "c", 5, false)}}
		})
	s := h.run(10 * time.Second)
	c := s.Devices[0].Counters[Offpeak]
	near(t, "unallocated", c.Unallocated, 0)
	near(t, "unattributed", c.Unattributed, 10)
	if n := source(s, collector.SourceKubelet).Errors["unknown_device"]; n != 11 {
		t.Errorf("unknown_device = %d, want 11", n)
	}
}

// TestDRASharingAndConflict: a claim several pods share (or a device with
// a share ID) is shared like time-slicing, each holder credited its own
// time; two claims on one device without a share ID are a conflict, as two
// device-plugin holders of one exclusive GPU are.
func TestDRASharingAndConflict(t *testing.T) {
	t.Parallel()
	h, _ := newDRAEngine(t, []func(time.Duration) float64{constant(0.8), constant(0.5)},
		func(time.Duration) collector.AllocationList {
			return collector.AllocationList{Allocations: []collector.Allocation{
				resolvedDRA("old", "old-claim", 0, false), resolvedDRA("new", "new-claim", 0, false),
				resolvedDRA("nb-a", "shared", 1, true), resolvedDRA("nb-b", "shared", 1, true),
			}}
		})
	s := h.run(40 * time.Second)
	if n := source(s, collector.SourceKubelet).Errors["exclusive_conflict"]; n != 41 {
		t.Errorf("exclusive_conflict = %d, want once per list (41)", n)
	}
	for _, pod := range []string{"old", "new"} {
		a := findAlloc(s, pod)
		near(t, pod+" allocated", a.Counters[Offpeak].Allocated, 20)
		if a.Shared {
			t.Errorf("%s: an exclusive DRA device held twice is not shared", pod)
		}
	}
	for _, pod := range []string{"nb-a", "nb-b"} {
		a := findAlloc(s, pod)
		near(t, pod+" allocated", a.Counters[Offpeak].Allocated, 40)
		if !a.Shared {
			t.Errorf("%s: a shared claim's device is not shared", pod)
		}
	}
}

// TestMixedNode: device-plugin and DRA GPUs on one node are both
// attributed, a GPU neither holds is unallocated, and the DRA allocation
// carries its claim.
func TestMixedNode(t *testing.T) {
	t.Parallel()
	plugin, _ := collector.ParseDeviceID(uuidOf(0))
	h, _ := newDRAEngine(t, []func(time.Duration) float64{constant(0.6), constant(0), constant(0)},
		func(time.Duration) collector.AllocationList {
			return collector.AllocationList{Allocations: []collector.Allocation{
				{Namespace: "ml", Pod: "dp", Container: "main", Resource: "nvidia.com/gpu", Device: plugin},
				resolvedDRA("dra", "dra-gpu", 1, false),
			}}
		})
	s := h.run(20 * time.Second)
	dp, dra := findAlloc(s, "dp"), findAlloc(s, "dra")
	near(t, "dp active", dp.Counters[Offpeak].Active, 12)
	near(t, "dra idle", dra.Counters[Offpeak].Idle, 20)
	near(t, "GPU 2 unallocated", s.Devices[2].Counters[Offpeak].Unallocated, 20)
	if !dp.DRA.IsZero() || dra.DRA.Claim != "dra-gpu" || dra.DRA.Device != "gpu-1" || dra.Resource != "gpu.nvidia.com" || dra.Shared {
		t.Errorf("allocations: %+v / %+v", dp, dra)
	}
}

// TestUnresolvedDRAWithProcesses: with process attribution, the processes
// on a GPU whose holder is unknown (an unresolved claim's) are not work
// nobody owns: no unallocated activity is counted for them.
func TestUnresolvedDRAWithProcesses(t *testing.T) {
	t.Parallel()
	c := &fakeClock{t: t0}
	devs := &richDevices{clock: c, devs: []*richDevice{
		{info: wholeGPU(0), util: constant(0.5), procs: []gpuProc{{pid: 7, memory: 1 << 30, util: constant(0.5)}}},
	}}
	list := &draList{clock: c, at: func(time.Duration) collector.AllocationList {
		return collector.AllocationList{Unresolved: 1}
	}}
	e, err := New(DefaultConfig(), devs, list, c, zap.NewNop(),
		WithPods(newFakePods("late")), WithProcesses(fakeProcs{7: "late"}))
	if err != nil {
		t.Fatal(err)
	}
	for ; c.t.Sub(t0) <= 10*time.Second; c.t = c.t.Add(time.Second) {
		e.Poll(context.Background())
	}
	d := e.Snapshot().Devices[0]
	near(t, "unattributed", d.Counters[Offpeak].Unattributed, 10)
	near(t, "unallocated", d.Counters[Offpeak].Unallocated, 0)
	near(t, "unallocated active", d.Counters[Offpeak].UnallocatedActive, 0)
	if d.HasUnattributedMemory {
		t.Errorf("the memory of a GPU whose holder is unknown is called unattributed: %d bytes", d.UnattributedMemoryBytes)
	}
}
