package nvml

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/collector"
	"github.com/gpuxray/gpuxray/collector/sim"
)

// readAt reads at scenario offset at.
func readAt(t *testing.T, r *Reader, clock *sim.VirtualClock, sc *sim.Scenario, at time.Duration) collector.DeviceSnapshot {
	t.Helper()
	clock.Set(sc.Start.Add(at))
	snap, err := r.Read(context.Background())
	if err != nil {
		t.Fatalf("read at %s: %v", at, err)
	}
	return snap
}

func find(snap collector.DeviceSnapshot, uuid string) (collector.DeviceReading, bool) {
	for _, d := range snap.Devices {
		if d.Device.UUID == uuid {
			return d, true
		}
	}
	return collector.DeviceReading{}, false
}

// TestRuntimeMIGModeChange: MIG mode changes at runtime (nvidia-mig-parted,
// or NVIDIA's DRA driver turning it on for the first MIG device and off
// after the last). Within two reads of a change the GPU is read as it is
// now: gpu:0 leaving MIG mode is a whole GPU with utilization samples
// again, gpu:1 entering it has none and is marked MIG-enabled.
func TestRuntimeMIGModeChange(t *testing.T) {
	t.Parallel()
	r, node, clock := trapNode(t, `system: dgxa100
gpus: 2
mig: {"gpu:0": [3g.20gb, 3g.20gb]}
driver:
  mig_mode:
    - {gpu: "gpu:0", at: 10m, mode: disabled}
    - {gpu: "gpu:1", at: 10m, mode: enabled}
pods:
  - {namespace: a, name: m, devices: ["mig:0/0"], to: 9m, memory: 1GiB, util: [{at: 0s, value: 0.5}]}
  - {namespace: a, name: w, devices: ["gpu:1"], to: 9m, memory: 1GiB, util: [{at: 0s, value: 0.5}]}
`)
	sc := node.Scenario()
	gpu0, gpu1 := node.DeviceUUID(0), node.DeviceUUID(1)
	mig0 := node.MIGDeviceUUID(0, 0)
	before := readAt(t, r, clock, sc, 9*time.Minute+30*time.Second)
	if d, ok := find(before, gpu0); !ok || !d.Device.MIGEnabled {
		t.Fatalf("before: gpu:0 %+v, want in MIG mode", d.Device)
	}
	if _, ok := find(before, mig0); !ok {
		t.Fatal("before: gpu:0's MIG device missing")
	}
	var after collector.DeviceSnapshot
	for i := 0; i < 2; i++ {
		after = readAt(t, r, clock, sc, 12*time.Minute+time.Duration(i)*time.Second)
	}
	d0, ok := find(after, gpu0)
	if !ok || d0.Device.MIGEnabled || d0.Device.UtilizationSource != collector.UtilizationSamples || len(d0.Samples) == 0 {
		t.Errorf("after: gpu:0 %+v with %d samples, want a whole GPU read by its samples", d0.Device, len(d0.Samples))
	}
	if _, ok := find(after, mig0); ok {
		t.Error("after: gpu:0's MIG device is still read")
	}
	d1, ok := find(after, gpu1)
	if !ok || !d1.Device.MIGEnabled || d1.Device.UtilizationSource != collector.UtilizationNone || len(d1.Samples) != 0 {
		t.Errorf("after: gpu:1 %+v with %d samples, want MIG-enabled, no samples", d1.Device, len(d1.Samples))
	}
	if n := len(reasons(after)); n != 0 {
		t.Errorf("after: errors %v", after.Errors)
	}
}

// TestDriverReload: the driver is unloaded under the reader and loaded
// again as another version. While it is gone the GPUs are down; after, the
// reader shuts NVML down and initialises it anew, within a few reads, and
// reads the new driver, without reading again samples it already read.
func TestDriverReload(t *testing.T) {
	t.Parallel()
	r, node, clock := trapNode(t, `system: dgxa100
gpus: 1
driver:
  reloads: [{at: 10m, for: 30s, version: 550.90.07}]
pods:
  - {namespace: a, name: p, devices: ["gpu:0"], memory: 1GiB, util: [{at: 0s, value: 0.5}]}
`)
	sc := node.Scenario()
	gpu0 := node.DeviceUUID(0)
	var lastStamp time.Time
	for at := 9 * time.Minute; at <= 11*time.Minute; at += time.Second {
		clock.Set(sc.Start.Add(at))
		snap, err := r.Read(context.Background())
		d, ok := find(snap, gpu0)
		switch {
		case at < 10*time.Minute:
			if err != nil || !ok || d.Device.DriverVersion != "550.54.15" {
				t.Fatalf("at %s: %v, %+v", at, err, d.Device)
			}
		case at < 10*time.Minute+30*time.Second:
			if ok {
				t.Fatalf("at %s: gpu:0 read while the driver is unloaded", at)
			}
			continue
		case at >= 10*time.Minute+33*time.Second:
			if err != nil || !ok || d.Device.DriverVersion != "550.90.07" {
				t.Fatalf("at %s: %v, gpu:0 %v %+v; want it read on the new driver within 3 reads", at, err, ok, d.Device)
			}
		}
		for _, s := range d.Samples {
			if !s.Time.After(lastStamp) {
				t.Fatalf("at %s: sample %v read again (newest before %v)", at, s.Time, lastStamp)
			}
			lastStamp = s.Time
		}
	}
	if node.OpenSessions() != 1 {
		t.Errorf("%d NVML sessions open, want 1: the old one shut down", node.OpenSessions())
	}
}

