// Package testtool holds helpers that tests across gpuxray share: finding
// the external tools .ci/run installs, short unix socket paths, and waiting
// for a condition that another goroutine makes true.
package testtool

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// EventuallyTimeout is how long Eventually waits. It is a guard against a
// hang, not a measure of speed: long enough for client-go's reflector retry
// backoff (0.8 s, doubling) on a loaded two-core machine.
const EventuallyTimeout = 30 * time.Second

// Eventually polls cond every 10 ms until it holds, and fails the test with
// "timed out waiting until <what>" after EventuallyTimeout.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	eventually(t, EventuallyTimeout, what, cond)
}

func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Need returns the path of an external tool a test needs (promtool,
// prometheus, helm, …). Locally a missing tool skips the test; in CI (CI
// set), whose .ci/run installs it, it fails.
func Need(t testing.TB, tool string) string {
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

// SocketPath returns a path for a unix socket in a fresh directory that is
// removed after the test, short enough for the 108-byte limit of socket
// paths (t.TempDir's can be longer).
func SocketPath(t testing.TB, name string) string {
	t.Helper()
	dir := t.TempDir()
	if len(dir)+len(name) > 100 {
		var err error
		if dir, err = os.MkdirTemp("", "gx"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	return filepath.Join(dir, name)
}

// SyncBuffer is a bytes.Buffer a process under test (an agent's logger)
// may write while the test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
