package nvml

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/collector"
)

// readProcessSamples appends to out the per-process utilization samples
// newer than lastSeen, oldest first, and returns how many it dropped for an
// absurd timestamp relative to clock's time when the call answered, as
// readSamples does, and how many for an absurd value: smUtil is a percent,
// and entries of 37100 beside stamps decades off are what the driver's
// table holds for processes that died badly (nvtop #110); such an entry
// says nothing about the process. (GetProcessesUtilizationInfo in go-nvml
// v0.13.4-1 never returns samples, so the older call is used.)
func readProcessSamples(h nvml.Device, lastSeen uint64, clock Clock, out []collector.ProcessSample) ([]collector.ProcessSample, int, int, nvml.Return) {
	raw, ret := processUtilization(h, lastSeen)
	if ret != nvml.SUCCESS {
		return nil, 0, 0, ret
	}
	lo, hi := stampBounds(clock.Now())
	slices.SortFunc(raw, func(a, b nvml.ProcessUtilizationSample) int { return cmp.Compare(a.TimeStamp, b.TimeStamp) })
	bad, absurd := 0, 0
	for _, p := range raw {
		if p.Pid == 0 && p.TimeStamp == 0 {
			continue // an empty slot of the driver's table
		}
		if p.TimeStamp != 0 && (p.TimeStamp < lo || p.TimeStamp > hi) {
			bad++
			continue
		}
		if p.SmUtil > 100 {
			absurd++
			continue
		}
		if p.TimeStamp <= lastSeen || p.Pid == 0 {
			continue
		}
		out = append(out, collector.ProcessSample{
			PID:   p.Pid,
			Time:  time.UnixMicro(int64(p.TimeStamp)),
			Value: float64(p.SmUtil) / 100,
		})
	}
	if len(out) == 0 {
		return nil, bad, absurd, nvml.ERROR_NOT_FOUND
	}
	return out, bad, absurd, nvml.SUCCESS
}

// processUtilization calls GetProcessUtilization. go-nvml v0.13.4-1 asks
// the table's size, allocates that, asks again, and slices its buffer to
// the count the second call answers without looking at its code: a table
// that grew between the two calls, answered INSUFFICIENT_SIZE with the new
// count, panics in go-nvml (slice bounds). nvml.h says the second call
// writes what fits, but does not list INSUFFICIENT_SIZE among its codes
// either way; the panic is taken for that answer, and the next read asks
// again.
func processUtilization(h nvml.Device, lastSeen uint64) (raw []nvml.ProcessUtilizationSample, ret nvml.Return) {
	defer func() {
		if p := recover(); p != nil {
			raw, ret = nil, nvml.ERROR_INSUFFICIENT_SIZE
		}
	}()
	return h.GetProcessUtilization(lastSeen)
}

// valueNotAvailable is NVML_VALUE_NOT_AVAILABLE ((-1) in nvml.h) in an
// unsigned long long: a process's usedGpuMemory is that under WDDM and,
// on some drivers, for a process whose memory the caller may not read.
const valueNotAvailable = math.MaxUint64

// processList is one of NVML's process lists.
type processList struct {
	name string
	call func(nvml.Device) ([]nvml.ProcessInfo, nvml.Return)
}

// The process lists a device is read with. A process with a compute and a
// graphics context is in both; MPS clients are in the MPS list, their
// server in the compute list (nvml.h, nvmlDeviceGetMPSComputeRunningProcesses_v3).
var (
	computeList  = processList{"compute", nvml.Device.GetComputeRunningProcesses}
	mpsList      = processList{"mps", nvml.Device.GetMPSComputeRunningProcesses}
	graphicsList = processList{"graphics", nvml.Device.GetGraphicsRunningProcesses}
)

// listState is what the reader keeps of one process list of one device.
type listState struct {
	// unsupported is set once the list answered NOT_SUPPORTED; denied once
	// it answered NO_PERMISSION, which is said once and not asked again
	// until the devices are enumerated anew.
	unsupported, denied bool
	// garbled is set once a list that did not decode was logged.
	garbled bool
}

