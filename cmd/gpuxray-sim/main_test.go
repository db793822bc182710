package main

import (
	"bytes"
	"context"
	"github.com/gpuxray/gpuxray/internal/testtool"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpuxray/gpuxray/collector/sim"
)

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
	// stderr is locked: a client-go list the stop left in flight may log
	// after run returns, while the test reads it.
	var out bytes.Buffer
	var errb testtool.SyncBuffer
	code := run(ctx, args, &out, &errb)
	return code, out.String(), errb.String()
}

// replayedScenarios are the scenarios under test/scenarios, which replay
// plays.
func replayedScenarios(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../../test/scenarios/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	return files
}

// TestReplayTruth checks every scenario's replayed exposition (its golden
// file, which TestReplayGolden and TestReplayGoldenLong hold equal to a
// fresh replay — and so also hold replay deterministic) against the ground truth computed from the
// scenario: every allocation's allocated, idle and active seconds within 1%: exclusive GPUs, time-sliced
// GPUs (each pod credited with its own processes), and MIG instances (from
// GPM where the system has it; with no activity source, allocated time
// only and no idle or active second invented).
func TestReplayTruth(t *testing.T) {
	t.Parallel()
	files := replayedScenarios(t)
	for _, path := range files {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".yaml"), func(t *testing.T) {
			t.Parallel()
			checkTruth(t, path)
		})
	}
}

