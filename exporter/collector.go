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

	// fams are the families (families.go); text says whether the text
	// fast path (text.go) can write them.
	fams []family
	text bool

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
	c.fams, c.text = newFamilies(c.d)
	if build != nil {
		c.buildLabels = makeLabels(c.d.buildInfo, build.Version, build.Revision, build.GoVersion)
	}
	return c
}

// Describe sends every description.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for i := range c.fams {
		ch <- c.fams[i].desc
	}
}

// Collect renders the latest snapshot.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.src.Snapshot()
	// Under the lock: the label cache's slices are reused by the next
	// scrape. The samples sent keep only labels, which are never modified
	// once built, and their own values.
	c.mu.Lock()
	defer c.mu.Unlock()
	devs, allocs := c.labels.update(s, c.d, c.extra)

	var out samples
	var rows []textRow
	for i := range c.fams {
		f := &c.fams[i]
		emit := func(v float64, l labels) { ch <- out.sample(f.desc, f.typ, v, l) }
		switch f.kind {
		case kindDevInfo:
			for _, l := range devs {
				emit(1, l.info)
			}
		case kindDevBase:
			for j := range s.Devices {
				if v, ok := f.dev(&s.Devices[j]); ok {
					emit(v, devs[j].base)
				}
			}
		case kindDevWin:
			for j := range s.Devices {
				for w := range agent.NumWindows {
					emit(f.devWin(&s.Devices[j].Counters[w]), devs[j].win[w])
				}
			}
		case kindAllocInfo:
			for j := range s.Allocations {
				if s.Allocations[j].Live {
					emit(1, allocs[j].info)
				}
			}
		case kindAllocBase:
			for j := range s.Allocations {
				if v, ok := f.alloc(s.Allocations[j]); ok {
					emit(v, allocs[j].base)
				}
			}
		case kindAllocWin:
			for j := range s.Allocations {
				for w := range agent.NumWindows {
					emit(f.allocWin(&s.Allocations[j].Counters[w]), allocs[j].win[w])
				}
			}
		case kindOther:
			rows = f.other(c, s, rows[:0])
			for _, r := range rows {
				emit(r.v, r.l)
			}
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
