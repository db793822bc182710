package bench

import (
	"runtime"
	"testing"
	"time"

	"github.com/gpuxray/gpuxray/collector/sim"
	"github.com/gpuxray/gpuxray/test/bench/scenario"
	"github.com/gpuxray/gpuxray/test/bench/simnode"
)

// TestSteadyStateMemory runs the node-110 scenario (8 GPUs, 110 allocations
// at every moment, pods of 3 to 10 minutes coming and going on six
// time-sliced GPUs) through the whole stack, scraped every 30 s (polled every 10 s: the race detector is slow), and checks
// that the heap after a GC and the series count stay level once churn and
// retention (10 m) are in their steady state: no cache, map or slice of the
// engine, the readers or the exporter may grow with the pods that pass.
func TestSteadyStateMemory(t *testing.T) {
	sc, err := sim.ParseScenario(scenario.Node110(), "node-110.yaml")
	if err != nil {
		t.Fatal(err)
	}
	n := simnode.New(t, sc, nil)
	const poll, scrape = 10 * time.Second, 30 * time.Second
	var series int
	measure := func(until time.Duration) (int, uint64) {
		for next := n.Clock.Now().Sub(sc.Start) + scrape; next <= until; next += scrape {
			n.Run(poll, next)
			mfs, err := n.Registry.Gather()
			if err != nil {
				t.Fatal(err)
			}
			series = 0
			for _, mf := range mfs {
				series += len(mf.GetMetric())
			}
		}
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
