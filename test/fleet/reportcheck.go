package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/gpuxray/gpuxray/report"
)

// reportRun is one `gpuxray report` and what it cost.
type reportRun struct {
	r      report.Report
	took   time.Duration
	maxRSS int64 // bytes
	cpu    time.Duration
}

// runReport runs `gpuxray report --format json` against the engine at addr
// over [end−rng, end) at step, listing every workload.
func runReport(ctx context.Context, gpuxray, addr string, end time.Time, rng, step time.Duration) (*reportRun, error) {
	cmd := exec.CommandContext(ctx, gpuxray, "report", "--prometheus=http://"+addr,
		"--range="+fmtDur(rng), "--end="+end.UTC().Format(time.RFC3339), "--step="+step.String(),
		"--format=json", "--top=1000000")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	started := time.Now()
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("gpuxray report against %s: %v\n%s", addr, err, stderr.String())
	}
	rr := &reportRun{took: time.Since(started)}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		rr.maxRSS = ru.Maxrss << 10
		rr.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if err := json.Unmarshal(stdout.Bytes(), &rr.r); err != nil {
		return nil, fmt.Errorf("gpuxray report: %w", err)
	}
	return rr, nil
}

// Floors of the relative error near zero, by unit: an error is taken
// relative to the figure or to its floor, whichever is larger. A GPU-hour's
// 1% is 36 GPU-seconds: VictoriaMetrics does not extrapolate a series to
// the end of a range (Prometheus does), so a series born inside the range
// reads up to a scrape interval (30 s in the engines' comparison) less on
// it. A half-hour streak's 1% is 18 s, a poll and some.
const (
	floorGPUHours = 1
	floorGPUs     = 0.02
	floorRatio    = 0.01
	floorSeconds  = 1800
	floorBytes    = 1 << 20
)

