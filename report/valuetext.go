package report

import (
	"fmt"
	"html/template"
	"math"
	"strings"
	"text/tabwriter"
	"time"
)

// money writes an amount with the precision its size needs and its
// currency: 0.42 USD, 42.50 USD, 1,234 USD.
func money(v float64, currency string) string {
	switch a := math.Abs(v); {
	case a >= 1000:
		return thousands(v) + " " + currency
	case a >= 0.005 || a == 0:
		return fmt.Sprintf("%.2f %s", v, currency)
	}
	return "<0.01 " + currency
}

// thousands writes a whole number with thousands separators.
func thousands(v float64) string {
	s := fmt.Sprintf("%.0f", math.Abs(v))
	var b strings.Builder
	if v < 0 {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func moneyOr(v *float64, currency string) string {
	if v == nil {
		return "-"
	}
	return money(*v, currency)
}

func numOr(v *float64, format string) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf(format, *v)
}

func tokens(v float64) string {
	switch {
	case v >= 1e9:
		return fmt.Sprintf("%.1fG", v/1e9)
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.0fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

func tokensOr(v *float64) string {
	if v == nil {
		return "-"
	}
	return tokens(*v)
}

// hintSuffix says what acting on a hint frees and saves.
func hintSuffix(h Hint, currency string) string {
	if h.FreesGPUHours <= 0 {
		return ""
	}
	s := " [frees " + gpuHours(h.FreesGPUHours)
	if h.Saving != nil {
		s += ", saves " + money(*h.Saving, currency)
	}
	return s + "]"
}

func (r *Report) currency() string {
	if r.Cost != nil {
		return r.Cost.Currency
	}
	return ""
}

// basisWord names the levers' basis.
func basisWord(basis string) string {
	if basis == BasisAll {
		return "over all hours (the range has no peak time)"
	}
	return "at peak"
}

// writeValueText writes the money, useful work and buy date sections.
func writeValueText(b *strings.Builder, r *Report, loc *time.Location) {
	if c := r.Cost; c != nil {
		fmt.Fprintf(b, "\nMONEY (%s)\n", c.Currency)
		tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "\tall hours\tat peak\t\n")
		row := func(name string, all, peak float64) {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t\n", name, money(all, c.Currency), money(peak, c.Currency))
		}
		row("owned", c.All.Owned, c.Peak.Owned)
		row("allocated", c.All.Allocated, c.Peak.Allocated)
		row("active (utilization-weighted)", c.All.Active, c.Peak.Active)
		row("idle while allocated", c.All.IdleAllocated, c.Peak.IdleAllocated)
		row("unallocated", c.All.Unallocated, c.Peak.Unallocated)
		tw.Flush()
		if m := r.Money; m != nil {
			for _, t := range m.GPUTypes {
				if !t.Priced {
					fmt.Fprintf(b, "  %s: no price\n", t.GPUType)
					continue
				}
				fmt.Fprintf(b, "  %s: %s a GPU-hour", t.GPUType, money(t.CapitalPerGPUHour, c.Currency))
				if t.PowerPerKWh > 0 {
					fmt.Fprintf(b, " + power at %s/kWh (%.0f W on average): an idle GPU-hour %s, an allocated one %s",
						money(t.PowerPerKWh, c.Currency), t.MeanPowerWatts, money(t.IdleRate, c.Currency), money(t.AllocatedRate, c.Currency))
				}
				b.WriteString("\n")
			}
			fmt.Fprintf(b, "  levers %s:\n", basisWord(m.Basis))
			for _, l := range m.Levers {
				fmt.Fprintf(b, "    %-13s %s = %s\n", strings.ReplaceAll(l.Lever, "_", "-"), gpuHours(l.GPUHours), moneyOr(l.Cost, c.Currency))
			}
			if s := m.Shortfall; s != nil {
				var parts []string
				for _, t := range s.GPUTypes {
					parts = append(parts, fmt.Sprintf("%d × %s", t.GPUs, t.GPUType))
				}
				fmt.Fprintf(b, "  the shortfall (%s): %s to buy, %s a year at the hourly price\n", strings.Join(parts, ", "), moneyOr(s.PurchaseCost, c.Currency), moneyOr(s.YearlyCost, c.Currency))
			}
		}
	}

	var engines []Workload
	for _, w := range r.TopWorkloads {
		if w.Engine != nil {
			engines = append(engines, w)
		}
	}
	if len(engines) > 0 {
		b.WriteString("\nUSEFUL WORK (inference engines of the top workloads)\n")
		tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  workload\tengine\tpeak KV cache\ttokens\ttokens/GPU-h\tat peak\ttokens/active GPU-h\tat peak\tcost/1M tokens\n")
		for _, w := range engines {
			e := w.Engine
			kv := "-"
			if e.KVKnown {
				kv = fmt.Sprintf("%.0f%%", 100*e.PeakKVCacheUsage)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", w.ID(), strings.Join(e.Kinds, ","), kv, tokens(e.Tokens),
				tokensOr(w.TokensPerGPUHour), tokensOr(w.PeakTokensPerGPUHour), tokensOr(w.TokensPerActiveGPUHour), tokensOr(w.PeakTokensPerActiveGPUHour),
				moneyOr(w.CostPerMillionTokens, r.currency()))
		}
		tw.Flush()
	}
	if r.Cost != nil {
		var lines []string
		for _, w := range r.TopWorkloads {
			if w.IdleCost == nil || *w.IdleCost > 0 {
				lines = append(lines, fmt.Sprintf("  %s: %s at peak, %s in all\n", w.ID(), moneyOr(w.PeakIdleCost, r.Cost.Currency), moneyOr(w.IdleCost, r.Cost.Currency)))
			}
		}
		if len(lines) > 0 {
			fmt.Fprintf(b, "\nIDLE COST OF THE TOP WORKLOADS (%s)\n%s", r.Cost.Currency, strings.Join(lines, ""))
		}
	}

	b.WriteString("\nBUY DATE\n")
	for _, line := range forecastLines(r.Forecast, loc) {
		fmt.Fprintf(b, "  %s\n", line)
	}
}

// forecastLines say the forecast in sentences, one a GPU type.
func forecastLines(f Forecast, loc *time.Location) []string {
	if !f.EnoughData {
		return []string{fmt.Sprintf("the data covers %d %s of the range; a trend needs %d: not extrapolated", f.Weeks, plural(f.Weeks, "week", "weeks"), minForecastWeeks)}
	}
	if len(f.GPUTypes) == 0 {
		return []string{"no pending demand was measured (no kube-state-metrics series): nothing to project"}
	}
	day := func(t *time.Time) string {
		if t == nil {
			return "never within two years"
		}
		return t.In(loc).Format("2006-01-02")
	}
	var out []string
	for _, t := range f.GPUTypes {
		trend := fmt.Sprintf("pending demand less reclaimable capacity at weekly peaks grows %+.2f GPUs a week over %d weeks", t.WeeklyGrowthGPUs, len(t.Weeks))
		switch {
		case t.ShortFrom == nil && t.ShortFromEarliest == nil:
			out = append(out, fmt.Sprintf("%s: not short at this trend within two years (%s)", t.GPUType, trend))
		case t.ShortFrom == nil:
			out = append(out, fmt.Sprintf("%s: not short at this trend, but the data allows it from %s (%s)", t.GPUType, day(t.ShortFromEarliest), trend))
		default:
			out = append(out, fmt.Sprintf("%s: short after reclaiming from %s (%.0f%% range %s to %s; %s)", t.GPUType, day(t.ShortFrom), 100*f.Confidence, day(t.ShortFromEarliest), day(t.ShortFromLatest), trend))
		}
	}
	return out
}

// valueHTML is the money, useful work and buy date cards.
func valueHTML(r *Report, loc *time.Location) template.HTML {
	var b strings.Builder
	td := func(s string) { fmt.Fprintf(&b, "<td class=\"n\">%s</td>", esc(s)) }
	if c := r.Cost; c != nil {
		fmt.Fprintf(&b, `<div class="card" id="money"><h2>Money (%s)</h2><table><tr><th></th><th>all hours</th><th>at peak</th></tr>`, esc(c.Currency))
		for _, row := range []struct {
			name      string
			all, peak float64
		}{{"owned", c.All.Owned, c.Peak.Owned}, {"allocated", c.All.Allocated, c.Peak.Allocated}, {"active (utilization-weighted)", c.All.Active, c.Peak.Active},
			{"idle while allocated", c.All.IdleAllocated, c.Peak.IdleAllocated}, {"unallocated", c.All.Unallocated, c.Peak.Unallocated}} {
			fmt.Fprintf(&b, "<tr><td>%s</td>", esc(row.name))
			td(money(row.all, c.Currency))
			td(money(row.peak, c.Currency))
			b.WriteString("</tr>")
		}
		b.WriteString("</table>")
		if m := r.Money; m != nil {
			b.WriteString(`<h2>By GPU type</h2><table><tr><th>GPU type</th><th>a GPU-hour</th><th>power</th><th>mean power</th><th>idle GPU-hour</th><th>idle at peak</th></tr>`)
			for _, t := range m.GPUTypes {
				fmt.Fprintf(&b, "<tr><td>%s</td>", esc(t.GPUType))
				if !t.Priced {
					b.WriteString(`<td colspan="5">no price</td></tr>`)
					continue
				}
				td(money(t.CapitalPerGPUHour, c.Currency))
				td(money(t.PowerPerKWh, c.Currency) + "/kWh")
				td(fmt.Sprintf("%.0f W", t.MeanPowerWatts))
				td(money(t.IdleRate, c.Currency))
				td(money(t.Peak.IdleAllocated, c.Currency))
				b.WriteString("</tr>")
			}
			fmt.Fprintf(&b, `</table><h2>What each lever is worth %s</h2><table><tr><th>lever</th><th>GPU-hours</th><th>worth</th></tr>`, esc(basisWord(m.Basis)))
			for _, l := range m.Levers {
				fmt.Fprintf(&b, "<tr><td>%s</td>", esc(strings.ReplaceAll(l.Lever, "_", "-")))
				td(gpuHours(l.GPUHours))
				td(moneyOr(l.Cost, c.Currency))
				b.WriteString("</tr>")
			}
			b.WriteString("</table>")
			if s := m.Shortfall; s != nil {
				var parts []string
				for _, t := range s.GPUTypes {
					parts = append(parts, fmt.Sprintf("%d × %s", t.GPUs, t.GPUType))
				}
				fmt.Fprintf(&b, "<p>The shortfall (%s): %s to buy, %s a year at the hourly price.</p>", esc(strings.Join(parts, ", ")), esc(moneyOr(s.PurchaseCost, c.Currency)), esc(moneyOr(s.YearlyCost, c.Currency)))
			}
		}
		b.WriteString("</div>")
	}
	var rows strings.Builder
	for _, w := range r.TopWorkloads {
		e := w.Engine
		if e == nil && w.IdleCost == nil {
			continue
		}
		fmt.Fprintf(&rows, "<tr><td>%s</td>", esc(w.ID()))
		kinds, kv, tok := "-", "-", "-"
		if e != nil {
			kinds, tok = strings.Join(e.Kinds, ", "), tokens(e.Tokens)
			if e.KVKnown {
				kv = fmt.Sprintf("%.0f%%", 100*e.PeakKVCacheUsage)
			}
		}
		fmt.Fprintf(&rows, "<td>%s</td>", esc(kinds))
		for _, s := range []string{kv, tok, tokensOr(w.TokensPerGPUHour), tokensOr(w.PeakTokensPerGPUHour), tokensOr(w.TokensPerActiveGPUHour),
			moneyOr(w.CostPerMillionTokens, r.currency()), moneyOr(w.PeakIdleCost, r.currency()), moneyOr(w.IdleCost, r.currency())} {
			fmt.Fprintf(&rows, "<td class=\"n\">%s</td>", esc(s))
		}
		rows.WriteString("</tr>")
	}
	if rows.Len() > 0 {
		b.WriteString(`<div class="card" id="work"><h2>Useful work and idle cost</h2><table><tr><th>workload</th><th>engine</th><th>peak KV cache</th><th>tokens</th><th>tokens/GPU-h</th><th>at peak</th><th>tokens/active GPU-h</th><th>cost/1M tokens</th><th>idle cost at peak</th><th>idle cost</th></tr>`)
		b.WriteString(rows.String())
		b.WriteString("</table></div>")
	}
	b.WriteString(`<div class="card" id="forecast"><h2>When to buy</h2><ul>`)
	for _, l := range forecastLines(r.Forecast, loc) {
		fmt.Fprintf(&b, "<li>%s</li>", esc(l))
	}
	b.WriteString("</ul></div>")
	return template.HTML(b.String())
}
