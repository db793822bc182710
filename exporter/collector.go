package exporter

import (
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuxray/gpuxray/agent"
	"github.com/gpuxray/gpuxray/collector/workload"
)

// SnapshotSource gives the latest engine snapshot.
type SnapshotSource interface {
	Snapshot() *agent.Snapshot
}

// BuildInfo identifies the running binary in gpuxray_build_info.
type BuildInfo struct {
	Version, Revision, GoVersion string
}

// Collector is a prometheus.Collector over the engine's latest snapshot. It
// builds const metrics at scrape time and never blocks on a source.
type Collector struct {
	src   SnapshotSource
	build *BuildInfo
	extra []string
	d     *descs
}

// CollectorOption configures a Collector.
type CollectorOption func(*Collector)

// WithExtraLabels adds these Prometheus labels (already sanitised, from
// --pods.extra-labels) to every allocation series, valued from each
// allocation's ExtraLabels; a pod without the label gets "".
func WithExtraLabels(names ...string) CollectorOption {
	return func(c *Collector) { c.extra = slices.Clone(names) }
}

// NewCollector returns a collector over src. With a nil build, no
// gpuxray_build_info is exported (replay's output stays the same across
// builds).
func NewCollector(src SnapshotSource, build *BuildInfo, opts ...CollectorOption) *Collector {
	c := &Collector{src: src, build: build}
	for _, o := range opts {
		o(c)
	}
	c.d = newDescs(c.extra)
	return c
}

// Describe sends every description.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.d.all() {
		ch <- d
	}
}

// Collect renders the latest snapshot.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.src.Snapshot()
	d := c.d
	gauge := func(desc *prometheus.Desc, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, labelValues(lv)...)
	}
	counter := func(desc *prometheus.Desc, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, v, labelValues(lv)...)
	}
	if c.build != nil {
		gauge(d.buildInfo, 1, c.build.Version, c.build.Revision, c.build.GoVersion)
	}

	for _, dev := range s.Devices {
		gpu := strconv.Itoa(dev.GPU)
		gauge(d.deviceInfo, 1, dev.UUID, gpu, dev.Name, dev.MIGProfile, dev.ParentUUID, dev.DriverVersion, dev.UtilizationSource)
		gauge(d.deviceUp, boolValue(dev.Present), dev.UUID, gpu)
		if dev.HasUtilization {
			gauge(d.deviceUtil, dev.Utilization, dev.UUID, gpu)
		}
		if dev.HasMemory {
			gauge(d.deviceMemUsed, float64(dev.MemoryUsedBytes), dev.UUID, gpu)
			gauge(d.deviceMemTotal, float64(dev.MemoryTotalBytes), dev.UUID, gpu)
		}
		if dev.HasPower {
			gauge(d.devicePower, dev.PowerWatts, dev.UUID, gpu)
		}
		if dev.HasEnergy {
			counter(d.deviceEnergy, dev.EnergyJoules, dev.UUID, gpu)
		}
		if dev.HasGPM {
			gauge(d.deviceSMActive, dev.SMActive, dev.UUID, gpu)
			gauge(d.deviceSMOccupancy, dev.SMOccupancy, dev.UUID, gpu)
			gauge(d.deviceTensorActive, dev.TensorActive, dev.UUID, gpu)
		}
		if dev.HasUnattributedMemory {
			gauge(d.deviceUnattributedMem, float64(dev.UnattributedMemoryBytes), dev.UUID, gpu)
		}
		for w := agent.Window(0); w < agent.NumWindows; w++ {
			wc, win := dev.Counters[w], w.String()
			counter(d.deviceObserved, wc.Observed, dev.UUID, gpu, win)
			counter(d.deviceIdle, wc.Idle, dev.UUID, gpu, win)
			counter(d.deviceUnalloc, wc.Unallocated, dev.UUID, gpu, win)
			counter(d.deviceUnallocActive, wc.UnallocatedActive, dev.UUID, gpu, win)
			counter(d.deviceGap, wc.Gap, dev.UUID, gpu, win)
			counter(d.deviceUnattributed, wc.Unattributed, dev.UUID, gpu, win)
		}
	}

	for _, a := range s.Allocations {
		gpu := ""
		if a.GPU >= 0 {
			gpu = strconv.Itoa(a.GPU)
		}
		lv := []string{a.UUID, gpu, a.Namespace, a.Pod, a.Container, a.WorkloadKind, a.Workload, a.Model}
		for _, name := range c.extra {
			lv = append(lv, a.ExtraLabels[name])
		}
		if a.Live {
			gauge(d.allocInfo, 1, append(slices.Clip(lv), a.Resource, strconv.FormatBool(a.Shared), a.Attribution, strconv.FormatBool(a.Stale))...)
		}
		for w := agent.Window(0); w < agent.NumWindows; w++ {
			ac, wlv := a.Counters[w], append(slices.Clip(lv), w.String())
			counter(d.allocSeconds, ac.Allocated, wlv...)
			counter(d.allocIdle, ac.Idle, wlv...)
			counter(d.allocActive, ac.Active, wlv...)
		}
		if a.HasIdleStreak {
			gauge(d.allocStreak, a.IdleStreak, lv...)
		}
		if a.HasMemory {
			gauge(d.allocMemory, float64(a.MemoryUsedBytes), lv...)
		}
	}

	if s.Overflowed > 0 {
		counter(d.allocOverflow, float64(s.Overflowed))
	}
	for _, src := range s.Sources {
		gauge(d.sourceUp, boolValue(src.Up), src.Name)
		for reason, n := range src.Errors {
			counter(d.sourceErrors, float64(n), src.Name, reason)
		}
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// MaxLabelBytes caps every label value: longer ones are cut at a character
// boundary. Kubernetes names are at most 253 bytes.
const MaxLabelBytes = 256

// labelValues makes every value of lv, in place, a valid label value of at
// most MaxLabelBytes: MustNewConstMetric panics on invalid UTF-8, and
// names, models and pod labels come from outside the process.
func labelValues(lv []string) []string {
	for i, v := range lv {
		if len(v) > MaxLabelBytes || !utf8.ValidString(v) {
			lv[i] = workload.CapValue(v, MaxLabelBytes)
		}
	}
	return lv
}
