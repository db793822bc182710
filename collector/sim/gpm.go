package sim

import (
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// The simulated GPU Performance Monitoring (GPM) metrics, derived from the
// busy ratio, since a scenario gives nothing finer. NVML reports all three in
// percent.
const (
	// GPMOccupancyRatio is SM occupancy as a fraction of SM activity: a
	// busy SM runs half the warps it could.
	GPMOccupancyRatio = 0.5
	// GPMTensorRatio is tensor-core activity as a fraction of SM activity.
	GPMTensorRatio = 0.4
)

// gpmSymbols are the GPM entry points, found only on systems with GPM.
var gpmSymbols = map[string]bool{
	"nvmlGpmQueryDeviceSupport": true, "nvmlGpmSampleAlloc": true, "nvmlGpmSampleFree": true,
	"nvmlGpmSampleGet": true, "nvmlGpmMigSampleGet": true, "nvmlGpmMetricsGet": true,
}

// GPMSupported tells whether the node's GPUs have GPM (Hopper and newer).
func (n *Node) GPMSupported() bool { return n.sys.gpm }

// gpmSample is the simulated driver's GPM sample buffer: it keeps when it was
// last taken, on the node's clock, and of what.
type gpmSample struct {
	n *Node

	mu    sync.Mutex
	freed bool
	taken bool
	gpu   int
	mig   *migDevice // the MIG device sampled, nil for the whole GPU
	at    time.Duration
}

var _ nvml.GpmSample = (*gpmSample)(nil)

// gpmReading is a sample's content, copied out under its lock.
type gpmReading struct {
	ok  bool
	gpu int
	mig *migDevice
	at  time.Duration
}

func (s *gpmSample) Free() nvml.Return {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.freed {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	s.freed = true
	return nvml.SUCCESS
}

// Get samples dev: a whole GPU (in MIG mode too) or a MIG device handle.
func (s *gpmSample) Get(dev nvml.Device) nvml.Return {
	if !s.n.sys.gpm {
		return nvml.ERROR_NOT_SUPPORTED
	}
	switch h := dev.(type) {
	case *handle:
		if h.n == s.n {
			if ret, lost := s.n.nvmlFault(h.g, "gpm"); lost {
				return ret
			}
			return s.take(h.g, nil)
		}
	case *migHandle:
		if h.parent.n == s.n {
			if t, _ := s.n.now(); !h.m.alive(t) {
				return nvml.ERROR_NOT_FOUND
			}
			return s.take(h.m.gpu, h.m)
		}
	}
	return nvml.ERROR_INVALID_ARGUMENT
}

// MigGet samples GPU instance gi of dev, a parent GPU in MIG mode.
func (s *gpmSample) MigGet(dev nvml.Device, gi int) nvml.Return {
	if !s.n.sys.gpm {
		return nvml.ERROR_NOT_SUPPORTED
	}
	h, ok := dev.(*handle)
	if !ok || h.n != s.n {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	t, _ := s.n.now()
	for _, md := range s.n.mig[h.g] {
		if md.gi == gi && md.alive(t) {
			return s.take(md.gpu, md)
		}
	}
	return nvml.ERROR_INVALID_ARGUMENT
}

func (s *gpmSample) take(gpu int, mig *migDevice) nvml.Return {
	t, _ := s.n.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.freed {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	s.taken, s.gpu, s.mig, s.at = true, gpu, mig, t
	return nvml.SUCCESS
}

func (s *gpmSample) read() gpmReading {
	s.mu.Lock()
	defer s.mu.Unlock()
	return gpmReading{ok: s.taken && !s.freed, gpu: s.gpu, mig: s.mig, at: s.at}
}

// gpmSeries is what GPM sees of a GPU (mig nil) or MIG device: the busy
// ratio its samples and power follow (GRAPHICS_UTIL, time), and the share
// of SMs busy (SM_UTIL, space).
func (n *Node) gpmSeries(gpu int, mig *migDevice) (busy, sm series) {
	if mig == nil {
		return n.gpus[gpu].util, n.gpus[gpu].sm
	}
	return mig.util, mig.sm
}

// smSeries is the SM_UTIL of a device held by the pods in holders, with
// extra activity that is not a pod's (unallocated work, unattributed
// processes) taken to occupy every SM: each pod's busy ratio times its
// sm_fraction, summed and capped at 1 as the busy ratios are.
func (s *Scenario) smSeries(pods []series, holders []int, extra []series) series {
	parts := append([]series(nil), extra...)
	fracs := make([]float64, len(extra))
	for i := range fracs {
		fracs[i] = 1
	}
	for _, i := range holders {
		parts = append(parts, pods[i])
		fracs = append(fracs, s.Pods[i].smFraction())
	}
	return combine(nil, parts, func(t time.Duration) float64 {
		v := 0.0
		for i, p := range parts {
			v += fracs[i] * p.value(t)
		}
		return min(v, 1)
	})
}

// smFraction is the pod's sm_fraction; 1 where none was set.
func (p Pod) smFraction() float64 {
	if p.SMFraction <= 0 {
		return 1
	}
	return p.SMFraction
}

// gpmMetrics is GpmMetricsGet over the span between two samples, in
// percent as NVML answers: GRAPHICS_UTIL ("percentage of time any
// compute/graphics app was active", nvml.h) is the exact mean busy ratio;
// SM_UTIL ("percentage of SMs that were busy") the exact mean of the
// SM series (smSeries), which is the busy ratio for pods that fill the
// GPU; occupancy and tensor activity are fixed fractions of SM_UTIL.
func (n *Node) gpmMetrics(mg *nvml.GpmMetricsGetType) nvml.Return {
	if !n.sys.gpm {
		return nvml.ERROR_NOT_SUPPORTED
	}
	if mg == nil || int(mg.NumMetrics) > len(mg.Metrics) {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	s1, ok1 := mg.Sample1.(*gpmSample)
	s2, ok2 := mg.Sample2.(*gpmSample)
	if !ok1 || !ok2 || s1 == nil || s2 == nil || s1.n != n || s2.n != n {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	a, b := s1.read(), s2.read()
	if !a.ok || !b.ok || a.gpu != b.gpu || a.mig != b.mig || b.at <= a.at {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	mg.Version = nvml.GPM_METRICS_GET_VERSION
	busyS, smS := n.gpmSeries(a.gpu, a.mig)
	busy := 100 * busyS.integral(a.at, b.at) / (b.at - a.at).Seconds()
	sm := 100 * smS.integral(a.at, b.at) / (b.at - a.at).Seconds()
	for i := range mg.Metrics[:mg.NumMetrics] {
		m := &mg.Metrics[i]
		m.NvmlReturn, m.Value = uint32(nvml.SUCCESS), 0
		switch nvml.GpmMetricId(m.MetricId) {
		case nvml.GPM_METRIC_GRAPHICS_UTIL:
			m.Value = busy
		case nvml.GPM_METRIC_SM_UTIL:
			m.Value = sm
		case nvml.GPM_METRIC_SM_OCCUPANCY:
			m.Value = GPMOccupancyRatio * sm
		case nvml.GPM_METRIC_ANY_TENSOR_UTIL:
			m.Value = GPMTensorRatio * sm
		default:
			m.NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
		}
	}
	return nvml.SUCCESS
}

// GPM calls on the library.

func (d *driver) GpmSampleAlloc() (nvml.GpmSample, nvml.Return) {
	if !d.n.sys.gpm {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	return &gpmSample{n: d.n}, nvml.SUCCESS
}

func (d *driver) GpmSampleFree(s nvml.GpmSample) nvml.Return {
	if s == nil {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	return s.Free()
}

func (d *driver) GpmSampleGet(dev nvml.Device, s nvml.GpmSample) nvml.Return {
	if s == nil {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	return s.Get(dev)
}

func (d *driver) GpmMigSampleGet(dev nvml.Device, gi int, s nvml.GpmSample) nvml.Return {
	if s == nil {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	return s.MigGet(dev, gi)
}

func (d *driver) GpmQueryDeviceSupport(dev nvml.Device) (nvml.GpmSupport, nvml.Return) {
	return dev.GpmQueryDeviceSupport()
}

func (d *driver) GpmMetricsGet(mg *nvml.GpmMetricsGetType) nvml.Return {
	return d.n.gpmMetrics(mg)
}

// GPM calls on devices: nvml.h says GpmSampleGet and GpmQueryDeviceSupport
// take a GPU or a MIG device handle; GpmMigSampleGet takes the parent GPU.

func gpmSupport(n *Node) (nvml.GpmSupport, nvml.Return) {
	if !n.sys.gpm {
		return nvml.GpmSupport{}, nvml.ERROR_NOT_SUPPORTED
	}
	return nvml.GpmSupport{Version: nvml.GPM_SUPPORT_VERSION, IsSupportedDevice: 1}, nvml.SUCCESS
}

func (h *handle) GpmQueryDeviceSupport() (nvml.GpmSupport, nvml.Return) { return gpmSupport(h.n) }

func (h *handle) GpmSampleGet(s nvml.GpmSample) nvml.Return {
	if s == nil {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	return s.Get(h)
}

func (h *handle) GpmMigSampleGet(gi int, s nvml.GpmSample) nvml.Return {
	if s == nil {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	return s.MigGet(h, gi)
}

func (m *migHandle) GpmQueryDeviceSupport() (nvml.GpmSupport, nvml.Return) {
	return gpmSupport(m.parent.n)
}

func (m *migHandle) GpmSampleGet(s nvml.GpmSample) nvml.Return {
	if s == nil {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	return s.Get(m)
}

func (m *migHandle) GpmMigSampleGet(gi int, s nvml.GpmSample) nvml.Return {
	if s == nil {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	return s.MigGet(m, gi)
}
