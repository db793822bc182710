package agent

import (
	"context"
	"maps"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpuxray/gpuxray/collector"
)

// snapshotHarness is two GPUs, one held, for the snapshot tests.
func snapshotHarness(t *testing.T) *harness {
	return newHarness(t, DefaultConfig(), []func(time.Duration) float64{constant(0.5), constant(0)},
		[]holding{{pod: "train", gpu: 0, from: 0, to: time.Hour}})
}

// cloneSnapshot is a deep copy of s.
func cloneSnapshot(s *Snapshot) *Snapshot {
	c := *s
	c.Devices = slices.Clone(s.Devices)
	c.Allocations = make([]*AllocationSnapshot, len(s.Allocations))
	for i, a := range s.Allocations {
		rec, info := *a, *a.AllocationInfo
		info.ExtraLabels = maps.Clone(info.ExtraLabels)
		rec.AllocationInfo = &info
		c.Allocations[i] = &rec
	}
	c.Sources = slices.Clone(s.Sources)
	for i := range c.Sources {
		c.Sources[i].Errors = maps.Clone(c.Sources[i].Errors)
	}
	return &c
}

// TestSnapshotImmutable: each poll publishes a new snapshot, and one kept
// by a reader stays as it was while the engine polls on.
func TestSnapshotImmutable(t *testing.T) {
	t.Parallel()
	h := snapshotHarness(t)
	poll := func() {
		h.clock.t = h.clock.t.Add(time.Second)
		h.e.Poll(context.Background())
	}
	poll()
	kept := h.e.Snapshot()
	want := cloneSnapshot(kept)
	for range 6 {
		poll()
		if h.e.Snapshot() == kept {
			t.Fatal("a poll published the snapshot it published before")
		}
	}
	if !reflect.DeepEqual(kept, want) {
		t.Errorf("a kept snapshot changed while the engine polled:\n got %+v\nwant %+v", kept, want)
	}
	if kept.Polls != 1 || len(kept.Allocations) != 1 || kept.Allocations[0].Counters[Offpeak].Allocated != 0 {
		t.Errorf("first snapshot: %d polls, %d allocations; want 1 poll, 1 allocation with no time yet", kept.Polls, len(kept.Allocations))
	}
	if s := h.e.Snapshot(); s.Polls != 7 || len(s.Allocations) != 1 || len(s.Devices) != 2 || len(s.Sources) != 2 {
		t.Errorf("latest snapshot: %d polls, %d allocations, %d devices, %d sources; want 7, 1, 2, 2",
			s.Polls, len(s.Allocations), len(s.Devices), len(s.Sources))
	}
}

// TestSnapshotConcurrentReaders: readers that take snapshots while the
// engine polls each see one whole snapshot that does not change while they
// read it (run with -race: the detector sees any write to a published one).
func TestSnapshotConcurrentReaders(t *testing.T) {
	t.Parallel()
	h := snapshotHarness(t)
	h.e.Poll(context.Background())
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				s := h.e.Snapshot()
				polls, n := s.Polls, len(s.Allocations)
				var observed float64
				for _, d := range s.Devices {
					observed += d.Counters[Offpeak].Observed
				}
				var again float64
				for _, d := range s.Devices {
					again += d.Counters[Offpeak].Observed
				}
				if s.Polls != polls || len(s.Allocations) != n || again != observed || n != 1 {
					t.Errorf("snapshot changed while read, or is not whole: polls %d → %d, allocations %d → %d, observed %v → %v",
						polls, s.Polls, n, len(s.Allocations), observed, again)
				}
			}
		})
	}
	for range 200 {
		h.clock.t = h.clock.t.Add(time.Second)
		h.e.Poll(context.Background())
	}
	close(stop)
	wg.Wait()
}

// TestAllocationSnapshotShared: successive snapshots share a live
// allocation's info, and an ended one's whole record, while they stay the
// same.
func TestAllocationSnapshotShared(t *testing.T) {
	t.Parallel()
	h := newHarness(t, DefaultConfig(), []func(time.Duration) float64{constant(0.5), constant(0)},
		[]holding{{pod: "train", gpu: 0, from: 0, to: time.Hour}, {pod: "done", gpu: 1, from: 0, to: 5 * time.Second}})
	h.run(20 * time.Second)
	first := h.e.Snapshot()
	h.run(21 * time.Second)
	next := h.e.Snapshot()
	live0, live1 := findAlloc(first, "train"), findAlloc(next, "train")
	if live1 == live0 || live1.AllocationInfo != live0.AllocationInfo {
		t.Errorf("a live allocation's record %p → %p (want a new one), info %p → %p (want the same)",
			live0, live1, live0.AllocationInfo, live1.AllocationInfo)
	}
	if live1.Counters[Offpeak].Allocated <= live0.Counters[Offpeak].Allocated {
		t.Errorf("allocated %g, then %g: want it to grow", live0.Counters[Offpeak].Allocated, live1.Counters[Offpeak].Allocated)
	}
	ended0, ended1 := findAlloc(first, "done"), findAlloc(next, "done")
	if ended0 == nil || ended0.Live || ended1 != ended0 {
		t.Errorf("an ended allocation's record %+v, then %p; want the same ended record", ended0, ended1)
	}
}

// TestAllocationInfoEqual: infos that differ in any one field are not
// equal, so that a changed label reaches the next snapshot.
func TestAllocationInfoEqual(t *testing.T) {
	t.Parallel()
	base := AllocationInfo{
		UUID: "GPU-a", GPU: 1, Namespace: "ml", Pod: "train-0", Container: "main", Resource: "nvidia.com/gpu",
		Shared: true, WorkloadKind: "Job", Workload: "train", Model: "llama", ExtraLabels: map[string]string{"team": "a"},
		Scheduling: collector.Scheduling{Queue: "q"}, DRA: collector.DRADevice{Driver: "gpu.nvidia.com"},
	}
	same := base
	same.ExtraLabels = map[string]string{"team": "a"}
	if !base.equal(&same) {
		t.Error("equal infos are not equal")
	}
	v := reflect.ValueOf(base)
	for i := range v.NumField() {
		t.Run(v.Type().Field(i).Name, func(t *testing.T) {
			other := base
			f := reflect.ValueOf(&other).Elem().Field(i)
			if f.IsZero() {
				t.Fatal("the base info leaves this field zero")
			}
			f.SetZero()
			if base.equal(&other) || other.equal(&base) {
				t.Errorf("infos that differ in %s are equal", v.Type().Field(i).Name)
			}
		})
	}
}
