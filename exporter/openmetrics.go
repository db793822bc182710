package exporter

import (
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// OpenMetrics 1 (0.0.1 and 1.0.0) names a counter family without its
// _total: a counter foo_total and another family foo would be two families
// named foo, which the format forbids ("MetricFamily names ... MUST be
// unique within a MetricSet") and a strict parser rejects. client_golang's Go
// collector has such a pair in every binary that registers it:
// go_memstats_alloc_bytes (gauge) and go_memstats_alloc_bytes_total
// (counter); client_golang encodes both as "go_memstats_alloc_bytes"
// (prometheus/client_golang#829, open since 2020; node_exporter and
// Prometheus's own /metrics sidestep it by not offering OpenMetrics).
//
// In OpenMetrics only, such a counter is served as a family of type unknown
// under its full name, as expfmt already serves a counter whose name lacks
// _total. Every series keeps its name and value in every format, so queries,
// rules and dashboards on either series see no change (Prometheus ingests
// the same samples); only the counter's type in the metadata becomes
// unknown in an OpenMetrics scrape. Dropping either family or renaming one,
// the other ways out, would remove a series Go dashboards query
// (go_memstats_alloc_bytes for the heap, rate(go_memstats_alloc_bytes_total)
// for the allocation rate) from every Prometheus that negotiates
// OpenMetrics, which is every Prometheus since 2.5. OpenMetrics 2.0 keeps
// _total in a counter family's name, and expfmt's 2.0 encoder needs no
// change: the rule is for the 1.x encoder only.

// openMetricsFamilies returns mfs (sorted by name, as Gather returns them)
// with every counter named foo_total served as unknown where foo is the
// name of another family in mfs or in also (sorted). mfs is not changed.
func openMetricsFamilies(mfs []*dto.MetricFamily, also []string) []*dto.MetricFamily {
	var out []*dto.MetricFamily // a copy, made at the first change
	for i, mf := range mfs {
		base, ok := strings.CutSuffix(mf.GetName(), "_total")
		if !ok || mf.GetType() != dto.MetricType_COUNTER {
			continue
		}
		_, inMFs := slices.BinarySearchFunc(mfs, base, func(mf *dto.MetricFamily, name string) int {
			return strings.Compare(mf.GetName(), name)
		})
		if _, inAlso := slices.BinarySearch(also, base); !inMFs && !inAlso {
			continue
		}
		if out == nil {
			out = slices.Clone(mfs)
		}
		out[i] = counterAsUnknown(mf)
	}
	if out == nil {
		return mfs
	}
	return out
}

// counterAsUnknown returns counter family mf as an untyped family of the
// same name, help and values (which the OpenMetrics encoder writes as type
// unknown, each sample under the family's name).
func counterAsUnknown(mf *dto.MetricFamily) *dto.MetricFamily {
	u := &dto.MetricFamily{Name: mf.Name, Help: mf.Help, Unit: mf.Unit, Type: dto.MetricType_UNTYPED.Enum(),
		Metric: make([]*dto.Metric, len(mf.GetMetric()))}
	for i, m := range mf.GetMetric() {
		u.Metric[i] = &dto.Metric{Label: m.Label, TimestampMs: m.TimestampMs,
			Untyped: &dto.Untyped{Value: proto.Float64(m.GetCounter().GetValue())}}
	}
	return u
}

// openMetricsName is the name of mf's family in OpenMetrics 1.
func openMetricsName(mf *dto.MetricFamily) string {
	if mf.GetType() == dto.MetricType_COUNTER {
		if base, ok := strings.CutSuffix(mf.GetName(), "_total"); ok {
			return base
		}
	}
	return mf.GetName()
}

// openMetricsGatherer is g as an OpenMetrics 1 scrape serves it.
type openMetricsGatherer struct{ g prometheus.Gatherer }

func (o openMetricsGatherer) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := o.g.Gather()
	return openMetricsFamilies(mfs, nil), err
}
