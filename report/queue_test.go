package report

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// parts names a match's parts as a map, for readable failures.
func parts(p [numQueueParts]float64) map[string]float64 {
	return map[string]float64{"free": p[partFree], "quota": p[partQuota], "preemption": p[partPreemption], "outranked": p[partOutranked],
		"fragmented": p[partFragmented], "other type": p[partOtherType], "shortfall": p[partShortfall], "held back": p[partHeldBack]}
}

func sameParts(got, want [numQueueParts]float64) bool {
	for i := range got {
		if math.Abs(got[i]-want[i]) > 1e-9 {
			return false
		}
	}
	return true
}

// ones is n one-GPU pods of no type, at rank r, in class key.
func ones(key int, r, n float64) queueWaiter {
	return queueWaiter{key: key, gtype: anyType, rank: r, pods: []podSet{{gpus: 1, count: n}}}
}

// pod is one pod of g GPUs of type t at rank r.
func pod(key, t int, r, g float64) queueWaiter {
	return queueWaiter{key: key, gtype: t, rank: r, pods: []podSet{{gpus: g, count: 1}}}
}

// TestMatch: each step's waiting is served in the documented order,
// each pod on one node of its type, never an idle GPU twice, and each
// case names what it checks.
func TestMatch(t *testing.T) {
	t.Parallel()
	type w = [numQueueParts]float64
	const h100, a100 = 0, 1
	one := []queueNode{{gtype: h100}}
	for _, tt := range []struct {
		name       string
		step       queueStep
		waiters    []w
		idle       []w
		borrowedOf []float64
	}{
		{
			name: "training waits while notebooks idle: preemption",
			step: queueStep{types: 1, nodes: one,
				waiters: []queueWaiter{ones(0, 100000, 4)},
				idle:    []queueIdle{{key: 0, rank: 10, gpus: 3}, {key: 1, rank: 100000, gpus: 2}},
			},
			// 3 from the notebooks; the job of its own class does not yield.
			waiters: []w{{partPreemption: 3, partOutranked: 1}},
			idle:    []w{{partPreemption: 3}, {partOutranked: 1}},
		},
		{
			name: "free GPUs go to the waiter that cannot preempt",
			step: queueStep{types: 1, nodes: []queueNode{{gtype: h100, free: 1}},
				waiters: []queueWaiter{ones(0, 1000, 1), ones(1, 10, 1)},
				idle:    []queueIdle{{key: 0, rank: 100, gpus: 1}},
			},
			// Had the high waiter taken the free GPU, the low one could
			// not have used the idle one (rank 100 outranks it).
			waiters: []w{{partPreemption: 1}, {partFree: 1}},
			idle:    []w{{partPreemption: 1}},
		},
		{
			name: "equal priority does not preempt",
			step: queueStep{types: 1, nodes: one,
				waiters: []queueWaiter{ones(0, 10, 2)},
				idle:    []queueIdle{{key: 0, rank: 10, gpus: 1}},
			},
			waiters: []w{{partOutranked: 1, partShortfall: 1}},
			idle:    []w{{partOutranked: 1}},
		},
		{
			name: "borrowed quota first, the rest of the queue's idle GPUs by priority",
			step: queueStep{types: 1, nodes: one,
				waiters:  []queueWaiter{ones(0, 0, 3), ones(1, 500, 2)},
				idle:     []queueIdle{{key: 0, rank: 100, cq: "inference", gpus: 3}},
				borrowed: map[string]float64{"inference": 2},
			},
			// 2 of its 3 idle GPUs are on borrowed quota: the rank-0 waiter
			// takes them (it cannot preempt); the third goes by preemption
			// to the rank-500 waiter.
			waiters:    []w{{partQuota: 2, partShortfall: 1}, {partPreemption: 1, partShortfall: 1}},
			idle:       []w{{partQuota: 2, partPreemption: 1}},
			borrowedOf: []float64{2},
		},
		{
			name: "a pool shared by two holders is drawn in proportion",
			step: queueStep{types: 1, nodes: one,
				waiters: []queueWaiter{ones(0, 1000, 1.5)},
				idle:    []queueIdle{{key: 0, rank: 10, gpus: 1}, {key: 1, rank: 10, gpus: 2}},
			},
			waiters: []w{{partPreemption: 1.5}},
			idle:    []w{{partPreemption: 0.5}, {partPreemption: 1}},
		},
		{
			name: "higher classes take the holders just below them",
			step: queueStep{types: 1, nodes: one,
				waiters: []queueWaiter{ones(0, 1000, 1), ones(1, 100, 1)},
				idle:    []queueIdle{{key: 0, rank: 500, gpus: 1}, {key: 1, rank: 10, gpus: 1}},
			},
			waiters: []w{{partPreemption: 1}, {partPreemption: 1}},
			idle:    []w{{partPreemption: 1}, {partPreemption: 1}},
		},
		{
			name:    "nothing idle: shortfall",
			step:    queueStep{types: 1, nodes: one, waiters: []queueWaiter{ones(0, 5, 2)}},
			waiters: []w{{partShortfall: 2}},
		},
		{
			name: "a 4-GPU pod and two idle GPUs on each of two nodes: fragmented",
			step: queueStep{types: 1, nodes: []queueNode{{gtype: h100, free: 2}, {gtype: h100, free: 1}},
				waiters: []queueWaiter{pod(0, h100, 0, 4)},
				idle:    []queueIdle{{key: 0, node: 1, rank: 0, gpus: 1}},
			},
			waiters: []w{{partFragmented: 4}},
			idle:    []w{{}},
		},
		{
			name: "the same 4 idle GPUs on one node run it",
			step: queueStep{types: 1, nodes: []queueNode{{gtype: h100, free: 2}, {gtype: h100}},
				waiters: []queueWaiter{pod(0, h100, 100, 4)},
				idle:    []queueIdle{{key: 0, node: 0, rank: 10, gpus: 2}},
			},
			waiters: []w{{partFree: 2, partPreemption: 2}},
			idle:    []w{{partPreemption: 2}},
		},
		{
			name: "an H100 waiter next to free A100s: other type",
			step: queueStep{types: 2, nodes: []queueNode{{gtype: a100, free: 8}},
				waiters: []queueWaiter{pod(0, h100, 0, 2)},
			},
			waiters: []w{{partOtherType: 2}},
		},
		{
			name: "a waiter of any type takes the A100s",
			step: queueStep{types: 2, nodes: []queueNode{{gtype: a100, free: 8}},
				waiters: []queueWaiter{pod(0, anyType, 0, 2)},
			},
			waiters: []w{{partFree: 2}},
		},
		{
			name: "too few GPUs of its type anywhere: shortfall, though one node had some",
			step: queueStep{types: 1, nodes: []queueNode{{gtype: h100}},
				waiters: []queueWaiter{pod(0, h100, 1000, 4)},
				idle:    []queueIdle{{key: 0, node: 0, rank: 100, gpus: 2}},
			},
			waiters: []w{{partShortfall: 4}},
			idle:    []w{{}},
		},
		{
			name: "a node short of a GPU for half the step holds a pod half the step",
			step: queueStep{types: 1, nodes: []queueNode{{gtype: h100, free: 3.5}},
				waiters: []queueWaiter{pod(0, h100, 0, 4)},
			},
			waiters: []w{{partFree: 2, partShortfall: 2}},
		},
		{
			name: "the larger pod first, each on the tightest node",
			step: queueStep{types: 1, nodes: []queueNode{{gtype: h100, free: 2}, {gtype: h100, free: 8}},
				waiters: []queueWaiter{pod(0, h100, 0, 2), pod(1, h100, 0, 8)},
			},
			waiters: []w{{partFree: 2}, {partFree: 8}},
		},
		{
			name: "a gang runs all at once or not at all",
			step: queueStep{types: 1, nodes: []queueNode{{gtype: h100, free: 4}, {gtype: h100, free: 3}},
				waiters: []queueWaiter{{key: 0, gtype: h100, pods: []podSet{{gpus: 4, count: 2}}, gang: true}},
			},
			waiters: []w{{partShortfall: 8}},
		},
		{
			name: "a gang that fits two nodes",
			step: queueStep{types: 1, nodes: []queueNode{{gtype: h100, free: 4}, {gtype: h100, free: 4}},
				waiters: []queueWaiter{{key: 0, gtype: h100, pods: []podSet{{gpus: 4, count: 2}}, gang: true}},
			},
			waiters: []w{{partFree: 8}},
		},
		{
			name: "a workload Kueue held back while GPUs were free waits on quota",
			step: queueStep{types: 1, nodes: []queueNode{{gtype: h100, free: 8}},
				waiters: []queueWaiter{{key: 0, gtype: h100, pods: []podSet{{gpus: 4, count: 2}}, gang: true, kueue: true}},
			},
			waiters: []w{{partHeldBack: 8}},
		},
		{
			name: "typed waiters before those of any type",
			step: queueStep{types: 2, nodes: []queueNode{{gtype: h100, free: 1}, {gtype: a100, free: 1}},
				waiters: []queueWaiter{pod(0, anyType, 0, 1), pod(1, h100, 0, 1)},
			},
			waiters: []w{{partFree: 1}, {partFree: 1}},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := match(tt.step)
			for i := range tt.waiters {
				if !sameParts(m.waiter[i], tt.waiters[i]) {
					t.Errorf("waiter %d: %v, want %v", i, parts(m.waiter[i]), parts(tt.waiters[i]))
				}
			}
			for i := range tt.idle {
				if !sameParts(m.idle[i], tt.idle[i]) {
					t.Errorf("holder %d gave %v, want %v", i, parts(m.idle[i]), parts(tt.idle[i]))
				}
			}
			for i, b := range tt.borrowedOf {
				if math.Abs(m.borrowedShare[i]-b) > 1e-9 {
					t.Errorf("holder %d: %g on borrowed quota, want %g", i, m.borrowedShare[i], b)
				}
			}
		})
	}
}

