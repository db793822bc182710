package fleet

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpuxray/gpuxray/agent"
	"github.com/gpuxray/gpuxray/collector/sim"
)

// idleThreshold is the agents' --idle.threshold.
const idleThreshold = 0.05

// noMIGActivity tells the systems whose GPUs have no activity source in
// MIG mode: an A100 has neither utilization samples in MIG mode nor GPM,
// so the agent counts a MIG device's allocated time but never its idle or
// active time (utilization_source="none"). The truth says what the agent
// can know.
func noMIGActivity(system string) bool { return system == "dgxa100" }

// wkey is what the report and the rules group pod-seconds by.
type wkey struct{ Namespace, Kind, Workload, Model string }

// podSeconds are an owner's allocated, idle and active pod-seconds.
type podSeconds struct{ Allocated, Idle, Active float64 }

func (p *podSeconds) add(o podSeconds, sign float64) {
	p.Allocated += sign * o.Allocated
	p.Idle += sign * o.Idle
	p.Active += sign * o.Active
}

// totals are GPU time over a span, in seconds: the devices' own time of
// whole GPUs (each GPU once), and pod-seconds by workload.
type totals struct {
	deviceSeconds
	// WholeIdle and WholeFree are the idle allocated time and the free
	// time (unallocated, less busy outside Kubernetes) of the GPUs not in
	// MIG mode: what the queue X-ray's waiters could have run on.
	WholeIdle, WholeFree float64
	Work                 map[wkey]podSeconds
	// WholeNS are the pod-seconds on GPUs not in MIG mode by namespace:
	// what the rules by GPU type sum (a MIG instance has no type there).
	WholeNS map[string]podSeconds

	// byPod are the pod-seconds of each pod of the truther's scenario, by
	// its index there; byGPU each GPU's own time and the pod-seconds on it
	// (onGPU), by GPU index: a cumulative truth's only (add leaves them).
	byPod []podSeconds
	byGPU []gpuSeconds
}

// deviceSeconds are GPUs' own time.
type deviceSeconds struct {
	Observed, Allocated, AllocIdle, AllocActive, Unallocated, UnallocActive float64
}

func (d *deviceSeconds) add(o deviceSeconds, sign float64) {
	d.Observed += sign * o.Observed
	d.Allocated += sign * o.Allocated
	d.AllocIdle += sign * o.AllocIdle
	d.AllocActive += sign * o.AllocActive
	d.Unallocated += sign * o.Unallocated
	d.UnallocActive += sign * o.UnallocActive
}

// gpuSeconds are one GPU's own time and the pod-seconds of its holders.
type gpuSeconds struct {
	deviceSeconds
	Pods podSeconds
}

func (g *gpuSeconds) add(o gpuSeconds, sign float64) {
	g.deviceSeconds.add(o.deviceSeconds, sign)
	g.Pods.add(o.Pods, sign)
}

func newTotals() *totals {
	return &totals{Work: map[wkey]podSeconds{}, WholeNS: map[string]podSeconds{}}
}

// add adds sign·o to t, renaming o's workloads with rename when it is set.
func (t *totals) add(o *totals, sign float64, rename func(string) string) {
	t.deviceSeconds.add(o.deviceSeconds, sign)
	t.WholeIdle += sign * o.WholeIdle
	t.WholeFree += sign * o.WholeFree
	for k, v := range o.Work {
		if rename != nil {
			k.Workload = rename(k.Workload)
		}
		w := t.Work[k]
		w.add(v, sign)
		t.Work[k] = w
	}
	for ns, v := range o.WholeNS {
		w := t.WholeNS[ns]
		w.add(v, sign)
		t.WholeNS[ns] = w
	}
}

// pods are the pod-seconds summed over workloads.
func (t *totals) pods() podSeconds {
	var p podSeconds
	for _, w := range t.Work {
		p.add(w, 1)
	}
	return p
}

// reclaimable is capacity that could take work: idle allocated GPUs and
// unallocated ones, less what runs on those outside Kubernetes.
func (t *totals) reclaimable() float64 { return t.AllocIdle + t.Unallocated - t.UnallocActive }

// workloadOf is the owner the agent resolves a generated pod to: Jobs,
// StatefulSets and Kubeflow jobs are their own workload; a ReplicaSet
// labelled with its pod-template-hash is its Deployment's.
func workloadOf(p sim.Pod) wkey {
	k := wkey{Namespace: p.Namespace, Kind: p.Owner.Kind, Workload: p.Owner.Name, Model: p.Labels["model"]}
	if h := p.Labels["pod-template-hash"]; p.Owner.Kind == "ReplicaSet" && h != "" {
		k.Kind, k.Workload = "Deployment", strings.TrimSuffix(p.Owner.Name, "-"+h)
	}
	if p.Owner.Kind == "" {
		k.Kind, k.Workload = "Pod", p.Name
	}
	return k
}

