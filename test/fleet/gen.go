// Package fleet runs gpuxray as a fleet on a real metrics engine:
// simulated nodes generated from a seed, served live by one process on a
// loopback port each, scraped by two vmagent shards into VictoriaMetrics,
// with vmalert evaluating deploy/prometheus/gpuxray-rules.yaml and sending
// to a real Alertmanager; then a week of history replayed, imported with
// its timestamps, and read back by `gpuxray report`. Every figure the engine
// answers is set against the scenarios' own truth (docs/fleet.md).
package fleet

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/gpuxray/gpuxray/collector/sim"
	"github.com/gpuxray/gpuxray/report"
)

// GenConfig says which fleet Generate makes.
type GenConfig struct {
	// Seed makes the fleet: the same seed, the same scenarios.
	Seed uint64
	// Nodes is how many nodes of 8 GPUs.
	Nodes int
	// Start is the scenarios' start, on the hour; a Monday 00:00 UTC for a
	// week under the default peak schedule (Mon-Fri 09:00-18:00 UTC).
	Start time.Time
	// Duration is each scenario's length (a week, or a day for a short run).
	Duration time.Duration
	// DRAShare is the share of nodes whose GPUs come through Dynamic
	// Resource Allocation (`allocation: dra`, pods sharing a GPU through one
	// `claim:`). It stays 0 until the scenario format has those keys
	// (DRASupported): Generate refuses it before.
	DRAShare float64
}

// Node kinds. Each mixes several workloads, so that a history replayed
// from two nodes (one of each) holds every kind of use; node i is
// nodeKinds[i%2].
const (
	// KindH100 is a DGX H100: a queue of training jobs on GPUs 0-3 (multi-GPU,
	// with stalls and gaps), developers' pods time-slicing GPUs 4 and 5, a
	// GPU busy outside Kubernetes that later serves a notebook (6), and a GPU
	// in MIG mode (7) whose instances GPM measures.
	KindH100 = "h100"
	// KindA100 is a DGX A100: notebooks on the MIG instances of GPUs 0-3 (an
	// A100 has no activity source in MIG mode: only their allocated time
	// counts), and inference replicas on GPUs 4-7 whose bursty load follows
	// the day, two of them scaled down every night.
	KindA100 = "a100"
)

var nodeKinds = []string{KindH100, KindA100}

// h100Product is GPU Feature Discovery's product label of the fleet's
// H100s, which waiters select.
var h100Product = report.GPUProduct(sim.ProductName("dgxh100"))

// GPUsPerNode is every generated node's GPU count.
const GPUsPerNode = 8

// Node is one generated node: its scenario file and the scenario parsed
// from it, and what the truth needs beyond the scenario.
type Node struct {
	Name string
	Kind string
	// YAML is the scenario file, as `gpuxray replay` reads it.
	YAML     []byte
	Scenario *sim.Scenario
	// Token is the string every node-specific name of the node contains
	// (its name): a copy of the node's history under another node's name
	// replaces it.
	Token string
}

// The rules every generated scenario keeps, so that its own truth
// (Scenario.GPUTruth, Scenario.Truth) is what an agent can measure:
//
//   - Changes fall on a 5-minute grid, within the first hour (which the
//     live run plays) on whole minutes: the history's scrapes and the
//     report's steps resolve them.
//   - A pod is idle for its last minutes (a job saving its checkpoint, a
//     server drained), and a GPU is idle before a pod takes it. The agent
//     learns who holds a GPU once a poll and credits the samples since the
//     last poll to the pods the kubelet lists then: a pod idle at both ends
//     of its allocation is credited with exactly its own time.
//   - No pod starts or ends at a peak window's boundary (09:00, 18:00), for
//     the same reason; nor does a pod on a time-sliced GPU change its use
//     there: the agent spreads a process sample's busy time over the
//     refresh it covers, and would move some across the boundary.
//   - Bursts fall on the simulated driver's sample grid (sim.SamplePeriod,
//     166,667 µs from the scenario's start): a sample that straddled a
//     burst's edge would be neither idle nor busy as the truth says.
const (
	grid      = 5 * time.Minute
	idleTail  = 5 * time.Minute
	firstHour = time.Hour
)

