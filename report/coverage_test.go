package report

import (
	"bytes"
	"context"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestCoveredTime: an 8-GPU node whose data covers the last 21 minutes of
// an hour reads 8 GPUs owned, not 2.8: every mean is over the time the
// agents' data covers, and the peak figures with it.
func TestCoveredTime(t *testing.T) {
	t.Parallel()
	end := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC) // a Wednesday
	n := node{instance: "node-a", gpus: 8, allocated: 6, util: 0, from: end.Add(-21 * time.Minute), to: end, interval: 15 * time.Second,
		peak: func(time.Time) bool { return true }}
	api := startTimed(t, func(expr string, at time.Time, step time.Duration) []point { return n.answer(expr, at, step, nil) }, n)
	c := DefaultConfig()
	c.End, c.Range, c.Step = end, time.Hour, 5*time.Minute
	r, err := Build(context.Background(), api, c)
	if err != nil {
		t.Fatal(err)
	}
	a, p := r.Funnel.All, r.Funnel.Peak
	approx(t, "range hours", r.Range.Hours, 1)
	approx(t, "hours covered", a.Hours, 21.0/60)
	approx(t, "owned GPU-hours", a.Owned, 8*21.0/60)
	approx(t, "owned GPUs", a.GPUs(a.Owned), 8)
	approx(t, "allocated GPUs", a.GPUs(a.Allocated), 6)
	approx(t, "idle GPUs", a.GPUs(a.Idle), 6)
	approx(t, "peak hours", r.Range.PeakHours, 21.0/60)
	approx(t, "peak funnel hours", p.Hours, 21.0/60)
	approx(t, "owned GPUs at peak", p.GPUs(p.Owned), 8)
	approx(t, "demand's peak hours", r.Demand.PeakHours, 21.0/60)
	approx(t, "reclaimable GPUs at peak", r.Demand.ReclaimableGPUs, 8)
	approx(t, "verdict's reclaimable GPUs", r.Verdict.ReclaimableGPUs, 8)
	if v := r.Heatmap.IdleAllocatedGPUs[time.Wednesday][9]; v == nil {
		t.Error("heatmap Wed 09:00: no data")
	} else {
		approx(t, "heatmap Wed 09:00 idle GPUs", *v, 6)
	}
	// The timeline spans the data: from the step it begins in.
	if len(r.Timeline) != 5 || !r.Timeline[0].Start.Equal(end.Add(-25*time.Minute)) {
		t.Errorf("timeline of %d buckets from %s, want the 5 from %s, where the data is", len(r.Timeline), r.Timeline[0].Start, end.Add(-25*time.Minute))
	}
	for _, tp := range r.Timeline {
		approx(t, "timeline owned GPUs at "+tp.Start.Format("15:04"), tp.OwnedGPUs, 8)
		approx(t, "timeline reclaimable GPUs at "+tp.Start.Format("15:04"), tp.ReclaimableGPUs, 8)
		want := 1.0
		if tp.Start.Equal(end.Add(-25 * time.Minute)) {
			want = 0.2 // 09:39-09:40 of 09:35-09:40
		}
		approx(t, "timeline coverage at "+tp.Start.Format("15:04"), tp.Covered, want)
	}
	// The HTML timeline is drawn over the data's span, and says so.
	var page bytes.Buffer
	if err := WriteHTML(&page, r); err != nil {
		t.Fatal(err)
	}
	owned := regexp.MustCompile(`<g id="owned"[^>]*>(.*?)</g>`).FindStringSubmatch(page.String())
	if owned == nil {
		t.Fatal("no owned line in the timeline")
	}
	lines := regexp.MustCompile(`points="([0-9.]+),`).FindAllStringSubmatch(owned[1], -1)
	if len(lines) != 1 {
		t.Fatalf("owned is drawn as %d lines, want 1 (where the data is): %s", len(lines), owned[1])
	}
	if x, _ := strconv.ParseFloat(lines[0][1], 64); x != 40 {
		t.Errorf("the owned line starts at x=%g, want the chart's left edge (40): the chart spans the data", x)
	}
	if !strings.Contains(page.String(), "drawn over the 25m of the 1h range that hold data") {
		t.Error("the timeline does not say it is drawn over the 25m of the 1h range that hold data")
	}
	// The data begins at the first scrape, 09:39:15, not at 09:35 (the step's start).
	want := []Missing{{Source: "gpuxray", Instance: "node-a", Start: end.Add(-time.Hour), End: n.from.Add(n.interval)}}
	if !reflect.DeepEqual(r.Missing, want) {
		t.Errorf("missing %+v, want %+v", r.Missing, want)
	}
}

// TestRecentDataOnly: the default week's report, run minutes after
// Prometheus started, covers the minutes there are and lists the rest as
// missing; the range ends now, not at now rounded down to the step (which
// held no data and made the report fail).
func TestRecentDataOnly(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 6, 3, 8, 0, 0, time.UTC) // a Sunday: no peak
	n := node{instance: "node-a", gpus: 8, allocated: 2, util: 0.5, from: now.Add(-150 * time.Second), to: now, interval: 15 * time.Second}
	api := startTimed(t, func(expr string, at time.Time, step time.Duration) []point { return n.answer(expr, at, step, nil) }, n)
	c := DefaultConfig() // 7d at 5m
	c.Now = func() time.Time { return now }
	r, err := Build(context.Background(), api, c)
	if err != nil {
		t.Fatalf("a week with the last 2m30s of data: %v", err)
	}
	if !r.Range.End.Equal(now) || !r.Range.Start.Equal(now.Add(-7*24*time.Hour)) {
		t.Errorf("range %s to %s, want the week to %s", r.Range.Start, r.Range.End, now)
	}
	a := r.Funnel.All
	approx(t, "hours covered", a.Hours, 2.5/60)
	approx(t, "owned GPUs", a.GPUs(a.Owned), 8)
	approx(t, "allocated GPUs", a.GPUs(a.Allocated), 2)
	if r.Range.PeakHours != 0 || !strings.HasPrefix(r.Verdict.Sentence, "The range has no peak time; over all hours, reclaimable capacity is 6.0 GPUs") {
		t.Errorf("%gh of peak, verdict %q; want it over all hours, 6 GPUs reclaimable", r.Range.PeakHours, r.Verdict.Sentence)
	}
	want := []Missing{{Source: "gpuxray", Instance: "node-a", Start: now.Add(-7 * 24 * time.Hour), End: now.Add(-135 * time.Second)}}
	if !reflect.DeepEqual(r.Missing, want) {
		t.Errorf("missing %+v, want %+v", r.Missing, want)
	}
}

