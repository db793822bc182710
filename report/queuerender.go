package report

import (
	"fmt"
	"html/template"
	"strings"
	"text/tabwriter"
)

// queueRows are the parts the waiting is split into, in the order they are
// served, as the text and HTML reports name them.
var queueRows = []struct {
	name, color string
	of          func(QueueFigures) float64
}{
	{"pending", "", func(f QueueFigures) float64 { return f.PendingGPUHours }},
	{"on free GPUs", "#2e9d5b", func(f QueueFigures) float64 { return f.FreeGPUHours }},
	{"by Kueue quota (borrowed, or held back from free GPUs)", "#3b82c4", func(f QueueFigures) float64 { return f.QuotaGPUHours }},
	{"by preempting lower priority", "#6c5ce7", func(f QueueFigures) float64 { return f.PreemptionGPUHours }},
	{"only on idle GPUs of higher priority", "#e9a23b", func(f QueueFigures) float64 { return f.OutrankedGPUHours }},
	{"on idle GPUs of its type, no node with enough (fragmented)", "#17a2b8", func(f QueueFigures) float64 { return f.FragmentedGPUHours }},
	{"only on idle GPUs of another type", "#a0522d", func(f QueueFigures) float64 { return f.OtherTypeGPUHours }},
	{"on no idle GPU (capacity shortfall)", "#d1495b", func(f QueueFigures) float64 { return f.ShortfallGPUHours }},
}

// waitText is a wait in one line: "4 waiters: p50 1h, p95 2h, max 2h".
func waitText(w QueueWait) string {
	if w.Pods == 0 {
		return "nobody waited"
	}
	s := fmt.Sprintf("%d %s: mean %s, p50 %s, p95 %s, max %s", w.Pods, plural(w.Pods, "waiter", "waiters"),
		humanSeconds(w.MeanSeconds), humanSeconds(w.P50Seconds), humanSeconds(w.P95Seconds), humanSeconds(w.MaxSeconds))
	if w.StillWaiting > 0 {
		s += fmt.Sprintf(" (%d still waiting at the end)", w.StillWaiting)
	}
	return s
}

// writeQueueText writes the queue X-ray: who waited, for which GPU type
// and how long, and what could have run the waiting (docs/report.md).
func writeQueueText(b *strings.Builder, q Queue) {
	b.WriteString("\nQUEUE  " + q.Sentence + "\n")
	if !q.Available || (q.All.PendingGPUHours == 0 && q.Wait.Pods == 0) {
		return
	}
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "\tall hours\tat peak\t\n")
	for _, row := range queueRows {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t\n", row.name, gpuHours(row.of(q.All)), gpuHours(row.of(q.Peak)))
	}
	tw.Flush()
	fmt.Fprintf(b, "  waits: %s; at peak %s\n", waitText(q.Wait), waitText(q.PeakWait))
	if len(q.GPUTypes) > 0 {
		tw = tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  GPU type\tpending at peak\tpending\tfragmented\tother type\tshortfall\tidle\tp95 wait\n")
		for _, t := range q.GPUTypes {
			idle := gpuHours(t.IdleGPUHours)
			if t.GPUType == GPUTypeAny {
				idle = "-"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.GPUType, gpuHours(t.Peak.PendingGPUHours), gpuHours(t.All.PendingGPUHours),
				gpuHours(t.All.FragmentedGPUHours), gpuHours(t.All.OtherTypeGPUHours), gpuHours(t.All.ShortfallGPUHours), idle, humanSeconds(t.Wait.P95Seconds))
		}
		tw.Flush()
	}
	if len(q.Classes) > 0 {
		tw = tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  priority class\tpriority\tqueue\tcluster queue\tpending at peak\tpending\tshortfall\twaiters\tp50 wait\tp95 wait\tmax wait\n")
		for _, c := range q.Classes {
			fmt.Fprintf(tw, "  %s\t%.0f\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", dash(c.PriorityClass), c.Priority, dash(c.Queue), dash(c.ClusterQueue),
				gpuHours(c.Peak.PendingGPUHours), gpuHours(c.All.PendingGPUHours), gpuHours(c.All.ShortfallGPUHours),
				c.Wait.Pods, humanSeconds(c.Wait.P50Seconds), humanSeconds(c.Wait.P95Seconds), humanSeconds(c.Wait.MaxSeconds))
		}
		tw.Flush()
	}
	for _, s := range q.SLO {
		fmt.Fprintf(b, "  SLO %s\n", s.Sentence)
	}
	if len(q.TopHolders) > 0 {
		b.WriteString("  idle holders that blocked waiters:\n")
		tw = tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  workload\tkind\tpriority class\tcould have run at peak\tcould have run\tidle\n")
		for _, h := range q.TopHolders {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\n", h.ID(), dash(h.Kind), dash(h.PriorityClass),
				gpuHours(h.Blocked(BasisPeak)), gpuHours(h.Blocked(BasisAll)), gpuHours(h.IdleGPUHours))
		}
		tw.Flush()
	}
}

