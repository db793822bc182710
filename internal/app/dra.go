package app

import (
	"context"
	"flag"

	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/agent"
	"github.com/gpuxray/gpuxray/collector/dra"
)

// draSourceConfig is the ResourceSlice source that resolves devices
// allocated through DRA claims; it shares --node.name and --kubeconfig with
// the pod source.
type draSourceConfig struct {
	enabled       bool
	drivers       string
	uuidAttribute string
}

func draSourceFlags(fs *flag.FlagSet, c *draSourceConfig) {
	fs.BoolVar(&c.enabled, "dra.enabled", true, "resolve GPUs allocated through DRA claims from this node's ResourceSlices (needs --node.name and resourceslices get/list/watch); off, their GPUs' time is unattributed")
	fs.StringVar(&c.drivers, "dra.drivers", dra.DefaultDriver, "comma-separated DRA drivers whose devices are GPUs; other drivers' claims are ignored and counted")
	fs.StringVar(&c.uuidAttribute, "dra.uuid-attribute", dra.DefaultUUIDAttribute, "device attribute of the drivers' ResourceSlices that holds the NVML UUID (uuid also matches <driver>/uuid)")
}

// defaultDRAConfig is the flags' defaults, for replay, which has none.
func defaultDRAConfig() draSourceConfig {
	return draSourceConfig{enabled: true, drivers: dra.DefaultDriver, uuidAttribute: dra.DefaultUUIDAttribute}
}

// DefaultDRA is the DRA source's configuration with its flags' defaults,
// for a node whose NodeName the caller sets: replay's, which has no DRA
// flags.
func DefaultDRA() dra.Config { return defaultDRAConfig().config("") }

// config returns the source's configuration for node nodeName.
func (c draSourceConfig) config(nodeName string) dra.Config {
	return dra.Config{NodeName: nodeName, UUIDAttribute: c.uuidAttribute, Drivers: splitList(c.drivers)}
}

// validate checks the drivers and the attribute, whether or not the node
// name is known; errors are usage errors.
func (c draSourceConfig) validate() error {
	// The node name is checked where the source starts: without it DRA is
	// off, not misconfigured.
	if err := c.config("node").Validate(); err != nil {
		return usageError{err}
	}
	return nil
}

// startDRASource starts the ResourceSlice source in run and returns it, or
// nil (logged) when the agent runs without one: disabled, no node name, or
// no way to reach the API server. Without one, DRA devices stay unresolved
// (dra.NewResolver): never taken for unallocated GPUs.
func startDRASource(ctx context.Context, c draSourceConfig, pc podSourceConfig, logger *zap.Logger, run func(func() error)) (*dra.Source, *dra.Claims, error) {
	switch {
	case !c.enabled:
		logger.Info("no DRA source: --dra.enabled=false; GPUs allocated through DRA claims are unresolved, their time unattributed")
		return nil, nil, nil
	case pc.nodeName == "":
		logger.Info("no DRA source: --node.name (or $NODE_NAME) is not set; GPUs allocated through DRA claims are unresolved")
		return nil, nil, nil
	}
	if err := pc.ensureAPI(ctx); err != nil {
		return nil, nil, err
	}
	if pc.rest == nil {
		logger.Warn("no DRA source: the API server cannot be reached from here; GPUs allocated through DRA claims are unresolved", zap.Error(pc.restErr))
		return nil, nil, nil
	}
	client, err := dra.NewClient(pc.rest)
	if err != nil {
		return nil, nil, usageError{err}
	}
	src, err := dra.New(c.config(pc.nodeName), client, logger.Named("dra"))
	if err != nil {
		return nil, nil, usageError{err}
	}
	claims, err := dra.NewClaims(c.config(pc.nodeName), client, logger.Named("dra"))
	if err != nil {
		return nil, nil, usageError{err}
	}
	run(func() error { return claims.Run(ctx) })
	startAndSync(ctx, src, "the node's ResourceSlices", logger, run)
	return src, claims, nil
}

// DRAAllocations returns the allocation source the engine reads — the
// kubelet's answers with DRA devices resolved through src (nil: none
// resolves) — and the engine option that reports src's health. c's
// NodeName is this node's.
//
// With claims and pods (either may be nil), the resolver also reads the
// node's pods' ResourceClaims: for a kubelet without dynamic_resources,
// admin access and request-scoped claims; wait is for a replay.
func DRAAllocations(kube dra.Lister, src *dra.Source, claims *dra.Claims, pods dra.ClaimPods, wait func() bool, c dra.Config, logger *zap.Logger) (agent.AllocationSource, []agent.Option) {
	r := dra.NewResolver(kube, src, c, logger.Named("dra")).WithClaims(claims, pods, wait)
	if src == nil {
		return r, nil
	}
	if claims == nil {
		return r, []agent.Option{agent.WithDRA(src)}
	}
	return r, []agent.Option{agent.WithDRA(slicesAndClaims{src, claims})}
}

// slicesAndClaims is source "dra": the node's ResourceSlices and its pods'
// ResourceClaims. Claims that cannot be read (RBAC without resourceclaims,
// the API server down) are counted and take the source down: behind a
// kubelet without dynamic_resources their GPUs then read unattributed.
type slicesAndClaims struct {
	slices *dra.Source
	claims *dra.Claims
}

func (s slicesAndClaims) Health() (bool, []error) { return mergeHealth(s.slices, s.claims) }
