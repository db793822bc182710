package main

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// runMainEnv set makes the test binary the gpuxray binary: main with the
// command line, for tests that send it signals.
const runMainEnv = "GX_TEST_RUN_MAIN"

// TestMain fails the package's tests if any goroutine outlives them.
func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
	}
	goleak.VerifyTestMain(m,
		// klog's flush daemon, started when client-go is imported.
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
	)
}