// TestReleaseForReconfiguration: Release shuts NVML down (no session is
// open, so the driver can be reloaded), reads meanwhile return no device
// and say "released" once, and Reacquire takes NVML back on the next read,
// on the new driver.
func TestReleaseForReconfiguration(t *testing.T) {
	t.Parallel()
	r, node, clock := trapNode(t, `system: dgxa100
gpus: 1
driver:
  reloads: [{at: 10m, for: 30s, version: 550.90.07}]
pods:
  - {namespace: a, name: p, devices: ["gpu:0"], memory: 1GiB, util: [{at: 0s, value: 0.5}]}
`)
	sc := node.Scenario()
	readAt(t, r, clock, sc, 9*time.Minute)
	if !r.Release("test") {
		t.Fatal("Release() = false with no call in flight")
	}
	if node.OpenSessions() != 0 {
		t.Fatalf("%d sessions open after Release", node.OpenSessions())
	}
	released := 0
	for at := 9*time.Minute + time.Second; at < 11*time.Minute; at += 10 * time.Second {
		snap := readAt(t, r, clock, sc, at)
		if len(snap.Devices) != 0 {
			t.Fatalf("at %s: %d devices read while released", at, len(snap.Devices))
		}
		for _, e := range snap.Errors {
			if errors.Is(e, ErrReleased) {
				released++
			}
		}
	}
	if released != 1 {
		t.Errorf("released said %d times, want once", released)
	}
	r.Reacquire()
	snap := readAt(t, r, clock, sc, 11*time.Minute)
	if d, ok := find(snap, node.DeviceUUID(0)); !ok || d.Device.DriverVersion != "550.90.07" || len(d.Samples) == 0 {
		t.Errorf("after Reacquire: %+v, want gpu:0 on 550.90.07 with samples", d)
	}
	if node.HeldDuringReload() {
		t.Error("an NVML session was held while the driver reloaded")
	}
}

// gpmWatch wraps a node's NVML to see each GPM sample's device and every
// free of a sample while a call of that device is blocked in a hang.
type gpmWatch struct {
	gonvml.Interface
	node    *sim.Node
	blocked func() gonvml.Device

	mu       sync.Mutex
	owner    map[gonvml.GpmSample]gonvml.Device
	badFrees int
}

func (w *gpmWatch) GpmSampleGet(dev gonvml.Device, s gonvml.GpmSample) gonvml.Return {
	w.mu.Lock()
	w.owner[s] = dev
	w.mu.Unlock()
	return w.Interface.GpmSampleGet(dev, s)
}

func (w *gpmWatch) GpmSampleFree(s gonvml.GpmSample) gonvml.Return {
	w.mu.Lock()
	if w.node.BlockedCalls() > 0 && w.owner[s] == w.blocked() {
		w.badFrees++
	}
	w.mu.Unlock()
	return w.Interface.GpmSampleFree(s)
}

// TestGPMBuffersOutliveHungCall: NVML calls cannot be cancelled, so a read
// blocked in one may yet pass its device's GPM sample buffers to
// GpmSampleGet when the call returns. Shutting down (or enumerating anew)
// meanwhile must not free them; NVML itself stays initialised until the
// call returns.
func TestGPMBuffersOutliveHungCall(t *testing.T) {
	t.Parallel()
	sc := hangScenario(t, "dgxh100", sim.CallSamples, 10*time.Minute)
	clock := sim.NewVirtualClock(sc.Start.Add(50 * time.Second))
	node, err := sim.NewNode(sc, clock)
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	w := &gpmWatch{Interface: node.NVML(), node: node, owner: map[gonvml.GpmSample]gonvml.Device{}}
	w.blocked = func() gonvml.Device { h, _ := node.NVML().DeviceGetHandleByIndex(0); return h }
	cfg := DefaultConfig()
	cfg.CallTimeout = 20 * time.Millisecond
	r := New(w, cfg, zap.NewNop(), clock)
	if err := r.Init(); err != nil {
		t.Fatal(err)
	}
	for _, at := range []time.Duration{55 * time.Second, 59 * time.Second, 61 * time.Second} {
		readAt(t, r, clock, sc, at)
	}
	if node.BlockedCalls() != 1 {
		t.Fatalf("%d calls blocked, want gpu:0's samples call", node.BlockedCalls())
	}
	r.Shutdown()
	if w.badFrees != 0 {
		t.Errorf("%d GPM samples of the hung GPU freed while its call was blocked", w.badFrees)
	}
	if node.OpenSessions() != 1 {
		t.Errorf("%d sessions open after Shutdown under a hung call, want 1 (NVML left initialised)", node.OpenSessions())
	}
	clock.Set(sc.Start.Add(12 * time.Minute)) // the hang ends
	for deadline := time.Now().Add(10 * time.Second); r.InFlight() > 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the hung read never ended")
		}
	}
}
