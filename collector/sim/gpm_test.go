package sim

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// gpmYAML is an H100 node with gpu:0 in MIG mode (3g.40gb at index 0,
// 1g.10gb at index 2, GPU instance IDs 2 and 7) and gpu:1 whole.
const gpmYAML = migHead + `mig:
  "gpu:0": [3g.40gb, empty, 1g.10gb]
pods:
  - namespace: a
    name: big
    devices: ["mig:0/0"]
    util:
      - {at: 0s, value: 0.9}
      - {at: 8m, value: 0}
      - {at: 13m, value: 0.85}
  - namespace: a
    name: small
    devices: ["mig:0/2"]
    from: 2m
    util:
      - {at: 2m, value: 0.7}
  - namespace: b
    name: whole
    devices: ["gpu:1"]
    util:
      - {at: 0s, value: 0.95}
      - {at: 15m, value: 0}
`

// gpmRead takes one sample at a, one at b (scenario times), with take, and
// returns GPM SM util, occupancy and tensor activity between them.
func gpmRead(t *testing.T, n *Node, clock *VirtualClock, a, b time.Duration, take func(nvml.GpmSample) nvml.Return) (sm, occ, tensor float64) {
	t.Helper()
	lib := n.NVML()
	s1, ret1 := lib.GpmSampleAlloc()
	s2, ret2 := lib.GpmSampleAlloc()
	if ret1 != nvml.SUCCESS || ret2 != nvml.SUCCESS {
		t.Fatalf("GpmSampleAlloc = %v, %v", ret1, ret2)
	}
	defer lib.GpmSampleFree(s1)
	defer lib.GpmSampleFree(s2)
	clock.Set(n.Scenario().Start.Add(a))
	if ret := take(s1); ret != nvml.SUCCESS {
		t.Fatalf("first sample = %v", ret)
	}
	clock.Set(n.Scenario().Start.Add(b))
	if ret := take(s2); ret != nvml.SUCCESS {
		t.Fatalf("second sample = %v", ret)
	}
	mg := &nvml.GpmMetricsGetType{NumMetrics: 3, Sample1: s1, Sample2: s2}
	mg.Metrics[0].MetricId = uint32(nvml.GPM_METRIC_SM_UTIL)
	mg.Metrics[1].MetricId = uint32(nvml.GPM_METRIC_SM_OCCUPANCY)
	mg.Metrics[2].MetricId = uint32(nvml.GPM_METRIC_ANY_TENSOR_UTIL)
	if ret := lib.GpmMetricsGet(mg); ret != nvml.SUCCESS {
		t.Fatalf("GpmMetricsGet = %v", ret)
	}
	for i := range 3 {
		if mg.Metrics[i].NvmlReturn != uint32(nvml.SUCCESS) {
			t.Errorf("metric %d nvmlReturn = %d", mg.Metrics[i].MetricId, mg.Metrics[i].NvmlReturn)
		}
	}
	if mg.Version != nvml.GPM_METRICS_GET_VERSION {
		t.Errorf("Version = %d", mg.Version)
	}
	return mg.Metrics[0].Value, mg.Metrics[1].Value, mg.Metrics[2].Value
}

