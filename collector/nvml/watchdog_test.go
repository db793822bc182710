package nvml

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/agent"
	"github.com/gpuxray/gpuxray/collector"
	"github.com/gpuxray/gpuxray/collector/kubelet"
	"github.com/gpuxray/gpuxray/collector/sim"
)

// TestHungCall: an NVML call that hangs leaves its GPU out of the reading
// after CallTimeout, is not called again while it hangs (one call in
// flight per GPU, no goroutines piling up), does not hold the next reads
// up, and its GPU is back at the first read after it returns.
func TestHungCall(t *testing.T) {
	t.Parallel()
	sc, err := sim.ParseScenario([]byte(`start: 2026-12-01T08:00:00Z
duration: 10m
system: dgxa100
gpus: 2
pods:
  - {namespace: a, name: p, devices: ["gpu:0"], util: [{at: 0s, value: 1}]}
faults:
  - {kind: nvml_hang, gpu: "gpu:0", call: samples, from: 1m, to: 2m}
`), "hang.yaml")
	if err != nil {
		t.Fatal(err)
	}
	clock := sim.NewVirtualClock(sc.Start.Add(50 * time.Second))
	node, err := sim.NewNode(sc, clock)
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	cfg := DefaultConfig()
	// Long enough that a read which does not wait for the hung GPU ends
	// within it on a loaded machine too: the checks below compare wall time
	// with it.
	cfg.CallTimeout = time.Second
	r := New(node.NVML(), cfg, zap.NewNop(), clock)
	if err := r.Init(); err != nil {
		t.Fatal(err)
	}
	defer r.Shutdown()
	read := func() (collector.DeviceSnapshot, time.Duration) {
		t.Helper()
		start := time.Now()
		snap, err := r.Read(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return snap, time.Since(start)
	}
	hung := func(snap collector.DeviceSnapshot) bool {
		for _, e := range snap.Errors {
			var se *collector.SourceError
			if errors.As(e, &se) && se.Reason == "hung" {
				return true
			}
		}
		return false
	}
	if snap, _ := read(); len(snap.Devices) != 2 || hung(snap) {
		t.Fatalf("before the hang: %d devices, errors %v", len(snap.Devices), snap.Errors)
	}
	clock.Set(sc.Start.Add(time.Minute))
	snap, took := read()
	if len(snap.Devices) != 1 || snap.Devices[0].Device.GPU != 1 || !hung(snap) {
		t.Fatalf("hang: devices %v, errors %v; want gpu 1 only and a hung error", snap.Devices, snap.Errors)
	}
	if took < cfg.CallTimeout {
		t.Errorf("the first read of a hang returned after %s, before the timeout", took)
	}
	for i := range 20 {
		clock.Set(sc.Start.Add(time.Minute + time.Duration(i+1)*time.Second))
		snap, took = read()
		if len(snap.Devices) != 1 || !hung(snap) {
			t.Fatalf("still hung: devices %v, errors %v", snap.Devices, snap.Errors)
		}
		if took >= cfg.CallTimeout {
			t.Errorf("a read during the hang took %s: it waited for the hung GPU again", took)
		}
		// The other GPU's read has ended; its goroutine ends just after.
		for deadline := time.Now().Add(time.Second); r.InFlight() > 1 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		if n := r.InFlight(); n != 1 {
			t.Fatalf("%d reads in flight during the hang, want 1", n)
		}
	}
	clock.Set(sc.Start.Add(2 * time.Minute))
	for r.InFlight() != node.BlockedCalls() {
		time.Sleep(time.Millisecond)
	}
	snap, _ = read()
	if len(snap.Devices) != 2 || hung(snap) {
		t.Fatalf("after the hang: %d devices, errors %v", len(snap.Devices), snap.Errors)
	}
	// The late read brought the samples of the last 20 s.
	if n := len(snap.Devices[0].Samples); n != sim.SampleBuffer {
		t.Errorf("the late read has %d samples, want the ring's %d", n, sim.SampleBuffer)
	}
}

// hangScenario is one busy pod on gpu:0 of a two-GPU node, and a hang of
// call on gpu:0 from 1m to 1m+hang.
//
// Its per-process samples come one per sample period, so that a late
// answer's can be counted against the ring's.
func hangScenario(t *testing.T, system, call string, hang time.Duration) *sim.Scenario {
	t.Helper()
	sc, err := sim.ParseScenario([]byte(fmt.Sprintf(`start: 2026-12-01T08:00:00Z
duration: 20m
system: %s
gpus: 2
driver: {process_samples: per-period}
pods:
  - {namespace: a, name: p, devices: ["gpu:0"], memory: 1GiB, util: [{at: 0s, value: 0.75}]}
faults:
  - {kind: nvml_hang, gpu: "gpu:0", call: %s, from: 1m, to: %s}
`, system, call, time.Minute+hang)), "hang.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// awaitReleased waits until every read that a hang released has ended, as
// replay does before its next poll.
func awaitReleased(t *testing.T, r *Reader, node *sim.Node) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); r.InFlight() != node.BlockedCalls(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d reads in flight, %d calls blocked", r.InFlight(), node.BlockedCalls())
		}
	}
}

