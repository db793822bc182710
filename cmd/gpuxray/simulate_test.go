package main

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/agent"
	"github.com/gpuxray/gpuxray/collector/kubelet"
	"github.com/gpuxray/gpuxray/collector/nvml"
	"github.com/gpuxray/gpuxray/collector/sim"
	"github.com/gpuxray/gpuxray/exporter"
)

// liveAgent is the simulated agent of `agent --simulate`, put together as
// runAgent does, on an injected wall clock and polled by hand.
type liveAgent struct {
	sim    *simulation
	engine *agent.Engine
	reg    *prometheus.Registry
}

func startLiveAgent(t *testing.T, sc *sim.Scenario, wall sim.Clock, cfg agent.Config) *liveAgent {
	t.Helper()
	s, err := startLive(sc, wall)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.stop)
	reader := nvml.New(s.nvml(), nvml.DefaultConfig(), zap.NewNop(), s.clock)
	if err := reader.Init(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reader.Shutdown)
	kubeCfg := kubelet.DefaultConfig()
	kubeCfg.Socket, kubeCfg.Clock = s.socket, s.clock
	kube, err := kubelet.New(kubeCfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kube.Close() })
	engine, err := agent.New(cfg, reader, kube, s.clock, zap.NewNop(), s.engineOptions(zap.NewNop())...)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(exporter.NewCollector(engine, nil))
	return &liveAgent{sim: s, engine: engine, reg: reg}
}

// byLabel sums the samples of metric by the value of label.
func (a *liveAgent) byLabel(t *testing.T, metric, label string) map[string]float64 {
	t.Helper()
	mfs, err := a.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != metric {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[labelOf(m.GetLabel(), label)] += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return out
}

func labelOf(labels []*dto.LabelPair, name string) string {
	for _, l := range labels {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// thursdayPeak is a wall-clock time inside the default peak schedule
// (Mon-Fri 09:00-18:00 UTC): Thursday 3 December 2026, 09:13 UTC. The demo's
// own start, Tuesday 08:00, is outside it.
var thursdayPeak = time.Date(2026, 12, 3, 9, 13, 0, 0, time.UTC)

// TestLiveWindowsFollowTheWallClock: the live simulation counts each second
// in the window of the wall clock's time, the time Prometheus stamps its
// scrapes with, not in that of the scenario's start. The wall clock is
// injected (a Thursday at 09:13 UTC), so nothing depends on the real time of
// day. Under a schedule that covers it, every second the demo agent observes
// in its first minute is peak; under one that covers the demo's own start
// (Tuesday 08:00) but not the wall clock's now, none is.
func TestLiveWindowsFollowTheWallClock(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		schedule string
		window   string // where the minute's seconds must all be
	}{
		{agent.DefaultPeakSchedule, "peak"},
		{"Tue 07:00-12:00", "offpeak"},
	} {
		t.Run(tt.schedule, func(t *testing.T) {
			t.Parallel()
			cfg := agent.DefaultConfig()
			windows, err := agent.ParseSchedule(tt.schedule, time.UTC)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Windows = windows
			wall := sim.NewVirtualClock(thursdayPeak)
			a := startLiveAgent(t, sim.Demo(), wall, cfg)
			before := a.byLabel(t, "gpuxray_device_observed_seconds_total", "window")
			const live = time.Minute
			for range int(live / cfg.PollInterval) {
				wall.Advance(cfg.PollInterval)
				a.engine.Poll(context.Background())
			}
			after := a.byLabel(t, "gpuxray_device_observed_seconds_total", "window")
			gpus := float64(sim.Demo().GPUs)
			other := map[string]string{"peak": "offpeak", "offpeak": "peak"}[tt.window]
			// The first poll of the minute takes the driver's ring as its
			// baseline, so the minute is counted from its first second on.
			if got, want := after[tt.window]-before[tt.window], gpus*(live-cfg.PollInterval).Seconds(); math.Abs(got-want) > gpus {
				t.Errorf("%s GPU-seconds observed in the minute from %s = %.1f, want %.0f ± %.0f", tt.window, thursdayPeak.Format("Mon 15:04"), got, want, gpus)
			}
			if got := after[other] - before[other]; got != 0 {
				t.Errorf("%s GPU-seconds observed in the minute from %s = %.1f, want 0", other, thursdayPeak.Format("Mon 15:04"), got)
			}
		})
	}
}