// NodeName is the name of node i of a fleet of n.
func NodeName(i, n int) string {
	w := max(3, len(fmt.Sprint(n-1)))
	return fmt.Sprintf("gx-%0*d", w, i)
}

// Generate makes the fleet's scenarios. Each is parsed back with
// sim.ParseScenario, so a generated file is always one gpuxray accepts.
func Generate(c GenConfig) ([]*Node, error) {
	switch {
	case c.Nodes < 1:
		return nil, fmt.Errorf("fleet: %d nodes, want at least 1", c.Nodes)
	case c.Duration < 2*time.Hour || c.Duration%time.Hour != 0:
		return nil, fmt.Errorf("fleet: duration %s, want whole hours, at least 2h", c.Duration)
	case !c.Start.Equal(c.Start.Truncate(time.Hour)):
		return nil, fmt.Errorf("fleet: start %s is not on the hour", c.Start.Format(time.RFC3339))
	case c.DRAShare < 0 || c.DRAShare > 1:
		return nil, fmt.Errorf("fleet: DRA share %g is not a share between 0 and 1", c.DRAShare)
	case c.DRAShare > 0 && !DRASupported():
		return nil, fmt.Errorf("fleet: DRA nodes need the scenario keys `allocation: dra` and `claim:`, which collector/sim does not read yet")
	}
	out := make([]*Node, c.Nodes)
	for i := range out {
		// Each node draws from its own stream: node i is the same in a fleet
		// of 4 and of 1,000.
		r := rand.New(rand.NewPCG(c.Seed, uint64(i)))
		name := NodeName(i, c.Nodes)
		g := &nodeGen{r: r, name: name, start: c.Start, dur: c.Duration, layouts: map[int][]string{}}
		// Spread through the fleet: every 1/DRAShare-th node, whatever
		// its size, and never only the first nodes.
		g.dra = math.Floor(float64(i+1)*c.DRAShare) > math.Floor(float64(i)*c.DRAShare)
		kind := nodeKinds[i%len(nodeKinds)]
		switch kind {
		case KindH100:
			g.h100()
		case KindA100:
			g.a100()
		}
		y := g.yaml()
		sc, err := sim.ParseScenario(y, name+".yaml")
		if err != nil {
			return nil, fmt.Errorf("fleet: generated scenario of %s (%s) is refused: %w\n%s", name, kind, err, y)
		}
		out[i] = &Node{Name: name, Kind: kind, YAML: y, Scenario: sc, Token: name}
	}
	return out, nil
}

// DRASupported reports whether collector/sim reads `allocation: dra`. The
// generator's DRA nodes are the hook for that: with it, DRAShare > 0 makes
// a share of the nodes DRA nodes.
func DRASupported() bool {
	_, err := sim.ParseScenario([]byte("start: 2026-11-30T00:00:00Z\nduration: 1h\nsystem: dgxh100\ngpus: 1\nallocation: dra\n"), "probe.yaml")
	return err == nil
}

// nodeGen writes one node's scenario.
type nodeGen struct {
	r     *rand.Rand
	name  string
	start time.Time
	dur   time.Duration
	dra   bool

	system      string
	layouts     map[int][]string
	pods        []genPod
	unallocated []sim.UnallocatedSpec
	unscheduled []sim.UnscheduledSpec
}

type genPod struct {
	namespace, name, container string
	ownerKind, ownerName       string
	labels                     map[string]string
	cmdline                    []string
	resource                   string
	devices                    []sim.DeviceSpec
	from, to                   time.Duration
	memory                     sim.Bytes
	util                       []genStep
	claim                      string
}

const day = 24 * time.Hour

// at rounds d down to the grid (to whole minutes within the first hour).
func at(d time.Duration) time.Duration {
	if d < firstHour {
		return d.Truncate(time.Minute)
	}
	return d.Truncate(grid)
}

