package agent

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/collector"
)

// gpmDevices is one device read through GPM, as collector/nvml reads a MIG
// instance on Hopper: each read takes a GPM sample, and its reading is the
// activity over the interval since the previous one, stamped at the read
// and saying where that interval began.
type gpmDevices struct {
	clock *fakeClock
	util  float64
	prev  time.Time
}

func (g *gpmDevices) Read(context.Context) (collector.DeviceSnapshot, error) {
	now := g.clock.Now()
	rd := collector.DeviceReading{Device: collector.Device{UUID: uuidOf(0), Name: "NVIDIA H100 80GB HBM3", UtilizationSource: collector.UtilizationGPM}}
	if !g.prev.IsZero() {
		rd.Samples = []collector.Sample{{Time: now, Value: g.util, Since: g.prev}}
	}
	g.prev = now
	return collector.DeviceSnapshot{At: now, Devices: []collector.DeviceReading{rd}}, nil
}

// TestLatePollLosesNoGPMTime: an agent whose polls come late (a CPU-starved
// agent, or one whose previous poll waited seconds on the kubelet) reads
// a GPM device over the whole interval since its last GPM sample, and
// loses none of it. Taken for a gap beyond --sample.max-gap, as a lost
// NVML sample would be, every late poll cost a MIG instance's time: a
// fleet of 100 agents on two busy cores read MIG time low by seconds a
// poll.
func TestLatePollLosesNoGPMTime(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: t0}
	dev := &gpmDevices{clock: clock, util: 0.6}
	kube := &fakeKubelet{clock: clock, hold: []holding{{"train", 0, 0, time.Hour}}}
	cfg := DefaultConfig() // polls every second; samples 2 s apart are a gap
	e, err := New(cfg, dev, kube, clock, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	// Polls a second apart, but for five that came 3, 7, 12, 30 and 61 s
	// after the one before.
	for _, d := range []time.Duration{0, 1, 1, 3, 1, 7, 1, 12, 30, 1, 61, 1} {
		clock.t = clock.t.Add(d * time.Second)
		e.Poll(context.Background())
	}
	s := e.Snapshot()
	// The first GPM reading is the baseline, at the second poll (1 s).
	elapsed := clock.t.Sub(t0).Seconds() - 1
	c := s.Devices[0].Counters[Offpeak]
	near(t, "observed", c.Observed, elapsed)
	near(t, "gap", c.Gap, 0)
	near(t, "allocated", c.Allocated, elapsed)
	near(t, "allocated active", c.AllocatedActive, 0.6*elapsed)
	a := findAlloc(s, "train").Counters[Offpeak]
	near(t, "pod allocated", a.Allocated, elapsed)
	near(t, "pod active", a.Active, 0.6*elapsed)
}
