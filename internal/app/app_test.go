package app

import (
	"bytes"
	"context"
	"github.com/gpuxray/gpuxray/internal/testtool"
	"io"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// runMainEnv set makes the test binary the production gpuxray binary: its
// Main with the command line, for tests that send it signals.
const runMainEnv = "GX_TEST_RUN_MAIN"

// TestMain fails the package's tests if any goroutine outlives them.
func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		os.Exit(Binary{}.Main())
	}
	goleak.VerifyTestMain(m,
		// klog's flush daemon, started when client-go is imported.
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
	)
}

// run runs one command line of the production binary: no simulator.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return Binary{}.Run(ctx, args, stdout, stderr)
}

func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return runCmdWithin(t, 0, args...)
}

// runCmdWithin is runCmd with a deadline (none for 0): a usage case that
// wrongly starts the agent ends instead of hanging the test.
func runCmdWithin(t *testing.T, d time.Duration, args ...string) (int, string, string) {
	t.Helper()
	ctx := context.Background()
	if d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	var out bytes.Buffer
	var errb testtool.SyncBuffer
	code := run(ctx, args, &out, &errb)
	return code, out.String(), errb.String()
}