// between draws a duration in [lo, hi) on the grid.
func (g *nodeGen) between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return at(lo + time.Duration(g.r.Int64N(int64(hi-lo))))
}

func (g *nodeGen) pick(xs ...string) string { return xs[g.r.IntN(len(xs))] }

// ratio draws a busy ratio in [lo, hi) in whole percent, as NVML reports it.
func (g *nodeGen) ratio(lo, hi float64) float64 {
	return float64(int(100*(lo+g.r.Float64()*(hi-lo)))) / 100
}

// days are the offsets of the midnights (UTC) of every day the scenario
// touches; the first may be before its start.
func (g *nodeGen) days() []time.Duration {
	first := g.start.UTC().Truncate(day).Sub(g.start)
	var out []time.Duration
	for d := first; d < g.dur; d += day {
		out = append(out, d)
	}
	return out
}

// peak is the default peak schedule's answer for scenario time t.
func (g *nodeGen) peak(t time.Duration) bool {
	w := g.start.Add(t).UTC()
	h := w.Hour()
	return w.Weekday() >= time.Monday && w.Weekday() <= time.Friday && h >= 9 && h < 18
}

// offBoundary moves t off a peak window's boundary.
func (g *nodeGen) offBoundary(t time.Duration) time.Duration {
	w := g.start.Add(t).UTC()
	if (w.Hour() == 9 || w.Hour() == 18) && w.Minute() == 0 && w.Second() == 0 {
		return t + grid
	}
	return t
}

// genStep is a step of a pod's util list; render makes it at a time.
type genStep struct {
	at     time.Duration
	render func(at time.Duration) genStep
	step   sim.StepSpec
}

func value(t time.Duration, v float64) genStep {
	r := sim.Ratio(v)
	return genStep{t, func(at time.Duration) genStep { return value(at, v) }, sim.StepSpec{At: sim.Duration(t), Value: &r}}
}

// onSampleGrid rounds d up to the simulated driver's sample grid.
func onSampleGrid(d time.Duration) time.Duration {
	return (d + sim.SamplePeriod - 1) / sim.SamplePeriod * sim.SamplePeriod
}

// duty is bursty load from t: busy seconds of every period at v, idle the
// rest, on the driver's sample grid.
func duty(t time.Duration, period, busy int, v float64) genStep {
	p := time.Duration(period) * time.Second / sim.SamplePeriod * sim.SamplePeriod
	b := time.Duration(busy) * time.Second / sim.SamplePeriod * sim.SamplePeriod
	t = onSampleGrid(t)
	return genStep{t, func(at time.Duration) genStep { return duty(at, period, busy, v) },
		sim.StepSpec{At: sim.Duration(t), Duty: &sim.DutySpec{Period: sim.Duration(p), Busy: sim.Duration(b), Value: sim.Ratio(v)}}}
}

// h100 fills a DGX H100.
func (g *nodeGen) h100() {
	g.system = "dgxh100"
	g.train(0, 4)
	g.timeSliced(4, 3)
	g.timeSliced(5, 2)
	g.outsideThenNotebook(6)
	g.migGPM(7)
	g.pending("", h100Product)
}

// a100 fills a DGX A100.
func (g *nodeGen) a100() {
	g.system = "dgxa100"
	g.migNotebooks(0, 4)
	g.inference(4, 4)
	g.pending(h100Product)
}

