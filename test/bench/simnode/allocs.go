package simnode

import (
	"regexp"
	"runtime"
)

// SimulatorFrames matches the functions of a stack that belong to the
// simulated node rather than to the agent: the simulated driver and kubelet,
// go-nvml's mocks, and the gRPC server and its transport that serve the
// simulated kubelet's socket. The harness (test/bench) sorts CPU profile
// samples by it too.
var SimulatorFrames = regexp.MustCompile(`gpuxray/collector/sim\.|go-nvml/pkg/nvml/mock|grpc\.\(\*Server\)|transport\.\(\*http2Server\)|transport\.NewServerTransport|_PodResourcesLister_`)

// Allocs are heap allocations: bytes and objects.
type Allocs struct {
	Bytes, Objects int64
}

// AllocSplit runs f with every allocation recorded (runtime.MemProfileRate
// 1) and returns what was allocated meanwhile by the agent's code and by
// the simulator's (a stack with a SimulatorFrames function in it). The
// counts are exact, not sampled, and independent of the machine's load; a
// goroutine that is not f's but allocates meanwhile (the gRPC transport's
// readers and writers) is counted too, by its stack. f should run long
// enough that the two garbage collections AllocSplit adds do not matter.
func AllocSplit(f func()) (agent, simulator Allocs) {
	old := runtime.MemProfileRate
	runtime.MemProfileRate = 1
	defer func() { runtime.MemProfileRate = old }()
	before := memProfile()
	f()
	after := memProfile()
	for stack, a := range after {
		a.Bytes -= before[stack].Bytes
		a.Objects -= before[stack].Objects
		if a.Objects == 0 {
			continue
		}
		if simulated(stack) {
			simulator.Bytes += a.Bytes
			simulator.Objects += a.Objects
		} else {
			agent.Bytes += a.Bytes
			agent.Objects += a.Objects
		}
	}
	return agent, simulator
}

// simulated reports whether a function of stack, inlined ones included,
// is the simulator's.
func simulated(stack [32]uintptr) bool {
	n := 0
	for n < len(stack) && stack[n] != 0 {
		n++
	}
	frames := runtime.CallersFrames(stack[:n])
	for {
		f, more := frames.Next()
		if SimulatorFrames.MatchString(f.Function) {
			return true
		}
		if !more {
			return false
		}
	}
}

// memProfile returns the allocations recorded so far, by stack. The
// profile is that of the last completed garbage collection cycle and can
// lag one more: two collections bring it up to date.
func memProfile() map[[32]uintptr]Allocs {
	runtime.GC()
	runtime.GC()
	var recs []runtime.MemProfileRecord
	n, _ := runtime.MemProfile(nil, true)
	for {
		recs = make([]runtime.MemProfileRecord, n+50)
		var ok bool
		if n, ok = runtime.MemProfile(recs, true); ok {
			recs = recs[:n]
			break
		}
	}
	out := make(map[[32]uintptr]Allocs, len(recs))
	for _, r := range recs {
		a := out[r.Stack0]
		a.Bytes += r.AllocBytes
		a.Objects += r.AllocObjects
		out[r.Stack0] = a
	}
	return out
}
