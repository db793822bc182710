package nvml

import (
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuxray/gpuxray/collector"
)

// gpmMinInterval is the shortest interval between two GPM samples that NVML
// computes metrics over.
const gpmMinInterval = 100 * time.Millisecond

// gpmSymbols are the GPM entry points; drivers before R520 lack them, and
// calling a missing symbol kills the process.
var gpmSymbols = []string{"nvmlGpmQueryDeviceSupport", "nvmlGpmSampleAlloc", "nvmlGpmSampleGet", "nvmlGpmMigSampleGet", "nvmlGpmMetricsGet"}

// gpmSampler keeps the previous GPM sample of one device (or MIG instance)
// and turns each new one into activity ratios over the interval between them.
type gpmSampler struct {
	parent  nvml.Device // the whole GPU
	gi      int         // GPU instance for a MIG instance, -1 for the whole GPU
	prev    nvml.GpmSample
	cur     nvml.GpmSample
	prevAt  time.Time
	hasPrev bool
}

// gpmSupported reports whether the library has GPM and the device supports it.
func gpmSupported(lib nvml.Interface, h nvml.Device) bool {
	ext := lib.Extensions()
	for _, s := range gpmSymbols {
		if ext.LookupSymbol(s) != nil {
			return false
		}
	}
	sup, ret := h.GpmQueryDeviceSupport()
	return ret == nvml.SUCCESS && sup.IsSupportedDevice != 0
}

func newGPMSampler(lib nvml.Interface, parent nvml.Device, gi int) (*gpmSampler, nvml.Return) {
	a, ret := lib.GpmSampleAlloc()
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	b, ret := lib.GpmSampleAlloc()
	if ret != nvml.SUCCESS {
		lib.GpmSampleFree(a)
		return nil, ret
	}
	return &gpmSampler{parent: parent, gi: gi, prev: a, cur: b}, nvml.SUCCESS
}

func (g *gpmSampler) free(lib nvml.Interface) {
	lib.GpmSampleFree(g.prev)
	lib.GpmSampleFree(g.cur)
}

// read takes a GPM sample and, when a previous one is at least
// gpmMinInterval older, returns the time the GPU was busy over the
// interval as a sample covering it, ending when the new one was taken
// (clock's time when the call answered, which can be long after it was
// made), plus the gauges. ok is false on the first sample.
//
// Busy time is GRAPHICS_UTIL, "percentage of time any compute/graphics app
// was active" (nvml.h), the GPM twin of the utilization samples and what
// DCGM reads for DCGM_FI_PROF_GR_ENGINE_ACTIVE (dcgmlib/src/dcgm_fields.cpp).
// SM_UTIL, "percentage of SMs that were busy", is spatial: a decode server
// whose kernels run all the time on a few SMs is busy all the time and
// SM-active a few percent. It stays the SMActive gauge.
func (g *gpmSampler) read(lib nvml.Interface, m *nvml.GpmMetricsGetType, clock Clock) (collector.Sample, collector.GPMGauges, bool, nvml.Return) {
	if g.hasPrev && clock.Now().Sub(g.prevAt) < gpmMinInterval {
		return collector.Sample{}, collector.GPMGauges{}, false, nvml.SUCCESS
	}
	var ret nvml.Return
	if g.gi >= 0 {
		ret = lib.GpmMigSampleGet(g.parent, g.gi, g.cur)
	} else {
		ret = lib.GpmSampleGet(g.parent, g.cur)
	}
	if ret != nvml.SUCCESS {
		return collector.Sample{}, collector.GPMGauges{}, false, ret
	}
	now := clock.Now()
	first, since := !g.hasPrev, g.prevAt
	g.prev, g.cur = g.cur, g.prev
	g.hasPrev, g.prevAt = true, now
	if first {
		return collector.Sample{}, collector.GPMGauges{}, false, nvml.SUCCESS
	}
	// g.cur now holds the older sample.
	m.NumMetrics = 4
	m.Sample1, m.Sample2 = g.cur, g.prev
	m.Metrics[0] = nvml.GpmMetric{MetricId: uint32(nvml.GPM_METRIC_SM_UTIL)}
	m.Metrics[1] = nvml.GpmMetric{MetricId: uint32(nvml.GPM_METRIC_SM_OCCUPANCY)}
	m.Metrics[2] = nvml.GpmMetric{MetricId: uint32(nvml.GPM_METRIC_ANY_TENSOR_UTIL)}
	m.Metrics[3] = nvml.GpmMetric{MetricId: uint32(nvml.GPM_METRIC_GRAPHICS_UTIL)}
	if ret := lib.GpmMetricsGet(m); ret != nvml.SUCCESS {
		return collector.Sample{}, collector.GPMGauges{}, false, ret
	}
	if m.Metrics[3].NvmlReturn != uint32(nvml.SUCCESS) || m.Metrics[3].Value != m.Metrics[3].Value {
		return collector.Sample{}, collector.GPMGauges{}, false, nvml.Return(m.Metrics[3].NvmlReturn)
	}
	ratio := func(i int) float64 {
		v := m.Metrics[i].Value / 100
		if m.Metrics[i].NvmlReturn != uint32(nvml.SUCCESS) || v != v {
			return 0
		}
		return min(max(v, 0), 1)
	}
	gauges := collector.GPMGauges{HasGPM: true, SMActive: ratio(0), SMOccupancy: ratio(1), TensorActive: ratio(2)}
	return collector.Sample{Time: now, Value: ratio(3), Since: since}, gauges, true, nvml.SUCCESS
}