func checkTruth(t *testing.T, path string) {
	sc, err := sim.LoadScenario(path)
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", strings.TrimSuffix(filepath.Base(path), ".yaml")+".prom")
	out, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(string(out)))
	if err != nil {
		t.Fatal(err)
	}
	node, err := sim.NewNode(sc, sim.NewVirtualClock(sc.Start))
	if err != nil {
		t.Fatal(err)
	}
	sum := func(metric, pod, uuid string) (float64, bool) {
		var v float64
		found := false
		for _, m := range mfs[metric].GetMetric() {
			if label(m, "pod") == pod && label(m, "uuid") == uuid {
				v += m.GetCounter().GetValue()
				found = true
			}
		}
		return v, found
	}
	checked := 0
	for _, row := range sc.Truth(0.05) {
		uuid := row.UUID
		if uuid == "" {
			// A GPU passed through to a VM: NVML does not see it, and no
			// series may claim its time.
			if _, found := sum("gpuxray_allocated_seconds_total", row.Pod, ""); found {
				t.Errorf("%s is credited on a device NVML does not see", row.Pod)
			}
			continue
		}
		idle, active := row.IdleSeconds, row.ActiveSeconds
		if row.Device.MIG && !node.GPMSupported() {
			idle, active = 0, 0 // no activity source: nothing may be invented
		}
		for _, c := range []struct {
			metric string
			want   float64
		}{
			{"gpuxray_allocated_seconds_total", row.AllocatedSeconds},
			{"gpuxray_allocated_idle_seconds_total", idle},
			{"gpuxray_allocated_active_seconds_total", active},
		} {
			got, ok := sum(c.metric, row.Pod, uuid)
			if !ok {
				t.Errorf("%s{pod=%q} missing", c.metric, row.Pod)
				continue
			}
			tol := 0.01 * c.want
			if c.want == 0 {
				tol = 0.01 * row.AllocatedSeconds
			}
			if math.Abs(got-c.want) > tol {
				t.Errorf("%s{pod=%q,device=%s} = %.2f, want %.2f ± 1%%", c.metric, row.Pod, row.Device, got, c.want)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Error("the scenario has no allocation to check")
	}
	// A pod whose claim has admin access (a monitor) holds nothing.
	for _, p := range sc.Pods {
		if !p.AdminAccess {
			continue
		}
		for _, m := range mfs["gpuxray_allocated_seconds_total"].GetMetric() {
			if label(m, "pod") == p.Name {
				t.Errorf("%s/%s has admin access and holds nothing, yet is credited %.0f s on %s", p.Namespace, p.Name, m.GetCounter().GetValue(), label(m, "uuid"))
			}
		}
	}
	// Every GPU's own time counts once, however many pods share it: the
	// device-level counters against the GPU's truth, within 1% of its time.
	for _, g := range sc.GPUTruth(0.05) {
		if sc.VFIO[g.GPU] {
			continue // not in NVML
		}
		uuid := node.DeviceUUID(g.GPU)
		idle, active := g.AllocatedIdleSeconds, g.AllocatedActiveSeconds
		if _, mig := sc.MIG[g.GPU]; (mig || sc.MIGDynamic[g.GPU]) && !node.GPMSupported() {
			idle, active = 0, 0
		}
		for _, c := range []struct {
			metric string
			want   float64
		}{
			{"gpuxray_device_observed_seconds_total", g.ObservedSeconds},
			{"gpuxray_device_allocated_seconds_total", g.AllocatedSeconds},
			{"gpuxray_device_allocated_idle_seconds_total", idle},
			{"gpuxray_device_allocated_active_seconds_total", active},
			{"gpuxray_device_unallocated_seconds_total", g.UnallocatedSeconds},
			{"gpuxray_device_unallocated_active_seconds_total", g.UnallocatedActiveSeconds},
			// Who held the GPU is known all along: no time is
			// unattributed, so no held time hides as unattributed and
			// no unallocated time either.
			{"gpuxray_device_unattributed_seconds_total", 0},
		} {
			got, ok := sum(c.metric, "", uuid)
			if !ok {
				t.Errorf("%s{uuid=%q} missing", c.metric, uuid)
				continue
			}
			if math.Abs(got-c.want) > 0.01*g.ObservedSeconds {
				t.Errorf("%s{gpu=%d} = %.2f, want %.2f ± 1%% of %.0f s", c.metric, g.GPU, got, c.want, g.ObservedSeconds)
			}
		}
	}
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("start: 2026-12-01T08:00:00Z\nduration: 1h\nnode: n\nsystem: dgxh100\ngpus: 12\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		code int
		want string
	}{
		{"unknown command", []string{"frobnicate"}, nil, 2, `unknown command "frobnicate"`},
		{"unknown flag", []string{"agent", "--no-such-flag"}, nil, 2, "flag provided but not defined: -no-such-flag"},
		{"bad threshold", []string{"agent", "--idle.threshold=1.5"}, nil, 2, "idle threshold 1.5 must be a ratio in (0, 1]"},
		{"bad listen address", []string{"agent", "--web.listen-address=9471"}, nil, 2, `listen address "9471" is not host:port`},
		{"relative kubelet socket", []string{"agent", "--kubelet.pod-resources-socket=kubelet.sock"}, nil, 2, "not absolute"},
		{"file without --simulate", []string{"agent", "demo.yaml"}, nil, 2, "needs --simulate"},
		{"bad log level", []string{"agent", "--log.level=loud"}, nil, 2, `--log.level "loud"`},
		{"replay without file", []string{"replay"}, nil, 2, "want exactly one scenario FILE"},
		{"replay missing file", []string{"replay", "/nonexistent/x.yaml"}, nil, 2, "/nonexistent/x.yaml"},
		{"replay invalid scenario", []string{"replay", bad}, nil, 2, "bad.yaml:5: gpus"},
		{"bad peak schedule", []string{"agent", "--peak.schedule=Mon-Fri 9-18"}, nil, 2, `--peak.schedule "Mon-Fri 9-18": peak schedule rule "Mon-Fri 9-18": "9" is not a time of day as HH:MM`},
		{"bad peak time zone", []string{"replay", "--peak.timezone=Mars/Olympus", "x.yaml"}, nil, 2, `time zone "Mars/Olympus" is not an IANA time zone name`},
		{"negative stale grace", []string{"agent", "--kubelet.stale-grace=-1m"}, nil, 2, "kubelet stale grace -1m0s must not be negative"},
		{"zero NVML timeout", []string{"replay", "--nvml.timeout=0s", "x.yaml"}, nil, 2, "NVML call timeout 0s must be positive"},
		{"missing web config", []string{"agent", "--web.config.file=/nonexistent/web.yml"}, nil, 2, `web config file "/nonexistent/web.yml"`},
		{"bad replay format", []string{"replay", "--format=json", "x.yaml"}, nil, 2, `--format "json" is not one of text, openmetrics`},
		{"scrape interval below the poll interval", []string{"replay", "--format=openmetrics", "--scrape.interval=100ms", "x.yaml"}, nil, 2, "--scrape.interval 100ms is shorter than --poll.interval 1s"},
		{"bad extra label", []string{"agent", "--pods.extra-labels=pod=team"}, nil, 2, `--pods.extra-labels: extra label "pod=team": "pod" is a label gpuxray already sets`},
		{"relative proc root", []string{"agent", "--node.name=n1", "--proc.root=proc"}, nil, 2, `the proc root "proc" is not absolute`},
		{"bad DRA driver", []string{"agent", "--dra.drivers=gpu.nvidia.com,NVIDIA GPU"}, nil, 2, `DRA driver name "NVIDIA GPU" is not a DNS subdomain such as gpu.nvidia.com`},
		{"no DRA driver", []string{"agent", "--dra.drivers= , "}, nil, 2, "no DRA driver is named"},
		{"bad DRA UUID attribute", []string{"agent", "--dra.uuid-attribute=the uuid"}, nil, 2, `the UUID attribute "the uuid" is not a device attribute name`},
		{"version", []string{"version"}, nil, 0, "gpuxray dev"},
		{"help", []string{"agent", "-h"}, nil, 0, "GPUXRAY_POLL_INTERVAL"},
		{"help command", []string{"help", "replay"}, nil, 0, "Usage: gpuxray replay [flags] FILE"},
		{"bad duration", []string{"agent", "--poll.interval=bogus"}, nil, 2, `--poll.interval "bogus": not a duration such as 30s, 500ms or 2m`},
		{"bad number", []string{"replay", "--idle.threshold", "lots", "x.yaml"}, nil, 2, `--idle.threshold "lots": not a number`},
		{"bad integer", []string{"agent", "--limits.max-allocations=2.5"}, nil, 2, `--limits.max-allocations "2.5": not a whole number`},
		{"integer out of range", []string{"agent", "--limits.max-allocations=99999999999999999999"}, nil, 2, `--limits.max-allocations "99999999999999999999": out of range`},
		{"bad boolean", []string{"agent", "--simulate=maybe"}, nil, 2, `--simulate "maybe": not true or false`},
		{"flag without value", []string{"agent", "--poll.interval"}, nil, 2, "flag needs an argument: -poll.interval"},
		{"flag after the scenario file", []string{"agent", "--simulate", bad, "--poll.interval=bogus"}, nil, 2, `--poll.interval "bogus"`},
		{"flag after the replay file", []string{"replay", "x.yaml", "--format=json"}, nil, 2, `--format "json" is not one of text, openmetrics`},
		{"two scenario files", []string{"agent", "--simulate", "a.yaml", "b.yaml"}, nil, 2, `unexpected argument "b.yaml": --simulate takes one scenario FILE`},
		{"arguments after --", []string{"replay", "--", "--format=json"}, nil, 2, "--format=json"},
		{"report takes no argument", []string{"report", "--prometheus=http://127.0.0.1:1", "extra"}, nil, 2, `takes no arguments, got ["extra"]`},
		{"scenario path as typed", []string{"replay", "/dev/null"}, nil, 2, "/dev/null: empty scenario"},
		{"agent scenario path as typed", []string{"agent", "--simulate", "/dev/null"}, nil, 2, "/dev/null: empty scenario"},
		{"invalid scenario in a folder", []string{"replay", bad}, nil, 2, bad + ":5: gpus"},
		{"telemetry path of the health check", []string{"agent", "--web.telemetry-path=/healthz"}, nil, 2, `metrics path "/healthz" is the server's own /healthz`},
		{"telemetry path of the readiness check", []string{"agent", "--web.telemetry-path=/readyz"}, nil, 2, `metrics path "/readyz" is the server's own /readyz`},
		{"telemetry path with an open wildcard", []string{"agent", "--web.telemetry-path=/metrics/{x"}, nil, 2, `metrics path "/metrics/{x": '{' is not allowed`},
		{"telemetry path with a wildcard", []string{"agent", "--web.telemetry-path=/{x}"}, nil, 2, `metrics path "/{x}": '{' is not allowed`},
		{"telemetry path with a space", []string{"agent", "--web.telemetry-path=/a b"}, nil, 2, `metrics path "/a b": ' ' is not allowed`},
		{"negative max requests", []string{"agent", "--web.max-requests=-1"}, nil, 2, "max requests -1 must not be negative"},
		{"empty peak schedule", []string{"agent", "--web.listen-address=127.0.0.1:0", "--peak.schedule="}, nil, 2, `--peak.schedule "": empty; give "none" for no peak hours`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := runCmdWithin(t, 30*time.Second, tc.args...)
			if code != tc.code || !strings.Contains(out+errs, tc.want) {
				t.Errorf("gpuxray %v = %d, %q; want %d containing %q", tc.args, code, out+errs, tc.code, tc.want)
			}
			if tc.code == 2 && (strings.Count(strings.TrimSpace(errs), "\n") > 0 || out != "") {
				t.Errorf("want one line on stderr and nothing on stdout, got %q, %q", out, errs)
			}
		})
	}
}

