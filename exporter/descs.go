// Package exporter renders the engine's snapshot as Prometheus metrics and
// serves them, with health and readiness endpoints.
package exporter

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

const namespace = "gpuxray"

var (
	deviceLabels     = []string{"uuid", "gpu"}
	deviceWinLabels  = []string{"uuid", "gpu", "window"}
	deviceInfoLabels = []string{"uuid", "gpu", "name", "mig_profile", "parent_uuid", "mig_mode", "driver_version", "utilization_source"}
	allocBaseLabels  = []string{"uuid", "gpu", "namespace", "pod", "container", "workload_kind", "workload", "model"}
)

// descs holds every metric description of the exporter, so names, help and
// labels are read in one place.
type descs struct {
	deviceInfo, deviceUtil, deviceMemUsed, deviceMemTotal, devicePower, deviceEnergy *prometheus.Desc
	deviceSMActive, deviceSMOccupancy, deviceTensorActive, deviceUnattributedMem     *prometheus.Desc
	deviceObserved, deviceIdle, deviceUnalloc, deviceUnallocActive, deviceGap        *prometheus.Desc
	deviceUp, deviceUnattributed                                                     *prometheus.Desc
	deviceAllocated, deviceAllocIdle, deviceAllocActive                              *prometheus.Desc
	allocInfo, allocSeconds, allocIdle, allocActive, allocStreak, allocMemory        *prometheus.Desc
	sourceUp, sourceErrors, buildInfo, allocOverflow                                 *prometheus.Desc
}

