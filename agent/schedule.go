package agent

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DefaultPeakSchedule is the peak schedule of the agent's flags: office hours
// on weekdays.
const DefaultPeakSchedule = "Mon-Fri 09:00-18:00"

const (
	day  = 24 * time.Hour
	week = 7 * day
)

// Schedule is a weekly peak schedule in a time zone, read on the local wall
// clock: "Mon-Fri 09:00-18:00" in Europe/Berlin is peak from 09:00 to 18:00 as
// the clocks in Berlin show it, whatever their UTC offset that day. It
// implements Windows. The zero Schedule has no peak time.
type Schedule struct {
	spec string
	loc  *time.Location
	// spans are the peak parts of the week, as offsets from Sunday 00:00 on
	// the wall clock: sorted, disjoint, not touching, within [0, week).
	spans []span
}

type span struct{ from, to time.Duration }

// ParseSchedule parses a weekly schedule: rules separated by ";", each an
// optional list of days and a list of time ranges separated by ",".
//
//	Mon-Fri 09:00-18:00
//	Mon-Fri 08:00-12:30,13:30-19:00; Sat 10:00-14:00
//	Mon,Wed,Fri 22:00-06:00     (overnight: a range that ends before it starts
//	                             ends on the next day)
//	07:00-09:00                 (no days: every day)
//	none                        (no peak time at all; so is an empty schedule)
//
// Days are Mon, Tue, Wed, Thu, Fri, Sat, Sun (any case; full names too), and
// a day range may wrap (Fri-Mon). Times are HH:MM on the 24-hour clock;
// 24:00 ends a day. A range belongs to the day it starts on. The schedule is
// placed in loc (nil means UTC).
func ParseSchedule(spec string, loc *time.Location) (*Schedule, error) {
	if loc == nil {
		loc = time.UTC
	}
	s := &Schedule{spec: strings.TrimSpace(spec), loc: loc}
	if s.spec == "" || strings.EqualFold(s.spec, "none") {
		return s, nil
	}
	var raw []span
	for _, rule := range strings.Split(s.spec, ";") {
		rule = strings.TrimSpace(rule)
		if rule == "" {
			continue // a trailing ";"
		}
		spans, err := parseRule(rule)
		if err != nil {
			return nil, fmt.Errorf("peak schedule rule %q: %w", rule, err)
		}
		raw = append(raw, spans...)
	}
	s.spans = normalize(raw)
	return s, nil
}

// parseRule parses "DAYS RANGES" or "RANGES" into spans of the week.
func parseRule(rule string) ([]span, error) {
	fields := strings.Fields(rule)
	var days []int
	var ranges string
	switch len(fields) {
	case 1:
		days, ranges = []int{0, 1, 2, 3, 4, 5, 6}, fields[0]
	case 2:
		var err error
		if days, err = parseDays(fields[0]); err != nil {
			return nil, err
		}
		ranges = fields[1]
	default:
		return nil, fmt.Errorf("want days and time ranges such as \"Mon-Fri 09:00-18:00\" (no spaces inside either)")
	}
	var out []span
	for _, r := range strings.Split(ranges, ",") {
		from, to, err := parseRange(r)
		if err != nil {
			return nil, err
		}
		for _, d := range days {
			start := time.Duration(d)*day + from
			end := time.Duration(d)*day + to
			if to <= from {
				end += day // overnight: ends on the next day
			}
			out = append(out, span{start, end})
		}
	}
	return out, nil
}

var dayNames = []string{"sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"}

func parseDay(s string) (int, error) {
	l := strings.ToLower(s)
	for i, n := range dayNames {
		if l == n || l == n[:3] {
			return i, nil
		}
	}
	return 0, fmt.Errorf("%q is not a day (Mon, Tue, Wed, Thu, Fri, Sat, Sun)", s)
}

// parseDays parses "Mon-Fri", "Sat,Sun", "Fri-Mon" or "Mon-Wed,Fri".
func parseDays(s string) ([]int, error) {
	var days []int
	for _, part := range strings.Split(s, ",") {
		first, last, isRange := strings.Cut(part, "-")
		a, err := parseDay(first)
		if err != nil {
			return nil, err
		}
		b := a
		if isRange {
			if b, err = parseDay(last); err != nil {
				return nil, err
			}
		}
		for d := a; ; d = (d + 1) % 7 {
			if !slices.Contains(days, d) {
				days = append(days, d)
			}
			if d == b {
				break
			}
		}
	}
	return days, nil
}

