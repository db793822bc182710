package collector

import "time"

// Source names, as they appear in gpuxray_source_up{source} and
// gpuxray_source_errors_total{source}.
const (
	SourceNVML    = "nvml"
	SourceKubelet = "kubelet"
	SourcePods    = "pods"
	SourceProc    = "proc"
	// SourceDRA is the node's ResourceSlices, which map devices allocated
	// through Dynamic Resource Allocation to device UUIDs.
	SourceDRA = "dra"
)

// Utilization sources, as they appear in gpuxray_device_info{utilization_source}.
const (
	// UtilizationSamples is NVML's GPU_UTILIZATION_SAMPLES ring: "a kernel was running".
	UtilizationSamples = "samples"
	// UtilizationGPM is GPM's GRAPHICS_UTIL, the time an app was active
	// (Hopper and newer, also per MIG instance).
	UtilizationGPM = "gpm"
	// UtilizationNone means no activity source works for the device: time is
	// observed and allocated, but never called idle or active.
	UtilizationNone = "none"
)

// Device is the identity of one GPU or MIG instance.
type Device struct {
	// UUID is "GPU-…" for a whole GPU, "MIG-…" for a MIG instance.
	UUID string
	// GPU is the index of the physical GPU (the parent's, for a MIG instance).
	GPU int
	// Name is the product name, e.g. "NVIDIA H100 80GB HBM3".
	Name string
	// MIGProfile is e.g. "3g.40gb" for a MIG instance, empty for a whole GPU.
	MIGProfile string
	// ParentUUID is the parent GPU's UUID for a MIG instance, empty otherwise.
	ParentUUID string
	// DriverVersion is the node's driver version.
	DriverVersion string
	// UtilizationSource says where busy ratios come from; see Utilization*.
	UtilizationSource string
	// MIGEnabled is set on a whole GPU in MIG mode: its activity and its
	// allocations belong to its MIG instances, which are devices of their own.
	MIGEnabled bool
	// GPUInstance and ComputeInstance are a MIG instance's IDs on its parent
	// (legacy MIG-GPU-<uuid>/<gi>/<ci> and GKE nvidia<N>/gi<M> device IDs
	// name them); they mean something only when ParentUUID is set.
	GPUInstance     int
	ComputeInstance int
	// Minor is the GPU's device minor number (/dev/nvidia<Minor>; the
	// parent's for a MIG instance), which GKE's device plugin and NVIDIA's
	// DRA driver name GPUs by; it need not equal GPU. HasMinor is false
	// when NVML did not say.
	Minor    int
	HasMinor bool
	// GIProfileID and PlacementStart are a MIG instance's GPU instance
	// profile ID (NVML's, e.g. 19 for 1g.10gb) and the first memory slice
	// of its placement, which NVIDIA's DRA driver names a dynamic MIG
	// device by; HasPlacement is false when NVML did not say.
	GIProfileID    int
	PlacementStart int
	HasPlacement   bool
	// Slices is a MIG instance's share of its GPU's compute, in GPU-instance
	// slices, out of ParentSlices (7 on A100, H100 and newer); zero when
	// unknown. They weigh the instance's time in its GPU's capacity counters.
	Slices       int
	ParentSlices int
}

// GPUFraction returns the share of its physical GPU that a MIG instance
// is, or 0 when its slices are unknown.
func (d Device) GPUFraction() float64 {
	if d.Slices <= 0 || d.ParentSlices <= 0 || d.Slices > d.ParentSlices {
		return 0
	}
	return float64(d.Slices) / float64(d.ParentSlices)
}

// Sample is one utilization sample as the driver stamps it: the busy ratio over
// the sampling period that ends at Time.
type Sample struct {
	Time  time.Time
	Value float64 // 0..1
	// Since, when set, is where the span the sample covers begins: a GPM
	// sample covers the time since the previous one, and a sample the
	// reader made for a ring that ran dry (no sample since the previous
	// read, as NVML's ring does while the GPU is idle) covers the time
	// since the ring last spoke, with the busy ratio another source
	// (GPM, GetUtilizationRates) gives. Zero for a ring sample, which
	// covers one sampling period.
	Since time.Time
	// Dry marks a sample made for a ring that ran dry.
	Dry bool
}

// Process is one compute process running on a device, by host PID.
type Process struct {
	PID             uint32
	UsedMemoryBytes uint64
	// MemoryUnknown is set when NVML says the process's memory is not
	// available (NVML_VALUE_NOT_AVAILABLE): UsedMemoryBytes is 0, not a
	// figure, and no sum it is part of is known.
	MemoryUnknown bool
}

