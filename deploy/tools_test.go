package deploy

import (
	"bytes"
	"os/exec"
	"testing"

	"github.com/gpuxray/gpuxray/internal/testtool"
)

// need is testtool.Need: a missing tool skips locally and fails in CI.
var need = testtool.Need

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
