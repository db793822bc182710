package bench

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuxray/gpuxray/collector/sim"
	"github.com/gpuxray/gpuxray/test/bench/scenario"
	"github.com/gpuxray/gpuxray/test/bench/simnode"
	"github.com/gpuxray/gpuxray/test/nvmlfake"
)

var (
	harness    = flag.Bool("harness", false, "run the real-binary harness (make bench)")
	harnessFor = flag.Duration("harness.duration", 2*time.Minute, "how long the harness runs the agent, after a 20 s warm-up")
	// A 15 s scrape is Prometheus's default interval and the target's;
	// 1 s makes the scrape's share large enough to see in the profile.
	harnessScrape = flag.Duration("harness.scrape", time.Second, "how often the harness scrapes /metrics, warm-up included")
)

// prometheusAccept is what Prometheus 3 asks for with its default
// scrape_protocols: OpenMetrics first.
const prometheusAccept = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8,application/openmetrics-text;version=0.0.1;q=0.9,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.8,text/plain;version=0.0.4;q=0.7,*/*;q=0.6"

// TestHarness builds gpuxray as the container image does (cmd/gpuxray, no
// simulator inside) and runs it, unmodified, on the node-110 scenario (8
// GPUs, 110 allocations, time-sliced, churn) in real time through the fake
// libnvidia-ml.so.1 (test/nvmlfake): the simulated driver, kubelet and
// /proc tree run in this test's process, the agent alone in its own. It
// scrapes every second and reports what the agent costs: CPU seconds a
// minute (utime+stime from /proc/<pid>/stat), peak RSS (VmHWM), heap after
// a forced GC, scrape latency p50/p99 and series. It scrapes as
// Prometheus does (OpenMetrics, gzip, a 10 s scrape timeout). The fake library's side
// of each NVML call (a round trip on a unix socket) runs in the agent's
// threads and is counted, as the real library's would be. The agent runs
// without an API server: no pod source, so shared GPUs are attributed by
// device, not by process.
func TestHarness(t *testing.T) {
	if !*harness {
		t.Skip("run with -harness (make bench)")
	}
	if err := nvmlfake.HaveCompiler(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	load0 := loadAvg(t)
	bin := filepath.Join(dir, "gpuxray")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, "../../cmd/gpuxray")
	build.Env = append(os.Environ(), "CGO_CFLAGS=-Wno-deprecated-declarations")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	lib, err := nvmlfake.Build(dir, nvmlfake.Current)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := sim.ParseScenario(scenario.Node110(), "node-110.yaml")
	if err != nil {
		t.Fatal(err)
	}
	node, err := nvmlfake.StartNode(sc, lib)
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(bin, append([]string{"agent", "--web.listen-address", addr, "--web.enable-pprof", "--log.level", "warn"}, node.Args()...)...)
	cmd.Env = append(os.Environ(), node.Env()...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() })
	base := "http://" + addr
	get := func(path string) ([]byte, time.Duration, error) {
		t0 := time.Now()
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		if err != nil {
			return nil, 0, err
		}
		if path == "/metrics" {
			req.Header.Set("Accept", prometheusAccept)
			req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", "10")
		}
		// The transport asks for gzip and decompresses, as Prometheus does.
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, 0, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("%s: %s", path, resp.Status)
		}
		return body, time.Since(t0), err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, _, err := get("/metrics"); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("agent not serving: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	pid := cmd.Process.Pid
	tick := time.NewTicker(*harnessScrape)
	defer tick.Stop()
	warm := time.Now().Add(20 * time.Second)
	for time.Now().Before(warm) {
		<-tick.C
		get("/metrics")
	}
	// A CPU profile over the measurement, to tell the simulator's share
	// from the agent's.
	secs := int(harnessFor.Seconds())
	type result struct {
		bodies [][]byte
		err    error
	}
	profiled := make(chan result, 1)
	go func() {
		// Back-to-back profiles of at most 25 s, the longest the agent
		// serves (within its write timeout); pprof merges them.
		var r result
		for left := secs; left > 0 && r.err == nil; left -= 25 {
			var b []byte
			b, _, r.err = get(fmt.Sprintf("/debug/pprof/profile?seconds=%d", min(left, 25)))
			r.bodies = append(r.bodies, b)
		}
		profiled <- r
	}()
	cpu0, t0 := cpuSeconds(t, pid), time.Now()
	var lat []time.Duration
	var body []byte
	for end := time.Now().Add(time.Duration(secs) * time.Second); time.Now().Before(end); {
		<-tick.C
		b, d, err := get("/metrics")
		if err != nil {
			t.Fatal(err)
		}
		lat, body = append(lat, d), b
	}
	cpu := (cpuSeconds(t, pid) - cpu0) / time.Since(t0).Minutes()
	prof := <-profiled
	if prof.err != nil {
		t.Fatal(prof.err)
	}
	var profiles []string
	for i, b := range prof.bodies {
		profiles = append(profiles, filepath.Join(dir, fmt.Sprintf("cpu-%d.pprof", i)))
		if err := os.WriteFile(profiles[i], b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	shares := cpuShares(t, bin, profiles...)
	if _, _, err := get("/debug/pprof/heap?gc=1"); err != nil {
		t.Fatal(err)
	}
	after, _, err := get("/metrics")
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(lat)
	pct := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	series := 0
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "gpuxray_") {
			series++
		}
	}
	hwm := procStatus(t, pid, "VmHWM")
	t.Logf("node-110, the production binary on the fake NVML library, %s at a 1 s poll and a %s scrape, GOMAXPROCS %d:", *harnessFor, *harnessScrape, runtime.GOMAXPROCS(0))
	t.Logf("  CPU            %.3f s/min (%.2f%% of one core; target ≤ 0.5%%), by the profile's samples:", cpu, 100*cpu/60)
	for _, p := range cpuParts {
		t.Logf("    %-11s  %5.1f%%  %.3f s/min (%.2f%% of one core)", p.name, 100*shares[p.name], cpu*shares[p.name], 100*cpu*shares[p.name]/60)
	}
	agent := cpu * (1 - shares["simulator"])
	t.Logf("  CPU, agent     %.3f s/min (%.2f%% of one core) without the simulator", agent, 100*agent/60)
	if *harnessScrape < 15*time.Second {
		// The scrape's profile share, scaled to a 15 s scrape. The GC
		// that its garbage causes is counted under other and not
		// scaled, so the estimate errs high; -harness.scrape=15s
		// measures it.
		k := 1 - harnessScrape.Seconds()/15
		t.Logf("  CPU, agent     with a 15 s scrape instead (estimate from the scrape's share): %.2f%%", 100*(agent-cpu*shares["scrape"]*k)/60)
	}
	t.Logf("  peak RSS       %.1f MiB (VmHWM; target ≤ 30 MiB); now %.1f MiB: %.1f MiB anonymous, %.1f MiB the binary's pages",
		float64(hwm)/1024, float64(procStatus(t, pid, "VmRSS"))/1024, float64(procStatus(t, pid, "RssAnon"))/1024, float64(procStatus(t, pid, "RssFile"))/1024)
	t.Logf("  heap after GC  %.1f MiB (go_memstats_heap_alloc_bytes after /debug/pprof/heap?gc=1)", metric(after, "go_memstats_heap_alloc_bytes")/(1<<20))
	t.Logf("  scrape         p50 %s, p99 %s over %d scrapes (target p99 ≤ 5 ms)", pct(0.5).Round(10*time.Microsecond), pct(0.99).Round(10*time.Microsecond), len(lat))
	t.Logf("  series         %d gpuxray_ series, %d bytes a scrape", series, len(body))
	// One row for docs/benchmarks.md's tables.
	t.Logf("| date | load | CPU, agent alone | peak RSS (VmHWM) | RssAnon | RssFile | heap after GC | scrape p50 | p99 | series |")
	t.Logf("| %s | %s → %s | %.2f %% | %.1f MiB | %.1f MiB | %.1f MiB | %.1f MiB | %s | %s | %d |",
		time.Now().UTC().Format("2006-01-02 15:04"), load0, loadAvg(t), 100*agent/60, float64(hwm)/1024,
		float64(procStatus(t, pid, "RssAnon"))/1024, float64(procStatus(t, pid, "RssFile"))/1024,
		metric(after, "go_memstats_heap_alloc_bytes")/(1<<20), pct(0.5).Round(10*time.Microsecond), pct(0.99).Round(10*time.Microsecond), series)
	t.Logf("  (the production binary, cmd/gpuxray, on the fake libnvidia-ml.so.1: the simulator runs in the test's process, not in these figures)")
}

// loadAvg is the machine's 1-minute load average.
func loadAvg(t *testing.T) string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))[0]
}

// TestChurnReturnsToBaseline replays the 24-hour churn scenario (about
// 10,000 pods from 1h to 22h) on the virtual clock through the whole stack
// and checks that series and heap come back to their baseline once churn
// ends and retention (10m) has passed.
func TestChurnReturnsToBaseline(t *testing.T) {
	if !*harness {
		t.Skip("run with -harness (make bench)")
	}
	sc, err := sim.ParseScenario(scenario.Churn24h(), "churn-24h.yaml")
	if err != nil {
		t.Fatal(err)
	}
	n := simnode.New(t, sc, nil)
	measure := func() (int, uint64) {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		mfs, err := n.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		s := 0
		for _, mf := range mfs {
			s += len(mf.GetMetric())
		}
		return s, ms.HeapAlloc
	}
	start := time.Now()
	n.Run(time.Second, 50*time.Minute)
	s0, h0 := measure()
	n.Run(time.Second, 12*time.Hour)
	s1, h1 := measure()
	n.Run(time.Second, 23*time.Hour)
	s2, h2 := measure()
	t.Logf("churn-24h (%d pods) replayed in %s: series %d at 50m, %d at 12h, %d at 23h; heap after GC %.1f, %.1f, %.1f MiB",
		len(sc.Pods), time.Since(start).Round(time.Second), s0, s1, s2, float64(h0)/(1<<20), float64(h1)/(1<<20), float64(h2)/(1<<20))
	if s2 != s0 {
		t.Errorf("series at 23h %d, baseline %d", s2, s0)
	}
	if float64(h2) > 1.1*float64(h0)+1<<20 {
		t.Errorf("heap after GC at 23h %.1f MiB, baseline %.1f MiB", float64(h2)/(1<<20), float64(h0)/(1<<20))
	}
}

// cpuParts classify a CPU profile's samples by their stacks, first match
// first: the simulated driver, kubelet and their gRPC server (which ran in
// the agent's process when the harness used --simulate; none now); the
// NVML library's C calls; scrapes; polls; and the rest (garbage
// collection, scheduler, timers), which serves both.
var cpuParts = []struct {
	name string
	re   *regexp.Regexp
}{
	{"simulator", regexp.MustCompile(`gpuxray/collector/sim\.|go-nvml/pkg/nvml/mock|grpc\.\(\*Server\)|transport\.\(\*http2Server\)|_PodResourcesLister_`)},
	// The NVML library's calls, in C (the fake's unix-socket round trips
	// here, the driver's ioctls on a node): cgo frames, or samples taken
	// outside Go.
	{"nvml calls", regexp.MustCompile(`_Cfunc_nvml|runtime\.cgocall|runtime\._ExternalCode`)},
	{"scrape", regexp.MustCompile(`promhttp\.|gpuxray/exporter\.`)},
	{"poll", regexp.MustCompile(`gpuxray/agent\.|gpuxray/collector/|grpc\.`)},
	{"other", regexp.MustCompile(``)},
}

// cpuShares reads CPU profiles' traces, merged, with go tool pprof and
// returns the share of their sampled time in each of cpuParts.
func cpuShares(t *testing.T, bin string, profiles ...string) map[string]float64 {
	t.Helper()
	out, err := exec.Command("go", append([]string{"tool", "pprof", "-traces", bin}, profiles...)...).Output()
	if err != nil {
		t.Fatalf("go tool pprof -traces: %v", err)
	}
	by := map[string]float64{}
	total := 0.0
	for _, trace := range strings.Split(string(out), "-----------+-------------------------------------------------------")[1:] {
		fields := strings.Fields(trace)
		if len(fields) < 2 {
			continue
		}
		d, err := time.ParseDuration(fields[0])
		if err != nil {
			t.Fatalf("pprof trace %q: %v", fields[0], err)
		}
		for _, p := range cpuParts {
			if p.re.MatchString(trace) {
				by[p.name] += d.Seconds()
				break
			}
		}
		total += d.Seconds()
	}
	if total == 0 {
		t.Fatal("empty CPU profile")
	}
	for k := range by {
		by[k] /= total
	}
	return by
}

func cpuSeconds(t *testing.T, pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

func procStatus(t *testing.T, pid int, key string) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if k, v, ok := strings.Cut(s.Text(), ":"); ok && k == key {
			n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", key, pid)
	return 0
}

func metric(body []byte, name string) float64 {
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return -1
}
