package nvml

import (
	"fmt"
	"time"

	"github.com/gpuxray/gpuxray/collector"
)

// Config is the reader's configuration.
type Config struct {
	// IdleSource decides which activity source feeds a whole GPU's samples
	// when it has both: "samples" (NVML's utilization samples, "a kernel was
	// running") or "gpm" (GPM's GRAPHICS_UTIL, the time an app was active, Hopper and newer). MIG instances
	// always use GPM where it exists: they have no utilization samples.
	IdleSource string
	// CallTimeout is how long a read waits for one device's NVML calls; a
	// device whose calls take longer is left out and counted as hung until
	// they return (NVML calls cannot be cancelled).
	CallTimeout time.Duration
	// HeldCalls, when set, counts the NVML calls the library itself holds
	// (a simulated driver's hang fault, on the virtual clock of a replay).
	// A read in flight is then given up on only once every read in flight
	// is held, however long the host takes to run the others, and
	// CallTimeout is not used: on a virtual clock a read that a busy host
	// has not run yet is late, not hung, and giving up on it loses the
	// samples the clock moves past meanwhile.
	HeldCalls func() int
}

// DefaultConfig returns the reader's defaults.
func DefaultConfig() Config {
	return Config{IdleSource: collector.UtilizationSamples, CallTimeout: 2 * time.Second}
}

// Validate returns one sentence naming a bad value.
func (c Config) Validate() error {
	switch c.IdleSource {
	case collector.UtilizationSamples, collector.UtilizationGPM:
	default:
		return fmt.Errorf("idle source %q is not one of samples, gpm", c.IdleSource)
	}
	if c.CallTimeout <= 0 {
		return fmt.Errorf("NVML call timeout %s must be positive", c.CallTimeout)
	}
	return nil
}
