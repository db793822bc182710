package agent

import (
	"context"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/collector"
)

// TestGKEMinorNumbers: GKE's device plugin names a GPU nvidia<minor>, and
// its time-sharing shares nvidia<minor>/vgpu<R>; a node whose minor
// numbers are not its indices (gvisor #9389: index 0 is minor 2) credits
// each pod with the GPU of that minor number, not of that index.
func TestGKEMinorNumbers(t *testing.T) {
	t.Parallel()
	gpu := func(i, minor int) collector.Device {
		d := wholeGPU(i)
		d.Minor, d.HasMinor = minor, true
		return d
	}
	devs := []*richDevice{
		{info: gpu(0, 1), util: constant(0.8)},
		{info: gpu(1, 0), util: constant(0)},
	}
	share := alloc("share", "nvidia1/vgpu3")
	share.Resource = "nvidia.com/gpu" // GKE hands shares out as nvidia.com/gpu
	s := runRich(t, devs, []collector.Allocation{alloc("whole", "nvidia0"), share}, 30*time.Second)
	for _, w := range []struct {
		pod    string
		uuid   string
		gpu    int
		shared bool
		active float64
	}{
		{"whole", uuidOf(1), 1, false, 0},
		{"share", uuidOf(0), 0, true, 30 * 0.8},
	} {
		a := findAlloc(s, w.pod)
		if a == nil {
			t.Fatalf("%s not resolved", w.pod)
		}
		if a.UUID != w.uuid || a.GPU != w.gpu || a.Shared != w.shared {
			t.Errorf("%s on %s (gpu %d, shared %v), want %s (gpu %d, shared %v)", w.pod, a.UUID, a.GPU, a.Shared, w.uuid, w.gpu, w.shared)
		}
		near(t, w.pod+" allocated", a.Counters[Offpeak].Allocated, 30)
		near(t, w.pod+" active", a.Counters[Offpeak].Active, w.active)
	}
}

// TestGKEMinorUnknown: a GPU whose minor number NVML did not give is not
// taken for the one of that index: the ID is unresolved.
func TestGKEMinorUnknown(t *testing.T) {
	t.Parallel()
	devs := []*richDevice{{info: wholeGPU(0), util: constant(0.5)}}
	s := runRich(t, devs, []collector.Allocation{alloc("p", "nvidia0")}, 10*time.Second)
	if a := findAlloc(s, "p"); a != nil {
		t.Errorf("nvidia0 resolved to %s without a minor number", a.UUID)
	}
}

// migDevices is a MIG-enabled GPU and its instances, as the reader lists
// them at some time.
type migDevices struct {
	clock *fakeClock
	at    func(time.Duration) []collector.Device
}

func (f *migDevices) Read(context.Context) (collector.DeviceSnapshot, error) {
	now := f.clock.Now()
	snap := collector.DeviceSnapshot{At: now}
	for _, d := range f.at(now.Sub(t0)) {
		snap.Devices = append(snap.Devices, collector.DeviceReading{Device: d})
	}
	return snap, nil
}

// placedMIG is a MIG instance of parent uuidOf(0) with a placement, and
// known when known is set.
func placedMIG(n, gi, profileID, start int, profile string, known bool) collector.Device {
	return collector.Device{UUID: uuidOf(100 + n), GPU: 0, ParentUUID: uuidOf(0), MIGProfile: profile, GPUInstance: gi,
		UtilizationSource: collector.UtilizationNone, Slices: 1, ParentSlices: 7,
		GIProfileID: profileID, PlacementStart: start, HasPlacement: known}
}

func placementAlloc(pod, device string, profileID, start int, profile string) collector.Allocation {
	d := collector.DRADevice{ClaimNamespace: "ml", Claim: pod, Driver: "gpu.nvidia.com", Pool: "node", Device: device}
	return collector.Allocation{Namespace: "ml", Pod: pod, Container: "main", Resource: "gpu.nvidia.com", DRA: d,
		Device: collector.DeviceRef{ID: device, Kind: collector.RefMIGPlacement, UUID: uuidOf(0), GIProfile: profileID, Placement: start, Profile: profile}}
}