// cut is sc as it stood at offset t: it ends there, pods after it are not
// yet there and steps after it have not come.
func cut(sc *sim.Scenario, t time.Duration) *sim.Scenario {
	c := *sc
	c.Duration = t
	c.Pods = make([]sim.Pod, 0, len(sc.Pods))
	for _, p := range sc.Pods {
		if p.From >= t {
			continue
		}
		p.To = min(p.To, t)
		if i := slices.IndexFunc(p.Util, func(s sim.Step) bool { return s.At >= t }); i >= 0 {
			p.Util = p.Util[:i]
		}
		c.Pods = append(c.Pods, p)
	}
	return &c
}

// asPolled is sc as an agent polling every poll sees its allocations. The
// agent learns who holds a GPU from the kubelet once a poll; between two
// polls it places a change at their midpoint, so that a whole GPU's pod
// is credited from half a poll before it starts to half a poll before it
// ends. A device read once a poll (a MIG instance: GPM, or no activity
// source) credits each poll's time to the pods listed at its end: a whole
// poll earlier. The generator keeps pods idle at both ends, so that this
// moves idle time only.
func asPolled(sc *sim.Scenario, poll time.Duration) *sim.Scenario {
	c := *sc
	c.Pods = make([]sim.Pod, len(sc.Pods))
	for i, p := range sc.Pods {
		d := poll / 2
		if len(p.Devices) > 0 && p.Devices[0].MIG {
			d = poll
		}
		if p.From > 0 {
			p.From -= d
		}
		p.To -= d
		c.Pods[i] = p
	}
	return &c
}

// truther answers a node's truth over spans of its scenario, from the
// cumulative truth at each end (Scenario.GPUTruth and Scenario.Truth of
// the scenario cut there), cached.
type truther struct {
	sc *sim.Scenario
	// index is each pod's index in sc.Pods, by namespace/name.
	index map[string]int
	mu    sync.Mutex
	at    map[time.Duration]*totals
}

func newTruther(sc *sim.Scenario) *truther {
	index := make(map[string]int, len(sc.Pods))
	for i, p := range sc.Pods {
		index[p.Namespace+"/"+p.Name] = i
	}
	return &truther{sc: sc, index: index, at: map[time.Duration]*totals{}}
}

// cumulative is the truth from the scenario's start to offset t (clamped
// to the scenario).
func (tr *truther) cumulative(t time.Duration) *totals {
	t = min(max(t, 0), tr.sc.Duration)
	tr.mu.Lock()
	if c, ok := tr.at[t]; ok {
		tr.mu.Unlock()
		return c
	}
	tr.mu.Unlock()
	out := newTotals()
	out.byPod = make([]podSeconds, len(tr.sc.Pods))
	out.byGPU = make([]gpuSeconds, tr.sc.GPUs)
	if t > 0 {
		c := cut(tr.sc, t)
		blind := noMIGActivity(c.System)
		for _, g := range c.GPUTruth(idleThreshold) {
			_, mig := c.MIG[g.GPU]
			out.Observed += g.ObservedSeconds
			out.Allocated += g.AllocatedSeconds
			out.Unallocated += g.UnallocatedSeconds
			bg := &out.byGPU[g.GPU]
			bg.Observed, bg.Allocated, bg.Unallocated = g.ObservedSeconds, g.AllocatedSeconds, g.UnallocatedSeconds
			if !mig {
				out.WholeIdle += g.AllocatedIdleSeconds
				out.WholeFree += max(0, g.UnallocatedSeconds-g.UnallocatedActiveSeconds)
			}
			if mig && blind {
				continue
			}
			out.AllocIdle += g.AllocatedIdleSeconds
			out.AllocActive += g.AllocatedActiveSeconds
			out.UnallocActive += g.UnallocatedActiveSeconds
			bg.AllocIdle, bg.AllocActive, bg.UnallocActive = g.AllocatedIdleSeconds, g.AllocatedActiveSeconds, g.UnallocatedActiveSeconds
		}
		for _, r := range c.Truth(idleThreshold) {
			i := tr.index[r.Namespace+"/"+r.Pod]
			s := podSeconds{Allocated: r.AllocatedSeconds, Idle: r.IdleSeconds, Active: r.ActiveSeconds}
			if r.Device.MIG && blind {
				s.Idle, s.Active = 0, 0
			}
			out.byPod[i].add(s, 1)
			out.byGPU[r.Device.GPU].Pods.add(s, 1)
			k := workloadOf(tr.sc.Pods[i])
			w := out.Work[k]
			w.add(s, 1)
			out.Work[k] = w
			if !r.Device.MIG {
				w := out.WholeNS[r.Namespace]
				w.add(s, 1)
				out.WholeNS[r.Namespace] = w
			}
		}
	}
	tr.mu.Lock()
	tr.at[t] = out
	tr.mu.Unlock()
	return out
}

