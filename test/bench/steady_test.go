//go:build e2e

package bench

import (
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/exporter"

	"github.com/gpuxray/gpuxray/collector/sim"
	"github.com/gpuxray/gpuxray/test/bench/scenario"
	"github.com/gpuxray/gpuxray/test/bench/simnode"
)

// TestSteadyStateMemory runs the node-110 scenario (8 GPUs, 110 allocations
// at every moment, pods of 3 to 10 minutes coming and going on six
// time-sliced GPUs) through the whole stack, scraped through the agent's
// handler every 30 s (polled every 10 s: the race detector is slow), and checks
// that the heap after a GC and the series count stay level once churn and
// retention (10 m) are in their steady state: no cache, map or slice of the
// engine, the readers or the exporter may grow with the pods that pass.
func TestSteadyStateMemory(t *testing.T) {
	sc, err := sim.ParseScenario(scenario.Node110(), "node-110.yaml")
	if err != nil {
		t.Fatal(err)
	}
	n := simnode.New(t, sc, nil)
	// Scraped as Prometheus scrapes the agent: its handler, OpenMetrics,
	// gzip, so that the text path's caches are the ones that must not grow.
	handler := exporter.NewHandler(n.Registry, "/metrics", func() bool { return true }, zap.NewNop(), exporter.DefaultMaxRequests)
	const poll, scrape = 10 * time.Second, 30 * time.Second
	var series int
	measure := func(until time.Duration) (int, uint64) {
		for next := n.Clock.Now().Sub(sc.Start) + scrape; next <= until; next += scrape {
			n.Run(poll, next)
			req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
			req.Header.Set("Accept", "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5")
			req.Header.Set("Accept-Encoding", "gzip")
			rec := httptest.NewRecorder()
			handler.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK || rec.Header().Get("Content-Encoding") != "gzip" ||
				!strings.HasPrefix(rec.Header().Get("Content-Type"), "application/openmetrics-text") {
				t.Fatalf("scrape: %d, %v", rec.Code, rec.Header())
			}
			zr, err := gzip.NewReader(rec.Body)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(zr)
			if err != nil {
				t.Fatal(err)
			}
			series = 0
			for _, line := range strings.Split(string(body), "\n") {
				if line != "" && !strings.HasPrefix(line, "#") {
					series++
				}
			}
		}
		// Twice: the first GC moves sync.Pool contents (gzip writers of
		// about 1 MiB) to the pools' victim caches, the second frees them.
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return series, ms.HeapAlloc
	}
	// 20 minutes: every pod of the start has been replaced at least once
	// and the first ended ones have left retention.
	s0, h0 := measure(20 * time.Minute)
	var hs []float64
	for _, at := range []time.Duration{30 * time.Minute, 40 * time.Minute, 50 * time.Minute} {
		s, h := measure(at)
		hs = append(hs, float64(h)/(1<<20))
		// Pods come and go at random moments, so series vary a little with
		// how many ended ones are in retention.
		if d := float64(s-s0) / float64(s0); d > 0.05 || d < -0.05 {
			t.Errorf("series at %s: %d, at 20m %d", at, s, s0)
		}
		if float64(h) > 1.1*float64(h0)+512<<10 {
			t.Errorf("heap after GC at %s: %.2f MiB, at 20m %.2f MiB", at, float64(h)/(1<<20), float64(h0)/(1<<20))
		}
	}
	t.Logf("node-110 steady state: %d series at 20m, %d at 50m; heap after GC %.2f MiB at 20m, then %.2f MiB",
		s0, series, float64(h0)/(1<<20), hs)
}
