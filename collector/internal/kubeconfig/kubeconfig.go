// Package kubeconfig loads the API server configuration the pods and DRA
// sources share.
package kubeconfig

import (
	"fmt"
	"io"
	"os"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// MaxBytes bounds a kubeconfig file: a few clusters' certificates are tens
// of KiB.
const MaxBytes = 4 << 20

// Load returns the API server configuration of the kubeconfig file at
// path, read up to MaxBytes, or the in-cluster one (the pod's service
// account) when path is empty. A command that must not block on a FIFO
// reads the file itself and calls Parse.
func Load(path string) (*rest.Config, error) {
	if path == "" {
		rc, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("kubernetes client configuration: %w", err)
		}
		return rc, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client configuration: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("kubernetes client configuration: %w", err)
	}
	if len(data) > MaxBytes {
		return nil, fmt.Errorf("kubernetes client configuration: %s is larger than %d MiB", path, MaxBytes>>20)
	}
	return Parse(data, path, nil)
}

// Parse returns the API server configuration of kubeconfig data read from
// path (relative file names in it are relative to its directory). check,
// if not nil, is called first with each file the kubeconfig names that
// client-go reads on its own, as the configuration or the transport is
// built or again later (token file, certificate authority, client
// certificate and key), so that a command can refuse a FIFO or a device
// before client-go blocks on it; its error is Parse's.
func Parse(data []byte, path string, check func(file string) error) (*rest.Config, error) {
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client configuration: %w", err)
	}
	// As clientcmd.LoadFromFile does, for ResolveLocalPaths.
	for _, c := range cfg.Clusters {
		c.LocationOfOrigin = path
	}
	for _, a := range cfg.AuthInfos {
		a.LocationOfOrigin = path
	}
	for _, c := range cfg.Contexts {
		c.LocationOfOrigin = path
	}
	if err := clientcmd.ResolveLocalPaths(cfg); err != nil {
		return nil, fmt.Errorf("kubernetes client configuration: %w", err)
	}
	if check != nil {
		var files []string
		for _, c := range cfg.Clusters {
			files = append(files, c.CertificateAuthority)
		}
		for _, a := range cfg.AuthInfos {
			files = append(files, a.TokenFile, a.ClientCertificate, a.ClientKey)
		}
		for _, f := range files {
			if f == "" {
				continue
			}
			if err := check(f); err != nil {
				return nil, err
			}
		}
	}
	rc, err := clientcmd.NewDefaultClientConfig(*cfg, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes client configuration: %w", err)
	}
	return rc, nil
}
