//go:build e2e

package bench

import (
	"fmt"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuxray/gpuxray/agent"
	"github.com/gpuxray/gpuxray/collector/sim"
	"github.com/gpuxray/gpuxray/test/bench/simnode"
)

const threshold = 0.05

// gaugeScrape is the usual method's scrape interval.
const gaugeScrape = 15 * time.Second

// bursty is an inference server answering one request every two seconds
// (200 ms of kernels), for an hour, next to a steady trainer.
const bursty = `start: 2026-12-01T08:00:00Z
duration: 1h
system: dgxh100
gpus: 2
pods:
  - {namespace: inference, name: vllm-0, devices: ["gpu:0"], util: {duty: {period: 2s, busy: 200ms, value: 1}}}
  - {namespace: research, name: train-0, devices: ["gpu:1"], util: [{at: 0s, value: 0.9}, {at: 30m, value: 0}]}
`

// sparse is a batch of one 1 s burst every 30 s, and a notebook whose cells
// run 3 s every minute at 40%.
const sparse = `start: 2026-12-01T08:00:00Z
duration: 1h
system: dgxh100
gpus: 2
pods:
  - {namespace: batch, name: poller-0, devices: ["gpu:0"], util: {duty: {period: 30s, busy: 1s, value: 0.8}}}
  - {namespace: ds, name: notebook-0, devices: ["gpu:1"], from: 5m, util: [{at: 5m, duty: {period: 1m, busy: 3s, value: 0.4, idle: 0.01}}]}
`

// usualIdle is the idle time the usual method finds for one pod: a
// utilization gauge as dcgm-exporter exports it (DCGM_FI_DEV_GPU_UTIL, the
// driver's current utilization, i.e. the latest sample period's busy
// percentage), scraped every 15 s, each scrape counted as 15 s idle when
// below the threshold — in PromQL,
//
//	15 * sum_over_time((DCGM_FI_DEV_GPU_UTIL{pod="p"} < bool 5)[1h:15s])
//
// It reads the same simulated driver, and on a shared GPU it sees the
// device's value, as dcgm-exporter copies it to every pod.
func usualIdle(t *testing.T, sc *sim.Scenario, pod int) float64 {
	t.Helper()
	clock := sim.NewVirtualClock(sc.Start)
	node, err := sim.NewNode(sc, clock)
	if err != nil {
		t.Fatal(err)
	}
	p := sc.Pods[pod]
	dev, ret := node.NVML().DeviceGetHandleByIndex(p.Devices[0].GPU)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	var idle float64
	// Scrapes fall on a 15 s grid from the scenario start, as Prometheus's
	// do on its own clock; each stands for the 15 s that end at it.
	for at := gaugeScrape; at <= sc.Duration; at += gaugeScrape {
		if at <= p.From || at > p.To {
			continue
		}
		clock.Set(sc.Start.Add(at))
		_, samples, ret := dev.GetSamples(nvml.GPU_UTILIZATION_SAMPLES, 0)
		if ret != nvml.SUCCESS || len(samples) == 0 {
			t.Fatalf("GetSamples at %s: %v", at, ret)
		}
		last := samples[len(samples)-1]
		util := float64(uint32(last.SampleValue[0])|uint32(last.SampleValue[1])<<8) / 100
		if util < threshold {
			idle += gaugeScrape.Seconds()
		}
	}
	return idle
}

// TestIdleAccuracy compares idle seconds per pod against the scenario's
// truth at NVML's resolution (sim.Scenario.SampledTruth: a sample period is
// idle when the pod's mean busy ratio over it is below the threshold; the
// continuous truth is logged next to it) for gpuxray (every sample integrated, on the virtual clock)
// and the usual gauge method, on the same simulated driver. Errors are in
// percent of the pod's allocated time.
func TestIdleAccuracy(t *testing.T) {
	t.Parallel()
	load := func(name string) *sim.Scenario {
		sc, err := sim.LoadScenario(filepath.Join("..", "scenarios", name))
		if err != nil {
			t.Fatal(err)
		}
		return sc
	}
	parse := func(yaml, name string) *sim.Scenario {
		sc, err := sim.ParseScenario([]byte(yaml), name)
		if err != nil {
			t.Fatal(err)
		}
		return sc
	}
	cases := []struct {
		name string
		sc   *sim.Scenario
		// bursty: ours must be at least 10× more accurate than the usual.
		bursty bool
	}{
		{"demo", sim.Demo(), false},
		{"piecewise", load("piecewise.yaml"), false},
		{"shared", load("shared.yaml"), false},
		{"bursty", parse(bursty, "bursty.yaml"), true},
		{"sparse", parse(sparse, "sparse.yaml"), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cfg := agent.DefaultConfig()
			cfg.Retention = 365 * 24 * time.Hour
			n := simnode.New(t, c.sc, &cfg)
			n.Run(time.Second, c.sc.Duration+2*time.Second)
			snap := n.Engine.Snapshot()
			var worstOurs, worstUsual float64
			exact := c.sc.Truth(threshold)
			for i, row := range c.sc.SampledTruth(threshold) {
				a := findAlloc(snap, row.Namespace, row.Pod, n.Sim.DeviceID(row.Device))
				if a == nil {
					t.Fatalf("%s/%s on %s: no allocation in the snapshot", row.Namespace, row.Pod, row.Device)
				}
				var ours float64
				for _, wc := range a.Counters {
					ours += wc.Idle
				}
				usual := usualIdle(t, c.sc, podIndex(c.sc, row.Namespace, row.Pod))
				errOurs := 100 * math.Abs(ours-row.IdleSeconds) / row.AllocatedSeconds
				errUsual := 100 * math.Abs(usual-row.IdleSeconds) / row.AllocatedSeconds
				t.Logf("%-28s idle: truth %8.1f s (%8.1f s continuous) of %8.1f s; gpuxray %8.1f s (error %.3f%%); gauge every 15 s %8.1f s (error %.2f%%)",
					row.Namespace+"/"+row.Pod, row.IdleSeconds, exact[i].IdleSeconds, row.AllocatedSeconds, ours, errOurs, usual, errUsual)
				if errOurs > 1 {
					t.Errorf("%s/%s: gpuxray's idle seconds are %.3f%% of allocated time off the truth, want ≤ 1%%", row.Namespace, row.Pod, errOurs)
				}
				worstOurs, worstUsual = max(worstOurs, errOurs), max(worstUsual, errUsual)
			}
			t.Logf("worst error: gpuxray %.3f%%, gauge %.2f%% of allocated time", worstOurs, worstUsual)
			if c.bursty && !(worstUsual >= 10*worstOurs) {
				t.Errorf("bursty: gauge error %.3f%% is not ≥ 10× gpuxray's %.3f%%", worstUsual, worstOurs)
			}
		})
	}
}

func podIndex(sc *sim.Scenario, ns, name string) int {
	for i, p := range sc.Pods {
		if p.Namespace == ns && p.Name == name {
			return i
		}
	}
	panic(fmt.Sprintf("no pod %s/%s", ns, name))
}

func findAlloc(s *agent.Snapshot, ns, pod, deviceID string) *agent.AllocationSnapshot {
	for _, a := range s.Allocations {
		if a.Namespace == ns && a.Pod == pod && (a.UUID == deviceID || len(deviceID) > len(a.UUID) && deviceID[:len(a.UUID)] == a.UUID) {
			return a
		}
	}
	return nil
}
