package proc_test

import (
	"os/exec"
	"testing"

	"github.com/gpuxray/gpuxray/collector/proc"
)

// BenchmarkResolveLive is one poll's Resolve of 64 live GPU processes that
// were resolved before (the steady state: every PID a cache hit), through
// the real /proc of 64 child processes.
func BenchmarkResolveLive(b *testing.B) {
	const n = 64
	pids := make([]uint32, 0, n)
	for range n {
		cmd := exec.Command("sleep", "600")
		if err := cmd.Start(); err != nil {
			b.Skip("cannot start sleep:", err)
		}
		b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		pids = append(pids, uint32(cmd.Process.Pid))
	}
	r := proc.New(proc.Config{Root: "/proc"}, nil)
	defer r.Resolve(nil)
	if got, errs := r.Resolve(pids); len(got) != n || len(errs) != 0 {
		b.Fatalf("Resolve: %d of %d, %v", len(got), n, errs)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if got, _ := r.Resolve(pids); len(got) != n {
			b.Fatalf("Resolve: %d of %d", len(got), n)
		}
	}
}
