package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gpuxray/gpuxray/collector"
)

// Cgroup styles: how a scenario's /proc/<pid>/cgroup files are written, by
// cgroup version, cgroup driver and container runtime.
const (
	// CgroupSystemdContainerd is cgroup v2, the systemd driver and
	// containerd: …/kubepods-besteffort-pod<uid_>.slice/cri-containerd-<id>.scope.
	CgroupSystemdContainerd = "systemd-containerd"
	// CgroupCgroupfsContainerd is cgroup v2, the cgroupfs driver and
	// containerd: /kubepods/besteffort/pod<uid>/<id>.
	CgroupCgroupfsContainerd = "cgroupfs-containerd"
	// CgroupSystemdCRIO is cgroup v2, the systemd driver and CRI-O:
	// …/kubepods-besteffort-pod<uid_>.slice/crio-<id>.scope.
	CgroupSystemdCRIO = "systemd-crio"
	// CgroupV1CgroupfsDocker is cgroup v1 (twelve hierarchies), the cgroupfs
	// driver and Docker: N:controller:/kubepods/besteffort/pod<uid>/<id>.
	CgroupV1CgroupfsDocker = "v1-cgroupfs-docker"
	// CgroupV1SystemdDocker is cgroup v1, the systemd driver and Docker:
	// N:controller:…/kubepods-besteffort-pod<uid_>.slice/docker-<id>.scope.
	CgroupV1SystemdDocker = "v1-systemd-docker"
	// CgroupPrivateNamespace is systemd-containerd as an agent in its own
	// cgroup namespace sees it, relative to its own cgroup (a besteffort
	// pod's container): 0::/../../kubepods-besteffort-pod<uid_>.slice/….
	CgroupPrivateNamespace = "private-namespace"
)

// cgroupStyles are the styles a scenario's `cgroup` key accepts, sorted.
var cgroupStyles = []string{
	CgroupCgroupfsContainerd, CgroupPrivateNamespace, CgroupSystemdContainerd,
	CgroupSystemdCRIO, CgroupV1CgroupfsDocker, CgroupV1SystemdDocker,
}

// UnattributedProcess is a GPU process that belongs to no pod: work started
// outside Kubernetes, or a leak. Its busy ratio adds to the GPU's, its
// memory to the GPU's used memory, and NVML lists it like any process.
type UnattributedProcess struct {
	// GPU is the whole GPU the process runs on.
	GPU     int
	PID     uint32
	Cmdline []string
	// From and To bound the process's life: [From, To).
	From, To time.Duration
	Memory   uint64
	// Util is the busy ratio, as a pod's: 0 before the first step, and
	// counted only within [From, To).
	Util []Step
}

