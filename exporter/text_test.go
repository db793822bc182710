package exporter_test

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpuxray/gpuxray/agent"
	"github.com/gpuxray/gpuxray/collector"
	"github.com/gpuxray/gpuxray/exporter"
)

// swappable is a snapshot source a test changes.
type swappable struct {
	mu sync.Mutex
	s  *agent.Snapshot
}

func (s *swappable) Snapshot() *agent.Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.s
}

func (s *swappable) set(snap *agent.Snapshot) {
	s.mu.Lock()
	s.s = snap
	s.mu.Unlock()
}

// stable is a collector of other families with fixed values, named to fall
// before, between and after the engine's.
type stable struct{ err bool }

var stableDescs = []*prometheus.Desc{
	prometheus.NewDesc("aaa_first_total", "Before every gpuxray family.", []string{"k"}, nil),
	prometheus.NewDesc("gpuxray_allocation_k", "Between allocation_info and allocation_memory_used_bytes.", nil, nil),
	prometheus.NewDesc("gpuxray_e", "Between the device and the source families.", []string{"a", "b"}, nil),
	prometheus.NewDesc("zzz_last", "After every family; \\ and\nnew line.", nil, nil),
}

func (s stable) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range stableDescs {
		ch <- d
	}
}

func (s stable) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(stableDescs[0], prometheus.CounterValue, 3, "x\"y")
	ch <- prometheus.MustNewConstMetric(stableDescs[0], prometheus.CounterValue, 1e21, "a")
	ch <- prometheus.MustNewConstMetric(stableDescs[1], prometheus.GaugeValue, 1.5e-7)
	ch <- prometheus.MustNewConstMetric(stableDescs[2], prometheus.GaugeValue, -1, "1", "2")
	ch <- prometheus.MustNewConstMetric(stableDescs[3], prometheus.UntypedValue, math.Inf(-1))
	if s.err {
		ch <- prometheus.NewInvalidMetric(stableDescs[2], errors.New("boom"))
	}
}

// scrapeReq is one request of a comparison.
type scrapeReq struct {
	name, method, accept, encoding, query string
}

var scrapeReqs = []scrapeReq{
	{name: "plain", method: http.MethodGet},
	{name: "text", method: http.MethodGet, accept: "text/plain;version=0.0.4"},
	{name: "text-utf8", method: http.MethodGet, accept: "text/plain;version=0.0.4;escaping=allow-utf-8"},
	{name: "text-values", method: http.MethodGet, accept: "text/plain;version=0.0.4;escaping=values"},
	{name: "text-dots", method: http.MethodGet, accept: "text/plain; version=0.0.4; escaping=dots"},
	{name: "any", method: http.MethodGet, accept: "*/*"},
	{name: "gzip", method: http.MethodGet, encoding: "gzip"},
	{name: "head", method: http.MethodHead, encoding: "gzip"},
	{name: "prometheus", method: http.MethodGet, encoding: "gzip",
		accept: "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1"},
	{name: "openmetrics", method: http.MethodGet, accept: "application/openmetrics-text;version=1.0.0"},
	{name: "openmetrics-0.0.1", method: http.MethodGet, accept: "application/openmetrics-text;version=0.0.1", encoding: "gzip"},
	{name: "openmetrics-values", method: http.MethodGet, accept: "application/openmetrics-text;version=1.0.0;escaping=values"},
	{name: "openmetrics-head", method: http.MethodHead, accept: "application/openmetrics-text;version=1.0.0"},
	{name: "openmetrics-2", method: http.MethodGet, accept: "application/openmetrics-text;version=2.0.0"},
	{name: "prometheus-2.42", method: http.MethodGet, encoding: "gzip",
		accept: "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"},
	{name: "openmetrics-filter", method: http.MethodGet, accept: "application/openmetrics-text;version=1.0.0", query: "name[]=gpuxray_device_up"},
	{name: "protobuf", method: http.MethodGet, accept: "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited"},
	{name: "filter", method: http.MethodGet, query: "name[]=gpuxray_device_up&name[]=aaa_first_total"},
	{name: "other-query", method: http.MethodGet, query: "foo=bar"},
}

