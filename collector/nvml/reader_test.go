package nvml

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/collector"
	"github.com/gpuxray/gpuxray/collector/sim"
)

type stepClock struct{ t time.Time }

func (c *stepClock) Now() time.Time { return c.t }

// TestInitFailureMakesNoOtherCall uses go-nvml's bare mock, which panics on
// any function whose Func is unset: only Init may be called after Init failed.
func TestInitFailureMakesNoOtherCall(t *testing.T) {
	t.Parallel()
	inits := 0
	ret := gonvml.ERROR_LIBRARY_NOT_FOUND
	lib := &mock.Interface{InitFunc: func() gonvml.Return { inits++; return ret }}
	clock := &stepClock{t: time.Unix(1_800_000_000, 0)}
	r := New(lib, DefaultConfig(), zap.NewNop(), clock)

	err := r.Init()
	var se *collector.SourceError
	if !errors.As(err, &se) || se.Source != collector.SourceNVML || se.Reason != "init" {
		t.Fatalf("Init() = %v, want a nvml/init SourceError", err)
	}
	if !errors.Is(err, gonvml.ERROR_LIBRARY_NOT_FOUND) {
		t.Errorf("Init() = %v, want it to wrap ERROR_LIBRARY_NOT_FOUND", err)
	}
	for i := 0; i < 3; i++ { // within the retry backoff: no call at all
		if _, err := r.Read(context.Background()); !errors.Is(err, ErrNotInitialized) {
			t.Fatalf("Read() = %v, want ErrNotInitialized", err)
		}
	}
	if inits != 1 {
		t.Fatalf("Init called %d times within the backoff, want 1", inits)
	}

	// After the backoff the driver has appeared: Read initialises and reads.
	clock.t = clock.t.Add(initRetryMin)
	ret = gonvml.SUCCESS
	lib.SystemGetDriverVersionFunc = func() (string, gonvml.Return) { return "550.54.15", gonvml.SUCCESS }
	lib.DeviceGetCountFunc = func() (int, gonvml.Return) { return 0, gonvml.SUCCESS }
	lib.ExtensionsFunc = func() gonvml.ExtendedInterface {
		return &mock.ExtendedInterface{LookupSymbolFunc: func(string) error { return gonvml.ERROR_NOT_FOUND }}
	}
	snap, err := r.Read(context.Background())
	if err != nil || len(snap.Devices) != 0 || inits != 2 {
		t.Fatalf("Read after the driver appeared = %v, %d devices, %d inits; want nil, 0, 2", err, len(snap.Devices), inits)
	}
	lib.ShutdownFunc = func() gonvml.Return { return gonvml.SUCCESS }
	r.Shutdown()
}

const scenario = `
start: 2026-12-01T08:00:00Z
duration: 1h
node: reader-test
system: dgxh100
gpus: 2
pods:
  - namespace: ml
    name: train
    container: main
    devices: ["gpu:0"]
    memory: 10GiB
    util:
      - {at: 0s, value: 0.5}
`

