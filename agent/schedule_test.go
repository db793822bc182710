package agent

import (
	"strings"
	"testing"
	"time"
)

func mustZone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("time zone %s: %v", name, err)
	}
	return loc
}

// splitTotals splits [from, to) and sums each window, checking that the parts
// are positive, alternate, and add up to the interval, and that Durations
// gives the same sums.
func splitTotals(t testing.TB, w *Schedule, from, to time.Time) (peak, offpeak time.Duration) {
	t.Helper()
	var parts int
	last := NumWindows
	w.Split(from, to, func(win Window, d time.Duration) {
		parts++
		if d <= 0 && to.After(from) {
			t.Errorf("Split(%s, %s) emitted a part of %s", from, to, d)
		}
		if win == last {
			t.Errorf("Split(%s, %s) emitted two consecutive %s parts", from, to, win)
		}
		last = win
		if win == Peak {
			peak += d
		} else {
			offpeak += d
		}
	})
	if parts == 0 {
		t.Errorf("Split(%s, %s) emitted nothing", from, to)
	}
	if got := peak + offpeak; got != to.Sub(from) {
		t.Errorf("Split(%s, %s) parts add up to %s, want %s", from, to, got, to.Sub(from))
	}
	if d := w.Durations(from, to); d[Peak] != peak || d[Offpeak] != offpeak {
		t.Errorf("Durations(%s, %s) = peak %s, off-peak %s; Split's parts add up to %s, %s", from, to, d[Peak], d[Offpeak], peak, offpeak)
	}
	return peak, offpeak
}

func TestScheduleSplit(t *testing.T) {
	t.Parallel()
	// 2026-11-30 is a Monday.
	utc := func(day, h, m int) time.Time { return time.Date(2026, 11, 30+day, h, m, 0, 0, time.UTC) }
	berlin, ny := mustZone(t, "Europe/Berlin"), mustZone(t, "America/New_York")
	tests := []struct {
		name     string
		spec     string
		loc      *time.Location
		from, to time.Time
		peak     time.Duration
	}{
		{"default, one weekday", DefaultPeakSchedule, nil, utc(0, 0, 0), utc(1, 0, 0), 9 * time.Hour},
		{"default, whole week", DefaultPeakSchedule, nil, utc(0, 0, 0), utc(7, 0, 0), 45 * time.Hour},
		{"default, weekend", DefaultPeakSchedule, nil, utc(5, 0, 0), utc(7, 0, 0), 0},
		{"period across 09:00", DefaultPeakSchedule, nil, utc(0, 8, 59).Add(50 * time.Second), utc(0, 9, 0).Add(110 * time.Millisecond), 110 * time.Millisecond},
		{"period across 18:00", DefaultPeakSchedule, nil, utc(0, 17, 59).Add(59900 * time.Millisecond), utc(0, 18, 0).Add(time.Second), 100 * time.Millisecond},
		{"inside peak", DefaultPeakSchedule, nil, utc(2, 10, 0), utc(2, 10, 0).Add(time.Second / 6), time.Second / 6},
		{"ends exactly at 09:00", DefaultPeakSchedule, nil, utc(0, 8, 0), utc(0, 9, 0), 0},
		{"starts exactly at 18:00", DefaultPeakSchedule, nil, utc(0, 18, 0), utc(0, 19, 0), 0},
		{"two ranges and Saturday", "Mon-Fri 08:00-12:30,13:30-19:00; Sat 10:00-14:00", nil, utc(0, 0, 0), utc(7, 0, 0), 5*10*time.Hour + 4*time.Hour},
		{"lunch break is off-peak", "Mon-Fri 08:00-12:30,13:30-19:00", nil, utc(0, 12, 0), utc(0, 14, 0), time.Hour},
		{"overnight", "Mon-Fri 22:00-06:00", nil, utc(0, 0, 0), utc(7, 0, 0), 5 * 8 * time.Hour},
		{"overnight belongs to its first day", "Mon 22:00-06:00", nil, utc(1, 0, 0), utc(1, 12, 0), 6 * time.Hour},
		{"Saturday overnight wraps to Sunday", "Sat 22:00-06:00", nil, utc(6, 0, 0), utc(7, 0, 0), 6 * time.Hour},
		{"Saturday overnight from the week's start", "Sat 22:00-06:00", nil, utc(-1, 0, 0), utc(-1, 12, 0), 6 * time.Hour},
		{"no days: every day", "07:00-09:00", nil, utc(0, 0, 0), utc(7, 0, 0), 14 * time.Hour},
		{"day range wraps", "Fri-Mon 00:00-24:00", nil, utc(0, 0, 0), utc(7, 0, 0), 4 * 24 * time.Hour},
		{"whole week", "Mon-Sun 00:00-24:00", nil, utc(0, 0, 0), utc(14, 0, 0), 14 * 24 * time.Hour},
		{"overlapping rules merge", "Mon 09:00-12:00; Mon 11:00-13:00", nil, utc(0, 0, 0), utc(1, 0, 0), 4 * time.Hour},
		{"none", "none", nil, utc(0, 0, 0), utc(7, 0, 0), 0},
		{"empty", "", nil, utc(0, 0, 0), utc(7, 0, 0), 0},
		{"lower case and full names", "monday-friday 09:00-18:00", nil, utc(0, 0, 0), utc(7, 0, 0), 45 * time.Hour},
		{"Berlin in winter is UTC+1", DefaultPeakSchedule, berlin, utc(0, 8, 0), utc(0, 9, 0), time.Hour},
		{"Berlin, no peak after 17:00 UTC", DefaultPeakSchedule, berlin, utc(0, 17, 0), utc(0, 18, 0), 0},
		{"New York, a week", DefaultPeakSchedule, ny, utc(0, 0, 0), utc(7, 0, 0), 45 * time.Hour},
		// Europe/Berlin: summer time from 2026-03-29 02:00 (→03:00) to 2026-10-25 03:00 (→02:00).
		{"spring forward: a 23-hour Sunday", "Sun 00:00-24:00", berlin,
			time.Date(2026, 3, 28, 0, 0, 0, 0, time.UTC), time.Date(2026, 3, 31, 0, 0, 0, 0, time.UTC), 23 * time.Hour},
		{"fall back: a 25-hour Sunday", "Sun 00:00-24:00", berlin,
			time.Date(2026, 10, 24, 0, 0, 0, 0, time.UTC), time.Date(2026, 10, 27, 0, 0, 0, 0, time.UTC), 25 * time.Hour},
		{"spring forward: 01:00-04:00 lasts two hours", "Sun 01:00-04:00", berlin,
			time.Date(2026, 3, 28, 0, 0, 0, 0, time.UTC), time.Date(2026, 3, 30, 0, 0, 0, 0, time.UTC), 2 * time.Hour},
		{"fall back: 01:00-04:00 lasts four hours", "Sun 01:00-04:00", berlin,
			time.Date(2026, 10, 24, 0, 0, 0, 0, time.UTC), time.Date(2026, 10, 26, 0, 0, 0, 0, time.UTC), 4 * time.Hour},
		{"week of the spring change keeps 45 office hours", DefaultPeakSchedule, ny,
			time.Date(2026, 3, 2, 0, 0, 0, 0, ny), time.Date(2026, 3, 16, 0, 0, 0, 0, ny), 90 * time.Hour},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := ParseSchedule(tc.spec, tc.loc)
			if err != nil {
				t.Fatal(err)
			}
			peak, _ := splitTotals(t, s, tc.from, tc.to)
			if peak != tc.peak {
				t.Errorf("%q in %s over [%s, %s): peak %s, want %s", tc.spec, s.Location(), tc.from, tc.to, peak, tc.peak)
			}
		})
	}
}

