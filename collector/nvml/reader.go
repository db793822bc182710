// Package nvml reads GPU activity through go-nvml: utilization samples since the
// last one seen, memory, power, energy and compute processes, for every device.
// The same code reads a real driver and the simulated node of package sim,
// which is an nvml.Interface too.
package nvml

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/collector"
)

// ErrNotInitialized is returned by Read while NVML could not be initialised.
// No NVML function other than Init is called in that state: after a failed
// Init a missing symbol kills the process.
var ErrNotInitialized = errors.New("NVML is not initialised")

// Clock is the time the reader stamps its snapshots with and paces its Init
// retries by.
type Clock interface{ Now() time.Time }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

const (
	initRetryMin = 5 * time.Second
	initRetryMax = 5 * time.Minute
)

// Bounds on a sample's timestamp relative to the reader's clock when its
// call answered: a sample stamped further ahead would stop every later
// sample from being read (each read asks for samples newer than the newest
// seen), one far older is not from the driver's ring (about 20 s). Such
// samples are dropped and counted.
const (
	maxSampleLead = time.Minute
	maxSampleAge  = 10 * time.Minute
)

// maxSamplePeriod is the longest utilization sample period: "each sample
// period may be between 1 second and 1/6 second, depending on the product"
// (nvml.h, on utilization). A ring with no sample for longer has run dry.
const maxSamplePeriod = time.Second

// Reader reads every NVML device of the node. It is not safe for concurrent
// Read calls; the engine polls from one goroutine.
//
// NVML calls cannot be cancelled, and a driver in trouble can block one for
// minutes. Each device is therefore read on a goroutine of its own that Read
// waits for at most Config.CallTimeout: a device whose read has not ended is
// left out of the snapshot (counted as "hung") and is not read again until
// that read ends, so at most one call per device is ever in flight and
// blocked calls do not pile up goroutines. A read that ends late is used by
// the next Read: its samples carry their own timestamps.
type Reader struct {
	lib    nvml.Interface
	cfg    Config
	log    *zap.Logger
	clock  Clock
	driver string
	// caps is what the loaded driver offers, probed at each Init.
	caps driverCaps

	// running counts the device reads whose goroutine has not ended.
	running atomic.Int64

	mu          sync.Mutex // guards the fields below against Shutdown during Read
	initialized bool
	initErr     error
	// initUnreported is set when an Init attempt failed and no Read has
	// returned its error yet: the engine counts each attempt once, not
	// each poll between two attempts.
	initUnreported bool
	nextInit       time.Time
	initBackoff    time.Duration
	// retryMax caps initBackoff: initRetryMax for a driver not installed
	// yet, reloadRetryMax after a driver went away under the reader.
	retryMax time.Duration
	devices  []*device
	// count is how many GPUs DeviceGetCount said at the enumeration;
	// stale, when set, says why the next walk enumerates them anew.
	count   int
	stale   string
	migScan migRescan
	// retired are devices dropped while a read of theirs was in flight,
	// whose GPM samples are freed when it ends (retire).
	retired []*device
	// reinit is set when the driver went away: NVML is shut down and
	// initialised anew once no call is in flight (driverWentAway).
	reinit bool
	// released is set between Release and Reacquire; releaseSaid once
	// the release was returned as an error.
	released      bool
	releaseReason string
	releaseSaid   bool
	// snaps are the Devices slices of Read's snapshots, used in turn as a
	// device's bufs are; wait is Read's timer.
	snaps [2][]collector.DeviceReading
	flip  int
	wait  *time.Timer
}

