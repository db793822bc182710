package sim

import (
	"encoding/binary"
	"errors"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuxray/gpuxray/collector"
)

// stepsNode plays testdata/steps.yaml on a virtual clock at the scenario start.
func stepsNode(t *testing.T) (*Node, *VirtualClock) {
	t.Helper()
	sc, err := LoadScenario(filepath.Join("testdata", "steps.yaml"))
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

func device(t *testing.T, n *Node, g int) nvml.Device {
	t.Helper()
	d, ret := n.NVML().DeviceGetHandleByIndex(g)
	if ret != nvml.SUCCESS {
		t.Fatalf("DeviceGetHandleByIndex(%d) = %v", g, ret)
	}
	return d
}

// stamp is NVML's timestamp of sample k of n's scenario.
func stamp(n *Node, k int64) uint64 {
	return uint64(n.Scenario().Start.UnixMicro() + k*166667)
}

func value(s nvml.Sample) uint32 { return binary.LittleEndian.Uint32(s.SampleValue[:4]) }

func TestGetSamples(t *testing.T) {
	t.Parallel()
	n, _ := stepsNode(t)
	start := n.Scenario().Start
	repeat := func(v uint32, k int) []uint32 {
		out := make([]uint32, k)
		for i := range out {
			out[i] = v
		}
		return out
	}
	tests := []struct {
		name     string
		gpu      int
		now      time.Duration
		lastSeen func() uint64
		typ      nvml.SamplingType
		ret      nvml.Return
		first    int64    // number of the first sample returned
		values   []uint32 // all values, or nil to check only count/first/last
		count    int
		lastVal  uint32
	}{
		{name: "a period straddling a step averages it", gpu: 0, now: 2 * time.Second,
			ret: nvml.SUCCESS, first: 1, values: append(repeat(20, 7), 50, 80, 80, 80)},
		{name: "only samples after lastSeen", gpu: 0, now: 2 * time.Second, lastSeen: func() uint64 { return stamp(n, 5) },
			ret: nvml.SUCCESS, first: 6, values: []uint32{20, 20, 50, 80, 80, 80}},
		{name: "lastSeen between grid points", gpu: 0, now: 2 * time.Second, lastSeen: func() uint64 { return stamp(n, 5) + 1 },
			ret: nvml.SUCCESS, first: 6, values: []uint32{20, 20, 50, 80, 80, 80}},
		{name: "the ring keeps the newest 120", gpu: 0, now: time.Hour, lastSeen: func() uint64 { return stamp(n, 5) },
			ret: nvml.SUCCESS, first: 21599 - 119, count: 120, lastVal: 35},
		{name: "lastSeen 0 reads the whole ring", gpu: 0, now: 30 * time.Minute,
			ret: nvml.SUCCESS, first: 10799 - 119, count: 120, lastVal: 95},
		{name: "up to date", gpu: 0, now: 2 * time.Second, lastSeen: func() uint64 { return stamp(n, 11) }, ret: nvml.ERROR_NOT_FOUND},
		{name: "lastSeen in the future", gpu: 0, now: 2 * time.Second, lastSeen: func() uint64 { return stamp(n, 100) }, ret: nvml.ERROR_NOT_FOUND},
		{name: "first period not over", gpu: 0, now: 100 * time.Millisecond, ret: nvml.ERROR_NOT_FOUND},
		{name: "before the start", gpu: 0, now: -time.Minute, ret: nvml.ERROR_NOT_FOUND},
		{name: "replicas add up, capped at 100%", gpu: 1, now: 15 * time.Minute, ret: nvml.SUCCESS, first: 5399 - 119, count: 120, lastVal: 100},
		{name: "replicas add up", gpu: 1, now: 35 * time.Minute, ret: nvml.SUCCESS, first: 12599 - 119, count: 120, lastVal: 32},
		{name: "a pod counts only from its start", gpu: 2, now: 4 * time.Minute, ret: nvml.SUCCESS, first: 1439 - 119, count: 120, lastVal: 0},
		{name: "unallocated activity", gpu: 3, now: 20 * time.Minute, ret: nvml.SUCCESS, first: 7199 - 119, count: 120, lastVal: 40},
		{name: "other sampling types", gpu: 0, now: 2 * time.Second, typ: nvml.MEMORY_UTILIZATION_SAMPLES, ret: nvml.ERROR_NOT_SUPPORTED},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n, err := NewNode(n.Scenario(), NewVirtualClock(start.Add(tt.now)))
			if err != nil {
				t.Fatal(err)
			}
			var lastSeen uint64
			if tt.lastSeen != nil {
				lastSeen = tt.lastSeen()
			}
			typ := tt.typ
			if typ == 0 {
				typ = nvml.GPU_UTILIZATION_SAMPLES
			}
			vt, samples, ret := device(t, n, tt.gpu).GetSamples(typ, lastSeen)
			if ret != tt.ret {
				t.Fatalf("GetSamples ret = %v, want %v", ret, tt.ret)
			}
			if ret != nvml.SUCCESS {
				return
			}
			if vt != nvml.VALUE_TYPE_UNSIGNED_INT {
				t.Errorf("value type = %v, want VALUE_TYPE_UNSIGNED_INT", vt)
			}
			count := tt.count
			if tt.values != nil {
				count = len(tt.values)
			}
			if len(samples) != count {
				t.Fatalf("got %d samples, want %d", len(samples), count)
			}
			for i, s := range samples {
				if s.TimeStamp != stamp(n, tt.first+int64(i)) {
					t.Fatalf("sample %d stamped %d, want %d (sample number %d)", i, s.TimeStamp, stamp(n, tt.first+int64(i)), tt.first+int64(i))
				}
				if tt.values != nil && value(s) != tt.values[i] {
					t.Errorf("sample %d = %d%%, want %d%%", i, value(s), tt.values[i])
				}
			}
			if tt.values == nil && value(samples[len(samples)-1]) != tt.lastVal {
				t.Errorf("newest sample = %d%%, want %d%%", value(samples[len(samples)-1]), tt.lastVal)
			}
		})
	}
}

