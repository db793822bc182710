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

	// running counts the device reads whose goroutine has not ended.
	running atomic.Int64

	mu          sync.Mutex // guards the fields below against Shutdown during Read
	initialized bool
	initErr     error
	nextInit    time.Time
	initBackoff time.Duration
	devices     []*device
	migScan     migRescan
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
	// lastSeen is the newest sample timestamp read, in NVML's microseconds.
	lastSeen uint64
	// lastProcSeen is the newest per-process sample timestamp read.
	lastProcSeen uint64
	// noSamples is set once the driver says samples are not supported, so the
	// call is not repeated every poll; likewise noProcSamples and noMemoryV2.
	// A device that has answered the call once is only down while it says
	// so (gotSamples, gotProcSamples): a driver being upgraded does that.
	gotSamples, gotProcSamples bool
	noSamples                  bool
	noProcSamples              bool
	noMemoryV2                 bool
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
}

// New returns a reader over lib, which is nvml.New() on a node or a simulated
// node's interface. cfg must be valid. Call Init before Read.
func New(lib nvml.Interface, cfg Config, logger *zap.Logger, clock Clock) *Reader {
	if clock == nil {
		clock = realClock{}
	}
	return &Reader{lib: lib, cfg: cfg, log: logger, clock: clock, initBackoff: initRetryMin}
}

// Init initialises NVML and enumerates the devices. On failure (no
// libnvidia-ml.so.1, driver not loaded) it logs one line, returns a
// *collector.SourceError, and Read retries Init with a growing backoff, so an
// agent started before the driver was installed picks it up later.
func (r *Reader) Init() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.initLocked(true)
}

func (r *Reader) initLocked(first bool) error {
	if ret := r.lib.Init(); ret != nvml.SUCCESS {
		err := collector.NewSourceError(collector.SourceNVML, "init", fmt.Errorf("nvml.Init: %w", retError(ret)))
		r.initErr = err
		r.nextInit = r.clock.Now().Add(r.initBackoff)
		r.initBackoff = min(2*r.initBackoff, initRetryMax)
		if first {
			r.log.Warn("NVML is not available; GPU metrics are off until it is (retrying)", zap.Error(err))
		} else {
			r.log.Debug("NVML init retry failed", zap.Error(err))
		}
		return err
	}
	r.initialized, r.initErr = true, nil
	if err := r.enumerate(); err != nil {
		r.lib.Shutdown()
		r.initialized = false
		r.initErr = err
		r.nextInit = r.clock.Now().Add(r.initBackoff)
		return err
	}
	r.log.Info("NVML initialised", zap.String("driver", r.driver), zap.Int("devices", len(r.devices)))
	return nil
}

func (r *Reader) enumerate() error {
	if v, ret := r.lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		r.driver = v
	}
	n, ret := r.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return collector.NewSourceError(collector.SourceNVML, "device_count", retError(ret))
	}
	r.freeDevices()
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