// recent reports whether a sample stamped at at is the driver's newest at
// now: samples lie on a grid of sim.SamplePeriod.
func recent(at, now time.Time) bool { return !at.After(now) && now.Sub(at) < sim.SamplePeriod }

func reasons(snap collector.DeviceSnapshot) []string {
	var out []string
	for _, e := range snap.Errors {
		var se *collector.SourceError
		if errors.As(e, &se) {
			out = append(out, se.Reason)
		}
	}
	return out
}

// TestHungCallLateAnswer: a call that hangs for longer than maxSampleLead
// answers with samples stamped up to the time its answer arrives. They are
// judged against that time, not the time the call was made: none is
// dropped or counted as bad_timestamp, the late reading holds the whole
// ring, and the next read goes on from its last sample.
func TestHungCallLateAnswer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		call string
		hang time.Duration
		gpm  bool // SM activity from GPM is the GPU's samples
	}{
		{"samples 70s", sim.CallSamples, 70 * time.Second, false},
		{"samples 5m", sim.CallSamples, 5 * time.Minute, false},
		{"process samples 70s", sim.CallProcessSamples, 70 * time.Second, false},
		{"gpm 70s", sim.CallAll, 70 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			system := "dgxa100"
			if tc.gpm {
				system = "dgxh100"
			}
			sc := hangScenario(t, system, tc.call, tc.hang)
			clock := sim.NewVirtualClock(sc.Start.Add(59 * time.Second))
			node, err := sim.NewNode(sc, clock)
			if err != nil {
				t.Fatal(err)
			}
			defer node.Close()
			cfg := DefaultConfig()
			cfg.CallTimeout = 50 * time.Millisecond
			if tc.gpm {
				cfg.IdleSource = collector.UtilizationGPM
			}
			r := New(node.NVML(), cfg, zap.NewNop(), clock)
			if err := r.Init(); err != nil {
				t.Fatal(err)
			}
			defer r.Shutdown()
			read := func() collector.DeviceSnapshot {
				t.Helper()
				snap, err := r.Read(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				return snap
			}
			if snap := read(); len(snap.Devices) != 2 || len(snap.Errors) != 0 {
				t.Fatalf("before the hang: %d devices, errors %v", len(snap.Devices), snap.Errors)
			}
			clock.Set(sc.Start.Add(time.Minute))
			if snap := read(); len(snap.Devices) != 1 || !slices.Equal(reasons(snap), []string{"hung"}) {
				t.Fatalf("hang: %d devices, errors %v; want gpu 1 only and a hung error", len(snap.Devices), snap.Errors)
			}
			answer := sc.Start.Add(time.Minute + tc.hang)
			clock.Set(answer)
			awaitReleased(t, r, node)
			late := read()
			if len(late.Errors) != 0 || len(late.Devices) != 2 {
				t.Fatalf("the late answer: %d devices, errors %v; want both devices and no error", len(late.Devices), late.Errors)
			}
			d0 := late.Devices[0]
			switch {
			case tc.gpm:
				// The GPM sample measures activity up to when it was
				// taken, at the answer.
				if len(d0.Samples) != 1 || !d0.Samples[0].Time.Equal(answer) {
					t.Fatalf("the late GPM samples %v, want one at %v", d0.Samples, answer)
				}
			case tc.call == sim.CallSamples:
				// The call answered with the ring, up to the answer.
				if n := len(d0.Samples); n != sim.SampleBuffer || !recent(d0.Samples[n-1].Time, answer) {
					t.Fatalf("the late answer has %d samples, want the ring's %d up to %v", n, sim.SampleBuffer, answer)
				}
			case tc.call == sim.CallProcessSamples:
				if n := len(d0.ProcessSamples); !d0.HasProcessSamples || n != sim.SampleBuffer || !recent(d0.ProcessSamples[n-1].Time, answer) {
					t.Fatalf("the late answer has %d process samples, want the ring's %d up to %v", n, sim.SampleBuffer, answer)
				}
			}
			lastSample := d0.Samples[len(d0.Samples)-1].Time
			lastProc := d0.ProcessSamples[len(d0.ProcessSamples)-1].Time

			clock.Advance(time.Second)
			next := read()
			if len(next.Errors) != 0 || len(next.Devices) != 2 {
				t.Fatalf("after the late answer: %d devices, errors %v", len(next.Devices), next.Errors)
			}
			if s := next.Devices[0].Samples; tc.gpm && (len(s) != 1 || !s[0].Time.Equal(answer.Add(time.Second))) {
				t.Errorf("the GPM samples after the late answer %v, want one at %v", s, answer.Add(time.Second))
			}
			// The next read goes on from the late answer's last sample.
			if s := next.Devices[0].Samples; tc.call == sim.CallSamples && (len(s) != 6 || !s[0].Time.Equal(lastSample.Add(sim.SamplePeriod))) {
				t.Errorf("the read after the late answer: %d samples, want 6 from %v", len(s), lastSample.Add(sim.SamplePeriod))
			}
			// Process samples are asked for from the newest one read: the
			// next read's go on from the late answer's last.
			if ps := next.Devices[0].ProcessSamples; len(ps) != 6 || !ps[0].Time.Equal(lastProc.Add(sim.SamplePeriod)) {
				t.Errorf("the read after the late answer: %d process samples, want 6 from %v", len(ps), lastProc.Add(sim.SamplePeriod))
			}
		})
	}
}