// processes checks the scenario's `cgroup` and `unattributed` keys and
// the processes against the pods'. It runs after crossCheck.
func (d *validator) processes(spec *ScenarioSpec, s *Scenario) error {
	s.Cgroup = CgroupSystemdContainerd
	if d.has("cgroup") {
		if !slices.Contains(cgroupStyles, spec.Cgroup) {
			return d.errf("cgroup", "%q is not a cgroup style; want one of %s", spec.Cgroup, strings.Join(cgroupStyles, ", "))
		}
		s.Cgroup = spec.Cgroup
	}
	usable := systems[s.System].memTotal() - reservedMemory
	for i, us := range spec.Unattributed {
		p := fmt.Sprintf("unattributed[%d]", i)
		if err := d.required(p, "device", "pid"); err != nil {
			return err
		}
		u := UnattributedProcess{To: s.Duration, Cmdline: us.Cmdline, Memory: uint64(us.Memory)}
		dev, err := d.gpu(p+".device", us.Device.DeviceSpec, s.GPUs)
		if err != nil {
			return err
		}
		if dev.Replicated {
			return d.errf(p+".device", "%s: a process runs on a whole GPU; want gpu:%d", dev, dev.GPU)
		}
		if _, on := s.MIG[dev.GPU]; on {
			return d.errf(p+".device", "%s is in MIG mode; the simulation has no processes outside its MIG devices", dev)
		}
		u.GPU = dev.GPU
		pid, err := d.whole(p+".pid", us.PID, 1, 4194304)
		if err != nil {
			return err
		}
		u.PID = uint32(pid)
		if err := d.window(p, us.From, us.To, s.Duration, &u.From, &u.To); err != nil {
			return err
		}
		if us.Util != nil {
			if u.Util, err = d.steps(p+".util", us.Util, u.From, s.Duration); err != nil {
				return err
			}
		}
		s.Unattributed = append(s.Unattributed, u)
	}

	// Host PIDs are unique for the whole scenario, as the tree WriteProc
	// writes holds every process at once.
	owner := map[uint32]string{}
	for i, p := range s.Pods {
		for k := range p.Devices {
			owner[s.PID(i, k)] = fmt.Sprintf("pods[%d]", i)
		}
	}
	for i, u := range s.Unattributed {
		if o, dup := owner[u.PID]; dup {
			return d.errf(fmt.Sprintf("unattributed[%d].pid", i), "process %d is also a process of %s", u.PID, o)
		}
		owner[u.PID] = fmt.Sprintf("unattributed[%d]", i)
	}

	// Memory peaks when a process starts: check each start on the GPU while
	// the process lives.
	for i, u := range s.Unattributed {
		starts := []time.Duration{u.From}
		for _, p := range s.Pods {
			if holds(p, u.GPU) && u.From < p.From && p.From < u.To {
				starts = append(starts, p.From)
			}
		}
		for _, o := range s.Unattributed {
			if o.GPU == u.GPU && u.From < o.From && o.From < u.To {
				starts = append(starts, o.From)
			}
		}
		for _, t := range starts {
			var sum uint64
			for _, p := range s.Pods {
				if holds(p, u.GPU) && p.From <= t && t < p.To {
					sum += p.Memory
				}
			}
			for _, o := range s.Unattributed {
				if o.GPU == u.GPU && o.From <= t && t < o.To {
					sum += o.Memory
				}
			}
			if sum > usable {
				return d.errf(fmt.Sprintf("unattributed[%d].memory", i),
					"gpu:%d would need %s at %s with the pods and processes on it, more than its %s",
					u.GPU, fmtBytes(sum), fmtDur(t), fmtBytes(usable))
			}
		}
	}
	return nil
}

// unattributedSeries is unattributed process i's busy ratio, 0 outside [From, To).
func (s *Scenario) unattributedSeries(i int) series {
	u := s.Unattributed[i]
	raw := stepSeries(u.Util)
	return combine([]time.Duration{u.From, u.To}, []series{raw}, func(t time.Duration) float64 {
		if t < u.From || t >= u.To {
			return 0
		}
		return raw.value(t)
	})
}

// withUnattributed adds the unattributed processes on gpu to the series a
// GPU's busy ratio sums.
func (s *Scenario) withUnattributed(gpu int, on []series) []series {
	for i, u := range s.Unattributed {
		if u.GPU == gpu {
			on = append(on, s.unattributedSeries(i))
		}
	}
	return on
}

// UnattributedUtilAt is unattributed process i's busy ratio at scenario time
// t: 0 outside [From, To).
func (s *Scenario) UnattributedUtilAt(i int, t time.Duration) float64 {
	return s.unattributedSeries(i).value(t)
}

// addUnattributed gives the simulated driver the unattributed processes:
// their busy ratios follow the pods' in n.pods, which proc.pod indexes.
func (n *Node) addUnattributed() {
	for i, u := range n.sc.Unattributed {
		n.pods = append(n.pods, n.sc.unattributedSeries(i))
		n.gpus[u.GPU].procs = append(n.gpus[u.GPU].procs,
			proc{pid: u.PID, pod: len(n.sc.Pods) + i, from: u.From, to: u.To, memory: u.Memory})
	}
}

// Pod identity: stable per node, namespace and name, so golden files and a
// replayed run agree with the live one.

