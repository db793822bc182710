package nvml

import (
	"fmt"

	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/collector"
)

// ErrReleased is the error a Read returns, once per Release, while NVML is
// released.
var ErrReleased = fmt.Errorf("NVML is released while the node is reconfigured")

// Release shuts NVML down until Reacquire, so that the node can be
// reconfigured: an initialised NVML holds /dev/nvidia* open, and the GPU
// Operator's MIG manager (nvidia-mig-parted) and driver upgrade (the
// driver container's unload of the kernel module) fail while any process
// does. Reads meanwhile read nothing: the engine counts the time as a gap,
// and what it counted stays counted. The first Read after a Release says so
// in its Errors (reason "released"), once.
//
// A read still blocked in an NVML call keeps NVML initialised (Shutdown
// under it would unload the code it returns to): Release then returns
// false, and NVML is shut down by the first Read, or Release, that finds
// no call in flight.
func (r *Reader) Release(reason string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.released {
		r.released, r.releaseReason, r.releaseSaid = true, reason, false
		r.log.Info("releasing NVML while the node is reconfigured; GPU time is a gap until it is taken back", zap.String("reason", reason))
	}
	return r.releaseLocked()
}

// releaseLocked shuts NVML down for Release when no call is in flight.
func (r *Reader) releaseLocked() bool {
	if !r.initialized {
		return true
	}
	if !r.quiet() {
		return false
	}
	r.shutdownLocked()
	r.reinit = false
	r.log.Info("NVML released")
	return true
}

// Reacquire ends a Release: the next Read initialises NVML and enumerates
// the GPUs anew (their MIG layout or driver may have changed).
func (r *Reader) Reacquire() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.released {
		return
	}
	r.released = false
	r.initBackoff, r.retryMax = reloadRetryMin, reloadRetryMax
	r.nextInit = r.clock.Now()
	r.log.Info("taking NVML back after the node's reconfiguration", zap.String("reason", r.releaseReason))
}

// Released reports whether NVML is released (Release without Reacquire).
func (r *Reader) Released() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.released
}

// releasedSnapshot is what Read returns while released: no device, and
// the release said once.
func (r *Reader) releasedSnapshot() collector.DeviceSnapshot {
	r.releaseLocked()
	snap := collector.DeviceSnapshot{At: r.clock.Now()}
	if !r.releaseSaid {
		r.releaseSaid = true
		snap.Errors = append(snap.Errors, collector.NewSourceError(collector.SourceNVML, "released", fmt.Errorf("%w: %s", ErrReleased, r.releaseReason)))
	}
	return snap
}
