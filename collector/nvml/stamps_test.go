package nvml

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/collector"
	"github.com/gpuxray/gpuxray/collector/sim"
)

// simReader reads the scenario src on a virtual clock from at.
func simReader(t *testing.T, src string, at time.Duration, cfg Config) (*Reader, *sim.VirtualClock, *sim.Scenario) {
	t.Helper()
	sc, err := sim.ParseScenario([]byte(src), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	clock := sim.NewVirtualClock(sc.Start.Add(at))
	node, err := sim.NewNode(sc, clock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Close)
	r := New(node.NVML(), cfg, zap.NewNop(), clock)
	if err := r.Init(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Shutdown)
	return r, clock, sc
}

func read(t *testing.T, r *Reader) collector.DeviceSnapshot {
	t.Helper()
	snap, err := r.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// TestBootTimeStamps reads a driver that stamps samples in microseconds
// since boot: from the first read on, every sample and process sample is
// kept, at its Unix time, and none is counted as a bad timestamp.
func TestBootTimeStamps(t *testing.T) {
	t.Parallel()
	r, clock, sc := simReader(t, `start: 2026-12-01T08:00:00Z
duration: 1h
system: dgxa100
gpus: 1
driver: {sample_clock: boot}
pods:
  - {namespace: a, name: p, devices: ["gpu:0::0"], util: [{at: 0s, value: 0.5}]}
`, time.Minute, DefaultConfig())
	for i := range 5 {
		snap := read(t, r)
		if len(snap.Errors) != 0 || len(snap.Devices) != 1 {
			t.Fatalf("read %d: errors %v, %d devices", i, snap.Errors, len(snap.Devices))
		}
		d := snap.Devices[0]
		want := 6
		if i == 0 {
			want = sim.SampleBuffer
		}
		if len(d.Samples) != want {
			t.Fatalf("read %d: %d samples, want %d", i, len(d.Samples), want)
		}
		// Sample k is stamped at the end of its period from the start.
		// The first read only bounds the clock from above: its newest
		// sample is taken as stamped when the read answered, at most a
		// period late; the second bounds it from below too, within the
		// little the driver's grid (166667 µs) drifts from whole seconds.
		lo, hi := -200*time.Microsecond, 200*time.Microsecond
		if i == 0 {
			lo, hi = 0, sim.SamplePeriod
		}
		for _, s := range d.Samples {
			k := (s.Time.Sub(sc.Start) - lo) / sim.SamplePeriod
			if off := s.Time.Sub(sc.Start.Add(time.Duration(k) * sim.SamplePeriod)); off < lo || off > hi {
				t.Errorf("read %d: sample at %s is %s off the Unix sample grid", i, s.Time, off)
			}
			if s.Time.After(clock.Now()) || clock.Now().Sub(s.Time) > 21*time.Second {
				t.Errorf("read %d: sample at %s, read at %s", i, s.Time, clock.Now())
			}
		}
		if i > 0 && (!d.HasProcessSamples || len(d.ProcessSamples) > 1) {
			t.Errorf("read %d: process samples %+v", i, d.ProcessSamples)
		}
		for _, p := range d.ProcessSamples {
			if p.Time.After(clock.Now()) || clock.Now().Sub(p.Time) > sim.DefaultProcessRefresh+sim.SamplePeriod {
				t.Errorf("read %d: process sample at %s, read at %s", i, p.Time, clock.Now())
			}
		}
		clock.Advance(time.Second)
	}
}

// clockLib is one GPU whose ring is stamped in a clock of its own (Unix
// time less offset): at first it holds one sample hours old, then fills
// every sample period from fresh.
type clockLib struct {
	clock  *stepClock
	offset time.Duration
	fresh  time.Time
	seen   []uint64
}

func (c *clockLib) lib() *mock.Interface {
	period := sim.SamplePeriod
	stamp := func(t time.Time) uint64 { return uint64(t.Add(-c.offset).UnixMicro()) }
	dev := &mock.Device{
		GetUUIDFunc:        func() (string, gonvml.Return) { return "GPU-clock", gonvml.SUCCESS },
		GetNameFunc:        func() (string, gonvml.Return) { return "clock", gonvml.SUCCESS },
		GetIndexFunc:       func() (int, gonvml.Return) { return 0, gonvml.SUCCESS },
		GetMinorNumberFunc: func() (int, gonvml.Return) { return 0, gonvml.SUCCESS },
		GetMigModeFunc:     func() (int, int, gonvml.Return) { return 0, 0, gonvml.ERROR_NOT_SUPPORTED },
		GetSamplesFunc: func(_ gonvml.SamplingType, lastSeen uint64) (gonvml.ValueType, []gonvml.Sample, gonvml.Return) {
			c.seen = append(c.seen, lastSeen)
			out := []gonvml.Sample{rawSample(stamp(c.fresh.Add(-3*time.Hour)), 40)}
			for at := c.fresh; !at.After(c.clock.t); at = at.Add(period) {
				out = append(out, rawSample(stamp(at), 70))
			}
			keep := out[:0]
			for _, s := range out {
				if s.TimeStamp > lastSeen {
					keep = append(keep, s)
				}
			}
			if len(keep) == 0 {
				return gonvml.VALUE_TYPE_UNSIGNED_INT, nil, gonvml.ERROR_NOT_FOUND
			}
			return gonvml.VALUE_TYPE_UNSIGNED_INT, keep, gonvml.SUCCESS
		},
		GetUtilizationRatesFunc: func() (gonvml.Utilization, gonvml.Return) { return gonvml.Utilization{}, gonvml.SUCCESS },
		GetProcessUtilizationFunc: func(uint64) ([]gonvml.ProcessUtilizationSample, gonvml.Return) {
			return nil, gonvml.ERROR_NOT_SUPPORTED
		},
		GetMemoryInfo_v2Func:          func() (gonvml.Memory_v2, gonvml.Return) { return gonvml.Memory_v2{}, gonvml.ERROR_NOT_SUPPORTED },
		GetMemoryInfoFunc:             func() (gonvml.Memory, gonvml.Return) { return gonvml.Memory{}, gonvml.ERROR_NOT_SUPPORTED },
		GetPowerUsageFunc:             func() (uint32, gonvml.Return) { return 0, gonvml.ERROR_NOT_SUPPORTED },
		GetTotalEnergyConsumptionFunc: func() (uint64, gonvml.Return) { return 0, gonvml.ERROR_NOT_SUPPORTED },
		GetComputeRunningProcessesFunc: func() ([]gonvml.ProcessInfo, gonvml.Return) {
			return nil, gonvml.ERROR_NOT_SUPPORTED
		},
	}
	return &mock.Interface{
		InitFunc:                   func() gonvml.Return { return gonvml.SUCCESS },
		ShutdownFunc:               func() gonvml.Return { return gonvml.SUCCESS },
		SystemGetDriverVersionFunc: func() (string, gonvml.Return) { return "580.95.05", gonvml.SUCCESS },
		DeviceGetCountFunc:         func() (int, gonvml.Return) { return 1, gonvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(int) (gonvml.Device, gonvml.Return) { return dev, gonvml.SUCCESS },
		ExtensionsFunc: func() gonvml.ExtendedInterface {
			return &mock.ExtendedInterface{LookupSymbolFunc: func(string) error { return errors.New("no such symbol") }}
		},
	}
}

// TestSampleClockSettles starts on a ring stamped in an unknown clock that
// holds only an hours-old sample, as an idle GPU's may: the first read
// anchors the clock on it, hours off (or, for a clock within a day of Unix
// time, drops it as stale, once). When fresh samples come, the read that
// finds them is held back, the next agrees, and every fresh sample is
// kept: those of the read that moved the clock at most a period late (the
// newest taken as stamped at the read), the later ones at their time.
func TestSampleClockSettles(t *testing.T) {
	t.Parallel()
	for _, offset := range []time.Duration{(1_800_000_000 - 3*3600) * time.Second, 40 * 24 * time.Hour, 2 * time.Hour} {
		t.Run(offset.String(), func(t *testing.T) {
			t.Parallel()
			clock := &stepClock{t: time.Unix(1_800_000_000, 0)}
			// Fresh samples begin mid-second, so that the first read to
			// find them finds several: one lone stamp out of bounds is
			// taken for an absurd one, not for a new clock.
			c := &clockLib{clock: clock, offset: offset, fresh: clock.t.Add(10500 * time.Millisecond)}
			r := New(c.lib(), DefaultConfig(), zap.NewNop(), clock)
			if err := r.Init(); err != nil {
				t.Fatal(err)
			}
			defer r.Shutdown()
			var kept []collector.Sample
			var settled time.Time // when the first fresh sample was kept
			for range 30 {
				snap := read(t, r)
				for _, s := range snap.Devices[0].Samples {
					if !s.Dry {
						kept = append(kept, s)
					}
					if s.Value == 0.7 && settled.IsZero() {
						settled = clock.t
					}
				}
				clock.t = clock.t.Add(time.Second)
			}
			// Every fresh sample, each at its true time.
			var fresh []collector.Sample
			for _, s := range kept {
				if s.Value == 0.7 {
					fresh = append(fresh, s)
				}
			}
			want := int(clock.t.Add(-time.Second).Sub(c.fresh)/sim.SamplePeriod) + 1
			if len(fresh) != want {
				t.Fatalf("%d fresh samples kept, want %d", len(fresh), want)
			}
			for i, s := range fresh {
				at := c.fresh.Add(time.Duration(i) * sim.SamplePeriod)
				// The lower bound is as tight as the stamps' grid drifts
				// from whole seconds, the reads': a few µs.
				lo, hi := -20*time.Microsecond, 20*time.Microsecond
				if !at.After(settled) {
					hi = sim.SamplePeriod
				}
				if off := s.Time.Sub(at); off < lo || off > hi {
					t.Errorf("fresh sample %d at %s, want %s (+%s at most)", i, s.Time, at, hi)
				}
			}
		})
	}
}

// TestDryRing reads a ring that runs dry while the GPU idles: each read
// that finds no sample gives one that covers the time since the ring last
// spoke, at the busy ratio of GetUtilizationRates, or of GPM's
// GRAPHICS_UTIL where the GPU has GPM; a read that fails leaves its time
// uncovered.
func TestDryRing(t *testing.T) {
	t.Parallel()
	for _, system := range []string{"dgxa100", "dgxh100"} {
		t.Run(system, func(t *testing.T) {
			t.Parallel()
			r, clock, sc := simReader(t, `start: 2026-12-01T08:00:00Z
duration: 1h
system: `+system+`
gpus: 1
driver: {idle_samples: false}
pods:
  - {namespace: a, name: p, devices: ["gpu:0"], util: [{at: 0s, value: 0.5}, {at: 1m, value: 0}, {at: 2m, value: 0.4}]}
faults:
  - {kind: nvml_error, gpu: "gpu:0", call: samples, error: UNKNOWN, from: 90s, to: 93s}
`, 55*time.Second, DefaultConfig())
			var prevEnd time.Time
			for s := 55; s <= 125; s++ {
				clock.Set(sc.Start.Add(time.Duration(s) * time.Second))
				snap := read(t, r)
				failing := s >= 90 && s < 93
				if failing {
					if len(snap.Devices) != 0 {
						t.Errorf("at %ds: the failed read gave a reading", s)
					}
					continue
				}
				d := snap.Devices[0]
				switch {
				case s <= 60 || s > 120:
					for _, x := range d.Samples {
						if x.Dry {
							t.Errorf("at %ds: a dry sample %+v while the GPU is busy", s, x)
						}
					}
				case s > 61:
					if len(d.Samples) != 1 || !d.Samples[0].Dry || d.Samples[0].Value != 0 {
						t.Fatalf("at %ds: samples %+v, want one dry idle sample", s, d.Samples)
					}
					x := d.Samples[0]
					from := prevEnd
					if s == 93 {
						from = sc.Start.Add(92 * time.Second) // the last failed read: the time before it stays uncovered
					}
					if !x.Time.Equal(clock.Now()) || !x.Since.Equal(from) {
						t.Errorf("at %ds: dry sample covers %s to %s, want %s to %s", s, x.Since, x.Time, from, clock.Now())
					}
				}
				if n := len(d.Samples); n > 0 {
					prevEnd = d.Samples[n-1].Time
				}
			}
		})
	}
}

// TestGPMBusyIsTime: GPM's sample, which a MIG instance (and a GPU with
// --idle.source=gpm) is judged on, is GRAPHICS_UTIL, the time the GPU was
// busy; SM_UTIL, the share of SMs busy, stays the SM activity gauge. A
// decode server whose kernels always run on 3% of the SMs is busy.
func TestGPMBusyIsTime(t *testing.T) {
	t.Parallel()
	cfg := DefaultConfig()
	cfg.IdleSource = collector.UtilizationGPM
	r, clock, _ := simReader(t, `start: 2026-12-01T08:00:00Z
duration: 1h
system: dgxh100
gpus: 2
mig: {"gpu:1": [3g.40gb]}
pods:
  - {namespace: a, name: decode, devices: ["gpu:0"], sm_fraction: 0.03, util: [{at: 0s, value: 1}]}
  - {namespace: a, name: mig, devices: ["mig:1/0"], sm_fraction: 0.03, util: [{at: 0s, value: 1}]}
`, time.Minute, cfg)
	read(t, r)
	clock.Advance(time.Second)
	snap := read(t, r)
	n := 0
	for _, d := range snap.Devices {
		if d.Device.MIGEnabled {
			continue
		}
		n++
		if d.Device.UtilizationSource != collector.UtilizationGPM || len(d.Samples) != 1 {
			t.Fatalf("%s: source %s, %d samples", d.Device.UUID, d.Device.UtilizationSource, len(d.Samples))
		}
		s := d.Samples[0]
		if math.Abs(s.Value-1) > 1e-9 || math.Abs(d.SMActive-0.03) > 1e-9 || !s.Since.Equal(clock.Now().Add(-time.Second)) {
			t.Errorf("%s: busy %g since %s, SM active %g; want 1 since a second ago, and 0.03", d.Device.UUID, s.Value, s.Since, d.SMActive)
		}
	}
	if n != 2 {
		t.Errorf("%d devices with GPM, want the GPU and its MIG instance's", n)
	}
}
