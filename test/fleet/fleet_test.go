//go:build e2e

package fleet

import (
	"bytes"
	"context"
	"github.com/prometheus/prometheus/promql/parser"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpuxray/gpuxray/internal/testtool"

	promrules "github.com/gpuxray/gpuxray/deploy/prometheus"
)

// TestFleet is `make fleet` at the size CI affords: four nodes live
// (scraped by two vmagent shards, rules in vmalert, alerts through
// Alertmanager), a day of their history read back by gpuxray report, and
// the engines' comparison. Every figure must be within 1% of the truth.
// The fleet runs as `make fleet` runs it, a command built without the race
// detector: under it, the agents' polls lag by seconds, which a 5-minute
// rate of one GPU reads as more than 1%.
func TestFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("a fleet run takes two minutes")
	}
	for _, name := range ToolNames {
		testtool.Need(t, name)
	}
	dir := t.TempDir()
	gpuxray := goBuild(t, dir, "../../cmd/gpuxray-sim")
	fleet := goBuild(t, dir, "./cmd/fleet")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, fleet, "-nodes=4", "-history.days=1", "-gpuxray="+gpuxray, "-dir="+filepath.Join(dir, "run"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	table := stdout.String()
	if err != nil {
		t.Fatalf("fleet: %v\n%s\n%s", err, table, stderr.String())
	}
	t.Logf("\n%s", table)
	for _, phase := range []string{"live", "history", "engines"} {
		if n := strings.Count(table, "\n"+phase+" "); n < 10 {
			t.Errorf("%d checks in phase %s, want the whole phase", n, phase)
		}
	}
	// Every recording rule is checked, live and on both engines.
	rules, _ := promrules.Parse(promrules.Rules)
	checked := fleetRules(rules.Inlined())
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if _, ok := checked[r.Record]; !ok {
				continue
			}
			for _, name := range []string{"rule " + r.Record + " ", "rule " + r.Record + " on VictoriaMetrics", "rule " + r.Record + " on Prometheus"} {
				if !strings.Contains(table, name) {
					t.Errorf("no check %q", name)
				}
			}
		}
	}
	if last := lastLine(table); !regexp.MustCompile(`^fleet: 4 nodes, 32 GPUs, worst error [0-9.]+% .*, [0-9]+ checks passed`).MatchString(last) {
		t.Errorf("last line %q", last)
	}
}