// parseRange parses "HH:MM-HH:MM".
func parseRange(s string) (from, to time.Duration, err error) {
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		return 0, 0, fmt.Errorf("%q is not a time range such as 09:00-18:00", s)
	}
	if from, err = parseClock(a); err != nil {
		return 0, 0, err
	}
	if to, err = parseClock(b); err != nil {
		return 0, 0, err
	}
	if from == day {
		return 0, 0, fmt.Errorf("range %q starts at 24:00; start it at 00:00 on the next day", s)
	}
	if from == to {
		return 0, 0, fmt.Errorf("range %q is empty (for a whole day write 00:00-24:00)", s)
	}
	return from, to, nil
}

// parseClock parses "HH:MM", 00:00 to 24:00.
func parseClock(s string) (time.Duration, error) {
	hh, mm, ok := strings.Cut(s, ":")
	if !ok || len(hh) != 2 || len(mm) != 2 {
		return 0, fmt.Errorf("%q is not a time of day as HH:MM", s)
	}
	h, err1 := strconv.ParseUint(hh, 10, 8)
	m, err2 := strconv.ParseUint(mm, 10, 8)
	switch {
	case err1 != nil || err2 != nil:
		return 0, fmt.Errorf("%q is not a time of day as HH:MM", s)
	case h > 24 || m > 59 || (h == 24 && m != 0):
		return 0, fmt.Errorf("%q is not a time of day between 00:00 and 24:00", s)
	}
	return time.Duration(h)*time.Hour + time.Duration(m)*time.Minute, nil
}

// normalize wraps spans into [0, week), sorts them and merges those that
// overlap or touch.
func normalize(raw []span) []span {
	var in []span
	for _, s := range raw {
		if s.to > week { // Saturday overnight ends on Sunday morning
			in = append(in, span{s.from, week}, span{0, s.to - week})
		} else {
			in = append(in, s)
		}
	}
	slices.SortFunc(in, func(a, b span) int { return int(a.from - b.from) })
	var out []span
	for _, s := range in {
		if n := len(out); n > 0 && s.from <= out[n-1].to {
			out[n-1].to = max(out[n-1].to, s.to)
			continue
		}
		out = append(out, s)
	}
	return out
}

// String returns the schedule and its zone, for logs.
func (s *Schedule) String() string {
	spec := s.spec
	if len(s.spans) == 0 {
		spec = "none"
	}
	return spec + " " + s.loc.String()
}

// Location is the schedule's time zone.
func (s *Schedule) Location() *time.Location { return s.loc }

// At reports whether t is peak time.
func (s *Schedule) At(t time.Time) bool {
	in, _ := s.state(t.In(s.loc))
	return in
}

// state says whether the wall-clock time of lt is in a peak span, and how
// much wall-clock time is left until that changes (week when it never does).
func (s *Schedule) state(lt time.Time) (bool, time.Duration) {
	if len(s.spans) == 0 {
		return false, week
	}
	h, m, sec := lt.Clock()
	pos := time.Duration(lt.Weekday())*day + time.Duration(h)*time.Hour +
		time.Duration(m)*time.Minute + time.Duration(sec)*time.Second + time.Duration(lt.Nanosecond())
	for _, sp := range s.spans {
		switch {
		case pos < sp.from:
			return false, sp.from - pos
		case pos < sp.to:
			if sp.to == week && s.spans[0].from == 0 {
				if len(s.spans) == 1 {
					return true, week // peak all week
				}
				return true, week - pos + s.spans[0].to // peak continues past Sunday 00:00
			}
			return true, sp.to - pos
		}
	}
	return false, week - pos + s.spans[0].from
}

// Split emits the peak and off-peak parts of [from, to). Boundaries are found
// on the wall clock of the schedule's zone, one UTC-offset period at a time, so
// a day on which the clocks change has 23 or 25 hours and "09:00" is 09:00 as
// the clocks show it on either side of the change.
func (s *Schedule) Split(from, to time.Time, emit func(Window, time.Duration)) {
	if !to.After(from) || len(s.spans) == 0 {
		emit(Offpeak, to.Sub(from))
		return
	}
	var (
		cur    Window
		acc    time.Duration
		active bool
	)
	for t := from; t.Before(to); {
		lt := t.In(s.loc)
		in, left := s.state(lt)
		next := t.Add(left)
		if _, zoneEnd := lt.ZoneBounds(); !zoneEnd.IsZero() && zoneEnd.Before(next) {
			next = zoneEnd // the wall clock jumps there: look again
		}
		if next.After(to) {
			next = to
		}
		w := Offpeak
		if in {
			w = Peak
		}
		if active && w != cur {
			emit(cur, acc)
			acc = 0
		}
		cur, active = w, true
		acc += next.Sub(t)
		t = next
	}
	emit(cur, acc)
}

// Durations returns how much of [from, to) is off-peak and peak.
func (s *Schedule) Durations(from, to time.Time) [NumWindows]time.Duration {
	var d [NumWindows]time.Duration
	s.Split(from, to, func(w Window, part time.Duration) { d[w] += part })
	return d
}