// newDescs builds the descriptions; extra are the extra pod labels every
// allocation series carries after the base labels, in this order.
func newDescs(extra []string) *descs {
	d := func(name, help string, labels []string) *prometheus.Desc {
		return prometheus.NewDesc(namespace+"_"+name, help, labels, nil)
	}
	allocLabels := append(slices.Clip(allocBaseLabels), extra...)
	allocWinLabels := append(slices.Clip(allocLabels), "window")
	allocInfoLabels := append(slices.Clip(allocLabels), "resource", "shared", "attribution", "stale",
		"claim_namespace", "claim", "driver", "pool", "dra_device", "priority_class", "priority", "queue", "cluster_queue")
	return &descs{
		deviceInfo:            d("device_info", "GPU or MIG device identity; mig_mode is enabled or disabled on a whole GPU, empty on a MIG instance; utilization_source says where busy ratios come from (samples, gpm, none).", deviceInfoLabels),
		deviceUtil:            d("device_utilization_ratio", "Mean busy ratio of the device's samples read in the last poll.", deviceLabels),
		deviceMemUsed:         d("device_memory_used_bytes", "Framebuffer memory in use.", deviceLabels),
		deviceMemTotal:        d("device_memory_total_bytes", "Framebuffer memory in total.", deviceLabels),
		devicePower:           d("device_power_watts", "Power draw.", deviceLabels),
		deviceEnergy:          d("device_energy_joules_total", "Energy consumed since the driver loaded.", deviceLabels),
		deviceSMActive:        d("device_sm_active_ratio", "GPM: fraction of SM cycles with at least one warp resident, over the last poll (Hopper and newer).", deviceLabels),
		deviceSMOccupancy:     d("device_sm_occupancy_ratio", "GPM: resident warps over the SMs' maximum, over the last poll.", deviceLabels),
		deviceTensorActive:    d("device_tensor_active_ratio", "GPM: fraction of cycles any tensor pipe was active, over the last poll.", deviceLabels),
		deviceUnattributedMem: d("device_unattributed_memory_bytes", "Framebuffer memory of GPU processes that belong to no pod holding the device: work outside Kubernetes, or a leak.", deviceLabels),
		deviceObserved:        d("device_observed_seconds_total", "Time covered by utilization samples (by polls, for a device with no utilization source).", deviceWinLabels),
		deviceIdle:            d("device_idle_seconds_total", "Observed time whose samples were below the idle threshold.", deviceWinLabels),
		deviceUnalloc:         d("device_unallocated_seconds_total", "Observed time while no pod held the device.", deviceWinLabels),
		deviceUnallocActive:   d("device_unallocated_active_seconds_total", "Utilization-weighted time the device was busy while no pod held it, or with processes no holding pod owns (with process attribution).", deviceWinLabels),
		deviceGap:             d("device_sample_gap_seconds_total", "Time between samples that no sample covered; neither idle nor busy.", deviceWinLabels),
		deviceUp:              d("device_up", "Whether the last poll read the device's activity (0: NVML is down, the GPU is lost, or a call failed or hangs).", deviceLabels),
		deviceUnattributed:    d("device_unattributed_seconds_total", "Observed time while who held the device was unknown: before the kubelet first answered, or while it was unreachable beyond --kubelet.stale-grace.", deviceWinLabels),
		deviceAllocated:       d("device_allocated_seconds_total", "Observed time while at least one pod held the device, counted once however many pods share it (on a GPU in MIG mode: its instances', weighted by their share of it).", deviceWinLabels),
		deviceAllocIdle:       d("device_allocated_idle_seconds_total", "Allocated time of the device in which every pod holding it was idle.", deviceWinLabels),
		deviceAllocActive:     d("device_allocated_active_seconds_total", "Utilization-weighted allocated time of the device: its holders' busy ratio together, at most 1.", deviceWinLabels),
		allocInfo:             d("allocation_info", "A device allocated to a container, as the kubelet lists it; stale=\"true\" while the kubelet cannot be read; claim_namespace, claim, driver, pool and dra_device name a DRA claim's device; priority_class and priority are the pod's, queue and cluster_queue its Kueue LocalQueue and ClusterQueue.", allocInfoLabels),
		allocSeconds:          d("allocated_seconds_total", "Observed time the device was allocated to the container.", allocWinLabels),
		allocIdle:             d("allocated_idle_seconds_total", "Allocated time whose samples were below the idle threshold.", allocWinLabels),
		allocActive:           d("allocated_active_seconds_total", "Utilization-weighted allocated time (effective GPU-seconds).", allocWinLabels),
		allocStreak:           d("allocation_idle_streak_seconds", "How long the allocation has been idle without a break.", allocLabels),
		allocMemory:           d("allocation_memory_used_bytes", "Framebuffer memory of the allocation's own processes.", allocLabels),
		sourceUp:              d("source_up", "Whether the last read of the source succeeded.", []string{"source"}),
		sourceErrors:          d("source_errors_total", "Failed source calls, by reason.", []string{"source", "reason"}),
		allocOverflow:         d("allocation_overflow_total", "Allocations folded into pod=\"__overflow__\" because the node tracked --limits.max-allocations already.", nil),
		buildInfo:             d("build_info", "Build information of the running gpuxray.", []string{"version", "revision", "goversion"}),
	}
}

func (d *descs) all() []*prometheus.Desc {
	return []*prometheus.Desc{
		d.deviceInfo, d.deviceUtil, d.deviceMemUsed, d.deviceMemTotal, d.devicePower, d.deviceEnergy,
		d.deviceSMActive, d.deviceSMOccupancy, d.deviceTensorActive, d.deviceUnattributedMem,
		d.deviceObserved, d.deviceIdle, d.deviceUnalloc, d.deviceUnallocActive, d.deviceGap,
		d.deviceUp, d.deviceUnattributed, d.deviceAllocated, d.deviceAllocIdle, d.deviceAllocActive,
		d.allocInfo, d.allocSeconds, d.allocIdle, d.allocActive, d.allocStreak, d.allocMemory,
		d.sourceUp, d.sourceErrors, d.buildInfo, d.allocOverflow,
	}
}

// priorityClassValue is rendered by PriorityClassCollector, beside the
// engine's Collector: the cluster's PriorityClasses are not the node's.
var priorityClassValue = prometheus.NewDesc(namespace+"_priority_class_value",
	"The value of a PriorityClass of the cluster, as the API server lists it: the priority of the pods of that class.",
	[]string{"priority_class"}, nil)