// queueHTML is the queue X-ray's card: the sentence, its warnings, where
// the waiting went, the waits and their targets, and the tables.
func queueHTML(q Queue, warnings []string) template.HTML {
	var b strings.Builder
	b.WriteString(`<div class="card" id="queue"><h2>The queue: who waited, how long, and what could have run them</h2><p>` + esc(q.Sentence) + `</p>`)
	for _, w := range warnings {
		b.WriteString(`<p class="warn">warning: ` + esc(w) + `</p>`)
	}
	b.WriteString(string(queueSVG(q)))
	if q.Available && q.Wait.Pods > 0 {
		fmt.Fprintf(&b, `<p id="queue-waits">Waits: %s; at peak %s.</p>`, esc(waitText(q.Wait)), esc(waitText(q.PeakWait)))
	}
	if len(q.SLO) > 0 {
		b.WriteString(`<ul id="queue-slo">`)
		for _, s := range q.SLO {
			class := "met"
			if !s.Met {
				class = "warn"
			}
			fmt.Fprintf(&b, `<li class="%s">%s</li>`, class, esc(s.Sentence))
		}
		b.WriteString(`</ul>`)
	}
	if len(q.GPUTypes) > 0 {
		b.WriteString(`<table id="queue-types"><tr><th>GPU type</th><th>pending at peak</th><th>pending</th><th>fragmented</th><th>other type</th><th>shortfall</th><th>idle</th><th>p95 wait</th></tr>`)
		for _, t := range q.GPUTypes {
			idle := gpuHours(t.IdleGPUHours)
			if t.GPUType == GPUTypeAny {
				idle = "-"
			}
			fmt.Fprintf(&b, `<tr><td>%s</td><td class="n">%s</td><td class="n">%s</td><td class="n">%s</td><td class="n">%s</td><td class="n">%s</td><td class="n">%s</td><td class="n">%s</td></tr>`,
				esc(t.GPUType), gpuHours(t.Peak.PendingGPUHours), gpuHours(t.All.PendingGPUHours), gpuHours(t.All.FragmentedGPUHours),
				gpuHours(t.All.OtherTypeGPUHours), gpuHours(t.All.ShortfallGPUHours), idle, humanSeconds(t.Wait.P95Seconds))
		}
		b.WriteString(`</table>`)
	}
	if len(q.Classes) > 0 {
		b.WriteString(`<table><tr><th>priority class</th><th>priority</th><th>queue</th><th>cluster queue</th><th>pending at peak</th><th>pending</th><th>shortfall</th><th>waiters</th><th>p50 wait</th><th>p95 wait</th><th>max wait</th></tr>`)
		for _, c := range q.Classes {
			fmt.Fprintf(&b, `<tr><td>%s</td><td class="n">%.0f</td><td>%s</td><td>%s</td><td class="n">%s</td><td class="n">%s</td><td class="n">%s</td><td class="n">%d</td><td class="n">%s</td><td class="n">%s</td><td class="n">%s</td></tr>`,
				esc(dash(c.PriorityClass)), c.Priority, esc(dash(c.Queue)), esc(dash(c.ClusterQueue)), gpuHours(c.Peak.PendingGPUHours), gpuHours(c.All.PendingGPUHours),
				gpuHours(c.All.ShortfallGPUHours), c.Wait.Pods, humanSeconds(c.Wait.P50Seconds), humanSeconds(c.Wait.P95Seconds), humanSeconds(c.Wait.MaxSeconds))
		}
		b.WriteString(`</table>`)
	}
	if len(q.TopHolders) > 0 {
		b.WriteString(`<h2>Idle holders that blocked waiters</h2><table><tr><th>workload</th><th>kind</th><th>priority class</th><th>could have run at peak</th><th>could have run</th><th>idle</th></tr>`)
		for _, h := range q.TopHolders {
			fmt.Fprintf(&b, `<tr><td>%s</td><td>%s</td><td>%s</td><td class="n">%s</td><td class="n">%s</td><td class="n">%s</td></tr>`,
				esc(h.ID()), esc(dash(h.Kind)), esc(dash(h.PriorityClass)), gpuHours(h.Blocked(BasisPeak)), gpuHours(h.Blocked(BasisAll)), gpuHours(h.IdleGPUHours))
		}
		b.WriteString(`</table>`)
	}
	b.WriteString(`</div>`)
	return template.HTML(b.String())
}