// TestReplayPeakTruth checks each window of test/scenarios/peak.yaml, a
// Tuesday from 08:45 to 18:15 under the default peak schedule, against the
// values computed by hand in the scenario's comment: within 1%. It reads the
// golden exposition, which TestReplayGolden checks is the replay's output, so
// the simulated day is replayed once.
func TestReplayPeakTruth(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("testdata/peak.prom")
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/gpuxray -update to create it)", err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	get := func(metric, pod, window string) float64 {
		t.Helper()
		for _, m := range mfs[metric].GetMetric() {
			if label(m, "pod") == pod && label(m, "window") == window {
				return m.GetCounter().GetValue()
			}
		}
		t.Fatalf("%s{pod=%q,window=%q} missing", metric, pod, window)
		return 0
	}
	for _, c := range []struct {
		pod, window             string
		allocated, idle, active float64
	}{
		{"office", "peak", 30600, 7200, 0.9*7200 + 0.5*16200},
		{"office", "offpeak", 900, 900, 0},
		{"late", "peak", 1200, 1200, 0.02 * 1200},
		{"late", "offpeak", 900, 900, 0.02 * 900},
	} {
		for _, v := range []struct {
			metric string
			want   float64
		}{
			{"gpuxray_allocated_seconds_total", c.allocated},
			{"gpuxray_allocated_idle_seconds_total", c.idle},
			{"gpuxray_allocated_active_seconds_total", c.active},
		} {
			got := get(v.metric, c.pod, c.window)
			if tol := 0.01 * max(v.want, 1); math.Abs(got-v.want) > tol {
				t.Errorf("%s{pod=%q,window=%q} = %.1f, want %.1f ± 1%%", v.metric, c.pod, c.window, got, v.want)
			}
		}
	}
}

