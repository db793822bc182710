package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"k8s.io/client-go/rest"

	"github.com/gpuxray/gpuxray/agent"
	"github.com/gpuxray/gpuxray/collector/dra"
	"github.com/gpuxray/gpuxray/collector/kubelet"
	"github.com/gpuxray/gpuxray/collector/node"
	"github.com/gpuxray/gpuxray/collector/proc"
	"github.com/gpuxray/gpuxray/collector/sim"
	"github.com/gpuxray/gpuxray/internal/app"
)

// simulation is a simulated node: its NVML and a kubelet serving its pods
// over the real pod-resources gRPC API on a unix socket, so the real readers
// run against it.
type simulation struct {
	node    *sim.Node
	kubelet *sim.KubeletServer
	socket  string
	dir     string
	// clock is the simulation's time, which the readers and the engine
	// share with it.
	clock sim.Clock
	// leadIn is clock in a live simulation whose scenario has a lead_in.
	leadIn *sim.LeadInClock
	// api serves the node's ResourceSlices when the scenario allocates
	// through DRA, and draSrc is the real DRA source reading them.
	api    *sim.APIServer
	draSrc *dra.Source
	// apiWasDown is set while replay plays an apiserver_down fault.
	apiWasDown bool
	// faults plays the scenario's kubelet faults on the real clock in
	// `agent --simulate` (the simulated driver plays its NVML faults by
	// itself); nil when the scenario has none, and in replay.
	faults *sim.FaultPlayer
}

// Simulate loads the scenario at c.Path (the embedded demo when empty)
// and starts it as `agent --simulate` plays it, with the agent's identity
// configuration, and returns the sources the agent then reads. It returns
// nil and no error when ctx ended the load.
func (simulator) Simulate(ctx context.Context, c app.SimulateConfig, logger *zap.Logger) (*app.Sources, error) {
	s, err := startSimulated(ctx, c, logger)
	if err != nil || s == nil {
		return nil, err
	}
	return s.sources(c, logger), nil
}

// startSimulated starts the scenario of c as `agent --simulate` plays it.
func startSimulated(ctx context.Context, c app.SimulateConfig, logger *zap.Logger) (*simulation, error) {
	sc, err := loadScenario(ctx, c.Path)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil // stopped before it started, as asked
		}
		return nil, err
	}
	s, err := startLive(sc, app.WallClock{})
	if err != nil {
		return nil, err
	}
	s.node.SetIdentity(simIdentity(c.Identity))
	if len(sc.Faults) > 0 {
		s.faults = sim.NewFaultPlayer(sc, s.kubelet, s.socket, 0)
	}
	if c.GivenSocket != "" {
		logger.Warn("--kubelet.pod-resources-socket is ignored with --simulate: the simulated kubelet serves its own socket",
			zap.String("ignored", c.GivenSocket))
	}
	logger.Info("simulated node", zap.String("node", sc.Node), zap.String("scenario", scenarioName(c.Path)),
		zap.Int("gpus", sc.GPUs), zap.Int("pods", len(sc.Pods)), zap.String("kubelet_socket", s.socket),
		zap.Time("start", sc.Start), zap.Duration("lead_in", sc.LeadIn), zap.String("kube_state_metrics_path", kubeStatePath))
	return s, nil
}

