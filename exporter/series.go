package exporter

import (
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpuxray/gpuxray/agent"
	"github.com/gpuxray/gpuxray/collector"
)

// labels are the label pairs of a series, sorted by name as
// prometheus.MakeLabelPairs sorts them. A labels is shared by every scrape
// that renders the series (and by the series of a device or an allocation
// that carry the same labels), so it is never modified once built: a changed
// value gets a new one.
type labels []*dto.LabelPair

// makeLabels builds the label pairs of desc's series valued values (in the
// desc's label order), each made a valid label value first. It modifies
// values.
func makeLabels(desc *prometheus.Desc, values ...string) labels {
	return prometheus.MakeLabelPairs(desc, labelValues(values))
}

// with returns l and more, sorted by name; names are unique (a Desc with a
// duplicate label name is invalid), so the order is the one MakeLabelPairs
// gives.
func (l labels) with(more ...*dto.LabelPair) labels {
	out := append(slices.Clone(l), more...)
	slices.SortFunc(out, func(a, b *dto.LabelPair) int { return strings.Compare(a.GetName(), b.GetName()) })
	return out
}

func labelPair(name, value string) *dto.LabelPair {
	return &dto.LabelPair{Name: &name, Value: &value}
}

// windowPairs are the window="…" pairs, one per window, shared by all series.
var windowPairs = func() (p [agent.NumWindows]*dto.LabelPair) {
	for w := range agent.NumWindows {
		p[w] = labelPair("window", w.String())
	}
	return p
}()

// seriesLabels are the label sets of one device's or one allocation's series:
// base for its plain series, win[w] for its windowed counters and info for
// its _info series.
type seriesLabels struct {
	base labels
	win  [agent.NumWindows]labels
	info labels

	// The same label sets as text, {name="value",…}, for the text fast
	// path (see text.go), built with them.
	baseText, infoText string
	winText            [agent.NumWindows]string

	// slot is the device's or the allocation's index in the snapshot of the
	// last update; written and read under the Collector's lock only.
	slot int
}

// setWindows builds the windowed label sets from base, and every set's text.
func (s *seriesLabels) setWindows() {
	for w := range agent.NumWindows {
		s.win[w] = s.base.with(windowPairs[w])
		s.winText[w] = s.win[w].text()
	}
	s.baseText, s.infoText = s.base.text(), s.info.text()
}