// plausibleEntry reports whether a process entry can be what NVML wrote for d:
// nvml.h sets both instance IDs to 0xFFFFFFFF unless MIG is enabled, and a
// MIG device lists only its own GPU instance's processes.
func plausibleEntry(d *device, p nvml.ProcessInfo) bool {
	switch {
	case d.mig:
		return d.info.GPUInstance < 0 || p.GpuInstanceId == uint32(d.info.GPUInstance)
	case d.info.MIGEnabled:
		return p.GpuInstanceId < migMaxInstances && p.ComputeInstanceId < migMaxInstances
	default:
		return p.GpuInstanceId == math.MaxUint32 && p.ComputeInstanceId == math.MaxUint32
	}
}

// migMaxInstances bounds GPU and compute instance IDs: a GPU has at most
// seven GPU instances (IDs up to 14 on A100 and H100, whose IDs skip) and
// as many compute instances.
const migMaxInstances = 32

// processesResult is one read of a device's process lists.
type processesResult struct {
	procs []collector.Process
	// ok says every list that could be read was: the processes are all
	// there, with their memory (or its absence) said.
	ok bool
	// failed are the lists' failures (reason, code), bad the lists that did
	// not decode, denied the lists that answered NO_PERMISSION for the
	// first time.
	failed []nvml.Return
	bad    []string
	denied []string
}

// readProcesses reads the compute, MPS and graphics processes of d into
// out, one entry per PID. A list the driver lacks, or has said it does not
// support or may not be read, is left out; one that fails or does not
// decode makes the result incomplete (ok false). A lost GPU ends the read.
func (r *Reader) readProcesses(d *device, out []collector.Process) processesResult {
	lists := [...]struct {
		list  processList
		have  bool
		state *listState
	}{
		{computeList, true, &d.lists[0]},
		{mpsList, r.caps.mps, &d.lists[1]},
		{graphicsList, r.caps.graphics, &d.lists[2]},
	}
	res := processesResult{procs: out[:0], ok: true}
	computeRead := false
	for _, l := range lists {
		if !l.have || l.state.unsupported || l.state.denied {
			continue
		}
		raw, ret := l.list.call(d.handle)
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_NOT_SUPPORTED:
			l.state.unsupported = true
			continue
		case nvml.ERROR_NO_PERMISSION:
			if !policyDenied(d) {
				res.ok = false
				res.failed = append(res.failed, ret)
				continue
			}
			l.state.denied = true
			res.denied = append(res.denied, l.list.name+" process list")
			continue
		default:
			res.ok = false
			res.failed = append(res.failed, ret)
			if lostGPU(ret) {
				return res
			}
			continue
		}
		if i := slices.IndexFunc(raw, func(p nvml.ProcessInfo) bool { return !plausibleEntry(d, p) }); i >= 0 {
			// Entries of another size than go-nvml's: every field after
			// the first entry is misread, PIDs included.
			res.ok = false
			res.bad = append(res.bad, l.list.name)
			if !l.state.garbled {
				l.state.garbled = true
				r.log.Warn("the driver's process list does not decode (entries of another struct size?); its processes and their memory are left out",
					zap.Int("gpu", d.info.GPU), zap.String("uuid", d.info.UUID), zap.String("list", l.list.name), zap.String("driver", r.caps.version),
					zap.Uint32("gpu_instance", raw[i].GpuInstanceId), zap.Uint32("compute_instance", raw[i].ComputeInstanceId))
			}
			continue
		}
		computeRead = computeRead || l.list.name == computeList.name
		for _, p := range raw {
			if p.Pid == 0 {
				continue
			}
			pr := collector.Process{PID: p.Pid, UsedMemoryBytes: p.UsedGpuMemory}
			if p.UsedGpuMemory == valueNotAvailable {
				pr.UsedMemoryBytes, pr.MemoryUnknown = 0, true
			}
			res.procs = append(res.procs, pr)
		}
	}
	if !computeRead {
		// Without the compute list, the processes are not all there.
		res.ok = false
	}
	res.procs = mergeByPID(res.procs)
	return res
}

