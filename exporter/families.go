package exporter

import (
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"

	"github.com/gpuxray/gpuxray/agent"
)

// The families of the engine's series, listed once: what each carries and
// where its values come from. Collect renders them as client_golang
// metrics (a protobuf scrape, a name[] filter, Gather), appendText
// writes them in the text formats (text.go); the label sets come from the
// label cache (series.go), which builds gpuxray_allocation_info's with the
// other allocation labels.

// The kinds of series a family is made of: which label sets it carries, so
// which cached order the text path writes it in.
const (
	kindDevBase = iota
	kindDevWin
	kindDevInfo
	kindAllocBase
	kindAllocWin
	kindAllocInfo
	kindOther // a handful of series, labelled and sorted at each scrape
	numKinds
)

// family is one of the Collector's metric families.
type family struct {
	desc *prometheus.Desc
	typ  prometheus.ValueType
	kind int

	// The series' values, by kind: ok false where the series is absent.
	// The info kinds are 1 for every device and every live allocation.
	dev      func(*agent.DeviceSnapshot) (float64, bool)
	devWin   func(*agent.DeviceCounters) float64
	alloc    func(*agent.AllocationSnapshot) (float64, bool)
	allocWin func(*agent.AllocationCounters) float64
	other    func(*Collector, *agent.Snapshot, []textRow) []textRow

	// For the text path: the family's name, its name in OpenMetrics, and
	// its # HELP and # TYPE lines in each format.
	name, omName     string
	header, omHeader string
}

// textRow is a series of a kindOther family.
type textRow struct {
	l labels
	v float64
}