// TestFleetUsage: bad flags and a missing binary are one sentence and
// exit code 2.
func TestFleetUsage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the command")
	}
	fleet := goBuild(t, t.TempDir(), "./cmd/fleet")
	for _, args := range [][]string{{"-nodes=x"}, {"-gpuxray=/nonexistent/gpuxray"}, {"extra"}} {
		cmd := exec.Command(fleet, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		if code := cmd.ProcessState.ExitCode(); code != 2 || err == nil {
			t.Errorf("fleet %v: exit %d, want 2\n%s", args, code, stderr.String())
		}
		if lines := strings.Count(strings.TrimSpace(stderr.String()), "\n") + 1; lines != 1 || strings.Contains(stderr.String(), "panic") {
			t.Errorf("fleet %v: %d lines on stderr, want one sentence:\n%s", args, lines, stderr.String())
		}
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// goBuild builds a package into dir, without the race detector.
func goBuild(t *testing.T, dir, pkg string) string {
	t.Helper()
	bin := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Env = append(os.Environ(), "CGO_CFLAGS=-Wno-deprecated-declarations", "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// TestResult: the table's last line names the worst error; a figure off
// by more than 1%, or a failed check, fails the run.
func TestResult(t *testing.T) {
	t.Parallel()
	r := &Result{Nodes: 40, GPUs: 320}
	r.figure("live", "rule a", "GPUs", 100.5, 100, floorGPUs)
	w := newWorst("history", "report: workloads: idle", "GPU·h", floorGPUHours)
	w.add("ns/a", 10, 10)
	w.add("ns/b", 0.0001, 0)
	r.addWorst(w)
	r.pass("live", "alerts", true, "")
	if len(r.Failed()) != 0 {
		t.Fatalf("failed %+v", r.Failed())
	}
	if e, c := r.WorstError(); !near(e, 0.005) || c.Name != "rule a" {
		t.Errorf("worst error %g (%s), want 0.5%% of rule a", e, c.Name)
	}
	var b bytes.Buffer
	r.Write(&b)
	if got := lastLine(b.String()); got != "fleet: 40 nodes, 320 GPUs, worst error 0.500% (live rule a), 3 checks passed" {
		t.Errorf("last line %q", got)
	}
	for _, c := range []struct {
		name string
		f    func(*Result)
	}{
		{"a figure 1.5% off", func(r *Result) { r.figure("history", "report: owned", "GPU·h", 101.5, 100, floorGPUHours) }},
		{"a figure that is NaN", func(r *Result) { r.figure("history", "x", "GPU·h", 0, 0/zero(), floorGPUHours) }},
		{"a failed check", func(r *Result) { r.pass("live", "alerts", false, "missing") }},
		{"nothing to check", func(r *Result) { r.addWorst(newWorst("live", "rule b", "GPUs", floorGPUs)) }},
	} {
		r := &Result{Nodes: 1, GPUs: 8}
		c.f(r)
		if len(r.Failed()) != 1 {
			t.Errorf("%s: %d failed checks, want 1", c.name, len(r.Failed()))
		}
		var b bytes.Buffer
		r.Write(&b)
		if !strings.Contains(lastLine(b.String()), "1 of 1 checks FAILED") {
			t.Errorf("%s: last line %q", c.name, lastLine(b.String()))
		}
	}
}

func zero() float64 { return 0 }

// TestResultUnjudged: a check with nothing the truth could judge neither
// passes nor fails; the table and the last line say so.
func TestResultUnjudged(t *testing.T) {
	t.Parallel()
	r := &Result{Nodes: 40, GPUs: 320}
	r.figure("live", "rule a", "GPUs", 100.5, 100, floorGPUs)
	w := newWorst("live", "rule b", "GPUs", floorGPUs)
	w.mayNotJudge = true
	w.notes = append(w.notes, "7 samples near a change skipped")
	r.addWorst(w)
	if len(r.Failed()) != 0 {
		t.Fatalf("failed %+v", r.Failed())
	}
	var b bytes.Buffer
	r.Write(&b)
	if got, want := lastLine(b.String()), "fleet: 40 nodes, 320 GPUs, worst error 0.500% (live rule a), 1 checks passed (1 NOT JUDGED: nothing the truth could judge)"; got != want {
		t.Errorf("last line %q, want %q", got, want)
	}
	if !strings.Contains(b.String(), "NOT JUDGED") || !strings.Contains(b.String(), "7 samples near a change skipped") {
		t.Errorf("the table does not say why rule b was not judged:\n%s", b.String())
	}
}

// TestFleetRules: the fleet checks every recording rule but the DRA
// demand ones, which read ResourceClaims the fleet does not serve.
func TestFleetRules(t *testing.T) {
	t.Parallel()
	rules, err := promrules.Parse(promrules.Rules)
	if err != nil {
		t.Fatal(err)
	}
	all := rules.Inlined()
	checked := fleetRules(all)
	for name := range all {
		_, ok := checked[name]
		left := strings.Contains(name, "resourceclaim") || strings.Contains(name, "priority") || strings.Contains(name, "queue") ||
			strings.HasSuffix(name, ":info") || strings.Contains(name, "_cost:")
		if ok == left {
			t.Errorf("%s checked: %v", name, ok)
		}
	}
	// What the engines are asked must parse: a selector on an inlined
	// recorded series would not.
	for name, e := range checked {
		if _, err := parser.NewParser(parser.Options{}).ParseExpr(e); err != nil {
			t.Errorf("%s, inlined, does not parse: %v", name, err)
		}
	}
	if _, ok := checked["cluster:gpuxray_idle_gpus:rate5m"]; !ok || len(checked) < 15 {
		t.Errorf("%d rules checked", len(checked))
	}
}
