package main

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
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
// day. The demo agent plays its 31-minute lead-in, which ends at the wall
// clock's now, then a minute live: under the default schedule the lead-in's
// seconds before 09:00 are off-peak and all the rest peak; under one that
// covers the demo's own start (Tuesday 08:00) but not the wall clock's
// Thursday, every second is off-peak.
func TestLiveWindowsFollowTheWallClock(t *testing.T) {
	t.Parallel()
	sc := sim.Demo()
	leadInStart := thursdayPeak.Add(-sc.LeadIn)
	nine := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	if sc.LeadIn == 0 || !leadInStart.Before(nine) {
		t.Fatalf("the demo's lead_in %s does not start before 09:00 when it ends at %s", sc.LeadIn, thursdayPeak.Format("15:04"))
	}
	const live = time.Minute
	for _, tt := range []struct {
		schedule      string
		peak, offpeak time.Duration // per GPU, from the lead-in's start
	}{
		{agent.DefaultPeakSchedule, thursdayPeak.Add(live).Sub(nine), nine.Sub(leadInStart)},
		{"Tue 07:00-12:00", 0, sc.LeadIn + live},
	} {
		t.Run(tt.schedule, func(t *testing.T) {
			t.Parallel()
			cfg := agent.DefaultConfig()
			// The lead-in is played at the poll interval: 10 s keeps it
			// quick under the race detector, within the driver's ring.
			cfg.PollInterval = 10 * time.Second
			windows, err := agent.ParseSchedule(tt.schedule, time.UTC)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Windows = windows
			wall := sim.NewVirtualClock(thursdayPeak)
			a := startLiveAgent(t, sim.Demo(), wall, cfg)
			a.sim.playLeadIn(context.Background(), a.engine, cfg.PollInterval)
			for range int(live / cfg.PollInterval) {
				wall.Advance(cfg.PollInterval)
				a.engine.Poll(context.Background())
			}
			got := a.byLabel(t, "gpuxray_device_observed_seconds_total", "window")
			gpus := float64(sc.GPUs)
			// The first poll with samples takes the driver's ring as its
			// baseline: the first poll interval is not counted; and the
			// time-sliced GPU's last seconds wait for its processes'
			// samples.
			tol := gpus*cfg.PollInterval.Seconds() + agent.MaxProcessWait.Seconds()
			for w, want := range map[string]float64{"peak": gpus * tt.peak.Seconds(), "offpeak": gpus * tt.offpeak.Seconds()} {
				if math.Abs(got[w]-want) > tol {
					t.Errorf("%s GPU-seconds observed from %s to %s = %.0f, want %.0f ± %.0f",
						w, leadInStart.Format("Mon 15:04"), thursdayPeak.Add(live).Format("15:04"), got[w], want, tol)
				}
			}
		})
	}
}

// TestLiveLeadIn: the live demo agent starts where its lead_in ends, with the
// state of an agent that has run through it: the notebook idle for the
// lead-in's 31 minutes (GPUAllocatedButIdle's 30 are behind it), gpu:7
// unallocated since the start, the clock on the wall clock's now and
// following it.
func TestLiveLeadIn(t *testing.T) {
	t.Parallel()
	cfg := agent.DefaultConfig()
	cfg.PollInterval = 10 * time.Second
	wall := sim.NewVirtualClock(thursdayPeak)
	sc := sim.Demo()
	a := startLiveAgent(t, sc, wall, cfg)
	if !a.sim.node.Scenario().Start.Equal(thursdayPeak.Add(-sc.LeadIn)) {
		t.Errorf("the live scenario starts at %s, want its lead_in (%s) before the wall clock's %s", a.sim.node.Scenario().Start, sc.LeadIn, thursdayPeak)
	}
	a.sim.playLeadIn(context.Background(), a.engine, cfg.PollInterval)
	if got := a.sim.clock.Now(); !got.Equal(thursdayPeak) {
		t.Fatalf("after the lead-in the clock reads %s, want the wall clock's %s", got, thursdayPeak)
	}
	wall.Advance(cfg.PollInterval)
	if got := a.sim.clock.Now(); !got.Equal(wall.Now()) {
		t.Fatalf("after the lead-in the clock reads %s, not the wall clock's %s", got, wall.Now())
	}
	a.engine.Poll(context.Background())
	streaks := a.byLabel(t, "gpuxray_allocation_idle_streak_seconds", "pod")
	since := (sc.LeadIn + cfg.PollInterval).Seconds() // the lead-in and one live poll
	for _, c := range []struct {
		pod        string
		gpus, want float64
		wait       time.Duration // a time-sliced pod's waits for its processes' samples
	}{
		{"notebook-0", 1, since, 0},                     // idle from the start
		{"dev-alice-0", 1, since, agent.MaxProcessWait}, // idle from the start
		{"llama-train-0", 4, since - 20*60, 0},          // stalled since 20m
	} {
		// The first poll with samples is the baseline: a poll interval less.
		tol := c.gpus * (cfg.PollInterval + c.wait).Seconds()
		if got, want := streaks[c.pod], c.gpus*c.want; math.Abs(got-want) > tol {
			t.Errorf("%s idle streak = %.0f GPU-seconds at the live start, want %.0f ± %.0f", c.pod, got, want, tol)
		}
	}
	if got := streaks["notebook-0"]; got < 1800 {
		t.Errorf("the notebook's idle streak is %.0f s at the live start; GPUAllocatedButIdle needs 1800", got)
	}
	unallocated := a.byLabel(t, "gpuxray_device_unallocated_seconds_total", "gpu")
	if got, want := unallocated["7"], since; math.Abs(got-want) > cfg.PollInterval.Seconds() {
		t.Errorf("gpu 7 unallocated for %.0f s at the live start, want %.0f", got, want)
	}
}

