package gpu

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/collector/sim"
)

// dryLead is when the simulated load's first phase starts (the real load
// spends it importing torch); dryPhase is each phase's length.
const (
	dryLead  = 10 * time.Second
	dryPhase = 30 * time.Second
)

// dryScenario is load.py's pattern on one simulated H200. The simulator's GPM
// SM activity is derived from the busy ratio (collector/sim/gpm.go), so the
// tiny phase (busy ratio high, SMs empty) cannot be expressed: there it reads
// like the busy phase and the GPM check is skipped.
const dryScenario = `
start: 2026-12-02T00:00:00Z
duration: 3m
node: gpu-check
system: dgxh200
gpus: 1
pods:
  - namespace: gpu-check
    name: load
    container: load
    devices: ["gpu:0"]
    memory: 8GiB
    util:
      - {at: 0s, value: 0}
      - {at: 10s, value: 1}                                  # busy
      - {at: 40s, value: 0}                                  # idle
      - {at: 70s, duty: {period: 500ms, busy: 100ms, value: 1}} # duty, 20%
      - {at: 100s, value: 1}                                 # tiny
      - {at: 130s, value: 0}
`

// dryTruth is the ground truth load.py would write for dryScenario.
func dryTruth(start time.Time) []Phase {
	u := func(d time.Duration) float64 { return unix(start.Add(d)) }
	var out []Phase
	for i, name := range []string{"busy", "idle", "duty", "tiny"} {
		from := dryLead + time.Duration(i)*dryPhase
		p := Phase{Name: name, Start: u(from), End: u(from + dryPhase), DryRun: true}
		if name == "duty" {
			for t := from; t+100*time.Millisecond <= from+dryPhase; t += 500 * time.Millisecond {
				p.Bursts = append(p.Bursts, [2]float64{u(t), u(t + 100*time.Millisecond)})
				p.BusyS += 0.1
			}
		}
		if name == "tiny" {
			p.Kernel = "simulated"
		}
		out = append(out, p)
	}
	return out
}

