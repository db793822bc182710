package report

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
)

// fakeProm answers query_range like Prometheus does, refusing more than
// maxPoints points: two nodes of 4 GPUs each, node-b silent from 10:00 to
// 12:00, every step half peak, half off-peak.
type fakeProm struct {
	maxPoints int
	// refusal is the status and body of a refused query; Prometheus' when empty.
	refusal  string
	code     int
	gap      [2]time.Time
	mu       sync.Mutex
	refused  int
	answered int
}

func (f *fakeProm) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err == nil && r.URL.Path == "/api/v1/query" {
		// node-b's agent was last scraped at 09:47:30, first again at 12:03:15.
		rawAnswer(w, r, []node{
			{instance: "node-b", from: f.gap[0].Add(-25*time.Hour - 30*time.Second), to: f.gap[0].Add(-12*time.Minute - 30*time.Second), interval: time.Minute},
			{instance: "node-b", from: f.gap[1].Add(3*time.Minute + 15*time.Second - time.Minute), to: f.gap[1].Add(24 * time.Hour), interval: time.Minute},
		})
		return
	}
	if err := r.ParseForm(); err != nil || r.URL.Path != "/api/v1/query_range" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	num := func(k string) float64 { v, _ := strconv.ParseFloat(r.Form.Get(k), 64); return v }
	start, end, step := num("start"), num("end"), num("step")
	w.Header().Set("Content-Type", "application/json")
	if n := int((end-start)/step) + 1; n > f.maxPoints {
		f.mu.Lock()
		f.refused++
		f.mu.Unlock()
		if f.refusal != "" {
			w.WriteHeader(f.code)
			fmt.Fprint(w, f.refusal)
			return
		}
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprint(w, `{"status":"error","errorType":"bad_data","error":"exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution (?step=XX)"}`)
		return
	}
	f.mu.Lock()
	f.answered++
	f.mu.Unlock()
	type series struct {
		Metric map[string]string `json:"metric"`
		Values [][2]any          `json:"values"`
	}
	var out []series
	add := func(m map[string]string, v float64, skip func(time.Time) bool) {
		s := series{Metric: m}
		for t := start; t <= end; t += step {
			if skip != nil && skip(time.Unix(int64(t), 0)) {
				continue
			}
			s.Values = append(s.Values, [2]any{t, strconv.FormatFloat(v, 'f', -1, 64)})
		}
		out = append(out, s)
	}
	q := r.Form.Get("query")
	switch {
	case q == strings.ReplaceAll(qNodes, "[S]", "[1h]"):
		add(map[string]string{"instance": "node-a"}, 4, nil)
		add(map[string]string{"instance": "node-b"}, 4, func(t time.Time) bool { return t.After(f.gap[0]) && !t.After(f.gap[1]) })
	case strings.HasPrefix(q, "sum by (window) (increase(gpuxray_device_observed_seconds_total"):
		add(map[string]string{"window": "peak"}, 8*1800, nil)
		add(map[string]string{"window": "offpeak"}, 8*1800, nil)
	case strings.HasPrefix(q, "sum by (window) (increase(gpuxray_device_allocated_seconds_total"):
		add(map[string]string{"window": "peak"}, 6*1800, nil)
		add(map[string]string{"window": "offpeak"}, 6*1800, nil)
	}
	json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": map[string]any{"resultType": "matrix", "result": out}})
}

func newAPI(t *testing.T, url string) API {
	t.Helper()
	c, err := api.NewClient(api.Config{Address: url})
	if err != nil {
		t.Fatal(err)
	}
	return v1.NewAPI(c)
}

func testConfig(end time.Time) Config {
	c := DefaultConfig()
	c.End, c.Range, c.Step = end, 48*time.Hour, time.Hour
	c.Concurrency = 1
	return c
}

