// Package nvml reads GPU activity through go-nvml: utilization samples since the
// last one seen, memory, power, energy and compute processes, for every device.
// The same code reads a real driver and the simulated node of package sim,
// which is an nvml.Interface too.
package nvml

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
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

// Reader reads every NVML device of the node. It is not safe for concurrent
// Read calls; the engine polls from one goroutine.
type Reader struct {
	lib    nvml.Interface
	cfg    Config
	log    *zap.Logger
	clock  Clock
	driver string
	// metrics is GPM's request/answer buffer (about 23 KB), reused.
	metrics nvml.GpmMetricsGetType

	mu          sync.Mutex // guards the fields below against Shutdown during Read
	initialized bool
	initErr     error
	nextInit    time.Time
	initBackoff time.Duration
	devices     []*device
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
	noSamples     bool
	noProcSamples bool
	noMemoryV2    bool
	// gpm samples SM activity where GPM works; useGPM says its samples are
	// the device's utilization samples.
	gpm    *gpmSampler
	useGPM bool
	// mig is set on a MIG instance: no power or energy of its own.
	mig bool
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
// snapshot's Errors; the rest of the reading stays valid.
func (r *Reader) Read(ctx context.Context) (collector.DeviceSnapshot, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.initialized {
		if r.clock.Now().Before(r.nextInit) || r.initLocked(false) != nil {
			return collector.DeviceSnapshot{At: r.clock.Now()},
				collector.NewSourceError(collector.SourceNVML, "init", fmt.Errorf("%w: %w", ErrNotInitialized, r.initErr))
		}
	}
	snap := collector.DeviceSnapshot{Devices: make([]collector.DeviceReading, 0, len(r.devices))}
	for _, d := range r.devices {
		if err := ctx.Err(); err != nil {
			snap.Errors = append(snap.Errors, collector.NewSourceError(collector.SourceNVML, "deadline", err))
			break
		}
		snap.Devices = append(snap.Devices, r.readDevice(d, &snap.Errors))
	}
	snap.At = r.clock.Now()
	return snap, nil
}

func (r *Reader) readDevice(d *device, errs *[]error) collector.DeviceReading {
	fail := func(reason string, ret nvml.Return) {
		*errs = append(*errs, collector.NewSourceError(collector.SourceNVML, reason,
			fmt.Errorf("%s (GPU %d %s): %w", reason, d.info.GPU, d.info.UUID, retError(ret))))
	}
	rd := collector.DeviceReading{}

	if !d.noSamples {
		samples, ret := readSamples(d.handle, d.lastSeen)
		switch ret {
		case nvml.SUCCESS:
			d.lastSeen = uint64(samples[len(samples)-1].Time.UnixMicro())
			rd.Samples = samples
		case nvml.ERROR_NOT_FOUND: // no sample newer than lastSeen
		case nvml.ERROR_NOT_SUPPORTED:
			d.noSamples = true
			if d.gpm == nil {
				d.info.UtilizationSource = collector.UtilizationNone
				r.log.Info("GPU has no utilization samples; its idle time cannot be measured",
					zap.Int("gpu", d.info.GPU), zap.String("uuid", d.info.UUID))
			} else {
				d.info.UtilizationSource, d.useGPM = collector.UtilizationGPM, true
			}
		default:
			fail("samples", ret)
		}
	}
	if d.gpm != nil {
		s, gauges, ok, ret := d.gpm.read(r.lib, &r.metrics, r.clock.Now())
		switch {
		case ret != nvml.SUCCESS:
			fail("gpm", ret)
		case ok:
			rd.GPMGauges = gauges
			if d.useGPM {
				rd.Samples = []collector.Sample{s}
			}
		}
	}
	if !d.noProcSamples {
		ps, ret := readProcessSamples(d.handle, d.lastProcSeen)
		switch ret {
		case nvml.SUCCESS:
			rd.HasProcessSamples, rd.ProcessSamples = true, ps
			for _, p := range ps {
				d.lastProcSeen = max(d.lastProcSeen, uint64(p.Time.UnixMicro()))
			}
		case nvml.ERROR_NOT_FOUND: // no process was active since lastProcSeen
			rd.HasProcessSamples = true
		case nvml.ERROR_NOT_SUPPORTED:
			d.noProcSamples = true
		default:
			fail("process_samples", ret)
		}
	}
	rd.Device = d.info

	if mem, ok := r.memory(d, fail); ok {
		rd.HasMemory, rd.MemoryUsedBytes, rd.MemoryTotalBytes = true, mem.Used, mem.Total
	}
	if !d.mig {
		if mw, ret := d.handle.GetPowerUsage(); ret == nvml.SUCCESS {
			rd.HasPower, rd.PowerWatts = true, float64(mw)/1000
		} else if ret != nvml.ERROR_NOT_SUPPORTED {
			fail("power", ret)
		}
		if mj, ret := d.handle.GetTotalEnergyConsumption(); ret == nvml.SUCCESS {
			rd.HasEnergy, rd.EnergyJoules = true, float64(mj)/1000
		} else if ret != nvml.ERROR_NOT_SUPPORTED {
			fail("energy", ret)
		}
	}
	if procs, ret := d.handle.GetComputeRunningProcesses(); ret == nvml.SUCCESS {
		rd.HasProcesses = true
		rd.Processes = make([]collector.Process, 0, len(procs))
		for _, p := range procs {
			rd.Processes = append(rd.Processes, collector.Process{PID: p.Pid, UsedMemoryBytes: p.UsedGpuMemory})
		}
	} else if ret != nvml.ERROR_NOT_SUPPORTED {
		fail("processes", ret)
	}
	return rd
}

// memory reads framebuffer memory, preferring the v2 call whose Used excludes
// the driver's reserved memory, and falling back to v1 on drivers without it.
func (r *Reader) memory(d *device, fail func(string, nvml.Return)) (nvml.Memory, bool) {
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

// readSamples returns the utilization samples newer than lastSeen, oldest
// first, as busy ratios. The driver's ring is not guaranteed to be in time
// order, and empty slots carry a zero timestamp.
func readSamples(h nvml.Device, lastSeen uint64) ([]collector.Sample, nvml.Return) {
	vt, raw, ret := h.GetSamples(nvml.GPU_UTILIZATION_SAMPLES, lastSeen)
	if ret != nvml.SUCCESS {
		return nil, ret
	}
	sort.Slice(raw, func(i, j int) bool { return raw[i].TimeStamp < raw[j].TimeStamp })
	out := make([]collector.Sample, 0, len(raw))
	var prev uint64
	for _, s := range raw {
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
		return nil, nvml.ERROR_NOT_FOUND
	}
	return out, nvml.SUCCESS
}

// Shutdown releases NVML. It must be the last NVML call of the process.
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
