package sim

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// head is a valid scenario top, four lines long, so case lines start at 5.
const head = "start: 2026-12-01T08:00:00Z\nduration: 4h\nsystem: dgxh100\ngpus: 8\n"

// pod is a valid one-pod list starting at line 5.
const pod = "pods:\n  - namespace: a\n    name: p\n    devices: [\"gpu:0\"]\n"

func TestParseScenarioErrors(t *testing.T) {
	t.Parallel()
	tests := []parseErrorCase{
		{"empty file", "", "t.yaml: empty scenario"},
		{"not a mapping", "- a\n", "t.yaml:1: want a mapping for the scenario, got a list"},
		{"syntax", "start: [\n", "t.yaml:1: did not find expected node content"},
		{"start missing", "duration: 4h\nsystem: dgxh100\ngpus: 8\n", "t.yaml:1: start: missing"},
		{"start malformed", "start: tomorrow\nduration: 4h\nsystem: dgxh100\ngpus: 8\n",
			`t.yaml:1: start: "tomorrow" is not a time such as 2026-12-01T08:00:00Z`},
		{"duration zero", "start: 2026-12-01T08:00:00Z\nduration: 0s\nsystem: dgxh100\ngpus: 8\n",
			"t.yaml:2: duration: must be longer than 0s"},
		{"duration malformed", "start: 2026-12-01T08:00:00Z\nduration: 4 hours\nsystem: dgxh100\ngpus: 8\n",
			`t.yaml:2: duration: "4 hours" is not a duration such as 90s, 15m or 1h30m`},
		{"start before 1970", "start: 1969-12-31T23:00:00Z\nduration: 4h\nsystem: dgxh100\ngpus: 8\n",
			"t.yaml:1: start: 1969-12-31T23:00:00Z is before 1970, where NVML's sample stamps begin"},
		{"duration too long", "start: 2026-12-01T08:00:00Z\nduration: 99999h\nsystem: dgxh100\ngpus: 8\n",
			"t.yaml:2: duration: 99999h is longer than the 2160h a scenario may last"},
		{"lead_in too long", "start: 2026-12-01T08:00:00Z\nduration: 2000h\nlead_in: 25h\nsystem: dgxh100\ngpus: 8\n",
			"t.yaml:3: lead_in: 25h is longer than the 24h played before the agent serves"},
		{"second document", head + "---\nstart: 2026-12-02T08:00:00Z\n",
			"t.yaml:5: a second YAML document (after ---): a scenario is one document"},
		{"empty second document", head + "---\n",
			"t.yaml:5: a second YAML document (after ---): a scenario is one document"},
		{"aliases expanding past the bound", aliasBomb(),
			"t.yaml: its aliases expand to more than 100000 YAML nodes beyond the file's 96; write the values out"},
		{"system unknown", "start: 2026-12-01T08:00:00Z\nduration: 4h\nsystem: dgx1\ngpus: 8\n",
			`t.yaml:3: system: "dgx1" is not a known system; want one of dgxa100, dgxb200, dgxh100, dgxh200`},
		{"gpus too many", "start: 2026-12-01T08:00:00Z\nduration: 4h\nsystem: dgxh100\ngpus: 9\n",
			"t.yaml:4: gpus: 9 is not a whole number from 1 to 8"},
		{"gpus zero", "start: 2026-12-01T08:00:00Z\nduration: 4h\nsystem: dgxh100\ngpus: 0\n",
			"t.yaml:4: gpus: 0 is not a whole number from 1 to 8"},
		{"unknown top key", head + "gpu: 8\n",
			"t.yaml:5: gpu: unknown key; want one of start, duration, lead_in, node, system, gpus, allocation, mig, pods, unallocated, cgroup, unattributed, faults, unscheduled, priority_classes, kueue, driver, device_ids, minor_numbers, vfio, numa_nodes, kubelet"},
		{"key twice", head + "duration: 2h\n", "t.yaml:5: duration: given twice"},
		{"unknown pod key", head + pod + "    memroy: 1GiB\n",
			"t.yaml:9: pods[0].memroy: unknown key; want one of namespace, name, container, owner, labels, cmdline, parent_cmdline, allocation, claim, resource, pid, devices, from, to, memory, util, priority_class, static, sm_fraction, engine, gpu_fraction, container_type, admin_access, request"},
		{"pod name missing", head + "pods:\n  - namespace: a\n    devices: [\"gpu:0\"]\n", "t.yaml:6: pods[0].name: missing"},
		{"pod twice", head + pod + "  - namespace: a\n    name: p\n    devices: [\"gpu:1\"]\n",
			"t.yaml:10: pods[1].name: a/p is already pods[0]"},
		{"owner without kind", head + pod + "    owner: {name: x}\n", "t.yaml:9: pods[0].owner.kind: missing"},
		{"device out of range", head + "pods:\n  - namespace: a\n    name: p\n    devices: [\"gpu:0\", \"gpu:8\"]\n",
			"t.yaml:8: pods[0].devices[1]: gpu:8 is not one of the node's 8 GPUs (gpu:0 to gpu:7)"},
		{"device malformed", head + "pods:\n  - namespace: a\n    name: p\n    devices:\n      - nvidia0\n",
			`t.yaml:9: pods[0].devices[0]: "nvidia0" is not a device; want gpu:N, gpu:N::R, mig:N/S or mig:N:<profile>`},
		{"no devices", head + "pods:\n  - namespace: a\n    name: p\n    devices: []\n",
			"t.yaml:8: pods[0].devices: must name at least one device"},
		{"same GPU twice in a pod", head + "pods:\n  - namespace: a\n    name: p\n    devices: [\"gpu:1::0\", \"gpu:1::1\"]\n",
			"t.yaml:8: pods[0].devices[1]: gpu:1::1: the pod already holds gpu:1::0"},
		{"resource unknown", head + pod + "    resource: amd.com/gpu\n",
			`t.yaml:9: pods[0].resource: "amd.com/gpu" is not nvidia.com/gpu, nvidia.com/gpu.shared or nvidia.com/mig-<profile>`},
		{"shared resource on a whole GPU", head + pod + "    resource: nvidia.com/gpu.shared\n",
			"t.yaml:8: pods[0].devices[0]: gpu:0 is a whole GPU, but nvidia.com/gpu.shared hands out replicas (gpu:N::R)"},
		{"from not before to", head + pod + "    from: 2h\n    to: 1h\n", "t.yaml:10: pods[0].to: 1h is not after from (2h)"},
		{"from at the end", head + pod + "    from: 4h\n", "t.yaml:9: pods[0].to: 4h is not after from (4h)"},
		{"to after the end", head + pod + "    to: 5h\n", "t.yaml:9: pods[0].to: 5h is after the scenario's end at 4h"},
		{"from negative", head + pod + "    from: -1m\n", "t.yaml:9: pods[0].from: -1m is negative"},
		{"util value above 1", head + pod + "    util:\n      - {at: 0s, value: 0.5}\n      - {at: 1h, value: 1.4}\n",
			"t.yaml:11: pods[0].util[1].value: 1.4 is not a ratio between 0 and 1"},
		{"util value not a number", head + pod + "    util:\n      - {at: 0s, value: high}\n",
			"t.yaml:10: pods[0].util[0].value: high is not a ratio between 0 and 1"},
		{"util not ascending", head + pod + "    util:\n      - {at: 2h, value: 0.5}\n      - {at: 1h30m, value: 1}\n",
			"t.yaml:11: pods[0].util[1].at: 1h30m does not come after the previous step's 2h"},
		{"util same time twice", head + pod + "    util:\n      - {at: 1h, value: 0.5}\n      - {at: 1h, value: 1}\n",
			"t.yaml:11: pods[0].util[1].at: 1h does not come after the previous step's 1h"},
		{"util after the end", head + pod + "    util:\n      - {at: 4h1s, value: 0.5}\n",
			"t.yaml:10: pods[0].util[0].at: 4h0m1s is after the scenario's end at 4h"},
		{"util step missing value", head + pod + "    util:\n      - {at: 0s}\n", "t.yaml:10: pods[0].util[0].value: missing"},
		{"memory above the GPU's", head + pod + "    memory: 80GiB\n",
			"t.yaml:9: pods[0].memory: 80GiB is more than the 79.51171875GiB an NVIDIA H100 80GB HBM3 offers (80GiB less 500MiB the driver reserves)"},
		{"memory malformed", head + pod + "    memory: lots\n",
			`t.yaml:9: pods[0].memory: "lots" is not a size such as 60GiB, 512MiB or 80GB`},
		{"memory unit unknown", head + pod + "    memory: 3XB\n",
			`t.yaml:9: pods[0].memory: "3XB" is not a size such as 60GiB, 512MiB or 80GB`},
		{"exclusive GPU held twice", head + pod + "    to: 2h\n  - namespace: a\n    name: q\n    devices: [\"gpu:0\"]\n    from: 1h\n",
			"t.yaml:12: pods[1].devices[0]: gpu:0 is also held by a/p (pods[0], gpu:0 as gpu:0 from 0s to 2h)"},
		{"replica on an exclusive GPU", head + pod + "  - namespace: a\n    name: q\n    devices: [\"gpu:0::1\"]\n",
			"t.yaml:11: pods[1].devices[0]: gpu:0::1 is also held by a/p (pods[0], gpu:0 as gpu:0 from 0s to 4h)"},
		{"replica held twice", head + "pods:\n  - namespace: a\n    name: p\n    devices: [\"gpu:2::0\"]\n  - namespace: a\n    name: q\n    devices: [\"gpu:2::0\"]\n    from: 3h59m\n",
			"t.yaml:11: pods[1].devices[0]: gpu:2::0 is also held by a/p (pods[0], gpu:2::0 as gpu:2::0 from 0s to 4h)"},
		{"pid shared", head + pod + "    pid: 500\n  - namespace: a\n    name: q\n    pid: 499\n    devices: [\"gpu:1\", \"gpu:2\"]\n",
			"t.yaml:12: pods[1].pid: process 500 on gpu:2 is also a process of pods[0]"},
		{"replicas overfill a GPU", head + "pods:\n  - namespace: a\n    name: p\n    devices: [\"gpu:2::0\"]\n    memory: 60GiB\n  - namespace: a\n    name: q\n    devices: [\"gpu:2::1\"]\n    from: 1h\n    memory: 20GiB\n",
			"t.yaml:14: pods[1].memory: gpu:2 would need 80GiB at 1h with the pods already on it, more than its 79.51171875GiB"},
		{"unallocated on a held GPU", head + pod + "    to: 1h\nunallocated:\n  - {device: \"gpu:0\", at: 30m, value: 0.3}\n",
			"t.yaml:11: unallocated[0]: gpu:0 is busy (0.3) from 30m to 4h while a/p (pods[0]) holds it from 0s to 1h; unallocated activity is for GPUs nobody holds"},
		{"unallocated replica", head + "unallocated:\n  - {device: \"gpu:3::1\", at: 0s, value: 0.3}\n",
			"t.yaml:6: unallocated[0].device: gpu:3::1: unallocated activity is per GPU; want gpu:3"},
		{"unallocated not ascending", head + "unallocated:\n  - {device: \"gpu:3\", at: 1h, value: 0.3}\n  - {device: \"gpu:4\", at: 0s, value: 0.3}\n  - {device: \"gpu:3\", at: 30m, value: 0}\n",
			"t.yaml:8: unallocated[2].at: 30m does not come after the previous gpu:3 step's 1h"},
		{"unallocated unknown key", head + "unallocated:\n  - {gpu: 3, at: 1h, value: 0.3}\n",
			"t.yaml:6: unallocated[0].gpu: unknown key; want one of device, at, value"},
	}
	checkParseErrors(t, tests)
}