// fast reports whether req is served by the fast path: text and
// OpenMetrics (0.0.1, 1.0.0; 2.0.0 is not offered), unfiltered.
func (r scrapeReq) fast() bool {
	return r.name != "protobuf" && r.name != "filter" && r.name != "openmetrics-filter"
}

type answer struct {
	code    int
	headers http.Header
	body    []byte
}

func do(t *testing.T, h http.Handler, r scrapeReq) answer {
	t.Helper()
	target := "/metrics"
	if r.query != "" {
		target += "?" + r.query
	}
	req := httptest.NewRequest(r.method, target, nil)
	if r.accept != "" {
		req.Header.Set("Accept", r.accept)
	}
	if r.encoding != "" {
		req.Header.Set("Accept-Encoding", r.encoding)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	body := rec.Body.Bytes()
	if rec.Header().Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
		if body, err = io.ReadAll(zr); err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
	}
	return answer{rec.Code, rec.Header(), body}
}

// compareScrapes asserts that every request gets the same answer from the
// agent's handler over a Registry (the fast path) as from the handler over
// a plain prometheus.Registry holding the same collectors (client_golang's
// path), and that the fast path served the text ones. It returns the fast
// plain-text body.
func compareScrapes(t *testing.T, c *exporter.Collector, others ...prometheus.Collector) []byte {
	t.Helper()
	r := exporter.NewRegistry(c)
	r.MustRegister(others...)
	ref := prometheus.NewRegistry()
	ref.MustRegister(c)
	ref.MustRegister(others...)
	fast, slow := handler(r), handler(ref)
	var plain []byte
	for _, req := range scrapeReqs {
		n0 := exporter.TextScrapes()
		got := do(t, fast, req)
		served := exporter.TextScrapes() - n0
		want := do(t, slow, req)
		if got.code != want.code {
			t.Errorf("%s: status %d, client_golang's %d", req.name, got.code, want.code)
		}
		for _, k := range []string{"Content-Type", "Content-Encoding", "Vary"} {
			if g, w := got.headers.Values(k), want.headers.Values(k); strings.Join(g, "|") != strings.Join(w, "|") {
				t.Errorf("%s: %s %q, client_golang's %q", req.name, k, g, w)
			}
		}
		if !bytes.Equal(got.body, want.body) {
			t.Errorf("%s: body differs from client_golang's:\n%s", req.name, firstDiff(got.body, want.body))
		}
		if want := map[bool]uint64{true: 1}[req.fast()]; served != want {
			t.Errorf("%s: fast path served %d scrapes", req.name, served)
		}
		checkFamiliesOnce(t, req.name, got)
		if req.name == "plain" {
			plain = got.body
		}
	}
	return plain
}

// checkFamiliesOnce asserts that a text or OpenMetrics answer with a body
// names each family once (see checkExposition).
func checkFamiliesOnce(t *testing.T, name string, a answer) {
	t.Helper()
	ct := a.headers.Get("Content-Type")
	if a.code != http.StatusOK || len(a.body) == 0 || !strings.HasPrefix(ct, "text/plain") && !strings.HasPrefix(ct, "application/openmetrics-text") {
		return
	}
	if _, err := checkExposition(a.body, ct); err != nil {
		t.Errorf("%s (%s): %v", name, ct, err)
	}
}

// firstDiff shows the first line where a and b differ.
func firstDiff(a, b []byte) string {
	la, lb := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := range max(len(la), len(lb)) {
		var x, y string
		if i < len(la) {
			x = la[i]
		}
		if i < len(lb) {
			y = lb[i]
		}
		if x != y {
			return "line " + strconv.Itoa(i+1) + ":\n fast: " + x + "\n  ref: " + y
		}
	}
	return "(same lines)"
}

// parseSeries parses a text body as Prometheus does, and counts its series.
func parseSeries(t *testing.T, body []byte) int {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("the text body does not parse: %v", err)
	}
	n := 0
	for _, mf := range mfs {
		n += len(mf.GetMetric())
	}
	return n
}

