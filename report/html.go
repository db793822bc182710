package report

import (
	"fmt"
	"html"
	"html/template"
	"io"
	"math"
	"strings"
	"time"
)

// WriteHTML writes the report as one self-contained page: inline CSS and
// inline SVG charts, no script, and a policy that forbids any fetch.
func WriteHTML(w io.Writer, r *Report) error {
	loc, err := time.LoadLocation(r.Range.Timezone)
	if err != nil {
		loc = time.UTC
	}
	d := struct {
		R                                  *Report
		Period                             string
		Short                              bool
		Funnel, Heatmap, Wasters, Timeline template.HTML
		Queue                              template.HTML
		Value                              template.HTML
		// AllHours: the range has no peak time, and the rankings are over all hours.
		AllHours bool
		Withheld string
	}{
		R:        r,
		Period:   fmt.Sprintf("%s → %s %s", r.Range.Start.In(loc).Format(timeFmt), r.Range.End.In(loc).Format(timeFmt), r.Range.Timezone),
		Short:    r.Verdict.Kind == VerdictShort,
		Funnel:   funnelSVG(r),
		Heatmap:  heatmapSVG(r),
		Wasters:  wastersSVG(r),
		Timeline: timelineSVG(r, loc),
		Queue:    queueHTML(r.Queue, r.WarningsBySection.Queue),
		Value:    valueHTML(r, loc),
		AllHours: r.Ranking == BasisAll,
		Withheld: withheldSentence(r.HintsWithheld),
	}
	return page.Execute(w, d)
}

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"pct":   func(f float64) string { return fmt.Sprintf("%.0f%%", 100*f) },
	"gpuh":  gpuHours,
	"dur":   humanSeconds,
	"hours": humanDuration,
	"dash":  dash,
	"when": func(t time.Time, tz string) string {
		loc, err := time.LoadLocation(tz)
		if err != nil {
			loc = time.UTC
		}
		return t.In(loc).Format(missingFmt)
	},
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>gpuxray capacity report</title>
<style>
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1d2330;background:#f4f5f8;margin:0}
main{max-width:1080px;margin:0 auto;padding:24px}
h1{font-size:22px;margin:0 0 2px}h2{font-size:17px;margin:28px 0 10px}
.sub{color:#5b6475;font-size:13px}
.card{background:#fff;border-radius:10px;box-shadow:0 1px 3px rgba(0,0,0,.08);padding:18px 20px;margin:14px 0}
.verdict{border-left:8px solid #2e9d5b}.verdict.short{border-left-color:#d1495b}
.verdict p{font-size:20px;font-weight:600;margin:0 0 10px}
.verdict ol{margin:0;padding-left:20px;color:#3b4455;font-size:14px}
table{border-collapse:collapse;width:100%;font-size:14px}
th,td{text-align:left;padding:6px 8px;border-bottom:1px solid #e7e9ef}th{color:#5b6475;font-weight:600}
td.n{text-align:right;font-variant-numeric:tabular-nums}
svg{display:block;max-width:100%;height:auto}
svg text{font-family:system-ui,sans-serif;fill:#1d2330}
.grid{display:grid;grid-template-columns:1fr 1fr;gap:14px}@media(max-width:800px){.grid{grid-template-columns:1fr}}
.warn{color:#8a5a00}
</style></head><body><main>
<h1>Do we need more GPUs?</h1>
<div class="sub">gpuxray capacity report · {{.Period}} · {{hours .R.Range.Hours}} range, {{hours .R.Funnel.All.Hours}} covered by gpuxray data, {{hours .R.Range.PeakHours}} of it peak · {{.R.Prometheus}}</div>
{{range .R.WarningsBySection.Range}}<div class="sub warn range-warning">warning: {{.}}</div>
{{end}}<div class="card verdict{{if .Short}} short{{end}}" id="verdict"><p>{{.R.Verdict.Sentence}}</p>
<ol>{{range .R.Verdict.Arithmetic}}<li>{{.}}</li>{{end}}</ol></div>
{{.Queue}}
<div class="grid">
<div class="card"><h2>Where the GPU time went</h2>{{.Funnel}}</div>
<div class="card"><h2>Top wasters: idle GPU-hours {{if .AllHours}}over all hours (the range has no peak time){{else}}at peak{{end}}</h2>{{.Wasters}}</div>
</div>
<div class="card"><h2>Idle allocated GPUs by hour and weekday ({{.R.Heatmap.Timezone}})</h2>{{.Heatmap}}</div>
<div class="card"><h2>Pending demand and reclaimable capacity</h2>{{.Timeline}}</div>
<div class="card"><h2>Top workloads{{if .AllHours}}, by idle GPU-hours over all hours (the range has no peak time){{end}}</h2><table>
<tr><th>workload</th><th>kind</th><th>model</th><th>idle at peak</th><th>idle</th><th>efficiency</th><th>longest idle streak</th></tr>
{{range .R.TopWorkloads}}<tr><td>{{.ID}}</td><td>{{dash .Kind}}</td><td>{{dash .Model}}</td><td class="n">{{gpuh .PeakIdle}}</td><td class="n">{{gpuh .Idle}}</td><td class="n">{{pct .Efficiency}}</td><td class="n">{{dur .LongestIdleStreakSeconds}}</td></tr>
{{end}}</table></div>
<div class="card"><h2>Top models{{if .AllHours}}, by idle GPU-hours over all hours{{end}}</h2><table>
<tr><th>model</th><th>workloads</th><th>idle at peak</th><th>idle</th><th>efficiency</th><th>longest idle streak</th></tr>
{{range .R.TopModels}}<tr><td>{{.Model}}</td><td class="n">{{.Workloads}}</td><td class="n">{{gpuh .PeakIdle}}</td><td class="n">{{gpuh .Idle}}</td><td class="n">{{pct .Efficiency}}</td><td class="n">{{dur .LongestIdleStreakSeconds}}</td></tr>
{{end}}</table></div>
{{.Value}}
{{if or .R.Hints .Withheld}}<div class="card" id="hints"><h2>Right-sizing</h2>{{if .R.Hints}}<table><tr><th>workload</th><th>hint</th><th></th><th>frees</th></tr>
{{range .R.Hints}}<tr><td>{{.Namespace}}/{{dash .Name}}</td><td>{{.Hint}}</td><td>{{.Message}}</td><td class="n">{{gpuh .FreesGPUHours}}</td></tr>
{{end}}</table>{{end}}{{with .Withheld}}<p class="warn">{{.}}</p>{{end}}</div>{{end}}
{{if or .R.Missing .R.WarningsBySection.Data}}<div class="card warn" id="partial"><h2>Partial data</h2><ul>
{{$tz := .R.Range.Timezone}}{{range .R.Missing}}<li>{{.Source}} {{.Instance}}: no data {{when .Start $tz}} → {{when .End $tz}}</li>{{end}}
{{range .R.WarningsBySection.Data}}<li>{{.}}</li>{{end}}</ul></div>{{end}}
</main></body></html>
`))

func esc(s string) string { return html.EscapeString(s) }

// funnelSVG draws owned → allocated → active, with idle and unallocated.
func funnelSVG(r *Report) template.HTML {
	f := r.Funnel.All
	rows := []struct {
		name  string
		v     float64
		color string
	}{
		{"owned", f.Owned, "#4a5568"},
		{"allocated", f.Allocated, "#3b82c4"},
		{"active (utilization-weighted)", f.Active, "#2e9d5b"},
		{"idle while allocated", f.Idle, "#d1495b"},
		{"unallocated", f.Unallocated, "#e9a23b"},
	}
	const w, barH, gap, left = 480.0, 30.0, 12.0, 190.0
	var b strings.Builder
	fmt.Fprintf(&b, `<svg id="funnel" viewBox="0 0 %g %g" role="img" aria-label="GPU time funnel">`, w, float64(len(rows))*(barH+gap))
	for i, row := range rows {
		y := float64(i) * (barH + gap)
		bw := (w - left - 130) * ratio(row.v, f.Owned)
		fmt.Fprintf(&b, `<text x="0" y="%g" font-size="13">%s</text>`, y+barH*0.65, esc(row.name))
		fmt.Fprintf(&b, `<rect x="%g" y="%g" width="%g" height="%g" rx="4" fill="%s"/>`, left, y, math.Max(bw, 1), barH, row.color)
		fmt.Fprintf(&b, `<text x="%g" y="%g" font-size="12">%s · %.0f%%</text>`, left+math.Max(bw, 1)+6, y+barH*0.65, gpuHours(row.v), 100*ratio(row.v, f.Owned))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// heatColor maps 0..1 onto white → amber → red; anything else (NaN, which
// no comparison clamps) onto the nearest end.
func heatColor(x float64) string {
	if !(x > 0) {
		x = 0
	}
	x = math.Min(1, x)
	stops := [][3]float64{{250, 250, 252}, {245, 180, 60}, {200, 40, 60}}
	seg := x * 2
	i := int(math.Min(seg, 1))
	t := seg - float64(i)
	c := [3]float64{}
	for k := range c {
		c[k] = stops[i][k] + (stops[i+1][k]-stops[i][k])*t
	}
	return fmt.Sprintf("rgb(%.0f,%.0f,%.0f)", c[0], c[1], c[2])
}

// heatmapSVG draws idle allocated GPUs by weekday (Monday first) and hour:
// every weekday when the data spans a week or more, else only the weekdays
// it touches.
func heatmapSVG(r *Report) template.HTML {
	const cell, left, top = 36.0, 44.0, 20.0
	hi := 0.0
	var rows []int // weekdays drawn, Monday first
	for row := 0; row < 7; row++ {
		d := (row + 1) % 7
		has := false
		for _, v := range r.Heatmap.IdleAllocatedGPUs[d] {
			if v != nil {
				has = true
				hi = math.Max(hi, *v)
			}
		}
		if has || dataSpan(r) >= 7*24*time.Hour {
			rows = append(rows, d)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg id="heatmap" viewBox="0 0 %g %g" role="img" aria-label="idle GPUs by hour and weekday">`, left+24*cell+10, top+float64(len(rows))*cell+34)
	for h := 0; h < 24; h += 2 {
		fmt.Fprintf(&b, `<text x="%g" y="%g" font-size="11" text-anchor="middle">%02d</text>`, left+float64(h)*cell+cell/2, top-6, h)
	}
	days := []string{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"}
	for row, d := range rows {
		y := top + float64(row)*cell
		fmt.Fprintf(&b, `<text x="0" y="%g" font-size="12">%s</text>`, y+cell*0.62, days[d])
		for h := 0; h < 24; h++ {
			x := left + float64(h)*cell
			v := r.Heatmap.IdleAllocatedGPUs[d][h]
			if v == nil {
				fmt.Fprintf(&b, `<rect x="%g" y="%g" width="%g" height="%g" fill="#eceef2"/>`, x+1, y+1, cell-2, cell-2)
				continue
			}
			fmt.Fprintf(&b, `<rect class="cell" x="%g" y="%g" width="%g" height="%g" rx="3" fill="%s"><title>%s %02d:00 · %.2f idle GPUs</title></rect>`,
				x+1, y+1, cell-2, cell-2, heatColor(ratio(*v, hi)), days[d], h, *v)
			if *v >= 0.05 {
				fmt.Fprintf(&b, `<text x="%g" y="%g" font-size="10" text-anchor="middle">%.1f</text>`, x+cell/2, y+cell*0.6, *v)
			}
		}
	}
	ly := top + float64(len(rows))*cell + 14
	for i := 0; i <= 10; i++ {
		fmt.Fprintf(&b, `<rect x="%g" y="%g" width="20" height="10" fill="%s"/>`, left+float64(i)*20, ly, heatColor(float64(i)/10))
	}
	fmt.Fprintf(&b, `<text x="%g" y="%g" font-size="11">0 → %.1f idle GPUs; grey: no data</text>`, left+230, ly+9, hi)
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// wastersSVG draws the top workloads' idle GPU-hours at peak.
func wastersSVG(r *Report) template.HTML {
	const w, barH, gap, left = 480.0, 22.0, 8.0, 200.0
	n := len(r.TopWorkloads)
	hi := 0.0
	for _, x := range r.TopWorkloads {
		hi = math.Max(hi, x.idleOn(r.Ranking))
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg id="wasters" viewBox="0 0 %g %g" role="img" aria-label="top wasters">`, w, math.Max(1, float64(n))*(barH+gap))
	for i, x := range r.TopWorkloads {
		y := float64(i) * (barH + gap)
		v := x.idleOn(r.Ranking)
		bw := (w - left - 70) * ratio(v, hi)
		label := x.ID()
		if len(label) > 28 {
			label = label[:27] + "…"
		}
		fmt.Fprintf(&b, `<text x="0" y="%g" font-size="12">%s</text>`, y+barH*0.7, esc(label))
		fmt.Fprintf(&b, `<rect class="bar" x="%g" y="%g" width="%g" height="%g" rx="3" fill="#d1495b"/>`, left, y, math.Max(bw, 1), barH)
		fmt.Fprintf(&b, `<text x="%g" y="%g" font-size="11">%s</text>`, left+math.Max(bw, 1)+5, y+barH*0.7, gpuHours(v))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// dataSpan is the time from the timeline's first bucket to the end of its
// last: the span of the data (the timeline covers no more).
func dataSpan(r *Report) time.Duration {
	tl := r.Timeline
	if len(tl) == 0 {
		return 0
	}
	bucket := time.Duration(r.Range.StepSeconds * float64(time.Second))
	if len(tl) > 1 {
		bucket = tl[1].Start.Sub(tl[0].Start)
	}
	return tl[len(tl)-1].Start.Add(bucket).Sub(tl[0].Start)
}

// timelineSVG draws pending GPUs against reclaimable GPUs over the span of
// the data (the timeline's), peak time shaded, and says when that is less
// than the range.
func timelineSVG(r *Report, loc *time.Location) template.HTML {
	const w, h, left, bottom, top = 1000.0, 240.0, 40.0, 24.0, 24.0
	tl := r.Timeline
	n := len(tl)
	hi := 1.0
	for _, p := range tl {
		hi = math.Max(hi, math.Max(p.PendingGPUs, math.Max(p.ReclaimableGPUs, p.OwnedGPUs)))
	}
	x := func(i int) float64 { return left + (w-left-10)*float64(i)/math.Max(1, float64(n)) }
	y := func(v float64) float64 { return top + (h-bottom-top)*(1-v/hi) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg id="timeline" viewBox="0 0 %g %g" role="img" aria-label="pending and reclaimable GPUs">`, w, h)
	for i, p := range tl {
		if p.Peak > 0 {
			fmt.Fprintf(&b, `<rect x="%g" y="%g" width="%g" height="%g" fill="#eef2fb" opacity="%.2f"/>`, x(i), top, x(i+1)-x(i), h-bottom-top, p.Peak)
		}
	}
	// A line per run of buckets with data: no data is a break, not a 0.
	line := func(get func(TimelinePoint) float64, covered func(TimelinePoint) float64, color, id string) {
		fmt.Fprintf(&b, `<g id="%s" fill="none" stroke="%s" stroke-width="2">`, id, color)
		var pts []string
		flush := func() {
			if len(pts) > 0 {
				fmt.Fprintf(&b, `<polyline points="%s"/>`, strings.Join(pts, " "))
			}
			pts = pts[:0]
		}
		for i, p := range tl {
			if covered(p) <= 0 {
				flush()
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f %.1f,%.1f", x(i), y(get(p)), x(i+1), y(get(p))))
		}
		flush()
		b.WriteString(`</g>`)
	}
	agents := func(p TimelinePoint) float64 { return p.Covered }
	line(func(p TimelinePoint) float64 { return p.OwnedGPUs }, agents, "#a0a7b4", "owned")
	line(func(p TimelinePoint) float64 { return p.ReclaimableGPUs }, agents, "#2e9d5b", "reclaimable")
	// Unknown demand is no line: a 0 line would say nothing waited.
	if r.Demand.Available {
		line(func(p TimelinePoint) float64 { return p.PendingGPUs }, func(p TimelinePoint) float64 { return p.DemandCovered }, "#d1495b", "pending")
	}
	for _, v := range []float64{0, hi / 2, hi} {
		fmt.Fprintf(&b, `<text x="0" y="%g" font-size="11">%.0f</text>`, y(v)+4, v)
	}
	for i := 0; i < n; i += max(1, n/8) {
		fmt.Fprintf(&b, `<text x="%g" y="%g" font-size="11">%s</text>`, x(i), h-6, tl[i].Start.In(loc).Format("Mon 15:04"))
	}
	pending := `<tspan fill="#d1495b">━ pending</tspan>`
	if !r.Demand.Available {
		pending = `<tspan fill="#8a5a00">pending demand unknown (no kube-state-metrics series)</tspan>`
	}
	fmt.Fprintf(&b, `<text x="%g" y="14" font-size="12" text-anchor="end">%s  <tspan fill="#2e9d5b">━ reclaimable</tspan>  <tspan fill="#a0a7b4">━ owned</tspan>  (shaded: peak)</text>`, w-10, pending)
	if span, rng := dataSpan(r), time.Duration(r.Range.Hours*float64(time.Hour)); n > 0 && span < rng {
		fmt.Fprintf(&b, `<text id="span" x="%g" y="14" font-size="12" fill="#5b6475">drawn over the %s of the %s range that hold data</text>`, left, humanDuration(span.Hours()), humanDuration(rng.Hours()))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}
