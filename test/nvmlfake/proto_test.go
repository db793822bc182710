package nvmlfake

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestProtocolAgrees: server.go's ops and lists are proto.h's.
func TestProtocolAgrees(t *testing.T) {
	t.Parallel()
	goOps := map[string]int{
		"OP_INIT": opInit, "OP_SHUTDOWN": opShutdown, "OP_DRIVER_VERSION": opDriverVersion, "OP_COUNT": opCount,
		"OP_HANDLE_BY_INDEX": opHandleByIndex, "OP_HANDLE_BY_UUID": opHandleByUUID, "OP_UUID": opUUID, "OP_NAME": opName,
		"OP_INDEX": opIndex, "OP_MINOR": opMinor, "OP_MIG_MODE": opMIGMode, "OP_SAMPLES": opSamples,
		"OP_PROCESS_UTILIZATION": opProcessUtilization, "OP_MEMORY": opMemory, "OP_MEMORY_V2": opMemoryV2, "OP_POWER": opPower,
		"OP_ENERGY": opEnergy, "OP_PROCESSES": opProcesses, "OP_MAX_MIG": opMaxMIG, "OP_MIG_HANDLE": opMIGHandle,
		"OP_GPU_INSTANCE_ID": opGPUInstanceID, "OP_COMPUTE_INSTANCE_ID": opComputeInstanceID, "OP_ATTRIBUTES": opAttributes,
		"OP_PARENT": opParent, "OP_IS_MIG": opIsMIG, "OP_UTILIZATION_RATES": opUtilizationRates, "OP_GPM_SUPPORT": opGPMSupport,
		"OP_GPM_ALLOC": opGPMAlloc, "OP_GPM_FREE": opGPMFree, "OP_GPM_GET": opGPMGet, "OP_GPM_MIG_GET": opGPMMIGGet,
		"OP_GPM_METRICS": opGPMMetrics, "OP_NVML_VERSION": opNVMLVersion, "OP_CUDA_VERSION": opCUDAVersion,
		"LIST_COMPUTE": listCompute, "LIST_GRAPHICS": listGfx, "LIST_MPS": listMPS,
	}
	c := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^\s*((?:OP|LIST)_[A-Z0-9_]+) = (\d+),`).FindAllStringSubmatch(string(protoHeader), -1) {
		n, _ := strconv.Atoi(m[2])
		c[m[1]] = n
	}
	for name, v := range goOps {
		if c[name] != v {
			t.Errorf("%s: proto.h says %d, server.go %d", name, c[name], v)
		}
	}
	for name := range c {
		if _, ok := goOps[name]; !ok && !strings.HasPrefix(name, "_") {
			t.Errorf("%s is in proto.h, not in server.go", name)
		}
	}
}
