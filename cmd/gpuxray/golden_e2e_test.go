//go:build e2e && !nosim

package main

import (
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestReplayGolden replays each scenario under test/scenarios and diffs the
// whole exposition against testdata/<name>.prom; -update rewrites them.
func TestReplayGolden(t *testing.T) {
	t.Parallel()
	files := replayedScenarios(t)
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			code, out, errs := runCmd(t, "replay", f)
			if code != 0 {
				t.Fatalf("replay exited %d: %s", code, errs)
			}
			golden := filepath.Join("testdata", name+".prom")
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
		})
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
