package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/collector"
)

// DeviceSource reads every GPU device of the node. A non-nil error means the
// source is down for this poll; if it is a *collector.SourceError it is also
// counted (an attempt failed), otherwise only the down state is shown.
type DeviceSource interface {
	Read(ctx context.Context) (collector.DeviceSnapshot, error)
}

// AllocationSource lists which container holds which device. On failure it
// returns its last good answer marked stale, and an error counted as for
// DeviceSource.
type AllocationSource interface {
	List(ctx context.Context) (collector.AllocationList, error)
}

// Clock is the engine's time.
type Clock interface{ Now() time.Time }

// OverflowPod is the pod label of the series that allocations beyond
// Config.MaxAllocations are folded into, one per device.
const OverflowPod = "__overflow__"

// historyLen is how many allocation lists are kept to credit samples that
// arrive late: NVML stamps a sample up to a period after it was taken, and a
// poll reads samples up to a few polls old after a slow read.
const historyLen = 4

// defaultSamplePeriod is NVML's utilization sampling period on current GPUs,
// used until the device's own period has been observed.
const defaultSamplePeriod = time.Second / 6

// Engine joins device readings with allocations and integrates seconds.
type Engine struct {
	cfg     Config
	devices DeviceSource
	allocs  AllocationSource
	clock   Clock
	log     *zap.Logger
	pods    PodSource       // optional
	procs   ProcessResolver // optional
	dra     DRAHealth       // optional

	mu      sync.Mutex // serialises Poll
	dev     map[string]*deviceState
	alloc   map[allocKey]*allocState
	history []holdings // oldest first
	sources map[string]*sourceState
	polls   uint64
	// overflowed counts allocations folded into OverflowPod; folded holds
	// those in the latest list, so each is counted once while it lasts.
	overflowed uint64
	folded     map[allocKey]bool
	// cmdModels is the model detected from a pod's GPU process command line,
	// by pod UID, for pods whose labels name none.
	cmdModels map[string]string

	// noModel holds the processes whose command lines name no model, so
	// that each is parsed once while it runs on a GPU.
	noModel map[procID]bool

	snap atomic.Pointer[Snapshot] // the latest, never modified once stored

	// Reused from poll to poll, as the profile asks (docs/benchmarks.md):
	// ownerOf is the latest answer of Engine.owners and uids expire's set
	// of pods, the largest maps a poll would make; states and statesAt are
	// holderStates' answer, asked for every period credited.
	ownerOf  map[uint32]procOwner
	uids     map[string]bool
	states   []*allocState
	statesAt []int
}

type allocKey struct {
	UUID, Namespace, Pod, Container string
}

// holdings is one allocation list, indexed by device UUID.
type holdings struct {
	at time.Time
	// known is false until the allocation source has answered once: time
	// before that is neither allocated nor unallocated.
	known bool
	// unresolved is set while the list holds DRA devices that could not be
	// mapped to a device: any device no resolved allocation holds may be
	// one of them, so who holds it is unknown (see holders).
	unresolved bool
	byDevice   map[string][]allocKey
}

// holders returns who holds device uuid in h, and whether that is known:
// not before the first answer, nor, while DRA devices are unresolved, for
// a device no resolved allocation holds.
func (h *holdings) holders(uuid string) ([]allocKey, bool) {
	keys := h.byDevice[uuid]
	return keys, h.known && (len(keys) > 0 || !h.unresolved)
}

type deviceState struct {
	info       collector.Device
	present    bool
	lastSample time.Time // end of the last integrated sample
	lastPoll   time.Time // for devices with no utilization source
	// ringPeriod is the ring's sampling period (learnPeriod); 0 until seen.
	ringPeriod time.Duration
	// share credits a shared device by process (shares.go).
	share   shareState
	reading collector.DeviceReading
	util    float64
	hasUtil bool
	c       [NumWindows]DeviceCounters
	// through is the end of the time c holds (credit, gap).
	through time.Time
	// unattributedMem is the memory of processes no holder owns, known
	// only with process attribution.
	hasUnattributed bool
	unattributedMem uint64
	// goneAt is when a reading of every device first left this one out;
	// zero while it is read (see forget).
	goneAt time.Time
}

type allocState struct {
	key       allocKey
	gpu       int
	resource  string
	shared    bool
	dra       collector.DRADevice // zero for a device plugin's allocation
	live      bool
	stale     bool
	ended     time.Time
	c         [NumWindows]AllocationCounters
	hasStreak bool
	streak    time.Duration
	// byProcess is true when the last credit came from the allocation's own
	// processes rather than the device's samples.
	byProcess bool
	hasMemory bool
	memory    uint64
	pod       collector.Pod // identity from the pod source, when it knows the pod
	// snap and info are the latest snapshot's record of the allocation
	// and its info, published again while they stay the same.
	snap *AllocationSnapshot
	info *AllocationInfo
}