// TestGPMSMUtil checks that GPM SM util between two samples is the exact
// mean busy ratio over the span, in percent, on MIG devices (by GPU instance
// on the parent and by MIG handle), on a whole GPU and on a parent in MIG
// mode, for spans that cross busy-ratio steps; and that occupancy and tensor
// activity are their documented fractions of it.
func TestGPMSMUtil(t *testing.T) {
	t.Parallel()
	const m = time.Minute
	tests := []struct {
		name string
		gpu  int
		gi   int // GPU instance for GpmMigSampleGet; -1 samples the GPU
		mig  int // MIG device index sampled through its handle, or -1
		a, b time.Duration
		want float64 // percent, computed by hand
	}{
		{"inside a step", 0, 2, -1, 1 * m, 2 * m, 90},
		{"100ms inside a step", 0, 2, -1, 1 * m, 1*m + 100*time.Millisecond, 90},
		{"across a drop", 0, 2, -1, 7 * m, 9 * m, (60*0.9 + 60*0) / 120 * 100},
		{"across two steps", 0, 2, -1, 7*m + 30*time.Second, 13*m + 30*time.Second, (30*0.9 + 300*0 + 30*0.85) / 360 * 100},
		{"across a rise", 0, 2, -1, 12 * m, 14 * m, (60 * 0.85) / 120 * 100},
		{"idle", 0, 2, -1, 9 * m, 12 * m, 0},
		{"by MIG handle, across two steps", 0, -1, 0, 7*m + 30*time.Second, 13*m + 30*time.Second, (30*0.9 + 300*0 + 30*0.85) / 360 * 100},
		{"before the pod starts", 0, 7, -1, 1 * m, 3 * m, (60 * 0.7) / 120 * 100},
		{"by MIG handle, before the pod starts", 0, -1, 2, 1 * m, 3 * m, (60 * 0.7) / 120 * 100},
		{"before the scenario starts", 0, 7, -1, -1 * m, 3 * m, (60 * 0.7) / 240 * 100},
		{"parent in MIG mode: slice-weighted", 0, -1, -1, 1 * m, 3 * m, (3.0/7*0.9*120 + 1.0/7*0.7*60) / 120 * 100},
		{"whole GPU", 1, -1, -1, 14 * m, 16 * m, (60 * 0.95) / 120 * 100},
		{"whole GPU, odd span", 1, -1, -1, 14*m + 59*time.Second + 900*time.Millisecond, 15*m + 100*time.Millisecond, 0.95 * 100 / 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			n, clock := yamlNode(t, gpmYAML)
			lib := n.NVML()
			parent := device(t, n, tt.gpu)
			var take func(nvml.GpmSample) nvml.Return
			switch {
			case tt.gi >= 0:
				take = func(s nvml.GpmSample) nvml.Return { return lib.GpmMigSampleGet(parent, tt.gi, s) }
			case tt.mig >= 0:
				dev := migHandleAt(t, n, tt.gpu, tt.mig)
				take = func(s nvml.GpmSample) nvml.Return { return lib.GpmSampleGet(dev, s) }
			default:
				take = func(s nvml.GpmSample) nvml.Return { return lib.GpmSampleGet(parent, s) }
			}
			sm, occ, tensor := gpmRead(t, n, clock, tt.a, tt.b, take)
			if math.Abs(sm-tt.want) > 1e-9 {
				t.Errorf("SM util = %.12g%%, want %.12g%%", sm, tt.want)
			}
			if math.Abs(occ-GPMOccupancyRatio*tt.want) > 1e-9 || math.Abs(tensor-GPMTensorRatio*tt.want) > 1e-9 {
				t.Errorf("occupancy %g%%, tensor %g%%; want %g and %g of %g%%", occ, tensor, GPMOccupancyRatio, GPMTensorRatio, tt.want)
			}
		})
	}
}

// TestGPMSampleSpellings takes the same samples through every spelling of
// the call (library, device, sample) and gets the same metric.
func TestGPMSampleSpellings(t *testing.T) {
	t.Parallel()
	n, clock := yamlNode(t, gpmYAML)
	lib := n.NVML()
	parent := device(t, n, 0)
	mh := migHandleAt(t, n, 0, 0)
	gi, _ := mh.GetGpuInstanceId()
	spellings := map[string]func(nvml.GpmSample) nvml.Return{
		"lib.GpmMigSampleGet":    func(s nvml.GpmSample) nvml.Return { return lib.GpmMigSampleGet(parent, gi, s) },
		"parent.GpmMigSampleGet": func(s nvml.GpmSample) nvml.Return { return parent.GpmMigSampleGet(gi, s) },
		"sample.MigGet":          func(s nvml.GpmSample) nvml.Return { return s.MigGet(parent, gi) },
		"lib.GpmSampleGet(mig)":  func(s nvml.GpmSample) nvml.Return { return lib.GpmSampleGet(mh, s) },
		"mig.GpmSampleGet":       func(s nvml.GpmSample) nvml.Return { return mh.GpmSampleGet(s) },
		"sample.Get(mig)":        func(s nvml.GpmSample) nvml.Return { return s.Get(mh) },
	}
	for name, take := range spellings {
		if sm, _, _ := gpmRead(t, n, clock, 7*time.Minute, 9*time.Minute, take); math.Abs(sm-45) > 1e-9 {
			t.Errorf("%s: SM util = %g%%, want 45%%", name, sm)
		}
	}
	whole := device(t, n, 1)
	for name, take := range map[string]func(nvml.GpmSample) nvml.Return{
		"lib.GpmSampleGet": func(s nvml.GpmSample) nvml.Return { return lib.GpmSampleGet(whole, s) },
		"dev.GpmSampleGet": func(s nvml.GpmSample) nvml.Return { return whole.GpmSampleGet(s) },
		"sample.Get":       func(s nvml.GpmSample) nvml.Return { return s.Get(whole) },
	} {
		if sm, _, _ := gpmRead(t, n, clock, 14*time.Minute, 16*time.Minute, take); math.Abs(sm-47.5) > 1e-9 {
			t.Errorf("%s: SM util = %g%%, want 47.5%%", name, sm)
		}
	}
	for _, d := range []nvml.Device{parent, mh, whole} {
		if sup, ret := lib.GpmQueryDeviceSupport(d); sup.IsSupportedDevice != 1 || ret != nvml.SUCCESS {
			t.Errorf("GpmQueryDeviceSupport = %+v, %v", sup, ret)
		}
	}
}

