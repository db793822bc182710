// Package agent is gpuxray's engine: each poll it reads the devices and the
// allocations, joins them, and integrates allocated, idle and active seconds
// per device and per allocation. It is plain Go: time comes from an injected
// clock and readings from small interfaces, so a test can drive it poll by
// poll without sleeping.
package agent

import (
	"errors"
	"fmt"
	"time"
)

// Config is the engine's configuration.
type Config struct {
	// PollInterval is how often Run polls.
	PollInterval time.Duration
	// PollTimeout bounds one poll's source calls.
	PollTimeout time.Duration
	// IdleThreshold is the busy ratio below which a sample counts as idle.
	IdleThreshold float64
	// Retention is how long an ended allocation stays exported, so that its
	// last increments are scraped before its series go.
	Retention time.Duration
	// MaxSampleGap is the longest interval between two samples that the later
	// one is taken to cover. A longer interval (samples lost from the driver's
	// ring, a failed read) counts as a gap, not as idle.
	MaxSampleGap time.Duration
	// MaxAllocations caps the allocations (device × container) the engine
	// tracks, ended ones in retention included. Beyond it, new allocations are
	// folded into one series per device with pod="__overflow__" and counted,
	// so one tenant cannot blow up Prometheus.
	MaxAllocations int
	// Windows splits time into peak and off-peak windows; nil puts all time
	// off-peak.
	Windows Windows
	// StaleGrace is how long the allocations of the kubelet's last good
	// answer keep being credited while it cannot be read. Beyond it, the
	// devices' time is counted as unattributed: no longer anyone's, but
	// still observed.
	StaleGrace time.Duration
}

// DefaultConfig returns the defaults of the agent's flags.
func DefaultConfig() Config {
	return Config{
		PollInterval:   time.Second,
		PollTimeout:    5 * time.Second,
		IdleThreshold:  0.05,
		Retention:      10 * time.Minute,
		MaxSampleGap:   2 * time.Second,
		MaxAllocations: 2000,
		StaleGrace:     2 * time.Minute,
	}
}

// Validate reports every problem of c, one sentence each.
func (c Config) Validate() error {
	var errs []error
	if c.PollInterval < 10*time.Millisecond {
		errs = append(errs, fmt.Errorf("poll interval %s is too short (at least 10ms)", c.PollInterval))
	}
	if c.PollTimeout <= 0 {
		errs = append(errs, fmt.Errorf("poll timeout %s must be positive", c.PollTimeout))
	}
	if !(c.IdleThreshold > 0 && c.IdleThreshold <= 1) {
		errs = append(errs, fmt.Errorf("idle threshold %g must be a ratio in (0, 1]", c.IdleThreshold))
	}
	if c.Retention < 0 {
		errs = append(errs, fmt.Errorf("retention %s must not be negative", c.Retention))
	}
	if c.MaxAllocations < 1 {
		errs = append(errs, fmt.Errorf("max allocations %d must be at least 1", c.MaxAllocations))
	}
	if c.MaxSampleGap <= 0 {
		errs = append(errs, fmt.Errorf("max sample gap %s must be positive", c.MaxSampleGap))
	}
	if c.StaleGrace < 0 {
		errs = append(errs, fmt.Errorf("kubelet stale grace %s must not be negative", c.StaleGrace))
	}
	return errors.Join(errs...)
}