// TestWorkloadGPUs: qWLGPU's answer marks the workloads that held a shared
// GPU and names their GPUs, and the hints follow: a time-sliced notebook
// on an L4 is not told to share its GPU; an unshared one is.
func TestWorkloadGPUs(t *testing.T) {
	t.Parallel()
	end := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	n := node{instance: "node-a", gpus: 2, allocated: 2, from: end.Add(-time.Hour), to: end, interval: 15 * time.Second}
	const gib = 1 << 30
	wlLabels := func(name string, extra ...string) map[string]string {
		m := map[string]string{"namespace": "ds", "workload_kind": "StatefulSet", "workload": name, "model": ""}
		for i := 0; i+1 < len(extra); i += 2 {
			m[extra[i]] = extra[i+1]
		}
		return m
	}
	api := startTimed(t, func(expr string, at time.Time, step time.Duration) []point {
		s := step.Seconds()
		var out []point
		for _, name := range []string{"shared-nb", "solo-nb"} {
			switch expr {
			case qWLAllocated, qWLIdle:
				out = append(out, point{wlLabels(name, "window", "offpeak"), s})
			case qWLActive:
				out = append(out, point{wlLabels(name, "window", "offpeak"), 0})
			case qWLMemory:
				out = append(out, point{wlLabels(name), 4 * gib})
			case qWLMemoryTotal:
				out = append(out, point{wlLabels(name), 24 * gib})
			case qWLGPU:
				shared := map[string]string{"shared-nb": "true", "solo-nb": "false"}[name]
				out = append(out, point{wlLabels(name, "shared", shared, "name", "NVIDIA L4"), 1}, point{wlLabels(name, "shared", shared), 1})
			}
		}
		return append(out, n.answer(expr, at, step, nil)...)
	})
	c := DefaultConfig()
	c.End, c.Range, c.Step = end, time.Hour, 5*time.Minute
	r, err := Build(context.Background(), api, c)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Workload{}
	for _, w := range r.TopWorkloads {
		got[w.Name] = w
	}
	if w := got["shared-nb"]; !w.SharedGPU || !reflect.DeepEqual(w.GPUNames, []string{"NVIDIA L4"}) {
		t.Errorf("shared-nb: shared %v, GPUs %q; want shared, on an L4", w.SharedGPU, w.GPUNames)
	}
	if w := got["solo-nb"]; w.SharedGPU || !reflect.DeepEqual(w.GPUNames, []string{"NVIDIA L4"}) {
		t.Errorf("solo-nb: shared %v, GPUs %q; want not shared, on an L4", w.SharedGPU, w.GPUNames)
	}
	hints := map[string]string{}
	for _, h := range r.Hints {
		hints[h.Name] += h.Hint
	}
	if want := map[string]string{"shared-nb": HintLowActivity, "solo-nb": HintShared}; !reflect.DeepEqual(hints, want) {
		t.Errorf("hints %v, want %v", hints, want)
	}
}

// TestStepUnderTwoScrapes: a step that holds one sample of each series
// (a 1m step, a 1m scrape interval) makes rates miss data; the report warns
// and names a step that works.
func TestStepUnderTwoScrapes(t *testing.T) {
	t.Parallel()
	end := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		interval, step time.Duration
		warn           string
	}{
		{time.Minute, time.Minute, "the 1m step holds fewer than two samples of each series (a scrape every 1m): rates over it miss data; take --step 2m or more"},
		{90 * time.Second, 2 * time.Minute, "the 2m step holds fewer than two samples of each series (a scrape every 1m30s): rates over it miss data; take --step 3m or more"},
		{30 * time.Second, time.Minute, ""},
		{15 * time.Second, 5 * time.Minute, ""},
	} {
		t.Run(c.step.String()+" step, scrape every "+c.interval.String(), func(t *testing.T) {
			n := node{instance: "node-a", gpus: 2, allocated: 1, util: 0.5, from: end.Add(-time.Hour), to: end, interval: c.interval}
			api := startTimed(t, func(expr string, at time.Time, step time.Duration) []point { return n.answer(expr, at, step, nil) })
			cfg := DefaultConfig()
			cfg.End, cfg.Range, cfg.Step = end, time.Hour, c.step
			r, err := Build(context.Background(), api, cfg)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, w := range r.Warnings {
				if strings.Contains(w, "step") {
					got = append(got, w)
				}
			}
			if c.warn == "" && len(got) > 0 || c.warn != "" && (len(got) != 1 || got[0] != c.warn) {
				t.Errorf("scrape every %s, step %s: warnings %q, want %q", c.interval, c.step, got, c.warn)
			}
		})
	}
}
