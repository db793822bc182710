package sim

import (
	"errors"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"google.golang.org/grpc/codes"
)

func TestParseFaultErrors(t *testing.T) {
	t.Parallel()
	const pod = "pods:\n  - {namespace: a, name: p, devices: [\"gpu:0\"]}\n"
	f := head + pod + "faults:\n  - "
	tests := []parseErrorCase{
		{"not a list", head + "faults: {kind: gpu_lost}\n", "t.yaml:5: faults: want a list, got a mapping"},
		{"kind missing", f + "{gpu: \"gpu:0\", from: 1m, to: 2m}\n", "t.yaml:8: faults[0].kind: missing"},
		{"kind unknown", f + "{kind: meteor, from: 1m, to: 2m}\n",
			`t.yaml:8: faults[0].kind: "meteor" is not a fault; want one of apiserver_down, bad_timestamp, device_ids, ghost_pod, gpu_lost, kubelet_down, kubelet_error, kubelet_restart, kubelet_slow, nvml_error, nvml_hang`},
		{"unknown key", f + "{kind: gpu_lost, gpu: \"gpu:0\", from: 1m, to: 2m, when: now}\n",
			"t.yaml:8: faults[0].when: unknown key; want one of kind, from, to, at, gpu, call, error, stamp, delay, code, pod, ids, phase"},
		{"field of another kind", f + "{kind: kubelet_down, gpu: \"gpu:0\", from: 1m, to: 2m}\n", "t.yaml:8: faults[0].gpu: is not a field of a kubelet_down fault"},
		{"to missing", f + "{kind: kubelet_down, from: 1m}\n", "t.yaml:8: faults[0].to: missing"},
		{"to before from", f + "{kind: kubelet_down, from: 2m, to: 1m}\n", "t.yaml:8: faults[0].to: 1m is not after from (2m)"},
		{"after the end", f + "{kind: kubelet_down, from: 2m, to: 5h}\n", "t.yaml:8: faults[0].to: 5h is after the scenario's end at 4h"},
		{"restart with from", f + "{kind: kubelet_restart, from: 1m}\n", "t.yaml:8: faults[0].at: a kubelet_restart happens at one instant; give at, not from and to"},
		{"gpu out of range", f + "{kind: gpu_lost, gpu: \"gpu:9\", from: 1m, to: 2m}\n", "t.yaml:8: faults[0].gpu: gpu:9 is not one of the node's 8 GPUs (gpu:0 to gpu:7)"},
		{"gpu replica", f + "{kind: gpu_lost, gpu: \"gpu:1::2\", from: 1m, to: 2m}\n", "t.yaml:8: faults[0].gpu: gpu:1::2: a fault concerns a whole GPU; want gpu:1"},
		{"error unknown", f + "{kind: nvml_error, gpu: \"gpu:0\", error: ON_FIRE, from: 1m, to: 2m}\n",
			`t.yaml:8: faults[0].error: "ON_FIRE" is not an injectable NVML error; want one of GPU_IS_LOST, NOT_SUPPORTED, NO_PERMISSION, TIMEOUT, UNKNOWN`},
		{"error missing", f + "{kind: nvml_error, gpu: \"gpu:0\", from: 1m, to: 2m}\n", "t.yaml:8: faults[0].error: missing"},
		{"call unknown", f + "{kind: nvml_hang, gpu: \"gpu:0\", call: clocks, from: 1m, to: 2m}\n",
			`t.yaml:8: faults[0].call: "clocks" is not an NVML call; want one of samples, memory, power, energy, processes, process_samples, all`},
		{"stamp unknown", f + "{kind: bad_timestamp, gpu: \"gpu:0\", stamp: soon, from: 1m, to: 2m}\n", `t.yaml:8: faults[0].stamp: "soon" is not one of future, past, zero`},
		{"delay zero", f + "{kind: kubelet_slow, delay: 0s, from: 1m, to: 2m}\n", "t.yaml:8: faults[0].delay: must be longer than 0s"},
		{"code unknown", f + "{kind: kubelet_error, code: Teapot, from: 1m, to: 2m}\n",
			`t.yaml:8: faults[0].code: "Teapot" is not an injectable gRPC code; want one of DeadlineExceeded, Internal, PermissionDenied, ResourceExhausted, Unavailable, Unknown`},
		{"pod not namespaced", f + "{kind: device_ids, pod: ghost, ids: [x], from: 1m, to: 2m}\n", `t.yaml:8: faults[0].pod: "ghost" is not namespace/name`},
		{"ids empty", f + "{kind: device_ids, pod: a/ghost, ids: [], from: 1m, to: 2m}\n", "t.yaml:8: faults[0].ids: must name at least one device ID"},
		{"ghost is a scenario pod", f + "{kind: ghost_pod, pod: a/p, gpu: \"gpu:0\", from: 1m, to: 2m}\n", "t.yaml:8: faults[0].pod: a/p is pods[0]; a ghost pod is one the scenario does not run"},
		{"ghost phase unknown", f + "{kind: ghost_pod, pod: a/g, gpu: \"gpu:0\", phase: Zombie, from: 1m, to: 2m}\n", `t.yaml:8: faults[0].phase: "Zombie" is not one of Succeeded, Failed, Running, unknown`},
	}
	checkParseErrors(t, tests)
}

