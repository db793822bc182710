package main

import (
	"bytes"
	"context"
	"errors"
	"github.com/gpuxray/gpuxray/internal/testtool"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestScenarioTooLarge: a scenario is read up to 16 MiB, whatever the file:
// /dev/zero and a sparse 17 MiB file are refused with one sentence naming
// the path as typed, by the agent and by replay. /dev/zero never ends: an
// unbounded read would run into the start-up deadline, which cancels it
// with another message. The deadline guards a hang only: under the race
// detector on a loaded machine, 16 MiB take seconds.
func TestScenarioTooLarge(t *testing.T) {
	t.Parallel()
	sparse := filepath.Join(t.TempDir(), "huge.yaml")
	f, err := os.Create(sparse)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(17 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, args := range [][]string{
		{"replay", "/dev/zero"},
		{"agent", "--simulate", "/dev/zero", "--web.listen-address=127.0.0.1:0"},
		{"replay", sparse},
	} {
		code, _, errs := runCmdWithin(t, 2*time.Minute, args...)
		want := args[len(args)-1] + ": scenario is larger than 16 MiB"
		if args[0] == "agent" {
			want = "/dev/zero: scenario is larger than 16 MiB"
		}
		if code != 2 || strings.TrimSpace(errs) != "gpuxray "+args[0]+": "+want {
			t.Errorf("gpuxray %v = %d, %q; want 2 and %q", args, code, errs, want)
		}
	}
}

// fifo makes a named pipe in a test directory and, when the test ends,
// opens and closes its write end, so that a read still blocked on it
// (a goroutine start-up left behind) returns.
func fifo(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "scenario.yaml")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Non-blocking: with no reader left, ENXIO, and nothing to release.
		if w, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
	})
	return p
}

// TestScenarioFIFOCancel: a scenario FILE that is a FIFO nobody writes to
// blocks start-up in open or read; cancelling (what SIGTERM and SIGINT do)
// ends it promptly: the agent stops cleanly (exit 0), replay says it was
// interrupted.
func TestScenarioFIFOCancel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		code int
		errs string
	}{
		{[]string{"agent", "--web.listen-address=127.0.0.1:0", "--simulate"}, 0, ""},
		{[]string{"replay"}, 1, "gpuxray replay: interrupted"},
	} {
		t.Run(tc.args[0], func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			// The cancel needs no ordering: before, during or after the
			// open, start-up must end.
			time.AfterFunc(100*time.Millisecond, cancel)
			var out, errb bytes.Buffer
			done := make(chan int, 1)
			go func() { done <- run(ctx, append(tc.args, fifo(t)), &out, &errb) }()
			select {
			case code := <-done:
				if code != tc.code || !strings.Contains(errb.String(), tc.errs) {
					t.Errorf("gpuxray %v after cancel = %d, %q; want %d, %q", tc.args, code, errb.String(), tc.code, tc.errs)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("gpuxray %v still reading the FIFO 10s after cancel", tc.args)
			}
		})
	}
}

// TestScenarioFIFOSignal: the binary itself (this test binary running main)
// reading a FIFO that a writer holds open without writing ends on SIGTERM,
// with exit code 0.
func TestScenarioFIFOSignal(t *testing.T) {
	t.Parallel()
	p := fifo(t)
	var stderr bytes.Buffer
	cmd := exec.Command(os.Args[0], "agent", "--simulate", p, "--web.listen-address=127.0.0.1:0")
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// A writer's non-blocking open succeeds once the agent has the FIFO
	// open for reading: from then on it is blocked reading, with its
	// signal handling installed.
	var w *os.File
	for deadline := time.Now().Add(20 * time.Second); ; {
		var err error
		if w, err = os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("the agent did not open the FIFO: %v; stderr %q", err, stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	defer w.Close()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("agent after SIGTERM: %v, stderr %q; want exit 0", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-exited
		t.Fatalf("agent still running 10s after SIGTERM; stderr %q", stderr.String())
	}
}

// TestStartupPortTaken: a listen address in use is a start-up error like
// any other, exit 2; and --kubelet.pod-resources-socket given with
// --simulate, which serves its own socket, is warned about, not silently
// ignored.
func TestStartupPortTaken(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var stderr testtool.SyncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := run(ctx, []string{"agent", "--simulate", "--web.listen-address=" + ln.Addr().String(),
		"--kubelet.pod-resources-socket=/run/kubelet.sock"}, &bytes.Buffer{}, &stderr)
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	last := lines[len(lines)-1]
	if code != 2 || !strings.HasPrefix(last, "gpuxray agent: cannot listen on "+ln.Addr().String()) {
		t.Errorf("agent on a taken port = %d, last line %q; want 2 and cannot listen on %s", code, last, ln.Addr())
	}
	if !strings.Contains(stderr.String(), `"level":"warn"`) || !strings.Contains(stderr.String(), "--kubelet.pod-resources-socket is ignored with --simulate") ||
		!strings.Contains(stderr.String(), `"ignored":"/run/kubelet.sock"`) {
		t.Errorf("no warning about the ignored socket flag in %q", stderr.String())
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Error("the agent ran until the test's deadline")
	}
}
