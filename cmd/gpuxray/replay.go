//go:build !nosim

package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/agent"
	"github.com/gpuxray/gpuxray/collector/kubelet"
	"github.com/gpuxray/gpuxray/collector/nvml"
	"github.com/gpuxray/gpuxray/collector/sim"
	"github.com/gpuxray/gpuxray/exporter"
)

// keepAll is replay's default retention: a replay reports every allocation
// of the scenario, however early it ended.
const keepAll = 100 * 365 * 24 * time.Hour

// replayPollTimeout is replay's default --poll.timeout. The replay's clock
// is virtual: a poll lasts as long as the host takes to run it, which on a
// busy machine can be seconds, and a poll that gave up on its reads would
// lose the samples the clock then moves past. The deadline is a guard.
const replayPollTimeout = time.Minute

// settleTimeout bounds replay's real-time waits for the simulation to
// catch up with a move of the virtual clock.
const settleTimeout = 10 * time.Second

func runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gpuxray replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := agent.DefaultConfig()
	cfg.Retention, cfg.PollTimeout = keepAll, replayPollTimeout
	engineFlags(fs, &cfg)
	nvmlCfg := nvml.DefaultConfig()
	readerFlags(fs, &nvmlCfg)
	var idCfg identityConfig
	identityFlags(fs, &idCfg)
	format := fs.String("format", "text", "output: text (the final metrics) or openmetrics (a scrape every --scrape.interval, with timestamps, for promtool tsdb create-blocks-from openmetrics)")
	scrapeEvery := fs.Duration("scrape.interval", 30*time.Second, "with --format openmetrics, the virtual time between two scrapes")
	logCfg := logConfig{}
	logFlags(fs, &logCfg)
	fs.Lookup("log.level").DefValue, logCfg.level = "warn", "warn"
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: gpuxray replay [flags] FILE\n\nReplays the scenario FILE on a virtual clock as fast as the CPU allows, through\nthe real NVML reader, kubelet client and engine, and prints the final metrics\nin the Prometheus text format, or with --format openmetrics every scrape of\nthe replay with its timestamp (labelled job=\"gpuxray\", instance=NODE as a\nscrape would be), with the scenario's cluster series at the same scrapes (the\nsimulated kube-state-metrics and Kueue that agent --simulate serves at\n/simulate/kube-state-metrics, labelled job=\"kube-state-metrics\"), ready for\npromtool tsdb create-blocks-from openmetrics.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	positional, err := parseFlags(fs, args, os.Getenv)
	if err != nil {
		return err
	}
	if len(positional) != 1 {
		return usagef("want exactly one scenario FILE, got %d arguments", len(positional))
	}
	switch {
	case *format != "text" && *format != "openmetrics":
		return usagef("--format %q is not one of text, openmetrics", *format)
	case *scrapeEvery < cfg.PollInterval:
		return usagef("--scrape.interval %s is shorter than --poll.interval %s", *scrapeEvery, cfg.PollInterval)
	}
	for _, v := range []interface{ Validate() error }{cfg, nvmlCfg} {
		if err := v.Validate(); err != nil {
			return usageError{err}
		}
	}
	if err := idCfg.parse(); err != nil {
		return err
	}
	logger, err := newLogger(logCfg, stderr)
	if err != nil {
		return err
	}
	sc, err := loadScenario(ctx, positional[0])
	if err != nil {
		return err
	}
	if *format == "openmetrics" {
		// The cluster's series as `agent --simulate` serves them at
		// /simulate/kube-state-metrics, scraped as kube-state-metrics.
		rec := newOMRecorder(map[string]string{"job": "gpuxray", "instance": sc.Node}, map[string]string{"job": "kube-state-metrics", "instance": "kube-state-metrics"})
		if _, err := replay(ctx, sc, cfg, nvmlCfg, &idCfg, logger, *scrapeEvery, rec.scrape); err != nil {
			return err
		}
		_, err = rec.WriteTo(stdout)
		return err
	}
	out, err := replay(ctx, sc, cfg, nvmlCfg, &idCfg, logger, 0, nil)
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
func replay(ctx context.Context, sc *sim.Scenario, cfg agent.Config, nvmlCfg nvml.Config, id *identityConfig, zl *zap.Logger,
	scrapeEvery time.Duration, scrape func(t time.Time, agent, cluster prometheus.Gatherer) error) ([]byte, error) {
	clock := sim.NewVirtualClock(sc.Start)
	s, err := startSimulation(sc, clock)
	if err != nil {
		return nil, err
	}
	defer s.stop()
	s.node.SetIdentity(id.simIdentity())

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
	allocs, draOpts, err := s.allocations(draCtx, kube, defaultDRAConfig(), zl, func(f func() error) {
		draRuns.Go(func() { _ = f() })
	})
	if err != nil {
		return nil, err
	}
	engine, err := agent.New(cfg, reader, allocs, clock, zl.Named("engine"), append(s.engineOptions(zl), draOpts...)...)
	if err != nil {
		return nil, usageError{err}
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(exporter.NewCollector(engine, nil, exporter.WithExtraLabels(id.labelNames()...)), exporter.NewPriorityClassCollector(s.node))
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
