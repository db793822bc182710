package main

import (
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/gpuxray/gpuxray/collector/sim"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// longRaceReplay is the longest scenario a test replays under the race
// detector, which runs a replay about seven times slower (a 4-hour
// scenario: 7 s without, 50 s with). A longer one is an e2e test, run by
// make test-e2e's race-free pass.
const longRaceReplay = 30 * time.Minute

// skipLongUnderRace skips a long replay under the race detector. The
// replays that stay under it (the faults, the DRA source's outages, the
// shared and MIG goldens) keep the engine's, the sources' and the
// exporter's goroutines checked by make test.
func skipLongUnderRace(t *testing.T) {
	t.Helper()
	if raceEnabled {
		t.Skipf("a replay of more than %v: make test-e2e runs it without -race", longRaceReplay)
	}
}

// TestReplayGolden replays each scenario under test/scenarios of at most
// longRaceReplay and diffs the whole exposition against
// testdata/<name>.prom; -update rewrites them. TestReplayGoldenLong (e2e)
// replays the longer ones.
func TestReplayGolden(t *testing.T) {
	t.Parallel()
	for _, f := range goldenScenarios(t, false) {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".yaml"), func(t *testing.T) {
			t.Parallel()
			replayGolden(t, f)
		})
	}
}

// goldenScenarios are the scenarios under test/scenarios longer than
// longRaceReplay (long) or not.
func goldenScenarios(t *testing.T, long bool) []string {
	t.Helper()
	var files []string
	for _, f := range replayedScenarios(t) {
		sc, err := sim.LoadScenario(f)
		if err != nil {
			t.Fatal(err)
		}
		if (sc.Duration > longRaceReplay) == long {
			files = append(files, f)
		}
	}
	if len(files) == 0 {
		t.Fatalf("no scenario (long: %v) under test/scenarios", long)
	}
	return files
}

// replayGolden replays f and diffs its exposition against its golden file,
// which -update rewrites first, and lints it.
func replayGolden(t *testing.T, f string) {
	t.Helper()
	code, out, errs := runCmd(t, "replay", f)
	if code != 0 {
		t.Fatalf("replay exited %d: %s", code, errs)
	}
	golden := filepath.Join("testdata", strings.TrimSuffix(filepath.Base(f), ".yaml")+".prom")
	if *update {
		if err := os.WriteFile(golden, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -tags e2e ./cmd/gpuxray -run TestReplayGolden -update to create it)", err)
	}
	if out != string(want) {
		t.Errorf("replay of %s differs from %s (run with -update if the change is intended):\n%s", f, golden, firstDiff(string(want), out))
	}
	problems, err := promlint.New(strings.NewReader(out)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(al) || i < len(bl); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return "line " + strconv.Itoa(i+1) + ":\n- " + x + "\n+ " + y
		}
	}
	return "(no difference)"
}
