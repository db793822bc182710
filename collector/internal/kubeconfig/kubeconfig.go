// Package kubeconfig loads the API server configuration the pods and DRA
// sources share.
package kubeconfig

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Load returns the API server configuration of the kubeconfig file at
// path, or the in-cluster one (the pod's service account) when path is
// empty.
func Load(path string) (*rest.Config, error) {
	var (
		rc  *rest.Config
		err error
	)
	if path != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", path)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client configuration: %w", err)
	}
	return rc, nil
}
