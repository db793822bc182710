// Package sim simulates a GPU node from a scenario file: NVML (go-nvml's
// mock servers with their activity calls driven by the scenario) and the
// kubelet's pod-resources view, both as pure functions of a Clock, so the
// real readers, the engine and the exporter run unchanged on a laptop, in a
// replay, or second by second in a test.
//
// # Scenario times
//
// Every time inside a scenario (a pod's from and to, a step's at) is an
// offset from start. A pod's busy ratio counts only within [from, to).
// start is not before 1970 (NVML stamps samples in unsigned microseconds
// since then), duration is at most 90 days (MaxDuration), lead_in at most
// 24h (MaxLeadIn). A file is one YAML document of at most 16 MiB whose
// aliases add at most 100,000 nodes once expanded (MaxAliasNodes).
//
// # Live: lead_in and the wall clock
//
// `agent --simulate` plays a scenario on the wall clock, the clock
// Prometheus stamps its scrapes with: the scenario's start is moved so that
// its top-level `lead_in` (default 0s) ends at the moment the agent starts,
// and the driver's sample stamps, the kubelet's and the engine's clock, and
// so the peak windows of every second, read wall time. The lead-in itself is
// played at once on a LeadInClock, polled at the agent's poll interval, so
// the agent starts with the counts, idle streaks and pods of time lead_in;
// the clock then follows the wall clock. A fault may not start within the
// lead-in (it would be over before anything could see it). Replay ignores
// lead_in and keeps start: it writes its own timestamps.
//
// # Unscheduled pods and kube-state-metrics
//
// The top-level `unscheduled` key lists pods that request GPUs and that no
// node has taken (namespace, name, container, owner, resource, gpus, from,
// to, priority_class, queue, claim, node_selector, suspended): they wait,
// Pending and bound to no node. The node never sees them. KubeState serves, for them and for the
// node's pods, the series kube-state-metrics would (kube_pod_info,
// kube_pod_status_phase, kube_pod_container_resource_requests), which
// `agent --simulate` serves at /simulate/kube-state-metrics and never on
// its /metrics. A pod with `claim: NAME` waits on a DRA ResourceClaim
// instead of requesting a resource: it requests nothing, and the cluster's
// series (Cluster) carry the claim as kube-state-metrics configured with
// deploy/kube-state-metrics/resourceclaims.yaml would
// (kube_customresource_resourceclaim_request_devices and _owner_info, no
// _allocated_device_info: unallocated). Running DRA pods' claims are not
// served.
//
// Every pod also has kube_pod_created, its from in Unix seconds, and
// kube_pod_nodeselectors, its node selector as nodeselector_<key> labels
// (the key's characters outside [a-zA-Z0-9_] made "_"; a pod without a
// key has the label empty, which a scrape drops), as kube-state-metrics
// writes them (kubernetes/kube-state-metrics@c92fe0c5, internal/store/
// pod.go: createPodCreatedFamilyGenerator, createPodNodeSelectorsFamily-
// Generator, which is opt-in; internal/store/utils.go: kubeMapTo-
// PrometheusLabels, SanitizeLabelName). An unscheduled pod's
// `node_selector` sets it: GPU Feature Discovery's nvidia.com/gpu.product
// selects a GPU type.
//
// # GPU types
//
// A simulated GPU's NVML name is its real product's, as GetName answers
// on such a node: go-nvml's mocks' names (NVIDIA/go-nvml@v0.13.4-1,
// pkg/nvml/mock/gpus), but for the A100 mock's "Mock " prefix, which no
// driver writes and no GFD label matches. GFD's nvidia.com/gpu.product is
// that name with the characters outside [A-Za-z0-9-_. ] dropped and each
// run of blanks made a dash, "-SHARED" appended on a node whose GPUs are
// shared without a new resource name, "-MIG-<profile>" for MIG devices
// under the mixed strategy (NVIDIA/k8s-device-plugin@1b826acc,
// internal/lm/resource.go: sanitise, getProductName): "NVIDIA H100 80GB
// HBM3" is NVIDIA-H100-80GB-HBM3.
//
// # Kueue
//
// A scenario's `kueue` ClusterQueues serve Kueue's ClusterQueue series
// (kubernetes-sigs/kueue@ff69552e, pkg/metrics/metrics.go:
// kueue_cluster_queue_nominal_quota, _borrowing_limit (+Inf unset),
// _resource_usage by cohort, cluster_queue, flavor and resource;
// kueue_cluster_queue_resource_pending by cluster_queue and resource, no
// flavor, as pending workloads are not assigned to one, and only with
// metrics.enableClusterQueueResources (pkg/cache/queue/metrics.go,
// reportCQPendingWorkloads); kueue_pending_workloads by status "active"
// and "inadmissible"; kueue_admitted_active_workloads). Usage is the GPUs
// of the running pods whose kueue.x-k8s.io/cluster-queue-name label names
// the queue. An unscheduled pod with a `queue` is pending in its
// ClusterQueue's series as well as a Pending pod: Kueue's pod integration,
// whose gated pods exist, Pending and bound to no node.
//
// An unscheduled entry with `suspended: true` is a Job Kueue keeps
// suspended: it has no pod, so no pod series; Kueue counts it pending in
// the ClusterQueue its `queue` feeds (which the scenario must have), and
// kube-state-metrics with deploy/kube-state-metrics/kueue.yaml serves its
// Workload, as Kueue makes one for a Job (apis/kueue/v1beta2/
// workload_types.go): named job-<Job> (Kueue adds a hash of the Job's UID,
// pkg/controller/jobframework/workload_names.go), one pod set "main" of
// one pod of its GPUs, its node selector on the pod template; not
// admitted, so status.resourceRequests holds its GPUs; spec.queueName,
// spec.priorityClassRef and spec.priority from its queue and class;
// created at its from; owned by its Job. Each LocalQueue of `kueue` has
// kube_customresource_kueue_localqueue_info naming its ClusterQueue.
//
// # Duty cycles
//
// Bursty work (an inference server answering a request every two seconds)
// is a duty cycle rather than a list of steps: `util: {duty: {period: 2s,
// busy: 200ms, value: 1}}` is busy at value for the first busy of every
// period from the pod's from, and at idle (default 0) for the rest; as a
// step, `{at: 1h, duty: {...}}` starts its cycle at 1h and lasts until the
// next step. The driver's samples, per-process samples, GPM, energy and
// Scenario.Truth are exact for it: a cycle's integral over any span has a
// closed form, so no sample period needs to line up with it.
//
// # The simulated driver
//
// NVML() answers these calls itself, so go-nvml's mock, which keeps every
// call it answers in a list nothing clears, records none of them, and a
// simulation polled for days does not grow; any other call falls
// through to the mock and panics:
//
//   - Init, Shutdown, SystemGetDriverVersion, SystemGetNVMLVersion,
//     SystemGetCudaDriverVersion, DeviceGetCount, DeviceGetHandleByIndex,
//     DeviceGetHandleByUUID (GPU and MIG UUIDs; ERROR_NOT_FOUND for an
//     unknown UUID, as the driver, where the mock says
//     ERROR_INVALID_ARGUMENT), DeviceGetHandleByPciBusId (none of them
//     finds a GPU passed through to VMs, `vfio`, which NVML does not
//     list: the indices of the GPUs after it close up),
//     Extensions().LookupSymbol (found only for the calls listed here; the
//     GPM calls only on systems with GPM).
//   - Per device (and as nvml.DeviceGet…(dev) on the interface): GetUUID,
//     GetName, GetIndex, GetMinorNumber (the scenario's `minor_numbers`,
//     else the index), GetBrand, GetArchitecture,
//     GetCudaComputeCapability, GetPciInfo (the mock's values); GetMigMode
//     (enabled for a GPU with a MIG layout; for one in dynamic MIG mode,
//     see Dynamic Resource Allocation); GetSamples
//     (GPU_UTILIZATION_SAMPLES only, others ERROR_NOT_SUPPORTED);
//     GetUtilizationRates (the latest complete sample period's busy
//     percent, memory 0; it answers the samples call's faults);
//     GetMemoryInfo and GetMemoryInfo_v2; GetPowerUsage;
//     GetTotalEnergyConsumption; GetComputeRunningProcesses;
//     GetProcessUtilization; GetMaxMigDeviceCount, GetMigDeviceHandleByIndex,
//     IsMigDeviceHandle, GetAttributes, GetGpuInstanceId,
//     GetComputeInstanceId, GetDeviceHandleFromMigDeviceHandle,
//     GetGpuInstanceById and the instance's GetInfo (ID, NVML's GPU
//     instance profile ID — 19 for 1g.10gb, not go-nvml's profile index —
//     and placement in memory slices; ERROR_NOT_FOUND for no such
//     instance, ERROR_NOT_SUPPORTED outside MIG mode, and NO_PERMISSION
//     after SetMIGPrivileged(false): nvml.h says it "Requires privileged
//     user").
//   - GPM: GpmQueryDeviceSupport, GpmSampleAlloc, GpmSampleFree,
//     GpmSampleGet, GpmMigSampleGet (on the library, the device and the
//     sample) and GpmMetricsGet; not the …V variants, which go-nvml builds
//     on the real library only.
//
// Samples are what the driver keeps: one per SamplePeriod on a grid anchored
// at the scenario start, stamped (in the scenario's sample clock, below) at
// the end of their period, valued at the exact mean busy percent over that
// period, at most SampleBuffer of them; ERROR_NOT_FOUND when none is newer
// than the caller's last timestamp. A GPU's busy ratio is the sum of its
// holders' ratios and of unallocated activity, capped at 1. Each pod runs one
// process per device (PID from Scenario.PID), a child of init, or, when the
// pod sets `parent_cmdline`, of a parent process in the same container (PID
// ParentPID) whose command line that is: a vLLM V1 engine core under its API
// server. Per-process samples carry the pod's own ratio, in the shape the
// scenario's driver has (below), and list only busy processes. Power is
// linear in the busy ratio between the GPU's idle and maximum watts, and the
// energy counter is its exact integral from the scenario start.
//
// # The driver's shapes
//
// Where real drivers differ, or nvml.h (go-nvml v0.13.4-1) leaves the
// behaviour open, the top-level `driver` key chooses; its defaults are what
// real drivers have been seen to do, and the engine is tested under every
// shape (cmd/gpuxray TestReplayDriverShapes, agent TestProcessShapesAgree):
//
//	driver:
//	  process_samples: per-read   # or per-period
//	  process_refresh: 2s         # how often a process's entry is refreshed
//	  sample_clock: unix          # or boot
//	  idle_samples: true          # false: the ring runs dry while idle
//
// process_samples: per-read (the default) answers GetProcessUtilization with
// one entry per process, as nvml.h says ("One utilization sample structure is
// returned per process running, that had some non-zero utilization during
// the last sample period", line 9155) and real output shows: go-nvml #51
// (one entry per PID, stamped 1-8 s before the call), nvtop #110 (each
// PID's stamp advancing every 2-4 s on its own schedule, and one stamp read
// with an older lastSeen valued otherwise: the value covers the time since
// lastSeen). The driver refreshes each process's entry every
// process_refresh (default 2 s), at a phase of its own drawn from its PID
// (refreshPhase), while it runs; a call lists a process when a refresh is
// newer than lastSeen, stamped at its newest refresh and valued at its mean
// busy percent over the refresh windows newer than lastSeen (windows older
// than the ring's 20 s, or before a GPU reset, are gone); a process whose
// mean is 0 is left out. A process's window after its last refresh before
// it exits is never reported. The consumers read it so: nvtop
// (Syllo/nvtop src/extract_gpuinfo_nvidia.c, commit 3d4a953,
// gpuinfo_nvidia_get_process_utilization: one value per PID, lastSeen the
// newest stamp read, entries above 100% or not running dropped), nvitop
// (XuehaiPan/nvitop nvitop/api/device.py, commit 3e797b2: lastSeen a second
// before now in Unix microseconds, the newest entry per PID, 0 for a PID with
// none), HAMi-core (Project-HAMi/HAMi-core
// src/multiprocess/multiprocess_utilization_watcher.c, commit 078a2d2,
// get_used_gpu_utilization: lastSeen a second before gettimeofday, one smUtil
// per PID summed per container) and DCGM (NVIDIA/DCGM
// dcgmlib/src/DcgmCacheManager.cpp, commit 72fa3fe,
// DCGM_FI_DEV_GPU_UTIL_SAMPLES: lastSeen the previous query's time, one value
// per PID stamped at the query). per-period is the simulator's earlier shape:
// one entry per process per sample period on the device's grid, valued over
// that period.
//
// sample_clock: unix (the default) stamps samples, and reads the lastSeen it
// is given, in microseconds of Unix time; boot in microseconds since the
// node booted (Scenario.BootTime, bootUptime before the start), as NVML's
// GetSamples has been seen to on Grace hosts (polarsignals/gpu-metrics-agent
// #36: stamps in "an unspecified reference clock ... typically
// CLOCK_BOOTTIME"). Both samples and per-process samples follow it; a
// bad_timestamp fault's absurd stamp does not.
//
// idle_samples: true (the default) records a sample for every period, idle
// or not; false records none for a period with no activity, so the ring runs
// dry while the GPU idles and GetSamples answers ERROR_NOT_FOUND when no
// period since lastSeen was busy, as on DGX Spark (polarsignals/
// gpu-metrics-agent#37: the ring "runs dry whenever the GPU sits idle";
// GetUtilizationRates still answers). nvml.h says only that samples are
// "maintained in the buffer by the driver".
//
// # Processes and pods
//
// A pod's UID and its container's ID are derived from the node, namespace
// and name (PodUID, ContainerID); Pod and PodByUID answer them as a pod
// informer would, with the phase following the clock (Pending before from,
// Running, then Succeeded from to). WriteProc writes /proc/<pid>/{stat,
// cgroup,cmdline} for every GPU process, for collector/proc to read as on
// a node, with cgroup files in the style the scenario's top-level `cgroup`
// key names: systemd-containerd (the default), cgroupfs-containerd,
// systemd-crio, v1-cgroupfs-docker, v1-systemd-docker or private-namespace
// (paths relative to an agent in its own cgroup namespace).
//
// A pod with `static: true` is a static pod, run by the kubelet from a
// manifest: the API server knows its mirror pod, owned by the node, whose
// UID is PodUID's; its cgroups carry the static pod's own UID,
// StaticPodUID (32 hex digits, as the kubelet's hash of the manifest),
// which the mirror's kubernetes.io/config.mirror annotation names and
// which PodByUID answers too (collector.Pod.StaticUID).
//
// Unattributed processes (the `unattributed` key: device, pid, memory,
// cmdline, from, to, util) belong to no pod: work started outside
// Kubernetes, or a leak. The driver lists each with its memory within
// [from, to) and samples it while busy; its busy ratio adds to its GPU's
// (capped at 1 with the pods') and its memory to the GPU's used memory. Its
// cgroup is a Docker container's on the host.
//
// # MIG
//
// The top-level `mig` key puts GPUs in MIG mode, listing the profile of each
// MIG device index, `empty` for an index with no device (drivers leave such
// gaps where instances were destroyed):
//
//	mig:
//	  "gpu:0": [3g.40gb, 2g.20gb, empty, 1g.10gb]
//
// Profiles are those of the system's GPU in go-nvml's mock tables, named
// <slices>g.<GiB, rounded up>gb (the +me media profiles are left out); they
// must fit: seven compute slices, eight eighths of the memory, and no more
// instances of a profile than the GPU offers. A pod holds MIG device S of
// GPU N as "mig:N/S", allocated as nvidia.com/mig-<profile> (the default) and
// listed by the kubelet under its MIG UUID; a GPU in MIG mode is held only
// through its MIG devices. A MIG device's busy ratio is its holder's.
//
// In MIG mode, as in NVML, the GPU answers GetSamples and
// GetProcessUtilization with ERROR_NOT_SUPPORTED; GetMaxMigDeviceCount says
// 7 and GetMigDeviceHandleByIndex ERROR_NOT_FOUND for an empty index; memory,
// power, energy and processes (with their GPU and compute instance IDs) still
// answer, power following the busy ratios weighted by compute slices. A MIG
// device handle answers GetUUID ("MIG-…", stable per node, GPU and index),
// GetName ("<GPU name> MIG 3g.40gb"), GetIndex (its MIG device index, as
// nvml.h says: not the GPU's), GetGpuInstanceId (7g: 0, 4g: 1, 3g: 2 then 1,
// 2g: 3 to 5, 1g: 7 to 13, first free), GetComputeInstanceId (0),
// GetDeviceHandleFromMigDeviceHandle, GetAttributes (the profile's slices,
// SMs, engines and MemorySizeMB), its own memory and processes, and
// ERROR_NOT_SUPPORTED for samples, process utilization, power and energy.
//
// # Dynamic Resource Allocation
//
// The top-level `allocation: dra` (the default is `device-plugin`) gives
// every pod its devices through DRA with NVIDIA's driver, gpu.nvidia.com;
// a pod's own `allocation` overrides the node's, so device-plugin and DRA
// pods share a node (a GPU belongs to one of them: the scenario is refused
// if both hand it out). A DRA pod's devices belong to its ResourceClaim,
// named by `claim:` or after the pod; pods of one namespace that name the
// same claim share its devices (they must name the same ones) and are
// counted as time-sliced pods, each by its own process. A DRA pod takes no
// `resource:` and no time-slicing replica (gpu:N::R): DRA gives a device
// to one claim.
//
//	allocation: dra
//	mig:
//	  "gpu:0": dynamic
//	pods:
//	  - {namespace: ml, name: a, claim: shared, devices: ["gpu:1"]}
//	  - {namespace: ml, name: b, claim: shared, devices: ["gpu:1"], from: 10m}
//	  - {namespace: ml, name: c, devices: ["mig:0:1g.10gb"], from: 5m, to: 35m}
//
// The kubelet lists a DRA pod's container with no devices but one
// dynamic_resources entry: claim_name, claim_namespace, and per device
// driver_name gpu.nvidia.com, pool_name the node's name, device_name the
// device's name in the node's ResourceSlices, and the CDI devices NVIDIA's
// driver prepares, k8s.gpu.nvidia.com/claim=<claim UID>-<device>
// (ClaimUID), accumulated per driver as the kubelet hands them out: the
// n-th device of a claim lists the CDI devices of the first n
// (kubernetes/kubernetes pkg/kubelet/cm/container_manager_linux.go
// GetDynamicResources: one cdiDevices slice per driver, appended per
// device); share_id is unset. The pods of a shared claim each list it.
//
// The node's ResourceSlices (Node.ResourceSlices) are what NVIDIA's DRA
// driver publishes (NVIDIA/k8s-dra-driver-gpu, cmd/gpu-kubelet-plugin,
// read at commit 22407113, May 2026; the driver publishes the GPUs of the
// node that no device-plugin pod holds, in pool <node>):
//
//   - A whole GPU is gpu-<minor> (deviceinfo.go CanonicalName; the minor
//     number is the scenario's `minor_numbers`, else the index). Attributes, in the
//     v1 API's spelling (unqualified names are in the driver's domain, as
//     gpu.nvidia.com/uuid): type "gpu", uuid (NVML's "GPU-…"),
//     productName, brand, architecture, cudaComputeCapability,
//     driverVersion and cudaDriverVersion (versions), and
//     resource.kubernetes.io/pciBusID; capacity memory, in bytes. Older
//     drivers also published index and minor; current ones do not.
//   - A MIG device of a fixed layout is gpu-<minor>-mig-<profile without
//     dots>-<GPU instance profile ID>-<placement start>, such as
//     gpu-0-mig-3g40gb-9-4 (the profile ID is NVML's: 1g 19, 1g with two
//     memory slices 15, 2g 14, 3g 9, 4g 5, 7g 0; the placement is the
//     first memory slice). Attributes type "mig", uuid ("MIG-…"),
//     parentUUID, profile ("3g.40gb") and the parent's others; capacity
//     multiprocessors, copyEngines, decoders, encoders, jpegEngines,
//     ofaEngines, memory, and memorySlice<i> for each memory slice taken.
//     A fixed layout must have a placement for the driver to name it.
//   - A GPU in dynamic MIG mode (`mig: {"gpu:N": dynamic}`) offers every
//     profile at every placement as a partitionable device (KEP 4815),
//     named as above, each consuming its capacities and memory slices
//     (memory-slice-<i>) from counter set gpu-<minor>-counter-set, which a
//     slice of its own holds (a v1 slice holds devices or counters).
//     On Hopper and Blackwell the driver also offers the GPU whole,
//     gpu-<minor>, consuming every counter of its set, so that it and a
//     partition are never allocated at once (nvlib.go
//     GetPerGpuAllocatableDevices: "advertise both the full GPU and the
//     dynamic MIG profiles irrespective of current MIG state";
//     partitions.go GpuInfo.PartGetDevice), and the GPU is in MIG mode
//     only while a MIG device the driver made lives on it: createMigDevice
//     enables MIG mode for the first, maybeDisableMigMode disables it
//     after the last (supportsMIGModeToggle: arch >= Hopper). GetMigMode,
//     the MIG calls, samples and per-process samples follow; the sample
//     rings start over when the GPU leaves MIG mode. A pod holds the GPU
//     whole as `gpu:N` (a DRA pod; the scenario is refused if it overlaps
//     a MIG device on the GPU). On Ampere (dgxa100) the driver offers
//     dynamic MIG only on a GPU already in MIG mode, which it cannot leave
//     without a reset (isDynamicMIGCapable): the GPU stays in MIG mode and
//     is not offered whole. A pod asks for `mig:N:<profile>`: the driver creates
//     the MIG device when the claim's first pod starts, at the lowest free
//     placement of the profile (the first matching device of the slice,
//     as the scheduler picks), the lowest free MIG device index and GPU
//     instance ID, and destroys it when the claim's last pod ends. It
//     exists in the simulated NVML only meanwhile, with a UUID of its own
//     each time it is made; a claim that does not fit beside the devices
//     alive at its start is refused.
//
// A dynamic MIG partition carries no uuid, as NVIDIA's driver publishes
// it (partitions.go MigSpec.PartGetDevice: CommonAttributesMig only; with
// DynamicMIG the driver announces the abstract partitions once and
// re-publishes only with PassthroughSupport): a reader must find the MIG
// device from parentUUID, profile and the profile ID and placement in the
// device's name, as the driver's own FindMigDevBySpec does
// (GetGpuInstanceById, GetInfo). Node.SetPartitionUUIDs(true) offers the
// other shape, a driver that publishes the made device's uuid while it
// exists: one change of the pool, so every slice of the pool gets the
// next pool generation (MODIFIED events).
//
// With `vfio: ["gpu:N"]` (and allocation: dra) the GPU is bound to
// vfio-pci for the whole scenario: NVML does not list it, and the driver
// publishes it only as gpu-vfio-<N> (deviceinfo.go VfioDeviceInfo
// CanonicalName; nvlib.go enumerateGpuVfioDevices, whose parent is nil
// for a GPU prepared in passthrough mode), type vfio, with a uuid derived
// from its PCI address (getVfioDeviceInfo: uuid.NewSHA1(NameSpaceDNS,
// address); VFIOUUID), deviceID, vendorID, numa, productName,
// iommuFDEnabled, the PCI bus ID and addressableMemory. A DRA pod holds it
// as gpu:N; Truth gives its row no UUID.
//
// APIServer serves the slices over the Kubernetes REST API on loopback
// (Start for HTTP, StartTLS for HTTPS with CACert): discovery (/api,
// /apis, /apis/resource.k8s.io[/v1]), get, list and watch of
// /apis/resource.k8s.io/v1/resourceslices in JSON or protobuf, field
// selectors on spec.nodeName, spec.driver, spec.pool.name and
// metadata.name (others: 400), label selectors, resourceVersions (decimal,
// growing with every event) on lists, objects and events, watches from a
// resourceVersion, from "" or "0" (the current state as ADDED events
// first), or with sendInitialEvents (then a bookmark with
// k8s.io/initial-events-end), timeoutSeconds, and for a resourceVersion
// it has forgotten (Compact; it keeps 1024 events) an ERROR event with a
// 410 Expired Status, as the API server's watch cache sends, or 410 on an
// Exact list. SetVersions serves v1beta2 too or instead, for a client's
// fallback; SetError injects an HTTP error, DropWatches ends the watches,
// and the scenario's apiserver_down faults make it answer 503 over their
// span, ending its watches as it goes down (Down reports it).
// The slices follow the node's clock: Sync brings them to it, on every
// request and every 100 ms while the server serves; a replay on a virtual
// clock calls ResourceVersion (which syncs) after moving the clock and
// waits until its reader has seen that resourceVersion. URL is the base
// URL for a rest.Config's Host.
//
// Truth's rows say the claim, the DRA device name and the device's UUID
// (for a dynamic MIG device the one made for the pod's claim), so DRA pods
// are checked exactly as device-plugin pods.
//
// # Device plugins, the kubelet, and sharing schedulers
//
// The simulated kubelet's List answers as the kubelet builds it
// (kubernetes/kubernetes pkg/kubelet/apis/podresources/server_v1.go,
// read at b7fd57ad through the code index): the active pods, each with
// its restartable init containers (sidecars) and then its containers,
// never its regular init containers nor its ephemeral containers. A pod's
// `container_type: sidecar` lists its GPU container first and a regular
// container without devices ("app") after it; `container_type: init`
// lists only the regular container: the kubelet never says which GPU a
// regular init container holds. A device plugin's devices are listed one
// ContainerDevices per device and NUMA node, each with one ID and that
// node as its topology (containerDevicesFromResourceDeviceInstances in
// pkg/kubelet/cm/container_manager_linux.go): a GPU is on NUMA node
// index/4 unless `numa_nodes: {"gpu:N": [0, 1]}` says otherwise, and one
// on two nodes is listed twice.
//
// `device_ids` is the device plugin's ID scheme:
//
//   - nvidia (the default): NVIDIA's device plugin, GPU-<uuid>,
//     GPU-<uuid>::<replica>, MIG-<uuid>.
//   - gke: GKE's (GoogleCloudPlatform/container-engine-accelerators,
//     pkg/gpu/nvidia at 992db812): nvidia<minor>, named after
//     /dev/nvidia<minor> from nvmlDeviceGetMinorNumber (manager.go
//     discoverGPUs), nvidia<minor>/vgpu<R> for share R of a time-sharing
//     or MPS GPU (gpu:N::R; manager.go ListDevices, gpusharing.go), and
//     nvidia<minor>/gi<G> for GPU instance G of a MIG GPU (mig.go
//     DiscoverAndMountMIGDevices), all as nvidia.com/gpu.
//   - hami: HAMi's (Project-HAMi/HAMi at 4707fb02): slice n of a GPU is
//     GPU-<uuid>-<n> (rm/devices.go GetPluginDevices), gpu:N::R its slice
//     R. With GetPreferredAllocation off, HAMi's default (charts/hami
//     values.yaml), the kubelet picks any free slice, and Allocate gives
//     the container the GPU of the pod's hami.io/vgpu-devices-allocated
//     annotation (plugin/server.go Allocate; device/devices.go
//     EncodePodSingleDevice): the simulated kubelet lists the slice of the
//     next GPU NVML lists, the shape in which its ID names another GPU,
//     and the pod source's collector.Pod.Sharing.Devices names the true
//     one.
//
// ResourceClaims (claims.go) and three keys shape how DRA claims reach the
// agent, each read in kubernetes/kubernetes at 0021a864:
//
//   - `kubelet: {dynamic_resources: false}` (default true) is a kubelet
//     without the gate KubeletPodResourcesDynamicResources (alpha and off
//     by default from 1.27 to 1.33, pkg/features/kube_features.go): its
//     List names every container and no claim
//     (pkg/kubelet/apis/podresources/server_v1.go fills DynamicResources
//     only with the gate).
//   - `admin_access: true` on a DRA pod is a claim allocated with admin
//     access (KEP-5018; k8s.io/api resource/v1 DeviceRequestAllocationResult
//     .AdminAccess): its results carry adminAccess, it may name devices
//     other claims hold, runs no kernels (util must stay 0), and holds
//     nothing in Truth; the kubelet lists it like any claim.
//   - `request: <name>` is the request of its claim the pod's container
//     uses (core/v1 ResourceClaim.Request): pods naming one claim with
//     different requests hold their own devices, and the kubelet lists
//     the claim's every device under each (pkg/kubelet/cm/dra/manager.go
//     GetResources gathers a claim's devices per container by claim). A
//     pod without it uses the whole claim, whose one request is "gpu".
//
// The simulated API server serves the node's claims namespaced, with the
// field selectors the API server has for them — metadata.name and
// metadata.namespace only (pkg/registry/resource/resourceclaim/strategy.go
// toSelectableFields) — allocated throughout the run, each device's
// request, driver, pool (the node) and name in status.allocation, and its
// pods in status.reservedFor. Node.ClaimPods is the pod source's view of
// the pods' claims (spec.resourceClaims and containers' resources.claims).
//
// A pod with `gpu_fraction: F` (0 < F ≤ 1) is a KAI Scheduler fraction of
// its one GPU (NVIDIA/KAI-Scheduler at 72de64fc, docs/gpu-sharing,
// pkg/binder/binding/resourcereservation/resource_reservation.go): it
// requests no GPU and the kubelet does not list it; a reservation pod,
// gpu-reservation-<node>-<5 characters> in kai-resource-reservation,
// container resource-reservation, holds the GPU through the device plugin
// as nvidia.com/gpu from the first fraction pod's start to the last one's
// end (syncForPods deletes it when no Running or Pending fraction is
// left). The reservation pod and its fractions carry one runai-gpu-group
// label (Pod, PodsInGPUGroup; the fraction's container gets the GPU, as
// the first container does without gpu-fraction-container-name). The
// fractions on a GPU add up to 1 at most; they share it, each credited
// with its own processes' use.
//
// # GPM
//
// Hopper and Blackwell systems (dgxh100, dgxh200, dgxb200) have GPU
// Performance Monitoring; on dgxa100 every GPM call answers
// ERROR_NOT_SUPPORTED and LookupSymbol finds no GPM symbol. A sample records
// the clock's time and what it sampled: a GPU (GpmSampleGet), or a MIG device
// (GpmSampleGet on its handle, or GpmMigSampleGet on the parent with its GPU
// instance ID). GpmMetricsGet of two samples of the same device, the second
// later, answers in percent, as NVML. GPM_METRIC_GRAPHICS_UTIL ("percentage
// of time any compute/graphics app was active", nvml.h line 14486) is the
// exact mean busy ratio over the span ×100 (for a GPU, the ratio its samples
// follow). GPM_METRIC_SM_UTIL ("percentage of SMs that were busy") is space,
// not time: each pod's busy ratio times its `sm_fraction` (the share of the
// SMs its kernels occupy while they run, default 1), summed with unallocated
// and unattributed activity (which fill the GPU) and capped at 1, its exact
// mean ×100; so a decode server with `sm_fraction: 0.03` and kernels always
// running is 100% busy and 3% SM-busy. GPM_METRIC_SM_OCCUPANCY is
// GPMOccupancyRatio of SM_UTIL and GPM_METRIC_ANY_TENSOR_UTIL GPMTensorRatio
// of it. Other metrics get value 0 and nvmlReturn ERROR_NOT_SUPPORTED;
// samples of different devices, or not in time order,
// ERROR_INVALID_ARGUMENT. Utilization samples and per-process samples are
// time, like GRAPHICS_UTIL: sm_fraction does not touch them (nvml.h calls a
// process's smUtil only "SM (3D/Compute) Util Value"; the device check is to
// tell).
//
// # Driver traps
//
// The top-level `driver:` mapping asks for behaviours of real drivers that
// nvml.h does not warn of, each from the source that shows it:
//
//	driver:
//	  version: 470.256.02          # SystemGetDriverVersion, and the library's symbols
//	  mig_parent_permission: denied # default allowed
//	  mps: ["gpu:2"]               # pods' processes are MPS clients
//	  graphics: ["gpu:3"]          # pods' processes hold a graphics context too
//	  memory_not_available: ["gpu:1"]
//	  zombies:
//	    - {device: "gpu:0", pid: 50554, shape: garbage}
//	    - {device: "gpu:0", pid: 50021, shape: stale, value: 0.4}
//	  compute_instances: {"mig:0/0": 3}
//
// The keys:
//
//   - version (default the mock's, 550.54.15) decides the library's
//     symbols, as LookupSymbol answers them: the _v3 process lists from
//     510 (nvidia-settings' nvml.h gains them at 510.39.01, commit
//     b2f0e7f4, as nvitop #89 traces), nvmlDeviceGetMemoryInfo_v2 from
//     R510 too (nvitop's api/libnvml.py, at 56940d1b, falls back to the v1
//     call without it), GPM from R520; 535.98 to 535.103 have no _v3
//     process lists (nvitop #89 and #94: commit 0cb3beff dropped them,
//     535.104.05 restored them with the 24-byte struct). go-nvml binds
//     symbols lazily, so a call of one the library lacks ends the
//     process ("symbol lookup error"): the simulated driver panics. On 535.43 to 535.86 the _v3 process lists write 32-byte
//     entries (nvmlProcessInfo_v3_st, with usedGpuCcProtectedMemory) into
//     go-nvml's 24-byte ProcessInfo array (go-nvml #75, nvitop #79 and #89,
//     nvidia-settings commit 39c3e28e): the lists answer what go-nvml then
//     decodes, right for the first process and garbage for the others.
//   - mig_parent_permission: denied makes memory (both versions) and the
//     process lists of a GPU in MIG mode answer NO_PERMISSION (nvml.h: "In
//     MIG mode, if device handle is provided, the API returns aggregate
//     information, only if the caller has appropriate privileges"). Which
//     privilege (root, or CAP_SYS_ADMIN, which the chart drops) is open
//     until test/gpu's device check says; the default keeps the answers.
//   - mps lists the pods' processes on those GPUs only through
//     GetMPSComputeRunningProcesses (nvml.h: "information only about
//     compute running processes ... utilizing MPS"); the MPS server itself
//     is not simulated. graphics lists them through
//     GetGraphicsRunningProcesses as well, with the same memory (nvml.h:
//     "The usedGpuMemory field returned is all of the memory used by the
//     application"). A MIG device's MPS and graphics lists are empty.
//   - memory_not_available puts NVML_VALUE_NOT_AVAILABLE (nvml.h: "(-1)",
//     so 2^64-1 in the unsigned field) in every process's usedGpuMemory on
//     those GPUs, GPU and MIG devices alike.
//   - zombies are entries GetProcessUtilization returns on every call for
//     a PID that runs no more: garbage is nvtop #110's (smUtil 37100,
//     encUtil 50583, decUtil 50624, a stamp of 1976) plus one like it
//     stamped at the newest sample; stale a plausible entry (smUtil value
//     ×100) stamped at the newest sample, of a PID no process list holds.
//   - compute_instances splits a fixed layout's MIG device into that many
//     compute instances of equal slices: the device keeps its index, UUID,
//     pods and compute instance 0; each further one is a MIG device at the
//     next free index after the layout, with a UUID of its own, the same
//     GPU instance (so GPM's per-instance samples are the instance's), no
//     pods, and compute instance IDs 1, 2, …. Every one answers
//     GetAttributes with the GPU instance's gpuInstanceSliceCount and
//     memory and its own computeInstanceSliceCount (nvml.h,
//     nvmlDeviceAttributes_t; nvidia-smi names them 1c.3g.40gb).
//
// Runtime changes of the node, under the same `driver:` mapping:
//
//	driver:
//	  mig_mode:    [{gpu: "gpu:0", at: 10m, mode: disabled}]
//	  reloads:     [{at: 20m, for: 30s, version: 550.90.07}]
//	  node_labels: [{key: nvidia.com/mig.config.state, value: pending, from: 9m, to: 11m}]
//
// The keys:
//
//   - mig_mode turns a GPU's MIG mode on (a GPU with no layout: MIG mode
//     with no MIG device yet, as NVIDIA's DRA driver does before it makes
//     the first) or off (a fixed layout's MIG devices end then; their pods
//     must end before) once. The change takes a GPU reset (nvml.h,
//     nvmlDeviceSetMigMode: "Changing MIG modes may require device unbind
//     or reset"), which empties the
//     GPU's sample ring; GetMigMode, GetSamples and the MIG calls answer
//     the mode of the clock's now.
//   - reloads unload the driver at at and load it again for later, as
//     version when given (SystemGetDriverVersion says it from then): Init
//     answers ERROR_DRIVER_NOT_LOADED meanwhile. The simulated driver
//     counts NVML sessions (Init opens one, Shutdown closes it): a session
//     opened before the reload answers its device calls with
//     ERROR_DRIVER_NOT_LOADED during it and ERROR_LIB_RM_VERSION_MISMATCH
//     after, until it is shut down. On a node the unload fails while any
//     process holds /dev/nvidia* open (the GPU Operator's driver manager
//     evicts every GPU client first, NVIDIA/k8s-driver-manager
//     cmd/driver-manager at bd62ca7d); here it goes ahead, and
//     Node.HeldDuringReload says a session was held through it. A reloaded
//     library of another version is what a reader that mounts the host's
//     driver root would load; a container whose libnvidia-ml.so.1 the
//     NVIDIA container toolkit mounted at its start keeps the old one.
//   - node_labels are labels the node object carries over [from, to)
//     (Node.NodeLabels): the GPU Operator's MIG manager sets
//     nvidia.com/mig.config.state to pending while it changes the layout
//     (NVIDIA/mig-parted deployments/gpu-operator/reconfigure-mig.sh), its
//     upgrade controller nvidia.com/gpu-driver-upgrade-state
//     (NVIDIA/k8s-operator-libs pkg/upgrade/consts.go at 11e747a5), and
//     both move the nvidia.com/gpu.deploy.* labels off "true" to
//     paused-for-mig-change or paused-for-driver-upgrade.
//
// # Inference engines
//
// A pod's `engine: {kind: vllm|sglang|tgi, kv_cache_usage: RATIO,
// tokens_per_second: N}` runs an inference server whose own metrics the
// simulation serves while the pod runs ([from, to)): `agent --simulate` at
// /simulate/<kind>, `replay --format openmetrics` as job="<kind>",
// instance=NODE. Each figure is a value from the pod's from or a list of
// {at, value} steps, as util; requests_running and requests_waiting (default
// 0) are optional, and so is model, the served model name (else the
// command line's --model, or `vllm serve MODEL`'s, as vLLM defaults it, else
// the pod's name). Every series carries the pod's namespace and pod labels,
// as a Prometheus that discovers pods stores them (the relabelling of
// prometheus/documentation/examples/prometheus-kubernetes.yml and the
// Prometheus Operator's PodMonitor, __meta_kubernetes_namespace → namespace,
// __meta_kubernetes_pod_name → pod); scraped from one endpoint, they need
// honor_labels, as kube-state-metrics does. Tokens are the integral of
// tokens_per_second from the pod's from; the counters start at 0.
//
//   - vLLM V1 (vllm/v1/metrics/loggers.py at vllm-project/vllm@005a810bc40f,
//     PrometheusStatLogger; labels model_name and engine, one engine "0"):
//     vllm:kv_cache_usage_perc, vllm:num_requests_running,
//     vllm:num_requests_waiting (gauges), vllm:generation_tokens_total
//     (prometheus_client's Counter "vllm:generation_tokens", exposed with
//     _total). That commit also keeps the deprecated
//     vllm:gpu_cache_usage_perc; later releases hide it, and the simulation
//     serves the later shape. `metrics: v0` serves vLLM's V0 engine instead
//     (vllm/engine/metrics.py at vllm-project/vllm@f0afa0c28a31; label
//     model_name only): vllm:gpu_cache_usage_perc, vllm:num_requests_running,
//     vllm:num_requests_waiting, vllm:generation_tokens_total. One node's
//     vLLM pods take one shape.
//   - SGLang (python/sglang/srt/metrics/collector.py at
//     sgl-project/sglang@00ae9c1590d2; the scheduler's labels from
//     python/sglang/srt/managers/scheduler_metrics_mixin.py at
//     sgl-project/sglang@78ac30c2056f: model_name, engine_type="unified",
//     tp_rank, pp_rank): sglang:token_usage (the share of the KV pool's
//     tokens in use, what gateway-api-inference-extension reads as KV-cache
//     utilisation), sglang:num_running_reqs, sglang:num_queue_reqs,
//     sglang:gen_throughput; the tokenizer's sglang:generation_tokens_total
//     (label model_name).
//   - TGI (router/src/server.rs and backends/v3/src/{backend,lib,queue}.rs at
//     huggingface/text-generation-inference@db931fcf42da; no model label):
//     tgi_batch_current_max_tokens (kv_cache_usage × the batch's token
//     budget), tgi_batch_max_total_tokens (TGIMaxBatchTotalTokens: the
//     launcher sizes --max-batch-total-tokens to the memory left after the
//     weights, launcher.md), tgi_batch_current_size, tgi_queue_size, and
//     generated tokens only as the histogram tgi_request_generated_tokens of
//     finished requests (buckets of TGIMaxTotalTokens/100): each simulated
//     request generates TGITokensPerRequest tokens and counts when it ends,
//     so _sum lags the tokens by less than one request.
//
// Triton's TensorRT-LLM backend has no generated-token counter; its KV-cache
// blocks (nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="used"|"max"},
// triton-inference-server/tensorrtllm_backend README.md at @39ba55a745266,
// "Triton Metrics") are read by the report but not simulated.
package sim