// span is the truth over scenario offsets [a, b), split by peak window at
// the schedule's boundaries (whole minutes of wall time).
func (tr *truther) span(a, b time.Duration, sched *agent.Schedule) (peak, offpeak *totals) {
	peak, offpeak = newTotals(), newTotals()
	if b <= a {
		return
	}
	for _, s := range windowSplit(tr.sc.Start, a, b, sched) {
		dst := offpeak
		if s.peak {
			dst = peak
		}
		dst.add(tr.cumulative(s.to), 1, nil)
		dst.add(tr.cumulative(s.from), -1, nil)
	}
	return
}

// podSpan is pod i's seconds over scenario offsets [a, b), peak and
// off-peak.
func (tr *truther) podSpan(i int, a, b time.Duration, sched *agent.Schedule) (peak, offpeak podSeconds) {
	if b <= a {
		return
	}
	for _, s := range windowSplit(tr.sc.Start, a, b, sched) {
		dst := &offpeak
		if s.peak {
			dst = &peak
		}
		dst.add(tr.cumulative(s.to).byPod[i], 1)
		dst.add(tr.cumulative(s.from).byPod[i], -1)
	}
	return
}

type piece struct {
	from, to time.Duration
	peak     bool
}

// windowSplit cuts [a, b) of a scenario that starts at start into pieces
// each wholly peak or off-peak.
func windowSplit(start time.Time, a, b time.Duration, sched *agent.Schedule) []piece {
	var out []piece
	cur := piece{from: a, peak: sched.At(start.Add(a))}
	// The schedule's boundaries fall on whole minutes.
	next := start.Add(a).Truncate(time.Minute).Add(time.Minute).Sub(start)
	for t := next; t < b; t += time.Minute {
		if p := sched.At(start.Add(t)); p != cur.peak {
			cur.to = t
			out = append(out, cur)
			cur = piece{from: t, peak: p}
		}
	}
	cur.to = b
	return append(out, cur)
}

// streakAt is pod p's idle streak at offset t, as the agent exports it:
// how long the pod's own busy ratio has been below the threshold without a
// break up to t (from its start at most); 0 when it was busy just before t.
// A duty cycle's idle phases are streaks of their own.
func streakAt(p sim.Pod, t time.Duration) time.Duration {
	if t <= p.From {
		return 0
	}
	end := min(t, p.To)
	i := len(p.Util) - 1
	for i >= 0 && p.Util[i].At >= end {
		i--
	}
	for ; i >= 0; i-- {
		s := p.Util[i]
		lo := max(s.At, p.From)
		if lo < end {
			if last, ok := lastBusy(s, lo, end); ok {
				return t - last
			}
		}
		if lo <= p.From {
			return t - p.From
		}
		end = lo
	}
	return t - p.From
}

// lastBusy is the end of the last busy stretch of step s within [lo, end):
// end itself when s is busy just before end; ok is false when s is idle
// all over [lo, end).
func lastBusy(s sim.Step, lo, end time.Duration) (time.Duration, bool) {
	d := s.Duty
	if d == nil {
		return end, s.Value >= idleThreshold
	}
	hiBusy, loBusy := d.Value >= idleThreshold, d.Idle >= idleThreshold
	switch {
	case hiBusy && loBusy:
		return end, true
	case !hiBusy && !loBusy:
		return 0, false
	}
	x := end - 1 - s.At // the last instant before end, from the cycle's anchor
	k := x / d.Period
	phaseStart := s.At + k*d.Period
	inHigh := x-k*d.Period < d.Busy
	if hiBusy {
		if inHigh {
			return end, true
		}
		if b := phaseStart + d.Busy; b > lo {
			return b, true
		}
		return 0, false
	}
	if !inHigh {
		return end, true
	}
	if k >= 1 && phaseStart > lo {
		return phaseStart, true
	}
	return 0, false
}