// TestMatchIsMaximal: on random steps of one-GPU pods on one node, free,
// quota and preemption together serve as many waiting GPUs as a maximum
// flow through the same reach (anyone takes free and borrowed GPUs; a
// waiter takes idle GPUs of lower rank), no idle GPU serves twice, and
// every waiting GPU is in one part.
func TestMatchIsMaximal(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 16))
	for n := 0; n < 2000; n++ {
		s := queueStep{types: 1, nodes: []queueNode{{gtype: 0, free: float64(r.IntN(3))}}}
		ranks := []float64{0, 10, 100, 1000}
		for k := range 1 + r.IntN(4) {
			s.waiters = append(s.waiters, ones(k, ranks[r.IntN(4)], float64(r.IntN(5))))
		}
		cqs := []string{"", "", "a", "b"}
		s.borrowed = map[string]float64{"a": float64(r.IntN(3)), "b": float64(r.IntN(2))}
		for k := range r.IntN(5) {
			s.idle = append(s.idle, queueIdle{key: k, rank: ranks[r.IntN(4)], cq: cqs[r.IntN(4)], gpus: float64(r.IntN(4))})
		}
		m := match(s)
		served := checkMatch(t, n, s, m)
		if want := maxFlow(s); math.Abs(served-want) > 1e-9 {
			t.Fatalf("step %d: %+v served %g by free, quota and preemption, a maximum flow serves %g", n, s, served, want)
		}
	}
}

