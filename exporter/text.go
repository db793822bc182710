package exporter

import (
	"bytes"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/gpuxray/gpuxray/agent"
)

// The text fast path: a Collector writes its own families in the classic
// text format (text/plain; version=0.0.4) or in OpenMetrics (0.0.1, 1.0.0:
// other headers, counter families named without _total, integer values
// with ".0") itself, as kube-state-metrics does, rather than through client_golang's Gather and expfmt, which build a
// dto.Metric per series, hash and check every label set, sort every family
// and format every label at each scrape. The label sets of a device's and an
// allocation's series are kept as text with their label pairs (see
// seriesLabels), and the order client_golang would sort the series in is
// kept until a series comes or goes: a scrape writes names, the cached label
// text and the values. The output is byte for byte what the registry and
// expfmt write for the same snapshot (text_test.go compares them); where it
// could not be (a duplicate series, which Gather reports as an error), the
// Collector says so and the handler falls back to client_golang.

// text returns the label set as the text format writes it after the name:
// {name="value",…} with the value escaped, or "" for no label.
func (l labels) text() string {
	if len(l) == 0 {
		return ""
	}
	var b strings.Builder
	sep := byte('{')
	for _, p := range l {
		b.WriteByte(sep)
		b.WriteString(p.GetName())
		b.WriteString(`="`)
		writeEscaped(&b, p.GetValue())
		b.WriteByte('"')
		sep = ','
	}
	b.WriteByte('}')
	return b.String()
}

// escapeQuoted escapes v as expfmt escapes label values: \ as \\, a new
// line as \n and " as \".
func escapeQuoted(v string) string {
	var b strings.Builder
	writeEscaped(&b, v)
	return b.String()
}

// writeEscaped writes v escaped as escapeQuoted does.
func writeEscaped(b *strings.Builder, v string) {
	for i := 0; i < len(v); i++ {
		switch c := v[i]; c {
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '"':
			b.WriteString(`\"`)
		default:
			b.WriteByte(c)
		}
	}
}

// escapeHelp escapes a HELP text as expfmt does: \ as \\ and a new line as \n.
func escapeHelp(help string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(help)
}

