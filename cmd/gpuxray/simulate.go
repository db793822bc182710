package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

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
}

// maxScenarioBytes bounds the scenario file: the largest real one (test/bench's
// node-110, 110 pods churning over a day) is 283 KiB, and /dev/zero or a
// runaway generator must not grow the process until the kernel kills it.
const maxScenarioBytes = 16 << 20

// loadScenario reads FILE, or returns the embedded demo when path is empty.
// A bad file is a usage error naming the path as given, the line and field.
// The read ends when ctx is done: a FIFO nobody writes to would block it,
// with the signals that end the process already caught.
func loadScenario(ctx context.Context, path string) (*sim.Scenario, error) {
	if path == "" {
		return sim.Demo(), nil
	}
	data, err := readScenario(ctx, path)
	if err != nil {
		return nil, err
	}
	sc, err := sim.ParseScenario(data, path)
	if err != nil {
		return nil, usageError{err}
	}
	return sc, nil
}

// readScenario reads path, up to maxScenarioBytes, whatever kind of file
// it is (a pipe from <(...) is fine), until ctx is done.
func readScenario(ctx context.Context, path string) ([]byte, error) {
	type result struct {
		data []byte
		err  error
	}
	done := make(chan result, 1)
	var (
		mu        sync.Mutex
		file      *os.File
		abandoned bool
	)
	go func() {
		// Opening a FIFO blocks until a writer opens it, in a system call
		// nothing interrupts: then this goroutine outlives start-up, and
		// closes the file when the open returns.
		f, err := os.Open(path)
		if err != nil {
			done <- result{err: usagef("reading scenario: %v", err)}
			return
		}
		mu.Lock()
		if abandoned {
			mu.Unlock()
			f.Close()
			return
		}
		file = f
		mu.Unlock()
		defer f.Close()
		data, err := io.ReadAll(io.LimitReader(f, maxScenarioBytes+1))
		switch {
		case err != nil:
			done <- result{err: usagef("reading scenario: %v", err)}
		case len(data) > maxScenarioBytes:
			done <- result{err: usagef("%s: scenario is larger than %d MiB", path, maxScenarioBytes>>20)}
		default:
			done <- result{data: data}
		}
	}()
	select {
	case r := <-done:
		return r.data, r.err
	case <-ctx.Done():
		mu.Lock()
		abandoned = true
		if file != nil {
			file.Close() // a pipe is read through the poller: this ends the read
		}
		mu.Unlock()
		return nil, ctx.Err()
	}
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
	s := &simulation{node: node, dir: dir, socket: filepath.Join(dir, "kubelet.sock")}
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