// sources are the simulated node as the agent reads it: its NVML, clock
// and kubelet socket, its pods, DRA objects and labels, its cluster series
// and inference engines served beside the agent's, its lead-in and its
// kubelet faults played on the real clock.
func (s *simulation) sources(c app.SimulateConfig, logger *zap.Logger) *app.Sources {
	return &app.Sources{
		NVML:          s.nvml(),
		Clock:         s.clock,
		KubeletSocket: s.socket,
		NodeLabels:    s.nodeLabels(),
		Allocations: func(ctx context.Context, kube *kubelet.Client, run func(func() error)) (app.Allocations, error) {
			allocs, opts, err := s.allocations(ctx, kube, c.DRA, logger, run)
			if err != nil {
				return app.Allocations{}, err
			}
			return app.Allocations{Source: allocs, Options: append(s.engineOptions(logger), opts...), Classes: s.node}, nil
		},
		Handler: func(h http.Handler, metricsPath string) (http.Handler, error) {
			h, err := s.withKubeState(h, metricsPath)
			if err != nil {
				return nil, err
			}
			return s.withEngines(h, metricsPath)
		},
		Play: func(ctx context.Context, engine *agent.Engine, run func(func() error)) {
			s.playLiveLeadIn(ctx, engine, c.PollInterval, logger)
			if s.faults != nil {
				run(func() error { return s.playFaults(ctx, c.PollInterval/2, logger) })
			}
		},
		Stop: s.stop,
	}
}

func simIdentity(id app.Identity) sim.Identity {
	return sim.Identity{ModelKeys: id.ModelKeys, ExtraLabels: id.ExtraLabels}
}

func scenarioName(path string) string {
	if path == "" {
		return "embedded demo"
	}
	return path
}

// playLiveLeadIn plays the scenario's lead_in, if it has one, and logs how
// long it took.
func (s *simulation) playLiveLeadIn(ctx context.Context, engine *agent.Engine, every time.Duration, logger *zap.Logger) {
	if s.leadIn == nil {
		return
	}
	began := time.Now()
	s.playLeadIn(ctx, engine, every)
	logger.Info("played the scenario's lead-in", zap.Duration("lead_in", s.node.Scenario().LeadIn), zap.Duration("took", time.Since(began)))
}

// maxScenarioBytes bounds the scenario file: the largest real one (test/bench's
// node-110, 110 pods churning over a day) is 283 KiB, and /dev/zero or a
// runaway generator must not grow the process until the kernel kills it.
const maxScenarioBytes = 16 << 20

// kubeStatePath is where `agent --simulate` serves the kube-state-metrics
// series of its scenario's pods (sim.Node.KubeState), on the agent's own
// listener. The agent without --simulate never serves it.
const kubeStatePath = "/simulate/kube-state-metrics"

// kubeStateMaxRequests is how many scrapes of kubeStatePath are served at
// once.
const kubeStateMaxRequests = 4

// loadScenario reads FILE, or returns the embedded demo when path is empty.
// A bad file is a usage error naming the path as given, the line and field.
// The read and the parse end when ctx is done: a FIFO nobody writes to
// would block the one, 16 MiB of YAML keep the other busy for seconds,
// with the signals that end the process already caught. (A parse left
// behind ends on its own: its input is bounded.)
func loadScenario(ctx context.Context, path string) (*sim.Scenario, error) {
	if path == "" {
		return sim.Demo(), nil
	}
	data, err := readScenario(ctx, path)
	if err != nil {
		return nil, err
	}
	type parsed struct {
		sc  *sim.Scenario
		err error
	}
	done := make(chan parsed, 1)
	go func() {
		sc, err := sim.ParseScenario(data, path)
		done <- parsed{sc, err}
	}()
	select {
	case p := <-done:
		if p.err != nil {
			return nil, app.UsageError{Err: p.err}
		}
		return p.sc, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// readScenario reads path, up to maxScenarioBytes, whatever kind of file
// it is (a pipe from <(...) is fine), until ctx is done.
func readScenario(ctx context.Context, path string) ([]byte, error) {
	return app.ReadFile(ctx, path, "scenario", maxScenarioBytes)
}

func startSimulation(sc *sim.Scenario, clock sim.Clock) (*simulation, error) {
	node, err := sim.NewNode(sc, clock)
	if err != nil {
		return nil, app.UsageError{Err: err}
	}
	// Unix socket paths are limited to 108 bytes: keep the directory short.
	dir, err := os.MkdirTemp("", "gpuxray-sim")
	if err != nil {
		return nil, fmt.Errorf("simulated kubelet: %w", err)
	}
	s := &simulation{node: node, dir: dir, socket: filepath.Join(dir, "kubelet.sock"), clock: clock}
	// The node's GPU processes get a /proc tree of their own, so the real
	// cgroup reader maps them to pods as on a node.
	if err := node.WriteProc(filepath.Join(dir, "proc")); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("simulated /proc: %w", err)
	}
	s.kubelet = sim.NewKubeletServer(node.ListResponse)
	if err := s.kubelet.Start(s.socket); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("simulated kubelet: %w", err)
	}
	if sc.UsesDRA() {
		s.api = sim.NewAPIServer(node)
		if err := s.api.Start(); err != nil {
			s.kubelet.Stop()
			os.RemoveAll(dir)
			return nil, fmt.Errorf("simulated API server: %w", err)
		}
	}
	return s, nil
}

