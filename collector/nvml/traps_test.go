package nvml

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/collector"
	"github.com/gpuxray/gpuxray/collector/sim"
)

// trapNode reads the scenario body (after the common header) through a
// reader on the simulated node, at 1m into it.
func trapNode(t *testing.T, body string) (*Reader, *sim.Node, *sim.VirtualClock) {
	t.Helper()
	sc, err := sim.ParseScenario([]byte("start: 2026-12-01T08:00:00Z\nduration: 1h\nnode: traps\n"+body), "traps.yaml")
	if err != nil {
		t.Fatal(err)
	}
	clock := sim.NewVirtualClock(sc.Start.Add(time.Minute))
	node, err := sim.NewNode(sc, clock)
	if err != nil {
		t.Fatal(err)
	}
	r := New(node.NVML(), DefaultConfig(), zap.NewNop(), clock)
	if err := r.Init(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Shutdown)
	return r, node, clock
}

// readN reads n times a second apart and returns the snapshots.
func readN(t *testing.T, r *Reader, clock *sim.VirtualClock, n int) []collector.DeviceSnapshot {
	t.Helper()
	out := make([]collector.DeviceSnapshot, n)
	for i := range out {
		clock.Advance(time.Second)
		snap, err := r.Read(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		// A reading's slices are reused by the read after next: copy.
		for j := range snap.Devices {
			d := &snap.Devices[j]
			d.Processes = slices.Clone(d.Processes)
			d.ProcessSamples = slices.Clone(d.ProcessSamples)
		}
		snap.Devices = slices.Clone(snap.Devices)
		out[i] = snap
	}
	return out
}

func readingOf(t *testing.T, snap collector.DeviceSnapshot, uuid string) collector.DeviceReading {
	t.Helper()
	for _, d := range snap.Devices {
		if d.Device.UUID == uuid {
			return d
		}
	}
	t.Fatalf("device %s not in the snapshot (%d devices, errors %v)", uuid, len(snap.Devices), snap.Errors)
	return collector.DeviceReading{}
}

func countReason(snaps []collector.DeviceSnapshot, reason string) int {
	n := 0
	for _, s := range snaps {
		for _, r := range reasons(s) {
			if r == reason {
				n++
			}
		}
	}
	return n
}

// TestDriverSymbols: on R470 the library has no nvmlDeviceGetMemoryInfo_v2
// (R510) and no GPM (R520), and go-nvml ends the process on a call of a
// symbol the library lacks (the simulated driver panics). The reader
// reads memory with the v1 call, whose Used counts the driver's reserve,
// and leaves GPM off; on R510 and newer it reads v2.
func TestDriverSymbols(t *testing.T) {
	t.Parallel()
	const gib = 1 << 30
	for _, tc := range []struct {
		version string
		// reserved says Used counts the driver's reserve (v1).
		reserved bool
		gpm      bool
	}{
		{"470.256.02", true, false},
		{"510.47.03", false, false},
		{"550.54.15", false, true},
	} {
		t.Run(tc.version, func(t *testing.T) {
			t.Parallel()
			r, node, clock := trapNode(t, `system: dgxh100
gpus: 1
driver: {version: "`+tc.version+`"}
pods:
  - {namespace: a, name: p, devices: ["gpu:0"], memory: 10GiB, util: [{at: 0s, value: 0.5}]}
`)
			snaps := readN(t, r, clock, 3)
			d := readingOf(t, snaps[2], node.DeviceUUID(0))
			if d.Device.DriverVersion != tc.version {
				t.Errorf("driver version %q, want %q", d.Device.DriverVersion, tc.version)
			}
			if !d.HasMemory {
				t.Fatalf("no memory read on %s", tc.version)
			}
			reserved := d.MemoryUsedBytes > 10*gib
			if reserved != tc.reserved {
				t.Errorf("used %d bytes: counts the reserve %v, want %v (v1 only on drivers without v2)", d.MemoryUsedBytes, reserved, tc.reserved)
			}
			if d.GPMGauges.HasGPM != tc.gpm {
				t.Errorf("GPM %v, want %v on %s", d.GPMGauges.HasGPM, tc.gpm, tc.version)
			}
			if len(d.Processes) != 1 || d.Processes[0].UsedMemoryBytes != 10*gib {
				t.Errorf("processes %+v, want the pod's 10 GiB", d.Processes)
			}
		})
	}
}

// TestProcessStructBug: drivers 535.43 to 535.86 write 32-byte process
// entries into go-nvml's 24-byte array, so with two processes the second
// reads as garbage (and the array overruns). The reader does not call the
// lists there: no garbage PID or memory, memory unknown, said once. Before
// and after the range the lists are read.
func TestProcessStructBug(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		version string
		bug     bool
	}{
		{"530.41.03", false},
		{"535.43.02", true},
		{"535.54.03", true},
		{"535.86.10", true},
		{"535.104.05", false},
	} {
		t.Run(tc.version, func(t *testing.T) {
			t.Parallel()
			r, node, clock := trapNode(t, `system: dgxa100
gpus: 1
driver: {version: "`+tc.version+`"}
pods:
  - {namespace: a, name: p, resource: nvidia.com/gpu.shared, devices: ["gpu:0::0"], memory: 3GiB, util: [{at: 0s, value: 0.3}]}
  - {namespace: a, name: q, resource: nvidia.com/gpu.shared, devices: ["gpu:0::1"], memory: 5GiB, util: [{at: 0s, value: 0.2}]}
`)
			want := []collector.Process{{PID: node.Scenario().PID(0, 0), UsedMemoryBytes: 3 << 30}, {PID: node.Scenario().PID(1, 0), UsedMemoryBytes: 5 << 30}}
			for _, snap := range readN(t, r, clock, 3) {
				d := readingOf(t, snap, node.DeviceUUID(0))
				if tc.bug {
					if d.HasProcesses || len(d.Processes) != 0 {
						t.Fatalf("processes %+v read on %s, want none (memory unknown)", d.Processes, tc.version)
					}
					continue
				}
				if !d.HasProcesses || !slices.Equal(d.Processes, want) {
					t.Fatalf("processes %+v on %s, want %+v", d.Processes, tc.version, want)
				}
			}
			if tc.bug && !r.caps.processStructBug {
				t.Errorf("caps %+v: the bug is not known", r.caps)
			}
		})
	}
}

