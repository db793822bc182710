package nvml

import (
	"fmt"

	"github.com/gpuxray/gpuxray/collector"
)

// Config is the reader's configuration.
type Config struct {
	// IdleSource decides which activity source feeds a whole GPU's samples
	// when it has both: "samples" (NVML's utilization samples, "a kernel was
	// running") or "gpm" (GPM's SM activity, Hopper and newer). MIG instances
	// always use GPM where it exists: they have no utilization samples.
	IdleSource string
}

// DefaultConfig returns the reader's defaults.
func DefaultConfig() Config { return Config{IdleSource: collector.UtilizationSamples} }

// Validate returns one sentence naming a bad value.
func (c Config) Validate() error {
	switch c.IdleSource {
	case collector.UtilizationSamples, collector.UtilizationGPM:
		return nil
	}
	return fmt.Errorf("idle source %q is not one of samples, gpm", c.IdleSource)
}
