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