// PodUID is the simulated UID of pod namespace/name on node: a name-based
// (version 5 style) UUID.
func PodUID(node, namespace, name string) string {
	h := sha256.Sum256(fmt.Appendf(nil, "gpuxray-sim/%s/pod/%s/%s", node, namespace, name))
	h[6] = h[6]&0x0f | 0x50
	h[8] = h[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

// StaticPodUID is the simulated UID of static pod namespace/name on node,
// the one its cgroups carry and its mirror's kubernetes.io/config.mirror
// annotation names: 32 hex digits, as the kubelet's hash of a manifest.
func StaticPodUID(node, namespace, name string) string {
	h := sha256.Sum256(fmt.Appendf(nil, "gpuxray-sim/%s/static-pod/%s/%s", node, namespace, name))
	return hex.EncodeToString(h[:16])
}

// cgroupUID is the UID in the cgroup paths of scenario pod p.
func cgroupUID(node string, p Pod) string {
	if p.Static {
		return StaticPodUID(node, p.Namespace, p.Name)
	}
	return PodUID(node, p.Namespace, p.Name)
}

// ContainerID is the simulated runtime ID (64 hex digits) of a pod's container.
func ContainerID(node, namespace, name, container string) string {
	h := sha256.Sum256(fmt.Appendf(nil, "gpuxray-sim/%s/pod/%s/%s/container/%s", node, namespace, name, container))
	return hex.EncodeToString(h[:])
}

// Pod returns what a pod informer knows of scenario pod namespace/name at the
// clock's now: its UID, its phase (Pending before from, Running within
// [from, to), Succeeded after), its container's ID, and its workload, model
// and extra labels resolved from its owner and labels as the pod informer
// does (see SetIdentity).
func (n *Node) Pod(namespace, name string) (collector.Pod, bool) {
	if i, ok := n.ids.byName[podKey{namespace, name}]; ok {
		return n.pod(i), true
	}
	if p, ok := n.reservationPod(namespace, name); ok {
		return p, true
	}
	if f, ok := n.ghost(namespace, name); ok {
		return collector.Pod{UID: PodUID(n.sc.Node, namespace, name), Namespace: namespace, Name: name, Phase: f.Phase}, true
	}
	return collector.Pod{}, false
}

// PodByUID returns the scenario pod whose UID is uid, as Pod does; a static
// pod's StaticPodUID finds its mirror, as with the pod informer.
func (n *Node) PodByUID(uid string) (collector.Pod, bool) {
	if i, ok := n.ids.byUID[uid]; ok {
		return n.pod(i), true
	}
	return collector.Pod{}, false
}

type podKey struct{ namespace, name string }

// podIDs are the pods' UIDs and container IDs, derived once: the agent asks
// for them every poll, and a churning scenario has thousands of pods.
type podIDs struct {
	uid, cid []string
	// static is a static pod's StaticPodUID, empty for other pods.
	static []string
	byName map[podKey]int
	byUID  map[string]int
}

func newPodIDs(sc *Scenario) podIDs {
	ids := podIDs{
		uid:    make([]string, len(sc.Pods)),
		cid:    make([]string, len(sc.Pods)),
		static: make([]string, len(sc.Pods)),
		byName: make(map[podKey]int, len(sc.Pods)),
		byUID:  make(map[string]int, len(sc.Pods)),
	}
	for i, p := range sc.Pods {
		ids.uid[i] = PodUID(sc.Node, p.Namespace, p.Name)
		ids.cid[i] = ContainerID(sc.Node, p.Namespace, p.Name, p.Container)
		ids.byName[podKey{p.Namespace, p.Name}] = i
		ids.byUID[ids.uid[i]] = i
		if p.Static {
			ids.static[i] = StaticPodUID(sc.Node, p.Namespace, p.Name)
			ids.byUID[ids.static[i]] = i
		}
	}
	return ids
}

func (n *Node) pod(i int) collector.Pod {
	p := n.sc.Pods[i]
	t, _ := n.now()
	phase := "Running"
	switch {
	case t < p.From:
		phase = "Pending"
	case t >= p.To:
		phase = "Succeeded"
	}
	pod := collector.Pod{
		UID:          n.ids.uid[i],
		StaticUID:    n.ids.static[i],
		Namespace:    p.Namespace,
		Name:         p.Name,
		Phase:        phase,
		ContainerIDs: map[string]string{p.Container: n.ids.cid[i]},
		Claims:       n.podClaims(i),
	}
	n.identify(i, &pod)
	return pod
}

// The simulated /proc.

// bootUptime is how long the simulated node has been up at the scenario
// start, so that process start times are far from zero as on a real node.
const bootUptime = time.Hour

// clockTicks is USER_HZ, the unit of a stat file's start time.
const clockTicks = 100

// WriteProc writes the simulated node's GPU processes as a proc filesystem
// under dir, for collector/proc to read: <dir>/<pid>/{stat,cgroup,cmdline}
// for every process of every pod and every unattributed process. The tree
// holds every process of the scenario, whether running at the clock's now
// or not: a scenario's PIDs are unique, and the reader only asks for the
// PIDs NVML lists, so one static tree written at start-up serves the whole
// run. The cgroup files follow the scenario's cgroup style; a pod's QoS
// class is besteffort, burstable or guaranteed by its index modulo 3, so
// every style shows all three.
func (n *Node) WriteProc(dir string) error {
	type entry struct {
		pid, ppid uint32
		comm      string
		from      time.Duration
		cgroup    string
		cmdline   []string
	}
	var entries []entry
	for i, p := range n.sc.Pods {
		uid := cgroupUID(n.sc.Node, p)
		cid := ContainerID(n.sc.Node, p.Namespace, p.Name, p.Container)
		path := podCgroupPath(n.sc.Cgroup, qosClasses[i%len(qosClasses)], uid, cid)
		ppid := uint32(1)
		if len(p.ParentCmdline) > 0 {
			ppid = ParentPID(i)
			entries = append(entries, entry{pid: ppid, ppid: 1, comm: comm(p.ParentCmdline, p.Container), from: p.From,
				cgroup: cgroupFile(n.sc.Cgroup, path), cmdline: p.ParentCmdline})
		}
		for k := range p.Devices {
			entries = append(entries, entry{pid: n.sc.PID(i, k), ppid: ppid, comm: comm(p.Cmdline, p.Container), from: p.From,
				cgroup: cgroupFile(n.sc.Cgroup, path), cmdline: p.Cmdline})
		}
	}
	for _, u := range n.sc.Unattributed {
		h := sha256.Sum256(fmt.Appendf(nil, "gpuxray-sim/%s/process/%d", n.sc.Node, u.PID))
		path := hostCgroupPath(n.sc.Cgroup, hex.EncodeToString(h[:]))
		entries = append(entries, entry{pid: u.PID, ppid: 1, comm: comm(u.Cmdline, "unattributed"), from: u.From,
			cgroup: cgroupFile(n.sc.Cgroup, path), cmdline: u.Cmdline})
	}
	sort.Slice(entries, func(a, b int) bool { return entries[a].pid < entries[b].pid })
	for _, e := range entries {
		pdir := filepath.Join(dir, strconv.FormatUint(uint64(e.pid), 10))
		if err := os.MkdirAll(pdir, 0o755); err != nil {
			return fmt.Errorf("sim: writing /proc: %w", err)
		}
		start := uint64((bootUptime + e.from) / (time.Second / clockTicks))
		files := map[string]string{
			"stat":    statLine(e.pid, e.ppid, e.comm, start),
			"cgroup":  e.cgroup,
			"cmdline": cmdlineFile(e.cmdline),
		}
		for name, content := range files {
			if err := os.WriteFile(filepath.Join(pdir, name), []byte(content), 0o644); err != nil {
				return fmt.Errorf("sim: writing /proc: %w", err)
			}
		}
	}
	return nil
}

var qosClasses = []string{"besteffort", "burstable", "guaranteed"}

// podCgroupPath is the cgroup of a pod's container in style, for QoS class
// qos; the guaranteed class has no level of its own.
func podCgroupPath(style, qos, uid, cid string) string {
	switch style {
	case CgroupCgroupfsContainerd, CgroupV1CgroupfsDocker:
		if qos == "guaranteed" {
			return "/kubepods/pod" + uid + "/" + cid
		}
		return "/kubepods/" + qos + "/pod" + uid + "/" + cid
	}
	scope := "cri-containerd-" + cid + ".scope"
	switch style {
	case CgroupSystemdCRIO:
		scope = "crio-" + cid + ".scope"
	case CgroupV1SystemdDocker:
		scope = "docker-" + cid + ".scope"
	}
	u := strings.ReplaceAll(uid, "-", "_")
	path := "/kubepods.slice/kubepods-pod" + u + ".slice/" + scope
	if qos != "guaranteed" {
		path = "/kubepods.slice/kubepods-" + qos + ".slice/kubepods-" + qos + "-pod" + u + ".slice/" + scope
	}
	if style == CgroupPrivateNamespace {
		return relativeCgroup(agentCgroup, path)
	}
	return path
}

// hostCgroupPath is the cgroup of a container started by hand on the host
// with Docker, outside Kubernetes.
func hostCgroupPath(style, id string) string {
	switch style {
	case CgroupCgroupfsContainerd, CgroupV1CgroupfsDocker:
		return "/docker/" + id
	case CgroupPrivateNamespace:
		return relativeCgroup(agentCgroup, "/system.slice/docker-"+id+".scope")
	}
	return "/system.slice/docker-" + id + ".scope"
}

// agentCgroup is where the private-namespace style puts the agent itself:
// the container of a besteffort pod, whose cgroup is its namespace's root.
var agentCgroup = "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" +
	strings.ReplaceAll(PodUID("agent", "gpuxray", "gpuxray-agent"), "-", "_") +
	".slice/cri-containerd-" + ContainerID("agent", "gpuxray", "gpuxray-agent", "agent") + ".scope"

// relativeCgroup is to as seen from a cgroup namespace rooted at from, as
// the kernel writes it: "/" then ".." for each level up from from.
func relativeCgroup(from, to string) string {
	f := strings.Split(strings.Trim(from, "/"), "/")
	t := strings.Split(strings.Trim(to, "/"), "/")
	i := 0
	for i < len(f) && i < len(t) && f[i] == t[i] {
		i++
	}
	parts := make([]string, 0, len(f)-i+len(t)-i)
	for range f[i:] {
		parts = append(parts, "..")
	}
	return "/" + strings.Join(append(parts, t[i:]...), "/")
}

// v1Controllers are the hierarchies of a cgroup v1 host, highest ID first,
// as /proc/<pid>/cgroup lists them.
var v1Controllers = []string{"pids", "hugetlb", "net_cls,net_prio", "perf_event", "memory", "devices",
	"cpuset", "blkio", "freezer", "cpu,cpuacct", "rdma", "name=systemd"}

// cgroupFile is the content of /proc/<pid>/cgroup for a process in path.
func cgroupFile(style, path string) string {
	if style != CgroupV1CgroupfsDocker && style != CgroupV1SystemdDocker {
		return "0::" + path + "\n"
	}
	var b strings.Builder
	for i, c := range v1Controllers {
		p := path
		if c == "rdma" {
			p = "/" // runtimes leave rdma at the root
		}
		fmt.Fprintf(&b, "%d:%s:%s\n", len(v1Controllers)-i, c, p)
	}
	b.WriteString("0::/\n") // the empty unified hierarchy of a hybrid host
	return b.String()
}

// comm is the kernel's name of a process: its executable's base name, cut
// to 15 bytes; fallback when there is no command line.
func comm(cmdline []string, fallback string) string {
	c := fallback
	if len(cmdline) > 0 {
		c = filepath.Base(cmdline[0])
	}
	if len(c) > 15 {
		c = c[:15]
	}
	return c
}

// ParentPID is the host PID of the parent process of pod's GPU processes,
// for a pod with a ParentCmdline: above the PIDs scenarios give.
func ParentPID(pod int) uint32 { return 4_000_000 + uint32(pod) }

// statLine is a /proc/<pid>/stat line: a sleeping process of parent ppid,
// with starttime (field 22) in clock ticks since boot.
func statLine(pid, ppid uint32, comm string, start uint64) string {
	// Fields 3 to 21: state, ppid, pgrp, session, tty_nr, tpgid, flags, the
	// four fault counters, the four CPU times, priority, nice, num_threads,
	// itrealvalue.
	return fmt.Sprintf("%d (%s) S %d %d %d 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 %d "+
		"0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n", pid, comm, ppid, pid, pid, start)
}

// cmdlineFile is /proc/<pid>/cmdline: each argument NUL-terminated.
func cmdlineFile(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return strings.Join(args, "\x00") + "\x00"
}