// device is one enumerated NVML device (a whole GPU or a MIG instance) and
// what the reader remembers of it.
type device struct {
	handle nvml.Device
	info   collector.Device
	// index is a whole GPU's NVML index (its handle's), -1 for a MIG device.
	index int
	// lastSeen is the newest sample timestamp read, in the driver's
	// microseconds (stamps maps them to Unix time).
	lastSeen uint64
	stamps   stampClock
	// lastProcSeen is the newest per-process sample timestamp read, in
	// Unix microseconds.
	lastProcSeen uint64
	// ringSince is where the ring's silence begins: the newest sample
	// read, or the previous call when it found none or failed (dryFill).
	ringSince time.Time
	// noSamples is set once the driver says samples are not supported, so the
	// call is not repeated every poll; likewise noProcSamples and noMemoryV2.
	// A device that has answered the call once is only down while it says
	// so (gotSamples, gotProcSamples): a driver being upgraded does that.
	gotSamples, gotProcSamples bool
	noSamples                  bool
	noProcSamples              bool
	noMemoryV2                 bool
	noUtilRates                bool
	// memoryDenied is set once the memory query answered NO_PERMISSION
	// (a MIG-enabled GPU, read without privileges): it is not asked again.
	memoryDenied bool
	// lists are the states of the compute, MPS and graphics process lists.
	lists [3]listState
	// running is when each PID was last in a process list, on the reader's
	// clock; gone the PIDs whose samples the last read dropped as not
	// running, sorted.
	running       map[uint32]time.Time
	gone, goneBuf []uint32
	// gpm samples SM activity where GPM works; useGPM says its samples are
	// the device's utilization samples.
	gpm    *gpmSampler
	useGPM bool
	// mig is set on a MIG instance: no power or energy of its own.
	mig bool
	// metrics is GPM's request/answer buffer (about 23 KB), reused; one per
	// device, since devices are read concurrently.
	metrics *nvml.GpmMetricsGetType

	// inflight is set while a read runs, and receives once when it ends;
	// nil when none runs. It is done, made once: a read a poll would
	// otherwise make a channel a poll. res is that read's result, owned by
	// the read until inflight receives.
	inflight, done chan struct{}
	res            readResult
	// bufs are the slices a reading's samples, process samples and
	// processes are read into, used in turn, so that a reading stays
	// valid until the read after the next; flip is the next one's.
	bufs [2]readingBufs
	flip int
	// hung and lost remember the logged state, so a fault is logged once.
	hung, lost bool
}

// readingBufs are the slices of one reading of a device.
type readingBufs struct {
	samples     []collector.Sample
	procSamples []collector.ProcessSample
	processes   []collector.Process
}

// readResult is one read of one device. down, when set, says why the
// device's activity could not be read: the device is left out of the snapshot.
type readResult struct {
	rd   collector.DeviceReading
	errs []error
	down *collector.SourceError
	// gone is the code of a call that said the driver went away.
	gone nvml.Return
}

// New returns a reader over lib, which is nvml.New() on a node or a simulated
// node's interface. cfg must be valid. Call Init before Read.
func New(lib nvml.Interface, cfg Config, logger *zap.Logger, clock Clock) *Reader {
	if clock == nil {
		clock = realClock{}
	}
	return &Reader{lib: lib, cfg: cfg, log: logger, clock: clock, initBackoff: initRetryMin, retryMax: initRetryMax}
}

// Init initialises NVML and enumerates the devices. On failure (no
// libnvidia-ml.so.1, driver not loaded) it returns a *collector.SourceError,
// which the next Read returns too, and Read retries Init with a growing
// backoff, so an agent started before the driver was installed picks it up
// later. The failure is logged at debug: the engine that reads it says once
// that the source is down.
func (r *Reader) Init() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.initLocked()
}

func (r *Reader) initLocked() error {
	if ret := r.lib.Init(); ret != nvml.SUCCESS {
		err := collector.NewSourceError(collector.SourceNVML, "init", fmt.Errorf("nvml.Init: %w", retError(ret)))
		r.initFailed(err)
		return err
	}
	r.initialized, r.initErr, r.initUnreported = true, nil, false
	r.initBackoff, r.retryMax = initRetryMin, initRetryMax
	if err := r.enumerate(); err != nil {
		r.lib.Shutdown()
		r.initialized = false
		r.initFailed(err)
		return err
	}
	r.log.Info("NVML initialised", zap.String("driver", r.driver), zap.Int("devices", len(r.devices)))
	return nil
}

// initFailed records a failed Init attempt and when to try again. A
// failure unlike the last one (the library found, the driver not loaded
// yet) is worth a line of its own; the rest are debug.
func (r *Reader) initFailed(err error) {
	if r.initErr != nil && r.initErr.Error() != err.Error() {
		r.log.Warn("NVML still cannot be initialised, now for another reason (retrying)", zap.Error(err), zap.NamedError("before", r.initErr))
	}
	r.log.Debug("NVML Init failed", zap.Error(err), zap.Duration("retry_in", r.initBackoff))
	r.initErr, r.initUnreported = err, true
	r.nextInit = r.clock.Now().Add(r.initBackoff)
	r.initBackoff = min(2*r.initBackoff, r.retryMax)
}

// notInitialized is Read's error while NVML is not initialised: the last
// attempt's *collector.SourceError the first time it is returned, so that
// the engine counts the attempt, and after that the same words without the
// SourceError, so that the polls until the next attempt are not counted.
func (r *Reader) notInitialized() error {
	var se *collector.SourceError
	if !errors.As(r.initErr, &se) {
		return fmt.Errorf("%w: %w", ErrNotInitialized, r.initErr)
	}
	err := fmt.Errorf("%w: %w", ErrNotInitialized, se.Err)
	if r.initUnreported {
		r.initUnreported = false
		return collector.NewSourceError(se.Source, se.Reason, err)
	}
	return fmt.Errorf("%s %s: %w", se.Source, se.Reason, err)
}