func TestDeviceReadings(t *testing.T) {
	t.Parallel()
	n, clock := stepsNode(t)
	start := n.Scenario().Start
	const (
		gib = 1 << 30
		mib = 1 << 20
		// gpu:0's integral of busy ratio over its whole hour, by hand.
		gpu0Hour = 0.2*1.25 + 0.8*598.75 + 0.95*1200 + 0.35*1200
	)
	type procs = []nvml.ProcessInfo
	noMIG := uint32(0xFFFFFFFF)
	tests := []struct {
		name      string
		gpu       int
		now       time.Duration
		used      uint64
		powerMW   uint32
		energyMJ  uint64
		processes procs
	}{
		{"at the start", 0, 0, 10 * gib, 70000 + 0.2*630000, 0,
			procs{{Pid: 10000, UsedGpuMemory: 10 * gib, GpuInstanceId: noMIG, ComputeInstanceId: noMIG}}},
		{"busy", 0, 30 * time.Minute, 10 * gib, 70000 + 0.95*630000,
			uint64(1000 * (70*1800 + 630*(0.2*1.25+0.8*598.75+0.95*600))),
			procs{{Pid: 10000, UsedGpuMemory: 10 * gib, GpuInstanceId: noMIG, ComputeInstanceId: noMIG}}},
		{"after the end the GPU idles", 0, 2 * time.Hour, 0, 70000, uint64(1000 * (70*7200 + 630*gpu0Hour)), procs{}},
		{"two replicas, sorted by PID", 1, 15 * time.Minute, 14 * gib, 700000,
			uint64(1000 * (70*900 + 630*(0.3*600+1*300))),
			procs{{Pid: 4242, UsedGpuMemory: 6 * gib, GpuInstanceId: noMIG, ComputeInstanceId: noMIG},
				{Pid: 10100, UsedGpuMemory: 8 * gib, GpuInstanceId: noMIG, ComputeInstanceId: noMIG}}},
		{"before the pod starts", 2, 4 * time.Minute, 0, 70000, 70 * 240 * 1000, procs{}},
		{"the pod ended", 2, 50 * time.Minute, 0, 70000, uint64(1000 * (70*3000 + 630*(1200+0.04*1500))), procs{}},
		{"unallocated activity", 3, 20 * time.Minute, 0, 70000 + 0.4*630000, uint64(1000 * (70*1200 + 630*0.4*300)), procs{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n, err := NewNode(n.Scenario(), NewVirtualClock(start.Add(tt.now)))
			if err != nil {
				t.Fatal(err)
			}
			d := device(t, n, tt.gpu)
			total := uint64(81920 * mib)
			if m, ret := d.GetMemoryInfo_v2(); ret != nvml.SUCCESS || m != (nvml.Memory_v2{
				Version: nvml.STRUCT_VERSION(m, 2), Total: total, Reserved: 500 * mib, Used: tt.used, Free: total - 500*mib - tt.used,
			}) {
				t.Errorf("GetMemoryInfo_v2 = %+v, %v", m, ret)
			}
			if m, ret := d.GetMemoryInfo(); ret != nvml.SUCCESS || m != (nvml.Memory{Total: total, Used: tt.used + 500*mib, Free: total - 500*mib - tt.used}) {
				t.Errorf("GetMemoryInfo = %+v, %v", m, ret)
			}
			if p, ret := d.GetPowerUsage(); ret != nvml.SUCCESS || p != tt.powerMW {
				t.Errorf("GetPowerUsage = %d mW, %v; want %d", p, ret, tt.powerMW)
			}
			if e, ret := d.GetTotalEnergyConsumption(); ret != nvml.SUCCESS || e != tt.energyMJ {
				t.Errorf("GetTotalEnergyConsumption = %d mJ, %v; want %d", e, ret, tt.energyMJ)
			}
			ps, ret := d.GetComputeRunningProcesses()
			if ret != nvml.SUCCESS || len(ps) != len(tt.processes) {
				t.Fatalf("GetComputeRunningProcesses = %+v, %v; want %+v", ps, ret, tt.processes)
			}
			for i := range ps {
				if ps[i] != tt.processes[i] {
					t.Errorf("process %d = %+v, want %+v", i, ps[i], tt.processes[i])
				}
			}
		})
	}

	// The energy counter never runs backwards, also across steps.
	var prev uint64
	d := device(t, n, 0)
	for s := 0; s <= 3700; s += 7 {
		clock.Set(start.Add(time.Duration(s) * time.Second))
		e, _ := d.GetTotalEnergyConsumption()
		if e < prev {
			t.Fatalf("energy went from %d to %d mJ at %ds", prev, e, s)
		}
		prev = e
	}
}