// TestReplayIdentity: pods that carry owners, labels and command lines get
// the workload, model and extra labels a person recognises, and
// allocations past --limits.max-allocations are folded and counted.
func TestReplayIdentity(t *testing.T) {
	t.Parallel()
	code, out, errs := runCmd(t, "replay", "--pods.extra-labels=team", "--limits.max-allocations=1", "../../test/scenarios/shared.yaml")
	if code != 0 {
		t.Fatalf("replay exited %d: %s", code, errs)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, m := range mfs["gpuxray_allocated_seconds_total"].GetMetric() {
		if label(m, "window") == "offpeak" {
			got[label(m, "pod")] = strings.Join([]string{label(m, "workload_kind"), label(m, "workload"), label(m, "model"), label(m, "team")}, "/")
		}
	}
	want := map[string]string{
		// The first allocation seen keeps its series, with its identity: a
		// Job's pod, its model read from the command line (no model label).
		"embed-busy-0": "Job/embed-busy/BAAI/bge-large-en-v1.5/search",
		// The second is folded into the device's overflow series.
		"__overflow__": "///",
	}
	if len(got) != len(want) {
		t.Errorf("allocation series %v, want %v", got, want)
	}
	for pod, w := range want {
		if got[pod] != w {
			t.Errorf("%s: kind/workload/model/team = %q, want %q", pod, got[pod], w)
		}
	}
	if n := mfs["gpuxray_allocation_overflow_total"].GetMetric(); len(n) != 1 || n[0].GetCounter().GetValue() != 1 {
		t.Errorf("gpuxray_allocation_overflow_total = %v, want 1", n)
	}
}

// TestHelp: gpuxray --help (-h, help) lists the commands, one line each,
// on stdout, not the agent's flags.
func TestHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--help"}, {"-h"}, {"-help"}, {"help"}} {
		code, out, errs := runCmd(t, args...)
		if code != 0 || errs != "" {
			t.Errorf("gpuxray %v = %d, stderr %q; want 0 and nothing on stderr", args, code, errs)
		}
		for _, cmd := range []string{"agent", "replay", "report", "version"} {
			n := 0
			for _, line := range strings.Split(out, "\n") {
				if strings.HasPrefix(strings.TrimSpace(line), "gpuxray "+cmd+" ") {
					n++
				}
			}
			if n != 1 {
				t.Errorf("gpuxray %v: %d lines for the %s command, want 1:\n%s", args, n, cmd, out)
			}
		}
		if strings.Contains(out, "-poll.interval duration") {
			t.Errorf("gpuxray %v prints the agent's flags:\n%s", args, out)
		}
	}
}