func (r *Reader) enumerate() error {
	if v, ret := r.lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		r.driver = v
	}
	r.caps = probeDriver(r.lib, r.driver)
	if r.caps.processStructBug {
		r.log.Warn("this driver fills the process lists with entries of another size than NVML's header says (go-nvml #75); they are not read, so per-process memory is unknown and processes are taken from the utilization samples only",
			zap.String("driver", r.driver))
	}
	n, ret := r.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return collector.NewSourceError(collector.SourceNVML, "device_count", retError(ret))
	}
	// Samples already read are not read again by the devices enumerated
	// anew: the engine would count their time twice.
	type stamps struct{ samples, procs uint64 }
	seen := make(map[string]stamps, len(r.devices))
	for _, d := range r.devices {
		seen[d.info.UUID] = stamps{d.lastSeen, d.lastProcSeen}
	}
	r.freeDevices()
	r.count, r.stale = n, ""
	defer func() {
		for _, d := range r.devices {
			if s, ok := seen[d.info.UUID]; ok {
				d.lastSeen, d.lastProcSeen = s.samples, s.procs
			}
		}
	}()
	for i := 0; i < n; i++ {
		h, ret := r.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			r.log.Warn("skipping GPU whose handle cannot be read", zap.Int("index", i), zap.Error(retError(ret)))
			continue
		}
		uuid, ret := h.GetUUID()
		if ret != nvml.SUCCESS {
			r.log.Warn("skipping GPU whose UUID cannot be read", zap.Int("index", i), zap.Error(retError(ret)))
			continue
		}
		name, _ := h.GetName()
		idx, ret := h.GetIndex()
		if ret != nvml.SUCCESS {
			idx = i
		}
		mode, _, ret := h.GetMigMode()
		migEnabled := ret == nvml.SUCCESS && mode == nvml.DEVICE_MIG_ENABLE
		gpm := gpmSupported(r.lib, h)
		d := &device{
			handle: h,
			index:  i,
			info: collector.Device{
				UUID:              uuid,
				GPU:               idx,
				Name:              name,
				DriverVersion:     r.driver,
				UtilizationSource: collector.UtilizationSamples,
				MIGEnabled:        migEnabled,
			},
		}
		d.info.Minor, d.info.HasMinor = minorNumber(h)
		switch {
		case migEnabled:
			// NVML has no utilization samples on a MIG-enabled GPU; its
			// activity is its instances'.
			d.info.UtilizationSource, d.noSamples, d.noProcSamples = collector.UtilizationNone, true, true
		case gpm:
			d.gpm = r.sampler(h, -1)
			if d.gpm != nil && r.cfg.IdleSource == collector.UtilizationGPM {
				d.info.UtilizationSource, d.useGPM, d.noSamples = collector.UtilizationGPM, true, true
			}
		}
		r.devices = append(r.devices, d)
		if migEnabled {
			r.devices = append(r.devices, r.migDevices(d, gpm)...)
		}
	}
	return nil
}

// sampler allocates a GPM sampler, or returns nil (logged) when it cannot.
func (r *Reader) sampler(parent nvml.Device, gi int) *gpmSampler {
	g, ret := newGPMSampler(r.lib, parent, gi)
	if ret != nvml.SUCCESS {
		r.log.Info("GPM samples cannot be allocated; GPM is off for this device", zap.Int("gpu_instance", gi), zap.Error(retError(ret)))
		return nil
	}
	return g
}

// freeDevices drops the devices, waiting at most Config.CallTimeout for
// their reads in flight; a device whose read has not ended keeps its GPM
// samples until it does (retire).
func (r *Reader) freeDevices() {
	r.dropMIGWalks()
	r.waitInflight(r.cfg.CallTimeout)
	for _, d := range r.devices {
		r.retire(d)
	}
	clear(r.devices)
	r.devices = r.devices[:0]
}