type sourceState struct {
	up     bool
	seen   bool
	errors map[string]uint64
}

// New returns an engine over the given sources. cfg must be valid.
func New(cfg Config, devices DeviceSource, allocs AllocationSource, clock Clock, logger *zap.Logger, opts ...Option) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Windows == nil {
		cfg.Windows = AllOffpeak{}
	}
	e := &Engine{
		cfg:     cfg,
		devices: devices,
		allocs:  allocs,
		clock:   clock,
		log:     logger,
		dev:     map[string]*deviceState{},
		alloc:   map[allocKey]*allocState{},
		sources: map[string]*sourceState{},
		folded:  map[allocKey]bool{},
		history: make([]holdings, 0, historyLen),

		cmdModels: map[string]string{},
		noModel:   map[procID]bool{},
		ownerOf:   map[uint32]procOwner{},
		uids:      map[string]bool{},
	}
	for _, o := range opts {
		o(e)
	}
	sources := []string{collector.SourceNVML, collector.SourceKubelet}
	if e.pods != nil {
		sources = append(sources, collector.SourcePods)
	}
	if e.procs != nil && e.pods != nil {
		sources = append(sources, collector.SourceProc)
	}
	if e.dra != nil {
		sources = append(sources, collector.SourceDRA)
	}
	for _, s := range sources {
		e.sources[s] = &sourceState{errors: map[string]uint64{}}
	}
	e.snap.Store(&Snapshot{})
	return e, nil
}

// Snapshot returns the state after the latest poll. Each poll publishes a
// new one, so the caller may keep it, but must not modify it. Safe for
// concurrent use.
func (e *Engine) Snapshot() *Snapshot { return e.snap.Load() }

// Ready reports whether a poll has completed.
func (e *Engine) Ready() bool { return e.snap.Load().Polls > 0 }