// newFamilies returns the families of c's descriptions, sorted by name as
// Gather sorts families, and whether the text path can write them: not
// when one of their names would be written differently from how it
// writes them (not a legacy name: expfmt quotes or escapes it).
func newFamilies(d *descs) (fams []family, text bool) {
	gauge, counter := prometheus.GaugeValue, prometheus.CounterValue
	add := func(desc *prometheus.Desc, typ prometheus.ValueType, kind int, f family) {
		f.desc, f.typ, f.kind = desc, typ, kind
		fams = append(fams, f)
	}
	devGauge := func(desc *prometheus.Desc, v func(*agent.DeviceSnapshot) (float64, bool)) {
		add(desc, gauge, kindDevBase, family{dev: v})
	}
	devCounter := func(desc *prometheus.Desc, v func(*agent.DeviceCounters) float64) {
		add(desc, counter, kindDevWin, family{devWin: v})
	}
	allocCounter := func(desc *prometheus.Desc, v func(*agent.AllocationCounters) float64) {
		add(desc, counter, kindAllocWin, family{allocWin: v})
	}

	add(d.deviceInfo, gauge, kindDevInfo, family{})
	devGauge(d.deviceUp, func(dev *agent.DeviceSnapshot) (float64, bool) { return boolValue(dev.Present), true })
	devGauge(d.deviceUtil, func(dev *agent.DeviceSnapshot) (float64, bool) { return dev.Utilization, dev.HasUtilization })
	devGauge(d.deviceMemUsed, func(dev *agent.DeviceSnapshot) (float64, bool) {
		return float64(dev.MemoryUsedBytes), dev.HasMemory
	})
	devGauge(d.deviceMemTotal, func(dev *agent.DeviceSnapshot) (float64, bool) {
		return float64(dev.MemoryTotalBytes), dev.HasMemory
	})
	devGauge(d.devicePower, func(dev *agent.DeviceSnapshot) (float64, bool) { return dev.PowerWatts, dev.HasPower })
	add(d.deviceEnergy, counter, kindDevBase, family{dev: func(dev *agent.DeviceSnapshot) (float64, bool) {
		return dev.EnergyJoules, dev.HasEnergy
	}})
	devGauge(d.deviceSMActive, func(dev *agent.DeviceSnapshot) (float64, bool) { return dev.SMActive, dev.HasGPM })
	devGauge(d.deviceSMOccupancy, func(dev *agent.DeviceSnapshot) (float64, bool) { return dev.SMOccupancy, dev.HasGPM })
	devGauge(d.deviceTensorActive, func(dev *agent.DeviceSnapshot) (float64, bool) { return dev.TensorActive, dev.HasGPM })
	devGauge(d.deviceUnattributedMem, func(dev *agent.DeviceSnapshot) (float64, bool) {
		return float64(dev.UnattributedMemoryBytes), dev.HasUnattributedMemory
	})
	devCounter(d.deviceObserved, func(c *agent.DeviceCounters) float64 { return c.Observed })
	devCounter(d.deviceIdle, func(c *agent.DeviceCounters) float64 { return c.Idle })
	devCounter(d.deviceUnalloc, func(c *agent.DeviceCounters) float64 { return c.Unallocated })
	devCounter(d.deviceUnallocActive, func(c *agent.DeviceCounters) float64 { return c.UnallocatedActive })
	devCounter(d.deviceGap, func(c *agent.DeviceCounters) float64 { return c.Gap })
	devCounter(d.deviceUnattributed, func(c *agent.DeviceCounters) float64 { return c.Unattributed })
	devCounter(d.deviceAllocated, func(c *agent.DeviceCounters) float64 { return c.Allocated })
	devCounter(d.deviceAllocIdle, func(c *agent.DeviceCounters) float64 { return c.AllocatedIdle })
	devCounter(d.deviceAllocActive, func(c *agent.DeviceCounters) float64 { return c.AllocatedActive })

	add(d.allocInfo, gauge, kindAllocInfo, family{})
	allocCounter(d.allocSeconds, func(c *agent.AllocationCounters) float64 { return c.Allocated })
	allocCounter(d.allocIdle, func(c *agent.AllocationCounters) float64 { return c.Idle })
	allocCounter(d.allocActive, func(c *agent.AllocationCounters) float64 { return c.Active })
	add(d.allocStreak, gauge, kindAllocBase, family{alloc: func(a *agent.AllocationSnapshot) (float64, bool) {
		return a.IdleStreak, a.HasIdleStreak
	}})
	add(d.allocMemory, gauge, kindAllocBase, family{alloc: func(a *agent.AllocationSnapshot) (float64, bool) {
		return float64(a.MemoryUsedBytes), a.HasMemory
	}})

	add(d.allocOverflow, counter, kindOther, family{other: func(_ *Collector, s *agent.Snapshot, rows []textRow) []textRow {
		if s.Overflowed > 0 {
			rows = append(rows, textRow{nil, float64(s.Overflowed)})
		}
		return rows
	}})
	// A handful of series: their label pairs are built each scrape.
	add(d.sourceUp, gauge, kindOther, family{other: func(c *Collector, s *agent.Snapshot, rows []textRow) []textRow {
		for _, src := range s.Sources {
			rows = append(rows, textRow{makeLabels(c.d.sourceUp, src.Name), boolValue(src.Up)})
		}
		return rows
	}})
	add(d.sourceErrors, counter, kindOther, family{other: func(c *Collector, s *agent.Snapshot, rows []textRow) []textRow {
		for _, src := range s.Sources {
			for reason, n := range src.Errors {
				rows = append(rows, textRow{makeLabels(c.d.sourceErrors, src.Name, reason), float64(n)})
			}
		}
		return rows
	}})
	add(d.buildInfo, gauge, kindOther, family{other: func(c *Collector, _ *agent.Snapshot, rows []textRow) []textRow {
		if c.build != nil {
			rows = append(rows, textRow{c.buildLabels, 1})
		}
		return rows
	}})

	if len(fams) != len(d.all()) {
		panic("exporter: a description has no family")
	}
	text = true
	for i := range fams {
		f := &fams[i]
		m := d.meta[f.desc]
		typ := "gauge"
		if f.typ == counter {
			typ = "counter"
		}
		f.name = m.name
		f.header = "# HELP " + m.name + " " + escapeHelp(m.help) + "\n# TYPE " + m.name + " " + typ + "\n"
		// OpenMetrics names a counter family without its _total, and
		// escapes quotes in the help too (expfmt's
		// MetricFamilyToOpenMetrics).
		omName, omType := m.name, typ
		if f.typ == counter {
			var ok bool
			if omName, ok = strings.CutSuffix(m.name, "_total"); !ok {
				omType = "unknown"
			}
		}
		f.omName = omName
		f.omHeader = "# HELP " + omName + " " + escapeQuoted(m.help) + "\n# TYPE " + omName + " " + omType + "\n"
		text = text && model.LegacyValidation.IsValidMetricName(m.name)
		for _, l := range m.labels {
			text = text && model.LegacyValidation.IsValidMetricName(l)
		}
	}
	slices.SortFunc(fams, func(a, b family) int { return strings.Compare(a.name, b.name) })
	return fams, text
}
