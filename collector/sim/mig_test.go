package sim

import (
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// migHead is a valid scenario top on two H100s, four lines long.
const migHead = "start: 2026-12-01T08:00:00Z\nduration: 1h\nsystem: dgxh100\ngpus: 2\n"

// migGapYAML puts gpu:0 in MIG mode with gaps at MIG device indices 1 and 3,
// as a driver leaves them after instances are destroyed.
const migGapYAML = migHead + `node: mig-test
mig:
  "gpu:0": [1g.10gb, empty, 3g.40gb, empty, 2g.20gb]
pods:
  - namespace: a
    name: big
    devices: ["mig:0/2"]
    memory: 20GiB
    util:
      - {at: 0s, value: 0.6}
      - {at: 30m, value: 0.1}
  - namespace: a
    name: small
    devices: ["mig:0/4"]
    from: 10m
    memory: 5GiB
    util:
      - {at: 10m, value: 0.3}
  - namespace: b
    name: whole
    devices: ["gpu:1"]
    memory: 30GiB
    util:
      - {at: 0s, value: 0.9}
`

// yamlNode parses a scenario and plays it on a virtual clock at its start.
func yamlNode(t *testing.T, yaml string) (*Node, *VirtualClock) {
	t.Helper()
	sc, err := ParseScenario([]byte(yaml), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	clock := NewVirtualClock(sc.Start)
	n, err := NewNode(sc, clock)
	if err != nil {
		t.Fatal(err)
	}
	return n, clock
}

func migHandleAt(t *testing.T, n *Node, gpu, i int) nvml.Device {
	t.Helper()
	m, ret := device(t, n, gpu).GetMigDeviceHandleByIndex(i)
	if ret != nvml.SUCCESS {
		t.Fatalf("gpu:%d GetMigDeviceHandleByIndex(%d) = %v", gpu, i, ret)
	}
	return m
}

func TestParseMIGErrors(t *testing.T) {
	t.Parallel()
	mig := func(layout string) string { return migHead + "mig:\n  \"gpu:0\": " + layout + "\n" }
	// podOn is a one-pod list at line 7, after a two-line mig block.
	podOn := func(dev, extra string) string {
		return mig("[3g.40gb, 2g.20gb, 1g.10gb]") + "pods:\n  - namespace: a\n    name: p\n    devices: [\"" + dev + "\"]\n" + extra
	}
	tests := []parseErrorCase{
		{"not a mapping", migHead + "mig: [3g.40gb]\n",
			`t.yaml:5: mig: want a mapping of GPUs to MIG layouts, such as {"gpu:0": [3g.40gb, 2g.20gb]}, got a list`},
		{"layout not a list", mig("3g.40gb"), `t.yaml:6: mig.gpu:0: "3g.40gb" is not a MIG layout; want a list of profiles, such as [3g.40gb, 2g.20gb], or dynamic`},
		{"GPU not on the node", migHead + "mig:\n  \"gpu:2\": [7g.80gb]\n",
			"t.yaml:6: mig.gpu:2: gpu:2 is not one of the node's 2 GPUs (gpu:0 to gpu:1)"},
		{"replica as key", migHead + "mig:\n  \"gpu:0::1\": [7g.80gb]\n",
			"t.yaml:6: mig.gpu:0::1: MIG layouts are per GPU; want gpu:0"},
		{"GPU twice", migHead + "mig:\n  \"gpu:0\": [7g.80gb]\n  \"gpu:0\": [7g.80gb]\n", "t.yaml:7: mig.gpu:0: given twice"},
		{"profile of another GPU", mig("[3g.40gb, 3g.20gb]"),
			`t.yaml:6: mig.gpu:0[1]: "3g.20gb" is not a MIG profile of the NVIDIA H100 80GB HBM3; want one of 1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb, or empty for an unused slot`},
		{"media extension profile", mig("[1g.10gb+me]"),
			`t.yaml:6: mig.gpu:0[0]: "1g.10gb+me" is not a MIG profile of the NVIDIA H100 80GB HBM3; want one of 1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb, or empty for an unused slot`},
		{"A100 profiles", "start: 2026-12-01T08:00:00Z\nduration: 1h\nsystem: dgxa100\ngpus: 2\nmig:\n  \"gpu:1\":\n    - 3g.20gb\n    - 3g.40gb\n",
			`t.yaml:8: mig.gpu:1[1]: "3g.40gb" is not a MIG profile of the NVIDIA A100-SXM4-40GB; want one of 1g.5gb, 1g.10gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb, or empty for an unused slot`},
		{"too many compute slices", mig("[4g.40gb, 3g.40gb, 1g.10gb]"),
			"t.yaml:6: mig.gpu:0[2]: 1g.10gb brings gpu:0 to 8 compute slices, more than the 7 it has"},
		{"too much memory", mig("[1g.20gb, 1g.20gb, 1g.20gb, 1g.20gb, 1g.10gb]"),
			"t.yaml:6: mig.gpu:0[4]: 1g.10gb brings gpu:0 to 9 eighths of its memory, more than the 8 it has"},
		{"too many of a profile", mig("[3g.40gb, empty, 3g.40gb, 3g.40gb]"),
			"t.yaml:6: mig.gpu:0[3]: a GPU holds at most 2 3g.40gb instances"},
		{"too many slots", mig("[empty, empty, empty, empty, empty, empty, empty, 1g.10gb]"),
			"t.yaml:6: mig.gpu:0: 8 slots, more than the 7 MIG devices a GPU holds"},
		{"empty profile name", mig(`[3g.40gb, ""]`), "t.yaml:6: mig.gpu:0[1]: must not be empty"},
		{"whole GPU in MIG mode", podOn("gpu:0", ""),
			"t.yaml:10: pods[0].devices[0]: gpu:0: the GPU is in MIG mode; hold one of its MIG devices (mig:0/S)"},
		{"replica of a GPU in MIG mode", podOn("gpu:0::1", "    resource: nvidia.com/gpu.shared\n"),
			"t.yaml:10: pods[0].devices[0]: gpu:0::1: the GPU is in MIG mode; hold one of its MIG devices (mig:0/S)"},
		{"MIG device of a GPU without MIG", podOn("mig:1/0", ""),
			"t.yaml:10: pods[0].devices[0]: mig:1/0: gpu:1 has no MIG layout; give it one under mig, or hold it whole as gpu:1"},
		{"MIG device of a GPU not on the node", podOn("mig:5/0", ""),
			"t.yaml:10: pods[0].devices[0]: mig:5/0 is not on one of the node's 2 GPUs (gpu:0 to gpu:1)"},
		{"MIG index past the layout", podOn("mig:0/3", ""),
			"t.yaml:10: pods[0].devices[0]: mig:0/3: gpu:0 has no MIG device 3; its layout is [3g.40gb, 2g.20gb, 1g.10gb]"},
		{"empty MIG index", mig("[3g.40gb, empty, 1g.10gb]") + "pods:\n  - namespace: a\n    name: p\n    devices:\n      - mig:0/1\n",
			"t.yaml:11: pods[0].devices[0]: mig:0/1: gpu:0 has no MIG device 1; its layout is [3g.40gb, empty, 1g.10gb]"},
		{"resource of another profile", podOn("mig:0/0", "    resource: nvidia.com/mig-1g.10gb\n"),
			"t.yaml:10: pods[0].devices[0]: mig:0/0 is a 3g.40gb MIG device, handed out as nvidia.com/mig-3g.40gb, not nvidia.com/mig-1g.10gb"},
		{"whole-GPU resource", podOn("mig:0/1", "    resource: nvidia.com/gpu\n"),
			"t.yaml:10: pods[0].devices[0]: mig:0/1 is a 2g.20gb MIG device, handed out as nvidia.com/mig-2g.20gb, not nvidia.com/gpu"},
		{"shared resource", podOn("mig:0/1", "    resource: nvidia.com/gpu.shared\n"),
			"t.yaml:10: pods[0].devices[0]: mig:0/1 is a 2g.20gb MIG device, handed out as nvidia.com/mig-2g.20gb, not nvidia.com/gpu.shared"},
		{"MIG resource on a whole GPU", podOn("gpu:1", "    resource: nvidia.com/mig-3g.40gb\n"),
			"t.yaml:10: pods[0].devices[0]: gpu:1 is not a MIG device, but nvidia.com/mig-3g.40gb hands out MIG devices (mig:N/S)"},
		{"two profiles in one pod", mig("[3g.40gb, 2g.20gb, 1g.10gb]") + "pods:\n  - namespace: a\n    name: p\n    devices: [\"mig:0/0\", \"mig:0/2\"]\n",
			"t.yaml:10: pods[0].devices[1]: mig:0/2 is a 1g.10gb MIG device, handed out as nvidia.com/mig-1g.10gb, not nvidia.com/mig-3g.40gb"},
		{"more memory than the MIG device", podOn("mig:0/2", "    memory: 12GiB\n"),
			"t.yaml:11: pods[0].memory: 12GiB is more than the 10GiB of mig:0/2 (1g.10gb)"},
		{"same MIG device twice in a pod", podOn("mig:0/0\", \"mig:0/0", ""),
			"t.yaml:10: pods[0].devices[1]: mig:0/0: the pod already holds mig:0/0"},
		{"MIG device held twice", podOn("mig:0/1", "    to: 30m\n  - namespace: a\n    name: q\n    devices: [\"mig:0/1\"]\n    from: 20m\n"),
			"t.yaml:14: pods[1].devices[0]: mig:0/1 is also held by a/p (pods[0], mig:0/1 as mig:0/1 from 0s to 30m)"},
		{"unallocated activity on a GPU in MIG mode", mig("[7g.80gb]") + "unallocated:\n  - {device: \"gpu:0\", at: 0s, value: 0.5}\n",
			"t.yaml:8: unallocated[0].device: gpu:0 is in MIG mode; the simulation has no activity outside its MIG devices"},
	}
	checkParseErrors(t, tests)
}

func TestParseMIGValues(t *testing.T) {
	t.Parallel()
	sc, err := ParseScenario([]byte(migHead+`mig:
  "gpu:1": [7g.80gb]
  "gpu:0": [1g.10gb, 1g.10gb, empty, 4g.40gb]
pods:
  - namespace: a
    name: two-small
    devices: ["mig:0/0", "mig:0/1"]
    memory: 10GiB
  - namespace: a
    name: first
    devices: ["mig:1/0"]
    to: 30m
  - namespace: a
    name: then
    resource: nvidia.com/mig-7g.80gb
    devices: ["mig:1/0"]
    from: 30m
`), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	wantMIG := map[int][]string{0: {"1g.10gb", "1g.10gb", "", "4g.40gb"}, 1: {"7g.80gb"}}
	if !reflect.DeepEqual(sc.MIG, wantMIG) {
		t.Errorf("MIG = %v, want %v", sc.MIG, wantMIG)
	}
	want := []struct {
		resource string
		devices  []DeviceSpec
		names    string
	}{
		{"nvidia.com/mig-1g.10gb", []DeviceSpec{{GPU: 0, MIG: true, MIGSlot: 0}, {GPU: 0, MIG: true, MIGSlot: 1}}, "mig:0/0 mig:0/1"},
		{"nvidia.com/mig-7g.80gb", []DeviceSpec{{GPU: 1, MIG: true}}, "mig:1/0"},
		{"nvidia.com/mig-7g.80gb", []DeviceSpec{{GPU: 1, MIG: true}}, "mig:1/0"},
	}
	for i, w := range want {
		p := sc.Pods[i]
		if p.Resource != w.resource || !reflect.DeepEqual(p.Devices, w.devices) {
			t.Errorf("pods[%d] = %s %v, want %s %v", i, p.Resource, p.Devices, w.resource, w.devices)
		}
		var names []string
		for _, d := range p.Devices {
			names = append(names, d.String())
		}
		if got := strings.Join(names, " "); got != w.names {
			t.Errorf("pods[%d] devices print as %q, want %q", i, got, w.names)
		}
	}
}

// TestMIGScenarios checks the shipped MIG scenarios parse, play, and have
// the hand-computed truth their comments promise.
func TestMIGScenarios(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file string
		// idle and active seconds per pod, in scenario order.
		idle, active []float64
	}{
		{"mig-h100.yaml",
			[]float64{300, 1080, 600, 300},
			[]float64{0.9*480 + 0.85*420, 0.5 * 120, 0.7*180 + 0.02*240 + 0.6*180 + 0.02*240 + 0.75*120 + 0.02*120, 0.95 * 900}},
		{"mig-a100.yaml",
			[]float64{0, 1200, 0, 480},
			[]float64{0.8*600 + 0.1*600, 0, 0.4 * 600, 0.7 * 720}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			sc, err := LoadScenario(filepath.Join("..", "..", "test", "scenarios", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := NewNode(sc, NewVirtualClock(sc.Start)); err != nil {
				t.Fatal(err)
			}
			rows := sc.Truth(0.05)
			if len(rows) != len(tt.idle) {
				t.Fatalf("%d truth rows, want %d", len(rows), len(tt.idle))
			}
			for i, r := range rows {
				if !near(r.IdleSeconds, tt.idle[i], 1e-9) || !near(r.ActiveSeconds, tt.active[i], 1e-9) {
					t.Errorf("%s on %s: idle %g active %g, want %g and %g", r.Pod, r.Device, r.IdleSeconds, r.ActiveSeconds, tt.idle[i], tt.active[i])
				}
			}
		})
	}
}

func TestMIGHandles(t *testing.T) {
	t.Parallel()
	n, _ := yamlNode(t, migGapYAML)
	lib := n.NVML()
	parent := device(t, n, 0)
	if cur, pend, ret := parent.GetMigMode(); cur != nvml.DEVICE_MIG_ENABLE || pend != nvml.DEVICE_MIG_ENABLE || ret != nvml.SUCCESS {
		t.Errorf("gpu:0 GetMigMode = %d, %d, %v; want enabled", cur, pend, ret)
	}
	if c, ret := lib.DeviceGetMaxMigDeviceCount(parent); c != 7 || ret != nvml.SUCCESS {
		t.Errorf("gpu:0 GetMaxMigDeviceCount = %d, %v; want 7", c, ret)
	}
	if is, ret := parent.IsMigDeviceHandle(); is || ret != nvml.SUCCESS {
		t.Errorf("gpu:0 IsMigDeviceHandle = %v, %v", is, ret)
	}
	if _, ret := parent.GetAttributes(); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("gpu:0 GetAttributes = %v, want ERROR_NOT_SUPPORTED (MIG handles only)", ret)
	}

	// Index → the handle, its identity and its way back to the parent.
	want := map[int]struct {
		profile string
		gi      int
	}{0: {"1g.10gb", 7}, 2: {"3g.40gb", 2}, 4: {"2g.20gb", 3}}
	seen := map[string]bool{}
	for i := 0; i < 7; i++ {
		m, ret := lib.DeviceGetMigDeviceHandleByIndex(parent, i)
		w, ok := want[i]
		if !ok {
			if ret != nvml.ERROR_NOT_FOUND || m != nil {
				t.Errorf("GetMigDeviceHandleByIndex(%d) = %v, %v; want an empty slot, ERROR_NOT_FOUND", i, m, ret)
			}
			continue
		}
		if ret != nvml.SUCCESS {
			t.Fatalf("GetMigDeviceHandleByIndex(%d) = %v", i, ret)
		}
		uuid, _ := m.GetUUID()
		if !strings.HasPrefix(uuid, "MIG-") || len(uuid) != len("MIG-")+36 || seen[uuid] || uuid != n.MIGDeviceUUID(0, i) {
			t.Errorf("MIG %d UUID = %q (MIGDeviceUUID %q)", i, uuid, n.MIGDeviceUUID(0, i))
		}
		seen[uuid] = true
		if name, ret := m.GetName(); name != "NVIDIA H100 80GB HBM3 MIG "+w.profile || ret != nvml.SUCCESS {
			t.Errorf("MIG %d GetName = %q, %v", i, name, ret)
		}
		if idx, ret := lib.DeviceGetIndex(m); idx != i || ret != nvml.SUCCESS {
			t.Errorf("MIG %d GetIndex = %d, %v; want its MIG device index", i, idx, ret)
		}
		if gi, ret := lib.DeviceGetGpuInstanceId(m); gi != w.gi || ret != nvml.SUCCESS {
			t.Errorf("MIG %d GetGpuInstanceId = %d, %v; want %d", i, gi, ret, w.gi)
		}
		if ci, ret := lib.DeviceGetComputeInstanceId(m); ci != 0 || ret != nvml.SUCCESS {
			t.Errorf("MIG %d GetComputeInstanceId = %d, %v", i, ci, ret)
		}
		if p, ret := lib.DeviceGetDeviceHandleFromMigDeviceHandle(m); p != parent || ret != nvml.SUCCESS {
			t.Errorf("MIG %d parent = %v, %v", i, p, ret)
		}
		if is, ret := lib.DeviceIsMigDeviceHandle(m); !is || ret != nvml.SUCCESS {
			t.Errorf("MIG %d IsMigDeviceHandle = %v, %v", i, is, ret)
		}
		if again, _ := parent.GetMigDeviceHandleByIndex(i); again != m {
			t.Errorf("MIG %d: a second GetMigDeviceHandleByIndex gives another handle", i)
		}
	}
	if _, ret := parent.GetMigDeviceHandleByIndex(7); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("GetMigDeviceHandleByIndex(7) = %v, want ERROR_INVALID_ARGUMENT", ret)
	}

	// A GPU without MIG.
	whole := device(t, n, 1)
	if cur, pend, ret := whole.GetMigMode(); cur != nvml.DEVICE_MIG_DISABLE || pend != nvml.DEVICE_MIG_DISABLE || ret != nvml.SUCCESS {
		t.Errorf("gpu:1 GetMigMode = %d, %d, %v; want disabled", cur, pend, ret)
	}
	if c, ret := whole.GetMaxMigDeviceCount(); c != 0 || ret != nvml.SUCCESS {
		t.Errorf("gpu:1 GetMaxMigDeviceCount = %d, %v; want 0", c, ret)
	}
	if _, ret := whole.GetMigDeviceHandleByIndex(0); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("gpu:1 GetMigDeviceHandleByIndex(0) = %v, want ERROR_NOT_SUPPORTED", ret)
	}
	if _, ret := whole.GetDeviceHandleFromMigDeviceHandle(); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("gpu:1 GetDeviceHandleFromMigDeviceHandle = %v, want ERROR_INVALID_ARGUMENT", ret)
	}
	if _, ret := whole.GetGpuInstanceId(); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("gpu:1 GetGpuInstanceId = %v, want ERROR_NOT_SUPPORTED", ret)
	}

	// UUIDs are stable for a node name and differ between nodes.
	again, _ := yamlNode(t, migGapYAML)
	other, _ := yamlNode(t, strings.Replace(migGapYAML, "node: mig-test", "node: other", 1))
	if again.MIGDeviceUUID(0, 2) != n.MIGDeviceUUID(0, 2) || other.MIGDeviceUUID(0, 2) == n.MIGDeviceUUID(0, 2) {
		t.Errorf("MIG UUIDs: %s, again %s, other node %s", n.MIGDeviceUUID(0, 2), again.MIGDeviceUUID(0, 2), other.MIGDeviceUUID(0, 2))
	}
	if n.MIGDeviceUUID(0, 1) != "" || n.MIGDeviceUUID(1, 0) != "" {
		t.Error("MIGDeviceUUID of an empty slot or a GPU without MIG is not empty")
	}
}