// TestDryRunOnSimulator runs TestRealGPU's collection and analysis on the
// simulated driver, on the virtual clock: the analysis that judges a real GPU
// is the one tested here.
func TestDryRunOnSimulator(t *testing.T) {
	sc, err := sim.ParseScenario([]byte(dryScenario), "dry.yaml")
	if err != nil {
		t.Fatal(err)
	}
	clock := sim.NewVirtualClock(sc.Start)
	node, err := sim.NewNode(sc, clock)
	if err != nil {
		t.Fatal(err)
	}
	lib := node.NVML()
	if ret := lib.Init(); ret != 0 {
		t.Fatalf("init: %v", ret)
	}
	defer lib.Shutdown()
	dev, uuid, err := gpu0UUID(lib)
	if err != nil {
		t.Fatal(err)
	}
	info := readInfo(lib, dev, uuid)
	info.When = sc.Start.Format(time.RFC3339) + " (simulated)"
	st := newStack(t, lib, clock, uuid, zap.NewNop())
	info.RingAtStart = readRing(lib, dev)
	st.poll()
	for clock.Now().Before(sc.Start.Add(dryLead + 4*dryPhase + 5*time.Second)) {
		clock.Advance(time.Second)
		st.poll()
	}
	info.RingAtEnd = readRing(lib, dev)

	// The truth goes through load.py's format and the parser.
	dir := t.TempDir()
	truthPath := filepath.Join(dir, "truth.jsonl")
	f, err := os.Create(truthPath)
	if err != nil {
		t.Fatal(err)
	}
	enc := json.NewEncoder(f)
	for _, p := range dryTruth(sc.Start) {
		if err := enc.Encode(p); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	truth, err := ReadTruthFile(truthPath)
	if err != nil {
		t.Fatal(err)
	}
	opt := Options{SkipTinyGPM: "the simulator derives GPM SM activity from the busy ratio; a tiny kernel cannot be expressed"}
	res := report(t, dir, info, st.recs, truth, opt)

	// What the simulation assumes of the driver, which the real run reports.
	s := Stats(st.recs)
	if math.Abs(s.PeriodMedianS-sim.SamplePeriod.Seconds()) > 1e-5 {
		t.Errorf("median sample period %fs, want %s", s.PeriodMedianS, sim.SamplePeriod)
	}
	if info.RingAtEnd.Samples != sim.SampleBuffer {
		t.Errorf("ring holds %d samples, want %d", info.RingAtEnd.Samples, sim.SampleBuffer)
	}
	// Per-PID entries come once a refresh (the simulator's per-read shape),
	// not once a device sample period.
	if most := int(3*time.Minute/sim.DefaultProcessRefresh) + 2; s.ProcSamples == 0 || s.ProcSamples > most {
		t.Errorf("%d process samples in 3m, want 1 to %d (one a %s refresh)", s.ProcSamples, most, sim.DefaultProcessRefresh)
	}
	// The duty phase's truth is what the scenario says: 20% of the window.
	for _, p := range res.Phases {
		if p.Phase == "duty" && math.Abs(p.TruthBusy-0.2*p.Length) > 0.11 {
			t.Errorf("duty truth %.3fs busy in %.3fs", p.TruthBusy, p.Length)
		}
	}

	// The analysis is not vacuous: the same polls against a truth whose busy
	// and idle phases are swapped, and whose duty bursts are twice as long,
	// miss their targets.
	wrong := append([]Phase(nil), truth...)
	for i := range wrong {
		switch wrong[i].Name {
		case "busy":
			wrong[i].Name = "idle"
		case "idle":
			wrong[i].Name = "busy"
		case "duty":
			b := make([][2]float64, len(wrong[i].Bursts))
			for k, x := range wrong[i].Bursts {
				b[k] = [2]float64{x[0], x[1] + 0.1}
			}
			wrong[i].Bursts = b
		}
	}
	bad, err := Analyze(st.recs, wrong, opt)
	if err != nil {
		t.Fatal(err)
	}
	if bad.Pass || len(bad.Failures()) != 3 {
		t.Errorf("a wrong truth gives %d failures, want 3 (busy, idle, duty):\n%s", len(bad.Failures()), bad.Table())
	}
}

// TestAnalyzeTinyGPM checks the tiny phase's GPM target on hand-made polls,
// which the simulator cannot produce.
func TestAnalyzeTinyGPM(t *testing.T) {
	var recs []Record
	for i := 0; i <= 50; i++ {
		ts := float64(i)
		recs = append(recs, Record{T: ts, Allocated: ts, Idle: 0, Active: ts,
			HasGPM: true, SMActive: 0.01, Samples: [][2]float64{{ts - 0.5, 1}, {ts, 1}}})
	}
	truth := []Phase{
		{Name: "busy", Start: 1, End: 12},
		{Name: "idle", Start: 12, End: 24}, // the polls are busy: fails
		{Name: "duty", Start: 24, End: 36}, // no bursts, all active: fails
		{Name: "tiny", Start: 36, End: 48},
	}
	res, err := Analyze(recs, truth, Options{})
	if err != nil {
		t.Fatal(err)
	}
	tiny := res.Phases[3]
	if !tiny.HasGPM || math.Abs(tiny.MeanSMActive-0.01) > 1e-9 || math.Abs(tiny.MeanUtil-1) > 1e-9 || !tiny.Checks[len(tiny.Checks)-1].Pass {
		t.Errorf("tiny phase: %+v", tiny)
	}
	if got := len(res.Failures()); got != 2 {
		t.Errorf("%d failures, want 2 (idle, duty):\n%s", got, res.Table())
	}
	// Without GPM the tiny target fails rather than passing silently.
	for i := range recs {
		recs[i].HasGPM = false
	}
	res, err = Analyze(recs, truth[3:], Options{})
	if err == nil || res.Pass {
		t.Errorf("no GPM: err %v, pass %v; want a missing-phase error and a failure", err, res.Pass)
	}
	if _, err := Analyze(recs, []Phase{{Name: "busy", Start: 100, End: 130}}, Options{}); err == nil {
		t.Error("a phase outside the polls was measured")
	}
}
