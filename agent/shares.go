package agent

import (
	"slices"
	"time"

	"github.com/gpuxray/gpuxray/collector"
)

// How the engine credits a shared GPU to its holders' own processes, as
// docs/accounting.md describes: each process sample covers the time since
// its process's previous one, and its busy time is spread over the device's
// periods in that span in proportion to the device's busy ratio in each. A
// period waits for the samples that cover it, at most MaxProcessWait; a
// process not sampled by then was idle, as NVML lists only busy ones.

// MaxProcessWait bounds how long a period of a shared GPU waits for the
// process samples that cover it: its counters lag by up to that much.
const MaxProcessWait = 10 * time.Second

// minSamplePeriod is the shortest interval taken for a sampling period or
// a refresh: closer stamps are noise.
const minSamplePeriod = time.Millisecond

// procTrack is what the engine knows of one process seen on a device.
type procTrack struct {
	owner    procOwner
	hasOwner bool
	// frontier is the stamp of its newest sample.
	frontier time.Time
	// listed is the last poll that listed it (running or sampled); born
	// the poll before the first: it started after, so its first sample
	// covers no time before.
	listed, born time.Time
	// spans are what its samples cover that is not credited yet.
	spans []procSpan
}

// procSpan is the time (from, to] one process sample covers, at value,
// from is cut to the time not yet credited.
type procSpan struct {
	from, to time.Time
	value    float64
	// busy is the process's busy seconds over the whole time its sample
	// covers: where part of it was credited before the sample came, that
	// part was idle on the device (or waited past the bound), and the
	// busy time is the rest's.
	busy float64
	// weight is the device's busy seconds over the queued periods the
	// span covers, and covered their length in seconds: its busy time is
	// spread over those periods in proportion to the device's. weighed
	// says they are computed. pastWeight and pastLen are the same over
	// the part credited before the sample came, which takes its share.
	weight, covered     float64
	pastWeight, pastLen float64
	weighed             bool
}

// pastPeriod is a credited period of the device, kept a while (pastKeep):
// a process sample whose time was partly credited before it came weighs
// that part by them.
type pastPeriod struct {
	from, to time.Time
	v        float64
}

// pastKeep is how long credited periods are kept.
const pastKeep = 3 * MaxProcessWait

// pendingPeriod is a device period waiting for its processes' samples.
type pendingPeriod struct {
	from, to     time.Time
	v            float64
	known        bool
	holdersKnown bool
	byProcess    bool
	// set is the index in shareState.sets of who held the device then.
	set int
}

// shareState is what the engine keeps to credit one device by process.
type shareState struct {
	procs   map[uint32]*procTrack
	pending []pendingPeriod
	// sets are the holder lists the pending periods name; reused once
	// no period is pending.
	sets [][]allocKey
	// refresh is the shortest interval seen between two samples of one
	// process: the driver's refresh. perPeriod is set once a read listed
	// several samples of one process: each covers one refresh.
	refresh   time.Duration
	perPeriod bool
	// foreign is set while a process that no current holder owns runs on
	// the device: its exclusive holder's periods wait for the process
	// samples too, for that process's share.
	foreign bool
	// decided is the end of the last period credited, queued that of the
	// last period queued or credited.
	decided, queued time.Time
	// prevRead is the previous poll: a process's first sample covers the
	// time since, while the refresh is unknown.
	prevRead time.Time
	// seen is the newest process sample stamp ingested: the lastSeen the
	// reader asked the next read from.
	seen time.Time
	// past are the periods credited lately, oldest first.
	past []pastPeriod
}

// record keeps a credited period whose busy ratio is known.
func (sh *shareState) record(from, to time.Time, v float64) {
	if n := len(sh.past); n > 0 && to.Sub(sh.past[0].to) > pastKeep {
		k := 0
		for k < n && to.Sub(sh.past[k].to) > pastKeep {
			k++
		}
		sh.past = append(sh.past[:0], sh.past[k:]...)
	}
	sh.past = append(sh.past, pastPeriod{from: from, to: to, v: v})
}

// pastWeight is the device's busy seconds and the seconds it was credited
// over (from, to), from the periods kept.
func (sh *shareState) pastWeight(from, to time.Time) (weight, length float64) {
	for _, q := range sh.past {
		if ov := overlap(from, to, q.from, q.to); ov > 0 {
			weight += q.v * ov
			length += ov
		}
	}
	return weight, length
}