// TestPlausibleProcessEntries: entries of another stride than go-nvml's
// (the 32-byte ones above; nvitop #226 saw 16-byte ones behind a _v3
// symbol) put memory bytes where the instance IDs go, which nvml.h fixes
// at 0xFFFFFFFF outside MIG.
func TestPlausibleProcessEntries(t *testing.T) {
	t.Parallel()
	whole := &device{info: collector.Device{GPUInstance: -1}}
	migParent := &device{info: collector.Device{MIGEnabled: true}}
	inst := &device{mig: true, info: collector.Device{GPUInstance: 2}}
	for _, tc := range []struct {
		name string
		d    *device
		p    gonvml.ProcessInfo
		want bool
	}{
		{"whole GPU", whole, gonvml.ProcessInfo{Pid: 7, UsedGpuMemory: 1 << 30, GpuInstanceId: math.MaxUint32, ComputeInstanceId: math.MaxUint32}, true},
		// Entry 1 of 32-byte entries read at 24: pid from entry 0's
		// usedGpuCcProtectedMemory, memory from entry 1's pid, the IDs
		// from entry 1's memory.
		{"32-byte stride", whole, gonvml.ProcessInfo{Pid: 0, UsedGpuMemory: 10100, GpuInstanceId: 0, ComputeInstanceId: 1}, false},
		{"MIG parent", migParent, gonvml.ProcessInfo{Pid: 7, GpuInstanceId: 9, ComputeInstanceId: 0}, true},
		{"MIG parent garbage", migParent, gonvml.ProcessInfo{Pid: 7, GpuInstanceId: 0x40000000}, false},
		{"MIG instance", inst, gonvml.ProcessInfo{Pid: 7, GpuInstanceId: 2}, true},
		{"MIG instance, other GI", inst, gonvml.ProcessInfo{Pid: 7, GpuInstanceId: 5}, false},
	} {
		if got := plausibleEntry(tc.d, tc.p); got != tc.want {
			t.Errorf("%s: plausibleEntry(%+v) = %v, want %v", tc.name, tc.p, got, tc.want)
		}
	}
}