// mergeByPID sorts procs by PID and keeps one entry per PID: a process in
// two lists (compute and graphics contexts) is one process, and each list
// says "all of the memory used by the application" (nvml.h), so its
// memory is the larger known figure, not the sum.
func mergeByPID(procs []collector.Process) []collector.Process {
	slices.SortFunc(procs, func(a, b collector.Process) int { return cmp.Compare(a.PID, b.PID) })
	out := procs[:0]
	for _, p := range procs {
		if n := len(out); n > 0 && out[n-1].PID == p.PID {
			q := &out[n-1]
			switch {
			case p.MemoryUnknown:
			case q.MemoryUnknown:
				*q = p
			default:
				q.UsedMemoryBytes = max(q.UsedMemoryBytes, p.UsedMemoryBytes)
			}
			continue
		}
		out = append(out, p)
	}
	return out
}

// staleGrace is how long after a PID was last in a process list its
// per-process samples are still taken: they are stamped up to seconds
// after the time they cover (go-nvml #51, nvtop #110: entries refreshed
// every 2-4 s), so a process that has just exited is still owed its last
// ones. The driver's ring holds about 20 s.
const staleGrace = 20 * time.Second

// markRunning records that procs were in the process lists at now, and
// forgets PIDs not seen for twice staleGrace.
func markRunning(seen map[uint32]time.Time, procs []collector.Process, now time.Time) {
	for _, p := range procs {
		seen[p.PID] = now
	}
	for pid, at := range seen {
		if now.Sub(at) > 2*staleGrace {
			delete(seen, pid)
		}
	}
}

// dropStale removes from samples those of PIDs that are not running: not
// in any process list within staleGrace before the sample. The driver
// keeps per-process entries of processes long gone (nvtop #110); such a
// PID resolves to no pod and would stop the device's time from being
// split by process. It returns the PIDs it dropped, sorted, in gone, and
// how many of them were not dropped the read before (prevGone).
func dropStale(samples []collector.ProcessSample, seen map[uint32]time.Time, prevGone, gone []uint32) ([]collector.ProcessSample, []uint32, int) {
	out := samples[:0]
	gone = gone[:0]
	for _, s := range samples {
		if at, ok := seen[s.PID]; ok && !s.Time.After(at.Add(staleGrace)) {
			out = append(out, s)
			continue
		}
		if _, dup := slices.BinarySearch(gone, s.PID); !dup {
			gone = append(gone, s.PID)
			slices.Sort(gone)
		}
	}
	fresh := 0
	for _, pid := range gone {
		if _, was := slices.BinarySearch(prevGone, pid); !was {
			fresh++
		}
	}
	return out, gone, fresh
}

// policyDenied reports whether a NO_PERMISSION answer of d is the
// driver's policy, asked once: memory and process queries of a GPU in MIG
// mode need privileges (nvml.h), which do not come while it stays in MIG
// mode. Elsewhere NO_PERMISSION is a failure of that call, counted each
// time, and the query asked again.
func policyDenied(d *device) bool { return d.info.MIGEnabled && !d.mig }

// deniedError is the one error a NO_PERMISSION answer is counted as.
func deniedError(d *device, what string) *collector.SourceError {
	why := "NVML answers memory and process queries of a GPU in MIG mode only to a privileged caller; its MIG instances are read instead"
	return collector.NewSourceError(collector.SourceNVML, "no_permission",
		fmt.Errorf("GPU %d %s: %s: %w (%s)", d.info.GPU, d.info.UUID, what, retError(nvml.ERROR_NO_PERMISSION), why))
}

// logDenied says once that a query of d is denied.
func (r *Reader) logDenied(d *device, what string) {
	r.log.Info("NVML denies a query of the GPU; it is not asked again until the GPUs are enumerated anew",
		zap.Int("gpu", d.info.GPU), zap.String("uuid", d.info.UUID), zap.String("query", what), zap.Bool("mig_enabled", d.info.MIGEnabled))
}