// enqueue queues p, held by holders.
func (sh *shareState) enqueue(p pendingPeriod, holders []allocKey) {
	if n := len(sh.sets); n > 0 && slices.Equal(sh.sets[n-1], holders) {
		p.set = n - 1
	} else {
		if n < cap(sh.sets) {
			sh.sets = sh.sets[:n+1]
			sh.sets[n] = append(sh.sets[n][:0], holders...)
		} else {
			sh.sets = append(sh.sets, slices.Clone(holders))
		}
		p.set = n
	}
	sh.pending = append(sh.pending, p)
	sh.queued = p.to
}

// wait is how long a period waits for its processes' samples.
func (e *Engine) wait(sh *shareState) time.Duration {
	if sh.refresh == 0 {
		return MaxProcessWait
	}
	return min(max(2*sh.refresh+e.cfg.PollInterval, e.cfg.MaxSampleGap), MaxProcessWait)
}

// maxSpan is the longest time a process sample is taken to cover when
// the reads before it do not say (see since).
func (e *Engine) maxSpan(sh *shareState) time.Duration {
	return max(2*sh.refresh, e.cfg.MaxSampleGap)
}

// processKeep is how far back the driver keeps a process's refresh
// windows: the span of its sample buffer (120 samples of 1/6 s, as the
// utilization ring; docs/accounting.md).
const processKeep = 20 * time.Second

// since is where a sample of one process, stamped at, begins when the
// read before it was asked from seen: the driver values an entry over its
// process's refresh windows newer than seen, whole ones, as long as it
// keeps them (docs/accounting.md). A late poll reads every window since
// the poll before, not one or two. Zero where the refresh or seen is not
// known.
func (sh *shareState) since(at time.Time) time.Time {
	if sh.refresh <= 0 || sh.seen.IsZero() || !at.After(sh.seen) {
		return time.Time{}
	}
	windows := (at.Sub(sh.seen) + sh.refresh - 1) / sh.refresh
	return maxTime(at.Add(-windows*sh.refresh), at.Add(-processKeep))
}

// resolved reports whether every process the reading lists has an owner,
// from this poll's resolution or an earlier one (a process that has exited
// is still sampled for a while), so that per-process attribution of the
// device is complete.
func (e *Engine) resolved(rd collector.DeviceReading, owners map[uint32]procOwner, sh *shareState) bool {
	if owners == nil {
		return false
	}
	known := func(pid uint32) bool {
		if _, ok := owners[pid]; ok {
			return true
		}
		tr := sh.procs[pid]
		return tr != nil && tr.hasOwner
	}
	for _, p := range rd.Processes {
		if !known(p.PID) {
			return false
		}
	}
	for _, p := range rd.ProcessSamples {
		if !known(p.PID) {
			return false
		}
	}
	return true
}

