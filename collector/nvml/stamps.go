package nvml

import (
	"cmp"
	"slices"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// stampClock maps one device's sample stamps to Unix time. nvml.h calls a
// stamp only a "CPU timestamp in microseconds"; most drivers stamp Unix
// time, but on Grace hosts stamps have been seen counting from boot
// (polarsignals/gpu-metrics-agent#36), which a reader checking stamps
// against the wall clock drops, every one.
//
// The clock is decided at the first read that carries stamps: Unix time
// when the newest is within a day of now (a boot-time stamp is decades
// off; an idle GPU's ring may hold hours-old samples), otherwise an offset
// learnt from the reads. Each read bounds it: from above, since its newest
// sample was stamped before the read answered; from below, since its
// oldest new sample, when it directly follows the previous read's newest
// (no period left out between, as a ring that runs dry while idle leaves
// them), was not there when the previous read answered. The lower bound is
// used once known, within the upper: each is within a sampling period,
// and the lower is tight when a read falls just before a sample is due.
//
// A read whose stamps the offset puts out of bounds is held back, unread,
// and the offset moved only when the next read agrees: the offset was
// anchored on an old sample, or the driver's clock jumped (a reload).
type stampClock struct {
	known bool
	// mapped is false while the stamps are Unix time (offset 0).
	mapped bool
	// offset is Unix microseconds less the stamp; hi and lo bound it.
	offset int64
	hi, lo int64
	hasLo  bool
	// prevAt is when the previous read used answered, in Unix
	// microseconds, and prevNewest its newest stamp.
	prevAt     int64
	prevNewest uint64
	// pending is an offset a held read proposed.
	pending    int64
	hasPending bool
}

// plausible finds the stamps that belong together among n stamps sorted
// ascending (at(i) is the i-th): the nonzero ones (zero marks an empty
// slot) within a ring's span of their median, so that one absurd stamp
// (nvtop #110 shows such entries) neither decides nor moves the clock. It
// returns their range [lo, hi] and how many there are.
func plausible(n int, at func(int) uint64) (lo, hi uint64, count int) {
	z := 0
	for z < n && at(z) == 0 {
		z++
	}
	if z == n {
		return 0, 0, 0
	}
	m := at(z + (n-z)/2)
	lo, hi = m-min(m, uint64(maxSampleAge.Microseconds())), m+uint64(maxSampleLead.Microseconds())
	first, last := -1, -1
	for i := z; i < n; i++ {
		if s := at(i); s >= lo && s <= hi {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	return at(first), at(last), last - first + 1
}

// observe decides or refines the clock from a read answered at now whose
// plausible stamps (n of them) range from oldest, the oldest new one, to
// newest, period apart at the closest (0: unknown). It returns false when
// the read is to be held back: the clock would put it out of bounds, and
// the change waits for the next read; and whether the clock was decided or
// moved.
func (c *stampClock) observe(oldest, newest uint64, n int, period uint64, now time.Time) (use, changed bool) {
	nowU := now.UnixMicro()
	hi := nowU - int64(newest)
	defer func() {
		if use {
			c.prevAt, c.prevNewest = nowU, newest
		}
	}()
	if !c.known {
		c.known = true
		if day := (24 * time.Hour).Microseconds(); hi > day || hi < -day {
			c.anchor(hi)
			return true, true
		}
		return true, false
	}
	if c.inBounds(newest, now) {
		c.hasPending = false
		if c.mapped {
			c.hi = min(c.hi, hi)
			if c.prevAt != 0 && period > 0 && oldest > c.prevNewest && oldest-c.prevNewest <= period+period/2 {
				lo := c.prevAt - int64(oldest)
				if !c.hasLo || lo > c.lo {
					c.lo, c.hasLo = lo, true
				}
			}
			c.offset = c.hi
			if c.hasLo && c.lo <= c.hi {
				c.offset = c.lo
			}
		}
		return true, false
	}
	if n < 2 {
		// One stamp out of bounds is more likely absurd than a new
		// clock: it is dropped as such.
		return true, false
	}
	lead := maxSampleLead.Microseconds()
	if c.hasPending && hi-c.pending <= lead && c.pending-hi <= lead {
		c.anchor(hi)
		return true, true
	}
	c.pending, c.hasPending = hi, true
	return false, false
}

// anchor starts the clock afresh at offset hi: stamps read now map to now.
func (c *stampClock) anchor(hi int64) {
	c.mapped, c.offset, c.hi, c.hasLo, c.hasPending = hi != 0, hi, hi, false, false
}

func (c *stampClock) inBounds(stamp uint64, now time.Time) bool {
	lo, hi := stampBounds(now.Add(-time.Duration(c.offset) * time.Microsecond))
	return stamp >= lo && stamp <= hi
}

// unix is a stamp's Unix time.
func (c *stampClock) unix(stamp uint64) time.Time {
	return time.UnixMicro(int64(stamp) + c.offset)
}

// stamp is the driver's stamp of Unix time t in microseconds, for a
// lastSeenTimeStamp; 0 stays 0 (every sample).
func (c *stampClock) stamp(unixMicro uint64) uint64 {
	if unixMicro == 0 {
		return 0
	}
	return uint64(max(int64(unixMicro)-c.offset, 1))
}

// mappedDevice is a device handle whose per-process samples are stamped,
// and asked for, in Unix time: readProcessSamples judges and converts
// stamps as Unix microseconds, and the device's clock may not be.
type mappedDevice struct {
	nvml.Device
	c     *stampClock
	clock Clock
}

// GetProcessUtilization asks the driver from lastSeen in its own clock and
// maps the stamps of its answer. Before the device's clock is known (no
// utilization sample has been read yet), the answer decides it.
func (m mappedDevice) GetProcessUtilization(lastSeen uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
	raw, ret := m.Device.GetProcessUtilization(m.c.stamp(lastSeen))
	if ret != nvml.SUCCESS {
		return raw, ret
	}
	slices.SortFunc(raw, func(a, b nvml.ProcessUtilizationSample) int { return cmp.Compare(a.TimeStamp, b.TimeStamp) })
	if !m.c.known {
		if lo, hi, n := plausible(len(raw), func(i int) uint64 { return raw[i].TimeStamp }); n > 0 {
			m.c.observe(lo, hi, n, 0, m.clock.Now())
		}
	}
	for i := range raw {
		if raw[i].TimeStamp != 0 {
			raw[i].TimeStamp = uint64(max(m.c.unix(raw[i].TimeStamp).UnixMicro(), 1))
		}
	}
	return raw, ret
}
