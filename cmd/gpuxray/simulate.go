package main

import (
	"fmt"
	"os"
	"path/filepath"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/agent"
	"github.com/gpuxray/gpuxray/collector/proc"
	"github.com/gpuxray/gpuxray/collector/sim"
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
}

// loadScenario reads FILE, or returns the embedded demo when path is empty.
// A bad file is a usage error naming the line and field.
func loadScenario(path string) (*sim.Scenario, error) {
	if path == "" {
		return sim.Demo(), nil
	}
	sc, err := sim.LoadScenario(path)
	if err != nil {
		return nil, usageError{err}
	}
	return sc, nil
}

func startSimulation(sc *sim.Scenario, clock sim.Clock) (*simulation, error) {
	node, err := sim.NewNode(sc, clock)
	if err != nil {
		return nil, usageError{err}
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
	return s, nil
}

// startLive starts sc as `agent --simulate` plays it: on wall, the clock
// Prometheus stamps its scrapes with. The scenario's start is moved to wall's
// now, so its offsets play from now and the driver's sample stamps, the
// kubelet's and the engine's clock, and so the peak windows of each second,
// all read wall time. (Replay keeps the scenario's start: it writes its own
// timestamps.)
func startLive(sc *sim.Scenario, wall sim.Clock) (*simulation, error) {
	sc.Start = wall.Now()
	return startSimulation(sc, wall)
}

func (s *simulation) nvml() gonvml.Interface { return s.node.NVML() }

// engineOptions attributes shared GPUs per process: the simulated node is
// the pod source, and the real /proc reader reads the node's /proc tree.
func (s *simulation) engineOptions(logger *zap.Logger) []agent.Option {
	procs := proc.New(proc.Config{Root: filepath.Join(s.dir, "proc")}, logger.Named("proc"))
	return []agent.Option{agent.WithPods(s.node), agent.WithProcesses(procs)}
}

func (s *simulation) stop() {
	s.node.Close()
	s.kubelet.Stop()
	os.RemoveAll(s.dir)
}
