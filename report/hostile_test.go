package report

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// TestHostileValues: values no figure can hold in Prometheus' answers
// (±Inf, NaN, 1.7e308, a negative count) are left out with a warning; the
// JSON, text and HTML reports are written (the HTML one panicked in
// heatColor, the JSON one failed on NaN, the text one printed NaN and
// negative GPU-hours), and the figures are those of the other values.
func TestHostileValues(t *testing.T) {
	t.Parallel()
	end := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	poisoned := end.Add(-30 * time.Minute) // the step (09:25, 09:30]
	for _, bad := range []float64{math.Inf(1), math.Inf(-1), math.NaN(), 1.7e308, -3600} {
		t.Run(strconv.FormatFloat(bad, 'g', -1, 64), func(t *testing.T) {
			t.Parallel()
			n := node{instance: "node-a", gpus: 8, allocated: 6, from: end.Add(-time.Hour), to: end, interval: 15 * time.Second,
				peak: func(time.Time) bool { return true }}
			wl := map[string]string{"namespace": "ds", "workload_kind": "StatefulSet", "workload": "notebook", "model": ""}
			api := startTimed(t, func(expr string, at time.Time, step time.Duration) []point {
				ps := n.answer(expr, at, step, func(time.Time) (float64, bool) { return 1, true })
				switch expr {
				case qWLAllocated, qWLIdle:
					ps = []point{{labels: withLabel(wl, "window", "peak"), v: 6 * step.Seconds()}}
				case qWLActive:
					ps = []point{{labels: withLabel(wl, "window", "peak"), v: 0}}
				}
				if at.After(poisoned.Add(-step)) && !at.After(poisoned) {
					switch expr {
					case qIdle, qWLIdle, qPending:
						for i := range ps {
							ps[i].v = bad
						}
					}
				}
				return ps
			}, n)
			c := DefaultConfig()
			c.End, c.Range, c.Step = end, time.Hour, 5*time.Minute
			r, err := Build(context.Background(), api, c)
			if err != nil {
				t.Fatal(err)
			}
			// One step of the idle series is left out: 11 of 12 steps of 6 idle GPUs.
			approx(t, "idle GPU-hours", r.Funnel.All.Idle, 6*55.0/60)
			approx(t, "allocated GPU-hours", r.Funnel.All.Allocated, 6)
			if len(r.TopWorkloads) != 1 {
				t.Fatalf("top workloads %+v, want the notebook", r.TopWorkloads)
			}
			approx(t, "the notebook's idle GPU-hours", r.TopWorkloads[0].Idle, 6*55.0/60)
			approx(t, "pending GPUs", r.Demand.PendingGPUs, 11.0/12)
			warned := 0
			for _, w := range r.WarningsBySection.Data {
				if strings.Contains(w, "that no figure can hold") && strings.Contains(w, "left out") {
					warned++
				}
			}
			// qIdle, qWLIdle, and qPending read at the step's middle.
			if warned != 3 {
				t.Errorf("%d warnings of values left out, want 3 (idle, the workloads' idle, pending): %q", warned, r.Warnings)
			}
			var js, text, page bytes.Buffer
			if err := WriteJSON(&js, r); err != nil {
				t.Fatalf("JSON: %v", err)
			}
			var back Report
			if err := json.Unmarshal(js.Bytes(), &back); err != nil {
				t.Fatalf("the JSON report does not decode: %v", err)
			}
			if err := WriteText(&text, r); err != nil {
				t.Fatal(err)
			}
			// The warning names the value; no figure does.
			figures, _, _ := strings.Cut(text.String(), "PARTIAL DATA")
			if m := regexp.MustCompile(`\bNaN\b|\bInf\b|-[0-9][0-9.,]* GPU-h`).FindString(figures); m != "" {
				t.Errorf("the text report says %q:\n%s", m, text.String())
			}
			if err := WriteHTML(&page, r); err != nil {
				t.Fatal(err)
			}
			if figures, _, _ := strings.Cut(page.String(), `id="partial"`); strings.Contains(figures, "NaN") || strings.Contains(figures, "Inf") {
				t.Error("the HTML report says NaN")
			}
		})
	}
}

func withLabel(m map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for a, b := range m {
		out[a] = b
	}
	return out
}

// TestHeatColorAnyValue: heatColor maps anything onto its scale; NaN made
// it index out of range.
func TestHeatColorAnyValue(t *testing.T) {
	for _, c := range []struct {
		x    float64
		want string
	}{
		{math.NaN(), "rgb(250,250,252)"}, {math.Inf(-1), "rgb(250,250,252)"}, {-1, "rgb(250,250,252)"}, {0, "rgb(250,250,252)"},
		{0.5, "rgb(245,180,60)"}, {1, "rgb(200,40,60)"}, {math.Inf(1), "rgb(200,40,60)"},
	} {
		if got := heatColor(c.x); got != c.want {
			t.Errorf("heatColor(%g) = %s, want %s", c.x, got, c.want)
		}
	}
}