// TestFaultsOnTheDriver checks what the simulated driver and kubelet answer
// while faults last, and after.
func TestFaultsOnTheDriver(t *testing.T) {
	t.Parallel()
	sc, err := ParseScenario([]byte(head+`pods:
  - {namespace: a, name: p, devices: ["gpu:0"], util: [{at: 0s, value: 1}]}
faults:
  - {kind: nvml_error, gpu: "gpu:0", call: power, error: NO_PERMISSION, from: 1m, to: 2m}
  - {kind: gpu_lost, gpu: "gpu:1", from: 1m, to: 2m}
  - {kind: nvml_hang, gpu: "gpu:2", from: 1m, to: 2m}
  - {kind: bad_timestamp, gpu: "gpu:3", stamp: future, from: 1m, to: 2m}
  - {kind: kubelet_error, code: ResourceExhausted, from: 1m, to: 2m}
  - {kind: kubelet_slow, delay: 3s, from: 90s, to: 2m}
  - {kind: ghost_pod, pod: a/ghost, gpu: "gpu:0", phase: Succeeded, from: 1m, to: 2m}
`), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	clock := NewVirtualClock(sc.Start.Add(90 * time.Second))
	n, err := NewNode(sc, clock)
	if err != nil {
		t.Fatal(err)
	}
	dev := func(g int) nvml.Device { h, _ := n.NVML().DeviceGetHandleByIndex(g); return h }
	if _, ret := dev(0).GetPowerUsage(); ret != nvml.ERROR_NO_PERMISSION {
		t.Errorf("power on gpu:0 = %v, want NO_PERMISSION", ret)
	}
	if _, ret := dev(0).GetTotalEnergyConsumption(); ret != nvml.SUCCESS {
		t.Errorf("energy on gpu:0 = %v, want SUCCESS", ret)
	}
	if _, _, ret := dev(1).GetSamples(nvml.GPU_UTILIZATION_SAMPLES, 0); ret != nvml.ERROR_GPU_IS_LOST {
		t.Errorf("samples on the lost gpu:1 = %v", ret)
	}
	_, s3, _ := dev(3).GetSamples(nvml.GPU_UTILIZATION_SAMPLES, 0)
	if last := s3[len(s3)-1].TimeStamp; last < uint64(clock.Now().Add(time.Hour).UnixMicro()) {
		t.Errorf("gpu:3's last sample is stamped %d, want one far in the future", last)
	}
	if st := sc.KubeletStateAt(90 * time.Second); st.Code != codes.ResourceExhausted || st.Delay != 3*time.Second || st.Down {
		t.Errorf("kubelet at 90s = %+v", st)
	}
	if len(n.ListResponse().GetPodResources()) != 2 {
		t.Errorf("the ghost pod is not listed: %v", n.ListResponse())
	}
	if p, ok := n.Pod("a", "ghost"); !ok || p.Phase != "Succeeded" {
		t.Errorf("ghost pod = %+v, %v", p, ok)
	}

	// A hung call returns when the clock passes the hang's end.
	done := make(chan nvml.Return)
	go func() { _, _, ret := dev(2).GetSamples(nvml.GPU_UTILIZATION_SAMPLES, 0); done <- ret }()
	for n.BlockedCalls() != 1 {
		time.Sleep(time.Millisecond)
	}
	select {
	case <-done:
		t.Fatal("the hung call returned before the hang's end")
	case <-time.After(20 * time.Millisecond):
	}
	clock.Set(sc.Start.Add(2 * time.Minute))
	if ret := <-done; ret != nvml.SUCCESS {
		t.Errorf("the released call answered %v", ret)
	}

	// After the reset, gpu:1's ring holds only samples since.
	clock.Set(sc.Start.Add(2*time.Minute + 5*time.Second))
	_, s1, ret := dev(1).GetSamples(nvml.GPU_UTILIZATION_SAMPLES, 0)
	if ret != nvml.SUCCESS || len(s1) != 30 {
		t.Errorf("gpu:1 after the reset: %d samples (%v), want the 30 of 5s", len(s1), ret)
	}
	n.Close()
}

// FuzzParseScenario: any bytes give a scenario or a *ScenarioError naming
// the file, never a panic; a scenario that parses builds a node.
func FuzzParseScenario(f *testing.F) {
	f.Add([]byte(demoYAML))
	f.Add([]byte(head + "pods:\n  - {namespace: a, name: p, devices: [\"gpu:0\"], util: [{at: 0s, value: 0.5}]}\n" +
		"faults:\n  - {kind: gpu_lost, gpu: \"gpu:0\", from: 1m, to: 2m}\n  - {kind: kubelet_restart, at: 3m}\n" +
		"  - {kind: ghost_pod, pod: a/g, gpu: \"gpu:1\", phase: Running, from: 1m, to: 2m}\n"))
	f.Add([]byte("start: [\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		sc, err := ParseScenario(data, "f.yaml")
		if err != nil {
			var se *ScenarioError
			if !errors.As(err, &se) || se.File != "f.yaml" {
				t.Fatalf("error %v is not a ScenarioError for f.yaml", err)
			}
			return
		}
		if sc.Duration > 1000*time.Hour {
			return // a node is cheap, but its series are not
		}
		n, err := NewNode(sc, NewVirtualClock(sc.Start.Add(sc.Duration/2)))
		if err != nil {
			t.Fatalf("a parsed scenario does not build a node: %v", err)
		}
		n.Close()
	})
}
