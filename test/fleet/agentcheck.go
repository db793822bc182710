package fleet

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/gpuxray/gpuxray/agent"
)

// agentCounters is what one agent had counted at one poll: its snapshot's
// counters summed over windows, the whole GPUs' device counters and its
// allocations' pod-seconds.
type agentCounters struct {
	Node string `json:"node"`
	// Start is the agent's scenario start on the wall clock (its lead-in's
	// beginning), At its poll.
	Start time.Time `json:"start"`
	At    time.Time `json:"at"`
	Polls uint64    `json:"polls"`
	// Device counters of whole GPUs (a MIG instance's reach its GPU).
	Observed, Allocated, AllocatedIdle, AllocatedActive, Unallocated, UnallocatedActive, Gap float64
	// Pod-seconds of every allocation.
	PodAllocated, PodIdle, PodActive float64
	// SourceErrors are the failed calls of each source, summed over
	// reasons.
	SourceErrors map[string]uint64 `json:"source_errors"`
	// Through is, by GPU index, the end of the time a whole GPU's
	// counters hold (agent.DeviceSnapshot.Through): a shared GPU's lag
	// behind At.
	Through map[int]time.Time `json:"through"`
}

func countersOf(a *liveAgent, s *agent.Snapshot) agentCounters {
	c := agentCounters{Node: a.node.Name, Start: a.scenario.Start, At: s.At, Polls: s.Polls, Through: map[int]time.Time{}}
	for _, d := range s.Devices {
		if d.ParentUUID != "" {
			continue
		}
		if !d.Through.IsZero() {
			c.Through[d.GPU] = d.Through
		}
		for _, w := range d.Counters {
			c.Observed += w.Observed
			c.Allocated += w.Allocated
			c.AllocatedIdle += w.AllocatedIdle
			c.AllocatedActive += w.AllocatedActive
			c.Unallocated += w.Unallocated
			c.UnallocatedActive += w.UnallocatedActive
			c.Gap += w.Gap
		}
	}
	c.SourceErrors = map[string]uint64{}
	for _, src := range s.Sources {
		for _, n := range src.Errors {
			c.SourceErrors[src.Name] += n
		}
	}
	for _, al := range s.Allocations {
		for _, w := range al.Counters {
			c.PodAllocated += w.Allocated
			c.PodIdle += w.Idle
			c.PodActive += w.Active
		}
	}
	return c
}

// snapshotAgents is every agent's counters now.
func snapshotAgents(agents []*liveAgent) []agentCounters {
	out := make([]agentCounters, len(agents))
	for i, a := range agents {
		out[i] = countersOf(a, a.engine.Snapshot())
	}
	return out
}

// writeAgentCounters keeps the agents' counters in the run's directory
// (agents-<name>.json), so that a kept run can be set against the engine's
// raw series and the truth afterwards.
func writeAgentCounters(dir, name string, cs []agentCounters) error {
	b, err := json.MarshalIndent(cs, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "agents-"+name+".json"), b, 0o644)
}

// checkAgentCounters sets what each agent counted between two of its polls
// (from, to) against its scenario's truth over the same span, summed over
// the fleet: the agents' own counters, with no scrape, engine or rule
// between them and the truth. The span is the live phase, in which the
// agents follow the wall clock and compete for the CPU with the scrapers,
// vmalert, the engine and the history; a starved agent that lost samples,
// or credited them to the wrong holder, reads under the truth here.
func (l *liveRun) checkAgentCounters(res *Result, from, to []agentCounters) {
	type fig struct {
		name      string
		got, want float64
	}
	var figs []fig
	add := func(name string, got, want float64) {
		for i := range figs {
			if figs[i].name == name {
				figs[i].got += got
				figs[i].want += want
				return
			}
		}
		figs = append(figs, fig{name, got, want})
	}
	var secs, gap float64
	for i, a := range l.agents {
		f, t := from[i], to[i]
		if t.Polls <= f.Polls {
			continue
		}
		want := countedTruth(newTruther(asPolled(a.scenario, l.poll)), f, t)
		add("observed", t.Observed-f.Observed, want.Observed)
		add("allocated", t.Allocated-f.Allocated, want.Allocated)
		add("allocated idle", t.AllocatedIdle-f.AllocatedIdle, want.AllocIdle)
		add("allocated active", t.AllocatedActive-f.AllocatedActive, want.AllocActive)
		add("unallocated", t.Unallocated-f.Unallocated, want.Unallocated)
		add("unallocated active", t.UnallocatedActive-f.UnallocatedActive, want.UnallocActive)
		add("pod-seconds allocated", t.PodAllocated-f.PodAllocated, want.Pods.Allocated)
		add("pod-seconds idle", t.PodIdle-f.PodIdle, want.Pods.Idle)
		add("pod-seconds active", t.PodActive-f.PodActive, want.Pods.Active)
		secs += t.At.Sub(f.At).Seconds()
		gap += t.Gap - f.Gap
	}
	if secs <= 0 {
		res.pass("live", "agents' own counters over the live phase", false, "no agent polled in it")
		return
	}
	// In GPUs: the fleet's seconds over the mean span.
	span := secs / float64(len(l.agents))
	for _, f := range figs {
		res.figure("live", "agents' own counters: "+f.name, "GPUs", f.got/span, f.want/span, floorGPUs)
	}
	// Time no sample covered: an agent that could not poll for longer
	// than the driver keeps samples (about 20 s), or than a device with no
	// activity source is credited across (--sample.max-gap and a poll).
	// It is in the observed figure above already; here, how much.
	res.measure("live: agents' sample gaps (mean GPUs over the live phase)", gap/span, "GPUs")
	res.summary(fmt.Sprintf("agents' own counters over %.0fs", span))
}

// countedTruth is the truth of what an agent counted between two of its
// polls: each GPU's over the time its counters hold at each (Through, or
// the poll where a GPU has none, as a GPU in MIG mode, which its
// instances count), so that a shared GPU's periods still waiting for
// their process samples at either end are not taken for lost time.
func countedTruth(tr *truther, from, to agentCounters) gpuSeconds {
	var out gpuSeconds
	for g := range tr.sc.GPUs {
		end := func(c agentCounters) time.Duration {
			at, ok := c.Through[g]
			if _, mig := tr.sc.MIG[g]; !ok || mig || tr.sc.MIGDynamic[g] {
				at = c.At
			}
			return at.Sub(tr.sc.Start)
		}
		a, b := end(from), end(to)
		if b <= a {
			continue
		}
		out.add(tr.cumulative(b).byGPU[g], 1)
		out.add(tr.cumulative(a).byGPU[g], -1)
	}
	return out
}

// failedSources are, by node, the sources whose calls failed in the
// agent between two of its polls.
func failedSources(from, to []agentCounters) map[string][]string {
	out := map[string][]string{}
	for i := range to {
		for src, n := range to[i].SourceErrors {
			if n > from[i].SourceErrors[src] {
				out[to[i].Node] = append(out[to[i].Node], src)
			}
		}
	}
	return out
}