// Read reads every device once. It returns ErrNotInitialized (wrapped in a
// *collector.SourceError) while NVML is not initialised, making no NVML call
// but the paced Init retry. Failures of single calls are returned in the
// snapshot's Errors; the rest of the reading stays valid. A device whose
// activity cannot be read (its GPU is lost, the samples call failed, or a
// call hangs past Config.CallTimeout) is left out of Devices, with its
// error: the engine counts nothing for it until it is back.
func (r *Reader) Read(ctx context.Context) (collector.DeviceSnapshot, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.released {
		return r.releasedSnapshot(), nil
	}
	r.reinitLocked()
	if !r.initialized {
		if r.clock.Now().Before(r.nextInit) || r.initLocked() != nil {
			return collector.DeviceSnapshot{At: r.clock.Now()}, r.notInitialized()
		}
	}
	r.rescanMIG(ctx)
	for _, d := range r.devices {
		if d.inflight == nil {
			r.start(d)
		}
	}
	w := r.giveUp()
	defer w.stop()
	expired := false
	r.flip ^= 1
	snap := collector.DeviceSnapshot{Devices: r.snaps[r.flip][:0]}
	defer func() { r.snaps[r.flip] = snap.Devices }()
	for _, d := range r.devices {
		done := false
		// A device already known to hang is not waited for again: its
		// call ends when it ends, and the next Read takes the result.
		// Where the library tells which calls it holds, one that no
		// longer is ends at once, and is waited for like any other.
		if !expired && (!d.hung || r.cfg.HeldCalls != nil) {
			done = w.wait(ctx, d.inflight)
			expired = !done
		}
		if !done {
			select {
			case <-d.inflight:
				done = true
			default:
			}
		}
		if !done {
			if !d.hung {
				d.hung = true
				r.log.Warn("an NVML call on the GPU has not returned; its metrics are stale until it does",
					zap.Int("gpu", d.info.GPU), zap.String("uuid", d.info.UUID), zap.Stringer("waited", w))
			}
			snap.Errors = append(snap.Errors, collector.NewSourceError(collector.SourceNVML, "hung",
				fmt.Errorf("GPU %d %s: an NVML call has been in flight for %s", d.info.GPU, d.info.UUID, w)))
			continue
		}
		d.inflight = nil
		res := d.res
		d.res = readResult{}
		if d.hung {
			d.hung = false
			r.log.Info("the hung NVML call on the GPU returned", zap.Int("gpu", d.info.GPU), zap.String("uuid", d.info.UUID))
		}
		snap.Errors = append(snap.Errors, res.errs...)
		lost := res.down != nil && res.down.Reason == "gpu_lost"
		switch {
		case lost && !d.lost:
			r.log.Warn("GPU is lost (fell off the bus?); its metrics are stale until it is back", zap.Int("gpu", d.info.GPU), zap.String("uuid", d.info.UUID))
		case !lost && d.lost:
			// A GPU back from a reset may have new MIG devices and
			// handles: the next walk enumerates it afresh.
			r.log.Info("lost GPU is back", zap.Int("gpu", d.info.GPU), zap.String("uuid", d.info.UUID))
			r.migScan.last = time.Time{}
			r.stale = fmt.Sprintf("GPU %d %s is back from a loss", d.info.GPU, d.info.UUID)
		}
		d.lost = lost
		if res.gone != nvml.SUCCESS {
			r.driverWentAway(fmt.Sprintf("GPU %d %s: %v", d.info.GPU, d.info.UUID, retError(res.gone)))
		}
		if res.down != nil {
			snap.Errors = append(snap.Errors, res.down)
			continue
		}
		snap.Devices = append(snap.Devices, res.rd)
	}
	snap.At = r.clock.Now()
	return snap, nil
}

// heldPoll is how often a read that waits on a library which tells the
// calls it holds (Config.HeldCalls) asks it: a virtual clock wakes nobody.
const heldPoll = time.Millisecond

// giveUp is when Read and the MIG walk stop waiting for reads in flight:
// after Config.CallTimeout, or, with Config.HeldCalls, once every read in
// flight is held by the library.
type giveUp struct {
	r     *Reader
	timer *time.Timer
	tick  *time.Ticker
}

func (r *Reader) giveUp() giveUp {
	if r.cfg.HeldCalls != nil {
		return giveUp{r: r, tick: time.NewTicker(heldPoll)}
	}
	if r.wait == nil {
		r.wait = time.NewTimer(r.cfg.CallTimeout)
	} else {
		r.wait.Reset(r.cfg.CallTimeout)
	}
	return giveUp{r: r, timer: r.wait}
}

// wait waits for done and reports whether it came; false when the reader
// gives up, or ctx ends.
func (g giveUp) wait(ctx context.Context, done <-chan struct{}) bool {
	var timeout, tick <-chan time.Time
	if g.timer != nil {
		timeout = g.timer.C
	}
	if g.tick != nil {
		tick = g.tick.C
	}
	for {
		select {
		case <-done:
			return true
		case <-timeout:
			return false
		case <-tick:
			if g.r.running.Load() > int64(g.r.cfg.HeldCalls()) {
				continue
			}
			// Every read in flight is held; this one may have ended
			// since the select chose the tick.
			select {
			case <-done:
				return true
			default:
				return false
			}
		case <-ctx.Done():
			return false
		}
	}
}

func (g giveUp) stop() {
	if g.timer != nil {
		g.timer.Stop()
	}
	if g.tick != nil {
		g.tick.Stop()
	}
}

// String says how long the reader waited: for the log and the error.
func (g giveUp) String() string {
	if g.tick != nil {
		return "as long as the NVML library holds it"
	}
	return "more than " + g.r.cfg.CallTimeout.String()
}

