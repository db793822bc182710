package pods

import (
	"errors"
	"fmt"
	"os"
	"slices"

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
	// ModelKeys are the pod labels and annotations that name a pod's model,
	// first present wins (workload.ModelFromLabels).
	ModelKeys []string
	// ExtraLabels maps extra Prometheus label names to the pod label keys
	// whose values they carry (workload.ParseExtraLabels).
	ExtraLabels map[string]string
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
	for name, key := range c.ExtraLabels {
		if _, err := workload.ParseExtraLabels(name + "=" + key); err != nil {
			return err
		}
	}
	return nil
}