func TestGetProcessUtilization(t *testing.T) {
	t.Parallel()
	n, _ := stepsNode(t)
	start := n.Scenario().Start
	type sample = nvml.ProcessUtilizationSample
	tests := []struct {
		name string
		gpu  int
		now  time.Duration
		k    int64 // the newest sample number at now; lastSeen is k-2
		ret  nvml.Return
		want []sample
	}{
		{"each replica its own ratio", 1, 15 * time.Minute, 5399, nvml.SUCCESS, []sample{
			{Pid: 4242, SmUtil: 90}, {Pid: 10100, SmUtil: 30}, {Pid: 4242, SmUtil: 90}, {Pid: 10100, SmUtil: 30}}},
		{"low but busy", 1, 35 * time.Minute, 12599, nvml.SUCCESS, []sample{
			{Pid: 4242, SmUtil: 2}, {Pid: 10100, SmUtil: 30}, {Pid: 4242, SmUtil: 2}, {Pid: 10100, SmUtil: 30}}},
		{"idle processes are left out", 1, 45 * time.Minute, 16199, nvml.SUCCESS, []sample{{Pid: 10100, SmUtil: 30}, {Pid: 10100, SmUtil: 30}}},
		{"a pod's second device", 0, 30 * time.Minute, 10799, nvml.SUCCESS, []sample{{Pid: 10000, SmUtil: 95}, {Pid: 10000, SmUtil: 95}}},
		{"no busy process", 0, 15 * time.Minute, 5399, nvml.ERROR_NOT_FOUND, nil},
		{"no process at all", 3, 20 * time.Minute, 7199, nvml.ERROR_NOT_FOUND, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n, err := NewNode(n.Scenario(), NewVirtualClock(start.Add(tt.now)))
			if err != nil {
				t.Fatal(err)
			}
			got, ret := device(t, n, tt.gpu).GetProcessUtilization(stamp(n, tt.k-2))
			if ret != tt.ret || len(got) != len(tt.want) {
				t.Fatalf("GetProcessUtilization = %+v, %v; want %d samples, %v", got, ret, len(tt.want), tt.ret)
			}
			perStamp := len(tt.want) / 2
			for i, g := range got {
				w := tt.want[i]
				w.TimeStamp = stamp(n, tt.k-1+int64(i/perStamp))
				if g != w {
					t.Errorf("sample %d = %+v, want %+v", i, g, w)
				}
			}
		})
	}
}