// train runs a queue of training jobs on GPUs [first, first+n): each holds
// half of them or all, for 4 to 30 hours, at 0.85-0.97 with stalls, and the
// queue leaves gaps. The first job starts stalled (waiting on its data):
// the live run catches it as an idle allocation.
func (g *nodeGen) train(first, n int) {
	models := []string{"llama3-8b", "llama3-70b", "mixtral-8x7b", "qwen2-72b"}
	t := time.Duration(0)
	for k := 0; t < g.dur-time.Hour; k++ {
		size := n
		if g.r.IntN(3) == 0 {
			size = n / 2
		}
		end := min(t+g.between(4*time.Hour, 30*time.Hour), g.dur)
		if k == 0 {
			end = min(max(end, 6*time.Hour), g.dur)
		}
		devs := make([]sim.DeviceSpec, 0, size)
		for d := first; d < first+size; d++ {
			devs = append(devs, sim.DeviceSpec{GPU: d})
		}
		kind, owner := "Job", fmt.Sprintf("train-%s-%d", g.name, k)
		if g.r.IntN(2) == 0 {
			kind = "PyTorchJob"
		}
		g.pods = append(g.pods, genPod{
			namespace: "research", name: owner + "-worker-0", container: "trainer",
			ownerKind: kind, ownerName: owner, labels: map[string]string{"model": models[g.r.IntN(len(models))], "team": "nlp"},
			cmdline: []string{"torchrun", "train.py"}, devices: devs, from: t, to: end,
			memory: sim.Bytes(40+g.r.IntN(30)) << 30, util: g.trainUtil(t, end, k == 0),
		})
		// A gap: the queue is empty, the GPUs unallocated.
		t = at(end + g.between(0, 3*time.Hour))
	}
}

// trainUtil is a training job's load: 0.85-0.97 with stalls of 30 minutes
// to 3 hours at 0, and evaluation phases at half load.
func (g *nodeGen) trainUtil(from, to time.Duration, stalledStart bool) []genStep {
	var u []genStep
	t := from
	if stalledStart {
		u = append(u, value(t, 0))
		t = 50 * time.Minute
	}
	for t < to {
		u = append(u, value(t, g.ratio(0.85, 0.97)))
		t = at(t + g.between(2*time.Hour, 12*time.Hour))
		if t >= to {
			break
		}
		switch g.r.IntN(3) {
		case 0:
			u = append(u, value(t, 0)) // a stall
			t = at(t + g.between(30*time.Minute, 3*time.Hour))
		case 1:
			u = append(u, value(t, g.ratio(0.4, 0.6))) // evaluation
			t = at(t + g.between(time.Hour, 2*time.Hour))
		}
	}
	return u
}

// timeSliced shares gpu among replicas developers' pods
// (nvidia.com/gpu.shared), busy at working hours and idle otherwise. On
// GPU 4 one pod is idle from the start; a pod comes a few minutes into the
// live run and, on GPU 5, one goes: churn the live run sees.
func (g *nodeGen) timeSliced(gpu, replicas int) {
	comes, goes := time.Duration(33+g.r.IntN(4))*time.Minute, time.Duration(35+g.r.IntN(4))*time.Minute
	for rep := 0; rep < replicas; rep++ {
		user := fmt.Sprintf("dev-%s-%d-%d", g.name, gpu, rep)
		from, to := time.Duration(0), g.dur
		switch {
		case rep == 2:
			from = comes
		case rep == 1 && gpu%2 == 1:
			to = goes
		}
		busy := g.ratio(0.2, 0.6)
		u := []genStep{value(from, g.ratio(0.1, 0.3))}
		if rep == 0 && gpu%2 == 0 {
			u = []genStep{value(from, 0)} // idle from the start
		}
		for _, d := range g.days() {
			if d+9*time.Hour > from {
				u = append(u, value(g.offBoundary(d+9*time.Hour), busy), value(d+17*time.Hour, 0))
			}
		}
		g.pods = append(g.pods, genPod{
			namespace: "ml-dev", name: user + "-0", container: "dev", ownerKind: "StatefulSet", ownerName: user,
			labels: map[string]string{"model": g.pick("llama3-8b", "")}, cmdline: []string{"python", "dev.py"},
			resource: sim.ResourceGPUShared, devices: []sim.DeviceSpec{{GPU: gpu, Replicated: true, Replica: rep}},
			from: from, to: to, memory: 8 << 30, util: u, claim: fmt.Sprintf("shared-%s-%d", g.name, gpu),
		})
	}
}

