package sim

import (
	"sort"
	"time"
)

// series is a piecewise function of scenario time: segment i holds on
// [at[i], at[i+1]) and the last segment holds for ever after. A segment is
// either constant (val[i]) or, where duty[i] has a period, a duty cycle:
// duty[i].hi for the first busy of every period counted from duty[i].anchor,
// val[i] for the rest. at[0] is always 0 and the function is 0 before it, so
// integrals from the scenario start need no special case. Integrals are kept
// as prefix sums because the simulated driver asks for hundreds of short
// averages per poll; a duty cycle's integral over any span has a closed form,
// so averages stay exact however the span falls on its periods.
type series struct {
	at  []time.Duration
	val []float64
	cum []float64 // cum[i] is the integral over [0, at[i]), in value·seconds
	// duty is nil when every segment is constant.
	duty []duty
}

// duty is the periodic part of a segment: hi on [anchor+k·period,
// anchor+k·period+busy) for every whole k, the segment's val elsewhere.
// A zero period means a constant segment.
type duty struct {
	hi                   float64
	period, busy, anchor time.Duration
}

func (d duty) periodic() bool { return d.period > 0 }

// busyUpTo is how long the cycle is in its busy phase on [anchor, t); it is
// negative for t before the anchor, so differences are exact either way.
func (d duty) busyUpTo(t time.Duration) time.Duration {
	x := t - d.anchor
	k, r := x/d.period, x%d.period
	if r < 0 {
		k, r = k-1, r+d.period
	}
	return k*d.busy + min(r, d.busy)
}

// high reports whether the cycle is in its busy phase at t.
func (d duty) high(t time.Duration) bool {
	r := (t - d.anchor) % d.period
	if r < 0 {
		r += d.period
	}
	return r < d.busy
}

// edges appends the times in (a, b) where the cycle changes phase.
func (d duty) edges(a, b time.Duration, out []time.Duration) []time.Duration {
	x := a - d.anchor
	k := x / d.period
	if x%d.period < 0 {
		k--
	}
	for start := d.anchor + k*d.period; start < b; start += d.period {
		for _, e := range [2]time.Duration{start, start + d.busy} {
			if e > a && e < b {
				out = append(out, e)
			}
		}
	}
	return out
}

// newSeries builds a series from breakpoints that are ascending and start at
// 0; duty is nil or holds one entry per breakpoint.
func newSeries(at []time.Duration, val []float64, dt []duty) series {
	s := series{at: at, val: val, cum: make([]float64, len(at)), duty: dt}
	for i := 1; i < len(at); i++ {
		s.cum[i] = s.cum[i-1] + s.segIntegral(i-1, at[i-1], at[i])
	}
	return s
}

// segIntegral is the integral of segment i over [a, b), both within it.
func (s series) segIntegral(i int, a, b time.Duration) float64 {
	if s.duty == nil || !s.duty[i].periodic() {
		return s.val[i] * (b - a).Seconds()
	}
	d := s.duty[i]
	busy := d.busyUpTo(b) - d.busyUpTo(a)
	return s.val[i]*(b-a-busy).Seconds() + d.hi*busy.Seconds()
}

// stepSeries is the series of a step list: 0 until the first step, each value
// (or duty cycle, anchored at its step) until the next step. A later step at
// the same time wins.
func stepSeries(steps []Step) series {
	sorted := append([]Step(nil), steps...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].At < sorted[j].At })
	at, val, dt := []time.Duration{0}, []float64{0}, []duty{{}}
	periodic := false
	for _, st := range sorted {
		if st.At < 0 {
			continue
		}
		v, d := st.Value, duty{}
		if st.Duty != nil {
			v, d = st.Duty.Idle, duty{hi: st.Duty.Value, period: st.Duty.Period, busy: st.Duty.Busy, anchor: st.At}
			periodic = true
		}
		if at[len(at)-1] == st.At {
			val[len(val)-1], dt[len(dt)-1] = v, d
			continue
		}
		at, val, dt = append(at, st.At), append(val, v), append(dt, d)
	}
	if !periodic {
		dt = nil
	}
	return newSeries(at, val, dt)
}