// TestGPMAgreesWithSamples checks that GPM on a whole GPU reads the same
// busy ratio as its utilization samples: over a span on the sample grid, SM
// util is the mean of the samples (which NVML rounds to whole percent).
func TestGPMAgreesWithSamples(t *testing.T) {
	t.Parallel()
	n, clock := yamlNode(t, gpmYAML)
	lib := n.NVML()
	whole := device(t, n, 1)
	start := n.Scenario().Start
	k1, k2 := int64(5390), int64(5410) // around the 15m step (sample 5400)
	at := func(k int64) time.Duration { return time.UnixMicro(int64(stamp(n, k))).Sub(start) }
	sm, _, _ := gpmRead(t, n, clock, at(k1), at(k2), func(s nvml.GpmSample) nvml.Return { return lib.GpmSampleGet(whole, s) })
	_, samples, ret := whole.GetSamples(nvml.GPU_UTILIZATION_SAMPLES, stamp(n, k1))
	if ret != nvml.SUCCESS || len(samples) != int(k2-k1) {
		t.Fatalf("GetSamples = %d samples, %v", len(samples), ret)
	}
	var sum float64
	for _, s := range samples {
		sum += float64(value(s))
	}
	if mean := sum / float64(len(samples)); math.Abs(mean-sm) > 0.5 {
		t.Errorf("GPM SM util %g%%, samples' mean %g%%", sm, mean)
	}
}