// start reads d on a goroutine of its own.
func (r *Reader) start(d *device) {
	if d.done == nil {
		d.done = make(chan struct{}, 1)
	}
	d.inflight = d.done
	r.running.Add(1)
	go func() {
		d.res = r.readDevice(d)
		// Delivered before it stops counting as in flight: a read that
		// no longer is has its result waiting (see giveUp.wait).
		d.done <- struct{}{}
		r.running.Add(-1)
	}()
}

// InFlight is the number of device reads whose goroutine has not ended: a
// read blocked in an NVML call, or about to end. Replay waits on it.
func (r *Reader) InFlight() int { return int(r.running.Load()) }

// waitInflight waits at most timeout for the reads in flight to end.
func (r *Reader) waitInflight(timeout time.Duration) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for _, d := range r.devices {
		if d.inflight == nil {
			continue
		}
		select {
		case <-d.inflight:
			d.inflight = nil
		case <-t.C:
			r.log.Warn("NVML calls are still in flight", zap.Int("gpu", d.info.GPU))
			return
		}
	}
}

// lostGPU reports whether ret says the GPU is gone until a reset.
func lostGPU(ret nvml.Return) bool {
	return ret == nvml.ERROR_GPU_IS_LOST || ret == nvml.ERROR_RESET_REQUIRED
}

