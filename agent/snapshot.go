package agent

import (
	"maps"
	"time"

	"github.com/gpuxray/gpuxray/collector"
)

// Snapshot is the engine's state after one poll. Each poll publishes a new
// one and never modifies it after: the exporter renders it at scrape time
// without locks. Readers must not modify it either.
type Snapshot struct {
	// At is when the poll that made it finished.
	At time.Time
	// Polls is the number of polls completed.
	Polls   uint64
	Devices []DeviceSnapshot // sorted by GPU index, then UUID
	// Allocations are sorted by UUID, namespace, pod, container. A record
	// that did not change since the last poll is the last snapshot's.
	Allocations []*AllocationSnapshot
	Sources     []SourceSnapshot // sorted by name
	// Overflowed counts the allocations folded into OverflowPod by the
	// MaxAllocations guard, each once while it stays listed.
	Overflowed uint64
}

// DeviceCounters are a device's monotonic counters in one window, in seconds.
type DeviceCounters struct {
	// Observed is time covered by samples (or by polls, for a device with no
	// utilization source).
	Observed float64
	// Idle is observed time whose samples were below the idle threshold.
	Idle float64
	// Unallocated is observed time while no pod held the device.
	Unallocated float64
	// UnallocatedActive is utilization-weighted unallocated time.
	UnallocatedActive float64
	// Gap is time between samples that no sample covered.
	Gap float64
	// Unattributed is observed time while who held the device was not
	// known: before the kubelet first answered, or while it has been
	// unreachable for longer than the stale grace.
	Unattributed float64

	// Allocated, AllocatedIdle and AllocatedActive count the device's own
	// time once, however many pods share it: observed time while a pod held
	// it, the part of that in which every holder was idle, and the holders'
	// busy ratio (capped at 1) weighted by time; the allocations' counters
	// are pod-seconds, which on a shared GPU add up to more. On a GPU in MIG
	// mode every counter is its instances', each weighted by its share
	// (Device.GPUFraction), plus the slices no instance occupies, counted as
	// observed and unallocated.
	Allocated       float64
	AllocatedIdle   float64
	AllocatedActive float64
}

// add adds f times o to c.
func (c *DeviceCounters) add(o *DeviceCounters, f float64) {
	c.Observed += f * o.Observed
	c.Idle += f * o.Idle
	c.Unallocated += f * o.Unallocated
	c.UnallocatedActive += f * o.UnallocatedActive
	c.Gap += f * o.Gap
	c.Unattributed += f * o.Unattributed
	c.Allocated += f * o.Allocated
	c.AllocatedIdle += f * o.AllocatedIdle
	c.AllocatedActive += f * o.AllocatedActive
}

// DeviceSnapshot is one device's identity, gauges and counters.
type DeviceSnapshot struct {
	collector.Device
	// Present is false when the last read did not return the device.
	Present bool

	HasUtilization bool
	Utilization    float64

	collector.DeviceGauges
	collector.GPMGauges

	// UnattributedMemoryBytes is the memory of GPU processes that belong to
	// no pod holding the device (outside Kubernetes, or a leak); known only
	// with process attribution.
	HasUnattributedMemory   bool
	UnattributedMemoryBytes uint64

	Counters [NumWindows]DeviceCounters
	// Through is the end of the time Counters hold: a shared GPU's periods
	// wait for their process samples (MaxProcessWait), so its counters may
	// end seconds before the snapshot's At. Zero before any is counted.
	Through time.Time
}

// AllocationCounters are an allocation's monotonic counters on one device in
// one window, in seconds.
type AllocationCounters struct {
	Allocated float64
	Idle      float64
	// Active is utilization-weighted allocated time: effective GPU-seconds.
	Active float64
}

// AllocationSnapshot is one (device, container) allocation: who holds
// what, and the allocation's state at this poll.
type AllocationSnapshot struct {
	// AllocationInfo changes rarely: successive snapshots share one until
	// it does, so that a poll does not copy every allocation's labels.
	*AllocationInfo

	// Attribution says how activity was credited: "device" (the device's own
	// samples) or, on shared GPUs with process data, "process".
	Attribution string
	// Live is true while the allocation is in the kubelet's latest list;
	// false during retention after it ended.
	Live bool
	// Stale is true when the kubelet could not be read and the allocation
	// comes from its last good answer.
	Stale bool

	Counters [NumWindows]AllocationCounters

	HasIdleStreak bool
	IdleStreak    float64 // seconds

	HasMemory       bool
	MemoryUsedBytes uint64
}

// AllocationInfo is who holds which device: the allocation's identity and
// the labels of its series.
type AllocationInfo struct {
	UUID         string
	GPU          int // -1 when the device is not known to NVML
	Namespace    string
	Pod          string
	Container    string
	Resource     string
	Shared       bool
	WorkloadKind string
	Workload     string
	Model        string
	// ExtraLabels are the pod's extra Prometheus labels (name → value).
	ExtraLabels map[string]string
	// Scheduling is the pod's priority and Kueue queues, as the pod source
	// knows them.
	Scheduling collector.Scheduling
	// DRA names the claim and the DRA device of an allocation made through
	// Dynamic Resource Allocation; zero for a device plugin's.
	DRA collector.DRADevice
}

// equal reports whether a and b hold the same values.
func (a *AllocationInfo) equal(b *AllocationInfo) bool {
	return a.UUID == b.UUID && a.GPU == b.GPU && a.Namespace == b.Namespace && a.Pod == b.Pod &&
		a.Container == b.Container && a.Resource == b.Resource && a.Shared == b.Shared &&
		a.WorkloadKind == b.WorkloadKind && a.Workload == b.Workload && a.Model == b.Model &&
		maps.Equal(a.ExtraLabels, b.ExtraLabels) && a.Scheduling == b.Scheduling && a.DRA == b.DRA
}

// SourceSnapshot is the health of one source.
type SourceSnapshot struct {
	Name string
	Up   bool
	// Errors counts failures by reason.
	Errors map[string]uint64
}