func gatherCount(t *testing.T, g prometheus.Gatherer) int {
	t.Helper()
	mfs, _ := g.Gather()
	n := 0
	for _, mf := range mfs {
		n += len(mf.GetMetric())
	}
	return n
}

// edgeSnapshot has label values to escape, extra labels, stale and ended
// allocations, and values of every form.
func edgeSnapshot() *agent.Snapshot {
	long := strings.Repeat("ü", 200) // 400 bytes: capped
	s := &agent.Snapshot{
		Devices: []agent.DeviceSnapshot{
			{
				Device: collector.Device{UUID: "GPU-a", GPU: 0, Name: "NVIDIA \"H100\" \\ 80GB\nHBM3 ü", DriverVersion: "",
					UtilizationSource: collector.UtilizationSamples},
				Present: true, HasUtilization: true, Utilization: math.NaN(),
				DeviceGauges: collector.DeviceGauges{HasMemory: true, MemoryUsedBytes: 1 << 62, MemoryTotalBytes: 0,
					HasPower: true, PowerWatts: math.Inf(1), HasEnergy: true, EnergyJoules: 1e21},
				GPMGauges:             collector.GPMGauges{HasGPM: true, SMActive: 1.5e-7, SMOccupancy: math.Copysign(0, -1), TensorActive: -1},
				HasUnattributedMemory: true, UnattributedMemoryBytes: 12345678901234,
			},
			{
				Device:  collector.Device{UUID: "MIG-b", GPU: 1, Name: "A100", MIGProfile: "1g.10gb ✓", ParentUUID: "GPU-p", DriverVersion: "550"},
				Present: false,
			},
			{
				Device:  collector.Device{UUID: "GPU-c\xff", GPU: 10, Name: long},
				Present: true, HasUtilization: true, Utilization: math.Inf(-1),
			},
		},
		Allocations: []*agent.AllocationSnapshot{
			{AllocationInfo: &agent.AllocationInfo{UUID: "GPU-a", GPU: 0, Namespace: "ml", Pod: "train-0", Container: "main", Resource: "nvidia.com/gpu",
				WorkloadKind: "Job", Workload: "train\\\"x\"", Model: "llama \"3\"\n70b",
				ExtraLabels: map[string]string{"team": "a\"b\\c\nd", "cost_center": "ü€𝄞"}},
				Attribution: "device", Live: true, HasIdleStreak: true, IdleStreak: 42, HasMemory: true, MemoryUsedBytes: 512 << 20},
			{AllocationInfo: &agent.AllocationInfo{UUID: "GPU-a", GPU: 0, Namespace: "ml", Pod: "train-1", Container: "main", Resource: "nvidia.com/gpu", Shared: true,
				ExtraLabels: map[string]string{"team": "\xff\xfe"}},
				Attribution: "process", Live: true, Stale: true, HasIdleStreak: true, IdleStreak: math.NaN()},
			{AllocationInfo: &agent.AllocationInfo{UUID: "MIG-b", GPU: -1, Namespace: "", Pod: "", Container: "",
				ExtraLabels: map[string]string{"team": long}}, Live: false},
			{AllocationInfo: &agent.AllocationInfo{UUID: "MIG-b", GPU: 1, Namespace: "z", Pod: "__overflow__", Container: ""}, Live: true, HasMemory: true},
		},
		Sources: []agent.SourceSnapshot{
			{Name: "nvml", Up: true, Errors: map[string]uint64{}},
			{Name: "kubelet", Up: false, Errors: map[string]uint64{"unavailable": 2, "timeout": 1 << 53, "a\"b": 0}},
		},
		Overflowed: 3,
	}
	vals := []float64{0, 1, -1, 1e21, 1.5e-7, 12345678901234, 0.1, math.Inf(1), math.NaN(), math.Copysign(0, -1), 2.5e300, 1e-300}
	k := 0
	next := func() float64 { k++; return vals[k%len(vals)] }
	for i := range s.Devices {
		for w := range agent.NumWindows {
			s.Devices[i].Counters[w] = agent.DeviceCounters{Observed: next(), Idle: next(), Unallocated: next(),
				UnallocatedActive: next(), Gap: next(), Unattributed: next()}
		}
	}
	for i := range s.Allocations {
		for w := range agent.NumWindows {
			s.Allocations[i].Counters[w] = agent.AllocationCounters{Allocated: next(), Idle: next(), Active: next()}
		}
	}
	return s
}