// allocations is what the engine reads of the simulated node: the kubelet
// client's answers, and on a DRA node the same answers with DRA devices
// resolved by the real DRA source from the simulated API server's
// ResourceSlices, as on a node. The source runs in run until ctx is done.
func (s *simulation) allocations(ctx context.Context, kube dra.Lister, c dra.Config, logger *zap.Logger, run func(func() error)) (agent.AllocationSource, []agent.Option, error) {
	// Sharing schedulers' pods are read from the simulated node, as the
	// agent reads them from its pod source.
	kube = kubelet.NewSharing(kube, s.node, logger.Named("kubelet"))
	if s.api == nil {
		return kube, nil, nil
	}
	client, err := dra.NewClient(&rest.Config{Host: s.api.URL()})
	if err != nil {
		return nil, nil, err
	}
	c.NodeName = s.node.Scenario().Node
	src, err := dra.New(c, client, logger.Named("dra"))
	if err != nil {
		return nil, nil, app.UsageError{Err: err}
	}
	run(func() error { return src.Run(ctx) })
	claims, err := dra.NewClaims(c, client, logger.Named("dra"))
	if err != nil {
		return nil, nil, app.UsageError{Err: err}
	}
	run(func() error { return claims.Run(ctx) })
	s.draSrc = src
	// The node's pods stand in for the pod source; a replay waits for
	// each new claim's first list, so its output is the same every run.
	allocs, opts := app.DRAAllocations(kube, src, claims, s.node, func() bool { return !s.api.Down() }, c, logger)
	return allocs, opts, s.syncDRA(ctx)
}

// syncDRA waits until the DRA source has seen every change of the node's
// ResourceSlices up to the clock's now (a MIG device the driver made), so a
// replay's poll does not depend on how fast the real clock ran.
func (s *simulation) syncDRA(ctx context.Context) error {
	if s.draSrc == nil {
		return nil
	}
	if s.api.Down() {
		s.apiWasDown = true
		return nil
	}
	if s.apiWasDown {
		// Back from an apiserver_down fault: list now, not when the
		// reflector's backoff, which grew in real time while the replay
		// played the outage, next allows.
		s.apiWasDown = false
		s.draSrc.Relist()
	}
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	if err := s.draSrc.WaitForResourceVersion(ctx, s.api.ResourceVersion()); err != nil {
		return fmt.Errorf("the DRA source did not catch up with the simulated ResourceSlices: %w", err)
	}
	return nil
}

// startLive starts sc as `agent --simulate` plays it: on wall, the clock
// Prometheus stamps its scrapes with. The scenario's start is moved so that
// its lead_in ends at wall's now (with no lead_in, it starts now): its
// offsets play from there, and the driver's sample stamps, the kubelet's and
// the engine's clock, and so the peak windows of each second, all read wall
// time. The lead-in itself is played by playLeadIn, on a virtual clock that
// then follows wall. (Replay keeps the scenario's start: it writes its own
// timestamps.)
func startLive(sc *sim.Scenario, wall sim.Clock) (*simulation, error) {
	sc.Start = wall.Now().Add(-sc.LeadIn)
	if sc.LeadIn == 0 {
		return startSimulation(sc, wall)
	}
	clock := sim.NewLeadInClock(wall, sc.Start)
	s, err := startSimulation(sc, clock)
	if err != nil {
		return nil, err
	}
	s.leadIn = clock
	return s, nil
}