// outsideThenNotebook leaves gpu to work outside Kubernetes for the first
// hours (nobody holds it, something uses it), then, after an idle hour, a
// notebook holds it for the rest of the run with little use: an hour a
// day.
func (g *nodeGen) outsideThenNotebook(gpu int) {
	until := min(g.between(2*time.Hour, 5*time.Hour), g.dur-time.Hour)
	dev := sim.GPURef{DeviceSpec: sim.DeviceSpec{GPU: gpu}}
	g.unallocated = append(g.unallocated,
		sim.UnallocatedSpec{Device: dev, Value: sim.Ratio(g.ratio(0.2, 0.4))},
		sim.UnallocatedSpec{Device: dev, At: sim.Duration(until)})
	from := until + time.Hour
	user := fmt.Sprintf("nb-%s-%d", g.name, gpu)
	u := []genStep{value(from, 0)}
	for _, d := range g.days() {
		if d+10*time.Hour > from {
			u = append(u, value(d+10*time.Hour, g.ratio(0.3, 0.7)), value(d+11*time.Hour, 0))
		}
	}
	g.pods = append(g.pods, genPod{
		namespace: "data-science", name: user + "-0", container: "jupyter", ownerKind: "StatefulSet", ownerName: user,
		labels: map[string]string{"model": "llama3-8b"}, cmdline: []string{"jupyter", "lab"},
		devices: []sim.DeviceSpec{{GPU: gpu}}, from: from, memory: 60 << 30, util: u,
	})
}

// migGPM puts gpu in MIG mode with three small servers, one of them idle
// from the start; an H100's GPM measures each instance.
func (g *nodeGen) migGPM(gpu int) {
	g.layouts[gpu] = []string{"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"}
	for slot, v := range []float64{g.ratio(0.5, 0.9), 0, g.ratio(0.1, 0.3)} {
		user := fmt.Sprintf("mig-%s-%d", g.name, slot)
		g.pods = append(g.pods, genPod{
			namespace: "inference", name: user + "-0", container: "server", ownerKind: "StatefulSet", ownerName: user,
			labels: map[string]string{"model": "bert-base"}, cmdline: []string{"python", "serve.py"},
			devices: []sim.DeviceSpec{{GPU: gpu, MIG: true, MIGSlot: slot}}, util: []genStep{value(0, v)},
		})
	}
}

// migNotebooks puts GPUs [first, first+n) of an A100 in MIG mode with
// notebooks on most instances, some for the whole run and some coming and
// going.
func (g *nodeGen) migNotebooks(first, n int) {
	layouts := [][]string{
		{"3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"},
		{"1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb"},
		{"4g.20gb", "3g.20gb"},
		{"2g.10gb", "2g.10gb", "2g.10gb", "1g.5gb"},
	}
	k := 0
	for gpu := first; gpu < first+n; gpu++ {
		layout := layouts[(gpu+g.r.IntN(len(layouts)))%len(layouts)]
		g.layouts[gpu] = layout
		for slot := range layout {
			if g.r.IntN(5) == 0 {
				continue // an instance nobody holds
			}
			from := time.Duration(0)
			if g.r.IntN(2) == 0 {
				from = g.between(time.Hour, g.dur/2)
			}
			to := min(from+g.between(6*time.Hour, 4*day), g.dur)
			user := fmt.Sprintf("%s-u%d", g.name, k)
			k++
			g.pods = append(g.pods, genPod{
				namespace: "data-science", name: "nb-" + user + "-0", container: "jupyter",
				ownerKind: "StatefulSet", ownerName: "nb-" + user, labels: map[string]string{"model": g.pick("bert-base", "llama3-8b", "")},
				cmdline: []string{"jupyter", "lab"}, devices: []sim.DeviceSpec{{GPU: gpu, MIG: true, MIGSlot: slot}},
				from: from, to: to, util: []genStep{value(from, g.ratio(0.1, 0.5))},
			})
		}
	}
}