func TestTextFastPathEdges(t *testing.T) {
	src := &swappable{s: edgeSnapshot()}
	c := exporter.NewCollector(src, &exporter.BuildInfo{Version: "v\"1\"\n", Revision: "\\", GoVersion: ""},
		exporter.WithExtraLabels("team", "cost_center"))
	check := func(step string) {
		t.Helper()
		body := compareScrapes(t, c, stable{})
		r := exporter.NewRegistry(c)
		r.MustRegister(stable{})
		if got, want := parseSeries(t, body), gatherCount(t, r); got != want {
			t.Errorf("%s: %d series parsed, %d gathered", step, got, want)
		}
	}
	check("first")
	check("again") // from the cached labels and order

	// Label changes, an allocation gone and one new, series that come and go.
	s := edgeSnapshot()
	s.Allocations[0].Workload = "other"
	s.Allocations[0].ExtraLabels = map[string]string{"team": "b"}
	s.Allocations = append(s.Allocations[:2], &agent.AllocationSnapshot{
		AllocationInfo: &agent.AllocationInfo{UUID: "GPU-a", GPU: 0, Namespace: "a", Pod: "new", Container: "c"}, Live: true})
	s.Devices[0].HasPower, s.Devices[0].HasGPM = false, false
	s.Devices[1].HasMemory, s.Devices[1].MemoryUsedBytes = true, 7
	s.Devices[2].Name = "renamed"
	s.Overflowed = 0
	s.Sources = nil
	src.set(s)
	check("changed")

	// Nothing at all, build info only.
	src.set(&agent.Snapshot{})
	check("empty")

	// Back: every entry built again.
	src.set(edgeSnapshot())
	check("back")
}

func TestTextFastPathDuplicateFallsBack(t *testing.T) {
	// Two allocations whose pods differ beyond the label value cap: the
	// same series twice, which Gather reports; the fast path leaves the
	// scrape to it.
	long := strings.Repeat("p", 300)
	s := &agent.Snapshot{Allocations: []*agent.AllocationSnapshot{
		{AllocationInfo: &agent.AllocationInfo{UUID: "GPU-a", Namespace: "ml", Pod: long + "1"}, Live: true},
		{AllocationInfo: &agent.AllocationInfo{UUID: "GPU-a", Namespace: "ml", Pod: long + "2"}, Live: true},
	}}
	compareScrapesFallback(t, exporter.NewCollector(&swappable{s: s}, nil))
}

func TestTextFastPathErrors(t *testing.T) {
	// A failing collector besides the engine: ContinueOnError serves the
	// rest, as client_golang's path does.
	c := exporter.NewCollector(&swappable{s: edgeSnapshot()}, nil)
	compareScrapes(t, c, stable{err: true})

	// Nothing but the failure: a 500 from both.
	empty := exporter.NewCollector(&swappable{s: &agent.Snapshot{}}, nil)
	r := exporter.NewRegistry(empty)
	r.MustRegister(failing{})
	ref := prometheus.NewRegistry()
	ref.MustRegister(empty, failing{})
	req := scrapeReq{name: "plain", method: http.MethodGet, encoding: "gzip"}
	a, b := do(t, handler(r), req), do(t, handler(ref), req)
	if a.code != http.StatusInternalServerError || a.code != b.code || !bytes.Equal(a.body, b.body) {
		t.Errorf("answers differ: %d %q, %d %q", a.code, a.body, b.code, b.body)
	}
}

type failing struct{}

var failingDesc = prometheus.NewDesc("failing", "Fails.", nil, nil)

func (failing) Describe(ch chan<- *prometheus.Desc) { ch <- failingDesc }
func (failing) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.NewInvalidMetric(failingDesc, errors.New("boom"))
}