// TestMIGParentNoPermission: without privileges, memory and process queries
// of a GPU in MIG mode answer NO_PERMISSION. The reader says so once per
// query, counts it once, and asks no more; its MIG instances are read.
func TestMIGParentNoPermission(t *testing.T) {
	t.Parallel()
	for _, perm := range []string{"denied", "allowed"} {
		t.Run(perm, func(t *testing.T) {
			t.Parallel()
			r, node, clock := trapNode(t, `system: dgxh100
gpus: 1
mig: {"gpu:0": [3g.40gb, 3g.40gb]}
driver: {mig_parent_permission: `+perm+`}
pods:
  - {namespace: a, name: p, devices: ["mig:0/0"], memory: 4GiB, util: [{at: 0s, value: 0.5}]}
`)
			snaps := readN(t, r, clock, 6)
			denied := countReason(snaps, "no_permission")
			parent := readingOf(t, snaps[5], node.DeviceUUID(0))
			inst := readingOf(t, snaps[5], node.MIGDeviceUUID(0, 0))
			if !inst.HasMemory || !inst.HasProcesses || len(inst.Processes) != 1 || inst.Processes[0].UsedMemoryBytes != 4<<30 {
				t.Errorf("MIG instance: memory %v, processes %+v; want its pod's 4 GiB", inst.HasMemory, inst.Processes)
			}
			if perm == "allowed" {
				if denied != 0 || !parent.HasMemory || !parent.HasProcesses {
					t.Errorf("allowed: %d no_permission errors, parent memory %v processes %v", denied, parent.HasMemory, parent.HasProcesses)
				}
				return
			}
			// Memory and the compute list, once each, in six reads.
			if denied != 2 {
				t.Errorf("%d no_permission errors in 6 reads, want 2 (memory, compute processes), once", denied)
			}
			if parent.HasMemory || parent.HasProcesses {
				t.Errorf("denied parent: memory %v, processes %v; want neither", parent.HasMemory, parent.HasProcesses)
			}
		})
	}
}

// TestMPSAndGraphicsProcesses: MPS clients are listed only by
// GetMPSComputeRunningProcesses, graphics contexts by
// GetGraphicsRunningProcesses (a process with both contexts is in both
// lists, with the same memory); the reader lists each PID once.
func TestMPSAndGraphicsProcesses(t *testing.T) {
	t.Parallel()
	r, node, clock := trapNode(t, `system: dgxh100
gpus: 2
driver: {mps: ["gpu:0"], graphics: ["gpu:1"]}
pods:
  - {namespace: a, name: p, resource: nvidia.com/gpu.shared, devices: ["gpu:0::0"], memory: 3GiB, util: [{at: 0s, value: 0.3}]}
  - {namespace: a, name: q, resource: nvidia.com/gpu.shared, devices: ["gpu:0::1"], memory: 5GiB, util: [{at: 0s, value: 0.2}]}
  - {namespace: a, name: v, devices: ["gpu:1"], memory: 7GiB, util: [{at: 0s, value: 0.9}]}
`)
	sc := node.Scenario()
	snap := readN(t, r, clock, 2)[1]
	mps := readingOf(t, snap, node.DeviceUUID(0))
	want := []collector.Process{{PID: sc.PID(0, 0), UsedMemoryBytes: 3 << 30}, {PID: sc.PID(1, 0), UsedMemoryBytes: 5 << 30}}
	if !mps.HasProcesses || !slices.Equal(mps.Processes, want) {
		t.Errorf("MPS GPU: processes %+v, want the clients %+v", mps.Processes, want)
	}
	gfx := readingOf(t, snap, node.DeviceUUID(1))
	want = []collector.Process{{PID: sc.PID(2, 0), UsedMemoryBytes: 7 << 30}}
	if !gfx.HasProcesses || !slices.Equal(gfx.Processes, want) {
		t.Errorf("compute+graphics GPU: processes %+v, want %+v once", gfx.Processes, want)
	}
}

