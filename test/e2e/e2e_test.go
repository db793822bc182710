//go:build e2e

// Package e2e runs the gpuxray binary as a user would: the demo agent from
// the README, checked by promtool and scraped by a real Prometheus server.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuxray/gpuxray/internal/testtool"

	"github.com/gpuxray/gpuxray/collector/sim"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "gpuxray-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// gpuxray-sim: gpuxray's commands with the simulated node (agent
	// --simulate, replay) that these tests run.
	binary = filepath.Join(dir, "gpuxray")
	build := exec.Command("go", "build", "-o", binary, "../../cmd/gpuxray-sim")
	build.Env = append(os.Environ(), "CGO_CFLAGS=-Wno-deprecated-declarations", "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building gpuxray: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// need is testtool.Need: a missing tool skips locally and fails in CI.
var need = testtool.Need

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// process is a started command whose output is kept for failure messages.
type process struct {
	cmd *exec.Cmd
	out *bytes.Buffer
}

func start(t *testing.T, name string, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(name, args...), out: &bytes.Buffer{}}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", filepath.Base(name), p.out.String())
		}
	})
	return p
}

// stop sends SIGTERM and returns the exit code.
func (p *process) stop(t *testing.T) int {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(10 * time.Second):
		t.Fatal("did not exit within 10s of SIGTERM")
		return -1
	}
}