// compareReports sets a report against the truth (or another engine's
// report): the funnel, the demand and the verdict, every workload and
// model, the hints, every heatmap cell and timeline point.
func compareReports(res *Result, phase, prefix string, got, want *report.Report) {
	fig := func(name, unit string, g, w, floor float64) { res.figure(phase, prefix+name, unit, g, w, floor) }
	for _, f := range []struct {
		name      string
		got, want report.Funnel
	}{{"funnel", got.Funnel.All, want.Funnel.All}, {"funnel at peak", got.Funnel.Peak, want.Funnel.Peak}} {
		fig(f.name+": hours", "h", f.got.Hours, f.want.Hours, 0.1)
		fig(f.name+": owned", "GPU·h", f.got.Owned, f.want.Owned, floorGPUHours)
		fig(f.name+": allocated", "GPU·h", f.got.Allocated, f.want.Allocated, floorGPUHours)
		fig(f.name+": active", "GPU·h", f.got.Active, f.want.Active, floorGPUHours)
		fig(f.name+": idle", "GPU·h", f.got.Idle, f.want.Idle, floorGPUHours)
		fig(f.name+": unallocated", "GPU·h", f.got.Unallocated, f.want.Unallocated, floorGPUHours)
		fig(f.name+": unallocated active", "GPU·h", f.got.UnallocatedActive, f.want.UnallocatedActive, floorGPUHours)
	}
	d, wd := got.Demand, want.Demand
	res.pass(phase, prefix+"demand: kube-state-metrics found", d.Available == wd.Available, fmt.Sprintf("available %v, want %v", d.Available, wd.Available))
	fig("demand: peak hours", "h", d.PeakHours, wd.PeakHours, 0.1)
	fig("demand: pending", "GPU·h", d.PendingGPUHours, wd.PendingGPUHours, floorGPUHours)
	fig("demand: reclaimable", "GPU·h", d.ReclaimableGPUHours, wd.ReclaimableGPUHours, floorGPUHours)
	fig("demand: covered", "GPU·h", d.CoveredGPUHours, wd.CoveredGPUHours, floorGPUHours)
	fig("demand: shortfall", "GPU·h", d.ShortfallGPUHours, wd.ShortfallGPUHours, floorGPUHours)
	fig("demand: max pending", "GPUs", d.MaxPendingGPUs, wd.MaxPendingGPUs, floorGPUs)
	fig("demand: shortfall quantile", "GPUs", d.ShortfallGPUs, wd.ShortfallGPUs, floorGPUs)
	v, wv := got.Verdict, want.Verdict
	res.pass(phase, prefix+"verdict", v.Kind == wv.Kind && v.GPUsShort == wv.GPUsShort,
		fmt.Sprintf("%s, %d GPUs short; want %s, %d", v.Kind, v.GPUsShort, wv.Kind, wv.GPUsShort))

	gw := map[string]report.Workload{}
	for _, w := range got.TopWorkloads {
		gw[wlID(w)] = w
	}
	ww := map[string]report.Workload{}
	for _, w := range want.TopWorkloads {
		if w.Allocated > 0 {
			ww[wlID(w)] = w
		}
	}
	var missing, extra []string
	for id := range ww {
		if _, ok := gw[id]; !ok {
			missing = append(missing, id)
		}
	}
	for id, w := range gw {
		if _, ok := ww[id]; !ok && w.Allocated > floorGPUHours {
			extra = append(extra, id)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	res.pass(phase, prefix+fmt.Sprintf("workloads: the same %d", len(ww)), len(missing) == 0 && len(extra) == 0,
		fmt.Sprintf("missing %s; unexpected %s", firstOf(missing), firstOf(extra)))
	ws := map[string]*worst{}
	order := []string{"allocated", "idle", "active", "allocated at peak", "idle at peak", "active at peak", "efficiency", "activity at peak step", "longest idle streak", "peak memory", "GPU memory"}
	units := map[string]string{"efficiency": "", "activity at peak step": "", "longest idle streak": "s", "peak memory": "B", "GPU memory": "B"}
	floors := map[string]float64{"efficiency": floorRatio, "activity at peak step": floorRatio, "longest idle streak": floorSeconds, "peak memory": floorBytes, "GPU memory": floorBytes}
	for _, k := range order {
		u, ok := units[k]
		if !ok {
			u = "GPU·h"
		}
		fl, ok := floors[k]
		if !ok {
			fl = floorGPUHours
		}
		ws[k] = newWorst(phase, prefix+"workloads: "+k, u, fl)
	}
	for id, w := range ww {
		g, ok := gw[id]
		if !ok {
			continue
		}
		for k, p := range map[string][2]float64{
			"allocated": {g.Allocated, w.Allocated}, "idle": {g.Idle, w.Idle}, "active": {g.Active, w.Active},
			"allocated at peak": {g.PeakAllocated, w.PeakAllocated}, "idle at peak": {g.PeakIdle, w.PeakIdle},
			"active at peak": {g.PeakActive, w.PeakActive}, "efficiency": {g.Efficiency, w.Efficiency},
			"activity at peak step": {g.PeakActivity, w.PeakActivity}, "longest idle streak": {g.LongestIdleStreakSeconds, w.LongestIdleStreakSeconds},
			"peak memory": {g.PeakMemoryBytes, w.PeakMemoryBytes}, "GPU memory": {g.MemoryTotalBytes, w.MemoryTotalBytes},
		} {
			ws[k].add(id, p[0], p[1])
		}
	}
	for _, k := range order {
		res.addWorst(ws[k])
	}
	gm := map[string]report.Model{}
	for _, m := range got.TopModels {
		gm[m.Model] = m
	}
	mw := newWorst(phase, prefix+"models: idle at peak", "GPU·h", floorGPUHours)
	ma := newWorst(phase, prefix+"models: allocated", "GPU·h", floorGPUHours)
	for _, m := range want.TopModels {
		if m.Allocated == 0 {
			continue
		}
		g := gm[m.Model]
		mw.add(m.Model, g.PeakIdle, m.PeakIdle)
		ma.add(m.Model, g.Allocated, m.Allocated)
	}
	res.addWorst(mw)
	res.addWorst(ma)

	hints := func(hs []report.Hint) map[string]bool {
		m := map[string]bool{}
		for _, h := range hs {
			m[h.Namespace+"/"+h.Name+" "+h.Hint+" "+h.Profile] = true
		}
		return m
	}
	gh, wh := hints(got.Hints), hints(want.Hints)
	var diff []string
	for h := range wh {
		if !gh[h] {
			diff = append(diff, "missing "+h)
		}
	}
	for h := range gh {
		if !wh[h] {
			diff = append(diff, "unexpected "+h)
		}
	}
	sort.Strings(diff)
	res.pass(phase, prefix+fmt.Sprintf("right-sizing hints: the same %d", len(wh)), len(diff) == 0, firstOf(diff))

	hm := newWorst(phase, prefix+"heatmap: idle allocated GPUs per hour", "GPUs", floorGPUs)
	cells := 0
	for day := range want.Heatmap.IdleAllocatedGPUs {
		for h, w := range want.Heatmap.IdleAllocatedGPUs[day] {
			g := got.Heatmap.IdleAllocatedGPUs[day][h]
			switch {
			case w == nil && g == nil:
			case w == nil || g == nil:
				hm.add(fmt.Sprintf("day %d %02d:00", day, h), nilNaN(g), nilNaN(w))
			default:
				cells++
				hm.add(fmt.Sprintf("day %d %02d:00", day, h), *g, *w)
			}
		}
	}
	res.addWorst(hm)
	if len(got.Missing) > 0 {
		res.pass(phase, prefix+"no missing data", false, fmt.Sprintf("%d spans missing, first %+v", len(got.Missing), got.Missing[0]))
	}
}

func nilNaN(p *float64) float64 {
	if p == nil {
		return -1
	}
	return *p
}

func wlID(w report.Workload) string {
	return w.Namespace + "/" + w.Kind + "/" + w.Name + "/" + w.Model
}

func firstOf(xs []string) string {
	switch {
	case len(xs) == 0:
		return "none"
	case len(xs) > 3:
		return strings.Join(xs[:3], ", ") + fmt.Sprintf(" and %d more", len(xs)-3)
	}
	return strings.Join(xs, ", ")
}

// compareTimeline sets the report's timeline against the truth's steps
// (one point a step, as for ranges of under 500 steps).
func compareTimeline(res *Result, phase, prefix string, got *report.Report, steps []stepTruth, step time.Duration) {
	if len(got.Timeline) != len(steps) {
		res.pass(phase, prefix+"timeline: a point a step", false, fmt.Sprintf("%d points, want %d", len(got.Timeline), len(steps)))
		return
	}
	owned := newWorst(phase, prefix+"timeline: owned GPUs", "GPUs", floorGPUs)
	alloc := newWorst(phase, prefix+"timeline: allocated GPUs", "GPUs", floorGPUs)
	act := newWorst(phase, prefix+"timeline: active GPUs", "GPUs", floorGPUs)
	recl := newWorst(phase, prefix+"timeline: reclaimable GPUs", "GPUs", floorGPUs)
	pend := newWorst(phase, prefix+"timeline: pending GPUs", "GPUs", floorGPUs)
	for i, p := range got.Timeline {
		s := steps[i]
		at := p.Start.Format("Mon 15:04")
		owned.add(at, p.OwnedGPUs, s.observed)
		alloc.add(at, p.AllocatedGPUs, s.allocated)
		act.add(at, p.ActiveGPUs, s.active)
		recl.add(at, p.ReclaimableGPUs, max(0, s.idle+s.unallocated-s.unallocAc))
		pend.add(at, p.PendingGPUs, s.pending)
	}
	for _, w := range []*worst{owned, alloc, act, recl, pend} {
		res.addWorst(w)
	}
}
