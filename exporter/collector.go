package exporter

import (
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuxray/gpuxray/agent"
	"github.com/gpuxray/gpuxray/collector/workload"
)

// SnapshotSource gives the latest engine snapshot.
type SnapshotSource interface {
	Snapshot() *agent.Snapshot
}

// snapshotLender is a SnapshotSource that lends its snapshots: one from
// AcquireSnapshot stays as it is until its Release, then the source may
// fill it again (agent.Engine). A scrape holds the snapshot it renders
// this way, so that the engine's polls allocate none.
type snapshotLender interface {
	AcquireSnapshot() *agent.Snapshot
}

// snapshot returns the snapshot to render, to be released when rendered
// (Release does nothing on a snapshot that was not lent).
func (c *Collector) snapshot() *agent.Snapshot {
	if l, ok := c.src.(snapshotLender); ok {
		return l.AcquireSnapshot()
	}
	return c.src.Snapshot()
}

// BuildInfo identifies the running binary in gpuxray_build_info.
type BuildInfo struct {
	Version, Revision, GoVersion string
}

// Collector is a prometheus.Collector over the engine's latest snapshot. It
// renders the snapshot at scrape time and never blocks on a source.
//
// The label pairs of a device's or an allocation's series are built once and
// kept across scrapes (see labelCache): a scrape writes only the values.
type Collector struct {
	src   SnapshotSource
	build *BuildInfo
	extra []string
	d     *descs

	buildLabels labels // of gpuxray_build_info, fixed

	// text are the families as the text fast path writes them (text.go),
	// nil when it cannot.
	text []textFamily

	mu     sync.Mutex
	labels labelCache
	orders textOrders // of the text fast path
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
	c.labels = newLabelCache()
	c.text = newTextFamilies(c.d)
	if build != nil {
		c.buildLabels = makeLabels(c.d.buildInfo, build.Version, build.Revision, build.GoVersion)
	}
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
	s := c.snapshot()
	defer s.Release()
	d := c.d

	// The label pairs of this snapshot's series, looked up (and built where a
	// series is new or a label value changed) under the lock; the entries
	// are never modified once built, so the series are sent without it.
	c.mu.Lock()
	devs, allocs := c.labels.update(s, d, c.extra)
	c.mu.Unlock()

	var out samples
	gauge := func(desc *prometheus.Desc, v float64, l labels) { ch <- out.gauge(desc, v, l) }
	counter := func(desc *prometheus.Desc, v float64, l labels) { ch <- out.counter(desc, v, l) }

	if c.build != nil {
		gauge(d.buildInfo, 1, c.buildLabels)
	}

	for i := range s.Devices {
		dev, l := &s.Devices[i], devs[i]
		gauge(d.deviceInfo, 1, l.info)
		gauge(d.deviceUp, boolValue(dev.Present), l.base)
		if dev.HasUtilization {
			gauge(d.deviceUtil, dev.Utilization, l.base)
		}
		if dev.HasMemory {
			gauge(d.deviceMemUsed, float64(dev.MemoryUsedBytes), l.base)
			gauge(d.deviceMemTotal, float64(dev.MemoryTotalBytes), l.base)
		}
		if dev.HasPower {
			gauge(d.devicePower, dev.PowerWatts, l.base)
		}
		if dev.HasEnergy {
			counter(d.deviceEnergy, dev.EnergyJoules, l.base)
		}
		if dev.HasGPM {
			gauge(d.deviceSMActive, dev.SMActive, l.base)
			gauge(d.deviceSMOccupancy, dev.SMOccupancy, l.base)
			gauge(d.deviceTensorActive, dev.TensorActive, l.base)
		}
		if dev.HasUnattributedMemory {
			gauge(d.deviceUnattributedMem, float64(dev.UnattributedMemoryBytes), l.base)
		}
		for w := agent.Window(0); w < agent.NumWindows; w++ {
			wc, wl := &dev.Counters[w], l.win[w]
			counter(d.deviceObserved, wc.Observed, wl)
			counter(d.deviceIdle, wc.Idle, wl)
			counter(d.deviceUnalloc, wc.Unallocated, wl)
			counter(d.deviceUnallocActive, wc.UnallocatedActive, wl)
			counter(d.deviceGap, wc.Gap, wl)
			counter(d.deviceUnattributed, wc.Unattributed, wl)
			counter(d.deviceAllocated, wc.Allocated, wl)
			counter(d.deviceAllocIdle, wc.AllocatedIdle, wl)
			counter(d.deviceAllocActive, wc.AllocatedActive, wl)
		}
	}

	for i := range s.Allocations {
		a, l := &s.Allocations[i], allocs[i]
		if a.Live {
			gauge(d.allocInfo, 1, l.info)
		}
		for w := agent.Window(0); w < agent.NumWindows; w++ {
			ac, wl := &a.Counters[w], l.win[w]
			counter(d.allocSeconds, ac.Allocated, wl)
			counter(d.allocIdle, ac.Idle, wl)
			counter(d.allocActive, ac.Active, wl)
		}
		if a.HasIdleStreak {
			gauge(d.allocStreak, a.IdleStreak, l.base)
		}
		if a.HasMemory {
			gauge(d.allocMemory, float64(a.MemoryUsedBytes), l.base)
		}
	}

	if s.Overflowed > 0 {
		counter(d.allocOverflow, float64(s.Overflowed), nil)
	}
	// A handful of series: their label pairs are built each scrape.
	for _, src := range s.Sources {
		gauge(d.sourceUp, boolValue(src.Up), makeLabels(d.sourceUp, src.Name))
		for reason, n := range src.Errors {
			counter(d.sourceErrors, float64(n), makeLabels(d.sourceErrors, src.Name, reason))
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
