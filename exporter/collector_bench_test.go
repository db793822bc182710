package exporter_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/collector/sim"
	"github.com/gpuxray/gpuxray/exporter"
	"github.com/gpuxray/gpuxray/test/bench/scenario"
	"github.com/gpuxray/gpuxray/test/bench/simnode"
)

// scrapeNode is a simulated node two minutes in, with its registry.
func scrapeNode(b *testing.B, yaml []byte, name string) *simnode.Node {
	sc, err := sim.ParseScenario(yaml, name)
	if err != nil {
		b.Fatal(err)
	}
	n := simnode.New(b, sc, nil)
	n.Run(time.Second, 2*time.Minute)
	return n
}

// scrape renders h as a Prometheus scrape does (text format), gzipped when
// encoding is gzip, and returns the body's size.
func scrape(b *testing.B, h http.Handler, encoding string) int {
	return len(scrapeBody(b, h, encoding))
}

func scrapeBody(b *testing.B, h http.Handler, encoding string) []byte {
	return scrapeAccept(b, h, "", encoding)
}

// prometheusAccept is the Accept header of Prometheus 2.x without
// scrape_protocols: OpenMetrics first.
const prometheusAccept = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"

// scrapeAccept is scrapeBody with an Accept header.
func scrapeAccept(b *testing.B, h http.Handler, accept, encoding string) []byte {
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if encoding != "identity" {
		req.Header.Set("Accept-Encoding", encoding)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		b.Fatalf("scrape: %d %s", rec.Code, rec.Body)
	}
	if got := rec.Header().Get("Content-Encoding"); (encoding == "gzip") != (got == "gzip") {
		b.Fatalf("Accept-Encoding %s answered with Content-Encoding %q", encoding, got)
	}
	return rec.Body.Bytes()
}

// cpuTime is the CPU time the process has used (user and system, all
// threads, GC included): on a shared machine it varies less than ns/op.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// handler is the agent's metrics handler over g.
func handler(g prometheus.Gatherer) http.Handler {
	return exporter.NewHandler(g, "/metrics", func() bool { return true }, zap.NewNop(), exporter.DefaultMaxRequests)
}

// encodings are the scrapes measured: identity, and gzip as Prometheus asks
// for it.
var encodings = []string{"identity", "gzip"}

func benchScrape(b *testing.B, yaml []byte, name string) {
	n := scrapeNode(b, yaml, name)
	series := seriesCount(b, n.Registry)
	run := func(b *testing.B, h http.Handler, encoding string) {
		size := scrape(b, h, encoding)
		b.ReportAllocs()
		b.ResetTimer()
		cpu0 := cpuTime(b)
		for i := 0; i < b.N; i++ {
			scrape(b, h, encoding)
		}
		b.ReportMetric(float64((cpuTime(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		b.ReportMetric(float64(size), "bytes/scrape")
		b.ReportMetric(float64(series), "series")
	}
	h := handler(n.Registry)
	for _, encoding := range encodings {
		b.Run("encoding="+encoding, func(b *testing.B) { run(b, h, encoding) })
	}
	// As Prometheus asks: OpenMetrics, gzip.
	b.Run("encoding=gzip-openmetrics", func(b *testing.B) {
		size := len(scrapeAccept(b, h, prometheusAccept, "gzip"))
		b.ReportAllocs()
		b.ResetTimer()
		cpu0 := cpuTime(b)
		for i := 0; i < b.N; i++ {
			scrapeAccept(b, h, prometheusAccept, "gzip")
		}
		b.ReportMetric(float64((cpuTime(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		b.ReportMetric(float64(size), "bytes/scrape")
		b.ReportMetric(float64(series), "series")
	})
}

// BenchmarkScrape8GPU110Alloc renders the node-110 scenario's metrics.
func BenchmarkScrape8GPU110Alloc(b *testing.B) { benchScrape(b, scenario.Node110(), "node-110.yaml") }

// BenchmarkScrapeMIG8x7 renders the mig-56 scenario's metrics.
func BenchmarkScrapeMIG8x7(b *testing.B) { benchScrape(b, scenario.MIG56(), "mig-56.yaml") }

func seriesCount(b *testing.B, g prometheus.Gatherer) int {
	mfs, err := g.Gather()
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for _, mf := range mfs {
		n += len(mf.GetMetric())
	}
	return n
}

// bare is the baseline: a plain client_golang collector that emits the same
// series (names, help, labels, values) as const metrics built at collect
// time, with nothing to compute.
type bare struct {
	descs   []*prometheus.Desc
	metrics [][]constMetric
}

type constMetric struct {
	typ    prometheus.ValueType
	value  float64
	labels []string
}

func newBare(mfs []*dto.MetricFamily) *bare {
	c := &bare{}
	for _, mf := range mfs {
		var names []string
		if len(mf.GetMetric()) > 0 {
			for _, lp := range mf.GetMetric()[0].GetLabel() {
				names = append(names, lp.GetName())
			}
		}
		c.descs = append(c.descs, prometheus.NewDesc(mf.GetName(), mf.GetHelp(), names, nil))
		var ms []constMetric
		for _, m := range mf.GetMetric() {
			cm := constMetric{typ: prometheus.GaugeValue, value: m.GetGauge().GetValue()}
			if mf.GetType() == dto.MetricType_COUNTER {
				cm.typ, cm.value = prometheus.CounterValue, m.GetCounter().GetValue()
			}
			for _, lp := range m.GetLabel() {
				cm.labels = append(cm.labels, lp.GetValue())
			}
			ms = append(ms, cm)
		}
		c.metrics = append(c.metrics, ms)
	}
	return c
}

func (c *bare) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *bare) Collect(ch chan<- prometheus.Metric) {
	for i, d := range c.descs {
		for _, m := range c.metrics[i] {
			ch <- prometheus.MustNewConstMetric(d, m.typ, m.value, m.labels...)
		}
	}
}

// BenchmarkScrapeVsBare renders our registry and a bare one holding the same
// const series (same names, help, labels and values, so the same
// exposition) in turns, in one run, and reports the ratio of their times
// (target ≤ 1.3): a noisy machine slows both alike. Both go through the
// agent's handler (exporter.NewHandler), with the same encoding; the bare
// one is the least a client_golang exporter of these series costs.
func BenchmarkScrapeVsBare(b *testing.B) {
	n := scrapeNode(b, scenario.Node110(), "node-110.yaml")
	mfs, err := n.Registry.Gather()
	if err != nil {
		b.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(newBare(mfs))
	ours, base := handler(n.Registry), handler(reg)
	if a, c := scrapeBody(b, ours, "identity"), scrapeBody(b, base, "identity"); !bytes.Equal(a, c) {
		b.Fatalf("our scrape (%d bytes) is not the bare one (%d bytes): not the same series", len(a), len(c))
	}
	for _, encoding := range encodings {
		b.Run("encoding="+encoding, func(b *testing.B) {
			var tOurs, tBare time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				scrape(b, ours, encoding)
				t1 := time.Now()
				scrape(b, base, encoding)
				tOurs, tBare = tOurs+t1.Sub(t0), tBare+time.Since(t1)
			}
			b.ReportMetric(float64(tOurs.Nanoseconds())/float64(b.N), "ours-ns/scrape")
			b.ReportMetric(float64(tBare.Nanoseconds())/float64(b.N), "bare-ns/scrape")
			b.ReportMetric(float64(tOurs)/float64(tBare), "ratio")
		})
	}
}
