package fleet

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/gpuxray/gpuxray/agent"
	"github.com/gpuxray/gpuxray/collector/kubelet"
	"github.com/gpuxray/gpuxray/collector/nvml"
	cgroup "github.com/gpuxray/gpuxray/collector/proc"
	"github.com/gpuxray/gpuxray/collector/sim"
	"github.com/gpuxray/gpuxray/exporter"
)

// wallClock is the host's clock, which the scrapers stamp samples with.
type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// LiveConfig is how the fleet's agents run.
type LiveConfig struct {
	// LeadIn is how much of each scenario is played at once before the
	// agent follows the wall clock, as `agent --simulate` plays lead_in.
	LeadIn time.Duration
	// LeadInStep is the poll interval of the lead-in: under the driver's
	// 20 s of samples, so that none is lost.
	LeadInStep time.Duration
	// Poll is the agents' --poll.interval once live.
	Poll time.Duration
	// Parallel is how many agents play their lead-in at once.
	Parallel int
}

// liveAgent is one simulated node with the agent's whole stack, as
// `gpuxray agent --simulate` wires it: the simulated driver under the real
// NVML reader, a simulated kubelet on a unix socket under the real
// pod-resources client, the node's /proc tree under the real cgroup
// reader, the engine and the exporter's handler on a loopback port of its
// own.
type liveAgent struct {
	node *Node
	// scenario is the node's scenario rebased onto the wall clock: its
	// start is when the lead-in would have begun.
	scenario *sim.Scenario
	sim      *sim.Node
	kubelet  *sim.KubeletServer
	reader   *nvml.Reader
	kube     *kubelet.Client
	engine   *agent.Engine
	dir      string
	ln       net.Listener
	srv      *http.Server
}

// Fleet is every simulated agent of a live run, served by this process.
type Fleet struct {
	agents []*liveAgent
	ksm    []*http.Server
	ksmLn  []net.Listener
	cancel context.CancelFunc
	wg     sync.WaitGroup
	stop   sync.Once
}