// combine builds the series of f, a function of parts (sums, caps, windows
// of them) whose every change falls on a breakpoint of breaks or of a part,
// or on a phase change of a part's duty cycle. Between breakpoints it samples
// f; where one part runs a duty cycle it samples f in both phases and keeps
// the cycle; where several do, it cuts at each of their phase changes. The
// result is exact for such an f.
func combine(breaks []time.Duration, parts []series, f func(time.Duration) float64) series {
	bs := append([]time.Duration{0}, breaks...)
	for _, p := range parts {
		bs = append(bs, p.at...)
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i] < bs[j] })
	bs = compactNonNegative(bs)
	b := builder{}
	var cycling []duty
	var sub []time.Duration
	for j, lo := range bs {
		hi := time.Duration(1<<63 - 1)
		if j+1 < len(bs) {
			hi = bs[j+1]
		}
		cycling = cycling[:0]
		for _, p := range parts {
			if p.duty == nil {
				continue
			}
			if i := p.index(lo); i >= 0 && p.duty[i].periodic() {
				cycling = append(cycling, p.duty[i])
			}
		}
		switch len(cycling) {
		case 0:
			b.add(lo, f(lo), duty{})
		case 1:
			d := cycling[0]
			tHi, tLo, okHi, okLo := phaseTimes(d, lo, hi)
			switch {
			case okHi && okLo:
				d.hi = f(tHi)
				b.add(lo, f(tLo), d)
			case okHi:
				b.add(lo, f(tHi), duty{})
			default:
				b.add(lo, f(tLo), duty{})
			}
		default:
			if hi == time.Duration(1<<63-1) {
				panic("sim: overlapping duty cycles must end")
			}
			sub = append(sub[:0], lo)
			for _, d := range cycling {
				sub = d.edges(lo, hi, sub)
			}
			sort.Slice(sub, func(i, j int) bool { return sub[i] < sub[j] })
			for _, t := range compactNonNegative(sub) {
				b.add(t, f(t), duty{})
			}
		}
	}
	return b.series()
}

// phaseTimes finds a time in [lo, hi) where d is high and one where it is low.
func phaseTimes(d duty, lo, hi time.Duration) (tHi, tLo time.Duration, okHi, okLo bool) {
	r := (lo - d.anchor) % d.period
	if r < 0 {
		r += d.period
	}
	if r < d.busy {
		tHi, okHi = lo, true
		tLo = lo + (d.busy - r)
		okLo = tLo < hi && d.busy < d.period
	} else {
		tLo, okLo = lo, true
		tHi = lo + (d.period - r)
		okHi = tHi < hi
	}
	return
}

func compactNonNegative(bs []time.Duration) []time.Duration {
	out := bs[:0]
	for _, b := range bs {
		if b < 0 || (len(out) > 0 && out[len(out)-1] == b) {
			continue
		}
		out = append(out, b)
	}
	return out
}

// builder appends segments, merging one equal to the last and turning a
// cycle whose two values agree into a constant.
type builder struct {
	at       []time.Duration
	val      []float64
	dt       []duty
	periodic bool
}

func (b *builder) add(t time.Duration, v float64, d duty) {
	if d.periodic() && (d.hi == v || d.busy == 0) {
		d = duty{}
	}
	if d.periodic() && d.busy >= d.period {
		v, d = d.hi, duty{}
	}
	if n := len(b.val); n > 0 && b.val[n-1] == v && b.dt[n-1] == d {
		return
	}
	b.at, b.val, b.dt = append(b.at, t), append(b.val, v), append(b.dt, d)
	b.periodic = b.periodic || d.periodic()
}

func (b *builder) series() series {
	if !b.periodic {
		b.dt = nil
	}
	return newSeries(b.at, b.val, b.dt)
}

// index is the segment holding t, or -1 before the scenario start.
func (s series) index(t time.Duration) int {
	return sort.Search(len(s.at), func(i int) bool { return s.at[i] > t }) - 1
}

// value is the function at t (right-continuous: a step at t already counts).
func (s series) value(t time.Duration) float64 {
	i := s.index(t)
	if i < 0 {
		return 0
	}
	if s.duty != nil && s.duty[i].periodic() && s.duty[i].high(t) {
		return s.duty[i].hi
	}
	return s.val[i]
}

// prefix is the integral over [0, t), in value·seconds.
func (s series) prefix(t time.Duration) float64 {
	i := s.index(t)
	if i < 0 {
		return 0
	}
	return s.cum[i] + s.segIntegral(i, s.at[i], t)
}

// integral is the integral over [a, b), in value·seconds.
func (s series) integral(a, b time.Duration) float64 {
	if b <= a {
		return 0
	}
	return s.prefix(b) - s.prefix(a)
}

// below is how many seconds of [a, b) the function is under th.
func (s series) below(th float64, a, b time.Duration) float64 {
	if b <= a {
		return 0
	}
	var secs float64
	for i := range s.at {
		lo, hi := s.at[i], b
		if i+1 < len(s.at) {
			hi = s.at[i+1]
		}
		lo, hi = max(lo, a), min(hi, b)
		if hi <= lo {
			continue
		}
		if s.duty == nil || !s.duty[i].periodic() {
			if s.val[i] < th {
				secs += (hi - lo).Seconds()
			}
			continue
		}
		d := s.duty[i]
		busy := d.busyUpTo(hi) - d.busyUpTo(lo)
		if s.val[i] < th {
			secs += (hi - lo - busy).Seconds()
		}
		if d.hi < th {
			secs += busy.Seconds()
		}
	}
	if a < 0 && th > 0 {
		secs += (min(b, 0) - a).Seconds()
	}
	return secs
}
