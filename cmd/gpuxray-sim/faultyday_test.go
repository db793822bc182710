//go:build e2e

package main

import (
	"context"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/agent"
	"github.com/gpuxray/gpuxray/collector/nvml"
	"github.com/gpuxray/gpuxray/collector/sim"
	"github.com/gpuxray/gpuxray/internal/app"
)

// TestReplayFaultyDay replays 24 hours of a node with faults sprinkled
// through it (testdata/faults-24h.yaml) with the agent's default retention,
// scraping every 30 virtual minutes. Every allocation's last scraped counts
// equal the ground truth within 1%; no device loses a second (observed plus
// gap is the day); series of ended allocations go after the retention; and
// the goroutines are no more in the last hour than in the second, and gone
// once the replay returns. It does not run in parallel, so that the
// goroutines counted are its own.
func TestReplayFaultyDay(t *testing.T) {
	skipLongUnderRace(t)
	if testing.Short() {
		t.Skip("replays a simulated day")
	}
	sc, err := sim.LoadScenario("testdata/faults-24h.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := agent.DefaultConfig()
	cfg.PollInterval = 5 * time.Second
	before := runtime.NumGoroutine()
	last := series{} // every series at its last scrape
	var final series
	goroutines := map[time.Duration]int{}
	maxAllocSeries := 0
	scrape := func(ts time.Time, g, _ prometheus.Gatherer) error {
		s := gatherSeries(t, g)
		for k, v := range s {
			last[k] = v
		}
		final = s
		goroutines[ts.Sub(sc.Start)] = runtime.NumGoroutine()
		n := 0
		for k := range s {
			if strings.HasPrefix(k, "gpuxray_allocated_seconds_total{") {
				n++
			}
		}
		maxAllocSeries = max(maxAllocSeries, n)
		return nil
	}
	if _, err := replay(context.Background(), sc, app.ReplayConfig{Engine: cfg, NVML: nvml.DefaultConfig(), DRA: app.DefaultDRA(), Logger: zap.NewNop()}, 30*time.Minute, scrape); err != nil {
		t.Fatal(err)
	}

	node, err := sim.NewNode(sc, sim.NewVirtualClock(sc.Start))
	if err != nil {
		t.Fatal(err)
	}
	for _, row := range sc.Truth(cfg.IdleThreshold) {
		uuid := "uuid=" + node.DeviceID(row.Device)
		for _, c := range []struct {
			metric string
			want   float64
		}{
			{"gpuxray_allocated_seconds_total", row.AllocatedSeconds},
			{"gpuxray_allocated_idle_seconds_total", row.IdleSeconds},
			{"gpuxray_allocated_active_seconds_total", row.ActiveSeconds},
		} {
			got, ok := last.sum(c.metric, "pod="+row.Pod, uuid)
			if !ok {
				t.Errorf("%s{pod=%q} never scraped", c.metric, row.Pod)
				continue
			}
			if tol := 0.01 * max(c.want, row.AllocatedSeconds/100); math.Abs(got-c.want) > tol {
				t.Errorf("%s{pod=%q,device=%s} = %.1f, want %.1f ± 1%%", c.metric, row.Pod, row.Device, got, c.want)
			}
		}
	}
	for gpu := range sc.GPUs {
		g := "uuid=" + node.DeviceUUID(gpu)
		observed, _ := final.sum("gpuxray_device_observed_seconds_total", g)
		gap, _ := final.sum("gpuxray_device_sample_gap_seconds_total", g)
		if day := sc.Duration.Seconds(); math.Abs(observed+gap-day) > 0.001*day {
			t.Errorf("gpu %d: observed %.1f + gap %.1f = %.1f, want the day's %.0f", gpu, observed, gap, observed+gap, day)
		}
		allocated, _ := final.sum("gpuxray_allocated_seconds_total", g)
		if allocated > observed {
			t.Errorf("gpu %d: allocated %.1f exceeds observed %.1f", gpu, allocated, observed)
		}
	}
	// Only job-3 ends within the retention of the end (with it).
	if n, _ := final.sum("gpuxray_allocation_info"); n != 0 {
		t.Errorf("%g allocations live at the end, want none", n)
	}
	for k := range final {
		if strings.HasPrefix(k, "gpuxray_allocated_seconds_total{") && !strings.Contains(k, "pod=job-3") {
			t.Errorf("series of an allocation that ended more than the retention ago: %s", k)
		}
	}
	if maxAllocSeries > 2*4 { // at most 4 allocations (train ×2, notebook, a job) × 2 windows
		t.Errorf("up to %d allocated_seconds series at once, want at most 8", maxAllocSeries)
	}
	// A scrape can catch a goroutine in passing (a gRPC reconnection, an
	// NVML call's watchdog), so compare the fewest seen in the second hour
	// with the fewest in the last: a leak raises the floor.
	floor := func(from, to time.Duration) int {
		m := math.MaxInt
		for at, n := range goroutines {
			if at >= from && at <= to {
				m = min(m, n)
			}
		}
		return m
	}
	early, late := floor(time.Hour, 2*time.Hour), floor(sc.Duration-time.Hour, sc.Duration)
	if late > early {
		t.Errorf("at least %d goroutines in the last hour, %d in the second: a leak", late, early)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines after the replay, %d before", n, before)
	}
	t.Logf("goroutines: %d before, at least %d in the second hour, %d in the last, %d at the end", before, early, late, goroutines[sc.Duration])
}
