package report

import (
	"bytes"
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestPendingFromFirstScrape: the agents and kube-state-metrics were first
// scraped at 07:29:41, seven minutes before the report, and a pod waited
// for 2 GPUs all along. The first step's middle (07:29:11) falls before
// that scrape, yet the step's covered time counts: read there, demand was
// 1.38 GPUs. Read at the end of the step in which the data begins, it is 2,
// over an hour's range and over the default week's.
func TestPendingFromFirstScrape(t *testing.T) {
	t.Parallel()
	first := time.Date(2026, 12, 1, 7, 29, 41, 0, time.UTC) // a Tuesday
	end := first.Add(7 * time.Minute)
	n := node{instance: "node-a", gpus: 8, allocated: 6, from: first.Add(-15 * time.Second), to: end, interval: 15 * time.Second,
		peak: func(time.Time) bool { return true }}
	// A gauge is there from its first sample on (Prometheus' lookback of
	// 5m reaches past the end of these 7 minutes).
	pending := func(at time.Time) (float64, bool) { return 2, !at.Before(first) }
	api := startTimed(t, func(expr string, at time.Time, step time.Duration) []point {
		if expr == qWaitPods {
			if _, ok := pending(at); ok {
				return []point{{labels: map[string]string{"cluster": "", "namespace": "ns", "pod": "waiter-0"}, v: 2}}
			}
			return nil
		}
		return n.answer(expr, at, step, pending)
	}, n)
	for _, rng := range []time.Duration{time.Hour, 7 * 24 * time.Hour} {
		c := DefaultConfig()
		c.End, c.Range = end, rng
		r, err := Build(context.Background(), api, c)
		if err != nil {
			t.Fatal(err)
		}
		what := rangeName(rng) + ": "
		approx(t, what+"pending GPUs", r.Demand.PendingGPUs, 2)
		approx(t, what+"most pending at once", r.Demand.MaxPendingGPUs, 2)
		approx(t, what+"pending GPU-hours", r.Demand.PendingGPUHours, 2*r.Demand.Hours)
		approx(t, what+"the queue's pending GPU-hours", r.Queue.All.PendingGPUHours, 2*r.Funnel.All.Hours)
		for _, p := range r.Timeline {
			approx(t, what+"timeline pending GPUs at "+p.Start.Format("15:04:05"), p.PendingGPUs, 2)
		}
	}
}

func rangeName(d time.Duration) string {
	if d >= 24*time.Hour {
		return "the week"
	}
	return "the hour"
}

// TestOffPeakRange: a range with no peak time (Sunday night) is judged
// over all hours, and so are the rankings, the wasters chart and the queue
// legend, which say so (they read 0 at peak).
func TestOffPeakRange(t *testing.T) {
	t.Parallel()
	end := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC) // a Sunday
	n := node{instance: "node-a", gpus: 8, allocated: 3, from: end.Add(-2 * time.Hour), to: end, interval: 15 * time.Second}
	wl := func(name string) map[string]string {
		return map[string]string{"namespace": "ds", "workload_kind": "StatefulSet", "workload": name, "model": ""}
	}
	api := startTimed(t, func(expr string, at time.Time, step time.Duration) []point {
		o := n.overlap(at, step).Seconds()
		switch expr {
		case qWLAllocated, qWLIdle:
			return []point{{withLabel(wl("big"), "window", "offpeak"), 2 * o}, {withLabel(wl("small"), "window", "offpeak"), o}}
		case qWLActive:
			return []point{{withLabel(wl("big"), "window", "offpeak"), 0}, {withLabel(wl("small"), "window", "offpeak"), 0}}
		case qWaitPods:
			return []point{{labels: map[string]string{"cluster": "", "namespace": "ns", "pod": "waiter-0"}, v: 1}}
		case qQueueFree:
			return []point{{labels: map[string]string{"cluster": ""}, v: 5 * o}}
		}
		return n.answer(expr, at, step, func(time.Time) (float64, bool) { return 1, true })
	}, n)
	c := DefaultConfig()
	c.End, c.Range = end, 2*time.Hour
	r, err := Build(context.Background(), api, c)
	if err != nil {
		t.Fatal(err)
	}
	if r.Ranking != BasisAll || r.Demand.Basis != BasisAll || r.Queue.Basis != BasisAll {
		t.Errorf("ranking %q, demand on %q, queue on %q; want all three over all hours", r.Ranking, r.Demand.Basis, r.Queue.Basis)
	}
	if len(r.TopWorkloads) != 2 || r.TopWorkloads[0].Name != "big" {
		t.Fatalf("top workloads %+v, want big, then small", r.TopWorkloads)
	}
	approx(t, "big's idle GPU-hours", r.TopWorkloads[0].Idle, 4)
	approx(t, "the queue's free GPU-hours", r.Queue.All.FreeGPUHours, 2)

	var text, page bytes.Buffer
	if err := WriteText(&text, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"TOP WORKLOADS BY IDLE GPU-HOURS (the range has no peak time: over all hours)", "TOP MODELS BY IDLE GPU-HOURS (the range has no peak time: over all hours)"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("the text report lacks %q:\n%s", want, text.String())
		}
	}
	if err := WriteHTML(&page, r); err != nil {
		t.Fatal(err)
	}
	s := page.String()
	if !strings.Contains(s, "<h2>Top wasters: idle GPU-hours over all hours (the range has no peak time)</h2>") {
		t.Error("the wasters chart is titled at peak")
	}
	// Bars in proportion to idle GPU-hours over all hours: 4 and 2.
	bars := regexp.MustCompile(`class="bar" x="[0-9.]+" y="[0-9.]+" width="([0-9.]+)"`).FindAllStringSubmatch(s, -1)
	if len(bars) != 2 || bars[0][1] != "210" || bars[1][1] != "105" {
		t.Errorf("wasters' bars %q, want widths 210 and 105", bars)
	}
	if !strings.Contains(s, "on free GPUs · 2.0 GPU-h over all hours (the range has no peak time)") || strings.Contains(s, "GPU-h at peak</text>") {
		t.Errorf("the queue legend is not over all hours:\n%s", regexp.MustCompile(`<svg id="queue-chart".*?</svg>`).FindString(s))
	}
}

