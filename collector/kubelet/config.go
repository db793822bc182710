package kubelet

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Resource names gpuxray always reads, whatever the configuration adds.
const (
	ResourceGPU       = "nvidia.com/gpu"
	ResourceGPUShared = "nvidia.com/gpu.shared"
	// ResourceMIGPrefix starts the name of every MIG resource of the NVIDIA
	// device plugin's "mixed" strategy, e.g. "nvidia.com/mig-1g.10gb".
	ResourceMIGPrefix = "nvidia.com/mig-"
)

// Clock tells the time. The engine passes its own so that At stamps and the
// backoff window follow a virtual clock in replay and tests.
type Clock interface {
	Now() time.Time
}

// Config configures a Client.
type Config struct {
	// Socket is the absolute path of the kubelet's pod-resources socket.
	Socket string
	// Timeout bounds each call to the kubelet.
	Timeout time.Duration
	// MaxRecvBytes is the largest answer accepted. The kubelet sets no limit of
	// its own, and a dense node's answer exceeds gRPC's 4 MiB default.
	MaxRecvBytes int
	// ResourceNames are extended resources read in addition to nvidia.com/gpu,
	// nvidia.com/gpu.shared and nvidia.com/mig-*, matched exactly.
	ResourceNames []string
	// Clock stamps answers and times the backoff; nil means the real clock.
	Clock Clock
}

// DefaultConfig returns the configuration for a standard kubelet.
func DefaultConfig() Config {
	return Config{
		Socket:       "/var/lib/kubelet/pod-resources/kubelet.sock",
		Timeout:      5 * time.Second,
		MaxRecvBytes: 16 << 20,
	}
}

// Validate reports every problem of c, one sentence each.
func (c Config) Validate() error {
	var errs []error
	switch {
	case c.Socket == "":
		errs = append(errs, errors.New("the kubelet pod-resources socket path is empty"))
	case !filepath.IsAbs(c.Socket):
		errs = append(errs, fmt.Errorf("the kubelet pod-resources socket path %q is not absolute", c.Socket))
	}
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("the kubelet timeout must be positive, not %s", c.Timeout))
	}
	if c.MaxRecvBytes <= 0 {
		errs = append(errs, fmt.Errorf("the kubelet receive limit must be positive, not %d bytes", c.MaxRecvBytes))
	}
	for i, name := range c.ResourceNames {
		if strings.TrimSpace(name) == "" {
			errs = append(errs, fmt.Errorf("kubelet resource name %d is empty", i+1))
		}
	}
	return errors.Join(errs...)
}

// matches reports whether allocations of the resource name are GPU allocations.
func (c Config) matches(name string) bool {
	switch {
	case name == ResourceGPU, name == ResourceGPUShared, strings.HasPrefix(name, ResourceMIGPrefix):
		return true
	}
	return slices.Contains(c.ResourceNames, name)
}