// ServeFleet starts an agent for every node, each after playing its
// lead-in, and a kube-state-metrics endpoint for the fleet's pods. It
// returns once every agent serves.
func ServeFleet(ctx context.Context, nodes []*Node, c LiveConfig, sched *agent.Schedule, log *zap.Logger) (*Fleet, error) {
	f := &Fleet{agents: make([]*liveAgent, len(nodes))}
	runCtx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(1, c.Parallel))
	for i, n := range nodes {
		g.Go(func() error {
			a, err := startAgent(gctx, n, c, sched, log.Named(n.Name))
			if err != nil {
				return fmt.Errorf("agent of %s: %w", n.Name, err)
			}
			f.agents[i] = a
			f.wg.Add(1)
			go func() {
				defer f.wg.Done()
				_ = a.engine.Run(runCtx)
			}()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		f.Stop()
		return nil, err
	}
	if err := f.serveKubeState(); err != nil {
		f.Stop()
		return nil, err
	}
	return f, nil
}

func startAgent(ctx context.Context, n *Node, c LiveConfig, sched *agent.Schedule, log *zap.Logger) (*liveAgent, error) {
	sc := *n.Scenario
	sc.LeadIn = c.LeadIn
	sc.Start = time.Now().Add(-c.LeadIn)
	clock := sim.NewLeadInClock(wallClock{}, sc.Start)
	node, err := sim.NewNode(&sc, clock)
	if err != nil {
		return nil, err
	}
	a := &liveAgent{node: n, scenario: &sc, sim: node}
	fail := func(err error) (*liveAgent, error) {
		a.stop()
		return nil, err
	}
	// Unix socket paths are limited to 108 bytes: keep the directory short.
	if a.dir, err = os.MkdirTemp("", "gxf"); err != nil {
		return fail(err)
	}
	if err := node.WriteProc(filepath.Join(a.dir, "proc")); err != nil {
		return fail(err)
	}
	socket := filepath.Join(a.dir, "kubelet.sock")
	a.kubelet = sim.NewKubeletServer(node.ListResponse)
	if err := a.kubelet.Start(socket); err != nil {
		a.kubelet = nil
		return fail(err)
	}
	a.reader = nvml.New(node.NVML(), nvml.DefaultConfig(), log.Named("nvml"), clock)
	if err := a.reader.Init(); err != nil {
		return fail(err)
	}
	kcfg := kubelet.DefaultConfig()
	kcfg.Socket, kcfg.Clock = socket, clock
	if a.kube, err = kubelet.New(kcfg, log.Named("kubelet")); err != nil {
		return fail(err)
	}
	cfg := agent.DefaultConfig()
	cfg.PollInterval = c.Poll
	cfg.Windows = sched
	// The lead-in polls every LeadInStep; a GPU in MIG mode on Hopper reads
	// its instances' activity from GPM once a poll, each reading covering
	// it, which --sample.max-gap must allow. Live, a poll of a thousand
	// agents on two cores may start seconds late: a reading covers up to
	// three polls before its time is lost as a gap.
	cfg.MaxSampleGap = max(cfg.MaxSampleGap, c.LeadInStep+2*time.Second, 3*c.Poll)
	procs := cgroup.New(cgroup.Config{Root: filepath.Join(a.dir, "proc")}, log.Named("proc"))
	if a.engine, err = agent.New(cfg, a.reader, a.kube, clock, log.Named("engine"), agent.WithPods(node), agent.WithProcesses(procs)); err != nil {
		return fail(err)
	}
	// The lead-in, as playLeadIn in cmd/gpuxray-sim plays it: polls of virtual
	// time as fast as they run, until the clock reaches the wall clock.
	maxPolls := 2*int(c.LeadIn/c.LeadInStep) + 2
	for i := 0; ; i++ {
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		a.engine.Poll(ctx)
		if i >= maxPolls {
			clock.GoLive()
		}
		if !clock.Step(c.LeadInStep) {
			break
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(exporter.NewCollector(a.engine, nil))
	if a.ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		return fail(err)
	}
	a.srv = &http.Server{Handler: exporter.NewHandler(reg, "/metrics", a.engine.Ready, log.Named("web"), exporter.DefaultMaxRequests), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = a.srv.Serve(a.ln) }()
	return a, nil
}

func (a *liveAgent) addr() string { return a.ln.Addr().String() }

func (a *liveAgent) stop() {
	if a.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = a.srv.Shutdown(ctx)
		cancel()
	}
	if a.kube != nil {
		a.kube.Close()
	}
	if a.reader != nil {
		a.reader.Shutdown()
	}
	if a.kubelet != nil {
		a.kubelet.Stop()
	}
	a.sim.Close()
	if a.dir != "" {
		os.RemoveAll(a.dir)
	}
}

// Targets are the agents' addresses by node name.
func (f *Fleet) Targets() map[string]string {
	m := make(map[string]string, len(f.agents))
	for _, a := range f.agents {
		m[a.node.Name] = a.addr()
	}
	return m
}

// KubeStateAddrs are where the fleet's kube-state-metrics shards serve.
func (f *Fleet) KubeStateAddrs() []string {
	out := make([]string, len(f.ksmLn))
	for i, ln := range f.ksmLn {
		out[i] = ln.Addr().String()
	}
	return out
}

// NodesPerKubeState is how many nodes' pods one kube-state-metrics shard
// serves. A cluster of 1,000 such nodes holds some 25,000 pods, whose
// series come to 32 MB a scrape: over vmagent's -promscrape.maxScrapeSize
// (16 MiB), which drops the whole scrape. A cluster that size runs
// kube-state-metrics sharded (--shard, --total-shards) as the fleet does,
// each shard under 9 MB.
const NodesPerKubeState = 250

// serveKubeState serves, as a cluster's kube-state-metrics would, the pods
// of every node (sim.Node.KubeState) and those no node took: one shard per
// NodesPerKubeState nodes, each its nodes' pods, as kube-state-metrics'
// own sharding gives each shard a share of the pods.
func (f *Fleet) serveKubeState() error {
	for lo := 0; lo < len(f.agents); lo += NodesPerKubeState {
		reg := prometheus.NewRegistry()
		if err := reg.Register(fleetKubeState(f.agents[lo:min(lo+NodesPerKubeState, len(f.agents))])); err != nil {
			return err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 10 * time.Second}
		f.ksmLn, f.ksm = append(f.ksmLn, ln), append(f.ksm, srv)
		go func() { _ = srv.Serve(ln) }()
	}
	return nil
}

// fleetKubeState is the nodes' KubeState collectors as one: an unchecked
// collector, since every node describes the same metrics.
type fleetKubeState []*liveAgent

func (fleetKubeState) Describe(chan<- *prometheus.Desc) {}

func (k fleetKubeState) Collect(ch chan<- prometheus.Metric) {
	for _, a := range k {
		a.sim.KubeState().Collect(ch)
	}
}

// Stop ends every agent and the kube-state-metrics endpoint; a second call
// does nothing.
func (f *Fleet) Stop() {
	f.stop.Do(func() {
		if f.cancel != nil {
			f.cancel()
		}
		f.wg.Wait()
		for _, srv := range f.ksm {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = srv.Shutdown(ctx)
			cancel()
		}
		// Each stop waits for its server's scrapes and its kubelet's
		// connections: a thousand of them one after the other took minutes.
		var g errgroup.Group
		g.SetLimit(16)
		for _, a := range f.agents {
			if a != nil {
				g.Go(func() error { a.stop(); return nil })
			}
		}
		_ = g.Wait()
	})
}