// checkMatch fails when a match's parts do not add up to each waiter's
// GPUs, a part is negative, or holders gave more than they had or than
// waiters took; it returns the GPUs served by free, quota and preemption.
func checkMatch(t *testing.T, n int, s queueStep, m queueMatch) float64 {
	t.Helper()
	var served, given, fromIdle float64
	for i, w := range s.waiters {
		sum := 0.0
		for _, v := range m.waiter[i] {
			if v < -1e-9 {
				t.Fatalf("step %d: a negative part %v", n, parts(m.waiter[i]))
			}
			sum += v
		}
		if math.Abs(sum-w.gpus()) > 1e-6 {
			t.Fatalf("step %d: waiter %d's parts %v add up to %g, want %g", n, i, parts(m.waiter[i]), sum, w.gpus())
		}
		served += m.waiter[i][partFree] + m.waiter[i][partQuota] + m.waiter[i][partPreemption]
		fromIdle += m.waiter[i][partQuota] + m.waiter[i][partPreemption] + m.waiter[i][partOutranked]
	}
	for i, h := range s.idle {
		g := m.idle[i][partQuota] + m.idle[i][partPreemption] + m.idle[i][partOutranked]
		if g > h.gpus+1e-6 {
			t.Fatalf("step %d: holder %d gave %g of its %g idle GPUs", n, i, g, h.gpus)
		}
		given += g
	}
	if math.Abs(fromIdle-given) > 1e-6 {
		t.Fatalf("step %d: waiters took %g idle GPUs, holders gave %g", n, fromIdle, given)
	}
	return served
}

