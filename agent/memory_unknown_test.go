package agent

import (
	"testing"
	"time"

	"github.com/gpuxray/gpuxray/collector"
)

// TestProcessMemoryUnknown: a process whose memory NVML does not say
// (NVML_VALUE_NOT_AVAILABLE) makes its holder's memory unknown, not the
// sum of the others', on an exclusive GPU and on a shared one alike; a
// holder whose processes all say theirs keeps its figure.
func TestProcessMemoryUnknown(t *testing.T) {
	t.Parallel()
	devs := []*richDevice{
		{info: wholeGPU(0), util: constant(0.5), procs: []gpuProc{
			{pid: 100, memory: 4 << 30, util: constant(0.5)},
			{pid: 101, util: constant(0), memoryUnknown: true},
		}},
		{info: wholeGPU(1), util: constant(0.5), procs: []gpuProc{
			{pid: 200, memory: 2 << 30, util: constant(0.3)},
			{pid: 300, util: constant(0.2), memoryUnknown: true},
		}},
	}
	allocs := []collector.Allocation{alloc("solo", uuidOf(0)), alloc("known", uuidOf(1)+"::0"), alloc("unknown", uuidOf(1)+"::1")}
	procs := fakeProcs{100: "solo", 101: "solo", 200: "known", 300: "unknown"}
	s := runRich(t, devs, allocs, 10*time.Second, WithPods(newFakePods("solo", "known", "unknown")), WithProcesses(procs))
	for pod, want := range map[string]struct {
		has bool
		mem uint64
	}{"solo": {false, 0}, "known": {true, 2 << 30}, "unknown": {false, 0}} {
		a := findAlloc(s, pod)
		if a == nil {
			t.Fatalf("%s missing", pod)
		}
		if a.HasMemory != want.has || (want.has && a.MemoryUsedBytes != want.mem) {
			t.Errorf("%s memory %v/%d, want %v/%d", pod, a.HasMemory, a.MemoryUsedBytes, want.has, want.mem)
		}
	}
}