// ingest records the reading's processes and their samples: each sample
// becomes a span of its process, from its previous sample (see the top
// of this file), never before the time already credited.
func (e *Engine) ingest(ds *deviceState, rd collector.DeviceReading, owners map[uint32]procOwner, now time.Time) {
	sh := &ds.share
	if sh.procs == nil {
		sh.procs = map[uint32]*procTrack{}
	}
	track := func(pid uint32) *procTrack {
		tr := sh.procs[pid]
		if tr == nil {
			tr = &procTrack{born: sh.prevRead}
			sh.procs[pid] = tr
		}
		if o, ok := owners[pid]; ok {
			tr.owner, tr.hasOwner = o, true
		}
		tr.listed = now
		return tr
	}
	for _, p := range rd.Processes {
		track(p.PID)
	}
	// Where this read's samples begin: after the newest stamp read before
	// (sh.seen, which since reads), updated once the read is ingested.
	seen := sh.seen
	// Several samples of one process in a read: one per period.
	count := make(map[uint32]int, len(rd.ProcessSamples))
	for _, s := range rd.ProcessSamples {
		count[s.PID]++
		if count[s.PID] > 1 {
			sh.perPeriod = true
		}
	}
	for _, s := range rd.ProcessSamples {
		tr := track(s.PID)
		if !s.Time.After(tr.frontier) {
			continue // read before
		}
		prev := tr.frontier
		tr.frontier = s.Time
		seen = maxTime(seen, s.Time)
		if !prev.IsZero() {
			if d := s.Time.Sub(prev); d >= minSamplePeriod && (sh.refresh == 0 || d < sh.refresh) {
				sh.refresh = d
			}
		}
		var from time.Time
		switch {
		case sh.perPeriod:
			r := sh.refresh
			if r == 0 {
				r = ds.samplePeriod()
			}
			from = s.Time.Add(-r)
		case sh.refresh == 0 && prev.IsZero():
			from = maxTime(tr.born, s.Time.Add(-e.maxSpan(sh)))
		case !sh.since(s.Time).IsZero():
			from = sh.since(s.Time)
		default:
			from = s.Time.Add(-e.maxSpan(sh))
			if sh.refresh > 0 && (prev.IsZero() || s.Time.Sub(prev) > e.maxSpan(sh)) {
				from = s.Time.Add(-sh.refresh) // its first, or after an idle while
			}
		}
		if !prev.IsZero() && prev.After(from) {
			from = prev
		}
		if prev.IsZero() && tr.born.After(from) {
			from = tr.born
		}
		v := min(max(s.Value, 0), 1)
		sp := procSpan{from: from, to: s.Time, value: v, busy: v * s.Time.Sub(from).Seconds()}
		if sh.decided.After(from) {
			sp.pastWeight, sp.pastLen = sh.pastWeight(from, sh.decided)
			sp.from = sh.decided
		}
		if !s.Time.After(sp.from) || sp.busy <= 0 {
			continue
		}
		tr.spans = append(tr.spans, sp)
	}
	// Forget processes long gone; note one its holders do not own.
	latest, _ := e.latestHolders(ds.info.UUID)
	sh.foreign = false
	for pid, tr := range sh.procs {
		if now.Sub(tr.listed) > MaxProcessWait && len(tr.spans) == 0 {
			delete(sh.procs, pid)
			continue
		}
		if now.Sub(tr.listed) <= e.wait(sh) && (!tr.hasOwner || holderOf(tr.owner, latest) < 0) {
			sh.foreign = true
		}
	}
	sh.seen = seen
	sh.prevRead = now
}

// decide credits the device's pending periods that are ready, in order:
// all of them with force.
func (e *Engine) decide(ds *deviceState, now time.Time, force bool) {
	sh := &ds.share
	wait := e.wait(sh)
	done := 0
	var shares []float64 // the holders', reused from period to period
	for i := range sh.pending {
		p := &sh.pending[i]
		idle := p.known && p.v == 0 // then every process was idle
		if p.byProcess && !idle && !force && !e.ready(sh, p, now, wait) {
			break
		}
		holders := sh.sets[p.set]
		switch {
		case !p.byProcess:
			e.credit(ds, p.from, p.to, p.v, p.known, holders, p.holdersKnown, nil, 0)
		case idle:
			shares = slices.Grow(shares[:0], len(holders))[:len(holders)]
			clear(shares)
			e.credit(ds, p.from, p.to, p.v, p.known, holders, p.holdersKnown, shares, 0)
			sh.cover(p)
		default:
			shares = slices.Grow(shares[:0], len(holders))[:len(holders)]
			unattributed := e.periodShares(sh, i, holders, shares)
			e.credit(ds, p.from, p.to, p.v, p.known, holders, p.holdersKnown, shares, unattributed)
		}
		if p.known {
			sh.record(p.from, p.to, p.v)
		}
		sh.decided = p.to
		done++
	}
	if done == 0 {
		return
	}
	sh.drop(done)
	for _, tr := range sh.procs {
		k := 0
		for k < len(tr.spans) && !tr.spans[k].to.After(sh.decided) {
			k++
		}
		tr.spans = append(tr.spans[:0], tr.spans[k:]...)
	}
}

// drop removes the first done pending periods, and the holder sets only
// they named: a device whose queue never runs empty (time-sliced and
// always busy) would otherwise keep every set its holders ever were.
// Periods name sets in order, so those are the first ones; the moved
// headers' old places are cleared, not left aliasing them for enqueue to
// reuse.
func (sh *shareState) drop(done int) {
	sh.pending = append(sh.pending[:0], sh.pending[done:]...)
	if len(sh.pending) == 0 {
		sh.sets = sh.sets[:0]
		return
	}
	if first := sh.pending[0].set; first > 0 {
		n := copy(sh.sets, sh.sets[first:])
		clear(sh.sets[n:])
		sh.sets = sh.sets[:n]
		for i := range sh.pending {
			sh.pending[i].set -= first
		}
	}
}

