package report

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// minForecastWeeks is the least weeks of data a forecast rests on: two
// points make any line, three show whether one fits.
const minForecastWeeks = 3

// forecastHorizon is how far ahead the range's trend is followed.
const forecastHorizon = 2 * 365 * 24 * time.Hour

// week is seven days.
const week = 7 * 24 * time.Hour

// Forecast is when, at the range's trend, each GPU type's shortfall after
// reclaiming exceeds zero (docs/report.md, "The buy date").
type Forecast struct {
	GPUTypes []ForecastType `json:"gpu_types"`
	// EnoughData is false when the data covers fewer than three weeks:
	// then nothing is extrapolated and GPUTypes is empty.
	EnoughData bool `json:"enough_data"`
	// Weeks is how many weeks of the range the data covers (at least half
	// of each).
	Weeks int `json:"weeks"`
	// Confidence is the two-sided confidence of the earliest–latest range.
	Confidence float64 `json:"confidence"`
}

// ForecastType is one GPU type's trend: its weekly peaks of pending
// demand less reclaimable capacity, the line through them, and the date
// that line crosses zero, with the range in which the line's confidence
// band crosses it.
type ForecastType struct {
	GPUType string `json:"gpu_type"`
	// ShortFrom is when the trend's shortfall after reclaiming exceeds
	// zero: a date after the range when it does not yet at the range's
	// end, else when the trend crossed zero (the first week of data at the
	// earliest); nil when it never does within two years.
	ShortFrom *time.Time `json:"short_from"`
	// ShortFromEarliest and ShortFromLatest bound it: where the upper and
	// the lower edge of the line's confidence band cross zero; the latest
	// is nil when the lower edge never does within two years (the data
	// cannot tell a growth from none).
	ShortFromEarliest *time.Time `json:"short_from_earliest"`
	ShortFromLatest   *time.Time `json:"short_from_latest"`
	// WeeklyGrowthGPUs is how many GPUs a week the weekly peak of pending
	// demand less reclaimable capacity grows (negative: shrinks).
	WeeklyGrowthGPUs float64 `json:"weekly_growth_gpus"`
	// Weeks are the weekly peaks the line is fitted to, oldest first.
	Weeks []ForecastWeek `json:"weeks"`
}

// ForecastWeek is one week's peak: the verdict's quantile, over the
// week's peak steps, of pending GPUs and of pending less reclaimable GPUs.
type ForecastWeek struct {
	Start       time.Time `json:"start"`
	PendingGPUs float64   `json:"pending_gpus"`
	NetGPUs     float64   `json:"net_gpus"`
}

// typeDemand is one GPU type's pending demand and reclaimable capacity at
// each step of the grid, in GPUs (NaN where unknown).
type typeDemand struct {
	gpuType              string
	pending, reclaimable []float64
}