func get(ctx context.Context, u string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// waitFor polls u until it answers 200, for at most d.
func waitFor(t *testing.T, u string, d time.Duration) []byte {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		code, body, err := get(ctx, u)
		cancel()
		if err == nil && code == http.StatusOK {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer 200 within %s (last: %d %v)", u, d, code, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startDemo starts the README's demo command on a free port.
func startDemo(t *testing.T) (*process, string) {
	t.Helper()
	addr := freeAddr(t)
	p := start(t, binary, "agent", "--simulate", "--web.listen-address="+addr, "--log.format=json")
	return p, addr
}

// TestDemoAgent: the demo agent answers /metrics with the demo's
// allocations, promtool accepts the output, and SIGTERM ends it with 0. The
// 30 s wait is a guard against a hang, not a start-up target: a loaded
// machine can take seconds to start any process.
func TestDemoAgent(t *testing.T) {
	t.Parallel()
	promtool := need(t, "promtool")
	started := time.Now()
	p, addr := startDemo(t)
	waitFor(t, "http://"+addr+"/readyz", 30*time.Second)
	body := waitFor(t, "http://"+addr+"/metrics", 30*time.Second)
	t.Logf("ready and serving metrics %s after start", time.Since(started).Round(time.Millisecond))

	text := string(body)
	for _, want := range []string{
		`gpuxray_source_up{source="nvml"} 1`,
		`gpuxray_source_up{source="kubelet"} 1`,
		`gpuxray_allocation_info{attribution="device",claim="",claim_namespace="",cluster_queue="",container="jupyter",`,
		// README's owner chain Pod → ReplicaSet → Deployment.
		`namespace="inference",pod="vllm-llama-7c9d8f6b5d-x2k8p",pool="",priority="0",priority_class="",queue="",resource="nvidia.com/gpu",shared="false",stale="false",uuid="GPU-c913b31b-6981-5248-8814-8477a9e4b134",workload="vllm-llama",workload_kind="Deployment"} 1`,
		`gpuxray_build_info{`,
		`gpuxray_device_info{driver_version="550.54.15",gpu="7",`,
		`process_resident_memory_bytes`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if n, want := strings.Count(text, "\ngpuxray_allocation_info{"), demoAllocationsAtStart(t); n != want {
		t.Errorf("%d gpuxray_allocation_info series, want %d (the demo's allocations at its start)", n, want)
	}

	check := exec.Command(promtool, "check", "metrics")
	check.Stdin = bytes.NewReader(body)
	if out, err := check.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
	// The simulated kube-state-metrics has a path of its own, never the
	// agent's metrics.
	if strings.Contains(text, "kube_pod_") {
		t.Error("the agent's /metrics serves kube-state-metrics series")
	}
	ksm := string(waitFor(t, "http://"+addr+"/simulate/kube-state-metrics", 30*time.Second))
	for _, want := range []string{
		`kube_pod_status_phase{namespace="research",phase="Pending",pod="llama-eval-0",`,
		`kube_pod_container_resource_requests{container="eval",namespace="research",node="",pod="llama-eval-0",resource="nvidia_com_gpu",`,
		`kube_pod_info{created_by_kind="StatefulSet",created_by_name="notebook",host_ip="",host_network="false",namespace="data-science",node="demo-node",pod="notebook-0",`,
	} {
		if !strings.Contains(ksm, want) {
			t.Errorf("/simulate/kube-state-metrics lacks %s", want)
		}
	}
	check = exec.Command(promtool, "check", "metrics")
	check.Stdin = strings.NewReader(ksm)
	if out, err := check.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics of the simulated kube-state-metrics: %v\n%s", err, out)
	}
	if code := p.stop(t); code != 0 {
		t.Errorf("agent exited %d after SIGTERM, want 0", code)
	}
}

// demoAllocationsAtStart is how many allocations the live demo has when it
// starts: those of the pods that hold GPUs at the end of its lead_in.
func demoAllocationsAtStart(t *testing.T) int {
	t.Helper()
	sc := sim.Demo()
	n := 0
	for _, p := range sc.Pods {
		if p.From <= sc.LeadIn && sc.LeadIn < p.To {
			n += len(p.Devices)
		}
	}
	if n == 0 {
		t.Fatal("the demo has no allocation at its start")
	}
	return n
}

// TestPrometheusScrapesAgent: a real Prometheus server scrapes the demo agent
// and its query API sees the state the demo starts in, at the end of its
// lead-in: the notebook idle for as long, the training job in its data-loader
// stall, gpu 7 held by nobody since the start.
func TestPrometheusScrapesAgent(t *testing.T) {
	t.Parallel()
	prom := need(t, "prometheus")
	agentProc, agentAddr := startDemo(t)
	waitFor(t, "http://"+agentAddr+"/readyz", 30*time.Second)

	dir := t.TempDir()
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: gpuxray
    static_configs:
      - targets: [%q]
`, agentAddr)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	promAddr := freeAddr(t)
	start(t, prom,
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+promAddr,
		"--log.level=warn",
	)
	waitFor(t, "http://"+promAddr+"/-/ready", 30*time.Second)

	query := func(q string) (float64, bool) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, body, err := get(ctx, "http://"+promAddr+"/api/v1/query?query="+url.QueryEscape(q))
		if err != nil {
			return 0, false
		}
		var r struct {
			Status string
			Data   struct {
				Result []struct {
					Value [2]any
				}
			}
		}
		if json.Unmarshal(body, &r) != nil || r.Status != "success" || len(r.Data.Result) != 1 {
			return 0, false
		}
		s, _ := r.Data.Result[0].Value[1].(string)
		v, err := strconv.ParseFloat(s, 64)
		return v, err == nil
	}
	// Wait until Prometheus has a few scrapes of the agent: the demo starts
	// with the lead-in's counts, so rates need more than one.
	const scrapes = `count_over_time(up{job="gpuxray"}[1m])`
	deadline := time.Now().Add(30 * time.Second)
	for {
		if v, ok := query(scrapes); ok && v >= 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus did not see %s reach 4 within 30s", scrapes)
		}
		time.Sleep(250 * time.Millisecond)
	}
	lead := sim.Demo().LeadIn.Seconds()
	checks := []struct {
		q        string
		min, max float64
		what     string
	}{
		{`up{job="gpuxray"}`, 1, 1, "the target is up"},
		{`count(gpuxray_allocation_info)`, float64(demoAllocationsAtStart(t)), float64(demoAllocationsAtStart(t)), "every demo allocation is visible"},
		{`sum(rate(gpuxray_allocated_active_seconds_total{pod="llama-train-0"}[1m])) / sum(rate(gpuxray_allocated_seconds_total{pod="llama-train-0"}[1m]))`, 0.015, 0.025, "the training job is in its stall, 0.02 busy"},
		{`sum(gpuxray_allocated_active_seconds_total{pod="llama-train-0"}) / sum(gpuxray_allocated_seconds_total{pod="llama-train-0"})`, 0.55, 0.62, "the lead-in's 20 busy minutes and 11 stalled ones are counted"},
		{`min(gpuxray_allocation_idle_streak_seconds{pod="notebook-0"})`, lead - 2, lead + 120, "the notebook has been idle since the lead-in's start"},
		{`sum(gpuxray_device_unallocated_seconds_total{gpu="7"})`, lead - 2, lead + 120, "gpu 7 is held by nobody since the lead-in's start"},
		{`count(gpuxray_device_info)`, 8, 8, "eight GPUs"},
	}
	for _, c := range checks {
		t.Run(c.what, func(t *testing.T) {
			v, ok := query(c.q)
			if !ok || v < c.min || v > c.max {
				t.Errorf("%s: %s = %v (ok=%v), want in [%g, %g]", c.what, c.q, v, ok, c.min, c.max)
			}
		})
	}
	if code := agentProc.stop(t); code != 0 {
		t.Errorf("agent exited %d after SIGTERM, want 0", code)
	}
}