// readDevice makes every call of one device's read. It runs on the device's
// own goroutine and is the only code touching d until it returns.
func (r *Reader) readDevice(d *device) (res readResult) {
	sourceErr := func(reason string, ret nvml.Return) *collector.SourceError {
		if lostGPU(ret) {
			reason = "gpu_lost"
		}
		return collector.NewSourceError(collector.SourceNVML, reason,
			fmt.Errorf("%s (GPU %d %s): %w", reason, d.info.GPU, d.info.UUID, retError(ret)))
	}
	// fail records a failed call and reports whether the device is lost,
	// which ends the read: every other call would fail the same way.
	fail := func(reason string, ret nvml.Return) bool {
		if driverGone(ret) {
			res.gone = ret
		}
		if lostGPU(ret) || driverGone(ret) {
			res.down = sourceErr(reason, ret)
			return true
		}
		res.errs = append(res.errs, sourceErr(reason, ret))
		return false
	}
	rd := &res.rd
	buf := &d.bufs[d.flip]
	d.flip ^= 1

	// Each call's samples are judged against the time it answers, not the
	// time the read began: a call that hung for minutes answers with
	// samples stamped up to its answer. Process samples are asked for from
	// the newest one read, as each entry carries its own stamp (go-nvml
	// #51, nvtop #110); the engine holds them until the time they cover is
	// decided, so the two calls' order does not matter.
	dry := false
	if !d.noSamples {
		rr := readSamples(d.handle, d.lastSeen, &d.stamps, r.clock, buf.samples[:0])
		if rr.bad > 0 {
			res.errs = append(res.errs, collector.NewSourceError(collector.SourceNVML, "bad_timestamp",
				fmt.Errorf("GPU %d %s: %d samples stamped outside [now-%s, now+%s] dropped", d.info.GPU, d.info.UUID, rr.bad, maxSampleAge, maxSampleLead)))
		}
		if rr.clockChanged {
			r.log.Info("the GPU's sample stamps are not Unix time; they are mapped to it",
				zap.Int("gpu", d.info.GPU), zap.String("uuid", d.info.UUID), zap.Duration("offset", time.Duration(d.stamps.offset)*time.Microsecond))
		}
		switch {
		case rr.ret == nvml.SUCCESS:
			d.lastSeen = rr.newest
			rd.Samples, d.gotSamples = rr.samples, true
			buf.samples = rr.samples
			d.ringSince = rr.samples[len(rr.samples)-1].Time
		case rr.ret == nvml.ERROR_NOT_FOUND && rr.newest > d.lastSeen:
			d.lastSeen = rr.newest // only stale samples: skip them
			d.gotSamples = true
		case rr.ret == nvml.ERROR_NOT_FOUND && rr.held:
			d.gotSamples = true // read again next time, under the clock it settles on
		case rr.ret == nvml.ERROR_NOT_FOUND:
			// No sample newer than lastSeen: the ring ran dry, unless the
			// next sample is simply not due yet, or the ring answered
			// with absurd stamps only.
			d.gotSamples = true
			if d.ringSince.IsZero() {
				d.ringSince = r.clock.Now() // the first read: silent from here
			}
			dry = rr.bad == 0 && r.clock.Now().Sub(d.ringSince) >= maxSamplePeriod
		case rr.ret == nvml.ERROR_NOT_SUPPORTED && !d.gotSamples:
			d.noSamples = true
			if d.gpm == nil {
				d.info.UtilizationSource = collector.UtilizationNone
				r.log.Info("GPU has no utilization samples; its idle time cannot be measured",
					zap.Int("gpu", d.info.GPU), zap.String("uuid", d.info.UUID))
			} else {
				d.info.UtilizationSource, d.useGPM = collector.UtilizationGPM, true
			}
		default:
			// The device's activity is unknown this poll: it is down, and
			// its samples are read from the ring next time. Should the
			// ring be dry then, what it says begins after this call.
			if driverGone(rr.ret) {
				res.gone = rr.ret
			}
			res.down = sourceErr("samples", rr.ret)
			d.ringSince = r.clock.Now()
			return res
		}
	}
	var gpmSample collector.Sample
	gpmOK := false
	if d.gpm != nil {
		if d.metrics == nil {
			d.metrics = new(nvml.GpmMetricsGetType)
		}
		s, gauges, ok, ret := d.gpm.read(r.lib, d.metrics, r.clock)
		switch {
		case ret != nvml.SUCCESS && (d.useGPM || lostGPU(ret) || driverGone(ret)):
			if driverGone(ret) {
				res.gone = ret
			}
			res.down = sourceErr("gpm", ret)
			return res
		case ret != nvml.SUCCESS:
			fail("gpm", ret)
		case ok:
			rd.GPMGauges = gauges
			gpmSample, gpmOK = s, true
			if d.useGPM {
				buf.samples = append(buf.samples[:0], s)
				rd.Samples = buf.samples
			}
		}
	}
	if dry {
		if s, ok := r.dryFill(d, gpmSample, gpmOK, fail); ok {
			buf.samples = append(buf.samples[:0], s)
			rd.Samples = buf.samples
		} else if res.down != nil {
			return res
		}
	}
	if !d.noProcSamples {
		ps, bad, absurd, ret := readProcessSamples(mappedDevice{Device: d.handle, c: &d.stamps, clock: r.clock}, d.lastProcSeen, r.clock, buf.procSamples[:0])
		if bad > 0 {
			res.errs = append(res.errs, collector.NewSourceError(collector.SourceNVML, "bad_timestamp",
				fmt.Errorf("GPU %d %s: %d process samples stamped outside [now-%s, now+%s] dropped", d.info.GPU, d.info.UUID, bad, maxSampleAge, maxSampleLead)))
		}
		if absurd > 0 {
			res.errs = append(res.errs, collector.NewSourceError(collector.SourceNVML, "bad_value",
				fmt.Errorf("GPU %d %s: %d process samples above 100%% dropped", d.info.GPU, d.info.UUID, absurd)))
		}
		switch {
		case ret == nvml.SUCCESS:
			rd.HasProcessSamples, rd.ProcessSamples, d.gotProcSamples = true, ps, true
			buf.procSamples = ps
			for _, p := range ps {
				d.lastProcSeen = max(d.lastProcSeen, uint64(p.Time.UnixMicro()))
			}
		case ret == nvml.ERROR_NOT_FOUND: // no process was active since lastProcSeen
			rd.HasProcessSamples, d.gotProcSamples = true, true
		case ret == nvml.ERROR_NOT_SUPPORTED && !d.gotProcSamples:
			d.noProcSamples = true
		default:
			if fail("process_samples", ret) {
				return res
			}
		}
	}
	rd.Device = d.info

	if mem, ok := r.memory(d, &res, fail); ok {
		rd.HasMemory, rd.MemoryUsedBytes, rd.MemoryTotalBytes = true, mem.Used, mem.Total
	} else if res.down != nil {
		return res
	}
	if !d.mig {
		if mw, ret := d.handle.GetPowerUsage(); ret == nvml.SUCCESS {
			rd.HasPower, rd.PowerWatts = true, float64(mw)/1000
		} else if ret != nvml.ERROR_NOT_SUPPORTED && fail("power", ret) {
			return res
		}
		if mj, ret := d.handle.GetTotalEnergyConsumption(); ret == nvml.SUCCESS {
			rd.HasEnergy, rd.EnergyJoules = true, float64(mj)/1000
		} else if ret != nvml.ERROR_NOT_SUPPORTED && fail("energy", ret) {
			return res
		}
	}
	if !r.caps.processStructBug {
		pr := r.readProcesses(d, buf.processes)
		buf.processes = pr.procs
		if len(pr.denied) > 0 {
			what := strings.Join(pr.denied, ", ")
			r.logDenied(d, what)
			res.errs = append(res.errs, deniedError(d, what))
		}
		for _, list := range pr.bad {
			res.errs = append(res.errs, collector.NewSourceError(collector.SourceNVML, "bad_process_list",
				fmt.Errorf("GPU %d %s: the %s process list does not decode (driver %s)", d.info.GPU, d.info.UUID, list, r.caps.version)))
		}
		for _, ret := range pr.failed {
			if fail("processes", ret) {
				return res
			}
		}
		if pr.ok {
			rd.HasProcesses, rd.Processes = true, pr.procs
			if d.running == nil {
				d.running = map[uint32]time.Time{}
			}
			markRunning(d.running, pr.procs, r.clock.Now())
			var dropped int
			var gone []uint32
			rd.ProcessSamples, gone, dropped = dropStale(rd.ProcessSamples, d.running, d.gone, d.goneBuf)
			d.gone, d.goneBuf = gone, d.gone
			if dropped > 0 {
				res.errs = append(res.errs, collector.NewSourceError(collector.SourceNVML, "stale_pid",
					fmt.Errorf("GPU %d %s: per-process samples of %d PIDs in no process list for %s dropped", d.info.GPU, d.info.UUID, dropped, staleGrace)))
			}
		}
	}
	return res
}