// TestBuildSplitsAndFindsGaps: a server that refuses more than 10 points
// gets every query in chunks it accepts, the figures add up across chunks,
// and node-b's silent hours are reported.
func TestBuildSplitsAndFindsGaps(t *testing.T) {
	t.Parallel()
	end := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	f := &fakeProm{maxPoints: 10, gap: [2]time.Time{end.Add(-14 * time.Hour), end.Add(-12 * time.Hour)}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c := testConfig(end)
	c.MaxPoints = 48
	var last [2]int
	c.Progress = func(done, total int) { last = [2]int{done, total} }
	r, err := Build(context.Background(), newAPI(t, srv.URL), c)
	if err != nil {
		t.Fatal(err)
	}
	// The report's 18 (pending twice), the queue's, its waiters' gauges
	// again at each step's end, and the work figures' (value.go).
	queries := 18 + len(queueQueries) + len(valueJobs(c, &valueInput{}))
	for _, qq := range queueQueries {
		if qq.edge {
			queries++
		}
	}
	if f.refused == 0 || f.answered < 5*queries {
		t.Errorf("refused %d, answered %d: want the 48-point queries split into chunks of at most 10", f.refused, f.answered)
	}
	if last != [2]int{queries * 48, queries * 48} {
		t.Errorf("progress ended at %v, want every step of the %d queries", last, queries)
	}
	if !r.Range.End.Equal(end) || !r.Range.Start.Equal(end.Add(-48*time.Hour)) {
		t.Errorf("range %s to %s, want the 48 hours to %s", r.Range.Start, r.Range.End, end)
	}
	approx(t, "owned GPU-hours", r.Funnel.All.Owned, 8*48)
	approx(t, "allocated GPU-hours", r.Funnel.All.Allocated, 6*48)
	approx(t, "peak hours", r.Range.PeakHours, 24)
	approx(t, "peak owned GPU-hours", r.Funnel.Peak.Owned, 8*24)
	// The span runs from the last sample before it to the first after, not
	// from step boundary to step boundary.
	want := []Missing{{Source: "gpuxray", Instance: "node-b", Start: end.Add(-14*time.Hour - 12*time.Minute - 30*time.Second), End: end.Add(-12*time.Hour + 3*time.Minute + 15*time.Second)}}
	if !reflect.DeepEqual(r.Missing, want) {
		t.Errorf("missing %+v, want %+v", r.Missing, want)
	}
	if r.Verdict.Kind != VerdictNoDemandData {
		t.Errorf("verdict %s without kube-state-metrics, want %s", r.Verdict.Kind, VerdictNoDemandData)
	}
	var text bytes.Buffer
	if err := WriteText(&text, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "gpuxray node-b: no data Tue 2026-12-01 09:47:30 → Tue 2026-12-01 12:03:15") {
		t.Errorf("text report does not say what is missing:\n%s", text.String())
	}
}

// TestBuildSplitsOnVictoriaMetrics: VictoriaMetrics refuses a query of
// more points than its -search.maxPointsPerTimeseries in words of its own
// (HTTP 422, as 1.79 answers); the report splits it as it does for
// Prometheus' maximum resolution.
func TestBuildSplitsOnVictoriaMetrics(t *testing.T) {
	t.Parallel()
	end := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	f := &fakeProm{maxPoints: 10, code: http.StatusUnprocessableEntity,
		refusal: `{"status":"error","errorType":"422","error":"error when executing query=\"up\" on the time range (start=1795997700000, end=1796083200000, step=3600000): too many points for the given step=3600000, start=1795997700000 and end=1796083200000: 48; cannot exceed -search.maxPointsPerTimeseries=10"}`}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c := testConfig(end)
	c.MaxPoints = 48
	r, err := Build(context.Background(), newAPI(t, srv.URL), c)
	if err != nil {
		t.Fatal(err)
	}
	if f.refused == 0 || f.answered < 5*15 {
		t.Errorf("refused %d, answered %d: want the 48-point queries split into chunks of at most 10", f.refused, f.answered)
	}
	approx(t, "owned GPU-hours", r.Funnel.All.Owned, 8*48)
}

func TestBuildErrors(t *testing.T) {
	t.Parallel()
	end := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	empty := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"status":"success","data":{"resultType":"matrix","result":[]}}`)
	}))
	defer empty.Close()
	if _, err := Build(context.Background(), newAPI(t, empty.URL), testConfig(end)); !errors.Is(err, ErrNoData) {
		t.Errorf("empty Prometheus: %v, want ErrNoData", err)
	}
	closed := httptest.NewServer(http.NotFoundHandler())
	url := closed.URL
	closed.Close()
	_, err := Build(context.Background(), newAPI(t, url), testConfig(end))
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), url) {
		t.Errorf("closed port: %v, want ErrUnreachable naming %s", err, url)
	}
	denied := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no", http.StatusUnauthorized)
	}))
	defer denied.Close()
	if _, err := Build(context.Background(), newAPI(t, denied.URL), testConfig(end)); err == nil || !strings.Contains(err.Error(), "check the credentials") {
		t.Errorf("401: %v, want a word about credentials", err)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"default", func(*Config) {}, ""},
		{"step not dividing an hour", func(c *Config) { c.Step = 7 * time.Minute }, "divide an hour"},
		{"range not whole steps", func(c *Config) { c.Range = 7*time.Minute + 5*time.Minute }, "whole number of steps"},
		{"quantile", func(c *Config) { c.Quantile = 0 }, "quantile"},
		{"points", func(c *Config) { c.MaxPoints = 20000 }, "max points"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			c.mod(&cfg)
			err := cfg.Validate()
			if (err == nil) != (c.want == "") || (err != nil && !strings.Contains(err.Error(), c.want)) {
				t.Errorf("%s: %v, want %q", c.name, err, c.want)
			}
		})
	}
}

// TestJSONDocumented: every field of the JSON report is in docs/report.md.
func TestJSONDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/report.md")
	if err != nil {
		t.Fatal(err)
	}
	r := &Report{TopWorkloads: []Workload{{}}, TopModels: []Model{{}}, Hints: []Hint{{Profile: "x"}}, Timeline: []TimelinePoint{{}}, Missing: []Missing{{}}}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if !bytes.Contains(doc, []byte("`"+k+"`")) {
					t.Errorf("JSON field %s%s is not documented in docs/report.md", path, k)
				}
				walk(path+k+".", e)
			}
		case []any:
			for _, e := range x {
				walk(path, e)
			}
		}
	}
	walk("", v)
}
