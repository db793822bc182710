package report

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteJSON writes the report as indented JSON (docs/report.md).
func WriteJSON(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

const timeFmt = "Mon 2006-01-02 15:04"

// missingFmt is to the second: a span without data ends at its data's
// first sample, which a minute would misplace.
const missingFmt = "Mon 2006-01-02 15:04:05"

// rankedOn says what the top workloads and models are ranked by.
func rankedOn(basis string) string {
	if basis == BasisAll {
		return " (the range has no peak time: over all hours)"
	}
	return " AT PEAK"
}

// withheldSentence says why some workloads have no right-sizing hint; ""
// when none was withheld.
func withheldSentence(h HintsWithheld) string {
	if h.Workloads == 0 {
		return ""
	}
	return fmt.Sprintf("%d %s withheld for lack of data: a hint needs %s of a workload's activity (the larger of --hints.min-time and --hints.min-share of the time covered); the longest so far is %s",
		h.Workloads, plural(h.Workloads, "hint", "hints"), humanDuration(h.MinHours), humanDuration(h.LongestHours))
}

// WriteText writes the report for a terminal.
func WriteText(w io.Writer, r *Report) error {
	loc, err := time.LoadLocation(r.Range.Timezone)
	if err != nil {
		loc = time.UTC
	}
	var b strings.Builder
	fmt.Fprintf(&b, "gpuxray capacity report: %s → %s %s (%s range, %s covered by gpuxray data, %s of it peak)\n",
		r.Range.Start.In(loc).Format(timeFmt), r.Range.End.In(loc).Format(timeFmt), r.Range.Timezone,
		humanDuration(r.Range.Hours), humanDuration(r.Funnel.All.Hours), humanDuration(r.Range.PeakHours))
	fmt.Fprintf(&b, "from %s\n", r.Prometheus)
	for _, w := range r.WarningsBySection.Range {
		fmt.Fprintf(&b, "  warning: %s\n", w)
	}
	b.WriteString("\n")

	fmt.Fprintf(&b, "VERDICT  %s\n", r.Verdict.Sentence)
	for _, l := range r.Verdict.Arithmetic {
		fmt.Fprintf(&b, "  · %s\n", l)
	}

	writeQueueText(&b, r.Queue)
	for _, w := range r.WarningsBySection.Queue {
		fmt.Fprintf(&b, "  warning: %s\n", w)
	}

	b.WriteString("\nGPU TIME\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	a, p := r.Funnel.All, r.Funnel.Peak
	fmt.Fprintf(tw, "\tall hours\t\tat peak\t\t\n")
	row := func(name string, all, peak float64) {
		fmt.Fprintf(tw, "  %s\t%s\t%.2f GPUs\t%s\t%.2f GPUs\t\n", name, gpuHours(all), a.GPUs(all), gpuHours(peak), p.GPUs(peak))
	}
	row("owned", a.Owned, p.Owned)
	row("allocated", a.Allocated, p.Allocated)
	row("active (utilization-weighted)", a.Active, p.Active)
	row("idle while allocated", a.Idle, p.Idle)
	row("unallocated", a.Unallocated, p.Unallocated)
	tw.Flush()
	fmt.Fprintf(&b, "  efficiency (active / allocated): %.0f%% over all hours, %.0f%% at peak\n", 100*a.Efficiency(), 100*p.Efficiency())

	fmt.Fprintf(&b, "\nTOP WORKLOADS BY IDLE GPU-HOURS%s\n", rankedOn(r.Ranking))
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  workload\tkind\tmodel\tidle at peak\tidle\tefficiency\tlongest idle streak\n")
	for _, x := range r.TopWorkloads {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%.0f%%\t%s\n", x.ID(), dash(x.Kind), dash(x.Model), gpuHours(x.PeakIdle), gpuHours(x.Idle), 100*x.Efficiency, humanSeconds(x.LongestIdleStreakSeconds))
	}
	tw.Flush()

	fmt.Fprintf(&b, "\nTOP MODELS BY IDLE GPU-HOURS%s\n", rankedOn(r.Ranking))
	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  model\tworkloads\tidle at peak\tidle\tefficiency\tlongest idle streak\n")
	for _, x := range r.TopModels {
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%.0f%%\t%s\n", x.Model, x.Workloads, gpuHours(x.PeakIdle), gpuHours(x.Idle), 100*x.Efficiency, humanSeconds(x.LongestIdleStreakSeconds))
	}
	tw.Flush()

	if len(r.Hints) > 0 || r.HintsWithheld.Workloads > 0 {
		b.WriteString("\nRIGHT-SIZING\n")
		for _, h := range r.Hints {
			fmt.Fprintf(&b, "  %s/%s: %s%s\n", h.Namespace, dash(h.Name), h.Message, hintSuffix(h, r.currency()))
		}
		if s := withheldSentence(r.HintsWithheld); s != "" {
			fmt.Fprintf(&b, "  %s\n", s)
		}
	}
	writeValueText(&b, r, loc)
	if len(r.Missing) > 0 || len(r.WarningsBySection.Data) > 0 {
		b.WriteString("\nPARTIAL DATA\n")
		for _, m := range r.Missing {
			fmt.Fprintf(&b, "  %s %s: no data %s → %s\n", m.Source, m.Instance, m.Start.In(loc).Format(missingFmt), m.End.In(loc).Format(missingFmt))
		}
		for _, w := range r.WarningsBySection.Data {
			fmt.Fprintf(&b, "  %s\n", w)
		}
	}
	_, err = io.WriteString(w, terminalSafe(b.String()))
	return err
}

// terminalSafe drops from s what a terminal would act on rather than show:
// control characters but newline (C0, DEL, C1: ESC and BEL retitle, clear
// or fake lines) and the bidirectional formatting characters that reorder
// a line. Label values come from Prometheus, which stores whatever a
// scraped target sent.
func terminalSafe(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\n':
			return r
		case r < 0x20, r >= 0x7f && r < 0xa0,
			r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069,
			r == 0x2028, r == 0x2029:
			return -1
		}
		return r
	}, s)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// gpuHours writes GPU-hours with the precision their magnitude needs