// TestWarningsWhereTheyBelong: a peak schedule that disagrees with the
// agents is said under the header, unknown priorities in the queue
// section; PARTIAL DATA holds missing data and the warnings about the data
// read, and is absent without them.
func TestWarningsWhereTheyBelong(t *testing.T) {
	t.Parallel()
	end := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	n := node{instance: "node-a", gpus: 8, allocated: 3, from: end.Add(-2 * time.Hour), to: end, interval: 15 * time.Second,
		peak: func(time.Time) bool { return true }}
	api := startTimed(t, func(expr string, at time.Time, step time.Duration) []point {
		if expr == qWaitPods {
			return []point{{labels: map[string]string{"cluster": "", "priority_class": "batch", "queue": ""}, v: 1}}
		}
		return n.answer(expr, at, step, func(time.Time) (float64, bool) { return 1, true })
	}, n)
	c := DefaultConfig()
	c.End, c.Range = end, time.Hour
	c.Peak, c.PeakSchedule = func(time.Time) bool { return false }, "Sat 00:00-00:01"
	r, err := Build(context.Background(), api, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.WarningsBySection.Range) != 1 || !strings.HasPrefix(r.WarningsBySection.Range[0], "the agents' peak window disagrees") ||
		len(r.WarningsBySection.Queue) != 1 || !strings.HasPrefix(r.WarningsBySection.Queue[0], "no gpuxray_priority_class_value series") ||
		len(r.WarningsBySection.Data) != 0 || len(r.Warnings) != 2 {
		t.Fatalf("warnings by section %+v, all %q", r.WarningsBySection, r.Warnings)
	}
	var text bytes.Buffer
	if err := WriteText(&text, r); err != nil {
		t.Fatal(err)
	}
	s := text.String()
	header, rest, _ := strings.Cut(s, "VERDICT")
	queue, _, _ := strings.Cut(rest, "GPU TIME")
	if !strings.Contains(header, "warning: the agents' peak window disagrees") || !strings.Contains(queue, "warning: no gpuxray_priority_class_value series") || strings.Contains(s, "PARTIAL DATA") {
		t.Errorf("warnings out of place:\n%s", s)
	}
	var page bytes.Buffer
	if err := WriteHTML(&page, r); err != nil {
		t.Fatal(err)
	}
	p := page.String()
	top, _, _ := strings.Cut(p, `id="verdict"`)
	_, card, _ := strings.Cut(p, `id="queue"`)
	card, _, _ = strings.Cut(card, `<div class="grid">`)
	if !strings.Contains(top, "warning: the agents&#39; peak window disagrees") || !strings.Contains(card, "warning: no gpuxray_priority_class_value series") || strings.Contains(p, `id="partial"`) {
		t.Errorf("the HTML report puts the warnings out of place")
	}
}

