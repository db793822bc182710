package app

import (
	"context"
	"flag"

	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/collector/node"
	"github.com/gpuxray/gpuxray/collector/nvml"
)

func nodeWatchFlags(fs *flag.FlagSet, c *node.Config) {
	fs.DurationVar(&c.Interval, "node.watch-interval", c.Interval, "how often to read this node's labels for a GPU Operator MIG change or driver upgrade, during which NVML is released (nvidia.com/mig.config.state, nvidia.com/gpu-driver-upgrade-state, nvidia.com/gpu.deploy.*); 0 turns it off")
}

// startNodeWatch releases reader while the node's labels, read from src,
// announce a reconfiguration (a GPU Operator MIG change, a driver
// upgrade). It starts nothing when the watch is off or src is nil. c must
// be valid.
func startNodeWatch(ctx context.Context, c node.Config, src node.Source, reader *nvml.Reader, logger *zap.Logger, run func(func() error)) {
	if c.Interval == 0 || src == nil {
		return
	}
	run(func() error { return node.Watch(ctx, c, src, reader, logger.Named("node")) })
}

// hostNodeLabels reads this node's labels from the API server (needs
// --node.name and RBAC get on nodes); nil, logged, when the watch is off
// or the node cannot be read from here. c.Name and c.Kubeconfig are the
// pod source's.
func hostNodeLabels(c node.Config, logger *zap.Logger) node.Source {
	if c.Interval == 0 {
		return nil
	}
	if c.Name == "" {
		logger.Info("no node watch: --node.name (or $NODE_NAME) is not set; NVML is not released during GPU Operator MIG changes and driver upgrades")
		return nil
	}
	client, err := node.NewClient(c)
	if err != nil {
		logger.Warn("no node watch: the API server cannot be reached from here; NVML is not released during GPU Operator MIG changes and driver upgrades", zap.Error(err))
		return nil
	}
	return client
}
