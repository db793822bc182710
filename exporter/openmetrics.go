package exporter

import (
	"mime"
	"net/http"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"google.golang.org/protobuf/proto"
)

// In OpenMetrics 1 a counter family is named without its _total, so
// client_golang's Go collector serves go_memstats_alloc_bytes twice
// (prometheus/client_golang#829), which strict parsers reject. There, and
// only there, such a counter is served as unknown under its full name:
// docs/design/openmetrics-counter-clash.md says why.

// metricsHandler serves g's metrics as promhttp.HandlerFor(g, opts) does,
// except that an OpenMetrics 1 scrape gathers through openMetricsGatherer.
// opts must offer OpenMetrics.
func metricsHandler(g prometheus.Gatherer, opts promhttp.HandlerOpts) http.Handler {
	plain := promhttp.HandlerFor(g, opts)
	om := promhttp.HandlerFor(openMetricsGatherer{g}, opts)
	formats := expfmt.DefaultOpenMetricsAcceptedFormats()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// promhttp negotiates the same way: the same format.
		if isOpenMetrics1(expfmt.NegotiateAccept(r.Header, formats...)) {
			om.ServeHTTP(w, r)
			return
		}
		plain.ServeHTTP(w, r)
	})
}

// isOpenMetrics1 reports whether expfmt.NewEncoder writes format with
// MetricFamilyToOpenMetrics: OpenMetrics, but not 2.0.0.
func isOpenMetrics1(format expfmt.Format) bool {
	if format.FormatType() != expfmt.TypeOpenMetrics {
		return false
	}
	_, params, err := mime.ParseMediaType(string(format))
	return err != nil || params["version"] != expfmt.OpenMetricsVersion_2_0_0
}

// openMetricsFamilies returns mfs (sorted by name, as Gather returns them)
// with every counter named foo_total served as unknown where foo is the
// name of another family in mfs. mfs is not changed.
func openMetricsFamilies(mfs []*dto.MetricFamily) []*dto.MetricFamily {
	var out []*dto.MetricFamily // a copy, made at the first change
	for i, mf := range mfs {
		base, ok := strings.CutSuffix(mf.GetName(), "_total")
		if !ok || mf.GetType() != dto.MetricType_COUNTER {
			continue
		}
		if _, found := slices.BinarySearchFunc(mfs, base, func(mf *dto.MetricFamily, name string) int {
			return strings.Compare(mf.GetName(), name)
		}); !found {
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

// openMetricsGatherer is g as an OpenMetrics 1 scrape serves it.
type openMetricsGatherer struct{ g prometheus.Gatherer }

func (o openMetricsGatherer) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := o.g.Gather()
	return openMetricsFamilies(mfs), err
}
