package report

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
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
// (t-step, t], the series that have a value there.
type timedProm struct {
	answer func(expr string, t time.Time, step time.Duration) []point
}

func (f timedProm) ServeHTTP(w http.ResponseWriter, r *http.Request) {
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

func startTimed(t *testing.T, answer func(expr string, at time.Time, step time.Duration) []point) API {
	t.Helper()
	srv := httptest.NewServer(timedProm{answer: answer})
	t.Cleanup(srv.Close)
	return newAPI(t, srv.URL)
}