func (r *Reader) freeDevices() {
	r.dropMIGWalks()
	r.waitInflight(r.cfg.CallTimeout)
	for _, d := range r.devices {
		if d.gpm != nil {
			d.gpm.free(r.lib)
		}
	}
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
	if !r.initialized {
		if r.clock.Now().Before(r.nextInit) || r.initLocked(false) != nil {
			return collector.DeviceSnapshot{At: r.clock.Now()},
				collector.NewSourceError(collector.SourceNVML, "init", fmt.Errorf("%w: %w", ErrNotInitialized, r.initErr))
		}
	}
	r.rescanMIG(ctx)
	for _, d := range r.devices {
		if d.inflight == nil {
			r.start(d)
		}
	}
	if r.wait == nil {
		r.wait = time.NewTimer(r.cfg.CallTimeout)
	} else {
		r.wait.Reset(r.cfg.CallTimeout)
	}
	wait := r.wait
	defer wait.Stop()
	expired := false
	r.flip ^= 1
	snap := collector.DeviceSnapshot{Devices: r.snaps[r.flip][:0]}
	defer func() { r.snaps[r.flip] = snap.Devices }()
	for _, d := range r.devices {
		done := false
		// A device already known to hang is not waited for again: its
		// call ends when it ends, and the next Read takes the result.
		if !expired && !d.hung {
			select {
			case <-d.inflight:
				done = true
			case <-wait.C:
				expired = true
			case <-ctx.Done():
				expired = true
			}
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
					zap.Int("gpu", d.info.GPU), zap.String("uuid", d.info.UUID), zap.Duration("waited", r.cfg.CallTimeout))
			}
			snap.Errors = append(snap.Errors, collector.NewSourceError(collector.SourceNVML, "hung",
				fmt.Errorf("GPU %d %s: an NVML call has been in flight for more than %s", d.info.GPU, d.info.UUID, r.cfg.CallTimeout)))
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
			r.log.Info("lost GPU is back", zap.Int("gpu", d.info.GPU), zap.String("uuid", d.info.UUID))
		}
		d.lost = lost
		if res.down != nil {
			snap.Errors = append(snap.Errors, res.down)
			continue
		}
		snap.Devices = append(snap.Devices, res.rd)
	}
	snap.At = r.clock.Now()
	return snap, nil
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
		r.running.Add(-1)
		d.done <- struct{}{}
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
		if lostGPU(ret) {
			res.down = sourceErr(reason, ret)
			return true
		}
		res.errs = append(res.errs, sourceErr(reason, ret))
		return false
	}
	rd := &res.rd
	buf := &d.bufs[d.flip]
	d.flip ^= 1

	// Each call's samples are judged against the time the call answers,
	// not the time the read began: a call that hung for minutes answers
	// with samples stamped up to its answer.
	//
	// Process samples are asked for from the device's newest sample before
	// this read, not from the newest process sample: the process call
	// answers after the device call, so its newest samples cover periods
	// whose device samples the next poll reads, and are needed again then
	// (the engine skips those it has credited). Asked from the newest
	// process sample, those periods would find no process of any holder
	// and read idle: a holder's share of every period between the two
	// calls, more the later the second call comes.
	procSince := d.lastProcSeen
	if !d.noSamples && d.gotSamples {
		procSince = d.lastSeen
	}
	if !d.noSamples {
		samples, bad, ret := readSamples(d.handle, d.lastSeen, r.clock, buf.samples[:0])
		if bad > 0 {
			res.errs = append(res.errs, collector.NewSourceError(collector.SourceNVML, "bad_timestamp",
				fmt.Errorf("GPU %d %s: %d samples stamped outside [now-%s, now+%s] dropped", d.info.GPU, d.info.UUID, bad, maxSampleAge, maxSampleLead)))
		}
		switch {
		case ret == nvml.SUCCESS:
			d.lastSeen = uint64(samples[len(samples)-1].Time.UnixMicro())
			rd.Samples, d.gotSamples = samples, true
			buf.samples = samples
		case ret == nvml.ERROR_NOT_FOUND: // no sample newer than lastSeen
			d.gotSamples = true
		case ret == nvml.ERROR_NOT_SUPPORTED && !d.gotSamples:
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
			// its samples are read from the ring next time.
			res.down = sourceErr("samples", ret)
			return res
		}
	}
	if d.gpm != nil {
		if d.metrics == nil {
			d.metrics = new(nvml.GpmMetricsGetType)
		}
		s, gauges, ok, ret := d.gpm.read(r.lib, d.metrics, r.clock)
		switch {
		case ret != nvml.SUCCESS && (d.useGPM || lostGPU(ret)):
			res.down = sourceErr("gpm", ret)
			return res
		case ret != nvml.SUCCESS:
			fail("gpm", ret)
		case ok:
			rd.GPMGauges = gauges
			if d.useGPM {
				buf.samples = append(buf.samples[:0], s)
				rd.Samples = buf.samples
			}
		}
	}
	if !d.noProcSamples {
		ps, bad, ret := readProcessSamples(d.handle, procSince, r.clock, buf.procSamples[:0])
		if bad > 0 {
			res.errs = append(res.errs, collector.NewSourceError(collector.SourceNVML, "bad_timestamp",
				fmt.Errorf("GPU %d %s: %d process samples stamped outside [now-%s, now+%s] dropped", d.info.GPU, d.info.UUID, bad, maxSampleAge, maxSampleLead)))
		}
		switch {
		case ret == nvml.SUCCESS:
			rd.HasProcessSamples, rd.ProcessSamples, d.gotProcSamples = true, ps, true
			buf.procSamples = ps
			for _, p := range ps {
				d.lastProcSeen = max(d.lastProcSeen, uint64(p.Time.UnixMicro()))
			}
		case ret == nvml.ERROR_NOT_FOUND: // no process was active since procSince
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

	if mem, ok := r.memory(d, fail); ok {
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
	if procs, ret := d.handle.GetComputeRunningProcesses(); ret == nvml.SUCCESS {
		rd.HasProcesses = true
		rd.Processes = buf.processes[:0]
		for _, p := range procs {
			rd.Processes = append(rd.Processes, collector.Process{PID: p.Pid, UsedMemoryBytes: p.UsedGpuMemory})
		}
		buf.processes = rd.Processes
	} else if ret != nvml.ERROR_NOT_SUPPORTED && fail("processes", ret) {
		return res
	}
	return res
}

// memory reads framebuffer memory, preferring the v2 call whose Used excludes
// the driver's reserved memory, and falling back to v1 on drivers without it.
func (r *Reader) memory(d *device, fail func(string, nvml.Return) bool) (nvml.Memory, bool) {
	if !d.noMemoryV2 {
		m, ret := d.handle.GetMemoryInfo_v2()
		switch ret {
		case nvml.SUCCESS:
			return nvml.Memory{Total: m.Total, Used: m.Used, Free: m.Free}, true
		case nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_FUNCTION_NOT_FOUND, nvml.ERROR_ARGUMENT_VERSION_MISMATCH:
			d.noMemoryV2 = true
		default:
			fail("memory", ret)
			return nvml.Memory{}, false
		}
	}
	m, ret := d.handle.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		if ret != nvml.ERROR_NOT_SUPPORTED {
			fail("memory", ret)
		}
		return nvml.Memory{}, false
	}
	return m, true
}

// readSamples appends to out the utilization samples newer than lastSeen,
// oldest first, as busy ratios, and returns how many it dropped for an
// absurd timestamp (see maxSampleLead) relative to clock's time when the
// call answered. The driver's ring is not guaranteed to be in time order,
// and empty slots carry a zero timestamp.
func readSamples(h nvml.Device, lastSeen uint64, clock Clock, out []collector.Sample) ([]collector.Sample, int, nvml.Return) {
	vt, raw, ret := h.GetSamples(nvml.GPU_UTILIZATION_SAMPLES, lastSeen)
	if ret != nvml.SUCCESS {
		return nil, 0, ret
	}
	lo, hi := stampBounds(clock.Now())
	slices.SortFunc(raw, func(a, b nvml.Sample) int { return cmp.Compare(a.TimeStamp, b.TimeStamp) })
	var prev uint64
	bad := 0
	for _, s := range raw {
		if s.TimeStamp == 0 {
			continue // an empty slot of the ring
		}
		if s.TimeStamp < lo || s.TimeStamp > hi {
			bad++
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
		out = append(out, collector.Sample{Time: time.UnixMicro(int64(s.TimeStamp)), Value: min(max(v/100, 0), 1)})
	}
	if len(out) == 0 {
		return nil, bad, nvml.ERROR_NOT_FOUND
	}
	return out, bad, nvml.SUCCESS
}

// stampBounds are the oldest and newest sample timestamps, in NVML's
// microseconds, that a read at now accepts.
func stampBounds(now time.Time) (lo, hi uint64) {
	return uint64(max(now.Add(-maxSampleAge).UnixMicro(), 1)), uint64(max(now.Add(maxSampleLead).UnixMicro(), 1))
}

// Shutdown releases NVML. It must be the last NVML call of the process. It
// waits at most Config.CallTimeout for reads still in flight.
func (r *Reader) Shutdown() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.initialized {
		r.freeDevices()
		r.lib.Shutdown()
		r.initialized = false
	}
}

// retError turns an NVML return code into an error without calling into the
// library (nvml.ErrorString would need a loaded library).
func retError(ret nvml.Return) error { return nvmlError(ret) }

type nvmlError nvml.Return

func (e nvmlError) Error() string { return nvml.Return(e).Error() }

// Is lets callers test errors.Is(err, nvml.ERROR_GPU_IS_LOST).
func (e nvmlError) Is(target error) bool {
	t, ok := target.(nvml.Return)
	return ok && t == nvml.Return(e)
}
