package nvml

import "github.com/NVIDIA/go-nvml/pkg/nvml"

// minorNumber returns h's device minor number (/dev/nvidia<N>), which GKE's
// device plugin and NVIDIA's DRA driver name GPUs by; it is not the NVML
// index. nvml.h: "For all products", Linux only.
func minorNumber(h nvml.Device) (int, bool) {
	n, ret := h.GetMinorNumber()
	return n, ret == nvml.SUCCESS && n >= 0
}

// gpuInstancePlacement returns the GPU instance profile ID and placement
// start of GPU instance gi on parent, as NVIDIA's DRA driver reads them to
// find the MIG device of a dynamic partition (cmd/gpu-kubelet-plugin,
// nvlib.go FindMigDevBySpec: GetGpuInstanceById, then GetInfo). nvml.h
// says GetGpuInstanceById "Requires privileged user": without, ok is false
// and the device is known by its profile only.
func gpuInstancePlacement(parent nvml.Device, gi int) (profileID, start int, ok bool) {
	inst, ret := parent.GetGpuInstanceById(gi)
	if ret != nvml.SUCCESS || inst == nil {
		return 0, 0, false
	}
	info, ret := inst.GetInfo()
	if ret != nvml.SUCCESS {
		return 0, 0, false
	}
	return int(info.ProfileId), int(info.Placement.Start), true
}