func TestTextFastPathWithRuntimeCollectors(t *testing.T) {
	// The agent's registry: go_* and process_* values move between two
	// scrapes, so the bodies are compared without them.
	c := exporter.NewCollector(&swappable{s: edgeSnapshot()}, &exporter.BuildInfo{Version: "1"})
	r := exporter.NewRegistry(c)
	r.MustRegister(collectors.NewGoCollector(), exporter.NewProcessCollector())
	ref := prometheus.NewRegistry()
	ref.MustRegister(c, collectors.NewGoCollector(), exporter.NewProcessCollector())
	for _, req := range scrapeReqs {
		if req.fast() && req.method == http.MethodGet {
			checkFamiliesOnce(t, req.name, do(t, handler(r), req))
		}
	}
	req := scrapeReq{name: "gzip", method: http.MethodGet, encoding: "gzip"}
	n0 := exporter.TextScrapes()
	a := do(t, handler(r), req)
	if exporter.TextScrapes() == n0 {
		t.Error("the fast path did not serve the scrape")
	}
	b := do(t, handler(ref), req)
	strip := func(body []byte) string {
		var out []string
		for _, l := range strings.Split(string(body), "\n") {
			name := strings.TrimPrefix(strings.TrimPrefix(l, "# HELP "), "# TYPE ")
			if !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") {
				out = append(out, l)
			}
		}
		return strings.Join(out, "\n")
	}
	if strip(a.body) != strip(b.body) {
		t.Errorf("bodies differ:\n%s", firstDiff([]byte(strip(a.body)), []byte(strip(b.body))))
	}
	if !strings.Contains(string(a.body), "\ngo_goroutines ") || !strings.Contains(string(a.body), "\nprocess_cpu_seconds_total ") {
		t.Error("the runtime families are missing")
	}
	if got, want := parseSeries(t, a.body), gatherCount(t, r); got != want {
		t.Errorf("%d series parsed, %d gathered", got, want)
	}
}

func TestTextFastPathSameKeyFallsBack(t *testing.T) {
	// Two devices with one UUID: one label cache entry, two series each.
	s := edgeSnapshot()
	s.Devices = append(s.Devices, s.Devices[0])
	s.Devices[len(s.Devices)-1].PowerWatts = 7
	c := exporter.NewCollector(&swappable{s: s}, nil, exporter.WithExtraLabels("team", "cost_center"))
	compareScrapesFallback(t, c)
}

// compareScrapesFallback asserts that the fast path leaves a text scrape of
// c to client_golang, whose answer it is.
func compareScrapesFallback(t *testing.T, c *exporter.Collector) {
	t.Helper()
	r := exporter.NewRegistry(c)
	ref := prometheus.NewRegistry()
	ref.MustRegister(c)
	req := scrapeReq{name: "plain", method: http.MethodGet}
	n0 := exporter.TextScrapes()
	a := do(t, handler(r), req)
	if exporter.TextScrapes() != n0 {
		t.Error("the fast path served the scrape")
	}
	if b := do(t, handler(ref), req); a.code != b.code || !bytes.Equal(a.body, b.body) {
		t.Errorf("answers differ: %d, %d:\n%s", a.code, b.code, firstDiff(a.body, b.body))
	}
	checkFamiliesOnce(t, req.name, a)
}

func TestTextFastPathConcurrentScrapes(t *testing.T) {
	// Text and OpenMetrics scrapes at once, while the snapshot changes: the
	// race detector watches the label cache and the cached order.
	src := &swappable{s: edgeSnapshot()}
	c := exporter.NewCollector(src, nil, exporter.WithExtraLabels("team", "cost_center"))
	r := exporter.NewRegistry(c)
	h := handler(r)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			req := scrapeReq{name: "text", method: http.MethodGet, encoding: "gzip"}
			if g%2 == 1 {
				req.accept = "application/openmetrics-text;version=1.0.0"
			}
			for i := range 20 {
				if g == 0 && i%5 == 0 {
					s := edgeSnapshot()
					s.Allocations = s.Allocations[:i%4]
					src.set(s)
				}
				if a := do(t, h, req); a.code != http.StatusOK || len(a.body) == 0 {
					t.Errorf("scrape %d: %d, %d bytes", i, a.code, len(a.body))
				}
			}
		})
	}
	wg.Wait()
}
