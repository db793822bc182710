package sim

import (
	"time"
)

// Shapes of the simulated driver where real drivers differ or nvml.h leaves
// the behaviour open (the scenario's `driver` key); docs/simulator.md cites the
// sources of each.
const (
	// ProcessSamplesPerRead answers GetProcessUtilization with one entry
	// per process, stamped at the process's latest refresh (every
	// Driver.ProcessRefresh, on a phase of its own) and valued over the
	// refreshes newer than the caller's lastSeenTimeStamp, as real drivers
	// do (go-nvml #51, nvtop #110).
	ProcessSamplesPerRead = "per-read"
	// ProcessSamplesPerPeriod answers with one entry per process per
	// utilization sample period, stamped on the device's sample grid:
	// the simulator's shape before it was read against real output.
	ProcessSamplesPerPeriod = "per-period"

	// SampleClockUnix stamps samples in microseconds of Unix time.
	SampleClockUnix = "unix"
	// SampleClockBoot stamps samples in microseconds since the node
	// booted (BootTime), as drivers on Grace hosts have been seen to.
	SampleClockBoot = "boot"
)

// DefaultProcessRefresh is how often the simulated driver refreshes a
// process's utilization entry unless the scenario says.
const DefaultProcessRefresh = 2 * time.Second

// Driver is how the simulated driver behaves where the sources leave a
// choice: the scenario's `driver` key. Its zero value is the default.
type Driver struct {
	// ProcessSamples is ProcessSamplesPerRead (the default, also for "")
	// or ProcessSamplesPerPeriod.
	ProcessSamples string
	// ProcessRefresh is how often a process's per-read entry is refreshed;
	// DefaultProcessRefresh for 0.
	ProcessRefresh time.Duration
	// SampleClock is the clock of every sample stamp the driver hands out
	// and of the lastSeenTimeStamp it is given: SampleClockUnix (the
	// default, also for "") or SampleClockBoot.
	SampleClock string
	// DryWhenIdle is set by `idle_samples: false`: the utilization sample
	// ring runs dry while the GPU is idle. A period with no activity
	// leaves no sample, and GetSamples answers ERROR_NOT_FOUND when no
	// period since lastSeen was busy. By default every period leaves one.
	DryWhenIdle bool
}

// perPeriod reports whether process samples come one per sample period.
func (dr Driver) perPeriod() bool { return dr.ProcessSamples == ProcessSamplesPerPeriod }

// refresh is how often a process's per-read entry is refreshed.
func (dr Driver) refresh() time.Duration {
	if dr.ProcessRefresh <= 0 {
		return DefaultProcessRefresh
	}
	return dr.ProcessRefresh
}

// bootClock reports whether stamps count from the node's boot.
func (dr Driver) bootClock() bool { return dr.SampleClock == SampleClockBoot }

// driverShapes checks the shape keys of the driver mapping into
// s.Driver, starting from the defaults.
func (d *validator) driverShapes(spec *ScenarioSpec, s *Scenario) error {
	s.Driver = Driver{ProcessSamples: ProcessSamplesPerRead, ProcessRefresh: DefaultProcessRefresh, SampleClock: SampleClockUnix}
	ds := spec.Driver
	if ds == nil {
		return nil
	}
	if d.has("driver.process_samples") {
		if err := d.oneOf("driver.process_samples", ds.ProcessSamples, ProcessSamplesPerRead, ProcessSamplesPerPeriod); err != nil {
			return err
		}
		s.Driver.ProcessSamples = ds.ProcessSamples
	}
	if d.has("driver.sample_clock") {
		if err := d.oneOf("driver.sample_clock", ds.SampleClock, SampleClockUnix, SampleClockBoot); err != nil {
			return err
		}
		s.Driver.SampleClock = ds.SampleClock
	}
	if d.has("driver.process_refresh") {
		s.Driver.ProcessRefresh = time.Duration(ds.ProcessRefresh)
		if s.Driver.ProcessRefresh < SamplePeriod || s.Driver.ProcessRefresh > time.Minute {
			return d.errf("driver.process_refresh", "%s is not from one sample period (%s) to 1m", d.byPath["driver.process_refresh"].Value, SamplePeriod)
		}
	}
	if ds.IdleSamples != nil {
		s.Driver.DryWhenIdle = !bool(*ds.IdleSamples)
	}
	return nil
}

// BootTime is when the simulated node booted (bootUptime before the start,
// as its processes' start times in /proc say): the origin of its sample
// stamps under the boot-time sample clock.
func (s *Scenario) BootTime() time.Time { return s.Start.Add(-bootUptime) }