// TestMatchShapes: on random steps of pods of 1 to 8 GPUs, gangs, two GPU
// types and several nodes, the parts add up, no holder gives more than it
// had, and what nodes gave and what the leftovers drew stays within what
// each type had.
func TestMatchShapes(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(2, 28))
	for n := 0; n < 3000; n++ {
		s := queueStep{types: 2, borrowed: map[string]float64{"a": float64(r.IntN(4))}}
		supply := [2]float64{}
		for range 1 + r.IntN(5) {
			nd := queueNode{gtype: r.IntN(2), free: float64(r.IntN(5)) * 0.5}
			supply[nd.gtype] += nd.free
			s.nodes = append(s.nodes, nd)
		}
		for k := range r.IntN(6) {
			h := queueIdle{key: k, node: r.IntN(len(s.nodes)), rank: float64(r.IntN(3) * 100), cq: []string{"", "a"}[r.IntN(2)], gpus: float64(r.IntN(9)) * 0.5}
			supply[s.nodes[h.node].gtype] += h.gpus
			s.idle = append(s.idle, h)
		}
		for k := range r.IntN(6) {
			w := queueWaiter{key: k, gtype: r.IntN(3) - 1, rank: float64(r.IntN(3) * 100), gang: r.IntN(4) == 0}
			for range 1 + r.IntN(2) {
				w.pods = append(w.pods, podSet{gpus: float64(1 + r.IntN(8)), count: float64(1 + r.IntN(3))})
			}
			s.waiters = append(s.waiters, w)
		}
		m := match(s)
		checkMatch(t, n, s, m)
		var used float64
		for i := range s.waiters {
			for _, p := range []int{partFree, partQuota, partPreemption, partOutranked, partFragmented, partOtherType} {
				used += m.waiter[i][p]
			}
		}
		if used > supply[0]+supply[1]+1e-6 {
			t.Fatalf("step %d: waiters used %g GPUs of %g", n, used, supply[0]+supply[1])
		}
		for i, w := range s.waiters {
			if w.gang {
				whole := m.waiter[i][partShortfall]
				if whole > 1e-9 && math.Abs(whole-w.gpus()) > 1e-6 {
					t.Fatalf("step %d: gang %d ran in part: %v", n, i, parts(m.waiter[i]))
				}
			}
			if w.gtype == anyType && m.waiter[i][partOtherType] > 0 {
				t.Fatalf("step %d: waiter %d of any type got another type: %v", n, i, parts(m.waiter[i]))
			}
		}
	}
}