// TestHintsNeedData: right-sizing hints need the larger of an hour and 5%
// of the covered time of a workload's activity; the report says how many
// it withheld (a busy training job was told that a smaller model would
// free its GPU seven minutes into the demo).
func TestHintsNeedData(t *testing.T) {
	t.Parallel()
	const gib = 1 << 30
	end := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name         string
		covered, ran time.Duration
		hints        int
		withheld     HintsWithheld
		says         string
	}{
		{name: "eight minutes", covered: 8 * time.Minute, ran: 8 * time.Minute, withheld: HintsWithheld{Workloads: 1, MinHours: 1, LongestHours: 8.0 / 60},
			says: "1 hint withheld for lack of data: a hint needs 1h of a workload's activity (the larger of --hints.min-time and --hints.min-share of the time covered); the longest so far is 8m"},
		{name: "two hours", covered: 2 * time.Hour, ran: 2 * time.Hour, hints: 1, withheld: HintsWithheld{MinHours: 1}},
		{name: "three hours of a week", covered: 7 * 24 * time.Hour, ran: 3 * time.Hour, withheld: HintsWithheld{Workloads: 1, MinHours: 0.05 * 168, LongestHours: 3},
			says: "a hint needs 8h24m of a workload's activity"},
		{name: "ten hours of a week", covered: 7 * 24 * time.Hour, ran: 10 * time.Hour, hints: 1, withheld: HintsWithheld{MinHours: 0.05 * 168}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			n := node{instance: "node-a", gpus: 8, allocated: 1, from: end.Add(-c.covered), to: end, interval: 15 * time.Second}
			nb := node{from: end.Add(-c.ran), to: end}
			wl := map[string]string{"namespace": "ds", "workload_kind": "StatefulSet", "workload": "notebook", "model": ""}
			api := startTimed(t, func(expr string, at time.Time, step time.Duration) []point {
				o := nb.overlap(at, step).Seconds()
				if o > 0 {
					switch expr {
					case qWLAllocated, qWLIdle:
						return []point{{withLabel(wl, "window", "offpeak"), o}}
					case qWLActive:
						return []point{{withLabel(wl, "window", "offpeak"), 0}}
					case qWLMemory:
						return []point{{wl, 8 * gib}}
					case qWLMemoryTotal:
						return []point{{wl, 80 * gib}}
					case qWLGPU:
						return []point{{withLabel(withLabel(wl, "shared", "false"), "name", "NVIDIA H100 80GB HBM3"), 1}}
					}
				}
				return n.answer(expr, at, step, nil)
			}, n)
			cfg := DefaultConfig()
			cfg.End, cfg.Range = end, max(time.Hour, c.covered)
			if c.covered > 24*time.Hour {
				cfg.Step = time.Hour
			}
			r, err := Build(context.Background(), api, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Hints) != c.hints || r.HintsWithheld.Workloads != c.withheld.Workloads {
				t.Errorf("%d hints, %d withheld; want %d and %d", len(r.Hints), r.HintsWithheld.Workloads, c.hints, c.withheld.Workloads)
			}
			approx(t, "the time a hint needs", r.HintsWithheld.MinHours, c.withheld.MinHours)
			approx(t, "the longest activity withheld", r.HintsWithheld.LongestHours, c.withheld.LongestHours)
			approx(t, "the notebook's activity hours", r.TopWorkloads[0].ActivityHours, c.ran.Hours())
			var text bytes.Buffer
			if err := WriteText(&text, r); err != nil {
				t.Fatal(err)
			}
			if c.says != "" && !strings.Contains(text.String(), c.says) || c.says == "" && strings.Contains(text.String(), "withheld") {
				t.Errorf("the text report, want %q:\n%s", c.says, text.String())
			}
		})
	}
}