func TestGPMErrors(t *testing.T) {
	t.Parallel()
	n, clock := yamlNode(t, gpmYAML)
	lib := n.NVML()
	parent, whole := device(t, n, 0), device(t, n, 1)
	alloc := func() nvml.GpmSample {
		s, ret := lib.GpmSampleAlloc()
		if ret != nvml.SUCCESS {
			t.Fatalf("GpmSampleAlloc = %v", ret)
		}
		return s
	}
	metrics := func(s1, s2 nvml.GpmSample) nvml.Return {
		mg := &nvml.GpmMetricsGetType{NumMetrics: 1, Sample1: s1, Sample2: s2}
		mg.Metrics[0].MetricId = uint32(nvml.GPM_METRIC_SM_UTIL)
		return lib.GpmMetricsGet(mg)
	}
	tick := func() { clock.Advance(time.Second) }

	a, b := alloc(), alloc()
	if ret := metrics(a, b); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("metrics of samples never taken = %v", ret)
	}
	lib.GpmSampleGet(whole, a)
	tick()
	lib.GpmMigSampleGet(parent, 2, b)
	if ret := metrics(a, b); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("metrics of samples of different devices = %v", ret)
	}
	lib.GpmMigSampleGet(parent, 7, a)
	if ret := metrics(a, b); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("metrics of samples of different GPU instances = %v", ret)
	}
	lib.GpmSampleGet(parent, a)
	lib.GpmSampleGet(parent, b)
	if ret := metrics(a, b); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("metrics of samples taken at the same time = %v", ret)
	}
	tick()
	lib.GpmSampleGet(parent, b)
	if ret := metrics(b, a); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("metrics of samples in reverse order = %v", ret)
	}
	if ret := metrics(a, b); ret != nvml.SUCCESS {
		t.Errorf("metrics = %v", ret)
	}
	if ret := metrics(a, nil); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("metrics with no second sample = %v", ret)
	}
	if ret := lib.GpmMetricsGet(&nvml.GpmMetricsGetType{NumMetrics: 478, Sample1: a, Sample2: b}); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("metrics with NumMetrics 478 = %v", ret)
	}

	// Metrics the simulation has no value for say so, one by one.
	mg := &nvml.GpmMetricsGetType{NumMetrics: 2, Sample1: a, Sample2: b}
	mg.Metrics[0].MetricId = uint32(nvml.GPM_METRIC_DRAM_BW_UTIL)
	mg.Metrics[1].MetricId = uint32(nvml.GPM_METRIC_SM_UTIL)
	mg.Metrics[0].Value = 42
	if ret := lib.GpmMetricsGet(mg); ret != nvml.SUCCESS || mg.Metrics[0].NvmlReturn != uint32(nvml.ERROR_NOT_SUPPORTED) || mg.Metrics[0].Value != 0 || mg.Metrics[1].NvmlReturn != uint32(nvml.SUCCESS) {
		t.Errorf("GpmMetricsGet with DRAM_BW_UTIL = %v, metrics %+v %+v", ret, mg.Metrics[0], mg.Metrics[1])
	}

	// GPU instances that do not exist, devices that are not parents.
	if ret := lib.GpmMigSampleGet(parent, 3, a); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("GpmMigSampleGet(unknown GPU instance) = %v", ret)
	}
	if ret := lib.GpmMigSampleGet(whole, 0, a); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("GpmMigSampleGet(GPU without MIG) = %v", ret)
	}
	if ret := lib.GpmMigSampleGet(migHandleAt(t, n, 0, 0), 2, a); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("GpmMigSampleGet(MIG handle) = %v", ret)
	}
	other, _ := yamlNode(t, gpmYAML)
	if ret := lib.GpmSampleGet(device(t, other, 1), a); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("GpmSampleGet(another node's device) = %v", ret)
	}
	if ret := lib.GpmSampleGet(whole, nil); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("GpmSampleGet(nil sample) = %v", ret)
	}

	// Freed samples are gone.
	if ret := lib.GpmSampleFree(a); ret != nvml.SUCCESS {
		t.Errorf("GpmSampleFree = %v", ret)
	}
	if ret := lib.GpmSampleFree(a); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("second GpmSampleFree = %v", ret)
	}
	if ret := metrics(a, b); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("metrics of a freed sample = %v", ret)
	}
	if ret := lib.GpmSampleGet(whole, a); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("GpmSampleGet into a freed sample = %v", ret)
	}
}

