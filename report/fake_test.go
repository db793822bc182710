package report

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
)

// point is one value of one series at one evaluation time.
type point struct {
	labels map[string]string
	v      float64
}

// timedProm answers query_range as Prometheus does: answer gives, for an
// expression (its range windows spelled [S]) evaluated at t over the step
// (t-step, t], the series that have a value there. It answers the raw
// samples of its nodes' agents (the report's range-vector queries for the
// ends of missing data) as /api/v1/query does.
type timedProm struct {
	answer func(expr string, t time.Time, step time.Duration) []point
	nodes  []node
}

// rawSelector is the report's query for an agent's raw samples in a window.
var rawSelector = regexp.MustCompile(`^gpuxray_device_observed_seconds_total\{instance="([^"]*)"\}\[([0-9a-z]+)\]$`)

// rawAnswer writes, as /api/v1/query answers a range-vector selector, the
// samples each node's agent was scraped at in (at-window, at].
func rawAnswer(w http.ResponseWriter, r *http.Request, nodes []node) {
	m := rawSelector.FindStringSubmatch(r.Form.Get("query"))
	ts, err := strconv.ParseFloat(r.Form.Get("time"), 64)
	if m == nil || err != nil {
		http.Error(w, `{"status":"error","errorType":"bad_data","error":"unexpected query"}`, http.StatusBadRequest)
		return
	}
	window, err := model.ParseDuration(m[2])
	if err != nil {
		http.Error(w, `{"status":"error","errorType":"bad_data","error":"bad window"}`, http.StatusBadRequest)
		return
	}
	at := time.Unix(0, int64(ts*1e9)).UTC()
	type series struct {
		Metric map[string]string `json:"metric"`
		Values [][2]any          `json:"values"`
	}
	out := []series{}
	for _, n := range nodes {
		if n.instance != m[1] {
			continue
		}
		s := series{Metric: map[string]string{"__name__": "gpuxray_device_observed_seconds_total", "instance": n.instance}}
		for _, t := range n.scrapeTimes() {
			if t.After(at.Add(-time.Duration(window))) && !t.After(at) {
				s.Values = append(s.Values, [2]any{float64(t.UnixMilli()) / 1000, "1"})
			}
		}
		if len(s.Values) > 0 {
			out = append(out, s)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": map[string]any{"resultType": "matrix", "result": out}})
}

func (f timedProm) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err == nil && r.URL.Path == "/api/v1/query" {
		rawAnswer(w, r, f.nodes)
		return
	}
	if err := r.ParseForm(); err != nil || r.URL.Path != "/api/v1/query_range" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	num := func(k string) float64 { v, _ := strconv.ParseFloat(r.Form.Get(k), 64); return v }
	start, end, stepS := num("start"), num("end"), num("step")
	step := time.Duration(stepS * float64(time.Second))
	q := r.Form.Get("query")
	// The report substitutes its window for [S]: put it back, so answers
	// match the constants whatever the step.
	expr := strings.ReplaceAll(q, "["+model.Duration(step).String()+"]", "[S]")
	type series struct {
		Metric map[string]string `json:"metric"`
		Values [][2]any          `json:"values"`
	}
	by := map[string]*series{}
	for t := start; t <= end; t += stepS {
		at := time.Unix(0, int64(t*1e9)).UTC()
		for _, p := range f.answer(expr, at, step) {
			k := fmt.Sprint(p.labels)
			s := by[k]
			if s == nil {
				s = &series{Metric: p.labels}
				by[k] = s
			}
			s.Values = append(s.Values, [2]any{t, strconv.FormatFloat(p.v, 'f', -1, 64)})
		}
	}
	keys := make([]string, 0, len(by))
	for k := range by {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := []*series{}
	for _, k := range keys {
		out = append(out, by[k])
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": map[string]any{"resultType": "matrix", "result": out}})
}

// node is a fake node of gpus GPUs whose agent is scraped every interval
// while its data lasts, (from, to]: every GPU observed, allocated of them
// busy at util, idle the rest of the allocated ones, the others unallocated.
type node struct {
	instance        string
	gpus, allocated int
	util            float64
	from, to        time.Time
	interval        time.Duration
	// peak says whether a time is in the agents' peak window.
	peak func(time.Time) bool
}

// scrapeTimes are the times its agent was scraped: every interval after
// from, to to (what qNodes counts).
func (n node) scrapeTimes() []time.Time {
	var out []time.Time
	for t := n.from.Add(n.interval); !t.After(n.to); t = t.Add(n.interval) {
		out = append(out, t)
	}
	return out
}

// overlap is how much of the step ending at t the node's data covers.
func (n node) overlap(t time.Time, step time.Duration) time.Duration {
	lo, hi := t.Add(-step), t
	if n.from.After(lo) {
		lo = n.from
	}
	if n.to.Before(hi) {
		hi = n.to
	}
	return max(0, hi.Sub(lo))
}

// answer is the node's answer to the report's queries; pending, when set,
// is kube-state-metrics' pending GPUs at t.
func (n node) answer(expr string, t time.Time, step time.Duration, pending func(time.Time) (float64, bool)) []point {
	o := n.overlap(t, step).Seconds()
	win := "offpeak"
	if n.peak != nil && n.peak(t.Add(-step/2)) {
		win = "peak"
	}
	w := func(v float64) []point {
		if o <= 0 {
			return nil
		}
		return []point{{labels: map[string]string{"window": win}, v: v}}
	}
	g, a := float64(n.gpus), float64(n.allocated)
	switch expr {
	case qNodes:
		if o <= 0 {
			return nil
		}
		// Scrapes at from + k·interval: how many fall in the step.
		scrapes := func(at time.Time) int64 { return int64(max(0, at.Sub(n.from)) / n.interval) }
		hi := t
		if n.to.Before(hi) {
			hi = n.to
		}
		return []point{{labels: map[string]string{"instance": n.instance}, v: float64(scrapes(hi) - scrapes(t.Add(-step)))}}
	case qCovered:
		if o <= 0 {
			return nil
		}
		return []point{{labels: map[string]string{}, v: o}}
	case qObserved:
		return w(g * o)
	case qAllocated:
		return w(a * o)
	case qActive:
		return w(a * n.util * o)
	case qIdle:
		if n.util > 0 {
			return w(0)
		}
		return w(a * o)
	case qUnallocated:
		return w((g - a) * o)
	case qUnallocatedActive:
		return w(0)
	case qPending, qKSM:
		if pending == nil {
			return nil
		}
		if v, ok := pending(t); ok {
			if expr == qKSM {
				return []point{{labels: map[string]string{"instance": "ksm:8080"}, v: 1}}
			}
			return []point{{labels: map[string]string{}, v: v}}
		}
	}
	return nil
}

// startTimed serves answer, and the raw samples of nodes' agents.
func startTimed(t *testing.T, answer func(expr string, at time.Time, step time.Duration) []point, nodes ...node) API {
	t.Helper()
	srv := httptest.NewServer(timedProm{answer: answer, nodes: nodes})
	t.Cleanup(srv.Close)
	return newAPI(t, srv.URL)
}