// Run polls every PollInterval until ctx is done.
func (e *Engine) Run(ctx context.Context) error {
	t := time.NewTicker(e.cfg.PollInterval)
	defer t.Stop()
	for {
		e.Poll(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Poll reads the sources once, integrates, and publishes a new snapshot.
func (e *Engine) Poll(ctx context.Context) {
	e.mu.Lock()
	defer e.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, e.cfg.PollTimeout)
	defer cancel()

	devSnap, devErr := e.devices.Read(ctx)
	e.observeSource(collector.SourceNVML, devErr, devSnap.Errors)
	list, listErr := e.allocs.List(ctx)
	var problems []error
	if listErr == nil {
		problems = list.Problems // a stale list's were counted when it was fresh
	}
	problems = e.observeDRA(problems)
	e.observeSource(collector.SourceKubelet, listErr, problems)
	e.observePods()
	now := e.clock.Now()

	// Gauges of a device that cannot be read are not shown; counters stay.
	for _, ds := range e.dev {
		ds.present = false
	}
	if devErr == nil {
		for _, rd := range devSnap.Devices {
			ds := e.dev[rd.Device.UUID]
			if ds == nil {
				ds = &deviceState{}
				e.dev[rd.Device.UUID] = ds
			}
			ds.info, ds.present, ds.reading = rd.Device, true, rd
			ds.goneAt = time.Time{}
		}
		for _, ds := range e.dev {
			if !ds.present && ds.goneAt.IsZero() {
				ds.goneAt = now
			}
		}
	}
	e.updateAllocations(list, listErr == nil, now)

	if devErr == nil {
		owners := e.owners(devSnap)
		for _, rd := range devSnap.Devices {
			ds := e.dev[rd.Device.UUID]
			e.integrate(ds, rd, now, owners)
			e.memory(ds, rd, owners)
		}
	}
	e.expire(now)
	e.forget(now)
	e.polls++
	e.snap.Store(e.buildSnapshot(now))
}

func (e *Engine) observeSource(name string, err error, partial []error) {
	s := e.sources[name]
	count := func(err error) {
		var se *collector.SourceError
		if errors.As(err, &se) {
			s.errors[se.Reason]++
			e.log.Debug("source call failed", zap.String("source", name), zap.String("reason", se.Reason), zap.Error(err))
		}
	}
	for _, p := range partial {
		count(p)
	}
	up := err == nil
	if err != nil {
		count(err)
	}
	switch {
	case up && s.seen && !s.up:
		e.log.Info("source recovered", zap.String("source", name))
	case !up && (s.up || !s.seen):
		e.log.Warn("source down", zap.String("source", name), zap.Error(err))
	}
	s.up, s.seen = up, true
}

// updateAllocations records the allocation list and the life of each
// allocation in it.
//
// A stale list (the kubelet cannot be read) is credited for StaleGrace after
// it was obtained; beyond, its allocations stay exported, marked stale, but
// who holds each device is unknown: its time is unattributed.
func (e *Engine) updateAllocations(list collector.AllocationList, fresh bool, now time.Time) {
	expired := !fresh && !list.At.IsZero() && now.Sub(list.At) > e.cfg.StaleGrace
	// The oldest list leaves the history now: its map and slices hold the
	// new one.
	var byDevice map[string][]allocKey
	if len(e.history) == historyLen {
		byDevice = e.history[0].byDevice
		copy(e.history, e.history[1:])
		e.history = e.history[:historyLen-1]
		for uuid, keys := range byDevice {
			byDevice[uuid] = keys[:0]
		}
	} else {
		byDevice = map[string][]allocKey{}
	}
	h := holdings{at: now, known: !list.At.IsZero() && !expired, byDevice: byDevice}
	// A DRA device that could not be resolved is held, by whom is unknown:
	// no device's time may be called unallocated meanwhile (holders).
	unresolved := list.Unresolved
	var folded map[allocKey]bool
	// Every allocation has ended, but those the list names again.
	for _, as := range e.alloc {
		if as.live {
			as.live, as.ended = false, now
		}
	}
	nvmlUp := e.sources[collector.SourceNVML].up && len(e.dev) > 0
	for _, a := range list.Allocations {
		uuid, gpu, ok := e.resolve(a.Device)
		if !ok {
			e.sources[collector.SourceKubelet].errors["unresolved_device"]++
			if !a.DRA.IsZero() {
				// No resolver (collector/dra) in front of the kubelet, or a
				// MIG device that NVML has not listed (yet): held, by whom
				// is not known.
				unresolved++
			}
			continue
		}
		if gpu < 0 && nvmlUp {
			// A UUID that NVML, which has listed this node's devices, does
			// not know: the device plugin names a device of another node,
			// or a DRA slice names a MIG device NVML has not listed yet.
			if fresh {
				e.sources[collector.SourceKubelet].errors["unknown_device"]++
			}
			if !a.DRA.IsZero() {
				unresolved++
			}
			continue
		}
		var pod collector.Pod
		if e.pods != nil {
			if p, ok := e.pods.Pod(a.Namespace, a.Pod); ok {
				if p.Terminal() {
					continue // an older kubelet still lists finished pods
				}
				pod = p
			}
		}
		k := allocKey{UUID: uuid, Namespace: a.Namespace, Pod: a.Pod, Container: a.Container}
		if e.alloc[k] == nil && len(e.alloc) >= e.cfg.MaxAllocations {
			if !e.folded[k] {
				e.overflowed++
			}
			if folded == nil {
				folded = map[allocKey]bool{}
			}
			folded[k] = true
			k = allocKey{UUID: uuid, Pod: OverflowPod}
			pod = collector.Pod{}
		}
		as := e.alloc[k]
		if as != nil && as.live {
			continue // the same device listed twice for one container, or folded
		}
		if !expired {
			h.byDevice[uuid] = append(h.byDevice[uuid], k)
		}
		if as == nil {
			as = &allocState{key: k}
			e.alloc[k] = as
		}
		as.gpu, as.resource, as.shared, as.pod, as.dra = gpu, a.Resource, a.Shared, pod, a.DRA
		as.live, as.stale, as.ended = true, list.Stale || !fresh, time.Time{}
	}
	h.unresolved = unresolved > 0
	for uuid, keys := range h.byDevice {
		if len(keys) == 0 { // held in the recycled list, not in this one
			delete(h.byDevice, uuid)
		}
	}
	// Several pods on one device share it whatever the resource says,
	// except a device the NVIDIA device plugin hands out whole: see
	// resolveConflict.
	for uuid, keys := range h.byDevice {
		if len(keys) < 2 {
			continue
		}
		if e.exclusive(keys) {
			h.byDevice[uuid] = e.resolveConflict(keys, fresh)
			continue
		}
		for _, k := range keys {
			e.alloc[k].shared = true
		}
	}
	// An allocation is counted as overflowed once while it stays listed.
	e.folded = folded
	e.history = append(e.history, h)
}

// exclusive reports whether every holder in keys was allocated the device
// whole, by a resource that never shares one (nvidia.com/gpu without a
// replica suffix, a MIG device, a DRA claim of one container without a
// share ID).
func (e *Engine) exclusive(keys []allocKey) bool {
	for _, k := range keys {
		as := e.alloc[k]
		whole := as.resource == "nvidia.com/gpu" || strings.HasPrefix(as.resource, "nvidia.com/mig-") || !as.dra.IsZero()
		if as.shared || !whole {
			return false
		}
	}
	return true
}

// resolveConflict decides who holds an exclusive device that the kubelet
// lists under several containers (kubelets before 1.34 still list pods that
// have terminated). With a pod source, the running pods are the holders.
// If that leaves several (or the pod source does not know), the conflict is
// counted as kubelet error "exclusive_conflict" and the holders split the
// device's time equally (credit), so that allocated seconds never exceed the
// device's observed seconds.
func (e *Engine) resolveConflict(keys []allocKey, fresh bool) []allocKey {
	if e.pods != nil {
		var running []allocKey
		for _, k := range keys {
			if p, ok := e.pods.Pod(k.Namespace, k.Pod); ok && p.Phase == "Running" {
				running = append(running, k)
			}
		}
		if len(running) == 1 {
			return running
		}
		if len(running) > 1 {
			keys = running
		}
	}
	if fresh {
		e.sources[collector.SourceKubelet].errors["exclusive_conflict"]++
	}
	return keys
}

// resolve maps a kubelet device reference to a device UUID and GPU index.
// UUID references resolve even for devices NVML has not listed (yet), so
// allocations stay visible while NVML is down.
func (e *Engine) resolve(ref collector.DeviceRef) (string, int, bool) {
	switch ref.Kind {
	case collector.RefUUID:
		if ds := e.dev[ref.UUID]; ds != nil {
			return ref.UUID, ds.info.GPU, true
		}
		return ref.UUID, -1, true
	case collector.RefMinor:
		// GKE names a GPU by its minor number, which need not be its index.
		if uuid, gpu, n := e.findDevice(func(d collector.Device) bool {
			return d.HasMinor && d.Minor == ref.Minor && (ref.HasGI == (d.ParentUUID != "")) && (!ref.HasGI || d.GPUInstance == ref.GI)
		}); n == 1 {
			return uuid, gpu, true
		}
	case collector.RefMIGPlacement:
		// A dynamic MIG device is found as NVIDIA's DRA driver finds it:
		// the live GPU instance of that profile and placement on the parent.
		if uuid, gpu, n := e.findDevice(func(d collector.Device) bool {
			return d.ParentUUID == ref.UUID && d.HasPlacement && d.GIProfileID == ref.GIProfile && d.PlacementStart == ref.Placement
		}); n == 1 {
			return uuid, gpu, true
		}
		// NVML did not say where the instances sit (GetGpuInstanceById
		// needs privileges): the profile decides only if one instance of
		// it lives on the parent.
		if uuid, gpu, n := e.findDevice(func(d collector.Device) bool {
			return d.ParentUUID == ref.UUID && !d.HasPlacement && ref.Profile != "" && d.MIGProfile == ref.Profile
		}); n == 1 {
			return uuid, gpu, true
		}
	case collector.RefLegacyMIG:
		if uuid, gpu, n := e.findDevice(func(d collector.Device) bool {
			return d.ParentUUID == ref.UUID && d.GPUInstance == ref.GI && d.ComputeInstance == ref.CI
		}); n == 1 {
			return uuid, gpu, true
		}
	}
	return "", 0, false
}

// findDevice returns the device that match accepts, and how many it
// accepts: among the devices of the latest read while NVML is up, since a
// MIG instance destroyed and made again has the old one's GPU instance or
// placement; while NVML is down, among the devices last seen, the latest
// seen first.
func (e *Engine) findDevice(match func(collector.Device) bool) (string, int, int) {
	live := e.sources[collector.SourceNVML].up
	found, gpu, n := "", 0, 0
	var seen time.Time
	for uuid, ds := range e.dev {
		if (live && !ds.present) || !match(ds.info) {
			continue
		}
		switch {
		case live || n == 0:
			found, gpu, n, seen = uuid, ds.info.GPU, n+1, ds.goneAt
		case ds.present || ds.goneAt.After(seen) || (ds.goneAt.Equal(seen) && uuid < found):
			found, gpu, seen = uuid, ds.info.GPU, ds.goneAt
		}
	}
	return found, gpu, n
}

// latestHolders returns who holds device uuid in the latest allocation list.
func (e *Engine) latestHolders(uuid string) ([]allocKey, bool) {
	if len(e.history) == 0 {
		return nil, false
	}
	h := &e.history[len(e.history)-1]
	return h.holders(uuid)
}

// holdersAt returns who held device uuid at time t, and whether that is known.
// Allocation changes between two lists are placed at the midpoint of the two
// polls, which bounds the error to half a poll interval per change and never
// credits one exclusive period to both the old and the new holder.
func (e *Engine) holdersAt(uuid string, t time.Time) ([]allocKey, bool) {
	n := len(e.history)
	if n == 0 {
		return nil, false
	}
	i, _ := slices.BinarySearchFunc(e.history, t, func(h holdings, t time.Time) int { return h.at.Compare(t) })
	switch {
	case i >= n:
		return e.history[n-1].holders(uuid)
	case i == 0:
		return e.history[0].holders(uuid)
	}
	pk, pKnown := e.history[i-1].holders(uuid)
	ck, cKnown := e.history[i].holders(uuid)
	if !pKnown || !cKnown {
		if cKnown {
			return ck, true
		}
		return pk, pKnown
	}
	prev, cur := &e.history[i-1], &e.history[i]
	if slices.Equal(pk, ck) {
		return ck, true
	}
	mid := prev.at.Add(cur.at.Sub(prev.at) / 2)
	early := !t.After(mid)
	out := make([]allocKey, 0, max(len(pk), len(ck)))
	for _, k := range ck {
		if !early || slices.Contains(pk, k) {
			out = append(out, k)
		}
	}
	if early {
		for _, k := range pk {
			if !slices.Contains(ck, k) {
				out = append(out, k)
			}
		}
	}
	return out, true
}

// integrate credits the new samples of one device (or, for a device with no
// utilization source, the time since the last poll) to the device and to
// the allocations that held it. On a shared GPU with process attribution,
// each holder is credited with its own processes' busy share instead of the
// device's samples, once the process samples that cover a period have come
// (see shares.go).
func (e *Engine) integrate(ds *deviceState, rd collector.DeviceReading, now time.Time, owners map[uint32]procOwner) {
	if rd.Device.MIGEnabled {
		// Its time is its MIG instances' (credit adds it), and its
		// unpartitioned slices'.
		ds.hasUtil = false
		e.unpartitioned(ds, now)
		return
	}
	if rd.Device.UtilizationSource == collector.UtilizationNone {
		ds.hasUtil = false
		if !ds.lastPoll.IsZero() && now.After(ds.lastPoll) {
			from := ds.lastPoll
			if limit := e.cfg.PollInterval + e.cfg.MaxSampleGap; now.Sub(from) > limit {
				e.gap(ds, from, now.Add(-e.cfg.PollInterval))
				from = now.Add(-e.cfg.PollInterval)
			}
			e.creditAt(ds, from, now, 0, false)
		}
		ds.lastPoll = now
		return
	}
	sh := &ds.share
	procs := rd.HasProcessSamples && e.resolved(rd, owners, sh)
	if ds.lastSample.IsZero() {
		// The first read sets the baseline: the driver's ring holds samples
		// from before the agent started, whose holders are not known.
		if n := len(rd.Samples); n > 0 {
			ds.lastSample = rd.Samples[n-1].Time
			e.learnPeriod(ds, rd.Samples)
			sh.decided, sh.queued = ds.lastSample, ds.lastSample
			if rd.HasProcessSamples {
				// Process samples that reach back before the baseline
				// weigh that time by the ring's samples of it.
				for i, s := range rd.Samples {
					from := s.Since
					switch {
					case !from.IsZero():
					case i > 0:
						from = rd.Samples[i-1].Time
					default:
						from = s.Time.Add(-ds.samplePeriod())
					}
					sh.record(from, s.Time, s.Value)
				}
			}
		}
		if rd.HasProcessSamples {
			e.ingest(ds, rd, owners, now)
		}
		return
	}
	e.learnPeriod(ds, rd.Samples)
	var busy, covered time.Duration
	for _, s := range rd.Samples {
		if !s.Time.After(ds.lastSample) {
			continue
		}
		from := ds.lastSample
		period := ds.samplePeriod()
		switch {
		case s.Dry && s.Value < e.cfg.IdleThreshold:
			// A ring that ran dry while another source says the GPU is
			// idle: it was idle since the ring last spoke, however long
			// ago. Before that (a failed read) is a gap.
			if s.Since.After(from) {
				e.gap(ds, from, s.Since)
				from = s.Since
			}
		case !s.Since.IsZero():
			// A GPM sample, or a dry ring's on a busy GPU: it covers the
			// time since Since. A GPM sample measured all of it, however
			// late the poll that took it came (a CPU-starved agent, a
			// poll that waited on a slow kubelet); a dry ring's busy
			// ratio is the GPU's now, and covers no more than a poll.
			if s.Since.After(from) {
				e.gap(ds, from, s.Since)
				from = s.Since
			}
			if s.Dry && s.Time.Sub(from) > e.cfg.MaxSampleGap {
				cut := s.Time.Add(-min(e.cfg.PollInterval, s.Time.Sub(from)))
				e.gap(ds, from, cut)
				from = cut
			}
		default:
			d := s.Time.Sub(from)
			switch {
			case d > e.cfg.MaxSampleGap:
				e.gap(ds, from, s.Time.Add(-period))
				from = s.Time.Add(-period)
			case ds.ringPeriod > 0 && d > ds.ringPeriod*3/2:
				// The ring left the periods before this sample out: a
				// ring that runs dry while the GPU idles records no idle
				// period. Samples lost otherwise leave a longer gap.
				cut := s.Time.Add(-ds.ringPeriod)
				e.emit(ds, from, cut, 0, true, procs)
				from = cut
			}
		}
		if !s.Time.After(from) {
			continue
		}
		e.emit(ds, from, s.Time, s.Value, true, procs)
		covered += s.Time.Sub(from)
		busy += time.Duration(float64(s.Time.Sub(from)) * s.Value)
		ds.lastSample = s.Time
	}
	if covered > 0 {
		ds.util, ds.hasUtil = float64(busy)/float64(covered), true
	}
	if rd.HasProcessSamples {
		e.ingest(ds, rd, owners, now)
	}
	e.decide(ds, now, false)
}

// learnPeriod learns the device's sampling period from its ring samples:
// the shortest interval between two samples of one read. A ring that runs
// dry while the GPU idles leaves idle periods out, so a longer interval
// says nothing; GPM samples (Since set) have no period.
func (e *Engine) learnPeriod(ds *deviceState, samples []collector.Sample) {
	for i := 1; i < len(samples); i++ {
		a, b := samples[i-1], samples[i]
		if !a.Since.IsZero() || !b.Since.IsZero() {
			continue
		}
		if d := b.Time.Sub(a.Time); d >= minSamplePeriod && (ds.ringPeriod == 0 || d < ds.ringPeriod) {
			ds.ringPeriod = d
		}
	}
}

// samplePeriod is the period a ring sample covers after a gap.
func (ds *deviceState) samplePeriod() time.Duration {
	if ds.ringPeriod > 0 {
		return ds.ringPeriod
	}
	return defaultSamplePeriod
}

// emit credits the period [from, to) of a device with busy ratio v, or,
// when its holders share the device and their processes' samples are to
// split it, queues it until those samples have come (decide). Periods
// are credited in time order.
func (e *Engine) emit(ds *deviceState, from, to time.Time, v float64, known, procs bool) {
	holders, holdersKnown := e.holdersAt(ds.info.UUID, to)
	sh := &ds.share
	byProcess := false
	if procs && known && holdersKnown && len(holders) > 0 {
		// The holders of a shared device are split by process; an
		// exclusive one's too while a process its holder does not own
		// runs there (its share is unallocated activity).
		_, _, shared := e.holderStates(holders)
		byProcess = shared || sh.foreign
	}
	if !byProcess && len(sh.pending) == 0 {
		e.credit(ds, from, to, v, known, holders, holdersKnown, nil, 0)
		if known && sh.procs != nil {
			sh.record(from, to, v)
		}
		sh.decided, sh.queued = to, to
		return
	}
	sh.enqueue(pendingPeriod{from: from, to: to, v: v, known: known, holdersKnown: holdersKnown, byProcess: byProcess}, holders)
}

// creditAt credits [from, to) to whoever held the device at to.
func (e *Engine) creditAt(ds *deviceState, from, to time.Time, v float64, known bool) {
	holders, holdersKnown := e.holdersAt(ds.info.UUID, to)
	e.credit(ds, from, to, v, known, holders, holdersKnown, nil, 0)
}

// split returns how much of [from, to) falls in each window.
func (e *Engine) split(from, to time.Time) [NumWindows]time.Duration {
	return e.cfg.Windows.Durations(from, to)
}

func (e *Engine) gap(ds *deviceState, from, to time.Time) {
	ds.through = maxTime(ds.through, to)
	parent, frac := e.migParent(ds)
	for w, d := range e.split(from, to) {
		if d == 0 {
			continue
		}
		ds.c[w].Gap += d.Seconds()
		if parent != nil {
			parent.c[w].Gap += frac * d.Seconds()
		}
	}
}

// migParent returns the GPU in MIG mode that ds is an instance of, and the
// instance's share of it; nil when ds is no MIG instance or its share is
// unknown.
func (e *Engine) migParent(ds *deviceState) (*deviceState, float64) {
	if ds.info.ParentUUID == "" {
		return nil, 0
	}
	p := e.dev[ds.info.ParentUUID]
	f := ds.info.GPUFraction()
	if p == nil || !p.info.MIGEnabled || f == 0 {
		return nil, 0
	}
	return p, f
}

// unpartitioned credits a GPU in MIG mode with the time since the last
// poll of the slices that none of its present instances occupies: observed
// and unallocated, since no pod can hold them. Its instances' time reaches
// it through credit. When an instance's share is unknown, so is the rest.
func (e *Engine) unpartitioned(ds *deviceState, now time.Time) {
	from := ds.lastPoll
	ds.lastPoll = now
	if from.IsZero() || !now.After(from) {
		return
	}
	if limit := e.cfg.PollInterval + e.cfg.MaxSampleGap; now.Sub(from) > limit {
		from = now.Add(-e.cfg.PollInterval)
	}
	free := 1.0
	for _, is := range e.dev {
		if is.info.ParentUUID != ds.info.UUID || !is.present {
			continue
		}
		f := is.info.GPUFraction()
		if f == 0 {
			return
		}
		free -= f
	}
	if free <= 1e-9 {
		return
	}
	for w, d := range e.split(from, now) {
		if d == 0 {
			continue
		}
		sec := free * d.Seconds()
		ds.c[w].Observed += sec
		ds.c[w].Unallocated += sec
	}
}

// credit adds the period [from, to) with busy ratio v (when known) to the
// device and to holders, who held it then (holdersKnown: whether that is
// known). With shares (from the processes' samples), holders of a shared
// device are credited with their own processes' shares (shares[i] is
// holders[i]'s), and unattributed, the share of processes no holder owns,
// counts as unallocated activity on any device. A MIG
// instance's device counters reach its GPU too, weighted by its share.
func (e *Engine) credit(ds *deviceState, from, to time.Time, v float64, known bool, holders []allocKey, holdersKnown bool, shares []float64, unattributed float64) {
	ds.through = maxTime(ds.through, to)
	states, at, shared := e.holderStates(holders)
	// Several holders of an exclusive device (resolveConflict) split it.
	split := 1.0
	if !shared && len(states) > 1 {
		split = 1 / float64(len(states))
	}
	byProcess := known && shared && shares != nil
	deviceIdle := known && v < e.cfg.IdleThreshold
	// The device's own allocated time: idle only when every holder is,
	// and busy by the holders' shares together (the device's samples
	// when they are credited to every holder alike).
	allocated := holdersKnown && len(states) > 0
	allIdle, busy := deviceIdle, v
	if byProcess {
		allIdle, busy = true, 0
		for j := range states {
			u := shares[at[j]]
			allIdle = allIdle && u < e.cfg.IdleThreshold
			busy += u
		}
		busy = min(busy, 1)
	}
	parent, frac := e.migParent(ds)
	for w, d := range e.split(from, to) {
		if d == 0 {
			continue
		}
		sec := d.Seconds()
		c := DeviceCounters{Observed: sec}
		if deviceIdle {
			c.Idle = sec
		}
		if !holdersKnown {
			c.Unattributed = sec
		}
		switch {
		case allocated:
			c.Allocated = sec
			if known {
				c.AllocatedActive = sec * busy
				if allIdle {
					c.AllocatedIdle = sec
				}
				c.UnallocatedActive = sec * unattributed
			}
		case holdersKnown:
			c.Unallocated = sec
			if known {
				c.UnallocatedActive = sec * v
			}
		}
		// While the holders are unknown (the kubelet unreachable, a DRA
		// claim unresolved), processes no known holder owns are not work
		// nobody owns: no unallocated activity is counted for them.
		ds.c[w].add(&c, 1)
		if parent != nil {
			parent.c[w].add(&c, frac)
		}
		for j, as := range states {
			ac := &as.c[w]
			s := sec * split
			ac.Allocated += s
			if !known {
				continue
			}
			u := v
			if byProcess {
				u = shares[at[j]]
			}
			ac.Active += s * u
			if u < e.cfg.IdleThreshold {
				ac.Idle += s
			}
		}
	}
	if !known {
		return
	}
	for j, as := range states {
		u := v
		if byProcess {
			u = shares[at[j]]
		}
		as.hasStreak, as.byProcess = true, byProcess
		if u < e.cfg.IdleThreshold {
			as.streak += to.Sub(from)
		} else {
			as.streak = 0
		}
	}
}

// holderStates returns the states of holders that the engine tracks, the
// index in holders of each, and whether one of them is shared. The slices
// are valid until the next call.
func (e *Engine) holderStates(holders []allocKey) (states []*allocState, at []int, shared bool) {
	states, at = e.states[:0], e.statesAt[:0]
	for i, k := range holders {
		if as := e.alloc[k]; as != nil {
			states = append(states, as)
			at = append(at, i)
			shared = shared || as.shared
		}
	}
	e.states, e.statesAt = states, at
	return states, at, shared
}

// expire drops allocations that ended more than Retention ago and that no
// kept allocation list, nor a period waiting for process samples, can still
// credit.
func (e *Engine) expire(now time.Time) {
	oldest := e.history[0].at
	for _, ds := range e.dev {
		if p := ds.share.pending; len(p) > 0 && p[0].from.Before(oldest) {
			oldest = p[0].from
		}
	}
	uids := e.uids
	clear(uids)
	for k, as := range e.alloc {
		if !as.live && now.Sub(as.ended) > e.cfg.Retention && as.ended.Before(oldest) {
			delete(e.alloc, k)
			continue
		}
		uids[as.pod.UID] = true
	}
	for uid := range e.cmdModels {
		if !uids[uid] {
			delete(e.cmdModels, uid)
		}
	}
}

// forget drops a MIG device that readings have left out for longer than
// Retention while its parent GPU was read: a DRA driver destroyed it (a
// fresh one has a UUID of its own), and its last counters have been
// exported for as long as an ended allocation's. A whole GPU that is not
// read is down (lost, hung), not gone: it is kept.
func (e *Engine) forget(now time.Time) {
	for uuid, ds := range e.dev {
		if ds.present || ds.goneAt.IsZero() || ds.info.ParentUUID == "" || now.Sub(ds.goneAt) <= e.cfg.Retention {
			continue
		}
		if parent := e.dev[ds.info.ParentUUID]; parent != nil && parent.present {
			delete(e.dev, uuid)
		}
	}
}

// buildSnapshot returns a new snapshot of the state now.
func (e *Engine) buildSnapshot(now time.Time) *Snapshot {
	s := &Snapshot{At: now, Polls: e.polls, Overflowed: e.overflowed}

	devs := slices.Collect(maps.Values(e.dev))
	slices.SortFunc(devs, func(a, b *deviceState) int {
		return cmp.Or(cmp.Compare(a.info.GPU, b.info.GPU), cmp.Compare(a.info.UUID, b.info.UUID))
	})
	s.Devices = make([]DeviceSnapshot, 0, len(devs))
	for _, ds := range devs {
		d := DeviceSnapshot{
			Device:         ds.info,
			Present:        ds.present,
			Counters:       ds.c,
			Through:        ds.through,
			HasUtilization: ds.hasUtil && ds.present,
			Utilization:    ds.util,
			DeviceGauges:   ds.reading.DeviceGauges.Available(ds.present),
			GPMGauges:      ds.reading.GPMGauges,

			HasUnattributedMemory:   ds.hasUnattributed && ds.present,
			UnattributedMemoryBytes: ds.unattributedMem,
		}
		if !ds.present {
			d.GPMGauges = collector.GPMGauges{}
		}
		s.Devices = append(s.Devices, d)
	}

	s.Allocations = make([]*AllocationSnapshot, 0, len(e.alloc))
	for _, as := range e.alloc {
		s.Allocations = append(s.Allocations, e.allocationSnapshot(as))
	}
	slices.SortFunc(s.Allocations, func(a, b *AllocationSnapshot) int {
		return cmp.Or(cmp.Compare(a.UUID, b.UUID), cmp.Compare(a.Namespace, b.Namespace),
			cmp.Compare(a.Pod, b.Pod), cmp.Compare(a.Container, b.Container))
	})

	names := slices.Sorted(maps.Keys(e.sources))
	s.Sources = make([]SourceSnapshot, len(names))
	for i, name := range names {
		st := e.sources[name]
		s.Sources[i] = SourceSnapshot{Name: name, Up: st.up, Errors: maps.Clone(st.errors)}
	}
	return s
}

// allocationSnapshot returns the record of as for a new snapshot. While
// it stays the same (an ended allocation's, during retention), the last
// snapshot's record is returned again, and its info likewise, so that a
// poll copies only what changed.
func (e *Engine) allocationSnapshot(as *allocState) *AllocationSnapshot {
	info := AllocationInfo{
		UUID:         as.key.UUID,
		GPU:          as.gpu,
		Namespace:    as.key.Namespace,
		Pod:          as.key.Pod,
		Container:    as.key.Container,
		Resource:     as.resource,
		Shared:       as.shared,
		WorkloadKind: as.pod.WorkloadKind,
		Workload:     as.pod.Workload,
		Model:        cmp.Or(as.pod.Model, e.cmdModels[as.pod.UID]),
		ExtraLabels:  as.pod.ExtraLabels,
		Scheduling:   as.pod.Scheduling,
		DRA:          as.dra,
	}
	if as.info == nil || !as.info.equal(&info) {
		changed := info
		as.info = &changed
	}
	attribution := "device"
	if as.byProcess {
		attribution = "process"
	}
	a := AllocationSnapshot{
		AllocationInfo:  as.info,
		Attribution:     attribution,
		Live:            as.live,
		Stale:           as.stale,
		Counters:        as.c,
		HasIdleStreak:   as.hasStreak && as.live,
		IdleStreak:      as.streak.Seconds(),
		HasMemory:       as.hasMemory && as.live,
		MemoryUsedBytes: as.memory,
	}
	if as.snap == nil || *as.snap != a {
		changed := a
		as.snap = &changed
	}
	return as.snap
}

// String describes the engine's configuration for the start-up log.
func (e *Engine) String() string {
	return fmt.Sprintf("poll=%s idle<%.3g retention=%s", e.cfg.PollInterval, e.cfg.IdleThreshold, e.cfg.Retention)
}