// TestGPMSupportBySystem checks that Hopper and Blackwell have GPM and an
// A100 has none: symbols missing, every call ERROR_NOT_SUPPORTED.
func TestGPMSupportBySystem(t *testing.T) {
	t.Parallel()
	for sysName, want := range map[string]bool{"dgxa100": false, "dgxh100": true, "dgxh200": true, "dgxb200": true} {
		t.Run(sysName, func(t *testing.T) {
			t.Parallel()
			n, clock := yamlNode(t, fmt.Sprintf("start: 2026-12-01T08:00:00Z\nduration: 1h\nsystem: %s\ngpus: 1\n", sysName))
			lib := n.NVML()
			if n.GPMSupported() != want {
				t.Errorf("GPMSupported = %v", n.GPMSupported())
			}
			for sym := range gpmSymbols {
				err := lib.Extensions().LookupSymbol(sym)
				if want && err != nil {
					t.Errorf("LookupSymbol(%s) = %v, want found", sym, err)
				}
				if !want && !errors.Is(err, nvml.ERROR_NOT_SUPPORTED) {
					t.Errorf("LookupSymbol(%s) = %v, want ERROR_NOT_SUPPORTED", sym, err)
				}
			}
			d := device(t, n, 0)
			sup, ret := lib.GpmQueryDeviceSupport(d)
			if want && (ret != nvml.SUCCESS || sup.IsSupportedDevice != 1) || !want && ret != nvml.ERROR_NOT_SUPPORTED {
				t.Errorf("GpmQueryDeviceSupport = %+v, %v", sup, ret)
			}
			s, ret := lib.GpmSampleAlloc()
			if !want {
				if ret != nvml.ERROR_NOT_SUPPORTED || s != nil {
					t.Errorf("GpmSampleAlloc = %v, %v; want ERROR_NOT_SUPPORTED", s, ret)
				}
				if ret := lib.GpmMetricsGet(&nvml.GpmMetricsGetType{}); ret != nvml.ERROR_NOT_SUPPORTED {
					t.Errorf("GpmMetricsGet = %v, want ERROR_NOT_SUPPORTED", ret)
				}
				// A sample made on a Hopper node is no use here either.
				h, _ := yamlNode(t, gpmYAML)
				hs, _ := h.NVML().GpmSampleAlloc()
				if ret := lib.GpmSampleGet(d, hs); ret != nvml.ERROR_INVALID_ARGUMENT {
					t.Errorf("GpmSampleGet(foreign sample) = %v", ret)
				}
				return
			}
			if sm, _, _ := gpmRead(t, n, clock, time.Minute, 2*time.Minute, func(s nvml.GpmSample) nvml.Return { return lib.GpmSampleGet(d, s) }); sm != 0 {
				t.Errorf("SM util of an idle GPU = %g", sm)
			}
		})
	}
}

// TestMIGGPMConcurrent reads MIG and GPM calls from several goroutines while
// the clock moves; run with -race.
func TestMIGGPMConcurrent(t *testing.T) {
	t.Parallel()
	n, clock := yamlNode(t, gpmYAML)
	lib := n.NVML()
	parent := device(t, n, 0)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s1, _ := lib.GpmSampleAlloc()
			s2, _ := lib.GpmSampleAlloc()
			defer lib.GpmSampleFree(s1)
			defer lib.GpmSampleFree(s2)
			for i := 0; i < 200; i++ {
				m, _ := parent.GetMigDeviceHandleByIndex(w % 3)
				if m == nil {
					m, _ = parent.GetMigDeviceHandleByIndex(0)
				}
				gi, _ := m.GetGpuInstanceId()
				uuid, _ := m.GetUUID()
				lib.DeviceGetHandleByUUID(uuid)
				m.GetAttributes()
				m.GetMemoryInfo_v2()
				m.GetComputeRunningProcesses()
				parent.GetComputeRunningProcesses()
				parent.GetPowerUsage()
				lib.GpmMigSampleGet(parent, gi, s1)
				lib.GpmMigSampleGet(parent, gi, s2)
				mg := &nvml.GpmMetricsGetType{NumMetrics: 1, Sample1: s1, Sample2: s2}
				mg.Metrics[0].MetricId = uint32(nvml.GPM_METRIC_SM_UTIL)
				lib.GpmMetricsGet(mg)
				n.ListResponse()
			}
		}()
	}
	for i := 0; i < 200; i++ {
		clock.Advance(100 * time.Millisecond)
	}
	wg.Wait()
}

