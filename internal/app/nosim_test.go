package app

import (
	"strings"
	"testing"
	"time"
)

// TestProductionHasNoSimulator: the production binary (no Simulator) answers
// --simulate and replay with one sentence naming gpuxray-sim and exit 2,
// before it reads a scenario or opens a port, and its help lists neither.
func TestProductionHasNoSimulator(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"agent", "--simulate"},
		{"agent", "--simulate", "/dev/zero", "--web.listen-address=127.0.0.1:0"},
		{"--simulate"},
		{"replay", "../../test/scenarios/shared.yaml"},
		{"replay", "-h"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			t.Parallel()
			code, out, errs := runCmdWithin(t, 30*time.Second, args...)
			if code != exitUsage || out != "" || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, "needs the simulator") || !strings.Contains(errs, "gpuxray-sim") {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 and one line pointing to gpuxray-sim", code, out, errs)
			}
		})
	}
	code, out, _ := runCmd(t, "help")
	if code != 0 || strings.Contains(out, "replay [flags]") || strings.Contains(out, "--simulate [FILE]") {
		t.Errorf("help: exit %d, %q; want the production commands only", code, out)
	}
	if code, _, errs := runCmd(t, "bogus"); code != exitUsage || !strings.Contains(errs, "the commands are agent, report and version") {
		t.Errorf("unknown command: exit %d, %q", code, errs)
	}
}