// TestHungCallCounted plays a long hang through the engine: the late
// answer's samples are integrated, so the GPU's gap is what the hang truly
// lost (from the last sample read before it to the oldest sample the ring
// still held when the call answered), nothing is idle, and no
// bad_timestamp is counted.
func TestHungCallCounted(t *testing.T) {
	t.Parallel()
	for _, hang := range []time.Duration{70 * time.Second, 5 * time.Minute} {
		t.Run(hang.String(), func(t *testing.T) {
			t.Parallel()
			sc := hangScenario(t, "dgxa100", sim.CallSamples, hang)
			clock := sim.NewVirtualClock(sc.Start)
			node, err := sim.NewNode(sc, clock)
			if err != nil {
				t.Fatal(err)
			}
			defer node.Close()
			// Unix socket paths are limited to 108 bytes: t.TempDir() can
			// be longer.
			dir, err := os.MkdirTemp("", "gpuxray-hang")
			if err != nil {
				t.Fatal(err)
			}
			defer os.RemoveAll(dir)
			srv := sim.NewKubeletServer(node.ListResponse)
			if err := srv.Start(filepath.Join(dir, "kubelet.sock")); err != nil {
				t.Fatal(err)
			}
			defer srv.Stop()
			kcfg := kubelet.DefaultConfig()
			kcfg.Socket, kcfg.Clock = filepath.Join(dir, "kubelet.sock"), clock
			kube, err := kubelet.New(kcfg, zap.NewNop())
			if err != nil {
				t.Fatal(err)
			}
			defer kube.Close()
			cfg := DefaultConfig()
			cfg.CallTimeout = 50 * time.Millisecond
			r := New(node.NVML(), cfg, zap.NewNop(), clock)
			if err := r.Init(); err != nil {
				t.Fatal(err)
			}
			defer r.Shutdown()
			engine, err := agent.New(agent.DefaultConfig(), r, kube, clock, zap.NewNop(), agent.WithPods(node))
			if err != nil {
				t.Fatal(err)
			}

			end := time.Minute + hang + 30*time.Second
			for i := 1; time.Duration(i)*time.Second <= end; i++ {
				clock.Set(sc.Start.Add(time.Duration(i) * time.Second))
				awaitReleased(t, r, node)
				engine.Poll(context.Background())
			}

			s := engine.Snapshot()
			var errs map[string]uint64
			for _, src := range s.Sources {
				if src.Name == collector.SourceNVML {
					errs = src.Errors
				}
			}
			if errs["hung"] == 0 || errs["bad_timestamp"] != 0 {
				t.Errorf("nvml errors %v, want hung and no bad_timestamp", errs)
			}
			var c agent.DeviceCounters
			for _, w := range s.Devices[0].Counters {
				c.Observed += w.Observed
				c.Idle += w.Idle
				c.Gap += w.Gap
			}
			// The first poll (at 1s) is the baseline; the last sample read
			// before the hang is the poll at 59s's; the answer at 1m+hang
			// brings the ring's last 20s.
			ring := sim.SampleBuffer * sim.SamplePeriod
			lost := (time.Minute + hang - ring - 59*time.Second).Seconds()
			if math.Abs(c.Gap-lost) > sim.SamplePeriod.Seconds() {
				t.Errorf("gap %.2fs, want the %.2fs the hang lost", c.Gap, lost)
			}
			if total := (end - time.Second).Seconds(); math.Abs(c.Observed+c.Gap-total) > 1e-3 {
				t.Errorf("observed %.2fs + gap %.2fs, want %.0fs", c.Observed, c.Gap, total)
			}
			if c.Idle != 0 {
				t.Errorf("idle %.2fs on a busy GPU", c.Idle)
			}
		})
	}
}

