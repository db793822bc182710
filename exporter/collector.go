package exporter

import (
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuxray/gpuxray/agent"
	"github.com/gpuxray/gpuxray/collector"
	"github.com/gpuxray/gpuxray/collector/workload"
)

// SnapshotSource gives the latest engine snapshot, which the collector
// reads and never modifies.
type SnapshotSource interface {
	Snapshot() *agent.Snapshot
}

// BuildInfo identifies the running binary in gpuxray_build_info.
type BuildInfo struct {
	Version, Revision, GoVersion string
}

// Collector is a prometheus.Collector over the engine's latest snapshot. It
// renders the snapshot at scrape time, with a const metric per series, and
// never blocks on a source.
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
	for i := range s.Devices {
		dev := &s.Devices[i]
		gpu := strconv.Itoa(dev.GPU)
		gauge(d.deviceInfo, 1, dev.UUID, gpu, dev.Name, dev.MIGProfile, dev.ParentUUID, migMode(dev.Device), dev.DriverVersion, dev.UtilizationSource)
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
		for w := range agent.NumWindows {
			wc, win := &dev.Counters[w], w.String()
			counter(d.deviceObserved, wc.Observed, dev.UUID, gpu, win)
			counter(d.deviceIdle, wc.Idle, dev.UUID, gpu, win)
			counter(d.deviceUnalloc, wc.Unallocated, dev.UUID, gpu, win)
			counter(d.deviceUnallocActive, wc.UnallocatedActive, dev.UUID, gpu, win)
			counter(d.deviceGap, wc.Gap, dev.UUID, gpu, win)
			counter(d.deviceUnattributed, wc.Unattributed, dev.UUID, gpu, win)
			counter(d.deviceAllocated, wc.Allocated, dev.UUID, gpu, win)
			counter(d.deviceAllocIdle, wc.AllocatedIdle, dev.UUID, gpu, win)
			counter(d.deviceAllocActive, wc.AllocatedActive, dev.UUID, gpu, win)
		}
	}
	for i := range s.Allocations {
		a := s.Allocations[i]
		lv := []string{a.UUID, formatGPU(a.GPU), a.Namespace, a.Pod, a.Container, a.WorkloadKind, a.Workload, a.Model}
		for _, name := range c.extra {
			lv = append(lv, a.ExtraLabels[name])
		}
		if a.Live {
			gauge(d.allocInfo, 1, append(slices.Clip(lv), a.Resource, strconv.FormatBool(a.Shared), a.Attribution, strconv.FormatBool(a.Stale),
				a.DRA.ClaimNamespace, a.DRA.Claim, a.DRA.Driver, a.DRA.Pool, a.DRA.Device,
				a.Scheduling.PriorityClass, priorityValue(a.Scheduling), a.Scheduling.Queue, a.Scheduling.ClusterQueue)...)
		}
		for w := range agent.NumWindows {
			ac, wlv := &a.Counters[w], append(slices.Clip(lv), w.String())
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

// migMode is a device's mig_mode label: "enabled" or "disabled" on a whole
// GPU, so that rules can tell a GPU in MIG mode (whose counters aggregate
// its instances) from one that is used whole; empty on a MIG instance.
func migMode(d collector.Device) string {
	switch {
	case d.ParentUUID != "":
		return ""
	case d.MIGEnabled:
		return "enabled"
	}
	return "disabled"
}

// priorityValue is the priority label: the pod's priority in decimal, ""
// when it has none. A property of the pod's class, so it adds no series.
func priorityValue(s collector.Scheduling) string {
	if !s.HasPriority {
		return ""
	}
	return strconv.FormatInt(int64(s.Priority), 10)
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
// most MaxLabelBytes: an invalid UTF-8 value fails the scrape, and names,
// models and pod labels come from outside the process.
func labelValues(lv []string) []string {
	for i, v := range lv {
		if len(v) > MaxLabelBytes || !utf8.ValidString(v) {
			lv[i] = workload.CapValue(v, MaxLabelBytes)
		}
	}
	return lv
}

// formatGPU is the gpu label value: "" for a device NVML does not know.
func formatGPU(gpu int) string {
	if gpu < 0 {
		return ""
	}
	return strconv.Itoa(gpu)
}
