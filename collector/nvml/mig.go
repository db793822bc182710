package nvml

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/collector"
)

// migDevices enumerates the MIG instances of a MIG-enabled GPU. Slots
// without an instance answer ERROR_NOT_FOUND and are skipped.
func (r *Reader) migDevices(parent *device, gpm bool) []*device {
	n, ret := parent.handle.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		r.log.Warn("cannot count MIG devices", zap.Int("gpu", parent.info.GPU), zap.Error(retError(ret)))
		return nil
	}
	var out []*device
	for i := 0; i < n; i++ {
		h, ret := parent.handle.GetMigDeviceHandleByIndex(i)
		if ret == nvml.ERROR_NOT_FOUND {
			continue
		}
		if ret != nvml.SUCCESS {
			r.log.Warn("cannot read MIG device", zap.Int("gpu", parent.info.GPU), zap.Int("slot", i), zap.Error(retError(ret)))
			continue
		}
		uuid, ret := h.GetUUID()
		if ret != nvml.SUCCESS {
			r.log.Warn("skipping MIG device whose UUID cannot be read", zap.Int("gpu", parent.info.GPU), zap.Int("slot", i), zap.Error(retError(ret)))
			continue
		}
		out = append(out, r.migDevice(parent.info, parent.handle, h, uuid, gpm, n))
	}
	return out
}

// migDevice describes MIG device h, of UUID uuid, on parent, with a GPM
// sampler of its GPU instance when the parent has GPM; slots is the
// parent's GetMaxMigDeviceCount, which is its compute slices (7 on A100
// and H100, 4 on A30).
func (r *Reader) migDevice(parent collector.Device, parentHandle, h nvml.Device, uuid string, gpm bool, slots int) *device {
	gi, ret1 := h.GetGpuInstanceId()
	ci, ret2 := h.GetComputeInstanceId()
	if ret1 != nvml.SUCCESS || ret2 != nvml.SUCCESS {
		gi, ci = -1, -1
	}
	name, _ := h.GetName()
	d := &device{
		handle: h,
		index:  -1,
		mig:    true,
		// NVML has no utilization samples on MIG instances.
		noSamples:     true,
		noProcSamples: true,
		info: collector.Device{
			UUID:              uuid,
			GPU:               parent.GPU,
			Name:              name,
			ParentUUID:        parent.UUID,
			DriverVersion:     parent.DriverVersion,
			UtilizationSource: collector.UtilizationNone,
			GPUInstance:       gi,
			ComputeInstance:   ci,
			Minor:             parent.Minor,
			HasMinor:          parent.HasMinor,
		},
	}
	if gi >= 0 {
		d.info.GIProfileID, d.info.PlacementStart, d.info.HasPlacement = gpuInstancePlacement(parentHandle, gi)
	}
	if attrs, ret := h.GetAttributes(); ret == nvml.SUCCESS {
		d.info.MIGProfile = migProfile(attrs)
		d.info.Slices, d.info.ParentSlices = migSlices(attrs), slots
	}
	if gpm && gi >= 0 {
		if d.gpm = r.sampler(parentHandle, gi); d.gpm != nil {
			d.info.UtilizationSource, d.useGPM = collector.UtilizationGPM, true
		}
	}
	return d
}

// migProfile names a MIG instance's profile as nvidia-smi does, e.g.
// "3g.40gb": GPU instance slices and framebuffer rounded up to whole GB;
// a compute instance that takes part of its GPU instance is named for both,
// "1c.3g.40gb" (the device plugin's resource nvidia.com/mig-1c.3g.40gb).
func migProfile(a nvml.DeviceAttributes) string {
	gb := (a.MemorySizeMB + 1023) / 1024
	if c := a.ComputeInstanceSliceCount; c > 0 && c < a.GpuInstanceSliceCount {
		return fmt.Sprintf("%dc.%dg.%dgb", c, a.GpuInstanceSliceCount, gb)
	}
	return fmt.Sprintf("%dg.%dgb", a.GpuInstanceSliceCount, gb)
}

// migSlices is a MIG device's share of its GPU's compute, in slices: its
// compute instance's. A GPU instance split into several compute instances
// is several MIG devices, each with the GPU instance's slice count in
// gpuInstanceSliceCount (nvml.h, nvmlDeviceAttributes_t); weighed by that,
// a 3g instance split in three would count as nine sevenths of a GPU.
func migSlices(a nvml.DeviceAttributes) int {
	if c := a.ComputeInstanceSliceCount; c > 0 && c <= a.GpuInstanceSliceCount {
		return int(c)
	}
	return int(a.GpuInstanceSliceCount)
}
