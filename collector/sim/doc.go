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
//     DeviceGetHandleByUUID (ERROR_NOT_FOUND for an unknown UUID, as the
//     driver, where the mock says ERROR_INVALID_ARGUMENT),
//     DeviceGetHandleByPciBusId, Extensions().LookupSymbol (found only for
//     the calls listed here, so GPM reads as absent).
//   - Per device (and as nvml.DeviceGet…(dev) on the interface): GetUUID,
//     GetName, GetIndex, GetMinorNumber, GetBrand, GetArchitecture,
//     GetCudaComputeCapability, GetPciInfo (the mock's values); GetMigMode
//     (always disabled); GetSamples (GPU_UTILIZATION_SAMPLES only, others
//     ERROR_NOT_SUPPORTED); GetMemoryInfo and GetMemoryInfo_v2; GetPowerUsage;
//     GetTotalEnergyConsumption; GetComputeRunningProcesses;
//     GetProcessUtilization.
//
// Samples are what the driver keeps: one per SamplePeriod on a grid anchored
// at the scenario start, stamped in microseconds of wall time at the end of
// their period, valued at the exact mean busy percent over that period, at
// most SampleBuffer of them; ERROR_NOT_FOUND when none is newer than the
// caller's last timestamp. A GPU's busy ratio is the sum of its holders'
// ratios and of unallocated activity, capped at 1. Each pod runs one process
// per device (PID from Scenario.PID); per-process samples carry the pod's own
// ratio and list only processes busy in their period. Power is linear in the
// busy ratio between the GPU's idle and maximum watts, and the energy counter
// is its exact integral from the scenario start.
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
// Unattributed processes (the `unattributed` key: device, pid, memory,
// cmdline, from, to, util) belong to no pod: work started outside
// Kubernetes, or a leak. The driver lists each with its memory within
// [from, to) and samples it while busy; its busy ratio adds to its GPU's
// (capped at 1 with the pods') and its memory to the GPU's used memory. Its
// cgroup is a Docker container's on the host.
package sim
