package sim

import (
	"sync"
	"time"
)

// Clock tells the simulation what time it is on the scenario's wall clock.
type Clock interface {
	Now() time.Time
}

// VirtualClock is a Clock that moves only when told to, so replays and tests
// run a scenario second by second as fast as the CPU allows. It is safe for
// concurrent use.
type VirtualClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewVirtualClock returns a VirtualClock standing at start, usually the
// scenario's Start.
func NewVirtualClock(start time.Time) *VirtualClock {
	return &VirtualClock{now: start}
}

// Now returns the clock's current time.
func (c *VirtualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to t, backwards too (the simulated driver then simply
// has fewer samples).
func (c *VirtualClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// Advance moves the clock forward by d and returns the new time.
func (c *VirtualClock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

type realClock struct {
	start   time.Time
	created time.Time
}

// RealClock returns a Clock that runs in real time from start: scenario time
// 0 is the moment RealClock is called. It measures elapsed time on the
// monotonic clock, so a wall-clock step on the host does not jump the
// scenario.
func RealClock(start time.Time) Clock {
	return realClock{start: start, created: time.Now()}
}

func (c realClock) Now() time.Time {
	return c.start.Add(time.Since(c.created))
}

// LeadInClock is the clock of a live simulation that starts part-way into
// its scenario. It first stands on virtual time, which Step moves as fast
// as the agent can poll, so that the scenario's lead-in is played (and
// counted) in a moment; once that time has caught up with the wall clock it
// follows the wall clock for good. Its time never runs backwards. It is safe
// for concurrent use.
type LeadInClock struct {
	mu   sync.Mutex
	wall Clock
	now  time.Time
	live bool
}

// NewLeadInClock returns a LeadInClock standing at from, which is usually
// before wall's now; one at or after it follows wall from the start.
func NewLeadInClock(wall Clock, from time.Time) *LeadInClock {
	return &LeadInClock{wall: wall, now: from, live: !from.Before(wall.Now())}
}

// Now returns the virtual time until the clock has caught up, then the wall
// clock's.
func (c *LeadInClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.live {
		return c.wall.Now()
	}
	return c.now
}

// Step moves the virtual time forward by d and reports whether the clock is
// still virtual. A step that would reach the wall clock's now switches the
// clock to the wall clock instead, and so does every step after it.
func (c *LeadInClock) Step(d time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.live {
		return false
	}
	next := c.now.Add(d)
	if !next.Before(c.wall.Now()) {
		c.live = true
		return false
	}
	c.now = next
	return true
}

// GoLive makes the clock follow the wall clock from now on, wherever its
// virtual time stands.
func (c *LeadInClock) GoLive() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.live = true
}
