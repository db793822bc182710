package main

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

// startNodeWatch releases reader while the node's labels announce a
// reconfiguration: from the simulated node's labels when live is set,
// else from the API server (needs --node.name and RBAC get on nodes). It
// starts nothing, logged, when it cannot read the node. c must be valid.
func startNodeWatch(ctx context.Context, c node.Config, pc podSourceConfig, live *simulation, reader *nvml.Reader, logger *zap.Logger, run func(func() error)) {
	if c.Interval == 0 {
		return
	}
	var src node.Source
	switch {
	case live != nil:
		src = live.nodeLabels()
	case pc.nodeName == "":
		logger.Info("no node watch: --node.name (or $NODE_NAME) is not set; NVML is not released during GPU Operator MIG changes and driver upgrades")
		return
	default:
		c.Name, c.Kubeconfig = pc.nodeName, pc.kubeconfig
		client, err := node.NewClient(c)
		if err != nil {
			logger.Warn("no node watch: the API server cannot be reached from here; NVML is not released during GPU Operator MIG changes and driver upgrades", zap.Error(err))
			return
		}
		src = client
	}
	if src == nil {
		return
	}
	run(func() error { return node.Watch(ctx, c, src, reader, logger.Named("node")) })
}