func TestListResponse(t *testing.T) {
	t.Parallel()
	n, _ := stepsNode(t)
	start := n.Scenario().Start
	type pod struct{ ns, name, container, resource, ids string }
	u := n.DeviceUUID
	tests := []struct {
		now  time.Duration
		want []pod
	}{
		{0, []pod{
			{"team-a", "exclusive", "main", ResourceGPU, u(0)},
			{"team-b", "slice-0", "main", ResourceGPUShared, u(1) + "::0"},
		}},
		{12 * time.Minute, []pod{
			{"team-a", "exclusive", "main", ResourceGPU, u(0)},
			{"team-a", "late", "main", ResourceGPU, u(2)},
			{"team-b", "slice-0", "main", ResourceGPUShared, u(1) + "::0"},
			{"team-b", "slice-1", "main", ResourceGPUShared, u(1) + "::1"},
		}},
		{50 * time.Minute, []pod{
			{"team-a", "exclusive", "main", ResourceGPU, u(0)},
			{"team-b", "slice-0", "main", ResourceGPUShared, u(1) + "::0"},
		}},
		{time.Hour, nil},
		{-time.Second, nil},
	}
	for _, tt := range tests {
		t.Run(tt.now.String(), func(t *testing.T) {
			t.Parallel()
			n, err := NewNode(n.Scenario(), NewVirtualClock(start.Add(tt.now)))
			if err != nil {
				t.Fatal(err)
			}
			resp := n.ListResponse()
			if len(resp.PodResources) != len(tt.want) {
				t.Fatalf("listed %d pods, want %d: %v", len(resp.PodResources), len(tt.want), resp)
			}
			for i, pr := range resp.PodResources {
				if len(pr.Containers) != 1 || len(pr.Containers[0].Devices) != 1 || len(pr.Containers[0].Devices[0].DeviceIds) != 1 {
					t.Fatalf("pod %d = %v, want one container with one device", i, pr)
				}
				c := pr.Containers[0]
				got := pod{pr.Namespace, pr.Name, c.Name, c.Devices[0].ResourceName, c.Devices[0].DeviceIds[0]}
				if got != tt.want[i] {
					t.Errorf("pod %d = %+v, want %+v", i, got, tt.want[i])
				}
				if _, err := collector.ParseDeviceID(got.ids); err != nil {
					t.Errorf("device ID %q does not parse: %v", got.ids, err)
				}
			}
		})
	}
}

func TestDemoListResponse(t *testing.T) {
	t.Parallel()
	sc := Demo()
	n, err := NewNode(sc, NewVirtualClock(sc.Start.Add(3*time.Hour+45*time.Minute)))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, pr := range n.ListResponse().PodResources {
		names = append(names, pr.Namespace+"/"+pr.Name)
	}
	want := "[data-science/notebook-0 inference/vllm-llama-7c9d8f6b5d-x2k8p ml-dev/dev-alice-0]"
	if got := fmtList(names); got != want {
		t.Errorf("demo pods at 3h45m = %s, want %s (the training job and the batch job have ended)", got, want)
	}
}

