package nvml

import (
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// go-nvml opens libnvidia-ml.so.1 lazily and binds each C function on its
// first call: a symbol the driver lacks ends the process there ("symbol
// lookup error"), with no Return to check. Every call newer than the
// oldest driver gpuxray supports (R470) is therefore made only after
// Extensions().LookupSymbol found it. Those of R470 and older (Init_v2,
// the device identity and MIG calls, GetSamples, GetProcessUtilization,
// GetMemoryInfo, power, energy and the v1 process lists) are called as
// they are.
const (
	// symMemoryV2 is nvmlDeviceGetMemoryInfo_v2, new in R510.
	symMemoryV2 = "nvmlDeviceGetMemoryInfo_v2"
)

// go-nvml calls the newest of each process list it finds (v3, v2, then
// v1): any of them makes the list callable.
var (
	symMPSProcesses       = []string{"nvmlDeviceGetMPSComputeRunningProcesses_v3", "nvmlDeviceGetMPSComputeRunningProcesses_v2", "nvmlDeviceGetMPSComputeRunningProcesses"}
	symGraphicsProcesses  = []string{"nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v2", "nvmlDeviceGetGraphicsRunningProcesses"}
	symComputeProcessesV3 = "nvmlDeviceGetComputeRunningProcesses_v3"
)

// driverCaps is what the loaded driver offers the reader, probed at each
// Init: a driver reloaded under a running agent may be another version.
type driverCaps struct {
	version string
	// memoryV2 says nvmlDeviceGetMemoryInfo_v2 exists (R510 and newer).
	memoryV2 bool
	// mps and graphics say the MPS and graphics process lists exist.
	mps, graphics bool
	// processStructBug is set on the drivers whose _v3 process lists write
	// entries of another size than nvmlProcessInfo_t (see
	// processStructBug): the lists are not called at all.
	processStructBug bool
}

// probeDriver reads what the library offers. lib must be initialised.
func probeDriver(lib nvml.Interface, version string) driverCaps {
	ext := lib.Extensions()
	has := func(names ...string) bool {
		for _, n := range names {
			if ext.LookupSymbol(n) == nil {
				return true
			}
		}
		return false
	}
	return driverCaps{
		version:  version,
		memoryV2: has(symMemoryV2),
		mps:      has(symMPSProcesses...),
		graphics: has(symGraphicsProcesses...),
		// go-nvml calls _v3 whenever the symbol exists: only then does
		// the driver's struct size matter.
		processStructBug: processStructBug(version) && has(symComputeProcessesV3),
	}
}

// processStructBug reports whether driver version v is one of 535.43.02 to
// 535.86.10, whose nvmlDeviceGet{Compute,Graphics,MPSCompute}RunningProcesses_v3
// fill the caller's nvmlProcessInfo_t array (24 bytes an entry, go-nvml's
// ProcessInfo) with 32-byte entries (nvmlProcessInfo_v3_st, with
// usedGpuCcProtectedMemory) without a version bump: every entry after the
// first is garbage, and the array is overrun (go-nvml #75; nvitop #89
// traces it to nvidia-settings commits 39c3e28e, 535.43.02, and 0cb3beff,
// 535.98, which dropped the _v3 symbols; 535.104.05 brought them back with
// the 24-byte struct). Reading those lists would corrupt the agent's
// memory, so on these drivers they are not called.
func processStructBug(v string) bool {
	major, minor, ok := parseDriverVersion(v)
	return ok && major == 535 && minor >= 43 && minor <= 86
}

// parseDriverVersion reads "535.54.03" as 535, 54.
func parseDriverVersion(v string) (major, minor int, ok bool) {
	parts := strings.Split(strings.TrimSpace(v), ".")
	if len(parts) < 2 {
		return 0, 0, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	return major, minor, err1 == nil && err2 == nil
}
