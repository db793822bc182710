package app

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
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

// agentConfig is the agent command's configuration as its flags give it:
// each package's Config, and the command line's own settings. Validate
// checks it and fills in what is derived from it.
type agentConfig struct {
	engine        agent.Config
	nvml          nvml.Config
	web           exporter.Config
	kubelet       kubelet.Config
	resourceNames string
	identityFlags identityConfig
	pods          podSourceConfig
	dra           draSourceConfig
	node          node.Config
	log           logConfig
	simulate      bool
	// simPaths are the paths --simulate serves (Simulator.Paths).
	simPaths map[string]string
	// args are the command's arguments: --simulate's scenario FILE.
	args []string
	// socketGiven is whether --kubelet.pod-resources-socket was set, which
	// a simulated node's own socket replaces.
	socketGiven bool

	// Derived by Validate.
	identity Identity
	scenario string
}

// parseAgent binds the agent's flags and parses args (and the flags'
// environment variables) into a configuration, not yet validated.
func parseAgent(args []string, stderr io.Writer) (*agentConfig, error) {
	c := &agentConfig{
		engine:  agent.DefaultConfig(),
		nvml:    nvml.DefaultConfig(),
		web:     exporter.DefaultConfig(),
		kubelet: kubelet.DefaultConfig(),
		node:    node.DefaultConfig(""),
	}
	fs := flag.NewFlagSet("gpuxray agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	engineFlags(fs, &c.engine)
	readerFlags(fs, &c.nvml)
	fs.StringVar(&c.web.ListenAddress, "web.listen-address", c.web.ListenAddress, "address to serve metrics and health on")
	fs.StringVar(&c.web.MetricsPath, "web.telemetry-path", c.web.MetricsPath, "path of the metrics")
	fs.StringVar(&c.web.ConfigFile, "web.config.file", "", "exporter-toolkit web configuration file: TLS, basic auth (see https://github.com/prometheus/exporter-toolkit/blob/master/docs/web-configuration.md)")
	fs.StringVar(&c.web.HealthListenAddress, "web.health-listen-address", "", "if set, also serve /healthz and /readyz, and nothing else, there in plain HTTP without authentication (for kubelet probes)")
	fs.BoolVar(&c.web.EnablePprof, "web.enable-pprof", false, "serve Go profiles under /debug/pprof/ on the listen address")
	fs.IntVar(&c.web.MaxRequests, "web.max-requests", c.web.MaxRequests, "most scrapes rendered at once; one beyond waits for a slot for half its scrape timeout (at most 5s), then gets a 503; 0 is no limit")
	fs.StringVar(&c.kubelet.Socket, "kubelet.pod-resources-socket", c.kubelet.Socket, "the kubelet's pod-resources socket")
	fs.DurationVar(&c.kubelet.Timeout, "kubelet.timeout", c.kubelet.Timeout, "deadline of one pod-resources call")
	fs.StringVar(&c.resourceNames, "kubelet.resource-names", "", "comma-separated extra GPU resource names (nvidia.com/gpu, nvidia.com/gpu.shared and nvidia.com/mig-* are always read)")
	identityFlags(fs, &c.identityFlags)
	podSourceFlags(fs, &c.pods)
	draSourceFlags(fs, &c.dra)
	nodeWatchFlags(fs, &c.node)
	fs.BoolVar(&c.simulate, "simulate", false, "run on a simulated node: the scenario FILE given as argument, or the embedded demo (gpuxray-sim only)")
	logFlags(fs, &c.log)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: gpuxray agent [flags] [--simulate [FILE]]\n\nFlags:\n")
		fs.PrintDefaults()
	}
	args, err := parseFlags(fs, args, os.Getenv)
	if err != nil {
		return nil, err
	}
	c.args, c.socketGiven = args, given(fs, "kubelet.pod-resources-socket")
	return c, nil
}

// Validate checks every setting, with one sentence for the first that is
// wrong, and derives the identity, the scenario FILE and the resource
// names. It is the agent's only validation: what passes it starts.
func (c *agentConfig) Validate() error {
	switch {
	case len(c.args) > 0 && !c.simulate:
		return usagef("unexpected argument %q: a scenario FILE needs --simulate", c.args[0])
	case len(c.args) > 1:
		return usagef("unexpected argument %q: --simulate takes one scenario FILE", c.args[1])
	case len(c.args) == 1:
		c.scenario = c.args[0]
	}
	id, err := c.identityFlags.identity()
	if err != nil {
		return err
	}
	c.identity = id
	if err := c.pods.validate(); err != nil {
		return err
	}
	if c.pods.enabled && c.pods.nodeName != "" {
		if err := c.pods.config(c.identity).Validate(); err != nil {
			return usageError{err}
		}
	}
	if err := c.dra.validate(); err != nil {
		return err
	}
	c.kubelet.ResourceNames = nil
	if c.resourceNames != "" {
		for _, n := range strings.Split(c.resourceNames, ",") {
			if n = strings.TrimSpace(n); n == "" {
				return usagef("--kubelet.resource-names %q: an empty name (two commas, or one at an end)", c.resourceNames)
			}
			c.kubelet.ResourceNames = append(c.kubelet.ResourceNames, n)
		}
	}
	for _, v := range []interface{ Validate() error }{c.engine, c.nvml, c.web, c.kubelet, c.node} {
		if err := v.Validate(); err != nil {
			return usageError{err}
		}
	}
	if what, ok := c.simPaths[c.web.MetricsPath]; ok && c.simulate {
		return usagef("--web.telemetry-path %s is where --simulate serves %s; choose another path", c.web.MetricsPath, what)
	}
	// The node watch reads the node the pod source names.
	c.node.Name, c.node.Kubeconfig = c.pods.nodeName, c.pods.kubeconfig
	return c.log.Validate()
}

