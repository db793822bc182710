// Package node watches the agent's own Node object for the labels with
// which NVIDIA's GPU Operator announces that it is about to change the
// node's MIG layout or reload its driver, so that the agent lets go of NVML
// (which holds /dev/nvidia* open) until it is done.
//
// What is watched, and why (each from the component's source):
//
//   - nvidia.com/mig.config.state = pending or rebooting: the MIG manager
//     sets pending before it stops the GPU clients and applies the layout
//     with nvidia-mig-parted, and success or failed after
//     (NVIDIA/mig-parted, deployments/gpu-operator/reconfigure-mig.sh);
//     rebooting while the node reboots for a mode change.
//   - nvidia.com/gpu-driver-upgrade-state = pod-restart-required or
//     post-maintenance-required: the upgrade controller restarts the driver
//     pod, which unloads the kernel module, in these states; drain and
//     pod deletion come before, validation-required (the new driver is
//     loaded) after (NVIDIA/k8s-operator-libs, pkg/upgrade/consts.go at
//     11e747a5, UpgradeStateLabelKeyFmt "nvidia.com/%s-driver-upgrade-state"
//     with "gpu").
//   - any nvidia.com/gpu.deploy.<component> label whose value says
//     paused-for-…: the driver manager moves them from "true" to
//     paused-for-driver-upgrade on every driver pod start, upgrade or not,
//     and waits for those clients to end before it unloads the driver
//     (NVIDIA/k8s-driver-manager, cmd/driver-manager/main.go at bd62ca7d:
//     pausedStr, maybeSetPaused, including nvidia.com/gpu.deploy.client
//     for third-party clients); newer MIG managers set paused-for-mig-change
//     (NVIDIA/mig-parted, deployments/gpu-operator/labels.go).
//
// The node is read with one GET every interval (its metadata only), which
// needs RBAC get on nodes; a failed GET changes nothing.
package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
	"k8s.io/client-go/rest"

	"github.com/gpuxray/gpuxray/collector/internal/kubeconfig"
)

// The labels watched; see the package documentation.
const (
	LabelMIGConfigState     = "nvidia.com/mig.config.state"
	LabelDriverUpgradeState = "nvidia.com/gpu-driver-upgrade-state"
	LabelDeployPrefix       = "nvidia.com/gpu.deploy."
)

// Reconfiguring says whether labels announce a reconfiguration of the
// node's GPUs, and which label says so ("" when none does). Labels are
// judged in a fixed order, so the reason is stable.
func Reconfiguring(labels map[string]string) (bool, string) {
	switch v := labels[LabelMIGConfigState]; v {
	case "pending", "rebooting":
		return true, LabelMIGConfigState + "=" + v
	}
	switch v := labels[LabelDriverUpgradeState]; v {
	case "pod-restart-required", "post-maintenance-required":
		return true, LabelDriverUpgradeState + "=" + v
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		if strings.HasPrefix(k, LabelDeployPrefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		if strings.Contains(labels[k], "paused-for-") {
			return true, k + "=" + labels[k]
		}
	}
	return false, ""
}

// Config is the watch's configuration.
type Config struct {
	// Name is the node's name (--node.name).
	Name string
	// Kubeconfig is a kubeconfig file, empty for in-cluster.
	Kubeconfig string
	// Interval is how often the node is read; 0 turns the watch off.
	Interval time.Duration
	// Timeout bounds one read.
	Timeout time.Duration
}

// DefaultConfig returns the defaults for node name.
func DefaultConfig(name string) Config {
	return Config{Name: name, Interval: 10 * time.Second, Timeout: 5 * time.Second}
}

// Validate returns one sentence naming a bad value.
func (c Config) Validate() error {
	switch {
	case c.Interval < 0:
		return fmt.Errorf("node watch interval %s is negative", c.Interval)
	case c.Interval > 0 && c.Interval < time.Second:
		return fmt.Errorf("node watch interval %s is below 1s; the API server is asked once per interval", c.Interval)
	case c.Timeout <= 0:
		return fmt.Errorf("node watch timeout %s must be positive", c.Timeout)
	}
	return nil
}

// Source reads the node's labels.
type Source interface {
	Labels(ctx context.Context) (map[string]string, error)
}

// Client reads a Node's labels from the API server.
type Client struct {
	http *http.Client
	url  string
}

// NewClient returns a client for the node of c, through the API server
// c.Kubeconfig (or the pod's service account) reaches.
func NewClient(c Config) (*Client, error) {
	rc, err := kubeconfig.Load(c.Kubeconfig)
	if err != nil {
		return nil, err
	}
	return NewClientFor(rc, c.Name)
}

// NewClientFor returns a client of node name through rc.
func NewClientFor(rc *rest.Config, name string) (*Client, error) {
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	base, _, err := rest.DefaultServerUrlFor(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return &Client{http: hc, url: strings.TrimRight(base.String(), "/") + "/api/v1/nodes/" + url.PathEscape(name)}, nil
}

// partialMetadata asks for the node's metadata only, as a
// PartialObjectMetadata (a Node carries its images and status, kilobytes
// of them); an API server that cannot answers the whole Node, whose
// metadata reads the same.
const partialMetadata = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"

// Labels GETs the node and returns its labels.
func (c *Client) Labels(ctx context.Context) (map[string]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", partialMetadata)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", c.url, resp.Status, strings.TrimSpace(string(body[:min(len(body), 200)])))
	}
	var obj struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(body, &obj); err != nil {
		return nil, fmt.Errorf("GET %s: %w", c.url, err)
	}
	return obj.Metadata.Labels, nil
}

// Releaser is what the watch releases: the NVML reader.
type Releaser interface {
	Release(reason string) bool
	Reacquire()
}

// releaseRetry is how soon a Release that found an NVML call in flight is
// tried again: the reconfiguration waits on it.
const releaseRetry = time.Second

// Watch reads the node every interval until ctx ends, and releases r while
// the node's labels announce a reconfiguration, taking it back after. A
// failed read is logged (once until one succeeds) and changes nothing.
func Watch(ctx context.Context, c Config, src Source, r Releaser, log *zap.Logger) error {
	if c.Interval <= 0 {
		return nil
	}
	released, failing := false, false
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		next := c.Interval
		rctx, cancel := context.WithTimeout(ctx, c.Timeout)
		labels, err := src.Labels(rctx)
		cancel()
		switch {
		case err != nil && ctx.Err() != nil:
			return nil
		case err != nil:
			if !failing {
				log.Warn("cannot read the node's labels; NVML is kept as it is until they can be read", zap.String("node", c.Name), zap.Error(err))
			}
			failing = true
		default:
			if failing {
				log.Info("the node's labels can be read again", zap.String("node", c.Name))
			}
			failing = false
			busy, why := Reconfiguring(labels)
			switch {
			case busy:
				released = true
				if !r.Release(why) {
					next = min(next, releaseRetry)
				}
			case released:
				released = false
				r.Reacquire()
			}
		}
		t.Reset(next)
	}
}