// ready reports whether the process samples covering p have come, and
// the device periods those samples cover too: a sample's busy time is
// spread over all of them.
func (e *Engine) ready(sh *shareState, p *pendingPeriod, now time.Time, wait time.Duration) bool {
	if now.Sub(p.to) >= wait {
		return true
	}
	for _, tr := range sh.procs {
		if !sh.perPeriod && now.Sub(tr.listed) <= wait && tr.frontier.Before(p.to) {
			return false
		}
		for _, sp := range tr.spans {
			if sp.from.Before(p.to) && sp.to.After(sh.queued) {
				return false
			}
		}
	}
	return true
}

// periodShares sets shares[i] to holders[i]'s processes' busy ratio over
// pending period i (capped at 1) and returns that of processes no holder
// owns. Each span's busy time is spread over the pending periods it
// covers in proportion to the device's busy ratio in each (evenly where
// the device shows none).
func (e *Engine) periodShares(sh *shareState, i int, holders []allocKey, shares []float64) float64 {
	clear(shares)
	p := &sh.pending[i]
	length := p.to.Sub(p.from).Seconds()
	if length <= 0 {
		return 0
	}
	var unattributed float64
	for _, tr := range sh.procs {
		if !tr.hasOwner {
			continue // whose it is cannot be told
		}
		var busy float64 // seconds of this process's work in p
		for k := range tr.spans {
			sp := &tr.spans[k]
			ov := overlap(sp.from, sp.to, p.from, p.to)
			if ov <= 0 {
				continue
			}
			if !sp.weighed {
				sh.weigh(sp, i)
			}
			switch w, l := sp.weight+sp.pastWeight, sp.covered+sp.pastLen; {
			case w > 0:
				busy += sp.busy * p.v * ov / w
			case l > 0:
				busy += sp.busy * ov / l
			}
		}
		if busy <= 0 {
			continue
		}
		u := busy / length
		if j := holderOf(tr.owner, holders); j >= 0 {
			shares[j] = min(shares[j]+u, 1)
			continue
		}
		unattributed += u
	}
	return min(unattributed, 1)
}

// cover counts idle period p, credited before the spans that cover it
// were weighed, in their covered length: its weight is none.
func (sh *shareState) cover(p *pendingPeriod) {
	for _, tr := range sh.procs {
		for k := range tr.spans {
			if sp := &tr.spans[k]; !sp.weighed {
				if ov := overlap(sp.from, sp.to, p.from, p.to); ov > 0 {
					sp.covered += ov
				}
			}
		}
	}
}

// weigh computes a span's weight and covered length over the pending
// periods from i on. A span that runs past the periods queued (their
// samples lost, or a poll forced to decide) is cut to them: the rest of
// its time is not credited.
func (sh *shareState) weigh(sp *procSpan, i int) {
	if sp.to.After(sh.queued) {
		sp.to = sh.queued
	}
	for _, q := range sh.pending[i:] {
		if !q.from.Before(sp.to) {
			break
		}
		ov := overlap(sp.from, sp.to, q.from, q.to)
		if ov <= 0 {
			continue
		}
		sp.covered += ov
		if q.known {
			sp.weight += q.v * ov
		}
	}
	sp.weighed = true
}

// overlap is the length in seconds of (a0, a1) ∩ (b0, b1).
func overlap(a0, a1, b0, b1 time.Time) float64 {
	lo, hi := a0, a1
	if b0.After(lo) {
		lo = b0
	}
	if b1.Before(hi) {
		hi = b1
	}
	return hi.Sub(lo).Seconds()
}

// Settle credits every period still waiting for process samples, as the
// samples in hand say: what no sample has covered yet is idle. Replay
// calls it after its last poll, so that its output holds the scenario's
// whole time; an agent never needs to.
func (e *Engine) Settle() {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.clock.Now()
	for _, ds := range e.dev {
		e.decide(ds, now, true)
	}
	e.snap.Store(e.buildSnapshot(now))
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
