package agent

import "time"

// Window is a peak/off-peak window; windowed counters are kept per window.
type Window uint8

const (
	// Offpeak is all time outside the peak schedule.
	Offpeak Window = iota
	// Peak is time inside the peak schedule.
	Peak
	// NumWindows is the number of windows, for arrays indexed by Window.
	NumWindows
)

// String returns the window's label value.
func (w Window) String() string {
	if w == Peak {
		return "peak"
	}
	return "offpeak"
}

// Windows tells how an interval falls into the windows. Durations returns
// how much of [from, to) falls in each; the durations add up to to-from.
type Windows interface {
	Durations(from, to time.Time) [NumWindows]time.Duration
}

// AllOffpeak is the Windows that puts all time off-peak.
type AllOffpeak struct{}

// Durations puts the whole interval off-peak.
func (AllOffpeak) Durations(from, to time.Time) [NumWindows]time.Duration {
	return [NumWindows]time.Duration{Offpeak: to.Sub(from)}
}