// Sources are what the agent reads and serves beside its own engine: the
// host's NVML, kubelet and API server (hostSources), or a simulated node's
// (gpuxray-sim). A nil field is none.
type Sources struct {
	// NVML is the driver's library.
	NVML gonvml.Interface
	// Clock is the time the readers and the engine share.
	Clock agent.Clock
	// KubeletSocket, when set, replaces --kubelet.pod-resources-socket.
	KubeletSocket string
	// Allocations starts what the engine reads of the kubelet through
	// kube; the watches it starts run in run until ctx is done.
	Allocations func(ctx context.Context, kube *kubelet.Client, run func(func() error)) (Allocations, error)
	// NodeLabels are the node's labels, for the node watch.
	NodeLabels node.Source
	// Handler wraps the agent's HTTP handler, to serve more paths.
	Handler func(next http.Handler, metricsPath string) (http.Handler, error)
	// Play runs once the engine is built and before the agent serves (a
	// scenario's lead-in), and may start loops of its own in run.
	Play func(ctx context.Context, engine *agent.Engine, run func(func() error))
	// Stop releases the sources once the agent has stopped.
	Stop func()
}

// Allocations is what the engine reads of the kubelet, the engine options
// that go with it, and the cluster's PriorityClasses (nil: none).
type Allocations struct {
	Source  agent.AllocationSource
	Options []agent.Option
	Classes exporter.PriorityClassSource
}

// hostSources are the node's own: the NVML library, the kubelet, and the
// pod, DRA and node watches through the API server.
func hostSources(c *agentConfig, logger *zap.Logger) *Sources {
	return &Sources{
		NVML:       gonvml.New(),
		Clock:      WallClock{},
		NodeLabels: hostNodeLabels(c.node, logger),
		Allocations: func(ctx context.Context, kube *kubelet.Client, run func(func() error)) (Allocations, error) {
			opts, pcs, podSrc, err := startPodSource(ctx, c.pods, c.identity, logger, run)
			if err != nil {
				return Allocations{}, err
			}
			var a Allocations
			var lookup kubelet.PodLookup
			var claimPods dra.ClaimPods
			if podSrc != nil {
				lookup, claimPods = podSrc, podSrc
			}
			if pcs != nil {
				a.Classes = pcs
			}
			src, claims, err := startDRASource(ctx, c.dra, c.pods, logger, run)
			if err != nil {
				return Allocations{}, err
			}
			var draOpts []agent.Option
			a.Source, draOpts = DRAAllocations(kubelet.NewSharing(kube, lookup, logger.Named("kubelet")), src, claims, claimPods, nil, c.dra.config(c.pods.nodeName), logger)
			a.Options = append(opts, draOpts...)
			return a, nil
		},
	}
}

// agentRun is an agent built and ready to run.
type agentRun struct {
	engine *agent.Engine
	srv    *exporter.Server
	// group runs the agent's loops on ctx, its context: the watches
	// buildAgent started, then those run starts.
	group  *errgroup.Group
	ctx    context.Context
	src    *Sources
	node   node.Config
	reader *nvml.Reader
	logger *zap.Logger
	close  func()
}