// (0.42, 4.2, 42, 1,234 GPU-h): the text and HTML reports use it for every
// GPU-hour figure, so a fraction of a GPU-hour never reads as 0.
func gpuHours(v float64) string { return gpuHoursNum(v) + " GPU-h" }

// gpuHoursNum is gpuHours without the unit.
func gpuHoursNum(v float64) string {
	a := math.Abs(v)
	switch {
	case a == 0:
		return "0"
	case a < 0.005:
		return "<0.01"
	case a < 0.995:
		return fmt.Sprintf("%.2f", v)
	case a < 9.95:
		return fmt.Sprintf("%.1f", v)
	}
	digits := fmt.Sprintf("%.0f", a)
	var b strings.Builder
	if v < 0 {
		b.WriteByte('-')
	}
	for i, c := range digits {
		if i > 0 && (len(digits)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// humanSeconds is a streak's length, "-" for none.
func humanSeconds(s float64) string {
	if s <= 0 {
		return "-"
	}
	return humanDuration(s / 3600)
}

// humanDuration writes hours to the minute as days, hours and minutes
// (10m, 1h30m, 2d): every duration of the report reads the same way.
func humanDuration(hours float64) string {
	if hours <= 0 {
		return "0m"
	}
	m := int(math.Round(hours * 60))
	if m == 0 {
		return "<1m"
	}
	var b strings.Builder
	for _, u := range []struct {
		n    int
		unit string
	}{{m / 1440, "d"}, {m / 60 % 24, "h"}, {m % 60, "m"}} {
		if u.n > 0 {
			fmt.Fprintf(&b, "%d%s", u.n, u.unit)
		}
	}
	return b.String()
}