func TestMIGUUIDLookup(t *testing.T) {
	t.Parallel()
	n, _ := yamlNode(t, migGapYAML)
	lib := n.NVML()
	for _, i := range []int{0, 2, 4} {
		m := migHandleAt(t, n, 0, i)
		uuid := n.MIGDeviceUUID(0, i)
		for _, u := range []string{uuid, strings.ToUpper(uuid[:4]) + strings.ToUpper(uuid[4:])} {
			if h, ret := lib.DeviceGetHandleByUUID(u); h != m || ret != nvml.SUCCESS {
				t.Errorf("DeviceGetHandleByUUID(%s) = %v, %v; want MIG device %d", u, h, ret, i)
			}
		}
	}
	if h, ret := lib.DeviceGetHandleByUUID(n.DeviceUUID(0)); h != device(t, n, 0) || ret != nvml.SUCCESS {
		t.Errorf("DeviceGetHandleByUUID(parent) = %v, %v", h, ret)
	}
	if _, ret := lib.DeviceGetHandleByUUID("MIG-00000000-0000-0000-0000-000000000000"); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("DeviceGetHandleByUUID(unknown MIG) = %v, want ERROR_NOT_FOUND", ret)
	}
}

// TestMIGProfileRoundTrip makes one MIG device of every profile of every
// system and names it from its attributes as a reader does:
// <GpuInstanceSliceCount>g.<ceil(MemorySizeMB/1024)>gb.
func TestMIGProfileRoundTrip(t *testing.T) {
	t.Parallel()
	profiles := map[string][]string{
		"dgxa100": {"1g.5gb", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"},
		"dgxh100": {"1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"},
		"dgxh200": {"1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"},
		"dgxb200": {"1g.23gb", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb"},
	}
	for sysName, names := range profiles {
		if got := systems[sysName].migProfileNames(); !reflect.DeepEqual(got, names) {
			t.Errorf("%s profiles = %v, want %v", sysName, got, names)
		}
		for _, profile := range names {
			t.Run(sysName+"/"+profile, func(t *testing.T) {
				t.Parallel()
				n, _ := yamlNode(t, fmt.Sprintf("start: 2026-12-01T08:00:00Z\nduration: 1h\nsystem: %s\ngpus: 1\nmig:\n  \"gpu:0\": [empty, %s]\n", sysName, profile))
				m := migHandleAt(t, n, 0, 1)
				a, ret := n.NVML().DeviceGetAttributes(m)
				if ret != nvml.SUCCESS {
					t.Fatalf("GetAttributes = %v", ret)
				}
				got := fmt.Sprintf("%dg.%dgb", a.GpuInstanceSliceCount, int(math.Ceil(float64(a.MemorySizeMB)/1024)))
				if got != profile {
					t.Errorf("attributes %+v name %s, want %s", a, got, profile)
				}
				if a.ComputeInstanceSliceCount != a.GpuInstanceSliceCount || a.MultiprocessorCount == 0 || a.MultiprocessorCount%a.GpuInstanceSliceCount != 0 {
					t.Errorf("attributes %+v: want one compute instance spanning the GPU instance", a)
				}
				if mem, _ := m.GetMemoryInfo_v2(); mem.Total != a.MemorySizeMB<<20 || mem.Used != 0 || mem.Free != mem.Total {
					t.Errorf("GetMemoryInfo_v2 = %+v, want the instance's %d MiB, free", mem, a.MemorySizeMB)
				}
				if name, _ := m.GetName(); !strings.HasSuffix(name, " MIG "+profile) {
					t.Errorf("GetName = %q", name)
				}
			})
		}
	}
}

// TestMIGActivityNotSupported checks NVML's rule: no utilization samples or
// per-process utilization on a MIG-enabled GPU or a MIG device, and no power
// or energy on a MIG device, while the parent still has them.
func TestMIGActivityNotSupported(t *testing.T) {
	t.Parallel()
	n, clock := yamlNode(t, migGapYAML)
	clock.Advance(time.Minute)
	lib := n.NVML()
	for _, d := range []struct {
		name string
		dev  nvml.Device
	}{{"gpu:0", device(t, n, 0)}, {"mig:0/2", migHandleAt(t, n, 0, 2)}} {
		if _, _, ret := d.dev.GetSamples(nvml.GPU_UTILIZATION_SAMPLES, 0); ret != nvml.ERROR_NOT_SUPPORTED {
			t.Errorf("%s GetSamples = %v, want ERROR_NOT_SUPPORTED", d.name, ret)
		}
		if _, _, ret := lib.DeviceGetSamples(d.dev, nvml.GPU_UTILIZATION_SAMPLES, 0); ret != nvml.ERROR_NOT_SUPPORTED {
			t.Errorf("%s DeviceGetSamples = %v, want ERROR_NOT_SUPPORTED", d.name, ret)
		}
		if _, ret := d.dev.GetProcessUtilization(0); ret != nvml.ERROR_NOT_SUPPORTED {
			t.Errorf("%s GetProcessUtilization = %v, want ERROR_NOT_SUPPORTED", d.name, ret)
		}
	}
	m := migHandleAt(t, n, 0, 2)
	if _, ret := m.GetPowerUsage(); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("MIG GetPowerUsage = %v, want ERROR_NOT_SUPPORTED", ret)
	}
	if _, ret := m.GetTotalEnergyConsumption(); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("MIG GetTotalEnergyConsumption = %v, want ERROR_NOT_SUPPORTED", ret)
	}
	// The parent's power follows the slice-weighted busy ratio: 3/7 of the
	// GPU at 0.6, the rest idle.
	sys := systems["dgxh100"]
	wantMW := uint32(math.Round(1000 * (sys.idleWatts + 0.6*3/7*(sys.maxWatts-sys.idleWatts))))
	if mw, ret := device(t, n, 0).GetPowerUsage(); mw != wantMW || ret != nvml.SUCCESS {
		t.Errorf("gpu:0 GetPowerUsage = %d, %v; want %d", mw, ret, wantMW)
	}
	if u := n.Scenario().GPUUtilAt(0, time.Minute); !near(u, 0.6*3/7, 1e-12) {
		t.Errorf("GPUUtilAt(gpu:0) = %g, want %g", u, 0.6*3/7)
	}
	if u := n.Scenario().MIGUtilAt(0, 2, time.Minute); u != 0.6 {
		t.Errorf("MIGUtilAt(mig:0/2) = %g, want 0.6", u)
	}
	// Samples on the GPU without MIG are untouched.
	if _, s, ret := device(t, n, 1).GetSamples(nvml.GPU_UTILIZATION_SAMPLES, 0); ret != nvml.SUCCESS || value(s[len(s)-1]) != 90 {
		t.Errorf("gpu:1 GetSamples = %v", ret)
	}
}