func fmtList(s []string) string {
	out := "["
	for i, x := range s {
		if i > 0 {
			out += " "
		}
		out += x
	}
	return out + "]"
}

var uuidRE = regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestDeviceIdentity(t *testing.T) {
	t.Parallel()
	n, _ := stepsNode(t)
	again, err := NewNode(n.Scenario(), NewVirtualClock(time.Time{}))
	if err != nil {
		t.Fatal(err)
	}
	other := *n.Scenario()
	other.Node = "other-node"
	elsewhere, err := NewNode(&other, NewVirtualClock(time.Time{}))
	if err != nil {
		t.Fatal(err)
	}
	lib := n.NVML()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatalf("Init = %v", ret)
	}
	if c, ret := lib.DeviceGetCount(); ret != nvml.SUCCESS || c != 4 {
		t.Errorf("DeviceGetCount = %d, %v; want 4", c, ret)
	}
	if v, ret := lib.SystemGetDriverVersion(); ret != nvml.SUCCESS || v == "" {
		t.Errorf("SystemGetDriverVersion = %q, %v", v, ret)
	}
	seen := map[string]bool{}
	for g := 0; g < 4; g++ {
		id := n.DeviceUUID(g)
		if !uuidRE.MatchString(id) {
			t.Errorf("gpu:%d UUID %q is not a GPU-<uuid v5>", g, id)
		}
		if id != again.DeviceUUID(g) || id == elsewhere.DeviceUUID(g) || seen[id] {
			t.Errorf("gpu:%d UUID %q: want stable per node name and GPU, distinct otherwise", g, id)
		}
		seen[id] = true
		d := device(t, n, g)
		if got, ret := d.GetUUID(); got != id || ret != nvml.SUCCESS {
			t.Errorf("GetUUID = %q, %v; want %q", got, ret, id)
		}
		if h, ret := lib.DeviceGetHandleByUUID(id); ret != nvml.SUCCESS || h != d {
			t.Errorf("DeviceGetHandleByUUID(%q) = %v, %v", id, h, ret)
		}
		if name, _ := d.GetName(); name != "NVIDIA H100 80GB HBM3" {
			t.Errorf("GetName = %q", name)
		}
		if i, _ := d.GetIndex(); i != g {
			t.Errorf("GetIndex = %d, want %d", i, g)
		}
		if cur, pend, ret := d.GetMigMode(); cur != 0 || pend != 0 || ret != nvml.SUCCESS {
			t.Errorf("GetMigMode = %d, %d, %v", cur, pend, ret)
		}
	}
	if _, ret := lib.DeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000"); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("DeviceGetHandleByUUID(unknown) = %v, want ERROR_NOT_FOUND", ret)
	}
	if _, ret := lib.DeviceGetHandleByIndex(4); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("DeviceGetHandleByIndex(4) = %v, want ERROR_INVALID_ARGUMENT", ret)
	}
	// Hopper has GPM (gpm_test.go checks an A100 has not), but not every call.
	if err := lib.Extensions().LookupSymbol("nvmlGpmSampleGet"); err != nil {
		t.Errorf("LookupSymbol(nvmlGpmSampleGet) = %v, want found", err)
	}
	if err := lib.Extensions().LookupSymbol("nvmlGpmSetStreamingEnabled"); !errors.Is(err, nvml.ERROR_NOT_SUPPORTED) {
		t.Errorf("LookupSymbol(nvmlGpmSetStreamingEnabled) = %v, want ERROR_NOT_SUPPORTED", err)
	}
	if err := lib.Extensions().LookupSymbol("nvmlDeviceGetSamples"); err != nil {
		t.Errorf("LookupSymbol(nvmlDeviceGetSamples) = %v, want found", err)
	}
	// The library-style calls answer like the device's own.
	d := device(t, n, 0)
	if _, _, ret := lib.DeviceGetSamples(d, nvml.GPU_UTILIZATION_SAMPLES, 0); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("DeviceGetSamples at the start = %v, want ERROR_NOT_FOUND", ret)
	}
	if ps, ret := lib.DeviceGetComputeRunningProcesses(d); ret != nvml.SUCCESS || len(ps) != 1 {
		t.Errorf("DeviceGetComputeRunningProcesses = %v, %v", ps, ret)
	}
	if ret := lib.Shutdown(); ret != nvml.SUCCESS {
		t.Errorf("Shutdown = %v", ret)
	}
}

