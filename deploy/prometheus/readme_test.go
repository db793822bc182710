package prometheus

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/gpuxray/gpuxray/collector/sim"
)

// idleThreshold is the agent's default --idle.threshold, the one the demo runs at.
const idleThreshold = 0.05

// TestREADMEAlertTimeline checks docs/demo.md's "See the alerts" against the
// rules, demo-prometheus.yml and the demo scenario: its commands reuse the
// demo that "Try it" started rather than starting a second one on the same
// port; it names every alert of gpuxray-rules.yaml, each with the rule's
// own `for:`; and the pending times it gives for the two alerts gated by a
// 5-minute rate match what Prometheus computes on a fresh start.
//
// A fresh Prometheus's rate(x[W]) over samples spanning s seconds, the
// last d seconds before the evaluation, is the increase extrapolated by
// half a scrape interval I before the first sample (the window's start is
// further than 1.1 I) and by d after the last, divided by the whole W
// (promql/functions.go, extrapolatedRate). A counter growing at r a second
// thus reads r·(s + I/2 + d)/W, which reaches a floor θ once s + d ≥ θW/r −
// I/2. The rule that holds it is evaluated within an interval of that, an
// alert reading its recorded value within another, and the first scrape
// comes within an interval of Prometheus' start (README counts from there).
func TestREADMEAlertTimeline(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/demo.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "### See the alerts\n")
	section, _, _ = strings.Cut(section, "\n## ") // or to the page's end
	if !ok {
		t.Fatal("docs/demo.md has no section ### See the alerts")
	}
	section, _, _ = strings.Cut(section, "To see a whole scenario at once")
	for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, -1) {
		if strings.Contains(block[1], "make demo") {
			t.Errorf("See the alerts starts a demo, which collides with Try it's on :9471:\n%s", block[1])
		}
	}

	rules, err := Parse(Rules)
	if err != nil {
		t.Fatal(err)
	}
	forOf := map[string]string{}
	exprOf := map[string]string{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				forOf[r.Alert], exprOf[r.Alert] = r.For, r.Expr
			} else {
				exprOf[r.Record] = r.Expr
			}
		}
	}
	// bullets maps each alert to the README bullets whose subject it is
	// (the first alert named in a bullet).
	bullets := map[string][]string{}
	alertName := regexp.MustCompile("`(G[A-Za-z]+)`")
	for _, item := range strings.Split(section, "\n- ")[1:] {
		if m := alertName.FindStringSubmatch(item); m != nil {
			bullets[m[1]] = append(bullets[m[1]], strings.Join(strings.Fields(item), " "))
		}
	}
	for name, f := range forOf {
		if len(bullets[name]) == 0 {
			t.Errorf("docs/demo.md's See the alerts says nothing of %s", name)
		}
		for _, item := range bullets[name] {
			for _, m := range regexp.MustCompile("`for: ([0-9a-z]+)`").FindAllStringSubmatch(item, -1) {
				if m[1] != f {
					t.Errorf("README gives %s `for: %s`, the rule has %s", name, m[1], f)
				}
			}
		}
	}

	var cfg struct {
		Global struct {
			ScrapeInterval     string `yaml:"scrape_interval"`
			EvaluationInterval string `yaml:"evaluation_interval"`
		}
	}
	y, err := os.ReadFile("demo-prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(y, &cfg); err != nil {
		t.Fatal(err)
	}
	interval, err := time.ParseDuration(cfg.Global.ScrapeInterval)
	if err != nil || cfg.Global.EvaluationInterval != cfg.Global.ScrapeInterval {
		t.Fatalf("demo-prometheus.yml: scrape every %q, evaluate every %q: want one interval", cfg.Global.ScrapeInterval, cfg.Global.EvaluationInterval)
	}
	I := interval.Seconds()

	// The demo at its live start.
	sc := sim.Demo()
	live := sc.LeadIn
	holders := func(gpu int, at time.Duration) (pods []int) {
		for i, p := range sc.Pods {
			if p.From <= at && (p.To == 0 || at < p.To) && slices.ContainsFunc(p.Devices, func(d sim.DeviceSpec) bool { return d.GPU == gpu }) {
				pods = append(pods, i)
			}
		}
		return pods
	}
	// Idle capacity, as cluster:gpuxray_idle_gpus:rate5m counts it: allocated
	// GPUs that are idle, plus unallocated GPUs less their activity.
	idle := 0.0
	for g := 0; g < sc.GPUs; g++ {
		u := sc.GPUUtilAt(g, live)
		switch {
		case len(holders(g, live)) == 0:
			idle += 1 - u
		case u < idleThreshold:
			idle++
		}
	}

	window := func(record string) float64 {
		m := regexp.MustCompile(`rate\([a-z_]+\[([0-9]+[smh])\]\)`).FindStringSubmatch(exprOf[record])
		if m == nil {
			t.Fatalf("%s has no rate window: %s", record, exprOf[record])
		}
		d, _ := time.ParseDuration(m[1])
		return d.Seconds()
	}
	floor := func(alert, re string) float64 {
		m := regexp.MustCompile(re).FindStringSubmatch(exprOf[alert])
		if m == nil {
			t.Fatalf("%s: no %s in %s", alert, re, exprOf[alert])
		}
		f, _ := strconv.ParseFloat(m[1], 64)
		return f
	}
	// stated is the pending time README gives an alert, and how far off a
	// figure so rounded may be.
	stated := func(alert string) (at, slack float64) {
		for _, item := range bullets[alert] {
			if m := regexp.MustCompile(`\*\*after ~([0-9.]+) (s|min)\*\*`).FindStringSubmatch(item); m != nil {
				v, _ := strconv.ParseFloat(m[1], 64)
				if m[2] == "min" {
					return v * 60, 30
				}
				return v, I / 2
			}
		}
		t.Errorf("README gives no pending time (**after ~N s** or **after ~N min**) for %s", alert)
		return 0, 0
	}
	check := func(alert string, floor, rate, lo, hi float64) {
		t.Helper()
		at, slack := stated(alert)
		t.Logf("%s: floor %g at %g a second: pending %.0f–%.0f s after Prometheus starts; README: %.0f s", alert, floor, rate, lo, hi, at)
		if at < lo-slack || at > hi+slack {
			t.Errorf("README: %s pending after ~%.0f s; the rule's floor %g over its window, at %g a second from the demo, puts it %.0f–%.0f s after Prometheus starts",
				alert, at, floor, rate, lo, hi)
		}
	}

	// GPUPodsPendingWhileGPUsIdle: cluster:gpuxray_idle_gpus:rate5m ≥ θ,
	// recorded from per-device rates, while a pod waits.
	const podsPending = "GPUPodsPendingWhileGPUsIdle"
	theta := floor(podsPending, `cluster:gpuxray_idle_gpus:rate5m >= ([0-9.]+)`)
	need := theta*window("cluster_window:gpuxray_device_allocated_idle_seconds:rate5m")/idle - I/2
	// Recording evaluation, then the alert's; the first scrape within I.
	check(podsPending, theta, idle, need, need+3*I)
	waits := false
	for _, u := range sc.Unscheduled {
		waits = waits || u.From <= live && live+time.Duration(need+3*I)*time.Second < u.To
	}
	if !waits {
		t.Errorf("no pod of the demo waits at its live start for %s to go pending", podsPending)
	}

	// GPUPendingWhileLowerPriorityIdle: a GPU ≥ θ idle over its window in
	// the alert's own expression, held below the highest waiting class.
	const lowerIdle = "GPUPendingWhileLowerPriorityIdle"
	m := regexp.MustCompile(`rate\(gpuxray_device_allocated_idle_seconds_total\[([0-9]+[smh])\]\)\) >= ([0-9.]+)`).FindStringSubmatch(exprOf[lowerIdle])
	if m == nil {
		t.Fatalf("%s: no per-GPU idle rate floor in %s", lowerIdle, exprOf[lowerIdle])
	}
	w, _ := time.ParseDuration(m[1])
	theta, _ = strconv.ParseFloat(m[2], 64)
	need = theta*w.Seconds() - I/2 // an idle GPU's idle seconds grow at 1 a second
	check(lowerIdle, theta, 1, need, need+2*I)
	// Who it fires for: holders of a GPU idle from the live start until it
	// fires, every holder ranking below the highest class that waits then.
	forDur, _ := time.ParseDuration(forOf[lowerIdle])
	fires := live + time.Duration(need+2*I)*time.Second + forDur
	waiting := int32(-1)
	for _, u := range sc.Unscheduled {
		if u.From <= live && fires < u.To {
			waiting = max(waiting, sc.PriorityClasses[u.PriorityClass])
		}
	}
	var firing []string
	for g := 0; g < sc.GPUs; g++ {
		hs := holders(g, live)
		quiet := len(hs) > 0
		for at := live; quiet && at <= fires; at += time.Second {
			quiet = sc.GPUUtilAt(g, at) < idleThreshold && slices.Equal(holders(g, at), hs)
		}
		for _, h := range hs {
			quiet = quiet && sc.PriorityClasses[sc.Pods[h].PriorityClass] < waiting
		}
		for _, h := range hs {
			if quiet {
				firing = append(firing, sc.Pods[h].Namespace+"/"+sc.Pods[h].Name)
			}
		}
	}
	if len(firing) == 0 {
		t.Errorf("%s fires for no pod of the demo", lowerIdle)
	}
	for _, p := range firing {
		if !strings.Contains(strings.Join(bullets[lowerIdle], " "), "`"+p+"`") {
			t.Errorf("README does not name %s, for which %s fires", p, lowerIdle)
		}
	}
}