// deviceID is every value a device's labels are made of, besides its UUID.
type deviceID struct {
	gpu                                          int
	name, migProfile, parent, driver, utilSource string
	migEnabled                                   bool
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

type deviceEntry struct {
	id   deviceID
	seen uint64 // the generation of the last scrape that rendered it
	seriesLabels
}

// allocKey identifies an allocation, as the snapshot sorts them.
type allocKey struct{ uuid, namespace, pod, container string }

// allocID is every value an allocation's labels are made of, besides its key
// and its extra labels.
type allocID struct {
	gpu                                                  int
	workloadKind, workload, model, resource, attribution string
	shared, stale                                        bool
	dra                                                  collector.DRADevice
	sched                                                collector.Scheduling
}

type allocEntry struct {
	id    allocID
	extra []string // the values of the extra labels, in Collector.extra's order
	seen  uint64
	seriesLabels
}

// labelCache keeps the label pairs of the devices and allocations of the
// last scrape, so that a scrape builds them only for a new series or one
// whose label values changed; entries no scrape rendered are dropped at
// its end, so the cache holds the live series only, whatever the churn.
// Not safe for concurrent use: Collector holds its lock.
type labelCache struct {
	gen     uint64
	version uint64 // changes whenever an entry is added or dropped
	devices map[string]*deviceEntry
	allocs  map[allocKey]*allocEntry
	// devs and allocsOf are update's answers, reused by the next.
	devs, allocsOf []*seriesLabels
}

func newLabelCache() labelCache {
	return labelCache{devices: map[string]*deviceEntry{}, allocs: map[allocKey]*allocEntry{}}
}

// update returns the labels of s's devices and allocations, in their order,
// and drops the entries s does not have. The slices returned are reused by
// the next update; an entry is never modified once built (a change makes
// a new one), so the labels in it may be kept.
func (c *labelCache) update(s *agent.Snapshot, d *descs, extra []string) (devs, allocs []*seriesLabels) {
	c.gen++
	devs = c.devs[:0]
	for i := range s.Devices {
		l := &c.device(&s.Devices[i], d).seriesLabels
		l.slot = i
		devs = append(devs, l)
	}
	allocs = c.allocsOf[:0]
	for i := range s.Allocations {
		l := &c.alloc(s.Allocations[i], d, extra).seriesLabels
		l.slot = i
		allocs = append(allocs, l)
	}
	c.devs, c.allocsOf = devs, allocs
	for k, e := range c.devices {
		if e.seen != c.gen {
			delete(c.devices, k)
			c.version++
		}
	}
	for k, e := range c.allocs {
		if e.seen != c.gen {
			delete(c.allocs, k)
			c.version++
		}
	}
	return devs, allocs
}

func (c *labelCache) device(dev *agent.DeviceSnapshot, d *descs) *deviceEntry {
	id := deviceID{dev.GPU, dev.Name, dev.MIGProfile, dev.ParentUUID, dev.DriverVersion, dev.UtilizationSource, dev.MIGEnabled}
	e := c.devices[dev.UUID]
	if e == nil || e.id != id {
		gpu := strconv.Itoa(dev.GPU)
		e = &deviceEntry{id: id}
		e.base = makeLabels(d.deviceUp, dev.UUID, gpu)
		e.info = makeLabels(d.deviceInfo, dev.UUID, gpu, dev.Name, dev.MIGProfile, dev.ParentUUID, migMode(dev.Device), dev.DriverVersion, dev.UtilizationSource)
		e.setWindows()
		c.devices[dev.UUID] = e
		c.version++
	}
	e.seen = c.gen
	return e
}

func (c *labelCache) alloc(a *agent.AllocationSnapshot, d *descs, extra []string) *allocEntry {
	key := allocKey{a.UUID, a.Namespace, a.Pod, a.Container}
	id := allocID{a.GPU, a.WorkloadKind, a.Workload, a.Model, a.Resource, a.Attribution, a.Shared, a.Stale, a.DRA, a.Scheduling}
	e := c.allocs[key]
	if e == nil || e.id != id || !sameExtra(e.extra, a.ExtraLabels, extra) {
		e = &allocEntry{id: id, extra: make([]string, len(extra))}
		lv := []string{a.UUID, formatGPU(a.GPU), a.Namespace, a.Pod, a.Container, a.WorkloadKind, a.Workload, a.Model}
		for i, name := range extra {
			e.extra[i] = a.ExtraLabels[name]
			lv = append(lv, e.extra[i])
		}
		e.base = makeLabels(d.allocStreak, lv...)
		info := append(slices.Clip(lv), a.Resource, strconv.FormatBool(a.Shared), a.Attribution, strconv.FormatBool(a.Stale),
			a.DRA.ClaimNamespace, a.DRA.Claim, a.DRA.Driver, a.DRA.Pool, a.DRA.Device,
			a.Scheduling.PriorityClass, priorityValue(a.Scheduling), a.Scheduling.Queue, a.Scheduling.ClusterQueue)
		e.info = makeLabels(d.allocInfo, info...)
		e.setWindows()
		c.allocs[key] = e
		c.version++
	}
	e.seen = c.gen
	return e
}

// priorityValue is the priority label: the pod's priority in decimal, ""
// when it has none. A property of the pod's class, so it adds no series.
func priorityValue(s collector.Scheduling) string {
	if !s.HasPriority {
		return ""
	}
	return strconv.FormatInt(int64(s.Priority), 10)
}

// sameExtra reports whether the extra label values an entry was built from
// are still the allocation's.
func sameExtra(had []string, now map[string]string, names []string) bool {
	for i, name := range names {
		if had[i] != now[name] {
			return false
		}
	}
	return true
}

// counterSample and gaugeSample are one scrape's sample of a series: a
// prometheus.Metric writing the series' cached labels and the value. Write
// only reads the sample, so the registry may call it from any goroutine.
type counterSample struct {
	desc   *prometheus.Desc
	labels labels
	v      float64
	c      dto.Counter
}

func (s *counterSample) Desc() *prometheus.Desc { return s.desc }

func (s *counterSample) Write(m *dto.Metric) error {
	m.Label, m.Counter = s.labels, &s.c
	return nil
}

type gaugeSample struct {
	desc   *prometheus.Desc
	labels labels
	v      float64
	g      dto.Gauge
}

func (s *gaugeSample) Desc() *prometheus.Desc { return s.desc }

func (s *gaugeSample) Write(m *dto.Metric) error {
	m.Label, m.Gauge = s.labels, &s.g
	return nil
}

// sampleChunk is how many samples of a kind samples allocates at once.
const sampleChunk = 256

// samples hands out one scrape's samples from chunks, so that a scrape
// allocates a few chunks rather than a few objects per series. A chunk is
// freed once the scrape that used it is done with all its samples.
type samples struct {
	counters []counterSample
	gauges   []gaugeSample
}

// sample is a counter's or a gauge's sample, as typ says.
func (p *samples) sample(desc *prometheus.Desc, typ prometheus.ValueType, v float64, l labels) prometheus.Metric {
	if typ == prometheus.CounterValue {
		return p.counter(desc, v, l)
	}
	return p.gauge(desc, v, l)
}

func (p *samples) counter(desc *prometheus.Desc, v float64, l labels) prometheus.Metric {
	if len(p.counters) == 0 {
		p.counters = make([]counterSample, sampleChunk)
	}
	s := &p.counters[0]
	p.counters = p.counters[1:]
	s.desc, s.labels, s.v = desc, l, v
	s.c.Value = &s.v
	return s
}

func (p *samples) gauge(desc *prometheus.Desc, v float64, l labels) prometheus.Metric {
	if len(p.gauges) == 0 {
		p.gauges = make([]gaugeSample, sampleChunk)
	}
	s := &p.gauges[0]
	p.gauges = p.gauges[1:]
	s.desc, s.labels, s.v = desc, l, v
	s.g.Value = &s.v
	return s
}
