package report

import (
	"math"
	"testing"
	"time"
)

// weeksOf builds n weeks of hourly steps from a Monday: peak 9–17 on
// weekdays, pending at level(week) GPUs at peak (0 off peak), reclaimable
// 6.5 GPUs throughout.
func weeksOf(n int, level func(week int) float64) (grid, []float64, []float64, []typeDemand) {
	start := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC) // a Monday
	g := grid{start: start, step: time.Hour, n: n * 7 * 24}
	peak, covered := make([]float64, g.n), make([]float64, g.n)
	td := typeDemand{gpuType: "NVIDIA-H100-80GB-HBM3", pending: make([]float64, g.n), reclaimable: make([]float64, g.n)}
	for i := 0; i < g.n; i++ {
		at := g.at(i).Add(-g.step)
		covered[i] = 3600
		td.reclaimable[i] = 6.5
		if wd := at.Weekday(); wd != time.Saturday && wd != time.Sunday && at.Hour() >= 9 && at.Hour() < 17 {
			peak[i] = 1
			td.pending[i] = level(i / (7 * 24))
		}
	}
	return g, peak, covered, []typeDemand{td}
}

// TestForecastCrossing: pending demand at peak grows a GPU a week (2, 3, 4,
// 5) against 6.5 reclaimable GPUs; the weekly peaks' line −4.5 + week
// crosses zero 4.5 weeks after the first week's middle: day 35.
func TestForecastCrossing(t *testing.T) {
	t.Parallel()
	g, peak, covered, tds := weeksOf(4, func(w int) float64 { return 2 + float64(w) })
	f := forecast(g, peak, covered, tds, 0.95)
	if !f.EnoughData || f.Weeks != 4 || len(f.GPUTypes) != 1 {
		t.Fatalf("forecast %+v", f)
	}
	ft := f.GPUTypes[0]
	approx(t, "weekly growth", ft.WeeklyGrowthGPUs, 1)
	want := g.start.Add(35 * 24 * time.Hour)
	for name, got := range map[string]*time.Time{"short_from": ft.ShortFrom, "earliest": ft.ShortFromEarliest, "latest": ft.ShortFromLatest} {
		if got == nil || got.Sub(want).Abs() > 24*time.Hour {
			t.Errorf("%s = %v, want %s within a day (an exact line has no spread)", name, got, want)
		}
	}
	if len(ft.Weeks) != 4 || ft.Weeks[0].NetGPUs != -4.5 || ft.Weeks[3].PendingGPUs != 5 || !ft.Weeks[0].Start.Equal(g.start) {
		t.Errorf("weeks %+v", ft.Weeks)
	}
}

// TestForecastRange: noisy weekly peaks spread the crossing into a range
// around the line's own crossing.
func TestForecastRange(t *testing.T) {
	t.Parallel()
	noise := []float64{0.4, -0.5, 0.3, -0.2, 0.1}
	g, peak, covered, tds := weeksOf(5, func(w int) float64 { return 2 + float64(w) + noise[w] })
	ft := forecast(g, peak, covered, tds, 0.95).GPUTypes[0]
	if ft.ShortFrom == nil || ft.ShortFromEarliest == nil || ft.ShortFromLatest == nil {
		t.Fatalf("forecast %+v", ft)
	}
	if !ft.ShortFromEarliest.Before(*ft.ShortFrom) || !ft.ShortFrom.Before(*ft.ShortFromLatest) {
		t.Errorf("earliest %s, from %s, latest %s: want them in order", ft.ShortFromEarliest, ft.ShortFrom, ft.ShortFromLatest)
	}
}

func TestForecastNotEnough(t *testing.T) {
	t.Parallel()
	g, peak, covered, tds := weeksOf(4, func(w int) float64 { return float64(w) })
	// Only the last two weeks covered: nothing is extrapolated.
	for i := 0; i < 2*7*24; i++ {
		covered[i] = 0
	}
	f := forecast(g, peak, covered, tds, 0.95)
	if f.EnoughData || f.Weeks != 2 || len(f.GPUTypes) != 0 {
		t.Errorf("forecast %+v, want not enough data over 2 weeks", f)
	}
}

// TestForecastFalling: demand that shrinks, short at the start but not at
// the end, is short from nothing; one that never nears the capacity too.
func TestForecastFalling(t *testing.T) {
	t.Parallel()
	for name, level := range map[string]func(int) float64{
		"falling": func(w int) float64 { return 9 - 2*float64(w) },
		"flat":    func(int) float64 { return 1 },
	} {
		g, peak, covered, tds := weeksOf(4, level)
		ft := forecast(g, peak, covered, tds, 0.95).GPUTypes[0]
		if ft.ShortFrom != nil || ft.ShortFromLatest != nil {
			t.Errorf("%s: short from %v, latest %v; want none", name, ft.ShortFrom, ft.ShortFromLatest)
		}
	}
	// Already short and growing: short from the first week.
	g, peak, covered, tds := weeksOf(3, func(w int) float64 { return 8 + float64(w) })
	ft := forecast(g, peak, covered, tds, 0.95).GPUTypes[0]
	if ft.ShortFrom == nil || !ft.ShortFrom.Equal(g.start) {
		t.Errorf("already short: from %v, want %s", ft.ShortFrom, g.start)
	}
}

func TestFitLine(t *testing.T) {
	t.Parallel()
	l := fitLine([]float64{0, 1, 2, 3}, []float64{1, 3, 5, 7})
	approx(t, "slope", l.b, 2)
	approx(t, "intercept", l.a, 1)
	approx(t, "spread", l.s, 0)
	if tQuantile(0.95, 1) != 6.314 || tQuantile(0.95, 100) != 1.645 || !math.IsInf(tQuantile(0.95, 0), 1) {
		t.Error("t table")
	}
}
