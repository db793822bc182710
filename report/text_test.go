package report

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestHeaderDurations: the header writes the range and its peak time as
// durations (10m, 1h30m, 2d), never as float hours.
func TestHeaderDurations(t *testing.T) {
	end := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		hours, peak float64
		want        string
	}{
		{1.0 / 6, 0, "(10m range"},
		{1.5, 0.75, "(1h30m range"},
		{48, 18, "(2d range"},
		{170, 45.5, "(7d2h range"},
	} {
		r := &Report{Range: Range{Start: end.Add(-time.Duration(c.hours * float64(time.Hour))), End: end, Hours: c.hours, PeakHours: c.peak, Timezone: "UTC"}}
		r.Funnel.All.Hours, r.Funnel.Peak.Hours = c.hours, c.peak
		var b bytes.Buffer
		if err := WriteText(&b, r); err != nil {
			t.Fatal(err)
		}
		header, _, _ := strings.Cut(b.String(), "\n")
		if !strings.Contains(header, c.want) || strings.Contains(header, ".") {
			t.Errorf("%gh, %gh at peak: header %q, want %q and no fractional hours", c.hours, c.peak, header, c.want)
		}
		b.Reset()
		if err := WriteHTML(&b, r); err != nil {
			t.Fatal(err)
		}
		if want := strings.TrimPrefix(c.want, "(") + ", "; !strings.Contains(b.String(), want) {
			t.Errorf("%gh: the HTML page lacks %q", c.hours, want)
		}
	}
}

func TestHumanDuration(t *testing.T) {
	for _, c := range []struct {
		hours float64
		want  string
	}{
		{0, "0m"}, {0.001, "<1m"}, {1.0 / 6, "10m"}, {1, "1h"}, {1.5, "1h30m"}, {24, "1d"}, {48, "2d"}, {49.25, "2d1h15m"}, {168, "7d"},
	} {
		if got := humanDuration(c.hours); got != c.want {
			t.Errorf("humanDuration(%g) = %q, want %q", c.hours, got, c.want)
		}
	}
}
