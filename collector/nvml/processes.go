package nvml

import (
	"cmp"
	"slices"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuxray/gpuxray/collector"
)

// readProcessSamples appends to out the per-process utilization samples
// newer than lastSeen, oldest first, and returns how many it dropped for an absurd timestamp
// relative to clock's time when the call answered, as readSamples does.
// (GetProcessesUtilizationInfo in go-nvml v0.13.4-1 never returns samples,
// so the older call is used.)
func readProcessSamples(h nvml.Device, lastSeen uint64, clock Clock, out []collector.ProcessSample) ([]collector.ProcessSample, int, nvml.Return) {
	raw, ret := h.GetProcessUtilization(lastSeen)
	if ret != nvml.SUCCESS {
		return nil, 0, ret
	}
	lo, hi := stampBounds(clock.Now())
	slices.SortFunc(raw, func(a, b nvml.ProcessUtilizationSample) int { return cmp.Compare(a.TimeStamp, b.TimeStamp) })
	bad := 0
	for _, p := range raw {
		if p.TimeStamp != 0 && (p.TimeStamp < lo || p.TimeStamp > hi) {
			bad++
			continue
		}
		if p.TimeStamp <= lastSeen || p.Pid == 0 {
			continue
		}
		out = append(out, collector.ProcessSample{
			PID:   p.Pid,
			Time:  time.UnixMicro(int64(p.TimeStamp)),
			Value: min(float64(p.SmUtil)/100, 1),
		})
	}
	if len(out) == 0 {
		return nil, bad, nvml.ERROR_NOT_FOUND
	}
	return out, bad, nvml.SUCCESS
}
