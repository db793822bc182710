package exporter_test

import (
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"

	"github.com/gpuxray/gpuxray/collector/sim"
	"github.com/gpuxray/gpuxray/exporter"
	"github.com/gpuxray/gpuxray/test/bench/scenario"
	"github.com/gpuxray/gpuxray/test/bench/simnode"
)

// The sample names a family of each type writes, as suffixes of the family
// name: in OpenMetrics a counter family is named without its _total.
var (
	omSuffixes = map[model.MetricType][]string{
		model.MetricTypeCounter:        {"_total", "_created"},
		model.MetricTypeGauge:          {""},
		model.MetricTypeUnknown:        {""},
		model.MetricTypeStateset:       {""},
		model.MetricTypeInfo:           {"_info"},
		model.MetricTypeSummary:        {"", "_sum", "_count", "_created"},
		model.MetricTypeHistogram:      {"_bucket", "_sum", "_count", "_created"},
		model.MetricTypeGaugeHistogram: {"_bucket", "_gsum", "_gcount"},
	}
	textSuffixes = map[model.MetricType][]string{
		model.MetricTypeCounter:   {""},
		model.MetricTypeGauge:     {""},
		model.MetricTypeUnknown:   {""},
		model.MetricTypeSummary:   {"", "_sum", "_count"},
		model.MetricTypeHistogram: {"_bucket", "_sum", "_count"},
	}
)

// exposition is a scrape body as checkExposition read it.
type exposition struct {
	families []string                    // in order
	types    map[string]model.MetricType // by family
	series   int
}

// checkExposition parses body as Prometheus parses a scrape of that
// Content-Type (text/plain or application/openmetrics-text), with its own
// textparse parsers, and holds it to the rules about families that those
// parsers let through (they read sample by sample): a family is named once
// (OpenMetrics: "MetricFamily names are a string and MUST be unique within
// a MetricSet"; the text format: one HELP and one TYPE line per name), its
// metadata comes before its samples and its samples together ("MUST NOT be
// interleaved"), each sample name is one that its family's type writes (a
// sample that is not starts a family of its own, of type unknown), no two
// families could write the same sample name (OpenMetrics: "MUST NOT result
// in a potential clash"), and no series is written twice.
func checkExposition(body []byte, contentType string) (*exposition, error) {
	mediaType, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return nil, err
	}
	suffixes := textSuffixes
	if mediaType == "application/openmetrics-text" {
		suffixes = omSuffixes
	} else if mediaType != "text/plain" {
		return nil, fmt.Errorf("content type %q is not a text format", contentType)
	}
	p, err := textparse.New(body, contentType, labels.NewSymbolTable(), textparse.ParserOptions{})
	if err != nil {
		return nil, err
	}

	type family struct {
		name        string
		typ         model.MetricType
		help, typed bool
		samples     int
		seriesSeen  map[string]bool
	}
	e := &exposition{types: map[string]model.MetricType{}}
	seen := map[string]*family{}
	var cur *family
	start := func(name string) error {
		if _, ok := seen[name]; ok {
			return fmt.Errorf("family %q appears twice", name)
		}
		cur = &family{name: name, typ: model.MetricTypeUnknown, seriesSeen: map[string]bool{}}
		seen[name] = cur
		e.families = append(e.families, name)
		return nil
	}
	metadata := func(name string) error {
		if cur != nil && cur.name == name {
			if cur.samples > 0 {
				return fmt.Errorf("family %q appears twice: metadata after its samples", name)
			}
			return nil
		}
		return start(name)
	}
	belongs := func(name string) bool {
		if cur == nil {
			return false
		}
		for _, s := range suffixes[cur.typ] {
			if name == cur.name+s {
				return true
			}
		}
		return false
	}
	for {
		entry, err := p.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		switch entry {
		case textparse.EntryHelp:
			name, _ := p.Help()
			if err := metadata(string(name)); err != nil {
				return nil, err
			}
			if cur.help {
				return nil, fmt.Errorf("second HELP of family %q", name)
			}
			cur.help = true
		case textparse.EntryType:
			name, typ := p.Type()
			if err := metadata(string(name)); err != nil {
				return nil, err
			}
			if cur.typed {
				return nil, fmt.Errorf("second TYPE of family %q", name)
			}
			if _, ok := suffixes[typ]; !ok {
				return nil, fmt.Errorf("family %q has type %q, not one of this format", name, typ)
			}
			cur.typ, cur.typed = typ, true
		case textparse.EntryUnit:
			name, _ := p.Unit()
			if err := metadata(string(name)); err != nil {
				return nil, err
			}
		case textparse.EntrySeries:
			var l labels.Labels
			p.Labels(&l)
			name := l.Get(model.MetricNameLabel)
			if !belongs(name) {
				if err := start(name); err != nil {
					return nil, fmt.Errorf("sample %s: %w", name, err)
				}
			}
			if key := l.String(); cur.seriesSeen[key] {
				return nil, fmt.Errorf("series %s written twice", key)
			} else {
				cur.seriesSeen[key] = true
			}
			cur.samples++
			e.series++
		case textparse.EntryComment:
		default:
			return nil, fmt.Errorf("unexpected entry %d", entry)
		}
	}
	owner := map[string]string{}
	for _, name := range e.families {
		f := seen[name]
		e.types[name] = f.typ
		for _, s := range suffixes[f.typ] {
			if other, ok := owner[name+s]; ok {
				return nil, fmt.Errorf("families %q and %q could both write samples named %q", other, name, name+s)
			}
			owner[name+s] = name
		}
	}
	return e, nil
}