// appendValue appends v as expfmt's writeFloat writes a sample value: 0 for
// both zeros, +Inf, -Inf, NaN, and strconv's shortest 'g' form otherwise.
func appendValue(b []byte, v float64) []byte {
	switch {
	case v == 1:
		return append(b, '1')
	case v == 0:
		return append(b, '0')
	case v == -1:
		return append(b, "-1"...)
	case math.IsNaN(v):
		return append(b, "NaN"...)
	case math.IsInf(v, +1):
		return append(b, "+Inf"...)
	case math.IsInf(v, -1):
		return append(b, "-Inf"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}

// appendOpenMetricsValue appends v as expfmt's writeOpenMetricsFloat writes
// a sample value: as appendValue, with ".0" after an integer.
func appendOpenMetricsValue(b []byte, v float64) []byte {
	switch {
	case v == 1:
		return append(b, "1.0"...)
	case v == 0:
		return append(b, "0.0"...)
	case v == -1:
		return append(b, "-1.0"...)
	case math.IsNaN(v):
		return append(b, "NaN"...)
	case math.IsInf(v, +1):
		return append(b, "+Inf"...)
	case math.IsInf(v, -1):
		return append(b, "-Inf"...)
	}
	start := len(b)
	b = strconv.AppendFloat(b, v, 'g', -1, 64)
	if !bytes.ContainsAny(b[start:], "e.") {
		b = append(b, '.', '0')
	}
	return b
}

// compareLabels orders label sets as client_golang sorts a family's
// metrics: by their values, in the order of the (sorted) names.
func compareLabels(a, b labels) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	for i := range a {
		if c := strings.Compare(a[i].GetValue(), b[i].GetValue()); c != 0 {
			return c
		}
	}
	return 0
}

// seriesRef is a series in a cached order: its device's or allocation's
// labels, and the window (for a windowed kind).
type seriesRef struct {
	s *seriesLabels
	w agent.Window
}

// textOrders are the series of the label cache's devices and allocations
// in the order client_golang sorts them, by kind; rebuilt when the cache's
// entries change.
type textOrders struct {
	version uint64
	built   bool
	refs    [numKinds][]seriesRef
	dup     bool // two series of a kind carry the same labels
}

// textFamilyNames are the names of the families the fast path writes, in
// order; nil when it cannot write them.
func (c *Collector) textFamilyNames() []string {
	if !c.text {
		return nil
	}
	names := make([]string, len(c.fams))
	for i, f := range c.fams {
		names[i] = f.name
	}
	return names
}

// textOpenMetricsNames are the OpenMetrics family names of the families the
// fast path writes, sorted; nil when it cannot write them.
func (c *Collector) textOpenMetricsNames() []string {
	if !c.text {
		return nil
	}
	names := make([]string, len(c.fams))
	for i, f := range c.fams {
		names[i] = f.omName
	}
	slices.Sort(names)
	return names
}

// appendText appends the text exposition of the latest snapshot to buf (in
// OpenMetrics 0.0.1 or 1.0.0 with om, without the # EOF), family by family
// in c.textFamilyNames' order, and appends each family's end in buf to ends
// (an absent family ends where the one before it does). ok is false, with
// buf and ends as they were, where the exposition would not be the
// registry's: the caller must gather through client_golang.
func (c *Collector) appendText(buf []byte, ends []int, om bool) (_ []byte, _ []int, ok bool) {
	if !c.text {
		return buf, ends, false
	}
	s := c.src.Snapshot()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.labels.update(s, c.d, c.extra)
	if len(c.labels.devices) != len(s.Devices) || len(c.labels.allocs) != len(s.Allocations) {
		// Two devices or allocations with the same key: the registry
		// reports their series as duplicates.
		return buf, ends, false
	}
	o := &c.orders
	if !o.built || o.version != c.labels.version {
		o.rebuild(&c.labels)
	}
	if o.dup {
		return buf, ends, false
	}

	buf0, ends0 := len(buf), len(ends)
	appendV := appendValue
	if om {
		appendV = appendOpenMetricsValue
	}
	var rows []textRow
	for i := range c.fams {
		f := &c.fams[i]
		header := f.header
		if om {
			header = f.omHeader
		}
		start := len(buf)
		line := func(lt string, v float64) {
			if len(buf) == start {
				buf = append(buf, header...)
			}
			buf = append(buf, f.name...)
			buf = append(buf, lt...)
			buf = append(buf, ' ')
			buf = appendV(buf, v)
			buf = append(buf, '\n')
		}
		refs := o.refs[f.kind]
		switch f.kind {
		case kindDevInfo:
			for _, r := range refs {
				line(r.s.infoText, 1)
			}
		case kindDevBase:
			for _, r := range refs {
				if v, ok := f.dev(&s.Devices[r.s.slot]); ok {
					line(r.s.baseText, v)
				}
			}
		case kindDevWin:
			for _, r := range refs {
				line(r.s.winText[r.w], f.devWin(&s.Devices[r.s.slot].Counters[r.w]))
			}
		case kindAllocInfo:
			for _, r := range refs {
				if s.Allocations[r.s.slot].Live {
					line(r.s.infoText, 1)
				}
			}
		case kindAllocBase:
			for _, r := range refs {
				if v, ok := f.alloc(s.Allocations[r.s.slot]); ok {
					line(r.s.baseText, v)
				}
			}
		case kindAllocWin:
			for _, r := range refs {
				line(r.s.winText[r.w], f.allocWin(&s.Allocations[r.s.slot].Counters[r.w]))
			}
		case kindOther:
			rows = f.other(c, s, rows[:0])
			slices.SortFunc(rows, func(a, b textRow) int { return compareLabels(a.l, b.l) })
			for j, r := range rows {
				if j > 0 && compareLabels(rows[j-1].l, r.l) == 0 {
					return buf[:buf0], ends[:ends0], false
				}
				line(r.l.text(), r.v)
			}
		}
		ends = append(ends, len(buf))
	}
	return buf, ends, true
}

// rebuild sorts the cache's series by kind.
func (o *textOrders) rebuild(c *labelCache) {
	for k := range o.refs {
		o.refs[k] = o.refs[k][:0]
	}
	for _, e := range c.devices {
		s := &e.seriesLabels
		o.refs[kindDevBase] = append(o.refs[kindDevBase], seriesRef{s: s})
		o.refs[kindDevInfo] = append(o.refs[kindDevInfo], seriesRef{s: s})
		for w := range agent.NumWindows {
			o.refs[kindDevWin] = append(o.refs[kindDevWin], seriesRef{s, w})
		}
	}
	for _, e := range c.allocs {
		s := &e.seriesLabels
		o.refs[kindAllocBase] = append(o.refs[kindAllocBase], seriesRef{s: s})
		o.refs[kindAllocInfo] = append(o.refs[kindAllocInfo], seriesRef{s: s})
		for w := range agent.NumWindows {
			o.refs[kindAllocWin] = append(o.refs[kindAllocWin], seriesRef{s, w})
		}
	}
	o.dup = false
	for k, refs := range o.refs {
		var key func(seriesRef) labels
		switch k {
		case kindDevBase, kindAllocBase:
			key = func(r seriesRef) labels { return r.s.base }
		case kindDevInfo, kindAllocInfo:
			key = func(r seriesRef) labels { return r.s.info }
		case kindDevWin, kindAllocWin:
			key = func(r seriesRef) labels { return r.s.win[r.w] }
		default:
			continue
		}
		slices.SortFunc(refs, func(a, b seriesRef) int { return compareLabels(key(a), key(b)) })
		for i := 1; i < len(refs); i++ {
			if compareLabels(key(refs[i-1]), key(refs[i])) == 0 {
				o.dup = true
			}
		}
	}
	o.version, o.built = c.version, true
}