// TestFiniteGuard: a figure that comes out not finite all the same is set
// to 0 and counted, so the JSON report can be written.
func TestFiniteGuard(t *testing.T) {
	v := math.NaN()
	r := &Report{Timeline: []TimelinePoint{{OwnedGPUs: math.Inf(1)}}}
	r.Funnel.All.Idle = math.NaN()
	r.Heatmap.IdleAllocatedGPUs[1][2] = &v
	if n := finite(reflect.ValueOf(r)); n != 3 {
		t.Errorf("%d figures set to 0, want 3", n)
	}
	if err := WriteJSON(io.Discard, r); err != nil {
		t.Error(err)
	}
}

// limitedAPI is a client whose answers are bounded as the command's are.
func limitedAPI(t *testing.T, url string, max int64) API {
	t.Helper()
	c, err := api.NewClient(api.Config{Address: url, RoundTripper: LimitAnswers(nil, max)})
	if err != nil {
		t.Fatal(err)
	}
	return v1.NewAPI(c)
}

// TestAnswerTooLarge: an answer over --prometheus.max-answer-bytes is
// split while a chunk can be, and one step's answer over it ends the report
// in one sentence; the client stops reading at the limit (an endless
// answer grew the report until it ran out of memory).
func TestAnswerTooLarge(t *testing.T) {
	t.Parallel()
	const body = 64 << 20
	var written, requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"instance":"`)
		buf := bytes.Repeat([]byte("x"), 64<<10)
		for i := 0; i < body/len(buf); i++ {
			n, err := w.Write(buf)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	end := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	c := testConfig(end)
	c.MaxAnswerBytes, c.Prometheus = 256<<10, srv.URL
	_, err := Build(context.Background(), limitedAPI(t, srv.URL, c.MaxAnswerBytes), c)
	if err == nil || !strings.Contains(err.Error(), "is larger than --prometheus.max-answer-bytes (262144 bytes)") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("%v; want one sentence naming --prometheus.max-answer-bytes", err)
	}
	// 48 steps, halved to 24, 12, 6, 3 and 1.
	if n := requests.Load(); n != 6 {
		t.Errorf("%d requests, want 6: the 48 steps split down to one", n)
	}
	if w := written.Load(); w > requests.Load()*body/4 {
		t.Errorf("the server wrote %d MiB to %d requests: the client read on past the limit", w>>20, requests.Load())
	}
}

// padded is fakeProm with pad more series in the answer to qNodes: an
// answer whose size grows with its steps.
type padded struct {
	*fakeProm
	pad int
}

func (p padded) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil || r.Form.Get("query") != strings.ReplaceAll(qNodes, "[S]", "[1h]") {
		p.fakeProm.ServeHTTP(w, r)
		return
	}
	num := func(k string) float64 { v, _ := strconv.ParseFloat(r.Form.Get(k), 64); return v }
	type series struct {
		Metric map[string]string `json:"metric"`
		Values [][2]any          `json:"values"`
	}
	var out []series
	for i := range p.pad + 2 {
		s := series{Metric: map[string]string{"instance": fmt.Sprintf("node-%d", i)}}
		for t := num("start"); t <= num("end"); t += num("step") {
			s.Values = append(s.Values, [2]any{t, "4"})
		}
		out = append(out, s)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": map[string]any{"resultType": "matrix", "result": out}})
}

// TestAnswerSplitOnSize: a right answer over the size limit is asked for
// in smaller chunks, and the figures are whole; more series than
// --prometheus.max-series end the report in one sentence.
func TestAnswerSplitOnSize(t *testing.T) {
	t.Parallel()
	end := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	f := &fakeProm{maxPoints: 100}
	srv := httptest.NewServer(padded{fakeProm: f, pad: 300})
	defer srv.Close()
	c := testConfig(end)
	// 302 series of 48 points are about 270 KiB; of 12 points, 70 KiB.
	c.MaxAnswerBytes = 128 << 10
	r, err := Build(context.Background(), limitedAPI(t, srv.URL, c.MaxAnswerBytes), c)
	if err != nil {
		t.Fatal(err)
	}
	approx(t, "owned GPU-hours", r.Funnel.All.Owned, 8*48)
	approx(t, "allocated GPU-hours", r.Funnel.All.Allocated, 6*48)

	c.MaxSeries = 100
	_, err = Build(context.Background(), limitedAPI(t, srv.URL, c.MaxAnswerBytes), c)
	if err == nil || !strings.Contains(err.Error(), "returned more than --prometheus.max-series (100) series") {
		t.Errorf("%v; want the series limit named", err)
	}
}

