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
		t.Run(c.want, func(t *testing.T) {
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
		})
	}
}

func TestHumanDuration(t *testing.T) {
	for _, c := range []struct {
		hours float64
		want  string
	}{
		{0, "0m"}, {0.001, "<1m"}, {1.0 / 6, "10m"}, {1, "1h"}, {1.5, "1h30m"}, {24, "1d"}, {48, "2d"}, {49.25, "2d1h15m"}, {168, "7d"},
	} {
		t.Run(c.want, func(t *testing.T) {
			if got := humanDuration(c.hours); got != c.want {
				t.Errorf("humanDuration(%g) = %q, want %q", c.hours, got, c.want)
			}
		})
	}
}

func TestGPUHours(t *testing.T) {
	for _, c := range []struct {
		v    float64
		want string
	}{
		{0, "0 GPU-h"}, {0.004, "<0.01 GPU-h"}, {0.4, "0.40 GPU-h"}, {0.42, "0.42 GPU-h"}, {0.996, "1.0 GPU-h"},
		{4.2, "4.2 GPU-h"}, {9.96, "10 GPU-h"}, {42.4, "42 GPU-h"}, {999.6, "1,000 GPU-h"}, {1234.4, "1,234 GPU-h"}, {1234567, "1,234,567 GPU-h"},
	} {
		t.Run(c.want, func(t *testing.T) {
			if got := gpuHours(c.v); got != c.want {
				t.Errorf("gpuHours(%g) = %q, want %q", c.v, got, c.want)
			}
		})
	}
}

// TestFunnelPrecision: a fraction of a GPU-hour reads the same in the text
// and HTML funnels, never rounded to 0.
func TestFunnelPrecision(t *testing.T) {
	r := &Report{Range: Range{Hours: 1, Timezone: "UTC"}}
	r.Funnel.All = Funnel{Hours: 1, Owned: 3.3, Allocated: 2.9, Active: 1.2, Idle: 0.6, Unallocated: 0.4}
	r.TopWorkloads = []Workload{{Namespace: "ns", Name: "w", Usage: Usage{Allocated: 2.9, Idle: 0.6, PeakIdle: 0.06}}}
	var text, page bytes.Buffer
	if err := WriteText(&text, r); err != nil {
		t.Fatal(err)
	}
	if err := WriteHTML(&page, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"0.40 GPU-h", "3.3 GPU-h", "0.60 GPU-h", "0.06 GPU-h"} {
		for name, out := range map[string]string{"text": text.String(), "HTML": page.String()} {
			if !strings.Contains(out, want) {
				t.Errorf("%s report lacks %q", name, want)
			}
		}
	}
	if strings.Contains(page.String(), ">0 GPU-h") {
		t.Errorf("the HTML funnel rounds a fraction to 0 GPU-h")
	}
}

// TestTimelineDemandUnknown: without kube-state-metrics the chart draws no
// pending line (a 0 line would claim nothing waited) and says why.
func TestTimelineDemandUnknown(t *testing.T) {
	start := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	for _, available := range []bool{false, true} {
		r := &Report{Range: Range{Hours: 1, Timezone: "UTC"}, Demand: Demand{Available: available}}
		for i := range 4 {
			r.Timeline = append(r.Timeline, TimelinePoint{Start: start.Add(time.Duration(i) * 15 * time.Minute), OwnedGPUs: 8, ReclaimableGPUs: 2, Covered: 1})
		}
		var page bytes.Buffer
		if err := WriteHTML(&page, r); err != nil {
			t.Fatal(err)
		}
		s := page.String()
		line, note := strings.Contains(s, `id="pending"`), strings.Contains(s, "pending demand unknown (no kube-state-metrics series)")
		if line != available || note == available || strings.Contains(s, "━ pending") != available {
			t.Errorf("demand available %v: pending line %v, note %v, legend %v", available, line, note, strings.Contains(s, "━ pending"))
		}
	}
}

// TestTextTerminalEscapes: a workload and model named with terminal
// escapes in Prometheus (ESC, BEL, a bidi override) are printed without
// them, while the report's own newlines stay. Before, the text report wrote
// them raw to whoever's terminal ran it.
func TestTextTerminalEscapes(t *testing.T) {
	end := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	r := &Report{Range: Range{Start: end.Add(-time.Hour), End: end, Hours: 1, Timezone: "UTC"}}
	r.TopWorkloads = []Workload{{Namespace: "ml\x1b[2J", Kind: "Job", Name: "train\x1b]0;pwned\x07", Model: "llama\u202e-3\u009b"}}
	r.TopModels = []Model{{Model: "bert\x1b[31m\r"}}
	var b bytes.Buffer
	if err := WriteText(&b, r); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, bad := range []string{"\x1b", "\x07", "\u202e", "\u009b", "\r"} {
		if strings.Contains(out, bad) {
			t.Errorf("the text report carries %q", bad)
		}
	}
	for _, want := range []string{"ml[2J/train]0;pwned", "llama-3", "bert[31m"} {
		if !strings.Contains(out, want) {
			t.Errorf("the text report lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "\n") < 5 {
		t.Errorf("the report's own lines are gone:\n%s", out)
	}
}
