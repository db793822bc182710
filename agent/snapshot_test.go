package agent

import (
	"context"
	"sync"
	"testing"
	"time"
)

// snapshotHarness is two GPUs, one held, for the snapshot tests.
func snapshotHarness(t *testing.T) *harness {
	return newHarness(t, DefaultConfig(), []func(time.Duration) float64{constant(0.5), constant(0)},
		[]holding{{pod: "train", gpu: 0, from: 0, to: time.Hour}})
}

// TestSnapshotRecycled: a snapshot that was acquired and released is filled
// again by a later poll (so that a poll allocates none), one still held is
// not, and one given away by Snapshot never is.
func TestSnapshotRecycled(t *testing.T) {
	t.Parallel()
	h := snapshotHarness(t)
	poll := func() {
		h.clock.t = h.clock.t.Add(time.Second)
		h.e.Poll(context.Background())
	}
	poll()

	lent := h.e.AcquireSnapshot()
	lent.Release()
	seen := map[*Snapshot]bool{}
	for range 4 {
		poll()
		s := h.e.AcquireSnapshot()
		seen[s] = true
		s.Release()
	}
	if !seen[lent] {
		t.Errorf("a released snapshot was not reused in four polls (%d snapshots)", len(seen))
	}

	held := h.e.AcquireSnapshot()
	heldPolls := held.Polls
	kept := h.e.Snapshot()
	keptPolls, keptAt := kept.Polls, kept.At
	for range 6 {
		poll()
	}
	if held.Polls != heldPolls {
		t.Errorf("a held snapshot changed: polls %d, then %d", heldPolls, held.Polls)
	}
	held.Release()
	for range 6 {
		poll()
	}
	if kept.Polls != keptPolls || !kept.At.Equal(keptAt) || len(kept.Allocations) != 1 {
		t.Errorf("a snapshot from Snapshot changed: polls %d at %v, then %d at %v (%d allocations)",
			keptPolls, keptAt, kept.Polls, kept.At, len(kept.Allocations))
	}
	if s := h.e.Snapshot(); s.Polls != 17 || len(s.Allocations) != 1 || len(s.Devices) != 2 || len(s.Sources) != 2 {
		t.Errorf("latest snapshot: %d polls, %d allocations, %d devices, %d sources; want 17, 1, 2, 2",
			s.Polls, len(s.Allocations), len(s.Devices), len(s.Sources))
	}
}

// TestSnapshotConcurrentReaders: readers that acquire snapshots while the
// engine polls each see one whole snapshot that does not change while they
// hold it (run with -race: the detector sees any write to a held one).
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
				s := h.e.AcquireSnapshot()
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
					t.Errorf("snapshot changed while held, or is not whole: polls %d → %d, allocations %d → %d, observed %v → %v",
						polls, s.Polls, n, len(s.Allocations), observed, again)
				}
				s.Release()
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