// ProcessSample is one per-process utilization sample: the busy ratio of the
// process's kernels over the sampling period that ends at Time. NVML lists
// only processes that were active in the period.
type ProcessSample struct {
	PID   uint32
	Time  time.Time
	Value float64 // 0..1
}

// GPMGauges are GPM's activity ratios (Hopper and newer) over the last poll.
type GPMGauges struct {
	HasGPM       bool
	SMActive     float64 // fraction of SM cycles with a warp resident
	SMOccupancy  float64 // resident warps over the maximum
	TensorActive float64 // fraction of cycles a tensor pipe was active
}

// DeviceGauges are a device's instantaneous readings. A field whose Has* flag
// is false was not available (not supported, or the call failed) and must not
// be exported as zero.
type DeviceGauges struct {
	HasMemory        bool
	MemoryUsedBytes  uint64
	MemoryTotalBytes uint64

	HasPower   bool
	PowerWatts float64

	// EnergyJoules is the driver's energy counter (since the driver loaded).
	HasEnergy    bool
	EnergyJoules float64
}

// Available returns g, or no gauge at all when present is false.
func (g DeviceGauges) Available(present bool) DeviceGauges {
	if !present {
		return DeviceGauges{}
	}
	return g
}

// DeviceReading is what one poll read of one device.
type DeviceReading struct {
	Device Device
	// Samples are the utilization samples newer than those of the previous
	// reading of this device, oldest first.
	Samples []Sample

	DeviceGauges

	HasProcesses bool
	Processes    []Process

	// ProcessSamples are per-process utilization samples newer than those of
	// the previous reading; HasProcessSamples is false when the device does
	// not support them (MIG, or the call failed).
	HasProcessSamples bool
	ProcessSamples    []ProcessSample

	GPMGauges
}

// DeviceSnapshot is one poll of every device on the node.
type DeviceSnapshot struct {
	// At is when the read finished.
	At      time.Time
	Devices []DeviceReading
	// Errors are the failures of individual calls during the read; the
	// readings above are still valid. Each is a *SourceError.
	Errors []error
}

// Pod is what the pod source knows of a pod that pod-resources does not say.
type Pod struct {
	UID       string
	Namespace string
	Name      string
	// StaticUID is set on a static pod's mirror (the pod the kubelet
	// creates in the API server for a pod it runs from a manifest): the
	// static pod's own UID, which the mirror carries in its
	// kubernetes.io/config.mirror annotation and which names the cgroups
	// of the pod's containers. The mirror's UID differs from it. Empty for
	// other pods.
	StaticUID string
	// Phase is the pod's phase: Pending, Running, Succeeded, Failed, Unknown.
	Phase string
	// WorkloadKind and Workload name the owner a person created (Deployment,
	// Job, PyTorchJob, …), resolved through the owner chain.
	WorkloadKind string
	Workload     string
	// Model is the model the pod serves or trains, from its labels or
	// annotations; empty when none says.
	Model string
	// ExtraLabels are extra Prometheus labels (sanitised name → capped value).
	ExtraLabels map[string]string
	// ContainerIDs maps container name → container ID (the runtime's 64-hex
	// ID, without the "containerd://" scheme).
	ContainerIDs map[string]string
	// Scheduling is how the scheduler and Kueue rank and queue the pod.
	Scheduling Scheduling
	// Sharing is what a GPU-sharing scheduler wrote on the pod about the
	// GPUs it uses, where the kubelet does not say.
	Sharing Sharing
	// Claims are the ResourceClaims the pod's containers use, from its
	// spec and status: one per container and claim reference, sidecars
	// and containers only (the kubelet never lists regular init
	// containers), and DRAExtendedResource's request mappings.
	Claims []PodClaim
}

// PodClaim is one container's use of a ResourceClaim: the claim's name (in
// the pod's namespace; empty until the pod's status names a claim made from
// a template) and the request it uses, empty for all of the claim's.
type PodClaim struct {
	Container string
	Claim     string
	Request   string
}

