package dra

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Defaults: NVIDIA's DRA driver, and the attribute it names each GPU's and
// MIG device's NVML UUID with.
const (
	DefaultDriver        = "gpu.nvidia.com"
	DefaultUUIDAttribute = "uuid"
)

// Config configures a Source and a Resolver.
type Config struct {
	// NodeName is the node whose ResourceSlices are watched
	// (spec.nodeName), from the downward API.
	NodeName string
	// Drivers are the DRA drivers whose devices are GPUs. Devices of other
	// drivers (a NIC's, an FPGA's) are ignored, and counted.
	Drivers []string
	// UUIDAttribute is the device attribute that holds the NVML UUID. An
	// unqualified name also matches the driver-qualified one: "uuid" is
	// "gpu.nvidia.com/uuid" for that driver.
	UUIDAttribute string
	// APITimeout bounds one list, and the wait for a watch's answer (0 is
	// listwatch.DefaultCallTimeout).
	APITimeout time.Duration
}

// DefaultConfig returns the configuration for NVIDIA's DRA driver on node
// nodeName.
func DefaultConfig(nodeName string) Config {
	return Config{NodeName: nodeName, Drivers: []string{DefaultDriver}, UUIDAttribute: DefaultUUIDAttribute}
}

// Validate reports every problem of c, one sentence each.
func (c Config) Validate() error {
	var errs []error
	if c.NodeName == "" {
		errs = append(errs, errors.New("NODE_NAME is empty: set it from the downward API (spec.nodeName)"))
	}
	if len(c.Drivers) == 0 {
		errs = append(errs, errors.New("no DRA driver is named: give at least one, e.g. gpu.nvidia.com"))
	}
	for _, d := range c.Drivers {
		if msgs := validation.IsDNS1123Subdomain(d); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("DRA driver name %q is not a DNS subdomain such as gpu.nvidia.com", d))
		}
	}
	if err := validAttribute(c.UUIDAttribute); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// validAttribute checks a device attribute name as resource.k8s.io defines
// it: a C identifier of at most 32 characters, optionally prefixed by a DNS
// subdomain and a slash.
func validAttribute(name string) error {
	domain, id, qualified := strings.Cut(name, "/")
	if !qualified {
		domain, id = "", name
	}
	ok := id != "" && len(id) <= 32 && validation.IsCIdentifier(id) == nil
	if qualified && len(validation.IsDNS1123Subdomain(domain)) > 0 {
		ok = false
	}
	if !ok {
		return fmt.Errorf("the UUID attribute %q is not a device attribute name such as uuid or gpu.nvidia.com/uuid", name)
	}
	return nil
}

// isDriver reports whether devices of driver are GPUs to resolve.
func (c Config) isDriver(driver string) bool { return slices.Contains(c.Drivers, driver) }

// uuidKeys are the attribute names that hold the UUID of driver's devices:
// "uuid" and "<driver>/uuid" name the same attribute in driver's slices.
func (c Config) uuidKeys(driver string) []string {
	domain, id, qualified := strings.Cut(c.UUIDAttribute, "/")
	switch {
	case !qualified:
		return []string{c.UUIDAttribute, driver + "/" + c.UUIDAttribute}
	case domain == driver:
		return []string{c.UUIDAttribute, id}
	}
	return []string{c.UUIDAttribute}
}
