package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/gpuxray/gpuxray/agent"
	"github.com/gpuxray/gpuxray/collector/kubelet"
	"github.com/gpuxray/gpuxray/collector/nvml"
	"github.com/gpuxray/gpuxray/collector/sim"
	"github.com/gpuxray/gpuxray/exporter"
	"github.com/gpuxray/gpuxray/internal/app"
)

// settleTimeout bounds replay's real-time waits for the simulation to
// catch up with a move of the virtual clock.
const settleTimeout = 10 * time.Second

// Replay plays c.Path on a virtual clock: the replay command.
func (simulator) Replay(ctx context.Context, c app.ReplayConfig, stdout io.Writer) error {
	sc, err := loadScenario(ctx, c.Path)
	if err != nil {
		return err
	}
	if c.OpenMetrics {
		// The cluster's series as `agent --simulate` serves them at
		// /simulate/kube-state-metrics, scraped as kube-state-metrics.
		rec := newOMRecorder(map[string]string{"job": "gpuxray", "instance": sc.Node}, map[string]string{"job": "kube-state-metrics", "instance": "kube-state-metrics"})
		if _, err := replay(ctx, sc, c, c.ScrapeInterval, rec.scrape); err != nil {
			return err
		}
		_, err = rec.WriteTo(stdout)
		return err
	}
	out, err := replay(ctx, sc, c, 0, nil)
	if err != nil {
		return err
	}
	_, err = stdout.Write(out)
	return err
}

// replay runs sc from start to end, polling every cfg.PollInterval of
// virtual time, and returns the final exposition in the text format. With a
// scrape func, it also scrapes the metrics at the start, every scrapeEvery
// of virtual time (at the first poll at or after each), and at the end.
func replay(ctx context.Context, sc *sim.Scenario, c app.ReplayConfig,
	scrapeEvery time.Duration, scrape func(t time.Time, agent, cluster prometheus.Gatherer) error) ([]byte, error) {
	cfg, nvmlCfg, zl := c.Engine, c.NVML, c.Logger
	clock := sim.NewVirtualClock(sc.Start)
	s, err := startSimulation(sc, clock)
	if err != nil {
		return nil, err
	}
	defer s.stop()
	s.node.SetIdentity(simIdentity(c.Identity))

	// On a virtual clock a call that a hang fault holds cannot return
	// before the clock moves: the reader gives up on it as soon as the
	// simulated driver holds it. Any other read, however slow the host,
	// is waited for (nvml.Config.HeldCalls).
	nvmlCfg.HeldCalls = s.node.BlockedCalls
	reader := nvml.New(s.nvml(), nvmlCfg, zl.Named("nvml"), clock)
	if err := reader.Init(); err != nil {
		return nil, err
	}
	defer reader.Shutdown()
	kubeCfg := kubelet.DefaultConfig()
	kubeCfg.Socket, kubeCfg.Clock = s.socket, clock
	kube, err := kubelet.New(kubeCfg, zl.Named("kubelet"))
	if err != nil {
		return nil, err
	}
	defer kube.Close()
	draCtx, stopDRA := context.WithCancel(ctx)
	var draRuns sync.WaitGroup
	defer func() { stopDRA(); draRuns.Wait() }()
	allocs, draOpts, err := s.allocations(draCtx, kube, c.DRA, zl, func(f func() error) {
		draRuns.Go(func() { _ = f() })
	})
	if err != nil {
		return nil, err
	}
	engine, err := agent.New(cfg, reader, allocs, clock, zl.Named("engine"), append(s.engineOptions(zl), draOpts...)...)
	if err != nil {
		return nil, app.UsageError{Err: err}
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(exporter.NewCollector(engine, nil, exporter.WithExtraLabels(c.Identity.LabelNames()...)), exporter.NewPriorityClassCollector(s.node))
	if scrape != nil {
		replayEngines(reg, s.node)
	}
	cluster := prometheus.NewPedanticRegistry()
	if err := cluster.Register(s.node.KubeState()); err != nil {
		return nil, fmt.Errorf("simulated kube-state-metrics: %w", err)
	}
	faults := sim.NewFaultPlayer(sc, s.kubelet, s.socket, kubeCfg.Timeout)
	end := sc.Start.Add(sc.Duration)
	nextScrape := sc.Start
	for t := sc.Start; !t.After(end); t = t.Add(cfg.PollInterval) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		clock.Set(t)
		if err := applyFaults(ctx, faults, t, kube, reader, s.node); err != nil {
			return nil, err
		}
		if err := s.syncDRA(ctx); err != nil {
			return nil, err
		}
		engine.Poll(ctx)
		last := t.Add(cfg.PollInterval).After(end)
		if last {
			// Periods of shared GPUs still waiting for their processes'
			// samples are credited now: the replay's output holds its
			// whole time.
			engine.Settle()
		}
		if scrape != nil && (!t.Before(nextScrape) || last) {
			if err := scrape(t, reg, cluster); err != nil {
				return nil, err
			}
			for !nextScrape.After(t) {
				nextScrape = nextScrape.Add(scrapeEvery)
			}
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		return nil, fmt.Errorf("gather: %w", err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return nil, fmt.Errorf("encode: %w", err)
		}
	}
	return buf.Bytes(), nil
}

// applyFaults brings the simulated node to the scenario's faults at virtual
// time t, then waits, in real time, until the real readers see that state
// exactly as a poll at t would on a node: a restarted kubelet is connected
// again, and every NVML call a hang fault released has returned. Without
// these waits the first poll after a fault would depend on how fast the
// real clock ran.
func applyFaults(ctx context.Context, p *sim.FaultPlayer, t time.Time, kube *kubelet.Client, reader *nvml.Reader, node *sim.Node) error {
	if len(node.Scenario().Faults) == 0 {
		return nil
	}
	started, err := p.Apply(t)
	if err != nil {
		return fmt.Errorf("simulated kubelet: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	if started {
		if err := kube.WaitReady(ctx); err != nil {
			return err
		}
	}
	tick := time.NewTicker(100 * time.Microsecond)
	defer tick.Stop()
	for reader.InFlight() != node.BlockedCalls() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("NVML calls released by a hang fault did not return: %w", ctx.Err())
		case <-tick.C:
		}
	}
	return nil
}