// Sharing is what HAMi and KAI Scheduler write on a pod about its GPUs
// (sharing.go parses it).
type Sharing struct {
	// Devices maps a container to the UUIDs of the GPUs HAMi gave it, one
	// per device (its hami.io/vgpu-devices-allocated annotation); nil for
	// a pod HAMi did not place.
	Devices map[string][]string
	// GPUGroups are the KAI Scheduler GPU groups of the pod: its
	// runai-gpu-group label, or the runai-gpu-group/<group> labels of a
	// fraction of several GPUs. A reservation pod and the fraction pods it
	// holds a GPU for carry the same group.
	GPUGroups []string
	// GPUContainer is the container KAI gives a fraction pod's GPU: its
	// gpu-fraction-container-name annotation, else its first container.
	GPUContainer string
}

// Scheduling is what decides which pod a GPU goes to: the pod's priority,
// and its Kueue queues where the pod names them.
type Scheduling struct {
	// PriorityClass is spec.priorityClassName; empty for a pod of no class
	// (the admission controller writes the global default's name when one
	// exists).
	PriorityClass string
	// Priority is spec.priority, which the admission controller resolves
	// from the class; HasPriority is false when the pod has none.
	Priority    int32
	HasPriority bool
	// Queue is the pod's Kueue LocalQueue: its kueue.x-k8s.io/queue-name
	// label, else the kueue.x-k8s.io/local-queue-name label Kueue writes on
	// the pods of a workload it admitted.
	Queue string
	// ClusterQueue is the ClusterQueue that admitted the pod's workload,
	// from the kueue.x-k8s.io/cluster-queue-name label Kueue (0.17 and
	// newer) writes on its pods; empty where the pod does not say.
	ClusterQueue string
}

// Terminal reports whether the pod has finished: its GPUs are no longer in
// use even if an older kubelet still lists them.
func (p Pod) Terminal() bool { return p.Phase == "Succeeded" || p.Phase == "Failed" }

// ProcessInfo is what /proc says of a host PID running on a GPU.
type ProcessInfo struct {
	PID uint32
	// StartTime is when the process started, in clock ticks since boot
	// (/proc/<pid>/stat field 22): with PID, it tells processes apart.
	StartTime   uint64
	PodUID      string // empty when the process is not in a pod's cgroup
	ContainerID string // 64-hex, empty when unknown
	// Cmdline is the process's argument vector. It can hold secrets: only a
	// model name derived from it may ever be exported.
	Cmdline []string
	// Ancestors are the command lines of the process's parents in the same
	// container, nearest first: a worker that titles itself (vLLM's
	// VLLM::EngineCore, SGLang's sglang::scheduler) leaves the model on its
	// server's. The same care as Cmdline applies.
	Ancestors [][]string
}

// Allocation is one device assigned to one container, as the kubelet lists it.
type Allocation struct {
	Namespace string
	Pod       string
	Container string
	// Resource is the extended resource name, e.g. "nvidia.com/gpu".
	Resource string
	// Device is the parsed device ID.
	Device DeviceRef
	// Shared is true when the device is a time-slicing/MPS replica or the
	// resource is a shared one: other pods may hold the same GPU.
	Shared bool
	// DRA is set for a device allocated through Dynamic Resource
	// Allocation (Device.Kind is RefDRA until it is resolved to a UUID);
	// zero for a device plugin's.
	DRA DRADevice
}

// DRADevice is a device allocated through Dynamic Resource Allocation, as
// the kubelet lists it in dynamic_resources: the claim that holds it and the
// device's name in its driver's ResourceSlices.
type DRADevice struct {
	ClaimNamespace string
	Claim          string
	Driver         string
	Pool           string
	Device         string
	// ShareID is set when the device allows several allocations at once
	// (consumable capacity): the claim holds a share of it, not all of it.
	ShareID string
}

// IsZero reports whether d names no DRA device: the allocation is a device
// plugin's.
func (d DRADevice) IsZero() bool { return d.Driver == "" }

// AllocationList is one answer of the allocation source.
type AllocationList struct {
	// At is when the answer was obtained (for a stale list: when the last good
	// answer was obtained).
	At          time.Time
	Allocations []Allocation
	// Stale is true when the latest call failed and this is the last good answer.
	Stale bool
	// Problems are the entries of this answer that were skipped (a device
	// ID that names no device form, a name that is not valid UTF-8, a DRA
	// device that could not be resolved), each a *SourceError; the rest of
	// the answer is valid.
	Problems []error
	// Unresolved is the number of DRA devices of this answer that are held
	// but could not be mapped to a device UUID (their ResourceSlices are not
	// known yet, or name no UUID), and are not in Allocations. While it is
	// positive, a device that no allocation holds may be one of them: its
	// time is neither unallocated nor idle-allocated, but unattributed.
	Unresolved int
}
