package fleet

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gpuxray/gpuxray/agent"
	"github.com/gpuxray/gpuxray/test/bench/simnode"
)

// TestLatePollsKeepSharedTime: an agent starved of the CPU polls late,
// as 100 live agents on two busy cores do. One poll in eight here comes
// 2–13 s late. Its counters must still agree with the truth over the
// same polls. A process sample read late covers every refresh window
// since the poll before. Taken to cover at most two refreshes, the rest
// of a time-sliced GPU's busy time went idle: 17% of a node's active
// time, and the fleet's live check read it 1% low (seed 7, 100 nodes).
func TestLatePollsKeepSharedTime(t *testing.T) {
	t.Parallel()
	nodes, err := Generate(GenConfig{Seed: 7, Nodes: 1, Start: time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC), Duration: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	sched, err := agent.ParseSchedule(agent.DefaultPeakSchedule, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	sc := nodes[0].Scenario
	for _, late := range []bool{false, true} {
		name := "on time"
		if late {
			name = "late"
		}
		t.Run(name, func(t *testing.T) {
			cfg := agent.DefaultConfig()
			cfg.Windows = sched
			n := simnode.New(t, sc, &cfg)
			la := &liveAgent{node: nodes[0], scenario: sc}
			r := rand.New(rand.NewPCG(1, 2))
			n.Clock.Set(sc.Start.Add(10 * time.Minute))
			var from agentCounters
			for i := range 400 {
				d := time.Second
				if late && r.IntN(8) == 0 {
					d = time.Duration(2+r.IntN(12)) * time.Second
				}
				n.Step(d + time.Duration(r.IntN(300))*time.Millisecond)
				if i == 60 {
					from = countersOf(la, n.Engine.Snapshot())
				}
			}
			to := countersOf(la, n.Engine.Snapshot())
			want := countedTruth(newTruther(asPolled(sc, cfg.PollInterval)), from, to)
			for _, f := range []struct {
				name      string
				got, want float64
			}{
				{"allocated active", to.AllocatedActive - from.AllocatedActive, want.AllocActive},
				{"allocated idle", to.AllocatedIdle - from.AllocatedIdle, want.AllocIdle},
				{"pod-seconds active", to.PodActive - from.PodActive, want.Pods.Active},
				{"pod-seconds idle", to.PodIdle - from.PodIdle, want.Pods.Idle},
			} {
				if math.Abs(f.got-f.want) > 0.001*f.want+0.5 {
					t.Errorf("%s: %.1f s counted, %.1f s true", f.name, f.got, f.want)
				}
			}
		})
	}
}