// TestStalledPrometheus: a server that accepts queries and never answers
// is given up within two timeouts (it was retried nine times, halving the
// chunk each time: 18 minutes at the default timeout), with a sentence
// that says so.
func TestStalledPrometheus(t *testing.T) {
	t.Parallel()
	end := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		// answered are the queries the server does answer.
		answered func(query string) bool
		most     int64
	}{
		{"stalled from the first query", func(string) bool { return false }, 2},
		// The first query is answered alone, then four run at once: each
		// is tried twice at most before the first to fail ends the rest.
		{"stalled after the first query", func(q string) bool { return strings.HasPrefix(q, "max by (instance) (count_over_time") }, 4 * 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := &fakeProm{maxPoints: 100}
			var stalls atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if err := r.ParseForm(); err == nil && c.answered(r.Form.Get("query")) {
					f.ServeHTTP(w, r)
					return
				}
				stalls.Add(1)
				<-r.Context().Done()
			}))
			defer srv.Close()
			cfg := testConfig(end)
			cfg.Concurrency, cfg.Timeout, cfg.Prometheus = 4, 300*time.Millisecond, srv.URL
			_, err := Build(context.Background(), newAPI(t, srv.URL), cfg)
			if err == nil || !strings.Contains(err.Error(), "Prometheus at "+srv.URL+" did not answer query ") ||
				!strings.Contains(err.Error(), "within --prometheus.timeout 300ms, twice: is it overloaded or stalled?") {
				t.Errorf("%v; want a sentence saying the server did not answer", err)
			}
			if n := stalls.Load(); n > c.most {
				t.Errorf("%d queries left unanswered, want at most %d", n, c.most)
			}
		})
	}
}

// TestCancelledWhileComputing: a signal that arrives once every answer is
// in ends the report (the computing that followed ignored it).
func TestCancelledWhileComputing(t *testing.T) {
	t.Parallel()
	end := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	srv := httptest.NewServer(&fakeProm{maxPoints: 100})
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := testConfig(end)
	c.Progress = func(done, total int) {
		if done == total {
			cancel()
		}
	}
	if r, err := Build(ctx, newAPI(t, srv.URL), c); !errors.Is(err, context.Canceled) {
		t.Errorf("a report (%v) and %v after the signal, want context.Canceled", r != nil, err)
	}
}

// TestRedirectLoop: a server that redirects to itself is unreachable at
// the URL the report was given ("at ://" lost it).
func TestRedirectLoop(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.String(), http.StatusFound)
	}))
	defer srv.Close()
	c := testConfig(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
	c.Prometheus = srv.URL + "/prom"
	_, err := Build(context.Background(), newAPI(t, srv.URL+"/prom"), c)
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "Prometheus is unreachable at "+srv.URL+"/prom: stopped after 10 redirects") {
		t.Errorf("%v; want unreachable at %s/prom", err, srv.URL)
	}
}

// TestMissingWhereTheServerCannotSay: a server that answers no instant
// query leaves the missing spans at step boundaries, and the report says
// so.
func TestMissingWhereTheServerCannotSay(t *testing.T) {
	t.Parallel()
	end := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	f := &fakeProm{maxPoints: 100, gap: [2]time.Time{end.Add(-14 * time.Hour), end.Add(-12 * time.Hour)}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/query" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"status":"error","errorType":"bad_data","error":"no instant queries here"}`)
			return
		}
		f.ServeHTTP(w, r)
	}))
	defer srv.Close()
	r, err := Build(context.Background(), newAPI(t, srv.URL), testConfig(end))
	if err != nil {
		t.Fatal(err)
	}
	want := []Missing{{Source: "gpuxray", Instance: "node-b", Start: end.Add(-14 * time.Hour), End: end.Add(-12 * time.Hour)}}
	if !reflect.DeepEqual(r.Missing, want) {
		t.Errorf("missing %+v, want %+v", r.Missing, want)
	}
	if w := "1 of the 1 spans without data is given to the 1h step: Prometheus did not say when their data stopped and began (bad_data: no instant queries here)"; !slices.Contains(r.WarningsBySection.Data, w) {
		t.Errorf("warnings %q, want %q", r.WarningsBySection.Data, w)
	}
}

// cancellingAPI answers a query_range with n series and cancels the
// report's context as it does: a signal that arrives while a large answer
// is decoded.
type cancellingAPI struct {
	n      int
	cancel context.CancelFunc
}

func (a cancellingAPI) QueryRange(_ context.Context, _ string, r v1.Range, _ ...v1.Option) (model.Value, v1.Warnings, v1.Infos, error) {
	m := make(model.Matrix, a.n)
	for i := range m {
		m[i] = &model.SampleStream{Metric: model.Metric{"instance": model.LabelValue(fmt.Sprintf("n%d", i))},
			Values: []model.SamplePair{{Timestamp: model.TimeFromUnixNano(r.End.UnixNano()), Value: 1}}}
	}
	a.cancel()
	return m, nil, nil, nil
}

func (a cancellingAPI) Query(context.Context, string, time.Time, ...v1.Option) (model.Value, v1.Warnings, v1.Infos, error) {
	return model.Matrix{}, nil, nil, nil
}

// TestSignalDuringAnswer: a signal that arrives while an answer of many
// series is read ends the query there, not after the answer is folded and
// sorted (a minute for 200,000 series).
func TestSignalDuringAnswer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := testConfig(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
	if r, err := Build(ctx, cancellingAPI{n: 10000, cancel: cancel}, c); !errors.Is(err, context.Canceled) {
		t.Errorf("a report (%v) and %v, want context.Canceled", r != nil, err)
	}
}
