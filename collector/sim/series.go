package sim

import (
	"sort"
	"time"
)

// series is a piecewise-constant function of scenario time: val[i] holds on
// [at[i], at[i+1]) and the last value holds for ever after. at[0] is always 0
// and the function is 0 before it, so integrals from the scenario start need
// no special case. Integrals are kept as prefix sums because the simulated
// driver asks for hundreds of short averages per poll.
type series struct {
	at  []time.Duration
	val []float64
	cum []float64 // cum[i] is the integral over [0, at[i]), in value·seconds
}

// newSeries builds a series from breakpoints that are ascending and start at 0.
func newSeries(at []time.Duration, val []float64) series {
	s := series{at: at, val: val, cum: make([]float64, len(at))}
	for i := 1; i < len(at); i++ {
		s.cum[i] = s.cum[i-1] + val[i-1]*(at[i]-at[i-1]).Seconds()
	}
	return s
}

// stepSeries is the series of a step list: 0 until the first step, each value
// until the next step. A later step at the same time wins.
func stepSeries(steps []Step) series {
	sorted := append([]Step(nil), steps...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].At < sorted[j].At })
	at, val := []time.Duration{0}, []float64{0}
	for _, st := range sorted {
		if st.At < 0 {
			continue
		}
		if at[len(at)-1] == st.At {
			val[len(val)-1] = st.Value
			continue
		}
		at, val = append(at, st.At), append(val, st.Value)
	}
	return newSeries(at, val)
}

// combine samples f at every breakpoint (plus 0) and holds each value until
// the next breakpoint. It is exact when f is constant between breakpoints,
// which holds for any sum, cap or window of series whose breakpoints are given.
func combine(breaks []time.Duration, f func(time.Duration) float64) series {
	bs := append([]time.Duration{0}, breaks...)
	sort.Slice(bs, func(i, j int) bool { return bs[i] < bs[j] })
	var at []time.Duration
	var val []float64
	for _, b := range bs {
		if b < 0 || (len(at) > 0 && at[len(at)-1] == b) {
			continue
		}
		v := f(b)
		if len(val) > 0 && val[len(val)-1] == v {
			continue
		}
		at, val = append(at, b), append(val, v)
	}
	return newSeries(at, val)
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
	return s.val[i]
}

// prefix is the integral over [0, t), in value·seconds.
func (s series) prefix(t time.Duration) float64 {
	i := s.index(t)
	if i < 0 {
		return 0
	}
	return s.cum[i] + s.val[i]*(t-s.at[i]).Seconds()
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
		if hi > lo && s.val[i] < th {
			secs += (hi - lo).Seconds()
		}
	}
	if a < 0 && th > 0 {
		secs += (min(b, 0) - a).Seconds()
	}
	return secs
}