// TestProcessMemoryNotAvailable: usedGpuMemory NVML_VALUE_NOT_AVAILABLE is
// no figure: the process is listed with its memory unknown, not as 16 EiB.
func TestProcessMemoryNotAvailable(t *testing.T) {
	t.Parallel()
	r, node, clock := trapNode(t, `system: dgxa100
gpus: 1
driver: {memory_not_available: ["gpu:0"]}
pods:
  - {namespace: a, name: p, devices: ["gpu:0"], memory: 3GiB, util: [{at: 0s, value: 0.3}]}
`)
	d := readingOf(t, readN(t, r, clock, 2)[1], node.DeviceUUID(0))
	want := []collector.Process{{PID: node.Scenario().PID(0, 0), MemoryUnknown: true}}
	if !d.HasProcesses || !slices.Equal(d.Processes, want) {
		t.Errorf("processes %+v, want %+v", d.Processes, want)
	}
}

// TestZombieProcessSamples: the driver's per-process table keeps entries
// of processes that are gone: garbage (smUtil 37100, stamps decades off,
// nvtop #110) and plausible entries of PIDs no process list holds. Neither
// reaches the reading; each is counted, the stale PID once.
func TestZombieProcessSamples(t *testing.T) {
	t.Parallel()
	r, node, clock := trapNode(t, `system: dgxa100
gpus: 1
driver:
  process_samples: per-period # a sample each read, so each read meets the zombies
  zombies:
    - {device: "gpu:0", pid: 50554, shape: garbage}
    - {device: "gpu:0", pid: 50021, shape: stale, value: 0.4}
pods:
  - {namespace: a, name: p, resource: nvidia.com/gpu.shared, devices: ["gpu:0::0"], memory: 3GiB, util: [{at: 0s, value: 0.3}]}
`)
	snaps := readN(t, r, clock, 5)
	pod := node.Scenario().PID(0, 0)
	for i, snap := range snaps {
		d := readingOf(t, snap, node.DeviceUUID(0))
		if len(d.ProcessSamples) == 0 {
			t.Fatalf("read %d: no process samples", i)
		}
		for _, s := range d.ProcessSamples {
			if s.PID != pod || s.Value > 1 {
				t.Fatalf("read %d: process sample %+v, want only the pod's %d", i, s, pod)
			}
		}
	}
	if n := countReason(snaps, "bad_value"); n != 5 {
		t.Errorf("%d bad_value errors in 5 reads, want 5 (one a read)", n)
	}
	if n := countReason(snaps, "stale_pid"); n != 1 {
		t.Errorf("%d stale_pid errors in 5 reads, want 1 (the PID once)", n)
	}
}