// TestMakeDemoArgs: make demo passes ARGS to the agent, as the README's
// "Try it" shows for another port.
func TestMakeDemoArgs(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	out, err := exec.Command("make", "-n", "-C", "../..", "demo", "ARGS=--web.listen-address=:9472").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n demo: %v\n%s", err, out)
	}
	if want := "go run ./cmd/gpuxray-sim agent --simulate --web.listen-address=:9472"; !strings.Contains(string(out), want) {
		t.Errorf("make -n demo ARGS=... runs\n%s\nwant %q", out, want)
	}
}

// TestReplayModelFromParentProcess: the demo's vLLM server runs as vLLM V1
// does, its GPU process titled VLLM::EngineCore; the model comes from the
// API server, the engine core's parent in the same container.
func TestReplayModelFromParentProcess(t *testing.T) {
	t.Parallel()
	code, out, errs := runCmd(t, "replay", "--poll.interval=10s", "../../collector/sim/demo.yaml")
	if code != 0 {
		t.Fatalf("replay exited %d: %s", code, errs)
	}
	want := `model="meta-llama/Llama-3.1-8B-Instruct",namespace="inference",pod="vllm-llama-7c9d8f6b5d-x2k8p"`
	if !strings.Contains(out, want) {
		t.Errorf("no allocation series with %s in the demo's replay", want)
	}
}

// TestReplayStaticPod: a static pod time-slices a GPU with a Deployment's
// pod. Its processes' cgroups carry the static pod's UID, not its
// mirror's; through the mirror's annotation they are the pod's, so the
// pod gets its command line's model and its own processes' activity (busy
// at 60 %, never idle), and the Deployment's pod, which runs nothing, is
// idle all its time.
func TestReplayStaticPod(t *testing.T) {
	t.Parallel()
	code, out, errs := runCmd(t, "replay", "--poll.interval=10s", "testdata/static-pod.yaml")
	if code != 0 {
		t.Fatalf("replay exited %d: %s", code, errs)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	sum := func(metric, pod string) (float64, *dto.Metric) {
		var v float64
		var last *dto.Metric
		for _, m := range mfs[metric].GetMetric() {
			if label(m, "pod") == pod {
				v += m.GetCounter().GetValue()
				last = m
			}
		}
		return v, last
	}
	allocated, m := sum("gpuxray_allocated_seconds_total", "llm-server-edge-node")
	if m == nil {
		t.Fatal("no allocation series for the static pod")
	}
	for name, want := range map[string]string{"namespace": "kube-system", "workload_kind": "Pod", "workload": "llm-server-edge-node", "model": "Qwen/Qwen2.5-7B-Instruct", "container": "server"} {
		if got := label(m, name); got != want {
			t.Errorf("static pod's series: %s=%q, want %q", name, got, want)
		}
	}
	idle, _ := sum("gpuxray_allocated_idle_seconds_total", "llm-server-edge-node")
	if allocated < 1700 || idle != 0 {
		t.Errorf("static pod: %.0f s allocated, %.0f s idle; want ≈ 1800 s, none idle (its processes are busy)", allocated, idle)
	}
	webAllocated, _ := sum("gpuxray_allocated_seconds_total", "web-7c9d8f6b5d-abcde")
	webIdle, _ := sum("gpuxray_allocated_idle_seconds_total", "web-7c9d8f6b5d-abcde")
	if webAllocated < 1700 || webIdle < webAllocated-1 {
		t.Errorf("Deployment's pod: %.0f s allocated, %.0f s idle; want all idle (it runs nothing on the busy GPU)", webAllocated, webIdle)
	}
}