// TestDynamicMIGPlacement: a dynamic MIG partition, which NVIDIA's driver
// names by profile ID and placement and gives no uuid, is the live MIG
// instance NVML lists with that profile and placement on its parent, as
// the driver itself finds it; two instances of one profile are told apart
// by placement. Before NVML lists the instance it is held but unresolved
// and counted; made again at the same placement, it is the new instance,
// never the destroyed one NVML no longer lists.
func TestDynamicMIGPlacement(t *testing.T) {
	t.Parallel()
	parent := collector.Device{UUID: uuidOf(0), GPU: 0, UtilizationSource: collector.UtilizationNone, MIGEnabled: true}
	c := &fakeClock{t: t0}
	devs := &migDevices{clock: c, at: func(d time.Duration) []collector.Device {
		out := []collector.Device{parent, placedMIG(1, 9, 19, 0, "1g.10gb", true)}
		// The instance at placement 3 is destroyed at 15s and made again
		// at 16s, a device of its own with the same GPU instance ID.
		switch {
		case d < 15*time.Second:
			out = append(out, placedMIG(2, 10, 19, 3, "1g.10gb", true))
		case d >= 16*time.Second:
			out = append(out, placedMIG(4, 10, 19, 3, "1g.10gb", true))
		}
		if d >= 10*time.Second {
			out = append(out, placedMIG(3, 11, 19, 5, "1g.10gb", true))
		}
		return out
	}}
	kube := &listKubelet{clock: c, allocs: []collector.Allocation{
		placementAlloc("a", "gpu-0-mig-1g10gb-19-3", 19, 3, "1g.10gb"),
		placementAlloc("b", "gpu-0-mig-1g10gb-19-0", 19, 0, "1g.10gb"),
		placementAlloc("late", "gpu-0-mig-1g10gb-19-5", 19, 5, "1g.10gb"),
	}}
	e, err := New(DefaultConfig(), devs, kube, c, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	var unresolved int
	for range 21 {
		e.Poll(context.Background())
		if findAlloc(e.Snapshot(), "late") == nil {
			unresolved++
		}
		c.t = c.t.Add(time.Second)
	}
	s := e.Snapshot()
	for pod, uuid := range map[string]string{"a": uuidOf(104), "b": uuidOf(101), "late": uuidOf(103)} {
		i := slices.IndexFunc(s.Allocations, func(a *AllocationSnapshot) bool { return a.Pod == pod && a.Live })
		if i < 0 || s.Allocations[i].UUID != uuid {
			t.Errorf("%s's live allocation: %d of %+v, want one on %s", pod, i, s.Allocations, uuid)
		}
	}
	if unresolved != 10 {
		t.Errorf("late was unresolved for %d polls, want the 10 before NVML listed its instance", unresolved)
	}
	if got := source(s, collector.SourceKubelet).Errors["unresolved_device"]; got != 11 {
		t.Errorf("kubelet unresolved_device = %d, want 11: one per poll before NVML listed late's instance, one while a's was made again", got)
	}
	// While a's instance was gone its old series got no time after it went.
	for _, a := range s.Allocations {
		if a.Pod == "a" && a.UUID == uuidOf(102) && a.Counters[Offpeak].Allocated > 15.5 {
			t.Errorf("a credited %.1f s on its destroyed instance", a.Counters[Offpeak].Allocated)
		}
	}
}

// TestDynamicMIGUnprivileged: without the privilege GetGpuInstanceById
// needs, NVML does not say where an instance sits; a partition is the one
// instance of its profile on its parent, and with two of that profile
// neither is guessed.
func TestDynamicMIGUnprivileged(t *testing.T) {
	t.Parallel()
	parent := collector.Device{UUID: uuidOf(0), GPU: 0, UtilizationSource: collector.UtilizationNone, MIGEnabled: true}
	c := &fakeClock{t: t0}
	devs := &migDevices{clock: c, at: func(time.Duration) []collector.Device {
		return []collector.Device{parent,
			placedMIG(1, 2, 9, 0, "3g.40gb", false),
			placedMIG(2, 9, 19, 4, "1g.10gb", false), placedMIG(3, 10, 19, 5, "1g.10gb", false)}
	}}
	kube := &listKubelet{clock: c, allocs: []collector.Allocation{
		placementAlloc("big", "gpu-0-mig-3g40gb-9-0", 9, 0, "3g.40gb"),
		placementAlloc("small", "gpu-0-mig-1g10gb-19-4", 19, 4, "1g.10gb"),
	}}
	e, err := New(DefaultConfig(), devs, kube, c, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	e.Poll(context.Background())
	s := e.Snapshot()
	if a := findAlloc(s, "big"); a == nil || a.UUID != uuidOf(101) {
		t.Errorf("big on %+v, want the only 3g.40gb, %s", a, uuidOf(101))
	}
	if a := findAlloc(s, "small"); a != nil {
		t.Errorf("small resolved to %s, one of two 1g.10gb instances NVML does not place", a.UUID)
	}
}
