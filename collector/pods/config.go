package pods

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"k8s.io/client-go/rest"

	"github.com/gpuxray/gpuxray/collector/workload"
)

// Config configures a Source.
type Config struct {
	// NodeName is the node whose pods are watched (spec.nodeName), from the
	// downward API.
	NodeName string
	// Kubeconfig is a kubeconfig file to reach the API server with; empty
	// means in-cluster (the pod's service account).
	Kubeconfig string
	// REST, when set, is the API server's configuration, and Kubeconfig is
	// not read: a command reads its kubeconfig once, within bounds
	// (kubeconfig.Parse).
	REST *rest.Config
	// ModelKeys are the pod labels and annotations that name a pod's model,
	// first present wins (workload.ModelFromLabels).
	ModelKeys []string
	// ExtraLabels maps extra Prometheus label names to the pod label keys
	// whose values they carry (workload.ParseExtraLabels).
	ExtraLabels map[string]string
	// MaxPods bounds the pods kept (0 is DefaultMaxPods); beyond, pods are
	// refused and counted (reason too_many).
	MaxPods int
	// APITimeout bounds one list, and the wait for a watch's answer (0 is
	// listwatch.DefaultCallTimeout).
	APITimeout time.Duration
}

// DefaultConfig returns the configuration of an agent on node nodeName,
// in-cluster, with workload.DefaultModelKeys.
func DefaultConfig(nodeName string) Config {
	return Config{NodeName: nodeName, ModelKeys: slices.Clone(workload.DefaultModelKeys)}
}

// Validate reports the problem of c in one sentence, or nil.
func (c Config) Validate() error {
	if c.NodeName == "" {
		return errors.New("NODE_NAME is empty: set it from the downward API (spec.nodeName)")
	}
	if c.Kubeconfig != "" {
		if _, err := os.Stat(c.Kubeconfig); err != nil {
			return fmt.Errorf("the kubeconfig %q cannot be read: %w", c.Kubeconfig, err)
		}
	}
	if c.MaxPods < 0 {
		return fmt.Errorf("the pod bound %d must not be negative (0 is the default, %d)", c.MaxPods, DefaultMaxPods)
	}
	for name, key := range c.ExtraLabels {
		if _, err := workload.ParseExtraLabels(name + "=" + key); err != nil {
			return err
		}
	}
	return nil
}

// Bounds of the pods kept.
const (
	// DefaultMaxPods is how many pods a Source keeps: a kubelet runs at
	// most --max-pods (110 by default; 250 on the largest managed node
	// types, 737 on EKS with prefix delegation), and a node also lists its
	// terminated pods until they are collected.
	DefaultMaxPods = 2000
	// DefaultMaxPriorityClasses is how many PriorityClasses are kept, and
	// exported: a cluster has a handful.
	DefaultMaxPriorityClasses = 200
	// MaxContainers bounds the container statuses of a pod that is kept:
	// beyond, the pod is refused (too_large) rather than kept at a size
	// no real pod has.
	MaxContainers = 256
)

func (c Config) maxPods() int {
	if c.MaxPods > 0 {
		return c.MaxPods
	}
	return DefaultMaxPods
}