// TestScheduleWallClock: the peak starts at 09:00 on the local wall clock on
// both sides of a change of the clocks.
func TestScheduleWallClock(t *testing.T) {
	t.Parallel()
	ny := mustZone(t, "America/New_York")
	s, err := ParseSchedule(DefaultPeakSchedule, ny)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		at   time.Time
		peak bool
	}{
		{time.Date(2026, 3, 6, 13, 59, 59, 0, time.UTC), false}, // Fri 08:59:59 EST
		{time.Date(2026, 3, 6, 14, 0, 0, 0, time.UTC), true},    // Fri 09:00 EST
		{time.Date(2026, 3, 9, 12, 59, 59, 0, time.UTC), false}, // Mon 08:59:59 EDT
		{time.Date(2026, 3, 9, 13, 0, 0, 0, time.UTC), true},    // Mon 09:00 EDT
		{time.Date(2026, 3, 9, 21, 59, 59, 0, time.UTC), true},  // Mon 17:59:59 EDT
		{time.Date(2026, 3, 9, 22, 0, 0, 0, time.UTC), false},   // Mon 18:00 EDT
		{time.Date(2026, 3, 7, 15, 0, 0, 0, time.UTC), false},   // Saturday
	} {
		t.Run(tc.at.Format(time.RFC3339), func(t *testing.T) {
			if got := s.At(tc.at); got != tc.peak {
				t.Errorf("At(%s = %s) = %v, want %v", tc.at, tc.at.In(ny).Format(time.RFC1123), got, tc.peak)
			}
		})
	}
}

func TestParseScheduleErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ spec, want string }{
		{"Mon-Fri 9-18", `"9" is not a time of day as HH:MM`},
		{"Mon-Fri 09:00-25:00", `"25:00" is not a time of day between 00:00 and 24:00`},
		{"Mon-Fri 09:60-18:00", `"09:60" is not a time of day between 00:00 and 24:00`},
		{"Mon-Fry 09:00-18:00", `"Fry" is not a day`},
		{"Mon-Fri 09:00", `"09:00" is not a time range`},
		{"Mon-Fri 09:00-09:00", `range "09:00-09:00" is empty`},
		{"Mon-Fri 24:00-06:00", `starts at 24:00`},
		{"Mon - Fri 09:00-18:00", `want days and time ranges`},
		{"Mon-Fri 09:00-18:00; Sat 10:00-1400", `peak schedule rule "Sat 10:00-1400": "1400" is not a time of day`},
		{"Mon-Fri 09:00-18:00,", `"" is not a time range`},
		{"Mon-Fri 24:30-18:00", `"24:30" is not a time of day between`},
		{"Mon-Fri +9:00-18:00", `"+9:00" is not a time of day as HH:MM`},
	}
	for _, tc := range tests {
		t.Run(tc.spec, func(t *testing.T) {
			_, err := ParseSchedule(tc.spec, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ParseSchedule(%q) = %v, want an error containing %q", tc.spec, err, tc.want)
			}
		})
	}
}

func TestScheduleString(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		spec string
		loc  *time.Location
		want string
	}{
		{DefaultPeakSchedule, nil, "Mon-Fri 09:00-18:00 UTC"},
		{"", mustZone(t, "Asia/Tokyo"), "none Asia/Tokyo"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			s, err := ParseSchedule(tc.spec, tc.loc)
			if err != nil {
				t.Fatal(err)
			}
			if got := s.String(); got != tc.want {
				t.Errorf("String() = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestEngineSplitsAtPeakBoundary drives the engine across a peak window
// from 60s to 120s after t0 (a Tuesday, 08:00 UTC), with a read outage whose
// gap straddles the start of the window: samples, idle time, active time and
// the gap are each credited to the window they fell in.
func TestEngineSplitsAtPeakBoundary(t *testing.T) {
	t.Parallel()
	sched, err := ParseSchedule("Tue 08:01-08:02", time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Windows = sched
	// Idle until 90s, then fully busy; held for the whole run.
	h := newHarness(t, cfg, []func(time.Duration) float64{steps(90*time.Second, 0, 1)}, []holding{{"p", 0, 0, time.Hour}})
	h.dev.buffer = 6 // one second of samples: the outage below loses samples
	h.dev.down = func(d time.Duration) bool { return d > 55*time.Second && d < 65*time.Second }
	s := h.run(180 * time.Second)

	// The read at 65s sees samples from 64s on: [55s, 64s) is a gap, 5s of
	// it off-peak and 4s peak.
	a := findAlloc(s, "p")
	if a == nil {
		t.Fatal("allocation p missing")
	}
	for _, w := range []struct {
		win                     Window
		allocated, idle, active float64
	}{
		{Offpeak, 55 + 60, 55, 60}, // [0, 55s) idle, [120s, 180s) busy
		{Peak, 56, 26, 30},         // [64s, 90s) idle, [90s, 120s) busy
	} {
		c := a.Counters[w.win]
		near(t, w.win.String()+" allocated", c.Allocated, w.allocated)
		near(t, w.win.String()+" idle", c.Idle, w.idle)
		near(t, w.win.String()+" active", c.Active, w.active)
	}
	d := s.Devices[0]
	near(t, "offpeak gap", d.Counters[Offpeak].Gap, 5)
	near(t, "peak gap", d.Counters[Peak].Gap, 4)
	near(t, "peak observed", d.Counters[Peak].Observed, 56)
	near(t, "offpeak observed", d.Counters[Offpeak].Observed, 115)
}

func FuzzParseSchedule(f *testing.F) {
	for _, s := range []string{
		DefaultPeakSchedule,
		"Mon-Fri 08:00-12:30,13:30-19:00; Sat 10:00-14:00",
		"Mon-Fri 22:00-06:00",
		"Sat 22:00-06:00",
		"Fri-Mon 00:00-24:00",
		"07:00-09:00",
		"none",
		"",
		";;",
		"Mon,Wed,Fri 09:00-18:00;",
		"Mon-Fri 9-18",
		"Sun 23:59-00:00",
	} {
		f.Add(s, int64(0), int64(3600))
	}
	berlin := mustZone(f, "Europe/Berlin")
	f.Fuzz(func(t *testing.T, spec string, startSec, lenSec int64) {
		s, err := ParseSchedule(spec, berlin)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		// Any interval of up to two weeks around the spring change splits
		// into alternating parts that add up to it.
		base := time.Date(2026, 3, 22, 0, 0, 0, 0, time.UTC)
		from := base.Add(time.Duration(startSec%(14*86400)) * time.Second)
		to := from.Add(time.Duration(lenSec%(14*86400)) * time.Second)
		if to.Before(from) {
			from, to = to, from
		}
		peak, _ := splitTotals(t, s, from, to)
		if len(s.spans) == 0 && peak != 0 {
			t.Errorf("schedule %q has no peak but split %s as peak", spec, peak)
		}
		_ = s.String()
	})
}