func TestMIGMemoryAndProcesses(t *testing.T) {
	t.Parallel()
	n, clock := yamlNode(t, migGapYAML)
	clock.Advance(20 * time.Minute)
	big, small := migHandleAt(t, n, 0, 2), migHandleAt(t, n, 0, 4)
	pid := func(pod int) uint32 { return n.Scenario().PID(pod, 0) }

	for _, tt := range []struct {
		name string
		dev  nvml.Device
		used uint64
		// processes as pid/gi/ci
		procs []string
	}{
		{"gpu:0", device(t, n, 0), 25 << 30, []string{fmt.Sprintf("%d/2/0", pid(0)), fmt.Sprintf("%d/3/0", pid(1))}},
		{"mig:0/2", big, 20 << 30, []string{fmt.Sprintf("%d/2/0", pid(0))}},
		{"mig:0/4", small, 5 << 30, []string{fmt.Sprintf("%d/3/0", pid(1))}},
		{"gpu:1", device(t, n, 1), 30 << 30, []string{fmt.Sprintf("%d/4294967295/4294967295", pid(2))}},
	} {
		mem, ret := tt.dev.GetMemoryInfo_v2()
		if ret != nvml.SUCCESS || mem.Used != tt.used || mem.Used+mem.Reserved+mem.Free != mem.Total {
			t.Errorf("%s GetMemoryInfo_v2 = %+v, %v; want %d used", tt.name, mem, ret, tt.used)
		}
		if v1, _ := tt.dev.GetMemoryInfo(); v1.Used != mem.Used+mem.Reserved || v1.Total != mem.Total {
			t.Errorf("%s GetMemoryInfo = %+v, v2 %+v", tt.name, v1, mem)
		}
		ps, ret := tt.dev.GetComputeRunningProcesses()
		var got []string
		for _, p := range ps {
			got = append(got, fmt.Sprintf("%d/%d/%d", p.Pid, p.GpuInstanceId, p.ComputeInstanceId))
		}
		sort.Strings(got)
		if ret != nvml.SUCCESS || !reflect.DeepEqual(got, tt.procs) {
			t.Errorf("%s processes = %v, %v; want %v", tt.name, got, ret, tt.procs)
		}
	}
	if mem, _ := big.GetMemoryInfo_v2(); mem.Total != 40960<<20 {
		t.Errorf("3g.40gb total = %d, want 40960 MiB", mem.Total)
	}
	// Before the small pod starts, its MIG device is empty.
	clock.Set(n.Scenario().Start.Add(5 * time.Minute))
	if ps, _ := small.GetComputeRunningProcesses(); len(ps) != 0 {
		t.Errorf("mig:0/4 at 5m runs %v", ps)
	}
}

func TestMIGListResponse(t *testing.T) {
	t.Parallel()
	n, clock := yamlNode(t, migGapYAML)
	clock.Advance(20 * time.Minute)
	var got []string
	for _, p := range n.ListResponse().PodResources {
		for _, c := range p.Containers {
			for _, d := range c.Devices {
				got = append(got, p.Name+" "+d.ResourceName+" "+strings.Join(d.DeviceIds, ","))
			}
		}
	}
	want := []string{
		"big nvidia.com/mig-3g.40gb " + n.MIGDeviceUUID(0, 2),
		"small nvidia.com/mig-2g.20gb " + n.MIGDeviceUUID(0, 4),
		"whole nvidia.com/gpu " + n.DeviceUUID(1),
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ListResponse\n got %v\nwant %v", got, want)
	}
}
