package fleet

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/gpuxray/gpuxray/collector/sim"
	"github.com/gpuxray/gpuxray/report"
)

var monday = time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)

func TestGenerateIsSeeded(t *testing.T) {
	t.Parallel()
	a, err := Generate(GenConfig{Seed: 7, Nodes: 4, Start: monday, Duration: 48 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Generate(GenConfig{Seed: 7, Nodes: 8, Start: monday, Duration: 48 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	c, err := Generate(GenConfig{Seed: 8, Nodes: 4, Start: monday, Duration: 48 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for i := range a {
		if !bytes.Equal(a[i].YAML, b[i].YAML) {
			t.Errorf("node %d differs between a fleet of 4 and one of 8 with the same seed", i)
		}
		if bytes.Equal(a[i].YAML, c[i].YAML) {
			t.Errorf("node %d is the same under seeds 7 and 8", i)
		}
		if a[i].Kind != nodeKinds[i%len(nodeKinds)] || a[i].Scenario.Node != a[i].Name {
			t.Errorf("node %d is %s %q, want %s %q", i, a[i].Kind, a[i].Scenario.Node, nodeKinds[i%len(nodeKinds)], a[i].Name)
		}
	}
	if NodeName(3, 40) != "gx-003" || NodeName(12, 1000) != "gx-012" || NodeName(12, 1001) != "gx-0012" {
		t.Errorf("node names %s %s %s", NodeName(3, 40), NodeName(12, 1000), NodeName(12, 1001))
	}
}

// TestGenerateMix: two nodes hold every kind of use the fleet is about.
func TestGenerateMix(t *testing.T) {
	t.Parallel()
	nodes, err := Generate(GenConfig{Seed: 1, Nodes: 2, Start: monday, Duration: 7 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	has := map[string]bool{}
	for _, n := range nodes {
		sc := n.Scenario
		has["system "+sc.System] = true
		if len(sc.Unallocated) > 0 {
			has["work outside Kubernetes"] = true
		}
		if len(sc.Unscheduled) > 0 {
			has["pending demand"] = true
		}
		for _, u := range sc.Unscheduled {
			switch u.NodeSelector[sim.ProductLabel] {
			case "":
				has["waiting for any GPU type"] = true
			case report.GPUProduct(sim.ProductName(sc.System)):
				has["waiting for the node's own GPU type"] = true
			default:
				has["waiting for another GPU type"] = true
			}
		}
		ends := 0
		for _, p := range sc.Pods {
			for _, d := range p.Devices {
				switch {
				case d.MIG && sc.System == "dgxa100":
					has["MIG without an activity source (A100)"] = true
				case d.MIG:
					has["MIG measured by GPM (H100)"] = true
				case d.Replicated:
					has["time-slicing"] = true
				}
			}
			if len(p.Devices) > 1 {
				has["multi-GPU training"] = true
			}
			for _, s := range p.Util {
				if s.Duty != nil {
					has["bursty inference"] = true
				}
			}
			if p.Owner.Kind == "StatefulSet" && strings.HasPrefix(p.Name, "nb-") {
				has["notebooks"] = true
			}
			if p.To < sc.Duration {
				ends++
			}
		}
		if ends > 3 {
			has["churn"] = true
		}
	}
	for _, want := range []string{"system dgxh100", "system dgxa100", "work outside Kubernetes", "pending demand",
		"MIG without an activity source (A100)", "MIG measured by GPM (H100)", "time-slicing", "multi-GPU training",
		"bursty inference", "notebooks", "churn", "waiting for any GPU type", "waiting for the node's own GPU type", "waiting for another GPU type"} {
		if !has[want] {
			t.Errorf("the fleet has no %s", want)
		}
	}
}

// TestGenerateRules: every pod keeps the rules that make its truth what
// an agent measures (gen.go).
func TestGenerateRules(t *testing.T) {
	t.Parallel()
	for _, start := range []time.Time{monday, monday.Add(-time.Hour), monday.Add(7 * time.Hour)} {
		nodes, err := Generate(GenConfig{Seed: 3, Nodes: 4, Start: start, Duration: 3*24*time.Hour + 2*time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes {
			sc := n.Scenario
			for _, p := range sc.Pods {
				id := n.Name + " " + p.Namespace + "/" + p.Name
				for _, b := range []time.Duration{p.From, p.To} {
					if w := sc.Start.Add(b); (w.Hour() == 9 || w.Hour() == 18) && w.Minute() == 0 && b > 0 && b < sc.Duration {
						t.Errorf("%s starts or ends at %s, a peak window's boundary", id, w.Format("15:04"))
					}
				}
				if p.To < sc.Duration {
					last := p.Util[len(p.Util)-1]
					if last.Duty != nil || last.Value != 0 || p.To-last.At < time.Minute {
						t.Errorf("%s ends at %s busy (last step %+v): a pod is idle for its last minutes", id, p.To, last)
					}
				}
				for _, s := range p.Util {
					if s.Duty != nil && (s.At%sim.SamplePeriod != 0 || s.Duty.Period%sim.SamplePeriod != 0 || s.Duty.Busy%sim.SamplePeriod != 0) {
						t.Errorf("%s: a burst at %s (%s/%s) is off the driver's sample grid", id, s.At, s.Duty.Busy, s.Duty.Period)
					}
					if s.Duty == nil && s.At > time.Hour && s.At%grid != 0 {
						t.Errorf("%s: a step at %s is off the %s grid", id, s.At, grid)
					}
				}
			}
		}
	}
}

// TestGenerateDRAHook: DRA nodes wait for the scenario format's
// `allocation: dra`; until then asking for them is refused, after it
// they are written.
func TestGenerateDRAHook(t *testing.T) {
	t.Parallel()
	nodes, err := Generate(GenConfig{Seed: 1, Nodes: 4, Start: monday, Duration: 24 * time.Hour, DRAShare: 0.5})
	if !DRASupported() {
		if err == nil || !strings.Contains(err.Error(), "allocation: dra") {
			t.Fatalf("DRA nodes before the scenario format has them: %v, want a refusal naming allocation: dra", err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	dra := 0
	for _, n := range nodes {
		if bytes.Contains(n.YAML, []byte("\nallocation: dra\n")) {
			dra++
		}
	}
	if dra != 2 {
		t.Errorf("%d DRA nodes of 4, want 2", dra)
	}
}

func TestGenerateRefuses(t *testing.T) {
	t.Parallel()
	for _, c := range []GenConfig{
		{Nodes: 0, Start: monday, Duration: 24 * time.Hour},
		{Nodes: 1, Start: monday, Duration: time.Hour},
		{Nodes: 1, Start: monday.Add(time.Minute), Duration: 24 * time.Hour},
		{Nodes: 1, Start: monday, Duration: 24 * time.Hour, DRAShare: 2},
	} {
		if _, err := Generate(c); err == nil {
			t.Errorf("Generate(%+v) accepted", c)
		}
	}
}

// TestShortByType: the truth's shortfall by GPU type. A type is short of
// what its waiters want beyond its free and idle GPUs; waiters of any
// type take what the typed ones left.
func TestShortByType(t *testing.T) {
	t.Parallel()
	h, a := "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-40GB"
	st := stepTruth{waiting: map[string]float64{h: 3, a: 1, report.GPUTypeAny: 4}, supply: map[string]float64{h: 1, a: 3.5}, peak: 1}
	sh := st.short()
	// H100: 3 wanted, 1 idle: 2 short. A100: 1 of 3.5: 2.5 left for any,
	// which wants 4: 1.5 short.
	if sh[h] != 2 || sh[a] != 0 || sh[report.GPUTypeAny] != 1.5 || st.shortTotal() != 3.5 {
		t.Errorf("short %v (total %g), want H100 2, A100 0, any 1.5", sh, st.shortTotal())
	}
	steps := []stepTruth{st, st, {waiting: map[string]float64{h: 1}, supply: map[string]float64{}, peak: 1}}
	// The 95th percentile of three peak steps is the largest: H100 2,
	// any 1.5 (2 GPUs): 4.
	if got := shortByType(steps, report.BasisPeak, 0.95); got != 4 {
		t.Errorf("GPUs short %d, want 4", got)
	}
}