// TestPendingAcrossKSMOutage: kube-state-metrics was silent from 09:00 to
// 10:00 while the agents reported, and a pod waited for 2 GPUs all along.
// Demand is unknown in those steps, not 0: the demand, the queue and the
// timeline are judged over the time both sources cover (2 GPUs, not 1.5),
// and the report says over how much.
func TestPendingAcrossKSMOutage(t *testing.T) {
	t.Parallel()
	end := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC) // a Tuesday
	out0, out1 := end.Add(-3*time.Hour), end.Add(-2*time.Hour)
	n := node{instance: "node-a", gpus: 8, allocated: 6, from: end.Add(-4 * time.Hour), to: end, interval: 15 * time.Second,
		peak: func(time.Time) bool { return true }}
	pending := func(at time.Time) (float64, bool) { return 2, !at.After(out0) || !at.Before(out1) }
	api := startTimed(t, func(expr string, at time.Time, step time.Duration) []point {
		if expr == qWaitPods {
			if _, ok := pending(at); ok {
				return []point{{labels: map[string]string{"cluster": "", "namespace": "ns", "pod": "waiter-0"}, v: 2}}
			}
			return nil
		}
		return n.answer(expr, at, step, pending)
	}, n)
	c := DefaultConfig()
	c.End, c.Range = end, 4*time.Hour
	r, err := Build(context.Background(), api, c)
	if err != nil {
		t.Fatal(err)
	}
	// The steps ending 09:05 to 09:55 hold no kube-state-metrics sample.
	silent := 55.0 / 60
	approx(t, "hours covered", r.Funnel.All.Hours, 4)
	approx(t, "demand's hours", r.Demand.Hours, 4-silent)
	approx(t, "pending GPUs", r.Demand.PendingGPUs, 2)
	approx(t, "pending GPU-hours", r.Demand.PendingGPUHours, 2*(4-silent))
	approx(t, "the queue's hours", r.Queue.All.Hours, 4-silent)
	approx(t, "the queue's pending GPU-hours", r.Queue.All.PendingGPUHours, 2*(4-silent))
	unknown := 0
	for _, p := range r.Timeline {
		in := !p.Start.Before(out0) && p.Start.Before(out1.Add(-5*time.Minute))
		if in {
			unknown++
			if p.DemandCovered != 0 {
				t.Errorf("timeline at %s: demand covered %.2f during the outage, want 0", p.Start.Format("15:04"), p.DemandCovered)
			}
			continue
		}
		approx(t, "timeline demand covered at "+p.Start.Format("15:04"), p.DemandCovered, 1)
		approx(t, "timeline pending GPUs at "+p.Start.Format("15:04"), p.PendingGPUs, 2)
	}
	if unknown != 11 {
		t.Errorf("%d timeline points in the outage, want 11", unknown)
	}
	want := "kube-state-metrics was silent for 55m of the 4h the agents cover: pending demand, the queue and the verdict are judged over the 3h5m both cover"
	if !slices.Contains(r.WarningsBySection.Data, want) {
		t.Errorf("data warnings %q lack %q", r.WarningsBySection.Data, want)
	}
	var page bytes.Buffer
	if err := WriteHTML(&page, r); err != nil {
		t.Fatal(err)
	}
	// The pending line breaks over the outage: two runs, not one.
	pend := regexp.MustCompile(`<g id="pending"[^>]*>(.*?)</g>`).FindStringSubmatch(page.String())
	if pend == nil || strings.Count(pend[1], "<polyline") != 2 {
		t.Errorf("pending line %q, want two polylines around the outage", pend)
	}
}