// dryFill makes the sample of a device whose ring ran dry (GetSamples found
// no sample since the last one read), which real rings do while the GPU is
// idle (polarsignals/gpu-metrics-agent#37): it covers the time since the
// ring last spoke, with the busy ratio of GPM's GRAPHICS_UTIL over the last
// poll where the device has GPM, else of GetUtilizationRates, the latest
// sample period's. Without either the time stays uncovered.
func (r *Reader) dryFill(d *device, gpm collector.Sample, gpmOK bool, fail func(string, nvml.Return) bool) (collector.Sample, bool) {
	v := gpm.Value
	if !gpmOK {
		if d.noUtilRates {
			return collector.Sample{}, false
		}
		u, ret := d.handle.GetUtilizationRates()
		switch ret {
		case nvml.SUCCESS:
			v = min(float64(u.Gpu)/100, 1)
		case nvml.ERROR_NOT_SUPPORTED:
			d.noUtilRates = true
			return collector.Sample{}, false
		default:
			fail("utilization", ret)
			return collector.Sample{}, false
		}
	}
	now := r.clock.Now()
	since := d.ringSince
	if since.IsZero() || since.After(now) {
		since = now
	}
	d.ringSince = now
	return collector.Sample{Time: now, Value: v, Since: since, Dry: true}, true
}

// memory reads framebuffer memory, preferring the v2 call whose Used excludes
// the driver's reserved memory, and falling back to v1 on drivers without it.
//
// The v2 symbol is new in R510: on an older driver it is never called (go-nvml
// would end the process on the call). A NO_PERMISSION answer for a GPU in
// MIG mode is said once and the query not repeated: it is the driver's
// policy, not a fault (policyDenied).
func (r *Reader) memory(d *device, res *readResult, fail func(string, nvml.Return) bool) (nvml.Memory, bool) {
	if d.memoryDenied {
		return nvml.Memory{}, false
	}
	denied := func() (nvml.Memory, bool) {
		d.memoryDenied = true
		r.logDenied(d, "memory")
		res.errs = append(res.errs, deniedError(d, "memory"))
		return nvml.Memory{}, false
	}
	if r.caps.memoryV2 && !d.noMemoryV2 {
		m, ret := d.handle.GetMemoryInfo_v2()
		switch ret {
		case nvml.SUCCESS:
			return nvml.Memory{Total: m.Total, Used: m.Used, Free: m.Free}, true
		case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND, nvml.ERROR_ARGUMENT_VERSION_MISMATCH:
			d.noMemoryV2 = true
		case nvml.ERROR_NO_PERMISSION:
			if policyDenied(d) {
				return denied()
			}
			fail("memory", ret)
			return nvml.Memory{}, false
		default:
			fail("memory", ret)
			return nvml.Memory{}, false
		}
	}
	m, ret := d.handle.GetMemoryInfo()
	switch ret {
	case nvml.SUCCESS:
		return m, true
	case nvml.ERROR_NO_PERMISSION:
		if policyDenied(d) {
			return denied()
		}
		fail("memory", ret)
	case nvml.ERROR_NOT_SUPPORTED:
	default:
		fail("memory", ret)
	}
	return nvml.Memory{}, false
}

// ringRead is what one GetSamples call gave.
type ringRead struct {
	samples []collector.Sample
	// bad is how many samples were dropped for an absurd stamp.
	bad int
	// newest is the driver's stamp of the newest sample kept, or of a
	// sample dropped for being too old, for the next call's
	// lastSeenTimeStamp: an old stamp is not read and counted again.
	newest uint64
	// held is set when the read is held back while the device's sample
	// clock changes (stampClock.observe): its samples are read again.
	held bool
	// clockChanged is set when this read decided or moved the clock.
	clockChanged bool
	ret          nvml.Return
}