// TestReadSimulatedNode reads the simulated node through the real code path
// and checks every field against the scenario.
func TestReadSimulatedNode(t *testing.T) {
	t.Parallel()
	sc, err := sim.ParseScenario([]byte(scenario), "reader-test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	clock := sim.NewVirtualClock(sc.Start.Add(time.Minute))
	node, err := sim.NewNode(sc, clock)
	if err != nil {
		t.Fatal(err)
	}
	r := New(node.NVML(), DefaultConfig(), zap.NewNop(), clock)
	if err := r.Init(); err != nil {
		t.Fatal(err)
	}
	defer r.Shutdown()

	first, err := r.Read(context.Background())
	if err != nil || len(first.Errors) != 0 {
		t.Fatalf("Read() = %v, errors %v", err, first.Errors)
	}
	if len(first.Devices) != 2 {
		t.Fatalf("%d devices, want 2", len(first.Devices))
	}
	// The first read returns the driver's whole ring: 120 samples of 1/6 s.
	if n := len(first.Devices[0].Samples); n != 120 {
		t.Errorf("first read: %d samples, want the 120 of the ring", n)
	}

	clock.Advance(time.Second)
	snap, err := r.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	d0, d1 := snap.Devices[0], snap.Devices[1]
	if d0.Device.UUID != node.DeviceUUID(0) || d0.Device.GPU != 0 || d1.Device.GPU != 1 {
		t.Errorf("devices %+v %+v, want GPU 0 = %s and GPU 1", d0.Device, d1.Device, node.DeviceUUID(0))
	}
	if d0.Device.DriverVersion == "" || d0.Device.Name == "" || d0.Device.UtilizationSource != collector.UtilizationSamples {
		t.Errorf("device identity %+v is incomplete", d0.Device)
	}
	if len(d0.Samples) != 6 {
		t.Fatalf("one second later: %d samples, want 6", len(d0.Samples))
	}
	last := first.Devices[0].Samples[119].Time
	for i, s := range d0.Samples {
		if !s.Time.After(last) || s.Value != 0.5 {
			t.Errorf("sample %d = %+v, want a new sample of 0.5", i, s)
		}
		last = s.Time
	}
	for _, s := range d1.Samples {
		if s.Value != 0 {
			t.Errorf("GPU 1 sample %+v, want 0: nobody uses it", s)
		}
	}
	if !d0.HasMemory || d0.MemoryTotalBytes != 80*1024*1024*1024 || d0.MemoryUsedBytes < 10<<30 {
		t.Errorf("memory used %d of %d, want ≥ 10GiB of 80GiB", d0.MemoryUsedBytes, d0.MemoryTotalBytes)
	}
	if !d0.HasPower || !(d0.PowerWatts > d1.PowerWatts) {
		t.Errorf("power %.1f W (busy) vs %.1f W (idle), want busy above idle", d0.PowerWatts, d1.PowerWatts)
	}
	if !d0.HasEnergy || !(d0.EnergyJoules > first.Devices[0].EnergyJoules) {
		t.Errorf("energy %.1f J did not grow from %.1f J", d0.EnergyJoules, first.Devices[0].EnergyJoules)
	}
	if !d0.HasProcesses || len(d0.Processes) != 1 || d0.Processes[0].UsedMemoryBytes != 10<<30 || len(d1.Processes) != 0 {
		t.Errorf("processes %+v / %+v, want one 10GiB process on GPU 0 only", d0.Processes, d1.Processes)
	}

	// Up to date: no new samples is not an error.
	snap, err = r.Read(context.Background())
	if err != nil || len(snap.Errors) != 0 || len(snap.Devices[0].Samples) != 0 {
		t.Errorf("read with no new samples: err %v, errors %v, %d samples", err, snap.Errors, len(snap.Devices[0].Samples))
	}
}

func rawSample(ts uint64, v uint32) gonvml.Sample {
	s := gonvml.Sample{TimeStamp: ts}
	binary.LittleEndian.PutUint32(s.SampleValue[:4], v)
	return s
}

// TestReadSamplesOrdering feeds the ring as the driver may return it: out of
// order, with empty slots and a repeated stamp.
func TestReadSamplesOrdering(t *testing.T) {
	t.Parallel()
	dev := &mock.Device{GetSamplesFunc: func(_ gonvml.SamplingType, _ uint64) (gonvml.ValueType, []gonvml.Sample, gonvml.Return) {
		return gonvml.VALUE_TYPE_UNSIGNED_INT, []gonvml.Sample{
			rawSample(300, 30), rawSample(0, 99), rawSample(100, 10), rawSample(200, 20), rawSample(200, 20), rawSample(50, 5),
		}, gonvml.SUCCESS
	}}
	rr := readSamples(dev, 60, &stampClock{known: true}, &stepClock{t: time.UnixMicro(300)}, nil)
	got := rr.samples
	if rr.ret != gonvml.SUCCESS || rr.bad != 0 || rr.newest != 300 {
		t.Fatal(rr.ret, rr.bad, rr.newest)
	}
	want := []collector.Sample{
		{Time: time.UnixMicro(100), Value: 0.1},
		{Time: time.UnixMicro(200), Value: 0.2},
		{Time: time.UnixMicro(300), Value: 0.3},
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if !got[i].Time.Equal(want[i].Time) || math.Abs(got[i].Value-want[i].Value) > 1e-12 {
			t.Errorf("sample %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestSampleValue(t *testing.T) {
	t.Parallel()
	var b [8]byte
	tests := []struct {
		name string
		vt   gonvml.ValueType
		put  func()
		want float64
		ok   bool
	}{
		{"uint", gonvml.VALUE_TYPE_UNSIGNED_INT, func() { binary.LittleEndian.PutUint64(b[:], 0); binary.LittleEndian.PutUint32(b[:4], 87) }, 87, true},
		{"double", gonvml.VALUE_TYPE_DOUBLE, func() { binary.LittleEndian.PutUint64(b[:], math.Float64bits(42.5)) }, 42.5, true},
		{"ulonglong", gonvml.VALUE_TYPE_UNSIGNED_LONG_LONG, func() { binary.LittleEndian.PutUint64(b[:], 7) }, 7, true},
		{"nan", gonvml.VALUE_TYPE_DOUBLE, func() { binary.LittleEndian.PutUint64(b[:], math.Float64bits(math.NaN())) }, 0, false},
		{"unknown type", gonvml.VALUE_TYPE_COUNT, func() {}, 0, false},
	}
	for _, tc := range tests {
		tc.put()
		got, ok := sampleValue(tc.vt, b)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("%s: sampleValue = %g, %v; want %g, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// slowLib is one GPU whose samples and process samples calls take took on
// clock before they answer, each with one sample stamped at the answer's
// time plus offset.
func slowLib(clock *stepClock, took, offset time.Duration) *mock.Interface {
	answer := func() uint64 {
		clock.t = clock.t.Add(took)
		return uint64(clock.t.Add(offset).UnixMicro())
	}
	dev := &mock.Device{
		GetUUIDFunc:        func() (string, gonvml.Return) { return "GPU-slow", gonvml.SUCCESS },
		GetNameFunc:        func() (string, gonvml.Return) { return "slow", gonvml.SUCCESS },
		GetIndexFunc:       func() (int, gonvml.Return) { return 0, gonvml.SUCCESS },
		GetMigModeFunc:     func() (int, int, gonvml.Return) { return 0, 0, gonvml.ERROR_NOT_SUPPORTED },
		GetMinorNumberFunc: func() (int, gonvml.Return) { return 0, gonvml.SUCCESS },
		GetSamplesFunc: func(gonvml.SamplingType, uint64) (gonvml.ValueType, []gonvml.Sample, gonvml.Return) {
			return gonvml.VALUE_TYPE_UNSIGNED_INT, []gonvml.Sample{rawSample(answer(), 40)}, gonvml.SUCCESS
		},
		GetProcessUtilizationFunc: func(uint64) ([]gonvml.ProcessUtilizationSample, gonvml.Return) {
			return []gonvml.ProcessUtilizationSample{{Pid: 7, TimeStamp: answer(), SmUtil: 40}}, gonvml.SUCCESS
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
		SystemGetDriverVersionFunc: func() (string, gonvml.Return) { return "550.54.15", gonvml.SUCCESS },
		DeviceGetCountFunc:         func() (int, gonvml.Return) { return 1, gonvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(int) (gonvml.Device, gonvml.Return) { return dev, gonvml.SUCCESS },
		// No GPM: its symbols are missing.
		ExtensionsFunc: func() gonvml.ExtendedInterface {
			return &mock.ExtendedInterface{LookupSymbolFunc: func(string) error { return errors.New("no such symbol") }}
		},
	}
}

// TestSampleStampJudgedAtAnswer: a sample's timestamp is checked against
// the time its call answered, not the time the call was made, both ways: a
// call that took minutes brings samples from after it began (not "in the
// future") and may bring ones older than the age bound at the answer
// (stale, though recent when the call began).
func TestSampleStampJudgedAtAnswer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		took   time.Duration // each call, on the clock
		offset time.Duration // the sample's stamp after the answer
		bad    bool
	}{
		{"prompt answer", 0, 0, false},
		{"70s late, stamped at the answer", 70 * time.Second, 0, false},
		{"70s late, a minute ahead of the answer", 70 * time.Second, maxSampleLead, false},
		{"70s late, beyond a minute ahead of the answer", 70 * time.Second, maxSampleLead + time.Second, true},
		{"5m late, within the age bound at the answer", 5 * time.Minute, -maxSampleAge + time.Second, false},
		{"5m late, beyond the age bound at the answer", 5 * time.Minute, -maxSampleAge - time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := &stepClock{t: time.Unix(1_800_000_000, 0)}
			r := New(slowLib(clock, tc.took, tc.offset), DefaultConfig(), zap.NewNop(), clock)
			if err := r.Init(); err != nil {
				t.Fatal(err)
			}
			defer r.Shutdown()
			snap, err := r.Read(context.Background())
			if err != nil || len(snap.Devices) != 1 {
				t.Fatalf("Read() = %v, %d devices", err, len(snap.Devices))
			}
			want := []string(nil)
			if tc.bad {
				want = []string{"bad_timestamp", "bad_timestamp"}
			}
			if got := reasons(snap); !slices.Equal(got, want) {
				t.Errorf("errors %v, want %v", snap.Errors, want)
			}
			d := snap.Devices[0]
			if n := map[bool]int{false: 1}[tc.bad]; len(d.Samples) != n || len(d.ProcessSamples) != n {
				t.Errorf("%d samples and %d process samples kept, want %d", len(d.Samples), len(d.ProcessSamples), n)
			}
		})
	}
}

// lateProcLib is a driver whose process-utilization call answers a while
// after the device's samples call, as on a loaded node: the clock moves
// between the two.
type lateProcLib struct {
	gonvml.Interface
	clock *sim.VirtualClock
	late  time.Duration
}

func (l lateProcLib) DeviceGetHandleByIndex(i int) (gonvml.Device, gonvml.Return) {
	d, ret := l.Interface.DeviceGetHandleByIndex(i)
	return lateProcDevice{Device: d, lib: l}, ret
}

type lateProcDevice struct {
	gonvml.Device
	lib lateProcLib
}

func (d lateProcDevice) GetProcessUtilization(lastSeen uint64) ([]gonvml.ProcessUtilizationSample, gonvml.Return) {
	d.lib.clock.Advance(d.lib.late)
	return d.Device.GetProcessUtilization(lastSeen)
}

// TestProcessSamplesReadOnce: process samples are asked for from the
// newest process sample read, so that, whichever the driver's shape and
// however late the process call answers after the device call, each
// process sample is read exactly once: in the per-period shape, every
// period of both processes; in the per-read shape, every refresh.
func TestProcessSamplesReadOnce(t *testing.T) {
	t.Parallel()
	for _, shape := range []string{sim.ProcessSamplesPerPeriod, sim.ProcessSamplesPerRead} {
		t.Run(shape, func(t *testing.T) {
			t.Parallel()
			sc, err := sim.ParseScenario([]byte(`start: 2026-12-01T08:00:00Z
duration: 10m
system: dgxa100
gpus: 1
driver: {process_samples: `+shape+`}
pods:
  - {namespace: a, name: p, devices: ["gpu:0::0"], memory: 1GiB, util: [{at: 0s, value: 0.3}]}
  - {namespace: a, name: q, devices: ["gpu:0::1"], memory: 1GiB, util: [{at: 0s, value: 0.2}]}
`), "late.yaml")
			if err != nil {
				t.Fatal(err)
			}
			clock := sim.NewVirtualClock(sc.Start.Add(time.Minute))
			node, err := sim.NewNode(sc, clock)
			if err != nil {
				t.Fatal(err)
			}
			defer node.Close()
			r := New(lateProcLib{Interface: node.NVML(), clock: clock, late: 500 * time.Millisecond}, DefaultConfig(), zap.NewNop(), clock)
			if err := r.Init(); err != nil {
				t.Fatal(err)
			}
			defer r.Shutdown()
			seen := map[uint32][]time.Time{}
			for i := range 12 {
				snap, err := r.Read(context.Background())
				if err != nil || len(snap.Devices) != 1 {
					t.Fatalf("read %d: %v, %d devices", i, err, len(snap.Devices))
				}
				for _, p := range snap.Devices[0].ProcessSamples {
					seen[p.PID] = append(seen[p.PID], p.Time)
				}
				clock.Advance(time.Second)
			}
			step := sim.SamplePeriod
			if shape == sim.ProcessSamplesPerRead {
				step = sim.DefaultProcessRefresh
			}
			for _, pid := range []uint32{sc.PID(0, 0), sc.PID(1, 0)} {
				ts := seen[pid]
				if len(ts) < 5 {
					t.Fatalf("process %d: %d samples in 12 reads", pid, len(ts))
				}
				for j := 1; j < len(ts); j++ {
					if d := ts[j].Sub(ts[j-1]); d < step-time.Microsecond || d > step+time.Microsecond {
						t.Errorf("process %d: samples at %s and %s, want one every %s", pid, ts[j-1].Format("15:04:05.000000"), ts[j].Format("15:04:05.000000"), step)
					}
				}
			}
		})
	}
}
