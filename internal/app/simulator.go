package app

import (
	"context"
	"io"
	"time"

	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/agent"
	"github.com/gpuxray/gpuxray/collector/dra"
	"github.com/gpuxray/gpuxray/collector/nvml"
)

// Simulator is a simulated node (collector/sim) for the commands that need
// one: `agent --simulate` runs the agent on its Sources, `replay` plays a
// scenario on a virtual clock. cmd/gpuxray-sim gives one; the production
// binary, which links none of the simulator, gives none.
type Simulator interface {
	// Simulate loads the scenario c.Path (the embedded demo when empty)
	// and starts its node; the agent then reads it. It returns nil and no
	// error when ctx ended the load. A bad scenario is a UsageError.
	Simulate(ctx context.Context, c SimulateConfig, logger *zap.Logger) (*Sources, error)
	// Replay plays c.Path on a virtual clock and writes its output to
	// stdout.
	Replay(ctx context.Context, c ReplayConfig, stdout io.Writer) error
	// Paths are the paths `agent --simulate` serves beside the agent's
	// own, each with what it serves ("the simulated kube-state-metrics"):
	// --web.telemetry-path may be none of them.
	Paths() map[string]string
}

// SimulateConfig is what `agent --simulate` asks of the simulated node.
type SimulateConfig struct {
	// Path is the scenario FILE; empty is the embedded demo.
	Path     string
	Identity Identity
	// DRA resolves the node's DRA claims; its NodeName is the scenario's.
	DRA dra.Config
	// PollInterval is the engine's, at which a lead-in is played.
	PollInterval time.Duration
	// GivenSocket is the --kubelet.pod-resources-socket the command line
	// gave, which the simulated kubelet's own socket replaces.
	GivenSocket string
}

// ReplayConfig is the replay command's validated configuration.
type ReplayConfig struct {
	// Path is the scenario FILE.
	Path     string
	Engine   agent.Config
	NVML     nvml.Config
	Identity Identity
	DRA      dra.Config
	// OpenMetrics asks for every scrape of the replay, timestamped,
	// every ScrapeInterval of virtual time; else the final metrics.
	OpenMetrics    bool
	ScrapeInterval time.Duration
	Logger         *zap.Logger
}
