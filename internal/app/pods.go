package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
	"k8s.io/client-go/rest"

	"github.com/gpuxray/gpuxray/agent"
	"github.com/gpuxray/gpuxray/collector/pods"
	"github.com/gpuxray/gpuxray/collector/proc"
	"github.com/gpuxray/gpuxray/collector/workload"
)

// syncTimeout bounds how long the agent waits for the first list of the
// node's pods before it starts polling: waiting avoids series that first
// appear without workload and model, then again with them.
const syncTimeout = 10 * time.Second

// identityConfig is the identity flags as given.
type identityConfig struct {
	extraLabels string
	modelKeys   string
}

func identityFlags(fs *flag.FlagSet, c *identityConfig) {
	fs.StringVar(&c.extraLabels, "pods.extra-labels", "", "extra labels on allocation series from pod labels, name=pod-label-key, comma-separated (e.g. team=team,cost_center=billing/cost-center)")
	fs.StringVar(&c.modelKeys, "pods.model-keys", strings.Join(workload.DefaultModelKeys, ","), "pod labels and annotations that name a pod's model, first present wins; else the model is read from the GPU process's command line")
}

// identity checks the identity flags and returns what they say; errors are
// usage errors.
func (c identityConfig) identity() (Identity, error) {
	extra, err := workload.ParseExtraLabels(c.extraLabels)
	if err != nil {
		return Identity{}, usagef("--pods.extra-labels: %v", err)
	}
	return Identity{ModelKeys: splitList(c.modelKeys), ExtraLabels: extra}, nil
}

// Identity is how pods are named beyond pod-resources: the pod labels and
// annotations that name a pod's model, and the extra labels taken from pod
// labels (series label name → pod label key).
type Identity struct {
	ModelKeys   []string
	ExtraLabels map[string]string
}

