package nvmlfake

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/gpuxray/gpuxray/collector/sim"
)

// Node is a simulated node the production binary runs on as on a real
// one: the scenario's NVML through the fake library, its kubelet's
// pod-resources on a unix socket, and its GPU processes in a /proc tree.
// Its clock is the wall clock from the moment it starts (scenario time 0),
// so the samples' stamps are Unix microseconds, as the driver's.
type Node struct {
	Sim *sim.Node
	// Dir holds the sockets and the /proc tree.
	Dir string
	// LibDir is where the fake library is (for LD_LIBRARY_PATH).
	LibDir string
	srv    *Server
	kube   *sim.KubeletServer
}

// StartNode starts sc's node, moved to start now, with the fake library
// built in libDir. Close stops it.
func StartNode(sc *sim.Scenario, libDir string) (*Node, error) {
	// Unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "gxfake")
	if err != nil {
		return nil, err
	}
	n := &Node{Dir: dir, LibDir: libDir}
	fail := func(err error) (*Node, error) {
		n.Close()
		return nil, err
	}
	sc.Start = time.Now().Truncate(time.Second)
	if n.Sim, err = sim.NewNode(sc, sim.RealClock(sc.Start)); err != nil {
		return fail(err)
	}
	if err := n.Sim.WriteProc(filepath.Join(dir, "proc")); err != nil {
		return fail(fmt.Errorf("simulated /proc: %w", err))
	}
	n.kube = sim.NewKubeletServer(n.Sim.ListResponse)
	if err := n.kube.Start(filepath.Join(dir, "kubelet.sock")); err != nil {
		return fail(err)
	}
	if n.srv, err = Serve(filepath.Join(dir, "nvml.sock"), n.Sim.NVML()); err != nil {
		return fail(err)
	}
	return n, nil
}

// Env is the environment the binary needs to load the fake library.
func (n *Node) Env() []string {
	return []string{"LD_LIBRARY_PATH=" + n.LibDir, SocketEnv + "=" + filepath.Join(n.Dir, "nvml.sock")}
}

// Args are the agent's flags for this node: its kubelet and /proc, and no
// API server (the pod source and DRA are off; without --node.name the
// node watch is too).
func (n *Node) Args() []string {
	return []string{
		"--kubelet.pod-resources-socket=" + filepath.Join(n.Dir, "kubelet.sock"),
		"--proc.root=" + filepath.Join(n.Dir, "proc"),
		"--pods.enabled=false", "--dra.enabled=false",
	}
}

// Server is the fake library's server.
func (n *Node) Server() *Server { return n.srv }

// Close stops the node and removes its files.
func (n *Node) Close() {
	if n.srv != nil {
		n.srv.Close()
	}
	if n.kube != nil {
		n.kube.Stop()
	}
	if n.Sim != nil {
		n.Sim.Close()
	}
	os.RemoveAll(n.Dir)
}
