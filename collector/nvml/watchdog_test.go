package nvml

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/collector"
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
	cfg.CallTimeout = 50 * time.Millisecond
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
