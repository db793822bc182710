package agent_test

import (
	"testing"
	"time"

	"github.com/gpuxray/gpuxray/collector/sim"
	"github.com/gpuxray/gpuxray/test/bench/scenario"
	"github.com/gpuxray/gpuxray/test/bench/simnode"
)

// benchPoll measures one 1 s poll of the whole stack on a simulated node:
// the real NVML reader on the simulated driver, the real kubelet client over
// a unix socket, /proc attribution, the engine and its snapshot. Polls start
// a minute into the scenario, after the first churn.
func benchPoll(b *testing.B, yaml []byte, name string) {
	sc, err := sim.ParseScenario(yaml, name)
	if err != nil {
		b.Fatal(err)
	}
	var n *simnode.Node
	fresh := func() {
		n = simnode.New(b, sc, nil)
		n.Run(time.Second, time.Minute)
	}
	fresh()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if n.Clock.Now().Sub(sc.Start) >= sc.Duration-time.Second {
			b.StopTimer()
			fresh()
			b.StartTimer()
		}
		n.Step(time.Second)
	}
	b.StopTimer()
	s := n.Engine.Snapshot()
	b.ReportMetric(float64(len(s.Allocations)), "allocations")
	// What the agent's own code allocates a poll, the simulated driver and
	// kubelet left out, counted exactly over a minute of polls.
	if n.Clock.Now().Sub(sc.Start) >= sc.Duration-2*time.Minute {
		fresh()
	}
	const polls = 60
	agent, _ := simnode.AllocSplit(func() {
		for range polls {
			n.Step(time.Second)
		}
	})
	b.ReportMetric(float64(agent.Bytes)/polls, "agent-B/poll")
	b.ReportMetric(float64(agent.Objects)/polls, "agent-allocs/poll")
}

// BenchmarkPoll8GPU110Alloc: 8 GPUs, 110 allocations (most time-sliced, with
// churn), per-process attribution.
func BenchmarkPoll8GPU110Alloc(b *testing.B) { benchPoll(b, scenario.Node110(), "node-110.yaml") }

// BenchmarkPollMIG8x7: 8 GPUs in MIG mode, 7 instances each, GPM activity.
func BenchmarkPollMIG8x7(b *testing.B) { benchPoll(b, scenario.MIG56(), "mig-56.yaml") }