// playLeadIn plays the scenario's lead_in through engine: it polls it every
// poll interval of virtual time, as it would have polled in real time, and
// moves the clock on at once, until the clock has caught up with the wall
// clock, which it then follows. The engine's counts, idle streaks and
// allocations are then those of an agent that has run through the lead-in,
// each second counted in the window of its own (wall-clock) time. A poll
// slower than the poll interval could never catch up: after twice the
// lead-in's polls the clock follows the wall clock wherever it stands, and
// the rest, if longer than the driver's ring, is a gap.
func (s *simulation) playLeadIn(ctx context.Context, engine *agent.Engine, every time.Duration) {
	if s.leadIn == nil {
		return
	}
	maxPolls := 2*int(s.node.Scenario().LeadIn/every) + 2
	for i := 0; ctx.Err() == nil; i++ {
		engine.Poll(ctx)
		if i >= maxPolls {
			s.leadIn.GoLive()
		}
		if !s.leadIn.Step(every) {
			return
		}
	}
}

// withKubeState serves the scenario's kube-state-metrics series at
// kubeStatePath, in front of h: with them a Prometheus that loads gpuxray's
// rules sees the scenario's unscheduled pods as it would from
// kube-state-metrics (GPUPodsPendingWhileGPUsIdle).
func (s *simulation) withKubeState(h http.Handler, metricsPath string) (http.Handler, error) {
	if metricsPath == kubeStatePath {
		return nil, app.Usagef("--web.telemetry-path %s is where --simulate serves the simulated kube-state-metrics; choose another path", metricsPath)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(s.node.KubeState()); err != nil {
		return nil, fmt.Errorf("simulated kube-state-metrics: %w", err)
	}
	// As the agent's own endpoints: GET and HEAD only, and a few scrapes
	// at once (promhttp answers 503 beyond them), so that this demo
	// endpoint cannot starve the agent's /metrics.
	ksm := promhttp.HandlerFor(reg, promhttp.HandlerOpts{MaxRequestsInFlight: kubeStateMaxRequests})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == kubeStatePath {
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				w.Header().Set("Allow", "GET, HEAD")
				http.Error(w, fmt.Sprintf("Method %s is not allowed; use GET or HEAD.", r.Method), http.StatusMethodNotAllowed)
				return
			}
			ksm.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	}), nil
}

func (s *simulation) nvml() gonvml.Interface { return s.node.NVML() }

// nodeLabels are the simulated node's labels (the scenario's
// driver.node_labels), for the node watch.
func (s *simulation) nodeLabels() node.Source { return simLabels{s.node} }

type simLabels struct{ n *sim.Node }

func (l simLabels) Labels(context.Context) (map[string]string, error) { return l.n.NodeLabels(), nil }

// engineOptions attributes shared GPUs per process: the simulated node is
// the pod source, and the real /proc reader reads the node's /proc tree.
func (s *simulation) engineOptions(logger *zap.Logger) []agent.Option {
	procs := proc.New(proc.Config{Root: filepath.Join(s.dir, "proc")}, logger.Named("proc"))
	return []agent.Option{agent.WithPods(s.node), agent.WithProcesses(procs)}
}

func (s *simulation) stop() {
	if s.api != nil {
		s.api.Stop()
	}
	s.node.Close()
	s.kubelet.Stop()
	os.RemoveAll(s.dir)
}

// playFaults applies the scenario's kubelet faults every interval until ctx
// is done.
func (s *simulation) playFaults(ctx context.Context, every time.Duration, logger *zap.Logger) error {
	p, clock := s.faults, s.clock
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if _, err := p.Apply(clock.Now()); err != nil {
			logger.Warn("simulated kubelet fault could not be played", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
