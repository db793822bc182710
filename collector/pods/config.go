package pods

import (
	"errors"
	"fmt"
	"os"
	"slices"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

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

// NewClient builds a clientset for c: from c.Kubeconfig, or in-cluster.
// Pods are read as protobuf, which the API server encodes and the agent
// decodes at a fraction of JSON's cost.
func NewClient(c Config) (kubernetes.Interface, error) {
	var (
		rc  *rest.Config
		err error
	)
	if c.Kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client configuration: %w", err)
	}
	rc = rest.CopyConfig(rc)
	rc.UserAgent = "gpuxray"
	rc.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	rc.ContentType = "application/vnd.kubernetes.protobuf"
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return cs, nil
}
