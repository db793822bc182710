package agent_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/agent"
	"github.com/gpuxray/gpuxray/collector"
	"github.com/gpuxray/gpuxray/collector/nvml"
	"github.com/gpuxray/gpuxray/collector/sim"
)

// noAllocations is a kubelet that lists nothing.
type noAllocations struct{ clock sim.Clock }

func (n noAllocations) List(context.Context) (collector.AllocationList, error) {
	return collector.AllocationList{At: n.clock.Now()}, nil
}

// TestForgetGoneMIGDevice runs the real NVML reader on dra-mig.yaml's node,
// whose DRA driver destroys embed-0's MIG device at 35m: the engine keeps
// the device, not present, with its counters, for the retention after it
// went (so its last increments are scraped), then forgets it; the GPUs and
// the MIG devices that still exist stay.
func TestForgetGoneMIGDevice(t *testing.T) {
	t.Parallel()
	sc, err := sim.LoadScenario(filepath.Join("..", "test", "scenarios", "dra-mig.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	clock := sim.NewVirtualClock(sc.Start.Add(30 * time.Minute))
	node, err := sim.NewNode(sc, clock)
	if err != nil {
		t.Fatal(err)
	}
	reader := nvml.New(node.NVML(), nvml.DefaultConfig(), zap.NewNop(), clock)
	if err := reader.Init(); err != nil {
		t.Fatal(err)
	}
	defer reader.Shutdown()
	cfg := agent.DefaultConfig()
	cfg.Retention = 2 * time.Minute
	e, err := agent.New(cfg, reader, noAllocations{clock}, clock, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	embed := node.MIGDeviceUUID(0, 1)
	devices := func() map[string]agent.DeviceSnapshot {
		out := map[string]agent.DeviceSnapshot{}
		for _, d := range e.Snapshot().Devices {
			out[d.UUID] = d
		}
		return out
	}
	pollTo := func(at time.Duration) {
		for clock.Now().Sub(sc.Start) < at {
			clock.Advance(time.Second)
			e.Poll(context.Background())
		}
	}
	e.Poll(context.Background())
	pollTo(34 * time.Minute)
	d, ok := devices()[embed]
	if !ok || !d.Present || d.Counters[agent.Offpeak].Observed == 0 {
		t.Fatalf("at 34m embed-0's MIG device %s: %+v, want present with observed time", embed, d)
	}
	observed := d.Counters[agent.Offpeak].Observed

	pollTo(35*time.Minute + cfg.Retention)
	d, ok = devices()[embed]
	if !ok || d.Present || d.Counters[agent.Offpeak].Observed < observed {
		t.Errorf("within the retention after it went: %+v (found %v), want it kept, not present, its counters intact", d, ok)
	}
	pollTo(35*time.Minute + cfg.Retention + 2*time.Second)
	got := devices()
	if _, ok := got[embed]; ok {
		t.Errorf("%s still exported %s after it went, longer than the retention", embed, cfg.Retention)
	}
	if len(got) != 3 || !got[node.DeviceUUID(0)].Present || !got[node.DeviceUUID(1)].Present || !got[node.MIGDeviceUUID(0, 0)].Present {
		t.Errorf("devices %v, want both GPUs and finetune-0's MIG device", got)
	}
}
