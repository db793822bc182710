package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"testing"
)

// need returns the path of a tool the test needs. Locally a missing tool
// skips the test; in CI (CI set), which installs it, it fails.
func need(t *testing.T, tool string) string {
	t.Helper()
	p, err := exec.LookPath(tool)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not installed; .ci/run installs it", tool)
		}
		t.Skipf("%s is not installed (.ci/run shows how to install it)", tool)
	}
	return p
}

// output runs a command and returns its standard output; stderr goes into
// the error.
func output(t *testing.T, name string, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, &cmdError{err: err, stderr: stderr.String()}
	}
	return out, nil
}

type cmdError struct {
	err    error
	stderr string
}

func (e *cmdError) Error() string { return e.err.Error() + ": " + e.stderr }
