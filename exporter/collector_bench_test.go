package exporter_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpuxray/gpuxray/collector/sim"
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

// scrape renders the registry as a Prometheus scrape does (text format).
func scrape(b *testing.B, h http.Handler) int {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		b.Fatalf("scrape: %d %s", rec.Code, rec.Body)
	}
	return rec.Body.Len()
}

func benchScrape(b *testing.B, yaml []byte, name string) {
	n := scrapeNode(b, yaml, name)
	h := promhttp.HandlerFor(n.Registry, promhttp.HandlerOpts{})
	size := scrape(b, h)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		scrape(b, h)
	}
	b.ReportMetric(float64(size), "bytes/scrape")
	b.ReportMetric(float64(seriesCount(b, n.Registry)), "series")
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
// const series in turns, in one run, and reports the ratio of their times
// (target ≤ 1.3): a noisy machine slows both alike.
func BenchmarkScrapeVsBare(b *testing.B) {
	n := scrapeNode(b, scenario.Node110(), "node-110.yaml")
	mfs, err := n.Registry.Gather()
	if err != nil {
		b.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(newBare(mfs))
	ours := promhttp.HandlerFor(n.Registry, promhttp.HandlerOpts{})
	base := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	if a, c := scrape(b, ours), scrape(b, base); a != c {
		b.Fatalf("our scrape is %d bytes, the bare one %d: not the same series", a, c)
	}
	var tOurs, tBare time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		scrape(b, ours)
		t1 := time.Now()
		scrape(b, base)
		tOurs, tBare = tOurs+t1.Sub(t0), tBare+time.Since(t1)
	}
	b.ReportMetric(float64(tOurs.Nanoseconds())/float64(b.N), "ours-ns/scrape")
	b.ReportMetric(float64(tBare.Nanoseconds())/float64(b.N), "bare-ns/scrape")
	b.ReportMetric(float64(tOurs)/float64(tBare), "ratio")
}