// busyHostLib is a driver on a host too busy to run the reader at once:
// GPU 0's samples call answers late in real time, as a read goroutine
// waits its turn for a CPU, while the virtual clock stands still.
type busyHostLib struct {
	gonvml.Interface
	late time.Duration
}

func (l busyHostLib) DeviceGetHandleByIndex(i int) (gonvml.Device, gonvml.Return) {
	d, ret := l.Interface.DeviceGetHandleByIndex(i)
	if i != 0 {
		return d, ret
	}
	return busyHostDevice{Device: d, late: l.late}, ret
}

type busyHostDevice struct {
	gonvml.Device
	late time.Duration
}

func (d busyHostDevice) GetSamples(t gonvml.SamplingType, lastSeen uint64) (gonvml.ValueType, []gonvml.Sample, gonvml.Return) {
	time.Sleep(d.late)
	return d.Device.GetSamples(t, lastSeen)
}

// TestBusyHostOnVirtualClock: on a virtual clock (replay), a read that the
// host runs late is waited for, however much later than CallTimeout; only
// a call the simulated driver holds is given up on, and at once. Given up
// on after CallTimeout, as on a node, the late read would be taken a poll
// later, and the next read would ask for samples the driver's ring (20 s)
// no longer holds: a replay on a busy machine lost 15 s of a GPU at a
// time, and read every GPU-second figure low.
func TestBusyHostOnVirtualClock(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// hang: a hang fault holds GPU 0's samples call from 1m to 2m.
		hang bool
	}{
		{"late reads", false},
		{"late reads and a hang", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sc := hangScenario(t, "dgxa100", sim.CallSamples, time.Minute)
			if !tc.hang {
				sc.Faults = nil
			}
			clock := sim.NewVirtualClock(sc.Start.Add(30 * time.Second))
			node, err := sim.NewNode(sc, clock)
			if err != nil {
				t.Fatal(err)
			}
			defer node.Close()
			cfg := DefaultConfig()
			// Far under the host's delay: were it used, every read of
			// GPU 0 would be given up on.
			cfg.CallTimeout = time.Millisecond
			cfg.HeldCalls = node.BlockedCalls
			r := New(busyHostLib{Interface: node.NVML(), late: 20 * time.Millisecond}, cfg, zap.NewNop(), clock)
			if err := r.Init(); err != nil {
				t.Fatal(err)
			}
			defer r.Shutdown()
			var stamps []time.Time
			for now := clock.Now(); now.Before(sc.Start.Add(4 * time.Minute)); now = clock.Advance(15 * time.Second) {
				// As replay does after moving its clock: the reads a hang
				// released have returned.
				awaitReleased(t, r, node)
				snap, err := r.Read(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				at := now.Sub(sc.Start)
				held := tc.hang && at >= time.Minute && at < 2*time.Minute
				var gpu0 *collector.DeviceReading
				for i := range snap.Devices {
					if snap.Devices[i].Device.GPU == 0 {
						gpu0 = &snap.Devices[i]
					}
				}
				switch {
				case held && (gpu0 != nil || !slices.Contains(reasons(snap), "hung")):
					t.Fatalf("at %s, during the hang: GPU 0 read %v, errors %v; want it left out as hung", at, gpu0 != nil, reasons(snap))
				case !held && (gpu0 == nil || len(snap.Errors) > 0):
					t.Fatalf("at %s: GPU 0 read %v, errors %v; want it read", at, gpu0 != nil, reasons(snap))
				case gpu0 != nil:
					for _, s := range gpu0.Samples {
						stamps = append(stamps, s.Time)
					}
				}
			}
			// Every sample from the first read's to the last, none lost but
			// those the ring lost during the hang, as a driver's does.
			for i := 1; i < len(stamps); i++ {
				a, b := stamps[i-1].Sub(sc.Start), stamps[i].Sub(sc.Start)
				if tc.hang && a > 30*time.Second && b <= 2*time.Minute {
					continue
				}
				if d := b - a; d != sim.SamplePeriod {
					t.Fatalf("samples at %s then %s: %s apart, want %s (none lost)", stamps[i-1].Sub(sc.Start), stamps[i].Sub(sc.Start), d, sim.SamplePeriod)
				}
			}
			if n, want := len(stamps), int((4*time.Minute-30*time.Second-15*time.Second)/sim.SamplePeriod); n < want && !tc.hang {
				t.Errorf("%d samples read, want at least %d", n, want)
			}
		})
	}
}
