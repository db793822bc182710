package testtool

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestNeedMissing: a missing program skips a test on a workstation and
// fails it in CI, so that CI cannot pass by skipping the engine's tests.
// Each case runs the helper below in a child process with CI set or not.
func TestNeedMissing(t *testing.T) {
	for _, tc := range []struct {
		ci   string
		want string
	}{
		{"", "--- SKIP: TestNeedHelper"},
		{"1", "--- FAIL: TestNeedHelper"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestNeedHelper$", "-test.v")
		cmd.Env = append(os.Environ(), "GPUXRAY_NEED_HELPER=1", "CI="+tc.ci)
		out, _ := cmd.CombinedOutput()
		if !strings.Contains(string(out), tc.want) {
			t.Errorf("CI=%q: want %q in\n%s", tc.ci, tc.want, out)
		}
	}
}

// TestNeedHelper needs a program no machine has; it runs only as
// TestNeedMissing's child.
func TestNeedHelper(t *testing.T) {
	if os.Getenv("GPUXRAY_NEED_HELPER") == "" {
		t.Skip("run by TestNeedMissing")
	}
	Need(t, "gpuxray-no-such-program")
	t.Log("Need returned")
}