func TestSystems(t *testing.T) {
	t.Parallel()
	tests := []struct {
		system, name string
		totalMiB     uint64
		idleMW       uint32
	}{
		{"dgxa100", "NVIDIA A100-SXM4-40GB", 40960, 50000},
		{"dgxh100", "NVIDIA H100 80GB HBM3", 81920, 70000},
		{"dgxh200", "NVIDIA H200 141GB HBM3e", 144384, 75000},
		{"dgxb200", "NVIDIA B200 180GB HBM3e", 184320, 120000},
	}
	for _, tt := range tests {
		t.Run(tt.system, func(t *testing.T) {
			t.Parallel()
			sc, err := ParseScenario([]byte("start: 2026-12-01T08:00:00Z\nduration: 1h\nsystem: "+tt.system+"\ngpus: 2\n"), "s.yaml")
			if err != nil {
				t.Fatal(err)
			}
			n, err := NewNode(sc, NewVirtualClock(sc.Start.Add(time.Minute)))
			if err != nil {
				t.Fatal(err)
			}
			if c, _ := n.NVML().DeviceGetCount(); c != 2 {
				t.Errorf("DeviceGetCount = %d, want 2", c)
			}
			d := device(t, n, 1)
			name, _ := d.GetName()
			m, _ := d.GetMemoryInfo_v2()
			p, _ := d.GetPowerUsage()
			if name != tt.name || m.Total != tt.totalMiB<<20 || p != tt.idleMW {
				t.Errorf("gpu:1 is %q with %d MiB at %d mW, want %q with %d MiB at %d mW", name, m.Total>>20, p, tt.name, tt.totalMiB, tt.idleMW)
			}
		})
	}
}

