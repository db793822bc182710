package nvml

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/collector"
	"github.com/gpuxray/gpuxray/collector/sim"
)

// migUUIDs are the MIG devices of a snapshot, by UUID, with their GPM
// utilization source and profile.
func migUUIDs(snap collector.DeviceSnapshot) map[string]collector.Device {
	out := map[string]collector.Device{}
	for _, d := range snap.Devices {
		if d.Device.ParentUUID != "" {
			out[d.Device.UUID] = d.Device
		}
	}
	return out
}

// TestDynamicMIGDevices reads dra-mig.yaml's node, whose DRA driver
// creates gpu:0's MIG devices for claims and destroys them after: a MIG
// device created between two reads is in the second, with its profile,
// GPU instance and GPM samples; one destroyed between two reads is gone
// from the second.
func TestDynamicMIGDevices(t *testing.T) {
	t.Parallel()
	sc, err := sim.LoadScenario(filepath.Join("..", "..", "test", "scenarios", "dra-mig.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	clock := sim.NewVirtualClock(sc.Start.Add(4 * time.Minute))
	node, err := sim.NewNode(sc, clock)
	if err != nil {
		t.Fatal(err)
	}
	r := New(node.NVML(), DefaultConfig(), zap.NewNop(), clock)
	if err := r.Init(); err != nil {
		t.Fatal(err)
	}
	defer r.Shutdown()
	read := func(at time.Duration) map[string]collector.Device {
		t.Helper()
		clock.Set(sc.Start.Add(at))
		snap, err := r.Read(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return migUUIDs(snap)
	}
	finetune := node.MIGDeviceUUID(0, 0)
	if got := read(4 * time.Minute); len(got) != 1 || got[finetune].MIGProfile != "3g.40gb" {
		t.Fatalf("at 4m: MIG devices %v, want finetune-0's 3g.40gb %s", got, finetune)
	}
	read(4*time.Minute + 30*time.Second)

	clock.Set(sc.Start.Add(5*time.Minute + time.Second))
	embed := node.MIGDeviceUUID(0, 1)
	if embed == "" {
		t.Fatal("the simulated driver made no MIG device for embed-0 at 5m")
	}
	got := read(5*time.Minute + time.Second)
	d, ok := got[embed]
	if len(got) != 2 || !ok || d.MIGProfile != "1g.10gb" || d.ParentUUID != node.DeviceUUID(0) || d.GPUInstance != 7 ||
		d.UtilizationSource != collector.UtilizationGPM {
		t.Fatalf("at 5m1s: MIG devices %v, want finetune-0's and embed-0's new 1g.10gb %s (GI 7, GPM)", got, embed)
	}
	// Its activity: GPM needs two samples; the next read has one.
	read(5*time.Minute + 2*time.Second)
	clock.Set(sc.Start.Add(5*time.Minute + 3*time.Second))
	snap, err := r.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, rd := range snap.Devices {
		if rd.Device.UUID == embed && (len(rd.Samples) != 1 || math.Abs(rd.Samples[0].Value-0.7) > 1e-9) {
			t.Errorf("embed-0's device samples %+v, want its pod's 0.7 from GPM", rd.Samples)
		}
	}

	if got := read(35*time.Minute + time.Second); len(got) != 1 || !has(got, finetune) {
		t.Errorf("at 35m1s: MIG devices %v, want only finetune-0's: embed-0's is destroyed", got)
	}
	if got := read(40*time.Minute + time.Second); len(got) != 1 || has(got, finetune) || has(got, embed) {
		t.Errorf("at 40m1s: MIG devices %v, want only embed-1's new one", got)
	}
}

func has(m map[string]collector.Device, uuid string) bool { _, ok := m[uuid]; return ok }

// TestMIGRescanBounded: within migRescanInterval of a walk, Read does not
// walk the MIG indices again, so a device made meanwhile waits for the
// next walk.
func TestMIGRescanBounded(t *testing.T) {
	t.Parallel()
	sc, err := sim.LoadScenario(filepath.Join("..", "..", "test", "scenarios", "dra-mig.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	clock := sim.NewVirtualClock(sc.Start.Add(5*time.Minute - 100*time.Millisecond))
	node, err := sim.NewNode(sc, clock)
	if err != nil {
		t.Fatal(err)
	}
	r := New(node.NVML(), DefaultConfig(), zap.NewNop(), clock)
	if err := r.Init(); err != nil {
		t.Fatal(err)
	}
	defer r.Shutdown()
	count := func(at time.Duration) int {
		clock.Set(sc.Start.Add(at))
		snap, err := r.Read(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return len(migUUIDs(snap))
	}
	if n := count(5*time.Minute - 100*time.Millisecond); n != 1 {
		t.Fatalf("%d MIG devices before 5m, want 1", n)
	}
	if n := count(5*time.Minute + 100*time.Millisecond); n != 1 {
		t.Errorf("%d MIG devices 200ms after the last walk, want still 1", n)
	}
	if n := count(5*time.Minute + time.Second); n != 2 {
		t.Errorf("%d MIG devices a second after the last walk, want 2", n)
	}
}

// BenchmarkMIGRescan measures one walk of the MIG device indices as Read
// makes it once per migRescanInterval: eight H100s in MIG mode with seven
// 1g.10gb devices each, none new (the steady state), on the simulated
// driver, so this is gpuxray's own cost (the calls, the goroutine and the
// wait) plus the simulation's, not the real driver's.
func BenchmarkMIGRescan(b *testing.B) {
	var layout []string
	for range 7 {
		layout = append(layout, "1g.10gb")
	}
	var mig []string
	for g := range 8 {
		mig = append(mig, fmt.Sprintf("  \"gpu:%d\": [%s]", g, strings.Join(layout, ", ")))
	}
	sc, err := sim.ParseScenario([]byte("start: 2026-12-01T08:00:00Z\nduration: 1h\nsystem: dgxh100\ngpus: 8\nmig:\n"+strings.Join(mig, "\n")+"\n"), "bench.yaml")
	if err != nil {
		b.Fatal(err)
	}
	clock := sim.NewVirtualClock(sc.Start.Add(time.Minute))
	node, err := sim.NewNode(sc, clock)
	if err != nil {
		b.Fatal(err)
	}
	r := New(node.NVML(), DefaultConfig(), zap.NewNop(), clock)
	if err := r.Init(); err != nil {
		b.Fatal(err)
	}
	defer r.Shutdown()
	before := len(r.devices)
	b.ReportAllocs()
	for b.Loop() {
		clock.Advance(migRescanInterval)
		r.rescanMIG(context.Background())
	}
	if len(r.devices) != before || before != 8+56 {
		b.Fatalf("%d devices after the walks, %d before; want 64", len(r.devices), before)
	}
}