// inference runs replicas of cluster-wide Deployments on GPUs [first,
// first+n), one GPU each: bursty at peak, calmer by day, idle at night.
// The last two are scaled down every night: new pods every morning.
func (g *nodeGen) inference(first, n int) {
	deploys := []struct{ name, hash, model string }{
		{"vllm-llama3-70b", "7c9d8f6b5d", "llama3-70b"},
		{"vllm-mixtral", "5f6c8d9b4z", "mixtral-8x7b"},
		{"tgi-qwen2", "6d8b9c7f5x", "qwen2-72b"},
	}
	// load is the util of hour h, for a replica over [from, to).
	load := func(from, to time.Duration) []genStep {
		var u []genStep
		for h := from.Truncate(time.Hour); h < to; h += time.Hour {
			hs := max(h, from)
			w := g.start.Add(h).UTC()
			switch {
			case g.peak(h):
				u = append(u, duty(hs, 4, 1+g.r.IntN(3), g.ratio(0.7, 0.95)))
			case w.Hour() >= 7 && w.Hour() < 21:
				u = append(u, duty(hs, 10, 1+g.r.IntN(2), g.ratio(0.5, 0.8)))
			default:
				u = append(u, value(hs, 0)) // nights: nobody asks
			}
		}
		return u
	}
	for gpu := first; gpu < first+n; gpu++ {
		d := deploys[gpu%len(deploys)]
		spans := [][2]time.Duration{{0, g.dur}}
		if gpu >= first+n-2 {
			// Scaled down at night: up 07:00-22:00, the first pod from the start.
			spans = nil
			for i, m := range g.days() {
				from, to := m+7*time.Hour, m+22*time.Hour
				if i == 0 {
					from = 0
				}
				from, to = max(from, 0), min(to, g.dur)
				if to-from >= time.Hour {
					spans = append(spans, [2]time.Duration{from, to})
				}
			}
		}
		for i, sp := range spans {
			g.pods = append(g.pods, genPod{
				namespace: "inference", name: fmt.Sprintf("%s-%s-%s-%d-%d", d.name, d.hash, g.name, gpu, i),
				container: "server", ownerKind: "ReplicaSet", ownerName: d.name + "-" + d.hash,
				labels:  map[string]string{"model": d.model, "app": d.name, "pod-template-hash": d.hash},
				cmdline: []string{"python", "-m", "server"}, devices: []sim.DeviceSpec{{GPU: gpu}},
				from: sp[0], to: sp[1], memory: sim.Bytes(28+g.r.IntN(8)) << 30, util: load(sp[0], sp[1]),
			})
		}
	}
}

// pending adds n jobs that wait, unscheduled: the demand the report sets
// against reclaimable capacity. The first waits from the start (the live
// run sees it), the others at peak; their spans fall on 15 minutes, the
// report's step. A job is a sweep of one to four trials, a pod of one GPU
// each, that select a GPU type through GPU Feature Discovery's
// nvidia.com/gpu.product (the fleet's H100s, its A100s) or take any: the
// report matches waiters to the idle GPUs of their type. One-GPU pods fit
// any node with a GPU to give, so the truth needs no node placement; the
// scenarios of test/scenarios check that (docs/fleet.md). Job j selects
// products[j] ("" for any type): an H100 node's first job takes any GPU,
// its second an H100; an A100 node's job wants an H100, which its own
// GPUs cannot give.
func (g *nodeGen) pending(products ...string) {
	days := g.days()
	for j, product := range products {
		var from, to time.Duration
		if j == 0 {
			from, to = 0, min(2*time.Hour, g.dur)
		} else {
			m := days[g.r.IntN(len(days))]
			from = m + 9*time.Hour + time.Duration(g.r.IntN(16))*15*time.Minute
			to = from + time.Duration(1+g.r.IntN(12))*15*time.Minute
			if from < 0 || to > g.dur {
				continue
			}
		}
		owner := fmt.Sprintf("sweep-%s-%d", g.name, j)
		trials := 1 + g.r.IntN(4)
		var selector map[string]string
		if product != "" {
			selector = map[string]string{sim.ProductLabel: product}
		}
		for k := range trials {
			g.unscheduled = append(g.unscheduled, sim.UnscheduledSpec{Namespace: "research", Name: fmt.Sprintf("%s-%d", owner, k),
				Owner: &sim.Owner{Kind: "Job", Name: owner}, GPUs: 1, From: sim.Duration(from), To: sim.Duration(to), NodeSelector: selector})
		}
	}
}

