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

// Windows splits an interval at window boundaries. Split calls emit for each
// consecutive part of [from, to) with the part's window and length; the
// lengths add up to to-from.
type Windows interface {
	Split(from, to time.Time, emit func(w Window, d time.Duration))
}

// AllOffpeak is the Windows that puts all time off-peak.
type AllOffpeak struct{}

// Split emits the whole interval as off-peak.
func (AllOffpeak) Split(from, to time.Time, emit func(Window, time.Duration)) {
	emit(Offpeak, to.Sub(from))
}
