package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/gpuxray/gpuxray/agent"
	"github.com/gpuxray/gpuxray/collector/dra"
	"github.com/gpuxray/gpuxray/collector/kubelet"
	"github.com/gpuxray/gpuxray/collector/node"
	"github.com/gpuxray/gpuxray/collector/nvml"
	"github.com/gpuxray/gpuxray/exporter"
)

func runAgent(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("gpuxray agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	engineCfg := agent.DefaultConfig()
	engineFlags(fs, &engineCfg)
	nvmlCfg := nvml.DefaultConfig()
	readerFlags(fs, &nvmlCfg)
	webCfg := exporter.DefaultConfig()
	fs.StringVar(&webCfg.ListenAddress, "web.listen-address", webCfg.ListenAddress, "address to serve metrics and health on")
	fs.StringVar(&webCfg.MetricsPath, "web.telemetry-path", webCfg.MetricsPath, "path of the metrics")
	fs.StringVar(&webCfg.ConfigFile, "web.config.file", "", "exporter-toolkit web configuration file: TLS, basic auth (see https://github.com/prometheus/exporter-toolkit/blob/master/docs/web-configuration.md)")
	fs.StringVar(&webCfg.HealthListenAddress, "web.health-listen-address", "", "if set, also serve /healthz and /readyz, and nothing else, there in plain HTTP without authentication (for kubelet probes)")
	fs.BoolVar(&webCfg.EnablePprof, "web.enable-pprof", false, "serve Go profiles under /debug/pprof/ on the listen address")
	fs.IntVar(&webCfg.MaxRequests, "web.max-requests", webCfg.MaxRequests, "most scrapes rendered at once; one beyond waits for a slot for half its scrape timeout (at most 5s), then gets a 503; 0 is no limit")
	kubeCfg := kubelet.DefaultConfig()
	fs.StringVar(&kubeCfg.Socket, "kubelet.pod-resources-socket", kubeCfg.Socket, "the kubelet's pod-resources socket")
	fs.DurationVar(&kubeCfg.Timeout, "kubelet.timeout", kubeCfg.Timeout, "deadline of one pod-resources call")
	var resourceNames string
	fs.StringVar(&resourceNames, "kubelet.resource-names", "", "comma-separated extra GPU resource names (nvidia.com/gpu, nvidia.com/gpu.shared and nvidia.com/mig-* are always read)")
	var idCfg identityConfig
	identityFlags(fs, &idCfg)
	var podCfg podSourceConfig
	podSourceFlags(fs, &podCfg)
	var draCfg draSourceConfig
	draSourceFlags(fs, &draCfg)
	nodeCfg := node.DefaultConfig("")
	nodeWatchFlags(fs, &nodeCfg)
	simulate := fs.Bool("simulate", false, "run on a simulated node: the scenario FILE given as argument, or the embedded demo")
	var logCfg logConfig
	logFlags(fs, &logCfg)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: gpuxray agent [flags] [--simulate [FILE]]\n\nFlags:\n")
		fs.PrintDefaults()
	}
	positional, err := parseFlags(fs, args, os.Getenv)
	if err != nil {
		return err
	}
	var scenarioPath string
	switch {
	case len(positional) > 0 && !*simulate:
		return usagef("unexpected argument %q: a scenario FILE needs --simulate", positional[0])
	case len(positional) > 1:
		return usagef("unexpected argument %q: --simulate takes one scenario FILE", positional[1])
	case len(positional) == 1:
		scenarioPath = positional[0]
	}
	if err := idCfg.parse(); err != nil {
		return err
	}
	if err := podCfg.validate(); err != nil {
		return err
	}
	if !*simulate && podCfg.nodeName != "" && (podCfg.enabled || draCfg.enabled) {
		if err := podCfg.loadAPI(ctx); err != nil {
			if ctx.Err() != nil {
				return nil // stopped while reading it, as while reading a scenario
			}
			return err
		}
	}
	if err := draCfg.validate(); err != nil {
		return err
	}
	if resourceNames != "" {
		for _, n := range strings.Split(resourceNames, ",") {
			if n = strings.TrimSpace(n); n == "" {
				return usagef("--kubelet.resource-names %q: an empty name (two commas, or one at an end)", resourceNames)
			}
			kubeCfg.ResourceNames = append(kubeCfg.ResourceNames, n)
		}
	}
	for _, v := range []interface{ Validate() error }{engineCfg, nvmlCfg, webCfg, kubeCfg, nodeCfg} {
		if err := v.Validate(); err != nil {
			return usageError{err}
		}
	}
	logger, err := newLogger(logCfg, stderr)
	if err != nil {
		return err
	}
	if ownsProcess(ctx) {
		routeKlog(logger)
	}
	defer logger.Sync() //nolint:errcheck // nothing to do if stderr is gone

	var (
		lib        gonvml.Interface
		clock      agent.Clock = wallClock{}
		engineOpts []agent.Option
		live       *simulation
	)
	if *simulate {
		givenSocket := ""
		if given(fs, "kubelet.pod-resources-socket") {
			givenSocket = kubeCfg.Socket
		}
		s, err := startSimulated(ctx, scenarioPath, &idCfg, givenSocket, logger)
		if err != nil || s == nil {
			return err // s is nil, with no error, when stopped before it started
		}
		defer s.stop()
		live = s
		lib, clock, kubeCfg.Socket = s.nvml(), s.agentClock(), s.socket
		engineOpts = s.engineOptions(logger)
	} else {
		lib = gonvml.New()
	}
	kubeCfg.Clock = clock

	reader := nvml.New(lib, nvmlCfg, logger.Named("nvml"), clock)
	_ = reader.Init() // a failure is logged and retried; the agent serves without GPUs meanwhile
	// NVML is shut down last, after every loop that reads it has ended.
	defer reader.Shutdown()

	kube, err := kubelet.New(kubeCfg, logger.Named("kubelet"))
	if err != nil {
		return usageError{err}
	}
	defer kube.Close()

	g, gctx := errgroup.WithContext(ctx)
	var allocs agent.AllocationSource = kube
	// classes are the cluster's PriorityClasses, exported beside the engine's series.
	var classes exporter.PriorityClassSource
	if live != nil {
		classes = live.priorityClasses()
	}
	if !*simulate {
		opts, pcs, podSrc, err := startPodSource(gctx, podCfg, &idCfg, logger, g.Go)
		if err != nil {
			return err
		}
		var lookup kubelet.PodLookup
		if podSrc != nil {
			lookup = podSrc
		}
		if pcs != nil {
			classes = pcs
		}
		src, claims, err := startDRASource(gctx, draCfg, podCfg, logger, g.Go)
		if err != nil {
			return err
		}
		var claimPods dra.ClaimPods
		if podSrc != nil {
			claimPods = podSrc
		}
		var draOpts []agent.Option
		allocs, draOpts = draAllocations(kubelet.NewSharing(kube, lookup, logger.Named("kubelet")), src, claims, claimPods, nil, draCfg, podCfg.nodeName, logger)
		engineOpts = append(opts, draOpts...)
	} else {
		var draOpts []agent.Option
		if allocs, draOpts, err = live.allocations(gctx, kube, draCfg, logger, g.Go); err != nil {
			return err
		}
		engineOpts = append(engineOpts, draOpts...)
	}
	engine, err := agent.New(engineCfg, reader, allocs, clock, logger.Named("engine"), engineOpts...)
	if err != nil {
		return usageError{err}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		exporter.NewCollector(engine, ptr(buildInfo()), exporter.WithExtraLabels(idCfg.labelNames()...)),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	if classes != nil {
		reg.MustRegister(exporter.NewPriorityClassCollector(classes))
	}
	handler := exporter.NewHandler(reg, webCfg.MetricsPath, engine.Ready, logger.Named("web"), webCfg.MaxRequests)
	if live != nil {
		if handler, err = live.withKubeState(handler, webCfg.MetricsPath); err != nil {
			return err
		}
		if handler, err = live.withEngines(handler, webCfg.MetricsPath); err != nil {
			return err
		}
	}
	srv, err := exporter.Listen(webCfg, handler, logger.Named("web"))
	if err != nil {
		return usageError{err} // a port in use is configuration, as a bad address is
	}
	logger.Info("gpuxray agent starting", zap.String("version", buildInfo().Version), zap.Stringer("engine", engine))

	if live != nil {
		// Before anything is served: the agent starts with the lead-in's state.
		live.playLiveLeadIn(gctx, engine, engineCfg.PollInterval, logger)
		if live.faults != nil {
			g.Go(func() error { return live.playFaults(gctx, engineCfg.PollInterval/2, logger) })
		}
	}
	// Started after every early return above, so that it never outlives
	// runAgent.
	startNodeWatch(gctx, nodeCfg, podCfg, live, reader, logger, g.Go)
	g.Go(func() error { return engine.Run(gctx) })
	g.Go(func() error { return srv.Serve(gctx) })
	err = g.Wait()
	logger.Info("gpuxray agent stopped")
	return err
}

// given reports whether the flag name was set, on the command line or by
// its environment variable (parseFlags sets those through fs.Set).
func given(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

func ptr[T any](v T) *T { return &v }
