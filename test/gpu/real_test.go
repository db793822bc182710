package gpu

import (
	"context"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/gpuxray/gpuxray/collector/nvml"
	"github.com/gpuxray/gpuxray/collector/sim"
)

var (
	onGPU       = flag.Bool("gpu", false, "run TestRealGPU on GPU 0 of this machine (needs an NVIDIA driver, python3 with PyTorch)")
	python      = flag.String("gpu.python", "python3", "the python that runs the load")
	loadPath    = flag.String("gpu.load", "", "load.py (default: load.py or test/gpu/load.py, whichever exists)")
	outDir      = flag.String("gpu.out", os.Getenv("OUT"), "where results.txt, result.json, records.json and truth.jsonl go (default $OUT, else a temporary directory)")
	phaseS      = flag.Float64("gpu.phase-seconds", 30, "length of each phase of the load")
	loadTimeout = flag.Duration("gpu.load-timeout", 4*time.Minute, "kill the load after this long")
	rehearse    = flag.Bool("gpu.rehearse", false, "run TestRehearsal: TestRealGPU's path on the simulated driver with load.py --dry-run (needs python3)")
)

// wallClock is the real clock.
type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// TestRealGPU runs load.py on GPU 0 with the agent's stack polling the real
// NVML every second, and checks its idle and active seconds against the
// load's own truth (issue #10). Skipped unless -gpu is given.
func TestRealGPU(t *testing.T) {
	if !*onGPU {
		t.Skip("needs a GPU: run with -gpu (see test/gpu/README.md)")
	}
	runLoad(t, gonvml.New(), wallClock{}, *outDir, *phaseS, nil, true)
}

// TestRehearsal is TestRealGPU's own path — the load as a subprocess, polls
// on the wall clock, its truth file — on the simulated driver with
// load.py --dry-run, whose phases the scenario does not follow: the targets
// are reported, not asserted. Needs python3; run.sh runs it with
// -gpu.rehearse.
func TestRehearsal(t *testing.T) {
	if !*rehearse {
		t.Skip("run with -gpu.rehearse (needs python3; test/gpu/run.sh does)")
	}
	sc, err := sim.ParseScenario([]byte(dryScenario), "dry.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sc.Start = time.Now()
	node, err := sim.NewNode(sc, sim.RealClock(sc.Start))
	if err != nil {
		t.Fatal(err)
	}
	dir := *outDir
	if dir == "" {
		dir = t.TempDir()
	}
	runLoad(t, node.NVML(), sim.RealClock(sc.Start), dir, 5, []string{"--dry-run"}, false)
}

// runLoad runs the load with the stack on lib polling every second until
// it has exited, then reports to dir; with assert, a missed target fails t.
func runLoad(t *testing.T, lib gonvml.Interface, clock nvml.Clock, dir string, phaseSeconds float64, loadArgs []string, assert bool) {
	load := *loadPath
	if load == "" {
		load = "load.py"
		if _, err := os.Stat(load); err != nil {
			load = filepath.Join("test", "gpu", "load.py")
		}
	}
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))

	if ret := lib.Init(); ret != gonvml.SUCCESS {
		t.Fatalf("NVML init: %s", ret.Error())
	}
	defer lib.Shutdown() // after the reader's (NVML counts its inits)
	dev, uuid, err := gpu0UUID(lib)
	if err != nil {
		t.Fatal(err)
	}
	info := readInfo(lib, dev, uuid)
	info.When = clock.Now().UTC().Format(time.RFC3339)
	info.RingAtStart = readRing(lib, dev)
	t.Logf("driver %s, NVML %s, %s %s; ring at start: %+v", info.Driver, info.NVML, info.GPU, uuid, info.RingAtStart)

	st := newStack(t, lib, clock, uuid, log)

	// The driver probes (issue #26), beside the agent's reads.
	probes := DriverProbes{Devices: deviceIDs(lib)}
	dp := &driverProbe{lib: lib, dev: dev}
	probeCtx, stopProbe := context.WithCancel(context.Background())
	probeDone := make(chan struct{})
	go func() { defer close(probeDone); dp.run(probeCtx) }()
	defer func() { stopProbe(); <-probeDone }()

	// The load, in the background.
	truthPath := filepath.Join(dir, "truth.jsonl")
	loadLog, err := os.Create(filepath.Join(dir, "load.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer loadLog.Close()
	ctx, cancel := context.WithTimeout(context.Background(), *loadTimeout)
	defer cancel()
	args := append([]string{load, "--out", truthPath, "--phase-seconds", strconv.FormatFloat(phaseSeconds, 'f', -1, 64)}, loadArgs...)
	cmd := exec.CommandContext(ctx, *python, args...)
	cmd.Stdout = io.MultiWriter(loadLog, testWriter{t})
	cmd.Stderr = cmd.Stdout
	var (
		mu      sync.Mutex
		loadErr error
		doneAt  time.Time
	)
	st.poll() // the baseline, before the load starts
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the load: %v", err)
	}
	go func() {
		err := cmd.Wait()
		mu.Lock()
		loadErr, doneAt = err, time.Now()
		mu.Unlock()
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for range tick.C {
		r := st.poll()
		if len(st.recs)%15 == 0 {
			t.Logf("poll %d: allocated %.1f idle %.1f active %.1f util %.2f sm_active %.3f samples %d %v",
				len(st.recs), r.Allocated, r.Idle, r.Active, r.Util, r.SMActive, len(r.Samples), r.Errors)
		}
		mu.Lock()
		done := !doneAt.IsZero() && time.Since(doneAt) > 3*time.Second
		mu.Unlock()
		if done {
			break
		}
	}
	info.RingAtEnd = readRing(lib, dev)
	stopProbe()
	<-probeDone
	probes.Calls = dp.results()
	if assert {
		probes.MIG = runMIGProbes(t)
	}
	if loadErr != nil {
		t.Fatalf("the load failed: %v (see %s)", loadErr, filepath.Join(dir, "load.log"))
	}
	truth, err := ReadTruthFile(truthPath)
	if err != nil {
		t.Fatal(err)
	}
	reportDriver(t, dir, probes, truth)
	report(t, dir, info, st.recs, truth, Options{NoAssert: !assert})
}

// testWriter logs the load's lines.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