// TestSimulateKubeStatePathTaken: a telemetry path that is the simulated
// kube-state-metrics' own is refused at start-up, not shadowed.
func TestSimulateKubeStatePathTaken(t *testing.T) {
	t.Parallel()
	code, _, errs := runCmd(t, "agent", "--simulate", "--web.listen-address=127.0.0.1:0", "--web.telemetry-path="+kubeStatePath)
	if want := "gpuxray agent: --web.telemetry-path /simulate/kube-state-metrics is where --simulate serves the simulated kube-state-metrics; choose another path\n"; code != 2 || !strings.HasSuffix(errs, want) {
		t.Errorf("exit %d, stderr %q; want 2 and %q", code, errs, want)
	}
	// An inference engine's path too, refused by the command's Validate
	// before the scenario is read: the log has no "simulated node" line.
	code, _, errs = runCmd(t, "agent", "--simulate", "--web.listen-address=127.0.0.1:0", "--web.telemetry-path=/simulate/vllm")
	if want := "gpuxray agent: --web.telemetry-path /simulate/vllm is where --simulate serves the simulated vllm metrics; choose another path\n"; code != 2 || errs != want {
		t.Errorf("exit %d, stderr %q; want 2 and only %q", code, errs, want)
	}
	if got := len(simulator{}.Paths()); got != 1+len(sim.EngineKinds) {
		t.Errorf("the simulator names %d paths, want kube-state-metrics' and one per engine kind (%d)", got, 1+len(sim.EngineKinds))
	}
}

// TestSimulateKubeStateMethods: the simulated kube-state-metrics answers
// GET with the scenario's pods and refuses other methods, as the agent's
// own endpoints do; other paths go to the agent's handler.
func TestSimulateKubeStateMethods(t *testing.T) {
	t.Parallel()
	sc := sim.Demo()
	s, err := startSimulation(sc, sim.NewVirtualClock(sc.Start))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.stop)
	next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	h, err := s.withKubeState(next, "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		method, path string
		code         int
		body         string
	}{
		{http.MethodGet, kubeStatePath, http.StatusOK, "kube_pod_status_phase{"},
		{http.MethodPost, kubeStatePath, http.StatusMethodNotAllowed, "Method POST is not allowed; use GET or HEAD.\n"},
		{http.MethodDelete, kubeStatePath, http.StatusMethodNotAllowed, "Method DELETE is not allowed; use GET or HEAD.\n"},
		{http.MethodGet, "/metrics", http.StatusTeapot, ""},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, nil))
		if rec.Code != tt.code || !strings.Contains(rec.Body.String(), tt.body) {
			t.Errorf("%s %s: %d %q, want %d with %q", tt.method, tt.path, rec.Code, rec.Body.String(), tt.code, tt.body)
		}
		if tt.code == http.StatusMethodNotAllowed && rec.Header().Get("Allow") != "GET, HEAD" {
			t.Errorf("%s %s: Allow %q", tt.method, tt.path, rec.Header().Get("Allow"))
		}
	}
}

// TestSimulateEngines: the demo's vLLM pod serves its engine's series at
// /simulate/vllm, the other kinds' paths answer empty, and a telemetry path
// that is an engine's is refused at start-up.
func TestSimulateEngines(t *testing.T) {
	t.Parallel()
	sc := sim.Demo()
	s, err := startSimulation(sc, sim.NewVirtualClock(sc.Start.Add(time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.stop)
	next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	h, err := s.withEngines(next, "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		method, path string
		code         int
		body         string
	}{
		{http.MethodGet, "/simulate/vllm", http.StatusOK, `vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct",namespace="inference",pod="vllm-llama-7c9d8f6b5d-x2k8p"} 0.12`},
		{http.MethodGet, "/simulate/vllm", http.StatusOK, `vllm:generation_tokens_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct",namespace="inference",pod="vllm-llama-7c9d8f6b5d-x2k8p"} 540000`},
		{http.MethodGet, "/simulate/sglang", http.StatusOK, ""},
		{http.MethodPost, "/simulate/tgi", http.StatusMethodNotAllowed, "Method POST is not allowed; use GET or HEAD.\n"},
		{http.MethodGet, "/simulate/triton", http.StatusTeapot, ""},
		{http.MethodGet, "/metrics", http.StatusTeapot, ""},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, nil))
		if rec.Code != tt.code || !strings.Contains(rec.Body.String(), tt.body) {
			t.Errorf("%s %s: %d %q, want %d with %q", tt.method, tt.path, rec.Code, rec.Body.String(), tt.code, tt.body)
		}
	}
	if _, err := s.withEngines(next, "/simulate/sglang"); err == nil || !strings.Contains(err.Error(), "--web.telemetry-path /simulate/sglang is where --simulate serves the simulated sglang metrics") {
		t.Errorf("telemetry path /simulate/sglang: %v", err)
	}
}