func TestParseScenarioValues(t *testing.T) {
	t.Parallel()
	src := head + `node: n1
pods:
  - namespace: a
    name: p
    owner: {kind: Job, name: j}
    labels: {team: x, tier: "1"}
    cmdline: [python, -m, train]
    resource: nvidia.com/gpu.shared
    pid: 777
    devices: ["gpu:3::2", "gpu:5::0"]
    from: 1h30m
    to: 2.5h
    memory: 512MiB
    util:
      - {at: 0s, value: 0.5}
      - &busy {at: 2h, value: 1}
  - namespace: a
    name: q
    devices: ["gpu:0"]
    memory: 80GB
unallocated:
  - {device: "gpu:7", at: 10m, value: 0.25}
`
	s, err := ParseScenario([]byte(src), "v.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := s.Pods[0]
	checks := []struct {
		name      string
		got, want any
	}{
		{"name", s.Name, "v.yaml"},
		{"start", s.Start, time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)},
		{"duration", s.Duration, 4 * time.Hour},
		{"node", s.Node, "n1"},
		{"gpus", s.GPUs, 8},
		{"owner", p.Owner, Owner{Kind: "Job", Name: "j"}},
		{"labels", len(p.Labels), 2},
		{"label tier", p.Labels["tier"], "1"},
		{"cmdline", strings.Join(p.Cmdline, " "), "python -m train"},
		{"resource", p.Resource, ResourceGPUShared},
		{"pid", p.PID, uint32(777)},
		{"devices", p.Devices[0].String() + "," + p.Devices[1].String(), "gpu:3::2,gpu:5::0"},
		{"from", p.From, 90 * time.Minute},
		{"to", p.To, 150 * time.Minute},
		{"memory", p.Memory, uint64(512 << 20)},
		{"util", p.Util, []Step{{At: 0, Value: 0.5}, {At: 2 * time.Hour, Value: 1}}},
		{"default container", s.Pods[1].Container, "main"},
		{"default resource", s.Pods[1].Resource, ResourceGPU},
		{"default to", s.Pods[1].To, 4 * time.Hour},
		{"decimal memory", s.Pods[1].Memory, uint64(80e9)},
		{"unallocated", s.Unallocated, []UnallocatedStep{{GPU: 7, At: 10 * time.Minute, Value: 0.25}}},
		{"pid on second device", s.PID(0, 1), uint32(778)},
		{"default pid", s.PID(1, 0), uint32(10100)},
		{"util before from", s.UtilAt(0, time.Hour), 0.0},
		{"util at from", s.UtilAt(0, 90*time.Minute), 0.5},
		{"util at step", s.UtilAt(0, 2*time.Hour), 1.0},
		{"util at to", s.UtilAt(0, 150*time.Minute), 0.0},
		{"gpu util unallocated", s.GPUUtilAt(7, time.Hour), 0.25},
		{"gpu util unallocated after the end", s.GPUUtilAt(7, 5*time.Hour), 0.0},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if !equal(c.got, c.want) {
				t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
			}
		})
	}
}

