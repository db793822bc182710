// Package simnode wires a simulated node to the real readers, engine and
// exporter, as `gpuxray replay` does, for benchmarks and accuracy tests that
// live next to the code they measure: the simulated driver answers
// collector/nvml, a simulated kubelet serves pod-resources on a unix socket to
// collector/kubelet, and collector/proc reads the node's /proc tree.
package simnode

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/agent"
	"github.com/gpuxray/gpuxray/collector/kubelet"
	"github.com/gpuxray/gpuxray/collector/nvml"
	"github.com/gpuxray/gpuxray/collector/proc"
	"github.com/gpuxray/gpuxray/collector/sim"
	"github.com/gpuxray/gpuxray/exporter"
)

// Node is a simulated node on a virtual clock with the agent's whole stack.
type Node struct {
	Scenario *sim.Scenario
	Sim      *sim.Node
	Clock    *sim.VirtualClock
	Engine   *agent.Engine
	Registry *prometheus.Registry
}

// New builds the node of sc with cfg (agent.DefaultConfig() when nil); it
// is torn down with tb's cleanups. The clock stands at the scenario start.
func New(tb testing.TB, sc *sim.Scenario, cfg *agent.Config) *Node {
	tb.Helper()
	c := agent.DefaultConfig()
	if cfg != nil {
		c = *cfg
	}
	clock := sim.NewVirtualClock(sc.Start)
	node, err := sim.NewNode(sc, clock)
	if err != nil {
		tb.Fatal(err)
	}
	// Unix socket paths are limited to 108 bytes: t.TempDir() can be longer.
	dir, err := os.MkdirTemp("", "gpuxray-bench")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	if err := node.WriteProc(filepath.Join(dir, "proc")); err != nil {
		tb.Fatal(err)
	}
	socket := filepath.Join(dir, "kubelet.sock")
	srv := sim.NewKubeletServer(node.ListResponse)
	if err := srv.Start(socket); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(srv.Stop)
	log := zap.NewNop()
	reader := nvml.New(node.NVML(), nvml.DefaultConfig(), log, clock)
	if err := reader.Init(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { reader.Shutdown() })
	kcfg := kubelet.DefaultConfig()
	kcfg.Socket, kcfg.Clock = socket, clock
	kube, err := kubelet.New(kcfg, log)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { kube.Close() })
	procs := proc.New(proc.Config{Root: filepath.Join(dir, "proc")}, log)
	engine, err := agent.New(c, reader, kube, clock, log, agent.WithPods(node), agent.WithProcesses(procs))
	if err != nil {
		tb.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(exporter.NewCollector(engine, nil))
	return &Node{Scenario: sc, Sim: node, Clock: clock, Engine: engine, Registry: reg}
}

// Step moves the clock by d and polls once.
func (n *Node) Step(d time.Duration) {
	n.Clock.Advance(d)
	n.Engine.Poll(context.Background())
}

// Run polls every interval from the clock's time until the scenario offset
// until (inclusive).
func (n *Node) Run(interval, until time.Duration) {
	end := n.Scenario.Start.Add(until)
	for !n.Clock.Now().After(end.Add(-interval)) {
		n.Step(interval)
	}
}
