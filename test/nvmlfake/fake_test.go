//go:build e2e

package nvmlfake

import (
	"bufio"
	"fmt"
	"github.com/gpuxray/gpuxray/internal/testtool"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuxray/gpuxray/collector/sim"
)

// needTools skips without gcc (the CI image has it; CI=1 fails instead).
func needTools(t *testing.T) {
	t.Helper()
	if err := HaveCompiler(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}

var (
	agentOnce sync.Once
	agentBin  string
	agentErr  error
	libMu     sync.Mutex
	libs      = map[string]string{}
	buildRoot string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "nvmlfake-build")
	if err != nil {
		panic(err)
	}
	buildRoot = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// productionAgent builds gpuxray as the container image does (cmd/gpuxray:
// no simulator inside), or returns $NVMLFAKE_AGENT, a build to try
// instead (an older one, to see a trap it falls into).
func productionAgent(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("NVMLFAKE_AGENT"); bin != "" {
		return bin
	}
	agentOnce.Do(func() {
		agentBin = filepath.Join(buildRoot, "gpuxray")
		cmd := exec.Command("go", "build", "-trimpath", "-o", agentBin, "../../cmd/gpuxray")
		cmd.Env = append(os.Environ(), "CGO_CFLAGS=-Wno-deprecated-declarations")
		if out, err := cmd.CombinedOutput(); err != nil {
			agentErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if agentErr != nil {
		t.Fatal(agentErr)
	}
	return agentBin
}

func library(t *testing.T, variant string) string {
	t.Helper()
	libMu.Lock()
	defer libMu.Unlock()
	if dir, ok := libs[variant]; ok {
		return dir
	}
	dir := filepath.Join(buildRoot, variant)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Build(dir, variant); err != nil {
		t.Fatal(err)
	}
	libs[variant] = dir
	return dir
}

// agent is the production binary running on a fake node.
type agent struct {
	cmd    *exec.Cmd
	base   string
	stderr *testtool.SyncBuffer
	exited chan error
}

func startAgent(t *testing.T, n *Node, extra ...string) *agent {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	args := append([]string{"agent", "--web.listen-address=" + addr, "--log.level=info", "--log.format=json"}, n.Args()...)
	a := &agent{base: "http://" + addr, stderr: &testtool.SyncBuffer{}, exited: make(chan error, 1)}
	a.cmd = exec.Command(productionAgent(t), append(args, extra...)...)
	a.cmd.Env = append(os.Environ(), n.Env()...)
	a.cmd.Stderr = a.stderr
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { a.exited <- a.cmd.Wait() }()
	t.Cleanup(func() {
		a.cmd.Process.Signal(os.Interrupt)
		select {
		case <-a.exited:
		case <-time.After(10 * time.Second):
			a.cmd.Process.Kill()
			<-a.exited
		}
		if t.Failed() {
			t.Logf("agent log:\n%s", a.stderr.String())
		}
	})
	return a
}

// scrape returns the exposition, or fails the test if the agent died.
func (a *agent) scrape(t *testing.T) string {
	t.Helper()
	select {
	case err := <-a.exited:
		a.exited <- err
		t.Fatalf("the agent exited (%v):\n%s", err, a.stderr.String())
	default:
	}
	resp, err := http.Get(a.base + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// waitFor scrapes until ok holds of the exposition, for at most a minute.
func (a *agent) waitFor(t *testing.T, what string, ok func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		body := a.scrape(t)
		if body != "" && ok(body) {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s; last scrape:\n%s\nagent log:\n%s", what, body, a.stderr.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

var sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)`)

// value is the value of the series of metric whose labels include every
// label="value" of want, and whether there is one.
func value(body, metric string, want ...string) (float64, bool) {
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := sampleLine.FindStringSubmatch(sc.Text())
		if m == nil || m[1] != metric {
			continue
		}
		all := true
		for _, w := range want {
			all = all && strings.Contains(m[2], w)
		}
		if all {
			v, err := strconv.ParseFloat(m[3], 64)
			return v, err == nil
		}
	}
	return 0, false
}

func scenario(t *testing.T, body string) *sim.Scenario {
	t.Helper()
	sc, err := sim.ParseScenario([]byte("start: 2026-12-01T08:00:00Z\nduration: 1h\nnode: fake-node\n"+body), "fake.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

const gib = 1 << 30

// TestSymbolTraps runs the production binary, unmodified (as the image
// builds it), on fake libraries of three drivers: it must not die, and
// must export what each driver can tell.
//
//   - R470 has no nvmlDeviceGetMemoryInfo_v2 (R510) and no GPM (R520): a
//     call of either ends the process ("symbol lookup error"), which the
//     agent before the symbol checks did on its first poll. The agent
//     reads memory with the v1 call (whose used memory counts the
//     driver's reserve) and runs without GPM.
//   - The current driver: memory from v2, GPM on.
//   - 535.54.03 writes 32-byte process entries: the agent reads no process
//     list, so no allocation memory, and no garbage.
func TestSymbolTraps(t *testing.T) {
	needTools(t)
	t.Parallel()
	const pods = `
pods:
  - {namespace: ml, name: train, devices: ["gpu:0"], memory: 10GiB, util: [{at: 0s, value: 0.5}]}
  - {namespace: ml, name: a, resource: nvidia.com/gpu.shared, devices: ["gpu:1::0"], memory: 3GiB, util: [{at: 0s, value: 0.3}]}
  - {namespace: ml, name: b, resource: nvidia.com/gpu.shared, devices: ["gpu:1::1"], memory: 5GiB, util: [{at: 0s, value: 0.2}]}
`
	for _, tc := range []struct {
		variant, version string
		// reserve says the device's used memory counts the driver's
		// reserve (the v1 call).
		reserve, gpm, processes bool
	}{
		{R470, "470.256.02", true, false, true},
		{Current, "550.54.15", false, true, true},
		{R535StructBug, "535.54.03", false, true, false},
	} {
		t.Run(tc.variant, func(t *testing.T) {
			t.Parallel()
			lib := library(t, tc.variant)
			sc := scenario(t, "system: dgxh100\ngpus: 2\ndriver: {version: \""+tc.version+"\"}"+pods)
			n, err := StartNode(sc, lib)
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			a := startAgent(t, n)
			gpu0, gpu1 := n.Sim.DeviceUUID(0), n.Sim.DeviceUUID(1)
			uuid0 := `uuid="` + gpu0 + `"`
			body := a.waitFor(t, "ten seconds of GPU 0 allocated to train", func(b string) bool {
				v, ok := value(b, "gpuxray_allocated_seconds_total", `pod="train"`)
				return ok && v >= 10
			})
			// On Hopper the reader has GPM too, but idleness comes from the
			// samples unless --idle.source=gpm.
			const source = "samples"
			if _, ok := value(body, "gpuxray_device_info", uuid0, `driver_version="`+tc.version+`"`, `utilization_source="`+source+`"`); !ok {
				t.Errorf("no gpuxray_device_info for %s with driver %s, source %s", gpu0, tc.version, source)
			}
			h, _ := n.Sim.NVML().DeviceGetHandleByIndex(0)
			// The simulated R470 has no v2 call either: asking it would
			// end this test as it ended the agent.
			v1, _ := h.GetMemoryInfo()
			want := v1.Used
			if !tc.reserve {
				v2, _ := h.GetMemoryInfo_v2()
				want = v2.Used
			}
			if got, ok := value(body, "gpuxray_device_memory_used_bytes", uuid0); !ok || got != float64(want) {
				t.Errorf("GPU 0 used memory %v (%v), want %d (v1 %d)", got, ok, want, v1.Used)
			}
			if got, ok := value(body, "gpuxray_device_utilization_ratio", uuid0); !ok || got < 0.45 || got > 0.55 {
				t.Errorf("GPU 0 utilization %v (%v), want train's 0.5", got, ok)
			}
			_, hasSM := value(body, "gpuxray_device_sm_active_ratio", uuid0)
			if hasSM != tc.gpm {
				t.Errorf("GPM SM activity exported %v, want %v on %s", hasSM, tc.gpm, tc.version)
			}
			mem, hasMem := value(body, "gpuxray_allocation_memory_used_bytes", `pod="train"`)
			if tc.processes && (!hasMem || mem != 10*gib) {
				t.Errorf("train's memory %v (%v), want 10 GiB", mem, hasMem)
			}
			if !tc.processes && hasMem {
				t.Errorf("train's memory %v exported on %s, whose process lists are not read", mem, tc.version)
			}
			calls := n.Server().Calls()
			if tc.reserve && calls["memory_v2"] != 0 {
				t.Errorf("%d calls of nvmlDeviceGetMemoryInfo_v2 on R470", calls["memory_v2"])
			}
			if !tc.processes && calls["processes"] != 0 {
				t.Errorf("%d process-list calls on %s", calls["processes"], tc.version)
			}
			if tc.processes {
				// GPU 1's two processes, each with its memory, not garbage:
				// the unattributed memory is 0 only if none is left over.
				if got, ok := value(body, "gpuxray_device_memory_used_bytes", `uuid="`+gpu1+`"`); !ok || got < 8*gib {
					t.Errorf("GPU 1 used memory %v (%v), want its pods' 8 GiB at least", got, ok)
				}
			}
		})
	}
}
