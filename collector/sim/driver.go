package sim

import (
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// driver is the simulated NVML library that Node.NVML returns. It embeds
// go-nvml's mock server, so that it is an nvml.Interface and its devices
// carry the mock's identity, but answers every call the simulation supports
// with its own method: the mock appends each call it answers to a list that
// nothing clears, which an agent polling every second would grow without
// bound. Calls the simulation does not support fall through to the mock,
// which panics on them.
type driver struct {
	*server.Server
	n       *Node
	handles []*handle // by index
}

// handle is one simulated GPU as the driver hands it out, embedding the
// mock device for the same reason as driver embeds the mock server.
type handle struct {
	*server.Device
	n *Node
	g int
	// migs are the GPU's MIG devices by index, nil entries for empty
	// indices; nil when the GPU is not in MIG mode.
	migs []*migHandle
}

var (
	_ nvml.Interface         = (*driver)(nil)
	_ nvml.ExtendedInterface = (*driver)(nil)
	_ nvml.Device            = (*handle)(nil)
)

// symbols are the NVML entry points the simulation implements. The mock
// server answers LookupSymbol with "found" for any name, which would lead a
// reader that gates newer calls (GPM) on LookupSymbol straight into a panic.
var symbols = map[string]bool{
	"nvmlInit_v2": true, "nvmlShutdown": true, "nvmlSystemGetDriverVersion": true,
	"nvmlSystemGetNVMLVersion": true, "nvmlSystemGetCudaDriverVersion": true,
	"nvmlDeviceGetCount_v2": true, "nvmlDeviceGetHandleByIndex_v2": true,
	"nvmlDeviceGetHandleByUUID": true, "nvmlDeviceGetUUID": true, "nvmlDeviceGetName": true,
	"nvmlDeviceGetIndex": true, "nvmlDeviceGetMigMode": true, "nvmlDeviceGetSamples": true,
	"nvmlDeviceGetMemoryInfo": true, "nvmlDeviceGetMemoryInfo_v2": true,
	"nvmlDeviceGetPowerUsage": true, "nvmlDeviceGetTotalEnergyConsumption": true,
	"nvmlDeviceGetComputeRunningProcesses": true, "nvmlDeviceGetComputeRunningProcesses_v2": true,
	"nvmlDeviceGetComputeRunningProcesses_v3": true, "nvmlDeviceGetProcessUtilization": true,
	"nvmlDeviceGetUtilizationRates": true,
}

// newDriver wraps n's mock server, whose devices must already be trimmed to
// the scenario's GPUs and carry their UUIDs.
func newDriver(n *Node) *driver {
	d := &driver{Server: n.srv, n: n, handles: make([]*handle, len(n.srv.Devices))}
	for g, dev := range n.srv.Devices {
		d.handles[g] = &handle{Device: dev.(*server.Device), n: n, g: g}
		d.handles[g].migs = newMIGHandles(d.handles[g])
	}
	return d
}

// Library-level calls.

// Init and Shutdown open and close a session, which driver reloads answer.
func (d *driver) Init() nvml.Return     { return d.n.initSession() }
func (d *driver) Shutdown() nvml.Return { return d.n.closeSession() }

func (d *driver) Extensions() nvml.ExtendedInterface { return d }

func (d *driver) LookupSymbol(name string) error {
	if (symbols[name] || migSymbols[name] || processSymbols[name] || (d.n.sys.gpm && gpmSymbols[name])) && !d.n.symbolAbsent(name) {
		return nil
	}
	return fmt.Errorf("sim: symbol %s: %w", name, nvml.ERROR_NOT_SUPPORTED)
}

func (d *driver) SystemGetDriverVersion() (string, nvml.Return) {
	return d.n.driverVersion(), nvml.SUCCESS
}
func (d *driver) SystemGetNVMLVersion() (string, nvml.Return) { return d.NvmlVersion, nvml.SUCCESS }
func (d *driver) SystemGetCudaDriverVersion() (int, nvml.Return) {
	return d.CudaDriverVersion, nvml.SUCCESS
}

// DeviceGetCount and DeviceGetHandleByIndex count only the GPUs NVML
// sees: not those passed through to VMs (vfio).
func (d *driver) DeviceGetCount() (int, nvml.Return) {
	if ret, ok := d.n.reloadFault(); ok {
		return 0, ret
	}
	return len(d.n.visible), nvml.SUCCESS
}

func (d *driver) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	if i < 0 || i >= len(d.n.visible) {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	return d.handles[d.n.visible[i]], nvml.SUCCESS
}

// DeviceGetHandleByUUID answers ERROR_NOT_FOUND for an unknown UUID, as the
// driver does (the mock says ERROR_INVALID_ARGUMENT), and for a MIG device
// that does not exist at the clock's now.
func (d *driver) DeviceGetHandleByUUID(uuid string) (nvml.Device, nvml.Return) {
	t, _ := d.n.now()
	for _, h := range d.handles {
		if !d.n.nvmlVisible(h.g) {
			continue
		}
		if strings.EqualFold(uuid, h.UUID) {
			return h, nvml.SUCCESS
		}
		for _, m := range h.migs {
			if m.m.alive(t) && strings.EqualFold(uuid, m.m.uuid) {
				return m, nvml.SUCCESS
			}
		}
	}
	return nil, nvml.ERROR_NOT_FOUND
}

func (d *driver) DeviceGetHandleByPciBusId(busID string) (nvml.Device, nvml.Return) {
	for _, h := range d.handles {
		if busID == h.PciBusID && d.n.nvmlVisible(h.g) {
			return h, nvml.SUCCESS
		}
	}
	return nil, nvml.ERROR_INVALID_ARGUMENT
}

// The library-style per-device calls (nvml.DeviceGetSamples(dev, …))
// delegate to the device, as the real library does.

func (d *driver) DeviceGetUUID(h nvml.Device) (string, nvml.Return)     { return h.GetUUID() }
func (d *driver) DeviceGetName(h nvml.Device) (string, nvml.Return)     { return h.GetName() }
func (d *driver) DeviceGetIndex(h nvml.Device) (int, nvml.Return)       { return h.GetIndex() }
func (d *driver) DeviceGetMinorNumber(h nvml.Device) (int, nvml.Return) { return h.GetMinorNumber() }
func (d *driver) DeviceGetBrand(h nvml.Device) (nvml.BrandType, nvml.Return) {
	return h.GetBrand()
}
func (d *driver) DeviceGetArchitecture(h nvml.Device) (nvml.DeviceArchitecture, nvml.Return) {
	return h.GetArchitecture()
}
func (d *driver) DeviceGetCudaComputeCapability(h nvml.Device) (int, int, nvml.Return) {
	return h.GetCudaComputeCapability()
}
func (d *driver) DeviceGetPciInfo(h nvml.Device) (nvml.PciInfo, nvml.Return) { return h.GetPciInfo() }
func (d *driver) DeviceGetMigMode(h nvml.Device) (int, int, nvml.Return)     { return h.GetMigMode() }
func (d *driver) DeviceGetSamples(h nvml.Device, typ nvml.SamplingType, lastSeen uint64) (nvml.ValueType, []nvml.Sample, nvml.Return) {
	return h.GetSamples(typ, lastSeen)
}
func (d *driver) DeviceGetUtilizationRates(h nvml.Device) (nvml.Utilization, nvml.Return) {
	return h.GetUtilizationRates()
}
func (d *driver) DeviceGetMemoryInfo(h nvml.Device) (nvml.Memory, nvml.Return) {
	return h.GetMemoryInfo()
}
func (d *driver) DeviceGetMemoryInfo_v2(h nvml.Device) (nvml.Memory_v2, nvml.Return) {
	return h.GetMemoryInfo_v2()
}
func (d *driver) DeviceGetPowerUsage(h nvml.Device) (uint32, nvml.Return) { return h.GetPowerUsage() }
func (d *driver) DeviceGetTotalEnergyConsumption(h nvml.Device) (uint64, nvml.Return) {
	return h.GetTotalEnergyConsumption()
}
func (d *driver) DeviceGetComputeRunningProcesses(h nvml.Device) ([]nvml.ProcessInfo, nvml.Return) {
	return h.GetComputeRunningProcesses()
}
func (d *driver) DeviceGetProcessUtilization(h nvml.Device, lastSeen uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
	return h.GetProcessUtilization(lastSeen)
}

// Identity, as the mock device has it.

func (h *handle) GetUUID() (string, nvml.Return)     { return h.UUID, nvml.SUCCESS }
func (h *handle) GetName() (string, nvml.Return)     { return h.Config.Name, nvml.SUCCESS }
func (h *handle) GetIndex() (int, nvml.Return)       { return h.Index, nvml.SUCCESS }
func (h *handle) GetMinorNumber() (int, nvml.Return) { return h.Minor, nvml.SUCCESS }
func (h *handle) GetBrand() (nvml.BrandType, nvml.Return) {
	return h.Config.Brand, nvml.SUCCESS
}
func (h *handle) GetArchitecture() (nvml.DeviceArchitecture, nvml.Return) {
	return h.Config.Architecture, nvml.SUCCESS
}
func (h *handle) GetCudaComputeCapability() (int, int, nvml.Return) {
	return h.Config.CudaMajor, h.Config.CudaMinor, nvml.SUCCESS
}
func (h *handle) GetPciInfo() (nvml.PciInfo, nvml.Return) {
	return nvml.PciInfo{PciDeviceId: h.Config.PciDeviceId}, nvml.SUCCESS
}

// GetMigMode answers enabled (current and pending) for a GPU with a MIG
// layout, disabled for the others.
func (h *handle) GetMigMode() (int, int, nvml.Return) {
	if h.n.migEnabled(h.g) {
		return nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE, nvml.SUCCESS
	}
	return nvml.DEVICE_MIG_DISABLE, nvml.DEVICE_MIG_DISABLE, nvml.SUCCESS
}

// Activity, from the scenario.

// Each activity call first answers the scenario's faults (nvmlFault): an
// injected error, GPU_IS_LOST, or a hang.

func (h *handle) GetSamples(typ nvml.SamplingType, lastSeen uint64) (nvml.ValueType, []nvml.Sample, nvml.Return) {
	if ret, ok := h.n.nvmlFault(h.g, CallSamples); ok {
		return nvml.VALUE_TYPE_UNSIGNED_INT, nil, ret
	}
	return h.n.samples(h.g, typ, lastSeen)
}

// GetUtilizationRates answers the samples call's faults: it reads the same
// activity counters.
func (h *handle) GetUtilizationRates() (nvml.Utilization, nvml.Return) {
	if ret, ok := h.n.nvmlFault(h.g, CallSamples); ok {
		return nvml.Utilization{}, ret
	}
	return h.n.utilizationRates(h.g)
}

func (h *handle) GetMemoryInfo_v2() (nvml.Memory_v2, nvml.Return) {
	h.n.missingSymbol("nvmlDeviceGetMemoryInfo_v2")
	if ret, ok := h.n.nvmlFault(h.g, CallMemory); ok {
		return nvml.Memory_v2{}, ret
	}
	if h.n.parentDenied(h.g) {
		return nvml.Memory_v2{}, nvml.ERROR_NO_PERMISSION
	}
	return h.n.memory(h.g), nvml.SUCCESS
}

// GetMemoryInfo counts the reserved memory as used, as the driver's
// version 1 does.
func (h *handle) GetMemoryInfo() (nvml.Memory, nvml.Return) {
	if ret, ok := h.n.nvmlFault(h.g, CallMemory); ok {
		return nvml.Memory{}, ret
	}
	if h.n.parentDenied(h.g) {
		return nvml.Memory{}, nvml.ERROR_NO_PERMISSION
	}
	m := h.n.memory(h.g)
	return nvml.Memory{Total: m.Total, Used: m.Used + m.Reserved, Free: m.Free}, nvml.SUCCESS
}

func (h *handle) GetPowerUsage() (uint32, nvml.Return) {
	if ret, ok := h.n.nvmlFault(h.g, CallPower); ok {
		return 0, ret
	}
	return h.n.powerMilliwatts(h.g), nvml.SUCCESS
}

func (h *handle) GetTotalEnergyConsumption() (uint64, nvml.Return) {
	if ret, ok := h.n.nvmlFault(h.g, CallEnergy); ok {
		return 0, ret
	}
	return h.n.energyMillijoules(h.g), nvml.SUCCESS
}

func (h *handle) GetComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	if ret, ok := h.n.nvmlFault(h.g, CallProcesses); ok {
		return nil, ret
	}
	return h.n.processList(h.g, listCompute)
}

func (h *handle) GetProcessUtilization(lastSeen uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
	if ret, ok := h.n.nvmlFault(h.g, CallProcessSamples); ok {
		return nil, ret
	}
	out, ret := h.n.processUtilization(h.g, lastSeen)
	if len(h.n.sc.Traps.Zombies) > 0 && ret != nvml.ERROR_NOT_SUPPORTED {
		if out = h.n.zombieSamples(h.g, lastSeen, out); len(out) > 0 {
			ret = nvml.SUCCESS
		}
	}
	return out, ret
}
