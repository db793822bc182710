package gpu

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"testing"
)

// clockTolerance is how far the newest sample's stamp may be from a clock
// at the call and still be called that clock: the ring's newest sample is
// at most a period old, and a call takes milliseconds.
const clockTolerance = 5.0

// PIDResult is what the per-process table said of one PID in a phase.
type PIDResult struct {
	PID  uint32 `json:"pid"`
	Role string `json:"role"`
	// Entries per call of the whole table (lastSeen 0) and of the calls
	// as the agent makes them (lastSeen = the device's newest stamp).
	AllMean, SinceMean float64
	AllMax, SinceMax   int
	// RefreshS is the median time between the PID's distinct stamps;
	// OnGrid the share of its stamps equal to a device sample's.
	RefreshS float64
	OnGrid   float64
	MeanSM   float64
	Stamps   int
}

// GPMPhase is GPM's metrics over one phase.
type GPMPhase struct {
	Phase                           string
	N                               int
	SMUtil, GraphicsUtil, Occupancy float64
	RatesGPU                        float64 // GetUtilizationRates' mean gpu percent, -1 if none
}

// DriverResult is what the driver probes settle.
type DriverResult struct {
	// Clock is "unix", "boot" or "offset …": which clock the sample
	// stamps are in; UnixOffsetS and BootOffsetS are the median newest
	// stamp minus each clock at the call.
	Clock                    string
	UnixOffsetS, BootOffsetS float64
	// Idle: calls in the idle phase, how many found nothing new
	// (NOT_FOUND), the ring's median depth, the median sample period and
	// the largest gap between consecutive stamps.
	IdleCalls, IdleDry int
	IdleRing           int
	IdlePeriodS        float64
	IdleMaxGapS        float64
	BusyRing           int
	BusyPeriodS        float64
	// Pair: the two processes of the pair phase.
	Pair []PIDResult
	GPM  []GPMPhase
	// IndexIsMinor says every GPU's NVML index equals its minor number.
	IndexIsMinor bool
	Devices      []DeviceID
	MIG          []MIGProbe
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func medianInt(xs []int) int {
	f := make([]float64, len(xs))
	for i, x := range xs {
		f[i] = float64(x)
	}
	return int(math.Round(median(f)))
}

// inPhase returns the calls within phase ph trimmed by Trim.
func inPhase(calls []DriverCall, ph Phase) []DriverCall {
	var out []DriverCall
	for _, c := range calls {
		if c.T > ph.Start+Trim && c.T <= ph.End-Trim {
			out = append(out, c)
		}
	}
	return out
}

// periods are the differences between consecutive distinct stamps of calls,
// in seconds, and the largest.
func periods(calls []DriverCall) ([]float64, float64) {
	var stamps []uint64
	for _, c := range calls {
		stamps = append(stamps, c.Stamps...)
	}
	slices.Sort(stamps)
	stamps = slices.Compact(stamps)
	var out []float64
	largest := 0.0
	for i := 1; i < len(stamps); i++ {
		d := float64(stamps[i]-stamps[i-1]) / 1e6
		out = append(out, d)
		largest = max(largest, d)
	}
	return out, largest
}

// AnalyzeDriver reads probes against the load's truth.
func AnalyzeDriver(p DriverProbes, truth []Phase) DriverResult {
	r := DriverResult{Devices: p.Devices, MIG: p.MIG, IndexIsMinor: len(p.Devices) > 0}
	for _, d := range p.Devices {
		r.IndexIsMinor = r.IndexIsMinor && d.Minor == d.Index
	}
	var du, db []float64
	for _, c := range p.Calls {
		if len(c.Stamps) == 0 {
			continue
		}
		newest := float64(slices.Max(c.Stamps)) / 1e6
		du = append(du, newest-c.T)
		if c.Boot > 0 {
			db = append(db, newest-c.Boot)
		}
	}
	r.UnixOffsetS, r.BootOffsetS = median(du), median(db)
	switch {
	case len(du) == 0:
		r.Clock = "no stamps"
	case math.Abs(r.UnixOffsetS) < clockTolerance:
		r.Clock = "unix"
	case len(db) > 0 && math.Abs(r.BootOffsetS) < clockTolerance:
		r.Clock = "boot"
	default:
		r.Clock = fmt.Sprintf("offset %+.1fs from Unix time", r.UnixOffsetS)
	}
	byName := map[string]Phase{}
	for _, ph := range truth {
		byName[ph.Name] = ph
	}
	ring := func(calls []DriverCall) int {
		var n []int
		for _, c := range calls {
			if c.Ring >= 0 {
				n = append(n, c.Ring)
			}
		}
		if len(n) == 0 {
			return -1
		}
		return medianInt(n)
	}
	if ph, ok := byName["idle"]; ok {
		calls := inPhase(p.Calls, ph)
		r.IdleCalls = len(calls)
		for _, c := range calls {
			if c.SamplesRet == "ERROR_NOT_FOUND" || len(c.Stamps) == 0 {
				r.IdleDry++
			}
		}
		r.IdleRing = ring(calls)
		ps, largest := periods(calls)
		r.IdlePeriodS, r.IdleMaxGapS = median(ps), largest
	}
	if ph, ok := byName["busy"]; ok {
		calls := inPhase(p.Calls, ph)
		r.BusyRing = ring(calls)
		ps, _ := periods(calls)
		r.BusyPeriodS = median(ps)
	}
	if ph, ok := byName["pair"]; ok {
		calls := inPhase(p.Calls, ph)
		grid := map[uint64]bool{}
		for _, c := range p.Calls {
			for _, s := range c.Stamps {
				grid[s] = true
			}
		}
		for _, who := range []struct {
			pid  uint32
			role string
		}{{ph.BusyPID, "busy"}, {ph.SpinPID, "one block"}} {
			if who.pid == 0 {
				continue
			}
			pr := PIDResult{PID: who.pid, Role: who.role}
			var all, since []float64
			var stamps []uint64
			var sm float64
			var nsm int
			for _, c := range calls {
				a, s := 0, 0
				for _, e := range c.ProcAll {
					if e.PID == who.pid {
						a++
						stamps = append(stamps, e.TS)
						sm += float64(e.SM)
						nsm++
					}
				}
				for _, e := range c.ProcSince {
					if e.PID == who.pid {
						s++
					}
				}
				all, since = append(all, float64(a)), append(since, float64(s))
				pr.AllMax, pr.SinceMax = max(pr.AllMax, a), max(pr.SinceMax, s)
			}
			pr.AllMean, pr.SinceMean = mean(all), mean(since)
			slices.Sort(stamps)
			stamps = slices.Compact(stamps)
			pr.Stamps = len(stamps)
			var gaps []float64
			on := 0
			for i, s := range stamps {
				if grid[s] {
					on++
				}
				if i > 0 {
					gaps = append(gaps, float64(s-stamps[i-1])/1e6)
				}
			}
			pr.RefreshS = median(gaps)
			if len(stamps) > 0 {
				pr.OnGrid = float64(on) / float64(len(stamps))
			}
			if nsm > 0 {
				pr.MeanSM = sm / float64(nsm)
			}
			r.Pair = append(r.Pair, pr)
		}
	}
	for _, ph := range truth {
		g := GPMPhase{Phase: ph.Name, RatesGPU: -1}
		var rates []float64
		for _, c := range inPhase(p.Calls, ph) {
			if c.RatesGPU >= 0 {
				rates = append(rates, float64(c.RatesGPU))
			}
			if c.GPM == nil || c.GPM.Ret != "SUCCESS" {
				continue
			}
			g.N++
			g.SMUtil += c.GPM.SMUtil
			g.GraphicsUtil += c.GPM.GraphicsUtil
			g.Occupancy += c.GPM.SMOccupancy
		}
		if g.N > 0 {
			g.SMUtil /= float64(g.N)
			g.GraphicsUtil /= float64(g.N)
			g.Occupancy /= float64(g.N)
		}
		if len(rates) > 0 {
			g.RatesGPU = mean(rates)
		}
		r.GPM = append(r.GPM, g)
	}
	return r
}

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// String is the "driver probes" section of results.txt.
func (r DriverResult) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "driver probes (issue #26)\n")
	fmt.Fprintf(&b, "sample clock: %s (newest stamp - Unix time: median %+.3fs; - CLOCK_BOOTTIME: %+.3fs)\n", r.Clock, r.UnixOffsetS, r.BootOffsetS)
	fmt.Fprintf(&b, "ring, GPU idle: %d of %d calls found no new sample (NOT_FOUND or empty); whole ring %d samples; period %.6fs; largest stamp gap %.3fs\n",
		r.IdleDry, r.IdleCalls, r.IdleRing, r.IdlePeriodS, r.IdleMaxGapS)
	fmt.Fprintf(&b, "ring, GPU busy: whole ring %d samples; period %.6fs\n", r.BusyRing, r.BusyPeriodS)
	if len(r.Pair) == 0 {
		fmt.Fprintf(&b, "per-process entries: no pair phase\n")
	}
	for _, p := range r.Pair {
		fmt.Fprintf(&b, "per-process entries, PID %d (%s): per call %.2f (max %d) of the whole table, %.2f (max %d) since the last device stamp; %d distinct stamps, refreshed every %.3fs (median); %.2f on the device's sample grid; mean smUtil %.1f\n",
			p.PID, p.Role, p.AllMean, p.AllMax, p.SinceMean, p.SinceMax, p.Stamps, p.RefreshS, p.OnGrid, p.MeanSM)
	}
	fmt.Fprintf(&b, "GPM and GetUtilizationRates by phase (percent):\n  %-6s %5s %8s %13s %12s %10s\n", "phase", "polls", "SM_UTIL", "GRAPHICS_UTIL", "SM_OCCUPANCY", "rates.gpu")
	for _, g := range r.GPM {
		if g.N == 0 {
			fmt.Fprintf(&b, "  %-6s %5d %8s %13s %12s %10.1f\n", g.Phase, 0, "-", "-", "-", g.RatesGPU)
			continue
		}
		fmt.Fprintf(&b, "  %-6s %5d %8.1f %13.1f %12.1f %10.1f\n", g.Phase, g.N, g.SMUtil, g.GraphicsUtil, g.Occupancy, g.RatesGPU)
	}
	fmt.Fprintf(&b, "index vs minor number: ")
	if r.IndexIsMinor {
		fmt.Fprintf(&b, "equal on all %d GPUs\n", len(r.Devices))
	} else {
		fmt.Fprintf(&b, "DIFFER\n")
	}
	for _, d := range r.Devices {
		fmt.Fprintf(&b, "  index %d minor %d %s %s mig=%v\n", d.Index, d.Minor, d.BusID, d.UUID, d.MIG)
	}
	migSeen := slices.ContainsFunc(r.Devices, func(d DeviceID) bool { return d.MIG })
	fmt.Fprintf(&b, "memory and process calls by identity")
	if !migSeen {
		fmt.Fprintf(&b, " (no GPU is in MIG mode: the MIG parent case is not measured here)")
	}
	fmt.Fprintf(&b, ":\n")
	for _, m := range r.MIG {
		if m.Skipped != "" {
			fmt.Fprintf(&b, "  %s: not run: %s\n", m.As, m.Skipped)
			continue
		}
		for _, c := range m.Calls {
			fmt.Fprintf(&b, "  %-38s %-24s %-30s %s\n", m.As, c.Device, c.Call, c.Ret)
		}
	}
	return b.String()
}

