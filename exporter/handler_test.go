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
			return "line " + strconv.Itoa(i+1) + ":\n got: " + x + "\nwant: " + y
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

// agentGatherer is a registry holding c and others, as cmd/gpuxray
// builds the agent's.
func agentGatherer(c *exporter.Collector, others ...prometheus.Collector) *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(c)
	r.MustRegister(others...)
	return r
}

func goldenGatherer(c *exporter.Collector, others ...prometheus.Collector) prometheus.Gatherer {
	return agentGatherer(c, others...)
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

// TestHandlerFormats: every request gets a 200 whose body, in the format
// negotiated, parses with as many series as the registry gathers, each
// family named once; with a name[] filter, only the families named.
func TestHandlerFormats(t *testing.T) {
	c := exporter.NewCollector(&swappable{s: edgeSnapshot()}, &exporter.BuildInfo{Version: "1"},
		exporter.WithExtraLabels("team", "cost_center"))
	r := agentGatherer(c, stable{})
	h := handler(r)
	for _, req := range scrapeReqs {
		a := do(t, h, req)
		if a.code != http.StatusOK {
			t.Fatalf("%s: status %d", req.name, a.code)
		}
		if req.method == http.MethodHead {
			continue
		}
		checkFamiliesOnce(t, req.name, a)
		ct := a.headers.Get("Content-Type")
		if strings.HasPrefix(ct, "text/plain") && req.query == "" {
			if got, want := parseSeries(t, a.body), gatherCount(t, r); got != want {
				t.Errorf("%s: %d series parsed, %d gathered", req.name, got, want)
			}
		}
		if strings.Contains(req.query, "name[]") {
			for _, l := range strings.Split(string(a.body), "\n") {
				if strings.HasPrefix(l, "# TYPE ") && !strings.Contains(req.query, "name[]="+strings.Fields(l)[2]) {
					t.Errorf("%s: family %s served", req.name, strings.Fields(l)[2])
				}
			}
		}
	}
}

// TestHandlerErrors: a failing collector beside the engine's costs its own
// series only (ContinueOnError); with nothing else to serve, a 500.
func TestHandlerErrors(t *testing.T) {
	c := exporter.NewCollector(&swappable{s: edgeSnapshot()}, nil)
	r := agentGatherer(c, stable{err: true})
	a := do(t, handler(r), scrapeReq{name: "plain", method: http.MethodGet, encoding: "gzip"})
	if a.code != http.StatusOK || !bytes.Contains(a.body, []byte("\ngpuxray_device_up{")) || !bytes.Contains(a.body, []byte("\nzzz_last ")) {
		t.Errorf("status %d, want 200 with the engine's and the other families:\n%s", a.code, a.body)
	}

	empty := exporter.NewCollector(&swappable{s: &agent.Snapshot{}}, nil)
	a = do(t, handler(agentGatherer(empty, failing{})), scrapeReq{name: "plain", method: http.MethodGet, encoding: "gzip"})
	if a.code != http.StatusInternalServerError || !bytes.Contains(a.body, []byte("boom")) {
		t.Errorf("status %d %q, want 500 naming the error", a.code, a.body)
	}
}

type failing struct{}

var failingDesc = prometheus.NewDesc("failing", "Fails.", nil, nil)

func (failing) Describe(ch chan<- *prometheus.Desc) { ch <- failingDesc }
func (failing) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.NewInvalidMetric(failingDesc, errors.New("boom"))
}

func TestConcurrentScrapes(t *testing.T) {
	// Text and OpenMetrics scrapes at once, while the snapshot changes,
	// under the race detector.
	src := &swappable{s: edgeSnapshot()}
	c := exporter.NewCollector(src, nil, exporter.WithExtraLabels("team", "cost_center"))
	h := handler(agentGatherer(c))
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
