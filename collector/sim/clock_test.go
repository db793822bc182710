package sim

import (
	"testing"
	"time"
)

// TestLeadInClock: the clock stands on virtual time that Step moves, until a
// step would reach the wall clock; from then on it reads the wall clock,
// and it never runs backwards.
func TestLeadInClock(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 3, 9, 13, 0, 0, time.UTC)
	wall := NewVirtualClock(now)
	c := NewLeadInClock(wall, now.Add(-10*time.Second))
	if got := c.Now(); !got.Equal(now.Add(-10 * time.Second)) {
		t.Fatalf("a new clock reads %s, want its start", got)
	}
	prev := c.Now()
	steps := 0
	for c.Step(3 * time.Second) {
		steps++
		if got := c.Now(); !got.Equal(prev.Add(3 * time.Second)) {
			t.Fatalf("after step %d the clock reads %s, want %s", steps, got, prev.Add(3*time.Second))
		}
		prev = c.Now()
		wall.Advance(time.Second) // the wall clock moves on meanwhile, slower
	}
	// From -10s to -7s, -4s, -1s and +2s while the wall clock moves from 0s
	// to +4s; +5s would pass it.
	if steps != 4 {
		t.Errorf("%d steps before the clock caught up, want 4", steps)
	}
	if got := c.Now(); !got.Equal(wall.Now()) || got.Before(prev) {
		t.Errorf("caught up, the clock reads %s; want the wall clock's %s, not before %s", got, wall.Now(), prev)
	}
	wall.Advance(time.Minute)
	if c.Step(time.Second) || !c.Now().Equal(wall.Now()) {
		t.Errorf("a clock that caught up stepped or does not follow the wall clock: %s, wall %s", c.Now(), wall.Now())
	}

	live := NewLeadInClock(wall, wall.Now())
	if live.Step(time.Nanosecond) || !live.Now().Equal(wall.Now()) {
		t.Error("a clock started at the wall clock's now does not follow it")
	}
	forced := NewLeadInClock(wall, wall.Now().Add(-time.Hour))
	forced.GoLive()
	if !forced.Now().Equal(wall.Now()) {
		t.Error("GoLive does not switch to the wall clock")
	}
}