// TestAnalyzeDriver checks AnalyzeDriver on recorded shapes: a Unix clock
// with a dry ring while idle, and per-PID entries off the device's grid,
// refreshed every 2 s; a boot clock; index against minor number.
func TestAnalyzeDriver(t *testing.T) {
	t.Parallel()
	const t0 = 1_800_000_000.0
	truth := []Phase{
		{Name: "busy", Start: t0, End: t0 + 30},
		{Name: "idle", Start: t0 + 30, End: t0 + 60},
		{Name: "pair", Start: t0 + 60, End: t0 + 90, BusyPID: 100, SpinPID: 200},
		{Name: "tiny", Start: t0 + 90, End: t0 + 120},
	}
	const boot = 1000.0 // seconds since boot at t0
	var calls []DriverCall
	var dev uint64
	for s := 1.0; s < 120; s++ {
		now := t0 + s
		c := DriverCall{T: now, Boot: boot + s, Ring: -1, RatesGPU: 100}
		idle := now > t0+30 && now <= t0+60
		if !idle {
			// Six samples a second on the 1/6 s grid, stamped in Unix µs.
			for k := 1; k <= 6; k++ {
				dev = uint64((now-1)*1e6) + uint64(k)*166667
				c.Stamps = append(c.Stamps, dev)
			}
			c.SamplesRet = "SUCCESS"
		} else {
			c.SamplesRet, c.RatesGPU = "ERROR_NOT_FOUND", 0
		}
		if int(s)%5 == 0 {
			c.Ring = map[bool]int{true: 40, false: 120}[idle]
		}
		if now > t0+60 && now <= t0+90 {
			// PID 100 refreshed every 2 s, PID 200 every 4 s, off the grid.
			ts := func(every int) uint64 { return uint64((t0 + float64(int(s)/every*every) + 0.05) * 1e6) }
			c.ProcAll = []ProcEntry{{PID: 100, TS: ts(2), SM: 98}, {PID: 200, TS: ts(4), SM: 3}}
			c.ProcSince = []ProcEntry{{PID: 100, TS: ts(2), SM: 98}}
		}
		if now > t0+90 {
			c.GPM = &GPMRead{Ret: "SUCCESS", SMUtil: 0.8, GraphicsUtil: 99.5, SMOccupancy: 0.1}
		}
		calls = append(calls, c)
	}
	p := DriverProbes{Calls: calls, Devices: []DeviceID{{Index: 0, Minor: 0}, {Index: 1, Minor: 3}}}
	r := AnalyzeDriver(p, truth)
	if r.Clock != "unix" || math.Abs(r.UnixOffsetS) > 1 {
		t.Errorf("clock %q (%+.3f), want unix", r.Clock, r.UnixOffsetS)
	}
	if r.IdleCalls != 26 || r.IdleDry != 26 || r.IdleRing != 40 {
		t.Errorf("idle: %d calls, %d dry, ring %d; want 26, 26, 40", r.IdleCalls, r.IdleDry, r.IdleRing)
	}
	if r.BusyRing != 120 || math.Abs(r.BusyPeriodS-0.166667) > 1e-6 {
		t.Errorf("busy ring %d period %.6f, want 120 and 0.166667", r.BusyRing, r.BusyPeriodS)
	}
	if len(r.Pair) != 2 {
		t.Fatalf("pair %+v", r.Pair)
	}
	busy, spin := r.Pair[0], r.Pair[1]
	if busy.AllMean != 1 || busy.AllMax != 1 || busy.RefreshS != 2 || busy.OnGrid != 0 || busy.MeanSM != 98 || busy.SinceMean != 1 {
		t.Errorf("busy PID %+v, want one entry a call, refreshed every 2s, off the grid, smUtil 98", busy)
	}
	if spin.RefreshS != 4 || spin.SinceMean != 0 || spin.MeanSM != 3 {
		t.Errorf("one-block PID %+v, want refreshed every 4s, never since the device stamp, smUtil 3", spin)
	}
	tiny := r.GPM[3]
	if tiny.Phase != "tiny" || tiny.N != 26 || math.Abs(tiny.SMUtil-0.8) > 1e-9 || math.Abs(tiny.GraphicsUtil-99.5) > 1e-9 {
		t.Errorf("tiny GPM %+v", tiny)
	}
	if r.IndexIsMinor {
		t.Error("index 1 minor 3 read as equal")
	}
	out := r.String()
	for _, want := range []string{"sample clock: unix", "26 of 26 calls found no new sample", "PID 200 (one block)", "DIFFER", "not measured here"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}

	// The same stamps in a boot-time clock (DGX Spark's shape).
	for i := range calls {
		for k := range calls[i].Stamps {
			calls[i].Stamps[k] = calls[i].Stamps[k] - uint64(t0*1e6) + uint64(boot*1e6)
		}
	}
	if r := AnalyzeDriver(DriverProbes{Calls: calls}, truth); r.Clock != "boot" {
		t.Errorf("boot-time stamps: clock %q (unix %+.1f, boot %+.1f), want boot", r.Clock, r.UnixOffsetS, r.BootOffsetS)
	}
}