// maxFlow is the most waiting GPUs free GPUs, borrowed quota and lower-
// ranked idle GPUs can serve in step s (one node), by augmenting paths on
// a small graph: source → waiter → supply → sink.
func maxFlow(s queueStep) float64 {
	// Supplies: free GPUs and each holder's part on borrowed quota, which
	// any waiter reaches; each holder's other part, which the waiters that
	// outrank it reach.
	byCQ := map[string]float64{}
	for _, h := range s.idle {
		if h.cq != "" {
			byCQ[h.cq] += h.gpus
		}
	}
	type supply struct {
		cap   float64
		reach func(w queueWaiter) bool
	}
	all := func(queueWaiter) bool { return true }
	sup := []supply{{cap: s.nodes[0].free, reach: all}}
	for _, h := range s.idle {
		q := 0.0
		if h.cq != "" && byCQ[h.cq] > 0 {
			q = h.gpus * min(byCQ[h.cq], s.borrowed[h.cq]) / byCQ[h.cq]
		}
		rank := h.rank
		sup = append(sup, supply{cap: q, reach: all}, supply{cap: h.gpus - q, reach: func(w queueWaiter) bool { return w.rank > rank }})
	}
	nw, ns := len(s.waiters), len(sup)
	// Nodes: 0 source, 1..nw waiters, nw+1..nw+ns supplies, nw+ns+1 sink.
	n := nw + ns + 2
	capm := make([][]float64, n)
	for i := range capm {
		capm[i] = make([]float64, n)
	}
	sink := n - 1
	for i, w := range s.waiters {
		capm[0][1+i] = w.gpus()
		for j, sp := range sup {
			if sp.reach(w) {
				capm[1+i][1+nw+j] = math.Inf(1)
			}
		}
	}
	for j, sp := range sup {
		capm[1+nw+j][sink] = sp.cap
	}
	flow := 0.0
	for {
		prev := make([]int, n)
		for i := range prev {
			prev[i] = -1
		}
		prev[0] = 0
		queue := []int{0}
		for len(queue) > 0 && prev[sink] < 0 {
			u := queue[0]
			queue = queue[1:]
			for v := range n {
				if prev[v] < 0 && capm[u][v] > 1e-12 {
					prev[v] = u
					queue = append(queue, v)
				}
			}
		}
		if prev[sink] < 0 {
			return flow
		}
		aug := math.Inf(1)
		for v := sink; v != 0; v = prev[v] {
			aug = min(aug, capm[prev[v]][v])
		}
		for v := sink; v != 0; v = prev[v] {
			capm[prev[v]][v] -= aug
			capm[v][prev[v]] += aug
		}
		flow += aug
	}
}