// buildAgent builds the agent of a valid c on src: the NVML reader, the
// kubelet client, the allocation sources (whose watches start), the engine
// and the HTTP server (whose listener opens). Nothing polls or serves
// until run. On an error everything built is released.
func buildAgent(ctx context.Context, c *agentConfig, src *Sources, logger *zap.Logger, bi exporter.BuildInfo) (a *agentRun, err error) {
	ctx, cancel := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(ctx)
	// closeAll ends the loops (the watches started here, then the engine
	// and the server), then releases in reverse order what was built.
	var closers []func()
	closeAll := func() {
		cancel()
		_ = g.Wait()
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	if src.Stop != nil {
		closers = append(closers, src.Stop)
	}
	defer func() {
		if err != nil {
			closeAll()
		}
	}()

	kubeCfg := c.kubelet
	if src.KubeletSocket != "" {
		kubeCfg.Socket = src.KubeletSocket
	}
	kubeCfg.Clock = src.Clock
	reader := nvml.New(src.NVML, c.nvml, logger.Named("nvml"), src.Clock)
	_ = reader.Init() // a failure is logged and retried; the agent serves without GPUs meanwhile
	// NVML is shut down last, after every loop that reads it has ended.
	closers = append(closers, reader.Shutdown)

	kube, err := kubelet.New(kubeCfg, logger.Named("kubelet"))
	if err != nil {
		return nil, usageError{err}
	}
	closers = append(closers, func() { kube.Close() })

	allocs, err := src.Allocations(gctx, kube, g.Go)
	if err != nil {
		return nil, err
	}
	engine, err := agent.New(c.engine, reader, allocs.Source, src.Clock, logger.Named("engine"), allocs.Options...)
	if err != nil {
		return nil, usageError{err}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		exporter.NewCollector(engine, &bi, exporter.WithExtraLabels(c.identity.LabelNames()...)),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	if allocs.Classes != nil {
		reg.MustRegister(exporter.NewPriorityClassCollector(allocs.Classes))
	}
	handler := exporter.NewHandler(reg, c.web.MetricsPath, engine.Ready, logger.Named("web"), c.web.MaxRequests)
	if src.Handler != nil {
		if handler, err = src.Handler(handler, c.web.MetricsPath); err != nil {
			return nil, err
		}
	}
	srv, err := exporter.Listen(c.web, handler, logger.Named("web"))
	if err != nil {
		return nil, usageError{err} // a port in use is configuration, as a bad address is
	}
	return &agentRun{engine: engine, srv: srv, group: g, ctx: gctx, src: src, node: c.node,
		reader: reader, logger: logger, close: closeAll}, nil
}

// run plays the sources' lead-in, then polls and serves until ctx is done
// or a loop fails, and releases everything.
func (a *agentRun) run(version string) error {
	defer a.close()
	a.logger.Info("gpuxray agent starting", zap.String("version", version), zap.Stringer("engine", a.engine))
	if a.src.Play != nil {
		// Before anything is served: the agent starts with the lead-in's state.
		a.src.Play(a.ctx, a.engine, a.group.Go)
	}
	startNodeWatch(a.ctx, a.node, a.src.NodeLabels, a.reader, a.logger, a.group.Go)
	a.group.Go(func() error { return a.engine.Run(a.ctx) })
	a.group.Go(func() error { return a.srv.Serve(a.ctx) })
	err := a.group.Wait()
	a.logger.Info("gpuxray agent stopped")
	return err
}

// runAgent is the agent command: parse, validate, build on the host's or
// the simulator's sources, run.
func (b Binary) runAgent(ctx context.Context, args []string, stderr io.Writer) error {
	c, err := parseAgent(args, stderr)
	if err != nil {
		return err
	}
	if c.simulate {
		if b.Simulator == nil {
			return errNoSimulator("--simulate")
		}
		c.simPaths = b.Simulator.Paths()
	}
	if err := c.Validate(); err != nil {
		return err
	}
	logger, err := newLogger(c.log, stderr)
	if err != nil {
		return err
	}
	if ownsProcess(ctx) {
		routeKlog(logger)
	}
	defer logger.Sync() //nolint:errcheck // nothing to do if stderr is gone
	src, err := b.sources(ctx, c, logger)
	if err != nil || src == nil {
		return err // src is nil, with no error, when stopped before it started
	}
	a, err := buildAgent(ctx, c, src, logger, b.buildInfo())
	if err != nil {
		return err
	}
	return a.run(b.buildInfo().Version)
}

// sources are the simulated node's with --simulate, else the host's, with
// the API server's configuration read (--kubeconfig). nil and no error
// when ctx ended the reading of a scenario or kubeconfig.
func (b Binary) sources(ctx context.Context, c *agentConfig, logger *zap.Logger) (*Sources, error) {
	if c.simulate {
		sc := SimulateConfig{Path: c.scenario, Identity: c.identity, DRA: c.dra.config(""), PollInterval: c.engine.PollInterval}
		if c.socketGiven {
			sc.GivenSocket = c.kubelet.Socket
		}
		return b.Simulator.Simulate(ctx, sc, logger)
	}
	if c.pods.nodeName != "" && (c.pods.enabled || c.dra.enabled) {
		if err := c.pods.loadAPI(ctx); err != nil {
			if ctx.Err() != nil {
				return nil, nil // stopped while reading it, as while reading a scenario
			}
			return nil, err
		}
	}
	return hostSources(c, logger), nil
}

// given reports whether the flag name was set, on the command line or by
// its environment variable (parseFlags sets those through fs.Set).
func given(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}