// readSamples appends to out the utilization samples newer than lastSeen
// (a driver stamp), oldest first, as busy ratios at the Unix time c maps
// their stamps to. A sample stamped out of bounds (see maxSampleLead) once
// mapped, relative to clock's time when the call answered, is dropped and
// counted. The driver's ring is not guaranteed to be in time order, and
// empty slots carry a zero timestamp. ret is ERROR_NOT_FOUND when no
// sample is new.
func readSamples(h nvml.Device, lastSeen uint64, c *stampClock, clock Clock, out []collector.Sample) ringRead {
	vt, raw, ret := h.GetSamples(nvml.GPU_UTILIZATION_SAMPLES, lastSeen)
	if ret != nvml.SUCCESS {
		return ringRead{ret: ret}
	}
	now := clock.Now()
	slices.SortFunc(raw, func(a, b nvml.Sample) int { return cmp.Compare(a.TimeStamp, b.TimeStamp) })
	var rr ringRead
	lo, hi, n := plausible(len(raw), func(i int) uint64 { return raw[i].TimeStamp })
	if n > 0 {
		oldest, period, prev := lo, uint64(0), uint64(0)
		for _, s := range raw {
			if s.TimeStamp < lo || s.TimeStamp > hi {
				continue
			}
			if prev != 0 && s.TimeStamp > prev && (period == 0 || s.TimeStamp-prev < period) {
				period = s.TimeStamp - prev
			}
			if prev <= lastSeen && s.TimeStamp > lastSeen {
				oldest = s.TimeStamp
			}
			prev = s.TimeStamp
		}
		use, changed := c.observe(oldest, hi, n, period, now)
		rr.clockChanged = changed
		if !use {
			rr.held, rr.ret = true, nvml.ERROR_NOT_FOUND
			return rr
		}
	}
	bLo, bHi := stampBounds(now)
	var prev uint64
	for _, s := range raw {
		if s.TimeStamp == 0 {
			continue // an empty slot of the ring
		}
		at := c.unix(s.TimeStamp)
		if u := uint64(max(at.UnixMicro(), 0)); s.TimeStamp < lo || s.TimeStamp > hi || u < bLo || u > bHi {
			rr.bad++
			if u < bLo && s.TimeStamp > lastSeen && s.TimeStamp <= hi {
				rr.newest = max(rr.newest, s.TimeStamp)
			}
			continue
		}
		if s.TimeStamp <= lastSeen || s.TimeStamp == prev {
			continue
		}
		prev = s.TimeStamp
		v, ok := sampleValue(vt, s.SampleValue)
		if !ok {
			continue
		}
		out = append(out, collector.Sample{Time: at, Value: min(max(v/100, 0), 1)})
		rr.newest = s.TimeStamp
	}
	rr.samples, rr.ret = out, nvml.SUCCESS
	if len(out) == 0 {
		rr.samples, rr.ret = nil, nvml.ERROR_NOT_FOUND
	}
	return rr
}

// stampBounds are the oldest and newest sample timestamps, in NVML's
// microseconds, that a read at now accepts.
func stampBounds(now time.Time) (lo, hi uint64) {
	return uint64(max(now.Add(-maxSampleAge).UnixMicro(), 1)), uint64(max(now.Add(maxSampleLead).UnixMicro(), 1))
}

// Shutdown releases NVML. It must be the last NVML call of the process. It
// waits at most Config.CallTimeout for reads still in flight; while one
// is, NVML is left initialised (the process is ending): go-nvml unloads the
// library on Shutdown, and the call, when it returns, would run on into
// code no longer mapped.
func (r *Reader) Shutdown() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.initialized {
		return
	}
	r.freeDevices()
	if !r.quiet() {
		r.log.Warn("NVML calls are still in flight; NVML is left initialised", zap.Int("gpm_buffers_kept", len(r.retired)))
		return
	}
	r.shutdownLocked()
}

// shutdownLocked drops the devices and shuts NVML down; no call may be in
// flight.
func (r *Reader) shutdownLocked() {
	r.freeDevices()
	r.reapRetired()
	r.lib.Shutdown()
	r.initialized = false
}

// retError turns an NVML return code into an error that errors.Is matches
// against the nvml.Return constants.
func retError(ret nvml.Return) error { return nvmlError(ret) }

type nvmlError nvml.Return

// Error is go-nvml's text for the code: nvmlErrorString while the library
// is loaded, go-nvml's own table when it is not (it could not be loaded,
// or after Shutdown), so it is safe to call either way.
func (e nvmlError) Error() string { return nvml.Return(e).Error() }

// Is lets callers test errors.Is(err, nvml.ERROR_GPU_IS_LOST).
func (e nvmlError) Is(target error) bool {
	t, ok := target.(nvml.Return)
	return ok && t == nvml.Return(e)
}