// forecast fits each type's weekly peaks. Weeks are counted back from the
// grid's end; a week counts when the data covers at least half of it.
// peak is each step's share of peak time (a week without peak time is
// judged over all its steps), covered each step's covered seconds, q the
// verdict's quantile.
func forecast(g grid, peak, covered []float64, types []typeDemand, q float64) Forecast {
	const conf = 0.9
	f := Forecast{GPUTypes: []ForecastType{}, Confidence: conf}
	perWeek := int(week / g.step)
	type span struct{ from, to int }
	var weeks []span
	for to := g.n; to-perWeek >= 0; to -= perWeek {
		from := to - perWeek
		var cov float64
		for i := from; i < to; i++ {
			cov += covered[i]
		}
		if cov >= 0.5*week.Seconds() {
			weeks = append(weeks, span{from, to})
		}
	}
	slices.Reverse(weeks)
	f.Weeks = len(weeks)
	if len(weeks) < minForecastWeeks {
		return f
	}
	f.EnoughData = true
	end := g.at(g.n - 1)
	for _, td := range types {
		ft := ForecastType{GPUType: td.gpuType, Weeks: []ForecastWeek{}}
		var xs, ys []float64
		for _, w := range weeks {
			var net, pend, netAll, pendAll []float64
			for i := w.from; i < w.to; i++ {
				p, r := td.pending[i], td.reclaimable[i]
				if covered[i] <= 0 || math.IsNaN(p) || math.IsNaN(r) {
					continue
				}
				netAll, pendAll = append(netAll, p-r), append(pendAll, p)
				if peak[i] >= 0.5 {
					net, pend = append(net, p-r), append(pend, p)
				}
			}
			if len(net) == 0 {
				net, pend = netAll, pendAll
			}
			if len(net) == 0 {
				continue
			}
			start := g.at(w.from).Add(-g.step)
			fw := ForecastWeek{Start: start, PendingGPUs: Quantile(pend, q), NetGPUs: Quantile(net, q)}
			ft.Weeks = append(ft.Weeks, fw)
			// x: the week's middle, in weeks before the range's end.
			xs = append(xs, -end.Sub(start.Add(week/2)).Hours()/(7*24))
			ys = append(ys, fw.NetGPUs)
		}
		if len(xs) < minForecastWeeks {
			continue
		}
		fit := fitLine(xs, ys)
		ft.WeeklyGrowthGPUs = fit.b
		first := ft.Weeks[0].Start
		at := func(x float64) time.Time { return end.Add(time.Duration(x * float64(week))) }
		firstX := -end.Sub(first).Hours() / (7 * 24)
		horizonX := forecastHorizon.Hours() / (7 * 24)
		tq := tQuantile(1-(1-conf)/2, len(xs)-2)
		// crossing is the first x at which y(x) ≥ 0, scanning day by day
		// from the data's start when the trend is short at the range's end
		// (since when), else from the end (from when on); NaN for none
		// within the horizon.
		from := 0.0
		if fit.y(0) >= 0 {
			from = firstX
		}
		crossing := func(y func(x float64) float64) float64 {
			if y(from) >= 0 {
				return from
			}
			for x := from + 1.0/7; x <= horizonX; x += 1.0 / 7 {
				if y(x) < 0 {
					continue
				}
				// Bisect the day to the hour.
				lo, hi := x-1.0/7, x
				for hi-lo > 1.0/(7*24*4) {
					if mid := (lo + hi) / 2; y(mid) >= 0 {
						hi = mid
					} else {
						lo = mid
					}
				}
				return hi
			}
			return math.NaN()
		}
		pt := func(x float64) *time.Time {
			if math.IsNaN(x) {
				return nil
			}
			t := at(x).Round(time.Hour)
			if t.Before(first) {
				t = first
			}
			return &t
		}
		ft.ShortFrom = pt(crossing(fit.y))
		ft.ShortFromEarliest = pt(crossing(func(x float64) float64 { return fit.y(x) + tq*fit.se(x) }))
		ft.ShortFromLatest = pt(crossing(func(x float64) float64 { return fit.y(x) - tq*fit.se(x) }))
		f.GPUTypes = append(f.GPUTypes, ft)
	}
	return f
}

// line is a least-squares line y = a + b·x through n points, with what its
// confidence band needs.
type line struct {
	a, b, s, xbar, sxx float64
	n                  int
}

func fitLine(xs, ys []float64) line {
	n := float64(len(xs))
	var sx, sy float64
	for i := range xs {
		sx += xs[i]
		sy += ys[i]
	}
	l := line{n: len(xs), xbar: sx / n}
	ybar := sy / n
	var sxy float64
	for i := range xs {
		dx := xs[i] - l.xbar
		l.sxx += dx * dx
		sxy += dx * (ys[i] - ybar)
	}
	l.b = ratio(sxy, l.sxx)
	l.a = ybar - l.b*l.xbar
	if l.n > 2 {
		var sse float64
		for i := range xs {
			r := ys[i] - l.y(xs[i])
			sse += r * r
		}
		l.s = math.Sqrt(sse / (n - 2))
	}
	return l
}

func (l line) y(x float64) float64 { return l.a + l.b*x }

// se is the standard error of the line's mean at x.
func (l line) se(x float64) float64 {
	if l.sxx <= 0 {
		return math.Inf(1)
	}
	return l.s * math.Sqrt(1/float64(l.n)+(x-l.xbar)*(x-l.xbar)/l.sxx)
}

// tQuantile is Student's t quantile p (0.95) with dof degrees of freedom,
// from the table every statistics text prints; the normal's beyond 30.
func tQuantile(p float64, dof int) float64 {
	if p != 0.95 {
		panic(fmt.Sprintf("report: t quantile %g not tabled", p))
	}
	t95 := []float64{6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812, 1.796, 1.782, 1.771, 1.761, 1.753,
		1.746, 1.740, 1.734, 1.729, 1.725, 1.721, 1.717, 1.714, 1.711, 1.708, 1.706, 1.703, 1.701, 1.699, 1.697}
	switch {
	case dof < 1:
		return math.Inf(1)
	case dof <= len(t95):
		return t95[dof-1]
	}
	return 1.645
}