// TestComputeInstanceSplit: a 3g GPU instance split into three compute
// instances is three MIG devices, each with the GPU instance's
// gpuInstanceSliceCount; each is one slice of seven (1c.3g.40gb), so the
// instance counts three sevenths of the GPU, not nine.
func TestComputeInstanceSplit(t *testing.T) {
	t.Parallel()
	r, _, clock := trapNode(t, `system: dgxh100
gpus: 1
mig: {"gpu:0": [3g.40gb, 4g.40gb]}
driver: {compute_instances: {"mig:0/0": 3}}
pods:
  - {namespace: a, name: p, devices: ["mig:0/0"], memory: 4GiB, util: [{at: 0s, value: 0.5}]}
`)
	snap := readN(t, r, clock, 3)[2]
	slicesOf := map[int]int{}
	cis := map[int][]int{}
	for _, d := range snap.Devices {
		if d.Device.ParentUUID == "" {
			continue
		}
		slicesOf[d.Device.GPUInstance] += d.Device.Slices
		cis[d.Device.GPUInstance] = append(cis[d.Device.GPUInstance], d.Device.ComputeInstance)
		if d.Device.GPUInstance == 2 && d.Device.MIGProfile != "1c.3g.40gb" {
			t.Errorf("compute instance %d of GI 2: profile %q, want 1c.3g.40gb", d.Device.ComputeInstance, d.Device.MIGProfile)
		}
		if d.Device.ParentSlices != 7 {
			t.Errorf("%s: parent slices %d, want 7", d.Device.UUID, d.Device.ParentSlices)
		}
	}
	slices.Sort(cis[2])
	if slicesOf[2] != 3 || !slices.Equal(cis[2], []int{0, 1, 2}) || slicesOf[1] != 4 {
		t.Errorf("slices by GPU instance %v, compute instances %v; want GI 2 three slices over CIs 0-2, GI 1 four", slicesOf, cis)
	}
}

// growingTableLib is a driver whose per-process table grows between
// go-nvml's two GetProcessUtilization calls and answers the second with
// INSUFFICIENT_SIZE and the new count: go-nvml v0.13.4-1 then slices its
// buffer past its capacity, as reproduced here.
type growingTableLib struct{ gonvml.Interface }

func (l growingTableLib) DeviceGetHandleByIndex(i int) (gonvml.Device, gonvml.Return) {
	d, ret := l.Interface.DeviceGetHandleByIndex(i)
	return growingTableDevice{d}, ret
}

type growingTableDevice struct{ gonvml.Device }

func (growingTableDevice) GetProcessUtilization(uint64) ([]gonvml.ProcessUtilizationSample, gonvml.Return) {
	buf := make([]gonvml.ProcessUtilizationSample, 68)
	count := 79
	return buf[:count], gonvml.ERROR_INSUFFICIENT_SIZE
}

// TestProcessTableGrowsBetweenCalls: go-nvml's panic on a table that grew
// between its two calls is a failed read of the process samples, counted,
// not the end of the agent; the device's samples are still read.
func TestProcessTableGrowsBetweenCalls(t *testing.T) {
	t.Parallel()
	sc, err := sim.ParseScenario([]byte("start: 2026-12-01T08:00:00Z\nduration: 1h\nsystem: dgxa100\ngpus: 1\npods:\n  - {namespace: a, name: p, devices: [\"gpu:0\"], memory: 1GiB, util: [{at: 0s, value: 0.5}]}\n"), "grow.yaml")
	if err != nil {
		t.Fatal(err)
	}
	clock := sim.NewVirtualClock(sc.Start.Add(time.Minute))
	node, err := sim.NewNode(sc, clock)
	if err != nil {
		t.Fatal(err)
	}
	r := New(growingTableLib{node.NVML()}, DefaultConfig(), zap.NewNop(), clock)
	if err := r.Init(); err != nil {
		t.Fatal(err)
	}
	defer r.Shutdown()
	snaps := readN(t, r, clock, 2)
	d := readingOf(t, snaps[1], node.DeviceUUID(0))
	if len(d.Samples) == 0 || d.HasProcessSamples {
		t.Errorf("samples %d, process samples %v; want the device's samples and no process samples", len(d.Samples), d.HasProcessSamples)
	}
	if n := countReason(snaps, "process_samples"); n != 2 {
		t.Errorf("%d process_samples errors in 2 reads, want 2", n)
	}
}