func equal(a, b any) bool {
	as, aok := a.([]Step)
	bs, bok := b.([]Step)
	if aok && bok {
		if len(as) != len(bs) {
			return false
		}
		for i := range as {
			if as[i] != bs[i] {
				return false
			}
		}
		return true
	}
	au, aok := a.([]UnallocatedStep)
	bu, bok := b.([]UnallocatedStep)
	if aok && bok {
		return len(au) == len(bu) && (len(au) == 0 || au[0] == bu[0])
	}
	return a == b
}

func TestLoadScenario(t *testing.T) {
	t.Parallel()
	s, err := LoadScenario(filepath.Join("testdata", "steps.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "steps.yaml" || len(s.Pods) != 4 || s.Node != "test-node" {
		t.Errorf("loaded %s with %d pods on %s, want steps.yaml with 4 pods on test-node", s.Name, len(s.Pods), s.Node)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte(head+"pods: 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadScenario(bad); err == nil || err.Error() != `bad.yaml:5: pods: want a list, got "3"` {
		t.Errorf("LoadScenario(bad) = %v, want bad.yaml:5: pods: want a list, got \"3\"", err)
	}
	if _, err := LoadScenario(filepath.Join("testdata", "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadScenario(missing) = %v, want a not-exist error", err)
	}
}

func TestDemo(t *testing.T) {
	t.Parallel()
	s := Demo()
	if s.System != "dgxh100" || s.GPUs != 8 || s.Duration != 4*time.Hour || !s.Start.Equal(time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)) {
		t.Fatalf("demo is %s×%d from %s for %s", s.System, s.GPUs, s.Start, s.Duration)
	}
	byName := map[string]Pod{}
	held := map[int]bool{}
	for _, p := range s.Pods {
		byName[p.Name] = p
		for _, d := range p.Devices {
			held[d.GPU] = true
		}
	}
	if nb := byName["notebook-0"]; nb.Owner != (Owner{"StatefulSet", "notebook"}) || nb.Devices[0] != (DeviceSpec{GPU: 4}) || nb.Memory == 0 {
		t.Errorf("notebook = %+v", nb)
	}
	if v := byName["vllm-llama-7c9d8f6b5d-x2k8p"]; v.Owner.Kind != "ReplicaSet" || strings.Join(v.Cmdline, " ") != "VLLM::EngineCore" ||
		strings.Join(v.ParentCmdline, " ") != "vllm serve meta-llama/Llama-3.1-8B-Instruct" || len(v.Util) < 20 {
		t.Errorf("vllm = %+v", v)
	}
	if held[7] || len(s.Unallocated) == 0 || s.Unallocated[0].GPU != 7 {
		t.Errorf("gpu:7 should be held by nobody and busy unallocated; held=%v unallocated=%v", held[7], s.Unallocated)
	}
	truth := s.Truth(0.05)
	if len(truth) != 8 {
		t.Fatalf("demo truth has %d rows, want 8 (4 training GPUs, notebook, vllm, 2 slices)", len(truth))
	}
	for _, r := range truth {
		if r.Pod == "notebook-0" && r.IdleSeconds/r.AllocatedSeconds < 0.95 {
			t.Errorf("notebook idle %.0f of %.0f s, want nearly all", r.IdleSeconds, r.AllocatedSeconds)
		}
	}
	// Each call is a fresh copy, so callers may not disturb each other.
	s.Pods[0].Name = "changed"
	if Demo().Pods[0].Name == "changed" {
		t.Error("Demo shares state between calls")
	}
}

func TestTruth(t *testing.T) {
	t.Parallel()
	s, err := LoadScenario(filepath.Join("testdata", "steps.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// Computed by hand from testdata/steps.yaml.
	row := func(ns, pod string, dev DeviceSpec, alloc, idle, active float64) TruthRow {
		return TruthRow{Namespace: ns, Pod: pod, Container: "main", Device: dev, UUID: deviceUUID(s.Node, dev.GPU),
			AllocatedSeconds: alloc, IdleSeconds: idle, ActiveSeconds: active}
	}
	want := []TruthRow{
		row("team-a", "exclusive", DeviceSpec{GPU: 0}, 3600, 600,
			0.2*1.25+0.8*598.75+0.95*1200+0.35*1200),
		row("team-b", "slice-0", DeviceSpec{GPU: 1, Replicated: true, Replica: 0}, 3600, 0, 0.3*3600),
		row("team-b", "slice-1", DeviceSpec{GPU: 1, Replicated: true, Replica: 1}, 1800, 600, 0.9*1200+0.02*600),
		row("team-a", "late", DeviceSpec{GPU: 2}, 2700, 1500, 1*1200+0.04*1500),
	}
	got := s.Truth(0.05)
	if len(got) != len(want) {
		t.Fatalf("Truth has %d rows, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Namespace != w.Namespace || g.Pod != w.Pod || g.Container != w.Container || g.Device != w.Device ||
			g.UUID != w.UUID || g.Claim != "" || g.DRADevice != "" || !near(g.AllocatedSeconds, w.AllocatedSeconds, 1e-9) || !near(g.IdleSeconds, w.IdleSeconds, 1e-9) || !near(g.ActiveSeconds, w.ActiveSeconds, 1e-9) {
			t.Errorf("Truth[%d]\n got %+v\nwant %+v", i, g, w)
		}
	}
	// A threshold above every value makes all allocated time idle.
	if r := s.Truth(1.01)[0]; r.IdleSeconds != r.AllocatedSeconds {
		t.Errorf("idle at threshold 1.01 = %v, want %v", r.IdleSeconds, r.AllocatedSeconds)
	}
}

// near reports whether got is within rel (relative) of want.
func near(got, want, rel float64) bool {
	if want == 0 {
		return math.Abs(got) <= rel
	}
	return math.Abs(got-want) <= rel*math.Abs(want)
}

// parseErrorCase is a scenario that must be refused with exactly want.
type parseErrorCase struct {
	name, yaml, want string
}

// checkParseErrors parses each case's scenario and requires its error,
// word for word, as a *ScenarioError.
func checkParseErrors(t *testing.T, tests []parseErrorCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseScenario([]byte(tt.yaml), "t.yaml")
			if err == nil {
				t.Fatalf("ParseScenario succeeded, want error %q", tt.want)
			}
			if err.Error() != tt.want {
				t.Errorf("error\n got: %s\nwant: %s", err, tt.want)
			}
			var se *ScenarioError
			if !errors.As(err, &se) {
				t.Errorf("error is %T, want *ScenarioError", err)
			}
		})
	}
}

// aliasBomb is a small scenario whose aliases, each a list of ten of the
// one before, expand to ten million nodes.
func aliasBomb() string {
	var b strings.Builder
	b.WriteString(head + "unscheduled_bomb:\n  a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 7; i++ {
		fmt.Fprintf(&b, "  a%d: &a%d [*a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d]\n", i, i, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
	}
	return b.String()
}
