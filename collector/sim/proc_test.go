package sim

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuxray/gpuxray/collector"
	hostproc "github.com/gpuxray/gpuxray/collector/proc"
)

// procScenario has pods in all three QoS classes (by index), one on two
// GPUs, one on a replica, and a process outside any pod.
const procScenario = `start: 2026-12-01T08:00:00Z
duration: 1h
node: proc-node
system: dgxh100
gpus: 4
pods:
  - namespace: research
    name: train-0
    container: trainer
    cmdline: [torchrun, --nproc-per-node=2, train.py]
    devices: ["gpu:0", "gpu:1"]
    memory: 40GiB
    util: [{at: 0s, value: 0.9}]
  - namespace: dev
    name: slice-0
    resource: nvidia.com/gpu.shared
    devices: ["gpu:2::0"]
    from: 10m
    to: 40m
    memory: 8GiB
  - namespace: dev
    name: slice-1
    container: a-container-with-a-long-name
    cmdline: [/usr/local/bin/a-very-long-executable-name, --serve]
    resource: nvidia.com/gpu.shared
    pid: 4242
    devices: ["gpu:2::1"]
    memory: 8GiB
unattributed:
  - {device: "gpu:3", pid: 777, memory: 2GiB, cmdline: [python3, leak.py], from: 30m, to: 50m}
`

