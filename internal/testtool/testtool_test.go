package testtool

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
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
		t.Run("CI="+tc.ci, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestNeedHelper$", "-test.v")
			cmd.Env = append(os.Environ(), "GPUXRAY_NEED_HELPER=1", "CI="+tc.ci)
			out, _ := cmd.CombinedOutput()
			if !strings.Contains(string(out), tc.want) {
				t.Errorf("CI=%q: want %q in\n%s", tc.ci, tc.want, out)
			}
		})
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

// fatalRecorder is a testing.TB whose Fatalf records the message and ends
// the goroutine, as testing.T's does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestEventually(t *testing.T) {
	t.Parallel()
	t.Run("holds after a few polls", func(t *testing.T) {
		t.Parallel()
		var polls atomic.Int32
		Eventually(t, "the third poll", func() bool { return polls.Add(1) == 3 })
		if n := polls.Load(); n != 3 {
			t.Errorf("cond polled %d times, want 3", n)
		}
	})
	t.Run("never holds", func(t *testing.T) {
		t.Parallel()
		rec := &fatalRecorder{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			eventually(rec, 50*time.Millisecond, "pigs fly", func() bool { return false })
		}()
		<-done
		if want := "timed out waiting until pigs fly"; rec.msg != want {
			t.Errorf("Fatalf(%q), want %q", rec.msg, want)
		}
	})
}
