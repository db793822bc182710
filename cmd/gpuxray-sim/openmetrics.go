package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// omRecorder keeps every scrape of a replay and writes them as one
// OpenMetrics exposition with timestamps, the input of
// `promtool tsdb create-blocks-from openmetrics`. OpenMetrics forbids
// interleaving metric families, so scrapes are kept until the end and written
// family by family, each series in time order.
type omRecorder struct {
	// target are the labels a scrape of the agent would attach (job,
	// instance); clusterTarget those of the simulated kube-state-metrics.
	target, clusterTarget []*dto.LabelPair
	families              map[string]*omFamily
	scrapes               int
}

type omFamily struct {
	name, help string
	typ        dto.MetricType
	series     map[string]*omSeries // by rendered label set
}

type omSeries struct {
	// suffix is a histogram sample's (_bucket, _count, _sum), "" else.
	suffix string
	ms     []int64
	vals   []float64
}

func newOMRecorder(target, clusterTarget map[string]string) *omRecorder {
	r := &omRecorder{families: map[string]*omFamily{}}
	pairs := func(m map[string]string) []*dto.LabelPair {
		var out []*dto.LabelPair
		for k, v := range m {
			out = append(out, &dto.LabelPair{Name: &k, Value: &v})
		}
		return out
	}
	r.target, r.clusterTarget = pairs(target), pairs(clusterTarget)
	return r
}

// scrape records the agent's metrics and the cluster's (the simulated
// kube-state-metrics and Kueue, when set) as scrapes at t.
func (r *omRecorder) scrape(t time.Time, agent, cluster prometheus.Gatherer) error {
	if err := r.record(t, agent, r.target, false); err != nil {
		return err
	}
	if cluster != nil {
		if err := r.record(t, cluster, r.clusterTarget, true); err != nil {
			return fmt.Errorf("cluster series: %w", err)
		}
	}
	r.scrapes++
	return nil
}

// record adds the gatherer's metrics at t, with the target's labels where
// a metric has none of that name (as a scrape with honor_labels keeps the
// job and instance of the simulated engines' series, replayEngines) and,
// with drop, without its empty labels.
func (r *omRecorder) record(t time.Time, g prometheus.Gatherer, target []*dto.LabelPair, drop bool) error {
	mfs, err := g.Gather()
	if err != nil {
		return fmt.Errorf("gather: %w", err)
	}
	ms := t.UnixMilli()
	for _, mf := range mfs {
		fam := r.families[mf.GetName()]
		if fam == nil {
			fam = &omFamily{name: mf.GetName(), help: mf.GetHelp(), typ: mf.GetType(), series: map[string]*omSeries{}}
			r.families[fam.name] = fam
		}
		for _, m := range mf.GetMetric() {
			labels := m.GetLabel()
			if drop {
				labels = nonEmpty(labels)
			}
			labels = slices.Clip(labels)
			for _, tl := range target {
				if !slices.ContainsFunc(labels, func(l *dto.LabelPair) bool { return l.GetName() == tl.GetName() }) {
					labels = append(labels, tl)
				}
			}
			add := func(suffix string, ls []*dto.LabelPair, v float64) {
				key := suffix + renderLabels(ls)
				s := fam.series[key]
				if s == nil {
					s = &omSeries{suffix: suffix}
					fam.series[key] = s
				}
				s.ms, s.vals = append(s.ms, ms), append(s.vals, v)
			}
			if fam.typ == dto.MetricType_HISTOGRAM {
				// A classic histogram is its buckets, count and sum, as
				// Prometheus stores it (TGI's tgi_request_generated_tokens).
				h := m.GetHistogram()
				le := func(ub float64) []*dto.LabelPair {
					n, v := "le", formatFloat(ub)
					return append(slices.Clip(labels), &dto.LabelPair{Name: &n, Value: &v})
				}
				for _, b := range h.GetBucket() {
					add("_bucket", le(b.GetUpperBound()), float64(b.GetCumulativeCount()))
				}
				add("_bucket", le(math.Inf(1)), float64(h.GetSampleCount()))
				add("_count", labels, float64(h.GetSampleCount()))
				add("_sum", labels, h.GetSampleSum())
				continue
			}
			var v float64
			switch fam.typ {
			case dto.MetricType_COUNTER:
				v = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				v = m.GetGauge().GetValue()
			case dto.MetricType_UNTYPED:
				v = m.GetUntyped().GetValue()
			default:
				return fmt.Errorf("metric %s: type %s is not supported in a replay", fam.name, fam.typ)
			}
			add("", labels, v)
		}
	}
	return nil
}

// nonEmpty drops labels with empty values, as a scrape stores them: the
// simulated kube-state-metrics gives every pod every node-selector label,
// empty where it has none.
func nonEmpty(ls []*dto.LabelPair) []*dto.LabelPair {
	if !slices.ContainsFunc(ls, func(l *dto.LabelPair) bool { return l.GetValue() == "" }) {
		return ls
	}
	return slices.DeleteFunc(slices.Clone(ls), func(l *dto.LabelPair) bool { return l.GetValue() == "" })
}

// WriteTo writes the recorded scrapes, ending with "# EOF".
func (r *omRecorder) WriteTo(w io.Writer) (int64, error) {
	cw := &countingWriter{w: w}
	bw := bufio.NewWriterSize(cw, 1<<16)
	names := make([]string, 0, len(r.families))
	for n := range r.families {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		fam := r.families[n]
		typ, sample := "gauge", fam.name
		switch fam.typ {
		case dto.MetricType_COUNTER:
			// OpenMetrics names a counter family without its _total suffix.
			typ, n = "counter", strings.TrimSuffix(fam.name, "_total")
			sample = n + "_total"
		case dto.MetricType_UNTYPED:
			typ = "unknown"
		case dto.MetricType_HISTOGRAM:
			typ = "histogram"
		}
		fmt.Fprintf(bw, "# TYPE %s %s\n# HELP %s %s\n", n, typ, n, escapeHelp(fam.help))
		keys := make([]string, 0, len(fam.series))
		for k := range fam.series {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			s := fam.series[k]
			for i, ms := range s.ms {
				fmt.Fprintf(bw, "%s%s%s %s %d.%03d\n", sample, s.suffix, strings.TrimPrefix(k, s.suffix), formatFloat(s.vals[i]), ms/1000, ms%1000)
			}
		}
	}
	bw.WriteString("# EOF\n")
	err := bw.Flush()
	return cw.n, err
}

// renderLabels renders a label set as {a="x",b="y"}, sorted by name.
func renderLabels(ls []*dto.LabelPair) string {
	ls = slices.Clone(ls)
	slices.SortFunc(ls, func(a, b *dto.LabelPair) int { return strings.Compare(a.GetName(), b.GetName()) })
	var b strings.Builder
	b.WriteByte('{')
	for i, l := range ls {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(l.GetName())
		b.WriteString(`="`)
		b.WriteString(labelEscaper.Replace(l.GetValue()))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

var (
	labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
)

func escapeHelp(s string) string { return helpEscaper.Replace(s) }

func formatFloat(v float64) string {
	switch {
	case math.IsNaN(v):
		return "NaN"
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