func TestCheckExposition(t *testing.T) {
	t.Parallel()
	const om, text = "application/openmetrics-text; version=1.0.0; charset=utf-8", "text/plain; version=0.0.4; charset=utf-8"
	for _, tc := range []struct {
		name, contentType, body string
		err                     string // "" for a valid body
	}{
		{"openmetrics", om, "# HELP a_bytes A.\n# TYPE a_bytes gauge\na_bytes 1.0\n# HELP a_bytes_total B.\n# TYPE a_bytes_total unknown\na_bytes_total 2.0\n" +
			"# TYPE c counter\nc_total{x=\"1\"} 1.0\nc_total{x=\"2\"} 1.0\n# TYPE s summary\ns{quantile=\"0.5\"} 1.0\ns_sum 1.0\ns_count 1\nbare 3\n# EOF\n", ""},
		{"openmetrics, a gauge and a counter of one name", om,
			"# HELP go_memstats_alloc_bytes A.\n# TYPE go_memstats_alloc_bytes gauge\ngo_memstats_alloc_bytes 1.0\n" +
				"# HELP go_memstats_alloc_bytes B.\n# TYPE go_memstats_alloc_bytes counter\ngo_memstats_alloc_bytes_total 2.0\n# EOF\n",
			`family "go_memstats_alloc_bytes" appears twice`},
		{"openmetrics, interleaved", om, "# TYPE a gauge\na 1\n# TYPE b gauge\nb 1\n# TYPE a gauge\na{x=\"y\"} 1\n# EOF\n", `family "a" appears twice`},
		{"openmetrics, a sample of another family between", om, "# TYPE a gauge\na{x=\"1\"} 1\nb 1\na{x=\"2\"} 1\n# EOF\n", `family "a" appears twice`},
		{"openmetrics, metadata after samples", om, "# TYPE a gauge\na 1\n# HELP a A.\n# EOF\n", `family "a" appears twice: metadata after its samples`},
		{"openmetrics, a counter's sample without _total", om, "# TYPE c counter\nc 1\n# EOF\n", `family "c" appears twice`},
		{"openmetrics, potential clash", om, "# TYPE a counter\na_total 1\n# TYPE a_created gauge\na_created 1\n# EOF\n", `families "a" and "a_created" could both write samples named "a_created"`},
		{"openmetrics, a series twice", om, "# TYPE a gauge\na{x=\"1\"} 1\na{x=\"1\"} 2\n# EOF\n", `series {__name__="a", x="1"} written twice`},
		{"openmetrics, second TYPE", om, "# TYPE a gauge\n# TYPE a gauge\na 1\n# EOF\n", `second TYPE of family "a"`},
		{"openmetrics, no EOF", om, "# TYPE a gauge\na 1\n", "data does not end with # EOF"},
		{"text", text, "# HELP a_bytes A.\n# TYPE a_bytes gauge\na_bytes 1\n# HELP a_bytes_total B.\n# TYPE a_bytes_total counter\na_bytes_total 2\n" +
			"# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n", ""},
		{"text, a family twice", text, "# TYPE a gauge\na 1\n# TYPE b gauge\nb 1\n# TYPE a gauge\na{x=\"y\"} 1\n", `family "a" appears twice`},
		{"text, a summary and a gauge of its count", text, "# TYPE s summary\ns_count 1\n# TYPE s_count gauge\ns_count{x=\"1\"} 1\n",
			`families "s" and "s_count" could both write samples named "s_count"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := checkExposition([]byte(tc.body), tc.contentType)
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("rejected: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("error %v, want %q", err, tc.err)
			}
		})
	}
}

// TestExpositionFamiliesOnce scrapes the agent's whole exposition (the
// engine's families on a simulated 110-allocation node, the Go runtime's
// and the process's, as cmd/gpuxray registers them) in each text format
// Prometheus negotiates, whole, filtered by a name[] naming every family,
// and with a snapshot whose duplicate series Gather reports, and parses
// each answer with Prometheus' parser and checkExposition: every family
// once, every series there.
func TestExpositionFamiliesOnce(t *testing.T) {
	sc, err := sim.ParseScenario(scenario.Node110(), "node-110.yaml")
	if err != nil {
		t.Fatal(err)
	}
	n := simnode.New(t, sc, nil)
	n.Run(time.Second, time.Minute)
	build := &exporter.BuildInfo{Version: "1.2.3", Revision: "abc", GoVersion: "go1.26"}
	registry := func(src exporter.SnapshotSource) *prometheus.Registry {
		return agentGatherer(exporter.NewCollector(src, build),
			collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	dup := edgeSnapshot()
	dup.Devices = append(dup.Devices, dup.Devices[0])

	whole := registry(n.Engine)
	mfs, err := whole.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var all []string
	for _, mf := range mfs {
		all = append(all, "name[]="+mf.GetName())
	}
	paths := []struct {
		name  string
		r     *prometheus.Registry
		query string
	}{
		{"whole", whole, ""},
		{"filtered", whole, strings.Join(all, "&")},
		{"duplicate devices", registry(&swappable{s: dup}), ""},
	}
	for _, accept := range []string{
		"application/openmetrics-text;version=1.0.0",
		"application/openmetrics-text;version=0.0.1",
		scrapeReqs[8].accept, // Prometheus 3's
		"text/plain;version=0.0.4",
	} {
		for _, p := range paths {
			t.Run(p.name+", "+accept, func(t *testing.T) {
				h := handler(p.r)
				a := do(t, h, scrapeReq{name: p.name, method: http.MethodGet, accept: accept, encoding: "gzip", query: p.query})
				where := p.name + ", " + accept
				if a.code != http.StatusOK {
					t.Fatalf("%s: status %d: %s", where, a.code, a.body)
				}
				e, err := checkExposition(a.body, a.headers.Get("Content-Type"))
				if err != nil {
					t.Errorf("%s (%s): %v", where, a.headers.Get("Content-Type"), err)
					return
				}
				if want := gatherSamples(t, p.r); e.series != want {
					t.Errorf("%s: %d series parsed, %d gathered", where, e.series, want)
				}
				// Both of the clashing pair are served, under their names.
				counter := model.MetricTypeCounter
				if strings.HasPrefix(a.headers.Get("Content-Type"), "application/openmetrics-text") {
					counter = model.MetricTypeUnknown
				}
				if g, c := e.types["go_memstats_alloc_bytes"], e.types["go_memstats_alloc_bytes_total"]; g != model.MetricTypeGauge || c != counter {
					t.Errorf("%s: go_memstats_alloc_bytes is a %q, go_memstats_alloc_bytes_total a %q; want %q and %q", where, g, c, model.MetricTypeGauge, counter)
				}
			})
		}
	}
}

// gatherSamples is the number of samples a text exposition of g has: a
// summary's quantiles, sum and count, a histogram's buckets (+Inf
// included), sum and count.
func gatherSamples(t *testing.T, g prometheus.Gatherer) int {
	t.Helper()
	mfs, _ := g.Gather()
	n := 0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch {
			case m.Summary != nil:
				n += len(m.Summary.GetQuantile()) + 2
			case m.Histogram != nil:
				b := m.Histogram.GetBucket()
				n += len(b) + 2
				if len(b) == 0 || !math.IsInf(b[len(b)-1].GetUpperBound(), +1) {
					n++
				}
			default:
				n++
			}
		}
	}
	return n
}

// clashing is a collector of families whose OpenMetrics names clash: with
// each other (a gauge and a counter of one name, as the Go collector's
// go_memstats_alloc_bytes), with the engine's gauge gpuxray_device_up, and
// (engineCounter) with the engine's counter gpuxray_device_idle_seconds_total.
type clashing struct{ engineCounter bool }

var clashingDescs = []*prometheus.Desc{
	prometheus.NewDesc("aaa_bytes", "A gauge.", nil, nil),
	prometheus.NewDesc("aaa_bytes_total", "A counter beside it.", []string{"k"}, nil),
	prometheus.NewDesc("gpuxray_device_up_total", "A counter beside the engine's gauge.", nil, nil),
	prometheus.NewDesc("gpuxray_device_idle_seconds", "A gauge beside the engine's counter.", nil, nil),
}

func (c clashing) Describe(ch chan<- *prometheus.Desc) {
	for i, d := range clashingDescs {
		if i < 3 || c.engineCounter {
			ch <- d
		}
	}
}

func (c clashing) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(clashingDescs[0], prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(clashingDescs[1], prometheus.CounterValue, 2, "x")
	ch <- prometheus.MustNewConstMetric(clashingDescs[1], prometheus.CounterValue, 3e21, "y")
	ch <- prometheus.MustNewConstMetric(clashingDescs[2], prometheus.CounterValue, 4)
	if c.engineCounter {
		ch <- prometheus.MustNewConstMetric(clashingDescs[3], prometheus.GaugeValue, 5)
	}
}

// TestOpenMetricsClashes: families whose OpenMetrics names clash, among
// the other collectors and with the engine's gauge and counter, are each
// served once, the counter of a pair as unknown in OpenMetrics only.
func TestOpenMetricsClashes(t *testing.T) {
	c := exporter.NewCollector(&swappable{s: edgeSnapshot()}, nil)
	r := agentGatherer(c, clashing{engineCounter: true})
	for _, req := range scrapeReqs {
		if req.method != http.MethodGet || req.query != "" || req.name == "protobuf" {
			continue
		}
		a := do(t, handler(r), req)
		ct := a.headers.Get("Content-Type")
		om := strings.HasPrefix(ct, "application/openmetrics-text")
		e, err := checkExposition(a.body, ct)
		if err != nil {
			t.Errorf("%s (%s): %v", req.name, ct, err)
			continue
		}
		counter := model.MetricTypeCounter
		if om {
			counter = model.MetricTypeUnknown
		}
		for name, want := range map[string]model.MetricType{
			"aaa_bytes": model.MetricTypeGauge, "aaa_bytes_total": counter,
			"gpuxray_device_up": model.MetricTypeGauge, "gpuxray_device_up_total": counter,
			"gpuxray_device_idle_seconds": model.MetricTypeGauge,
		} {
			if got := e.types[name]; got != want {
				t.Errorf("%s: %s is a %q, want %q", req.name, name, got, want)
			}
		}
		// The engine's counter, by its name in each format.
		if om && e.types["gpuxray_device_idle_seconds_total"] != model.MetricTypeUnknown ||
			!om && e.types["gpuxray_device_idle_seconds_total"] != model.MetricTypeCounter {
			t.Errorf("%s: gpuxray_device_idle_seconds_total is a %q", req.name, e.types["gpuxray_device_idle_seconds_total"])
		}
		if want := gatherSamples(t, r); e.series != want {
			t.Errorf("%s: %d series parsed, %d gathered", req.name, e.series, want)
		}
	}
}