// LabelNames are the extra label names, in the order the series carry them.
func (id Identity) LabelNames() []string {
	names := make([]string, 0, len(id.ExtraLabels))
	for n := range id.ExtraLabels {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// podSourceConfig is the node's pod source: the API server's pods of this
// node, and the host's /proc for per-process attribution.
type podSourceConfig struct {
	enabled    bool
	nodeName   string
	kubeconfig string
	procRoot   string

	// rest is the API server's configuration, read by loadAPI; nil when
	// it cannot be had (no kubeconfig, not in a cluster).
	rest *rest.Config
	// restErr says why rest is nil.
	restErr error
}

func podSourceFlags(fs *flag.FlagSet, c *podSourceConfig) {
	fs.BoolVar(&c.enabled, "pods.enabled", true, "watch this node's pods through the API server (needs --node.name): workload, model and extra labels, terminal pods, and per-process attribution on shared GPUs")
	fs.StringVar(&c.nodeName, "node.name", os.Getenv("NODE_NAME"), "this node's name, from the downward API (spec.nodeName); defaults to $NODE_NAME")
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig to reach the API server with; empty means in-cluster")
	fs.StringVar(&c.procRoot, "proc.root", proc.DefaultConfig().Root, "the host's /proc (the pod needs hostPID, or mount the host's /proc here) for per-process attribution")
}

// config is the pod source's configuration, for the identity id; the
// API server's is added once read (loadAPI).
func (c podSourceConfig) config(id Identity) pods.Config {
	cfg := pods.DefaultConfig(c.nodeName)
	cfg.Kubeconfig, cfg.ModelKeys, cfg.ExtraLabels = c.kubeconfig, id.ModelKeys, id.ExtraLabels
	return cfg
}

// validate checks what can be checked before start-up; errors are usage
// errors.
func (c podSourceConfig) validate() error {
	if err := (proc.Config{Root: c.procRoot}).Validate(); err != nil {
		return usageError{err}
	}
	if c.kubeconfig != "" {
		if _, err := os.Stat(c.kubeconfig); err != nil {
			return usagef("the kubeconfig %q cannot be read: %v", c.kubeconfig, err)
		}
	}
	return nil
}

// loadAPI reads the API server's configuration, once, for the pod and DRA
// sources: --kubeconfig (up to maxConfigBytes, until ctx is done, with
// each file it names checked as checkFile does; a bad one is a usage
// error), else the in-cluster one (its failure is only logged by the
// sources: the agent then runs without them).
func (c *podSourceConfig) loadAPI(ctx context.Context) error {
	if c.kubeconfig == "" {
		c.rest, c.restErr = pods.InClusterConfig()
		return nil
	}
	data, err := ReadFile(ctx, c.kubeconfig, "kubeconfig", maxConfigBytes)
	if err != nil {
		return err
	}
	rc, err := pods.ParseKubeconfig(data, c.kubeconfig, func(file string) error {
		return checkFile(file, "--kubeconfig: the file", maxConfigBytes)
	})
	var ue usageError
	switch {
	case errors.As(err, &ue):
		return err
	case err != nil:
		return usagef("--kubeconfig %q: %v", c.kubeconfig, err)
	}
	c.rest = rc
	return nil
}

// ensureAPI calls loadAPI unless it has been called: the agent's build
// reads the configuration before anything starts; a caller that starts a
// source alone reads it here.
func (c *podSourceConfig) ensureAPI(ctx context.Context) error {
	if c.rest != nil || c.restErr != nil {
		return nil
	}
	return c.loadAPI(ctx)
}

// startPodSource starts the pod source and the PriorityClass watch in g
// and returns the engine options that use them and the PriorityClasses to
// export, or none (logged) when the agent runs without a pod source:
// disabled, no node name, or no way to reach the API server. A
// configuration that cannot work (an unreadable kubeconfig, a relative
// /proc) is a usage error.
func startPodSource(ctx context.Context, c podSourceConfig, id Identity, logger *zap.Logger, run func(func() error)) ([]agent.Option, *pods.PriorityClasses, *pods.Source, error) {
	if !c.enabled {
		return nil, nil, nil, nil
	}
	if c.nodeName == "" {
		logger.Info("no pod source: --node.name (or $NODE_NAME) is not set; workloads, models and per-process attribution are off")
		return nil, nil, nil, nil
	}
	procCfg := proc.Config{Root: c.procRoot}
	cfg := c.config(id) // checked by agentConfig.Validate
	if err := c.ensureAPI(ctx); err != nil {
		return nil, nil, nil, err
	}
	cfg.REST = c.rest
	if c.rest == nil {
		logger.Warn("no pod source: the API server cannot be reached from here; workloads, models and per-process attribution are off", zap.Error(c.restErr))
		return nil, nil, nil, nil
	}
	client, err := pods.NewClient(cfg)
	if err != nil {
		logger.Warn("no pod source: the API server cannot be reached from here; workloads, models and per-process attribution are off", zap.Error(err))
		return nil, nil, nil, nil
	}
	src, err := pods.New(cfg, client, logger.Named("pods"))
	if err != nil {
		return nil, nil, nil, usageError{err}
	}
	classClient, err := pods.NewPriorityClassClient(cfg)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("priority classes: %w", err)
	}
	classes, err := pods.NewPriorityClasses(classClient, 0, logger.Named("pods"))
	if err != nil {
		return nil, nil, nil, err
	}
	run(func() error { return classes.Run(ctx) })
	startAndSync(ctx, src, "the node's pods", logger, run)
	return []agent.Option{agent.WithPods(podsAndClasses{src, classes}), agent.WithProcesses(proc.New(procCfg, logger.Named("proc")))}, classes, src, nil
}

// syncer is a watch that runs until its context ends and says when its
// first list is in.
type syncer interface {
	Run(ctx context.Context) error
	WaitForSync(ctx context.Context) bool
}

// startAndSync runs src in run and waits up to syncTimeout for its first
// list, logging (not failing) when it is late: polling then starts without
// it and picks it up when it arrives.
func startAndSync(ctx context.Context, src syncer, what string, logger *zap.Logger, run func(func() error)) {
	run(func() error { return src.Run(ctx) })
	wctx, cancel := context.WithTimeout(ctx, syncTimeout)
	defer cancel()
	if !src.WaitForSync(wctx) {
		logger.Warn(what+" are not listed yet; polling starts without them", zap.Duration("waited", syncTimeout))
	}
}

// splitList splits a comma-separated flag value, dropping blanks.
func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// podsAndClasses is the pod source with the PriorityClass watch: one
// source, "pods", up while both are and failing with either's failures.
type podsAndClasses struct {
	*pods.Source
	classes *pods.PriorityClasses
}

// Health merges the two watches' health.
func (p podsAndClasses) Health() (bool, []error) { return mergeHealth(p.Source, p.classes) }

// healther is a watch that reports its health.
type healther interface{ Health() (bool, []error) }

// mergeHealth is a and b as one source: up while both are, with both's
// failures.
func mergeHealth(a, b healther) (bool, []error) {
	up, errs := a.Health()
	bup, berrs := b.Health()
	return up && bup, append(errs, berrs...)
}