// queueSVG draws where the waiting went, all hours and at peak: one
// stacked bar each, in the order the parts are served.
func queueSVG(q Queue) template.HTML {
	if !q.Available || q.All.PendingGPUHours == 0 {
		return ""
	}
	const w, barH, gap, left = 720.0, 26.0, 10.0, 90.0
	var b strings.Builder
	rows := []struct {
		name string
		f    QueueFigures
	}{{"all hours", q.All}, {"at peak", q.Peak}}
	legendY := 2 * (barH + gap)
	fmt.Fprintf(&b, `<svg id="queue-chart" viewBox="0 0 %g %g" role="img" aria-label="where the waiting went">`, w, legendY+20*float64(len(queueRows)-1)+4)
	for i, row := range rows {
		y := float64(i) * (barH + gap)
		fmt.Fprintf(&b, `<text x="0" y="%g" font-size="13">%s</text>`, y+barH*0.65, row.name)
		switch {
		case row.f.Hours == 0:
			fmt.Fprintf(&b, `<text x="%g" y="%g" font-size="12" fill="#5b6475">the range has no peak time</text>`, left, y+barH*0.65)
		case row.f.PendingGPUHours == 0:
			fmt.Fprintf(&b, `<text x="%g" y="%g" font-size="12" fill="#5b6475">nothing waited</text>`, left, y+barH*0.65)
		}
		x := left
		for _, part := range queueRows[1:] {
			bw := (w - left - 10) * ratio(part.of(row.f), row.f.PendingGPUHours)
			if bw <= 0 {
				continue
			}
			fmt.Fprintf(&b, `<rect x="%g" y="%g" width="%g" height="%g" fill="%s"><title>%s: %s</title></rect>`, x, y, bw, barH, part.color, esc(part.name), gpuHours(part.of(row.f)))
			x += bw
		}
	}
	// The legend's figures are those the sentence judges: at peak, or over
	// all hours when the range has no peak time.
	f, at := q.Peak, "at peak"
	if q.Basis == BasisAll {
		f, at = q.All, "over all hours (the range has no peak time)"
	}
	for i, part := range queueRows[1:] {
		y := legendY + 20*float64(i)
		fmt.Fprintf(&b, `<rect x="%g" y="%g" width="12" height="12" fill="%s"/><text x="%g" y="%g" font-size="12">%s · %s %s</text>`,
			left, y, part.color, left+18, y+10, esc(part.name), gpuHours(part.of(f)), at)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}