// TestWriteProcResolves writes the simulated /proc in every cgroup style and
// resolves every GPU process through the real reader, then through the pod
// source: PID → pod UID and container ID → pod and container.
func TestWriteProcResolves(t *testing.T) {
	t.Parallel()
	for _, style := range cgroupStyles {
		t.Run(style, func(t *testing.T) {
			t.Parallel()
			sc, err := ParseScenario([]byte("cgroup: "+style+"\n"+procScenario), "p.yaml")
			if err != nil {
				t.Fatal(err)
			}
			n, err := NewNode(sc, NewVirtualClock(sc.Start.Add(20*time.Minute)))
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			if err := n.WriteProc(dir); err != nil {
				t.Fatal(err)
			}
			want := map[uint32]collector.ProcessInfo{}
			for i, p := range sc.Pods {
				for k := range p.Devices {
					pid := sc.PID(i, k)
					want[pid] = collector.ProcessInfo{
						PID:         pid,
						PodUID:      PodUID("proc-node", p.Namespace, p.Name),
						ContainerID: ContainerID("proc-node", p.Namespace, p.Name, p.Container),
						Cmdline:     p.Cmdline,
					}
				}
			}
			want[777] = collector.ProcessInfo{PID: 777, Cmdline: []string{"python3", "leak.py"}}
			var pids []uint32
			for pid := range want {
				pids = append(pids, pid)
			}
			got, errs := hostproc.New(hostproc.Config{Root: dir}, nil).Resolve(pids)
			if len(errs) != 0 {
				t.Fatalf("Resolve errors: %v", errs)
			}
			// Every process has the start time (in clock ticks since boot)
			// the sim wrote; its value is the proc tests' to judge.
			for pid, info := range got {
				if info.StartTime == 0 {
					t.Errorf("PID %d: no start time", pid)
				}
				info.StartTime = 0
				got[pid] = info
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Resolve =\n%+v\nwant\n%+v", got, want)
			}
			for pid, info := range got {
				if info.PodUID == "" {
					continue
				}
				pod, ok := n.PodByUID(info.PodUID)
				if !ok {
					t.Errorf("PID %d: no pod with UID %s", pid, info.PodUID)
					continue
				}
				i := slices.IndexFunc(sc.Pods, func(p Pod) bool { return p.Namespace == pod.Namespace && p.Name == pod.Name })
				if i < 0 || pod.ContainerIDs[sc.Pods[i].Container] != info.ContainerID {
					t.Errorf("PID %d: pod %s/%s containers %v, want %s for its process", pid, pod.Namespace, pod.Name, pod.ContainerIDs, info.ContainerID)
				}
			}

			// The shape of the files, so every style tests what it names.
			cgroup := readFile(t, filepath.Join(dir, "10000", "cgroup"))
			guaranteed := readFile(t, filepath.Join(dir, "4242", "cgroup"))
			host := readFile(t, filepath.Join(dir, "777", "cgroup"))
			lines := strings.Count(cgroup, "\n")
			wantLines, wantIn, wantHost := 1, "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod", "/system.slice/docker-"
			switch style {
			case CgroupCgroupfsContainerd:
				wantIn, wantHost = "0::/kubepods/besteffort/pod", "0::/docker/"
			case CgroupSystemdCRIO:
				wantIn = ".slice/crio-"
			case CgroupV1CgroupfsDocker:
				wantLines, wantIn, wantHost = 13, "12:pids:/kubepods/besteffort/pod", ":/docker/"
			case CgroupV1SystemdDocker:
				wantLines, wantIn = 13, ".slice/docker-"
			case CgroupPrivateNamespace:
				wantIn, wantHost = "0::/../../kubepods-besteffort-pod", "0::/../../../../system.slice/docker-"
			}
			if lines != wantLines || !strings.Contains(cgroup, wantIn) {
				t.Errorf("cgroup of PID 10000 has %d lines, want %d with %q:\n%s", lines, wantLines, wantIn, cgroup)
			}
			if strings.Contains(guaranteed, "besteffort") || strings.Contains(guaranteed, "burstable") {
				t.Errorf("cgroup of a guaranteed pod names a QoS level:\n%s", guaranteed)
			}
			if !strings.Contains(host, wantHost) {
				t.Errorf("cgroup of an unattributed process, want %q:\n%s", wantHost, host)
			}
		})
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestWriteProcStat(t *testing.T) {
	t.Parallel()
	sc, err := ParseScenario([]byte(procScenario), "p.yaml")
	if err != nil {
		t.Fatal(err)
	}
	n, err := NewNode(sc, NewVirtualClock(sc.Start))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := n.WriteProc(dir); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		pid   string
		comm  string
		start uint64
	}{
		{"10000", "torchrun", 3600 * 100},
		{"10100", "main", 4200 * 100},           // no command line: the container's name
		{"4242", "a-very-long-exe", 3600 * 100}, // cut to 15 bytes, as the kernel does
		{"777", "python3", 5400 * 100},
	}
	for _, tt := range tests {
		stat := readFile(t, filepath.Join(dir, tt.pid, "stat"))
		if !strings.HasPrefix(stat, tt.pid+" ("+tt.comm+") S ") {
			t.Errorf("stat of %s = %q, want comm %q", tt.pid, stat, tt.comm)
		}
		if got, err := hostproc.ParseStartTime([]byte(stat)); err != nil || got != tt.start {
			t.Errorf("start time of %s = %d, %v; want %d", tt.pid, got, err, tt.start)
		}
		if f := strings.Fields(stat); len(f) != 52 {
			t.Errorf("stat of %s has %d fields, want 52", tt.pid, len(f))
		}
	}
	if got := readFile(t, filepath.Join(dir, "10100", "cmdline")); got != "" {
		t.Errorf("cmdline of a pod without one = %q, want empty", got)
	}
	if got := readFile(t, filepath.Join(dir, "777", "cmdline")); got != "python3\x00leak.py\x00" {
		t.Errorf("cmdline of 777 = %q", got)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 5 {
		t.Errorf("the tree holds %d processes, want 5 (every pod's on every device, and the unattributed one)", len(entries))
	}
}

func TestPodSource(t *testing.T) {
	t.Parallel()
	n, clock := yamlNode(t, procScenario)
	sc := n.Scenario()
	uid := PodUID("proc-node", "dev", "slice-0")
	wantPod := collector.Pod{
		UID: uid, Namespace: "dev", Name: "slice-0",
		// A pod with no owner is its own workload.
		WorkloadKind: "Pod", Workload: "slice-0",
		ContainerIDs: map[string]string{"main": ContainerID("proc-node", "dev", "slice-0", "main")},
		// No class: priority 0, as the admission controller gives it.
		Scheduling: collector.Scheduling{HasPriority: true},
	}
	for _, tt := range []struct {
		at    time.Duration
		phase string
	}{
		{0, "Pending"}, {10*time.Minute - time.Nanosecond, "Pending"}, {10 * time.Minute, "Running"},
		{40*time.Minute - time.Nanosecond, "Running"}, {40 * time.Minute, "Succeeded"}, {2 * time.Hour, "Succeeded"},
	} {
		clock.Set(sc.Start.Add(tt.at))
		want := wantPod
		want.Phase = tt.phase
		got, ok := n.Pod("dev", "slice-0")
		if !ok || !reflect.DeepEqual(got, want) {
			t.Errorf("at %s: Pod(dev, slice-0) = %+v, %v; want %+v", tt.at, got, ok, want)
		}
		if got, ok := n.PodByUID(uid); !ok || !reflect.DeepEqual(got, want) {
			t.Errorf("at %s: PodByUID(%s) = %+v, %v; want %+v", tt.at, uid, got, ok, want)
		}
	}
	if _, ok := n.Pod("dev", "nope"); ok {
		t.Error("Pod(dev, nope) found a pod")
	}
	if _, ok := n.PodByUID(PodUID("other-node", "dev", "slice-0")); ok {
		t.Error("PodByUID found a pod of another node")
	}
	uids := map[string]bool{}
	for _, p := range sc.Pods {
		u := PodUID(sc.Node, p.Namespace, p.Name)
		if uids[u] {
			t.Errorf("UID %s given twice", u)
		}
		uids[u] = true
		if uid, cid, ok := hostproc.ParseCgroup("0::/kubepods/pod" + u + "/" + ContainerID(sc.Node, p.Namespace, p.Name, p.Container)); !ok || uid != u || len(cid) != 64 {
			t.Errorf("pod %s/%s: UID %s does not read back through ParseCgroup (%q, %q, %v)", p.Namespace, p.Name, u, uid, cid, ok)
		}
	}
}

// TestUnattributedDriver checks that an unattributed process shows up in
// the driver from its from to its to: listed with its memory, counted in
// the GPU's used memory and busy ratio, and in per-process samples while
// busy.
func TestUnattributedDriver(t *testing.T) {
	t.Parallel()
	src := head + `driver: {process_samples: per-period}
pods:
  - namespace: a
    name: p
    resource: nvidia.com/gpu.shared
    devices: ["gpu:1::0"]
    memory: 10GiB
    util: [{at: 0s, value: 0.3}]
unattributed:
  - device: "gpu:1"
    pid: 31337
    memory: 2GiB
    from: 10m
    to: 20m
    util: [{at: 10m, value: 0.5}, {at: 15m, value: 0.9}]
  - {device: "gpu:2", pid: 31338, memory: 1GiB, from: 10m, to: 20m}
`
	n, clock := yamlNode(t, src)
	sc := n.Scenario()
	gpu1, gpu2 := device(t, n, 1), device(t, n, 2)
	const none = ^uint32(0)
	tests := []struct {
		at            time.Duration
		procs1        []uint32
		used1, used2  uint64
		util1         float64
		active1       []uint32 // PIDs in the last period's per-process samples
		procs2Running int
	}{
		{10*time.Minute - time.Second, []uint32{10000}, 10 << 30, 0, 0.3, []uint32{10000}, 0},
		{12 * time.Minute, []uint32{10000, 31337}, 12 << 30, 1 << 30, 0.8, []uint32{10000, 31337}, 1},
		{17 * time.Minute, []uint32{10000, 31337}, 12 << 30, 1 << 30, 1, []uint32{10000, 31337}, 1}, // 0.3+0.9, capped
		{20*time.Minute + time.Second, []uint32{10000}, 10 << 30, 0, 0.3, []uint32{10000}, 0},
	}
	for _, tt := range tests {
		clock.Set(sc.Start.Add(tt.at))
		got, ret := gpu1.GetComputeRunningProcesses()
		var pids []uint32
		for _, p := range got {
			pids = append(pids, p.Pid)
			wantMem := uint64(10 << 30)
			if p.Pid == 31337 {
				wantMem = 2 << 30
			}
			if p.UsedGpuMemory != wantMem || p.GpuInstanceId != none {
				t.Errorf("at %s: process %+v, want %d bytes and no MIG instance", tt.at, p, wantMem)
			}
		}
		if ret != nvml.SUCCESS || !reflect.DeepEqual(pids, tt.procs1) {
			t.Errorf("at %s: gpu:1 processes %v, %v; want %v", tt.at, pids, ret, tt.procs1)
		}
		if m, _ := gpu1.GetMemoryInfo_v2(); m.Used != tt.used1 {
			t.Errorf("at %s: gpu:1 uses %d bytes, want %d", tt.at, m.Used, tt.used1)
		}
		if m, _ := gpu2.GetMemoryInfo_v2(); m.Used != tt.used2 {
			t.Errorf("at %s: gpu:2 uses %d bytes, want %d", tt.at, m.Used, tt.used2)
		}
		if got := sc.GPUUtilAt(1, tt.at); !near(got, tt.util1, 1e-9) {
			t.Errorf("at %s: gpu:1 busy %g, want %g", tt.at, got, tt.util1)
		}
		last := stamp(n, int64(tt.at/SamplePeriod)-1)
		samples, _ := gpu1.GetProcessUtilization(last)
		var active []uint32
		for _, s := range samples {
			active = append(active, s.Pid)
		}
		if !reflect.DeepEqual(active, tt.active1) {
			t.Errorf("at %s: gpu:1 per-process samples for %v, want %v", tt.at, active, tt.active1)
		}
		// An idle unattributed process is listed, but never sampled.
		if got, _ := gpu2.GetComputeRunningProcesses(); len(got) != tt.procs2Running {
			t.Errorf("at %s: gpu:2 lists %d processes, want %d", tt.at, len(got), tt.procs2Running)
		}
		if s, ret := gpu2.GetProcessUtilization(0); ret != nvml.ERROR_NOT_FOUND {
			t.Errorf("at %s: gpu:2 per-process samples %v, %v; want ERROR_NOT_FOUND", tt.at, s, ret)
		}
	}
	if got := sc.UnattributedUtilAt(0, 16*time.Minute); got != 0.9 {
		t.Errorf("UnattributedUtilAt(0, 16m) = %g, want 0.9", got)
	}
	if got := sc.UnattributedUtilAt(0, 20*time.Minute); got != 0 {
		t.Errorf("UnattributedUtilAt(0, 20m) = %g, want 0", got)
	}
}

// TestSharedScenario plays test/scenarios/shared.yaml in the driver's
// default shape, one entry per process per read, and integrates each entry
// over the time since its process's previous entry: the busy pod gets its
// 70%, the idle one is never listed, and the process outside any pod is
// sampled on its own GPU only. What no entry reports is each process's last
// window before it ends, at most one refresh.
func TestSharedScenario(t *testing.T) {
	t.Parallel()
	sc, err := LoadScenario(filepath.Join("..", "..", "test", "scenarios", "shared.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	clock := NewVirtualClock(sc.Start)
	n, err := NewNode(sc, clock)
	if err != nil {
		t.Fatal(err)
	}
	busy := map[uint32]float64{} // busy seconds by PID
	prev := map[uint32]uint64{}  // each PID's previous stamp
	for i, p := range sc.Pods {
		prev[sc.PID(i, 0)] = uint64(sc.Start.Add(p.From).UnixMicro())
	}
	u := sc.Unattributed[0]
	prev[u.PID] = uint64(sc.Start.Add(u.From).UnixMicro())
	lastSeen := make([]uint64, sc.GPUs)
	for s := 1; s <= int(sc.Duration/time.Second)+2; s++ {
		clock.Set(sc.Start.Add(time.Duration(s) * time.Second))
		for g := 0; g < sc.GPUs; g++ {
			procs, ret := device(t, n, g).GetProcessUtilization(lastSeen[g])
			if ret != nvml.SUCCESS && ret != nvml.ERROR_NOT_FOUND {
				t.Fatalf("GetProcessUtilization(gpu:%d) at %ds = %v", g, s, ret)
			}
			seen := map[uint32]bool{}
			for _, p := range procs {
				if seen[p.Pid] {
					t.Fatalf("at %ds: gpu:%d lists process %d twice", s, g, p.Pid)
				}
				seen[p.Pid] = true
				if p.Pid == u.PID && g != u.GPU {
					t.Fatalf("process %d sampled on gpu:%d", p.Pid, g)
				}
				if p.TimeStamp <= prev[p.Pid] {
					t.Fatalf("at %ds: process %d stamped %d, not after its previous %d", s, p.Pid, p.TimeStamp, prev[p.Pid])
				}
				busy[p.Pid] += float64(p.TimeStamp-prev[p.Pid]) / 1e6 * float64(p.SmUtil) / 100
				prev[p.Pid] = p.TimeStamp
				lastSeen[g] = max(lastSeen[g], p.TimeStamp)
			}
		}
	}
	refresh := DefaultProcessRefresh.Seconds()
	truth := sc.Truth(0.05)
	if truth[0].IdleSeconds != 0 || truth[0].ActiveSeconds != 0.7*1800 || truth[1].IdleSeconds != 1800 {
		t.Errorf("shared.yaml truth %+v: want the busy pod never idle at 70%%, the idle one idle 1800 s", truth)
	}
	for _, c := range []struct {
		what      string
		got, want float64
	}{
		{"busy pod", busy[sc.PID(0, 0)], truth[0].ActiveSeconds},
		{"idle pod", busy[sc.PID(1, 0)], 0},
		{"unattributed process", busy[u.PID], 0.3 * 15 * 60},
	} {
		if c.got > c.want+1e-6 || c.got < c.want-refresh {
			t.Errorf("%s: %.3f busy seconds, want %.3f less at most one refresh", c.what, c.got, c.want)
		}
	}
}

func TestParseProcessesErrors(t *testing.T) {
	t.Parallel()
	// un is a valid unattributed list starting at line 5.
	const un = "unattributed:\n  - device: \"gpu:1\"\n    pid: 900\n"
	tests := []parseErrorCase{
		{"cgroup style unknown", head + "cgroup: systemd\n",
			`t.yaml:5: cgroup: "systemd" is not a cgroup style; want one of cgroupfs-containerd, private-namespace, systemd-containerd, systemd-crio, v1-cgroupfs-docker, v1-systemd-docker`},
		{"cgroup style empty", head + "cgroup: \"\"\n", "t.yaml:5: cgroup: must not be empty"},
		{"cgroup style a list", head + "cgroup: [v1]\n", "t.yaml:5: cgroup: want a value, got a list"},
		{"not a list", head + "unattributed: {device: gpu:1}\n", "t.yaml:5: unattributed: want a list, got a mapping"},
		{"unknown key", head + un + "    mem: 1GiB\n",
			"t.yaml:8: unattributed[0].mem: unknown key; want one of device, pid, memory, cmdline, from, to, util"},
		{"device missing", head + "unattributed:\n  - pid: 900\n", "t.yaml:6: unattributed[0].device: missing"},
		{"pid missing", head + "unattributed:\n  - device: \"gpu:1\"\n", "t.yaml:6: unattributed[0].pid: missing"},
		{"device a replica", head + "unattributed:\n  - device: \"gpu:1::0\"\n    pid: 900\n",
			"t.yaml:6: unattributed[0].device: gpu:1::0: a process runs on a whole GPU; want gpu:1"},
		{"device in MIG mode", head + "mig: {\"gpu:1\": [1g.10gb]}\nunattributed:\n  - device: \"gpu:1\"\n    pid: 900\n",
			"t.yaml:7: unattributed[0].device: gpu:1 is in MIG mode; the simulation has no processes outside its MIG devices"},
		{"device out of range", head + "unattributed:\n  - device: \"gpu:9\"\n    pid: 900\n",
			"t.yaml:6: unattributed[0].device: gpu:9 is not one of the node's 8 GPUs (gpu:0 to gpu:7)"},
		{"pid zero", head + "unattributed:\n  - device: \"gpu:1\"\n    pid: 0\n",
			"t.yaml:7: unattributed[0].pid: 0 is not a whole number from 1 to 4194304"},
		{"pid of a pod", head + pod + "    pid: 900\n" + un,
			"t.yaml:12: unattributed[0].pid: process 900 is also a process of pods[0]"},
		{"pid of a pod's second device", head + "pods:\n  - namespace: a\n    name: p\n    pid: 899\n    devices: [\"gpu:0\", \"gpu:2\"]\n" + un,
			"t.yaml:12: unattributed[0].pid: process 900 is also a process of pods[0]"},
		{"pid twice", head + un + "  - {device: \"gpu:2\", pid: 900}\n",
			"t.yaml:8: unattributed[1].pid: process 900 is also a process of unattributed[0]"},
		{"cmdline empty argument", head + un + "    cmdline: [python, \"\"]\n",
			"t.yaml:8: unattributed[0].cmdline[1]: must not be empty"},
		{"from not before to", head + un + "    from: 2h\n    to: 1h\n", "t.yaml:9: unattributed[0].to: 1h is not after from (2h)"},
		{"from at the end", head + un + "    from: 4h\n", "t.yaml:8: unattributed[0].to: 4h is not after from (4h)"},
		{"to after the end", head + un + "    to: 5h\n", "t.yaml:8: unattributed[0].to: 5h is after the scenario's end at 4h"},
		{"memory malformed", head + un + "    memory: lots\n",
			`t.yaml:8: unattributed[0].memory: "lots" is not a size such as 60GiB, 512MiB or 80GB`},
		{"memory above the GPU's", head + un + "    memory: 80GiB\n",
			"t.yaml:8: unattributed[0].memory: gpu:1 would need 80GiB at 0s with the pods and processes on it, more than its 79.51171875GiB"},
		{"memory with a pod that starts later", head + "pods:\n  - namespace: a\n    name: p\n    devices: [\"gpu:1\"]\n    from: 1h\n    memory: 70GiB\n" + un + "    memory: 10GiB\n",
			"t.yaml:14: unattributed[0].memory: gpu:1 would need 80GiB at 1h with the pods and processes on it, more than its 79.51171875GiB"},
		{"memory with another process", head + un + "    memory: 40GiB\n  - {device: \"gpu:1\", pid: 901, memory: 40GiB, from: 1h}\n",
			"t.yaml:8: unattributed[0].memory: gpu:1 would need 80GiB at 1h with the pods and processes on it, more than its 79.51171875GiB"},
		{"util above 1", head + un + "    util: [{at: 0s, value: 2}]\n",
			"t.yaml:8: unattributed[0].util[0].value: 2 is not a ratio between 0 and 1"},
	}
	checkParseErrors(t, tests)
}

func TestParseProcessesValues(t *testing.T) {
	t.Parallel()
	sc, err := ParseScenario([]byte(head+"unattributed:\n  - {device: \"gpu:3\", pid: 5}\n"), "v.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := []UnattributedProcess{{GPU: 3, PID: 5, To: 4 * time.Hour}}
	if sc.Cgroup != CgroupSystemdContainerd || !reflect.DeepEqual(sc.Unattributed, want) {
		t.Errorf("cgroup %q, unattributed %+v; want %q, %+v", sc.Cgroup, sc.Unattributed, CgroupSystemdContainerd, want)
	}
	sc, err = ParseScenario([]byte(procScenario+"cgroup: v1-systemd-docker\n"), "v.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want = []UnattributedProcess{{GPU: 3, PID: 777, Memory: 2 << 30, Cmdline: []string{"python3", "leak.py"}, From: 30 * time.Minute, To: 50 * time.Minute}}
	if sc.Cgroup != CgroupV1SystemdDocker || !reflect.DeepEqual(sc.Unattributed, want) {
		t.Errorf("cgroup %q, unattributed %+v; want %q, %+v", sc.Cgroup, sc.Unattributed, CgroupV1SystemdDocker, want)
	}
}

func TestRelativeCgroup(t *testing.T) {
	t.Parallel()
	tests := []struct{ from, to, want string }{
		{"/a/b/c/d", "/a/b/e/f", "/../../e/f"},
		{"/a/b/c/d", "/a/x", "/../../../x"},
		{"/a/b", "/a/b/c", "/c"},
		{"/a/b", "/x/y", "/../../x/y"},
	}
	for _, tt := range tests {
		if got := relativeCgroup(tt.from, tt.to); got != tt.want {
			t.Errorf("relativeCgroup(%q, %q) = %q, want %q", tt.from, tt.to, got, tt.want)
		}
	}
}

func TestPodIdentity(t *testing.T) {
	t.Parallel()
	sc, err := ParseScenario([]byte(`
start: 2026-12-01T08:00:00Z
duration: 1h
system: dgxh100
gpus: 2
pods:
  - namespace: inference
    name: vllm-llama-7c9d5b8f6-x2k8p
    owner: {kind: ReplicaSet, name: vllm-llama-7c9d5b8f6}
    labels: {team: platform, model: llama-3.1-8b, billing/cost-center: cc-42}
    devices: ["gpu:0"]
  - namespace: research
    name: train-0
    owner: {kind: Job, name: nightly-29123456}
    devices: ["gpu:1"]
`), "id.yaml")
	if err != nil {
		t.Fatal(err)
	}
	n, err := NewNode(sc, NewVirtualClock(sc.Start))
	if err != nil {
		t.Fatal(err)
	}
	n.SetIdentity(Identity{ExtraLabels: map[string]string{"team": "team", "cost_center": "billing/cost-center", "tier": "tier"}})
	for _, tt := range []struct {
		ns, name, kind, workload, model string
		extra                           map[string]string
	}{
		{"inference", "vllm-llama-7c9d5b8f6-x2k8p", "Deployment", "vllm-llama", "llama-3.1-8b",
			map[string]string{"team": "platform", "cost_center": "cc-42", "tier": ""}},
		{"research", "train-0", "CronJob", "nightly", "", map[string]string{"team": "", "cost_center": "", "tier": ""}},
	} {
		p, ok := n.Pod(tt.ns, tt.name)
		if !ok || p.WorkloadKind != tt.kind || p.Workload != tt.workload || p.Model != tt.model || !reflect.DeepEqual(p.ExtraLabels, tt.extra) {
			t.Errorf("Pod(%s/%s) = %s/%s model %q extra %v; want %s/%s %q %v", tt.ns, tt.name, p.WorkloadKind, p.Workload, p.Model, p.ExtraLabels, tt.kind, tt.workload, tt.model, tt.extra)
		}
	}
}

// staticScenario time-slices a GPU between a static pod, whose model is
// on its command line only, and a Deployment's pod.
const staticScenario = `start: 2026-12-01T08:00:00Z
duration: 1h
node: edge-node
system: dgxh100
gpus: 1
pods:
  - namespace: kube-system
    name: llm-server-edge-node
    container: server
    static: true
    cmdline: [vllm, serve, Qwen/Qwen2.5-7B-Instruct]
    resource: nvidia.com/gpu.shared
    devices: ["gpu:0::0"]
    memory: 20GiB
    util: [{at: 0s, value: 0.6}]
  - namespace: apps
    name: web-7c9d8f6b5d-abcde
    owner: {kind: ReplicaSet, name: web-7c9d8f6b5d}
    labels: {pod-template-hash: 7c9d8f6b5d}
    resource: nvidia.com/gpu.shared
    devices: ["gpu:0::1"]
    memory: 4GiB
`

// TestStaticPod: a static pod's processes carry its own UID in their
// cgroups (StaticPodUID), and the pod source knows it by its mirror (UID
// PodUID, owned by the node), which that UID finds too.
func TestStaticPod(t *testing.T) {
	t.Parallel()
	for _, style := range cgroupStyles {
		t.Run(style, func(t *testing.T) {
			t.Parallel()
			sc, err := ParseScenario([]byte("cgroup: "+style+"\n"+staticScenario), "s.yaml")
			if err != nil {
				t.Fatal(err)
			}
			if p := sc.Pods[0]; !p.Static || p.Owner != (Owner{Kind: "Node", Name: "edge-node"}) || sc.Pods[1].Static {
				t.Fatalf("pods = %+v; want the first static and owned by its node", sc.Pods)
			}
			n, err := NewNode(sc, NewVirtualClock(sc.Start.Add(10*time.Minute)))
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			if err := n.WriteProc(dir); err != nil {
				t.Fatal(err)
			}
			staticUID := StaticPodUID("edge-node", "kube-system", "llm-server-edge-node")
			mirrorUID := PodUID("edge-node", "kube-system", "llm-server-edge-node")
			if len(staticUID) != 32 || staticUID == mirrorUID {
				t.Fatalf("StaticPodUID = %q, PodUID = %q; want 32 hex digits, not the mirror's", staticUID, mirrorUID)
			}
			got, errs := hostproc.New(hostproc.Config{Root: dir}, nil).Resolve([]uint32{sc.PID(0, 0), sc.PID(1, 0)})
			if len(errs) != 0 {
				t.Fatalf("Resolve errors: %v", errs)
			}
			if uid := got[sc.PID(0, 0)].PodUID; uid != staticUID {
				t.Errorf("the static pod's process is in pod %q, want %q", uid, staticUID)
			}
			if uid := got[sc.PID(1, 0)].PodUID; uid != PodUID("edge-node", "apps", "web-7c9d8f6b5d-abcde") {
				t.Errorf("the Deployment's process is in pod %q, want its PodUID", uid)
			}
			byName, _ := n.Pod("kube-system", "llm-server-edge-node")
			if byName.UID != mirrorUID || byName.StaticUID != staticUID || byName.WorkloadKind != "Pod" || byName.Workload != "llm-server-edge-node" {
				t.Errorf("Pod = %+v; want the mirror (UID %s, static UID %s), its own workload", byName, mirrorUID, staticUID)
			}
			byUID, ok := n.PodByUID(got[sc.PID(0, 0)].PodUID)
			if !ok || !reflect.DeepEqual(byUID, byName) {
				t.Errorf("PodByUID(static UID) = %+v, %v; want %+v", byUID, ok, byName)
			}
			if web, _ := n.Pod("apps", "web-7c9d8f6b5d-abcde"); web.StaticUID != "" || web.Workload != "web" {
				t.Errorf("Deployment's pod = %+v; want no static UID, workload web", web)
			}
		})
	}
}

func TestParseStaticErrors(t *testing.T) {
	t.Parallel()
	checkParseErrors(t, []parseErrorCase{
		{"not a bool", head + pod + "    static: yes please\n", `t.yaml:9: pods[0].static: want true or false, got "yes please"`},
		{"with DRA", draHead + pod + "    static: true\n", "t.yaml:10: pods[0].static: a static pod cannot use resource claims (DRA)"},
		{"a list", head + pod + "    static: [true]\n", "t.yaml:9: pods[0].static: want true or false, got a list"},
		{"with an owner", head + pod + "    static: true\n    owner: {kind: Job, name: j}\n",
			"t.yaml:10: pods[0].owner: a static pod's owner is its node; give none"},
	})
}