// TestMIGGPMRecordsNoCalls polls MIG devices and GPM as a reader does and
// checks that go-nvml's mock recorded none of the calls (see
// TestDriverRecordsNoCalls).
func TestMIGGPMRecordsNoCalls(t *testing.T) {
	t.Parallel()
	n, clock := yamlNode(t, gpmYAML)
	lib := n.NVML()
	for _, sym := range []string{"nvmlGpmQueryDeviceSupport", "nvmlGpmMigSampleGet", "nvmlDeviceGetMigDeviceHandleByIndex"} {
		if err := lib.Extensions().LookupSymbol(sym); err != nil {
			t.Errorf("LookupSymbol(%s) = %v", sym, err)
		}
	}
	count, _ := lib.DeviceGetCount()
	var migs []*migHandle
	prev := map[nvml.Device]nvml.GpmSample{}
	for range 300 {
		clock.Advance(time.Second)
		for g := range count {
			d, _ := lib.DeviceGetHandleByIndex(g)
			lib.DeviceGetMigMode(d)
			d.GetMigMode()
			lib.GpmQueryDeviceSupport(d)
			d.GpmQueryDeviceSupport()
			lib.DeviceIsMigDeviceHandle(d)
			d.GetComputeRunningProcesses()
			d.GetSamples(nvml.GPU_UTILIZATION_SAMPLES, 0)
			d.GetProcessUtilization(0)
			slots, _ := lib.DeviceGetMaxMigDeviceCount(d)
			d.GetMaxMigDeviceCount()
			devs := []nvml.Device{d}
			for i := range slots {
				m, ret := lib.DeviceGetMigDeviceHandleByIndex(d, i)
				d.GetMigDeviceHandleByIndex(i)
				if ret != nvml.SUCCESS {
					continue
				}
				if len(migs) < 2 {
					migs = append(migs, m.(*migHandle))
				}
				devs = append(devs, m)
				uuid, _ := m.GetUUID()
				lib.DeviceGetHandleByUUID(uuid)
				lib.DeviceGetUUID(m)
				m.GetName()
				lib.DeviceGetName(m)
				m.GetIndex()
				lib.DeviceGetIndex(m)
				m.GetBrand()
				m.GetArchitecture()
				m.GetCudaComputeCapability()
				m.GetPciInfo()
				m.GetMinorNumber()
				m.GetMigMode()
				m.GetMaxMigDeviceCount()
				m.GetMigDeviceHandleByIndex(0)
				m.IsMigDeviceHandle()
				lib.DeviceGetAttributes(m)
				m.GetAttributes()
				lib.DeviceGetGpuInstanceId(m)
				gi, _ := m.GetGpuInstanceId()
				lib.DeviceGetComputeInstanceId(m)
				m.GetComputeInstanceId()
				lib.DeviceGetDeviceHandleFromMigDeviceHandle(m)
				m.GetDeviceHandleFromMigDeviceHandle()
				m.GetMemoryInfo()
				m.GetMemoryInfo_v2()
				lib.DeviceGetMemoryInfo_v2(m)
				m.GetComputeRunningProcesses()
				lib.DeviceGetComputeRunningProcesses(m)
				m.GetPowerUsage()
				m.GetTotalEnergyConsumption()
				m.GetSamples(nvml.GPU_UTILIZATION_SAMPLES, 0)
				m.GetProcessUtilization(0)
				m.GpmQueryDeviceSupport()
				m.GpmMigSampleGet(gi, nil)
				s, _ := lib.GpmSampleAlloc()
				lib.GpmMigSampleGet(d, gi, s)
				d.GpmMigSampleGet(gi, s)
				m.GpmSampleGet(s)
				lib.GpmSampleFree(s)
			}
			for _, dev := range devs {
				s, _ := lib.GpmSampleAlloc()
				lib.GpmSampleGet(dev, s)
				if p := prev[dev]; p != nil {
					mg := &nvml.GpmMetricsGetType{NumMetrics: 3, Sample1: p, Sample2: s}
					mg.Metrics[0].MetricId = uint32(nvml.GPM_METRIC_SM_UTIL)
					mg.Metrics[1].MetricId = uint32(nvml.GPM_METRIC_SM_OCCUPANCY)
					mg.Metrics[2].MetricId = uint32(nvml.GPM_METRIC_ANY_TENSOR_UTIL)
					if ret := lib.GpmMetricsGet(mg); ret != nvml.SUCCESS {
						t.Fatalf("GpmMetricsGet = %v", ret)
					}
					p.Free()
				}
				prev[dev] = s
			}
		}
	}
	if len(migs) != 2 {
		t.Fatalf("polled %d MIG devices, want 2", len(migs))
	}
	if got := recorded(n.srv); len(got) > 0 {
		t.Errorf("mock server recorded calls: %v", got)
	}
	for g, dev := range n.srv.Devices {
		if got := recorded(dev); len(got) > 0 {
			t.Errorf("mock device %d recorded calls: %v", g, got)
		}
	}
	for _, m := range migs {
		if got := recorded(m.Device); len(got) > 0 {
			t.Errorf("MIG device %d's mock recorded calls: %v", m.m.slot, got)
		}
	}
}