// finish applies the rules to a pod: off the window boundaries, idle for
// its last minutes, steps within its life.
func (g *nodeGen) finish(p genPod) (genPod, bool) {
	if p.to == 0 || p.to > g.dur {
		p.to = g.dur // held to the end
	}
	p.from = g.offBoundary(p.from)
	if p.to < g.dur {
		p.to = g.offBoundary(p.to)
		if p.to > g.dur {
			p.to = g.dur
		}
	}
	tail := idleTail
	if p.to <= firstHour {
		tail = time.Minute
	}
	if p.to-p.from < 2*tail {
		return p, false
	}
	var u []genStep
	for _, s := range p.util {
		if s.at < p.from {
			s = s.render(p.from)
		}
		if s.at >= p.to || (p.to < g.dur && s.at >= p.to-tail) {
			break
		}
		if len(u) > 0 && u[len(u)-1].at >= s.at {
			u = u[:len(u)-1]
		}
		u = append(u, s)
	}
	if p.to < g.dur {
		u = append(u, value(p.to-tail, 0))
	}
	p.util = u
	return p, true
}

// yaml writes the scenario file.
func (g *nodeGen) yaml() []byte {
	spec := sim.ScenarioSpec{Start: sim.Timestamp(g.start.UTC().Truncate(time.Second)), Duration: sim.Duration(g.dur),
		Node: g.name, System: g.system, GPUs: GPUsPerNode, Unallocated: g.unallocated, Unscheduled: g.unscheduled}
	if g.dra {
		spec.Allocation = sim.AllocationDRA
	}
	if len(g.layouts) > 0 {
		spec.MIG = map[string]sim.MIGSpec{}
		for gpu, l := range g.layouts {
			spec.MIG[fmt.Sprintf("gpu:%d", gpu)] = sim.MIGSpec{Profiles: l}
		}
	}
	for _, p := range g.pods {
		p, ok := g.finish(p)
		if !ok {
			continue
		}
		ps := sim.PodSpec{Namespace: p.namespace, Name: p.name, Container: p.container, Cmdline: p.cmdline,
			Devices: p.devices, From: sim.Duration(p.from), To: sim.Duration(p.to), Memory: p.memory, Util: &sim.Steps{}}
		if p.ownerKind != "" {
			ps.Owner = &sim.Owner{Kind: p.ownerKind, Name: p.ownerName}
		}
		for k, v := range p.labels {
			if v != "" {
				if ps.Labels == nil {
					ps.Labels = map[string]string{}
				}
				ps.Labels[k] = v
			}
		}
		switch {
		case g.dra:
			// A DRA pod takes its devices through its claim: no extended
			// resource, no time-slicing replica; the pods of a shared claim
			// name the same GPU.
			ps.Claim = p.claim
			ps.Devices = make([]sim.DeviceSpec, len(p.devices))
			for i, d := range p.devices {
				ps.Devices[i] = sim.DeviceSpec{GPU: d.GPU, MIG: d.MIG, MIGSlot: d.MIGSlot}
			}
		default:
			ps.Resource = p.resource
		}
		for _, s := range p.util {
			ps.Util.List = append(ps.Util.List, s.step)
		}
		spec.Pods = append(spec.Pods, ps)
	}
	out, err := spec.Marshal()
	if err != nil {
		panic(err) // plain values always marshal
	}
	return append([]byte("# Generated by test/fleet for node "+g.name+"; do not edit.\n"), out...)
}

// fmtDur spells a duration as a scenario does: 1h30m, 45m, 0s.
func fmtDur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