// TestQueueVerdictAndRendering: waiting that idle lower-priority GPUs
// could have run reads as a scheduling problem, waiting no idle GPU could
// have run as a capacity one, and the text and HTML reports say it, with
// the split and the holders that blocked waiters.
func TestQueueVerdictAndRendering(t *testing.T) {
	sched := QueueFigures{Hours: 10, PendingGPUHours: 50, PreemptionGPUHours: 41, ShortfallGPUHours: 9}
	capa := QueueFigures{Hours: 10, PendingGPUHours: 50, PreemptionGPUHours: 5, ShortfallGPUHours: 45}
	for _, c := range []struct {
		f        QueueFigures
		kind     string
		sentence string
	}{
		{sched, QueueScheduling, "82% of the waiting at peak could have run on idle GPUs held by lower-priority or borrowing work (82% by preemption): a scheduling problem, not a capacity one."},
		{capa, QueueCapacity, "90% of the waiting at peak found no idle GPU of its type that could have run it: a capacity problem, not a scheduling one; 10% could have run"},
		{QueueFigures{Hours: 10, PendingGPUHours: 50, OutrankedGPUHours: 40, ShortfallGPUHours: 10}, QueueIdle, "80% of the waiting at peak could have run only on idle GPUs held by work of equal or higher priority"},
		{QueueFigures{Hours: 10}, QueueNone, "Nothing waited for GPUs at peak."},
		// Free GPU time under 0.5% of the waiting (pods ending and starting)
		// is neither named nor a knob.
		{QueueFigures{Hours: 10, PendingGPUHours: 50, FreeGPUHours: 0.2, PreemptionGPUHours: 40.8, ShortfallGPUHours: 9}, QueueScheduling, "82% of the waiting at peak could have run on idle GPUs held by lower-priority or borrowing work (82% by preemption): a scheduling problem, not a capacity one. Look at priority classes and preemption."},
		{QueueFigures{Hours: 10, PendingGPUHours: 50, FreeGPUHours: 0.2, ShortfallGPUHours: 49.8}, QueueCapacity, "100% of the waiting at peak found no idle GPU of its type that could have run it: a capacity problem, not a scheduling one."},
		// Idle GPUs of the type scattered over nodes: fragmentation, with
		// its knob.
		{QueueFigures{Hours: 10, PendingGPUHours: 40, FragmentedGPUHours: 30, ShortfallGPUHours: 10}, QueueFragmentation, "75% of the waiting at peak could have run on the free and idle GPUs of its type, but no one node had enough of them: fragmentation, neither scheduling nor capacity. Look at defragmenting."},
		// Waiting for H100s next to idle A100s: capacity of its type, and
		// the GPU-type knob.
		{QueueFigures{Hours: 10, PendingGPUHours: 40, OtherTypeGPUHours: 40}, QueueCapacity, "100% of the waiting at peak found no idle GPU of its type that could have run it: a capacity problem, not a scheduling one (100% only on idle GPUs of another type). Look at GPU types."},
	} {
		q := Queue{Available: true, PrioritiesKnown: true, Basis: BasisPeak, All: c.f, Peak: c.f}
		kind, sentence, _ := queueVerdict(q)
		if kind != c.kind || !strings.HasPrefix(sentence, c.sentence) {
			t.Errorf("%+v: %s %q, want %s %q", c.f, kind, sentence, c.kind, c.sentence)
		}
	}
	if kind, _, _ := queueVerdict(Queue{Basis: BasisPeak, Peak: sched}); kind != QueueUnknown {
		t.Errorf("no kube-state-metrics: kind %s, want %s", kind, QueueUnknown)
	}

	q := Queue{Available: true, PrioritiesKnown: true, Basis: BasisPeak, All: sched, Peak: sched,
		Classes:    []QueueClass{{PriorityClass: "training-high", Priority: 1000, Queue: "team-a", All: sched, Peak: sched}},
		TopHolders: []QueueHolder{{Namespace: "ml", Kind: "Notebook", Name: "jupyter-ana", PriorityClass: "notebook-low", IdleGPUHours: 60, PeakIdleGPUHours: 50, PeakPreemptionGPUHours: 41, PreemptionGPUHours: 41}}}
	q.Kind, q.Sentence, q.Knobs = queueVerdict(q)
	r := &Report{Range: Range{Timezone: "UTC"}, Queue: q}
	var b bytes.Buffer
	if err := WriteText(&b, r); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	for _, want := range []string{"QUEUE  82% of the waiting at peak", "by preempting lower priority", "41 GPU-h", "training-high", "team-a", "ml/jupyter-ana", "notebook-low"} {
		if !strings.Contains(text, want) {
			t.Errorf("the text report lacks %q:\n%s", want, text)
		}
	}
	b.Reset()
	if err := WriteHTML(&b, r); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, want := range []string{`id="queue"`, `<svg id="queue-chart"`, "82% of the waiting at peak", "ml/jupyter-ana", "by preempting lower priority · 41 GPU-h at peak"} {
		if !strings.Contains(page, want) {
			t.Errorf("the HTML report lacks %q", want)
		}
	}
}