// TestSamplesIntegrateToTruth polls the node as the agent does, once a
// second with the last timestamp seen, and checks that integrating the
// samples (device samples for whole GPUs, per-process samples for replicas)
// reproduces Scenario.Truth.
func TestSamplesIntegrateToTruth(t *testing.T) {
	t.Parallel()
	const threshold = 0.05
	n, clock := stepsNode(t)
	sc := n.Scenario()
	period := SamplePeriod.Seconds()
	type acc struct{ allocated, idle, active float64 }
	got := make([]acc, len(sc.Pods))
	lastSeen := make([]uint64, sc.GPUs)
	credit := func(pod int, v uint32) {
		got[pod].allocated += period
		got[pod].active += period * float64(v) / 100
		if float64(v)/100 < threshold {
			got[pod].idle += period
		}
	}
	holding := func(gpu int, ts uint64) []int {
		mid := time.UnixMicro(int64(ts)).Add(-SamplePeriod / 2).Sub(sc.Start)
		var out []int
		for i, p := range sc.Pods {
			if holds(p, gpu) && p.From <= mid && mid < p.To {
				out = append(out, i)
			}
		}
		return out
	}
	for s := 1; s <= int(sc.Duration/time.Second)+2; s++ {
		clock.Set(sc.Start.Add(time.Duration(s) * time.Second))
		for g := 0; g < sc.GPUs; g++ {
			d := device(t, n, g)
			_, samples, ret := d.GetSamples(nvml.GPU_UTILIZATION_SAMPLES, lastSeen[g])
			if ret != nvml.SUCCESS {
				t.Fatalf("GetSamples(gpu:%d) at %ds = %v", g, s, ret)
			}
			if len(samples) < 5 || len(samples) > 7 {
				t.Fatalf("GetSamples(gpu:%d) at %ds returned %d samples, want 6 a second", g, s, len(samples))
			}
			procs, pret := d.GetProcessUtilization(lastSeen[g])
			if pret != nvml.SUCCESS && pret != nvml.ERROR_NOT_FOUND {
				t.Fatalf("GetProcessUtilization(gpu:%d) = %v", g, pret)
			}
			byStamp := map[uint64]map[uint32]uint32{}
			for _, p := range procs {
				if byStamp[p.TimeStamp] == nil {
					byStamp[p.TimeStamp] = map[uint32]uint32{}
				}
				byStamp[p.TimeStamp][p.Pid] = p.SmUtil
			}
			for _, smp := range samples {
				pods := holding(g, smp.TimeStamp)
				for _, i := range pods {
					if len(pods) == 1 && !sc.Pods[i].Devices[0].Replicated {
						credit(i, value(smp))
						continue
					}
					k := 0
					for k < len(sc.Pods[i].Devices) && sc.Pods[i].Devices[k].GPU != g {
						k++
					}
					credit(i, byStamp[smp.TimeStamp][sc.PID(i, k)])
				}
			}
			lastSeen[g] = samples[len(samples)-1].TimeStamp
		}
	}
	for i, w := range sc.Truth(threshold) {
		g := got[i]
		for _, c := range []struct {
			what      string
			got, want float64
		}{
			{"allocated", g.allocated, w.AllocatedSeconds},
			{"idle", g.idle, w.IdleSeconds},
			{"active", g.active, w.ActiveSeconds},
		} {
			if !near(c.got, c.want, 0.001) {
				t.Errorf("%s/%s %s: integrated %.3f s, truth %.3f s", w.Namespace, w.Pod, c.what, c.got, c.want)
			}
		}
	}
}

func TestClocks(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	c := NewVirtualClock(start)
	if got := c.Advance(90 * time.Second); !got.Equal(start.Add(90*time.Second)) || !c.Now().Equal(got) {
		t.Errorf("Advance = %s, Now = %s", got, c.Now())
	}
	c.Set(start)
	if !c.Now().Equal(start) {
		t.Errorf("after Set, Now = %s", c.Now())
	}
	r := RealClock(start)
	time.Sleep(2 * time.Millisecond)
	if el := r.Now().Sub(start); el < 2*time.Millisecond || el > time.Minute {
		t.Errorf("RealClock ran %s in about 2ms", el)
	}
}

func TestNewNodeErrors(t *testing.T) {
	t.Parallel()
	sc := Demo()
	bad := *sc
	bad.System = "dgx1"
	few := *sc
	few.GPUs = 4
	tests := []struct {
		name  string
		sc    *Scenario
		clock Clock
	}{
		{"no scenario", nil, NewVirtualClock(time.Time{})},
		{"no clock", sc, nil},
		{"unknown system", &bad, NewVirtualClock(time.Time{})},
		{"device beyond the GPUs", &few, NewVirtualClock(time.Time{})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if _, err := NewNode(tt.sc, tt.clock); err == nil {
				t.Error("NewNode succeeded")
			}
		})
	}
}

// TestNodeConcurrent reads every simulated call from several goroutines
// while the clock moves; run with -race.
func TestNodeConcurrent(t *testing.T) {
	t.Parallel()
	sc := Demo()
	clock := NewVirtualClock(sc.Start)
	n, err := NewNode(sc, clock)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := 0; g < sc.GPUs; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, _ := n.NVML().DeviceGetHandleByIndex(g)
			for i := 0; i < 200; i++ {
				d.GetSamples(nvml.GPU_UTILIZATION_SAMPLES, 0)
				d.GetProcessUtilization(0)
				d.GetComputeRunningProcesses()
				d.GetMemoryInfo_v2()
				d.GetTotalEnergyConsumption()
				n.ListResponse()
			}
		}()
	}
	for i := 0; i < 200; i++ {
		clock.Advance(time.Minute)
	}
	wg.Wait()
}
