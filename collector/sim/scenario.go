package sim

import (
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Resource names a simulated pod may request.
const (
	ResourceGPU       = "nvidia.com/gpu"
	ResourceGPUShared = "nvidia.com/gpu.shared"
)

// Scenario is one simulated node over time, as a scenario file describes it.
// Times inside a scenario (from, to, at) are offsets from Start.
type Scenario struct {
	// Name is the file name errors are reported against.
	Name     string
	Start    time.Time
	Duration time.Duration
	Node     string
	// System is one of dgxa100, dgxh100, dgxh200, dgxb200.
	System string
	GPUs   int
	// MIG is the MIG layout of each GPU in MIG mode: the profile of each
	// MIG device index ("3g.40gb"), "" for an index with no device. A GPU
	// in dynamic MIG mode has an empty layout.
	MIG map[int][]string
	// MIGDynamic are the GPUs in dynamic MIG mode: the DRA driver creates
	// a MIG device for each claim that asks for one and destroys it after.
	MIGDynamic map[int]bool
	// Allocation is how the node's pods get their GPUs unless a pod says
	// otherwise: AllocationDevicePlugin (the default) or AllocationDRA.
	Allocation string
	NodeAllocation
	Pods        []Pod
	Unallocated []UnallocatedStep

	// Cgroup is the style of the simulated /proc's cgroup files, one of
	// the Cgroup* constants; CgroupSystemdContainerd when the file names none.
	Cgroup string
	// Unattributed are GPU processes that belong to no pod.
	Unattributed []UnattributedProcess
	// Faults are the failures injected into the simulated driver and
	// kubelet, in file order.
	Faults []Fault
	// Traps are the driver behaviours the `driver:` keys ask for.
	Traps DriverTraps

	// LeadIn is how much of the scenario `agent --simulate` plays at once,
	// as fast as it can poll, before it follows the wall clock: the live
	// agent starts with the counts, idle streaks and pod states of time
	// LeadIn. Replay plays the whole scenario either way.
	LeadIn time.Duration
	// Unscheduled are pods that request GPUs and that no node has taken;
	// only KubeState shows them.
	Unscheduled []UnscheduledPod
	// PriorityClasses are the cluster's PriorityClasses, name → value, as
	// the agent exports them (gpuxray_priority_class_value).
	PriorityClasses map[string]int32
	// Kueue are the cluster's Kueue ClusterQueues, whose metrics KubeState
	// serves with kube-state-metrics'.
	Kueue []ClusterQueue
	// Driver is how the simulated driver answers where real drivers differ
	// or nvml.h leaves it open (the `driver` key).
	Driver Driver
}

// Pod is one simulated pod with a single container holding GPUs.
type Pod struct {
	Namespace string
	Name      string
	Container string
	Owner     Owner
	Labels    map[string]string
	Cmdline   []string
	// ParentCmdline, when set, is the command line of the parent of the
	// pod's GPU processes, in the same container: a server whose workers
	// title themselves (vLLM's VLLM::EngineCore). Its PID is ParentPID.
	ParentCmdline []string
	// Resource is the extended resource the devices were allocated as by
	// the device plugin; empty for a DRA pod.
	Resource string
	// Allocation is how the pod got its devices: AllocationDevicePlugin or
	// AllocationDRA.
	Allocation string
	// Claim names a DRA pod's ResourceClaim in its namespace (the pod's
	// name unless the file names one); pods naming the same claim share
	// its devices. Empty for a device-plugin pod.
	Claim string
	// PID is the host PID of the pod's process on its first device; the
	// process on Devices[i] is PID+i. Zero means the default, 10000+100×index.
	PID     uint32
	Devices []DeviceSpec
	// From and To bound the allocation: [From, To).
	From, To time.Duration
	// Memory is the framebuffer the pod's process uses on each device, in bytes.
	Memory uint64
	// Util is the busy ratio: 0 before the first step, each value until the
	// next. Step times are scenario times, like From and To.
	Util []Step
	// PriorityClass is the pod's priority class, one of the scenario's
	// PriorityClasses; empty for none. Its Kueue queues are labels.
	PriorityClass string
	PodAllocation
	// Static marks a static pod, which the kubelet runs from a manifest:
	// the API server knows it by its mirror pod, owned by the node, whose
	// UID (PodUID) is not the UID its cgroups carry (StaticPodUID); the
	// mirror's kubernetes.io/config.mirror annotation names the latter.
	Static bool
	// SMFraction is the share of the GPU's SMs the pod's kernels occupy
	// while they run (1 unless the file says): GPM's SM_UTIL is the busy
	// ratio times it, GRAPHICS_UTIL and the utilization samples the busy
	// ratio. A decode server keeps kernels running on a few SMs.
	SMFraction float64
	// Engine is the inference server the pod runs, whose own metrics the
	// simulation serves (engines.go); nil for none.
	Engine *Engine
}

// Owner is the controller that owns a pod (ReplicaSet, Job, StatefulSet, …).
type Owner struct {
	Kind string `yaml:"kind"`
	Name string `yaml:"name"`
}

// DeviceSpec is a scenario device: "gpu:N" (a whole GPU), "gpu:N::R"
// (time-slicing replica R of GPU N), "mig:N/S" (MIG device S of GPU N) or
// "mig:N:<profile>" (a MIG device of that profile that the DRA driver
// creates on GPU N, in dynamic MIG mode, for as long as its claim lasts).
type DeviceSpec struct {
	GPU        int
	Replicated bool
	Replica    int
	MIG        bool
	// MIGSlot is the MIG device's index in its GPU's layout.
	MIGSlot int
	// Dynamic marks a dynamic MIG device (MIG is set too), of Profile.
	Dynamic bool
	Profile string
}

// String returns the scenario spelling, "gpu:N", "gpu:N::R", "mig:N/S" or
// "mig:N:<profile>".
func (d DeviceSpec) String() string {
	if d.Dynamic {
		return fmt.Sprintf("mig:%d:%s", d.GPU, d.Profile)
	}
	if d.MIG {
		return fmt.Sprintf("mig:%d/%d", d.GPU, d.MIGSlot)
	}
	if d.Replicated {
		return fmt.Sprintf("gpu:%d::%d", d.GPU, d.Replica)
	}
	return fmt.Sprintf("gpu:%d", d.GPU)
}

// Step is a busy ratio (0..1) that holds from At until the next step; with
// Duty, a duty cycle that starts at At and repeats until the next step.
type Step struct {
	At    time.Duration
	Value float64
	// Duty, when set, replaces Value.
	Duty *Duty
}

// Duty is a duty cycle, as bursty inference traffic loads a GPU: Value for
// the first Busy of every Period, Idle for the rest of it.
type Duty struct {
	Period, Busy time.Duration
	Value, Idle  float64
}

// minDutyPeriod keeps a duty cycle at a scale NVML's sampling can resolve
// at all and the simulation can expand where two cycles overlap.
const minDutyPeriod = 10 * time.Millisecond

// UnallocatedStep is activity on a GPU that no pod holds (work outside
// Kubernetes, or a leak), as a step of that GPU's own step list.
type UnallocatedStep struct {
	GPU   int
	At    time.Duration
	Value float64
}

// ScenarioError is a problem with a scenario file, located by line and by
// the path of the field, so one sentence says what to fix where.
type ScenarioError struct {
	File string
	// Line is 1-based; 0 when the problem has no line (an empty file).
	Line int
	// Field is a path such as "pods[1].util[2].value"; empty for the file.
	Field string
	Msg   string
}

func (e *ScenarioError) Error() string {
	switch {
	case e.Line > 0 && e.Field != "":
		return fmt.Sprintf("%s:%d: %s: %s", e.File, e.Line, e.Field, e.Msg)
	case e.Line > 0:
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	default:
		return fmt.Sprintf("%s: %s", e.File, e.Msg)
	}
}

//go:embed demo.yaml
var demoYAML []byte

// Demo returns the embedded demo node: a DGX H100 with a training job, an
// idle notebook, a bursty inference server, two time-sliced pods and a GPU
// busy outside Kubernetes. Each call returns a fresh copy.
func Demo() *Scenario {
	s, err := ParseScenario(demoYAML, "demo.yaml")
	if err != nil {
		panic("sim: embedded demo scenario is invalid: " + err.Error())
	}
	return s
}

// LoadScenario reads and parses a scenario file.
func LoadScenario(path string) (*Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading scenario: %w", err)
	}
	return ParseScenario(data, filepath.Base(path))
}

// Bounds of a scenario beyond its file's size.
const (
	// MaxDuration bounds a scenario's duration: 90 days, more than a
	// capacity report reads, and a replay of it at 1 s polls takes hours.
	MaxDuration = 90 * 24 * time.Hour
	// MaxLeadIn bounds lead_in, which `agent --simulate` plays before it
	// serves: a day of it takes about half a minute.
	MaxLeadIn = 24 * time.Hour
	// MaxAliasNodes bounds the YAML nodes that aliases add to a scenario
	// once expanded: a 2 MB file of nested aliases expanded past 4 GB.
	MaxAliasNodes = 100_000
)

// whole checks that w, the value of path, is within [lo, hi].
func (d *validator) whole(path string, w Whole, lo, hi int64) (int64, error) {
	if int64(w) < lo || int64(w) > hi {
		return 0, d.errf(path, "%d is not a whole number from %d to %d", w, lo, hi)
	}
	return int64(w), nil
}

// offset is a scenario time: a duration within [0, total].
func (d *validator) offset(path string, t Duration, total time.Duration) (time.Duration, error) {
	if time.Duration(t) > total {
		return 0, d.errf(path, "%s is after the scenario's end at %s", fmtDur(time.Duration(t)), fmtDur(total))
	}
	return time.Duration(t), nil
}

// window reads the optional from and to of the mapping at p into *from and
// *to (left as they are when absent: the caller's defaults), both within
// the scenario's total, and checks that to is after from.
func (d *validator) window(p string, sf, st Duration, total time.Duration, from, to *time.Duration) error {
	var err error
	if d.has(p + ".from") {
		if *from, err = d.offset(p+".from", sf, total); err != nil {
			return err
		}
	}
	if d.has(p + ".to") {
		if *to, err = d.offset(p+".to", st, total); err != nil {
			return err
		}
	}
	if *from >= *to {
		return d.errAt(d.first(p+".to", p+".from"), p+".to", "%s is not after from (%s)", fmtDur(*to), fmtDur(*from))
	}
	return nil
}

// gpu checks that a device names one of the node's gpus GPUs.
func (d *validator) gpu(path string, spec DeviceSpec, gpus int) (DeviceSpec, error) {
	if spec.GPU >= gpus {
		return spec, d.errf(path, "%s is not one of the node's %d GPUs (gpu:0 to gpu:%d)", spec, gpus, gpus-1)
	}
	return spec, nil
}

// gpuKey reads a mapping key that names a GPU, gpu:N.
func (d *validator) gpuKey(path, key string, gpus int) (DeviceSpec, error) {
	spec, msg := parseDevice(key, false)
	if msg != "" {
		return spec, d.errf(path, "%s", msg)
	}
	return d.gpu(path, spec, gpus)
}

// oneOf checks that v, the value of path, is one of allowed.
func (d *validator) oneOf(path, v string, allowed ...string) error {
	if !slices.Contains(allowed, v) {
		return d.errf(path, "%q is not one of %s", v, strings.Join(allowed, ", "))
	}
	return nil
}

// steps checks a util list: strictly ascending times within the scenario;
// the {duty: …} form is one duty step at from.
func (d *validator) steps(path string, st *Steps, from, total time.Duration) ([]Step, error) {
	if st.Duty != nil {
		dc, err := d.duty(path+".duty", st.Duty)
		return []Step{{At: from, Duty: dc}}, err
	}
	out := make([]Step, 0, len(st.List))
	for i, it := range st.List {
		p := fmt.Sprintf("%s[%d]", path, i)
		switch {
		case it.Duty != nil && it.Value != nil:
			return nil, d.errf(p+".value", "give value or duty, not both")
		case !d.has(p + ".at"):
			return nil, d.errf(p+".at", "missing")
		case it.Duty == nil && it.Value == nil:
			return nil, d.errf(p+".value", "missing")
		}
		at, err := d.offset(p+".at", it.At, total)
		if err != nil {
			return nil, err
		}
		s := Step{At: at}
		if it.Duty != nil {
			if s.Duty, err = d.duty(p+".duty", it.Duty); err != nil {
				return nil, err
			}
		} else {
			s.Value = float64(*it.Value)
		}
		if i > 0 && s.At <= out[i-1].At {
			return nil, d.errf(p+".at", "%s does not come after the previous step's %s", fmtDur(s.At), fmtDur(out[i-1].At))
		}
		out = append(out, s)
	}
	return out, nil
}

// duty checks {period, busy, value, idle}: busy of every period at value,
// the rest at idle (default 0).
func (d *validator) duty(path string, ds *DutySpec) (*Duty, error) {
	for _, k := range []string{"period", "busy", "value"} {
		if !d.has(path + "." + k) {
			return nil, d.errf(path+"."+k, "missing")
		}
	}
	dc := &Duty{Period: time.Duration(ds.Period), Busy: time.Duration(ds.Busy), Value: float64(ds.Value), Idle: float64(ds.Idle)}
	if dc.Period < minDutyPeriod {
		return nil, d.errf(path+".period", "%s is shorter than %s", fmtDur(dc.Period), fmtDur(minDutyPeriod))
	}
	if dc.Busy == 0 || dc.Busy > dc.Period {
		return nil, d.errf(path+".busy", "%s is not within the period (more than 0s, at most %s)", fmtDur(dc.Busy), fmtDur(dc.Period))
	}
	return dc, nil
}

// required checks that the mapping at p gives each of keys.
func (d *validator) required(p string, keys ...string) error {
	for _, k := range keys {
		if !d.has(join(p, k)) {
			return d.errf(join(p, k), "missing")
		}
	}
	return nil
}

// build validates the decoded file, in one pass that follows the file's
// order, and returns the Scenario it describes.
func (d *validator) build(spec *ScenarioSpec) (*Scenario, error) {
	if err := d.required("", "start", "duration", "system", "gpus"); err != nil {
		return nil, err
	}
	s := &Scenario{Node: "sim-node", Start: time.Time(spec.Start), Duration: time.Duration(spec.Duration), LeadIn: time.Duration(spec.LeadIn)}
	if s.Start.Before(time.Unix(0, 0)) {
		// NVML stamps samples in microseconds since 1970, unsigned: a
		// run before it would have no sample, and count nothing.
		return nil, d.errf("start", "%s is before 1970, where NVML's sample stamps begin", d.byPath["start"].Value)
	}
	if s.Duration == 0 {
		return nil, d.errf("duration", "must be longer than 0s")
	}
	if s.Duration > MaxDuration {
		return nil, d.errf("duration", "%s is longer than the %s a scenario may last", fmtDur(s.Duration), fmtDur(MaxDuration))
	}
	if d.has("lead_in") {
		if s.LeadIn >= s.Duration {
			return nil, d.errf("lead_in", "%s is not before the scenario's end at %s", fmtDur(s.LeadIn), fmtDur(s.Duration))
		}
		if s.LeadIn > MaxLeadIn {
			return nil, d.errf("lead_in", "%s is longer than the %s played before the agent serves", fmtDur(s.LeadIn), fmtDur(MaxLeadIn))
		}
	}
	if d.has("node") {
		s.Node = spec.Node
	}
	s.System = spec.System
	if _, ok := systems[s.System]; !ok {
		return nil, d.errf("system", "%q is not a known system; want one of %s", s.System, strings.Join(systemNames(), ", "))
	}
	gpus, err := d.whole("gpus", spec.GPUs, 1, 8)
	if err != nil {
		return nil, err
	}
	s.GPUs = int(gpus)
	s.Allocation = AllocationDevicePlugin
	if d.has("allocation") {
		if s.Allocation, err = d.allocation("allocation", spec.Allocation); err != nil {
			return nil, err
		}
	}
	steps := []func(*ScenarioSpec, *Scenario) error{
		d.nodeAllocation, d.mig, d.driverShapes, d.priorityClasses, d.kueue, d.pods, d.unallocated,
		d.draCheck, d.crossCheck, d.allocationCheck, d.planCheck, d.processes, d.driverTraps, d.runtimeTraps,
		d.faults, d.unscheduled,
	}
	for _, step := range steps {
		if err := step(spec, s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// pods checks the pods and fills in their defaults.
func (d *validator) pods(spec *ScenarioSpec, s *Scenario) error {
	seen := map[string]int{}
	sys := systems[s.System]
	for i := range spec.Pods {
		ps := &spec.Pods[i]
		p := fmt.Sprintf("pods[%d]", i)
		if err := d.required(p, "namespace", "name", "devices"); err != nil {
			return err
		}
		pod := Pod{Namespace: ps.Namespace, Name: ps.Name, Container: "main", Resource: ResourceGPU, To: s.Duration, SMFraction: 1,
			Labels: ps.Labels, Cmdline: ps.Cmdline, ParentCmdline: ps.ParentCmdline, Static: bool(ps.Static)}
		key := pod.Namespace + "/" + pod.Name
		if j, dup := seen[key]; dup {
			return d.errf(p+".name", "%s is already pods[%d]", key, j)
		}
		seen[key] = i
		if d.has(p + ".container") {
			pod.Container = ps.Container
		}
		if ps.Owner != nil {
			if err := d.required(p+".owner", "kind", "name"); err != nil {
				return err
			}
			pod.Owner = *ps.Owner
		}
		if pod.Static {
			if ps.Owner != nil {
				return d.errf(p+".owner", "a static pod's owner is its node; give none")
			}
			// The mirror pod's owner reference names the node.
			pod.Owner = Owner{Kind: "Node", Name: s.Node}
		}
		if d.has(p + ".priority_class") {
			if err := d.priorityClass(p+".priority_class", ps.PriorityClass, s); err != nil {
				return err
			}
			pod.PriorityClass = ps.PriorityClass
		}
		if err := d.draPod(p, ps, &pod, s); err != nil {
			return err
		}
		if pod.Static && pod.Allocation == AllocationDRA {
			return d.errf(p+".static", "a static pod cannot use resource claims (DRA)")
		}
		if d.has(p + ".resource") {
			pod.Resource = ps.Resource
			if pod.Resource != ResourceGPU && pod.Resource != ResourceGPUShared && !strings.HasPrefix(pod.Resource, ResourceMIGPrefix) {
				return d.errf(p+".resource", "%q is not %s, %s or %s<profile>", pod.Resource, ResourceGPU, ResourceGPUShared, ResourceMIGPrefix)
			}
		}
		if d.has(p + ".pid") {
			pid, err := d.whole(p+".pid", ps.PID, 1, 4194304)
			if err != nil {
				return err
			}
			pod.PID = uint32(pid)
		}
		if len(ps.Devices) == 0 {
			return d.errf(p+".devices", "must name at least one device")
		}
		for j, spec := range ps.Devices {
			f := fmt.Sprintf("%s.devices[%d]", p, j)
			spec, err := d.podDevice(f, spec, s)
			if err != nil {
				return err
			}
			if err := d.draDevice(f, &pod, spec); err != nil {
				return err
			}
			for _, prev := range pod.Devices {
				// Dynamic MIG devices of one GPU get placements of their own.
				if prev.GPU == spec.GPU && !(prev.MIG && spec.MIG && (prev.Dynamic || prev.MIGSlot != spec.MIGSlot)) {
					return d.errf(f, "%s: the pod already holds %s", spec, prev)
				}
			}
			if pod.Resource == ResourceGPUShared && !spec.Replicated && !spec.MIG {
				return d.errf(f, "%s is a whole GPU, but %s hands out replicas (gpu:N::R)", spec, ResourceGPUShared)
			}
			pod.Devices = append(pod.Devices, spec)
		}
		if err := d.window(p, ps.From, ps.To, s.Duration, &pod.From, &pod.To); err != nil {
			return err
		}
		pod.Memory = uint64(ps.Memory)
		if usable := sys.memTotal() - reservedMemory; pod.Memory > usable {
			return d.errf(p+".memory", "%s is more than the %s an %s offers (%s less %s the driver reserves)",
				d.byPath[p+".memory"].Value, fmtBytes(usable), sys.gpu.Name, fmtBytes(sys.memTotal()), fmtBytes(reservedMemory))
		}
		if ps.Util != nil {
			var err error
			if pod.Util, err = d.steps(p+".util", ps.Util, pod.From, s.Duration); err != nil {
				return err
			}
		}
		if d.has(p + ".sm_fraction") {
			if ps.SMFraction == 0 {
				return d.errf(p+".sm_fraction", "0 is no share of the SMs; a pod whose kernels run occupies some")
			}
			pod.SMFraction = float64(ps.SMFraction)
		}
		if ps.Engine != nil {
			var err error
			if pod.Engine, err = d.engine(p+".engine", ps.Engine, &pod, s); err != nil {
				return err
			}
		}
		if err := d.migPod(p, ps, &pod, s); err != nil {
			return err
		}
		if err := d.podAllocation(p, ps, &pod, s); err != nil {
			return err
		}
		s.Pods = append(s.Pods, pod)
	}
	return nil
}

func (d *validator) unallocated(spec *ScenarioSpec, s *Scenario) error {
	last := map[int]time.Duration{}
	for i, u := range spec.Unallocated {
		p := fmt.Sprintf("unallocated[%d]", i)
		if err := d.required(p, "device", "at", "value"); err != nil {
			return err
		}
		dev, err := d.gpu(p+".device", u.Device.DeviceSpec, s.GPUs)
		if err != nil {
			return err
		}
		if dev.Replicated {
			return d.errf(p+".device", "%s: unallocated activity is per GPU; want gpu:%d", dev, dev.GPU)
		}
		if _, on := s.MIG[dev.GPU]; on {
			return d.errf(p+".device", "%s is in MIG mode; the simulation has no activity outside its MIG devices", dev)
		}
		at, err := d.offset(p+".at", u.At, s.Duration)
		if err != nil {
			return err
		}
		if prev, ok := last[dev.GPU]; ok && at <= prev {
			return d.errf(p+".at", "%s does not come after the previous gpu:%d step's %s", fmtDur(at), dev.GPU, fmtDur(prev))
		}
		last[dev.GPU] = at
		s.Unallocated = append(s.Unallocated, UnallocatedStep{GPU: dev.GPU, At: at, Value: float64(u.Value)})
	}
	return nil
}

// crossCheck validates what spans pods: who holds a GPU when, process IDs,
// memory per GPU, and activity on GPUs that are held.
func (d *validator) crossCheck(_ *ScenarioSpec, s *Scenario) error {
	// Device conflicts: a whole GPU excludes every other holder; a replica
	// excludes the same replica.
	// Pods of one claim share its devices, and dynamic MIG devices are
	// placed apart (planCheck).
	for j := range s.Pods {
		b := &s.Pods[j]
		for di, db := range b.Devices {
			for i := 0; i < j; i++ {
				a := &s.Pods[i]
				if a.From >= b.To || b.From >= a.To || s.shareGPU(i, j) {
					continue
				}
				for _, da := range a.Devices {
					if da.GPU != db.GPU || da.Dynamic || db.Dynamic || (da.Replicated && db.Replicated && da.Replica != db.Replica) || (da.MIG && db.MIG && da.MIGSlot != db.MIGSlot) {
						continue
					}
					return d.errf(fmt.Sprintf("pods[%d].devices[%d]", j, di),
						"%s is also held by %s/%s (pods[%d], %s as %s from %s to %s)",
						db, a.Namespace, a.Name, i, da, da, fmtDur(a.From), fmtDur(a.To))
				}
			}
		}
	}
	pids := map[uint32]int{}
	for i, p := range s.Pods {
		for k := range p.Devices {
			pid := s.PID(i, k)
			if j, dup := pids[pid]; dup {
				return d.errf(fmt.Sprintf("pods[%d].pid", i), "process %d on %s is also a process of pods[%d]", pid, p.Devices[k], j)
			}
			pids[pid] = i
		}
	}
	// Memory peaks when a pod starts, so checking each start suffices.
	usable := systems[s.System].memTotal() - reservedMemory
	for j, b := range s.Pods {
		for _, db := range b.Devices {
			var sum uint64
			for _, a := range s.Pods {
				if a.From <= b.From && b.From < a.To && holds(a, db.GPU) {
					sum += a.Memory
				}
			}
			if sum > usable {
				return d.errf(fmt.Sprintf("pods[%d].memory", j), "gpu:%d would need %s at %s with the pods already on it, more than its %s",
					db.GPU, fmtBytes(sum), fmtDur(b.From), fmtBytes(usable))
			}
		}
	}
	for gpu := 0; gpu < s.GPUs; gpu++ {
		var idx []int
		for i, u := range s.Unallocated {
			if u.GPU == gpu {
				idx = append(idx, i)
			}
		}
		for n, i := range idx {
			u := s.Unallocated[i]
			if u.Value == 0 {
				continue
			}
			end := s.Duration
			if n+1 < len(idx) {
				end = s.Unallocated[idx[n+1]].At
			}
			for pi, p := range s.Pods {
				if holds(p, gpu) && p.From < end && u.At < p.To {
					return d.errf(fmt.Sprintf("unallocated[%d]", i),
						"gpu:%d is busy (%g) from %s to %s while %s/%s (pods[%d]) holds it from %s to %s; unallocated activity is for GPUs nobody holds",
						gpu, u.Value, fmtDur(u.At), fmtDur(end), p.Namespace, p.Name, pi, fmtDur(p.From), fmtDur(p.To))
				}
			}
		}
	}
	return nil
}

// holds reports whether pod p holds GPU gpu: a pod with admin access
// holds nothing.
func holds(p Pod, gpu int) bool {
	if p.AdminAccess {
		return false
	}
	for _, d := range p.Devices {
		if d.GPU == gpu {
			return true
		}
	}
	return false
}

// PID is the host PID of pod's process on its dev-th device.
func (s *Scenario) PID(pod, dev int) uint32 {
	base := s.Pods[pod].PID
	if base == 0 {
		base = 10000 + 100*uint32(pod)
	}
	return base + uint32(dev)
}

// podSeries is pod's busy ratio, 0 outside [From, To).
func (s *Scenario) podSeries(pod int) series {
	p := s.Pods[pod]
	raw := stepSeries(p.Util)
	return combine([]time.Duration{p.From, p.To}, []series{raw}, func(t time.Duration) float64 {
		if t < p.From || t >= p.To {
			return 0
		}
		return raw.value(t)
	})
}

// unallocatedSeries is the activity nobody holds on gpu, ending with the scenario.
func (s *Scenario) unallocatedSeries(gpu int) series {
	var steps []Step
	for _, u := range s.Unallocated {
		if u.GPU == gpu {
			steps = append(steps, Step{At: u.At, Value: u.Value})
		}
	}
	raw := stepSeries(steps)
	return combine([]time.Duration{s.Duration}, []series{raw}, func(t time.Duration) float64 {
		if t >= s.Duration {
			return 0
		}
		return raw.value(t)
	})
}

// gpuSeries is the busy ratio of gpu as the driver sees it: the sum of every
// holder's ratio and of unallocated activity, capped at 1.
func (s *Scenario) gpuSeries(gpu int, pods []series) series {
	if _, on := s.MIG[gpu]; on {
		return s.migGPUSeries(gpu, pods)
	}
	un := s.unallocatedSeries(gpu)
	var on []series
	for i, p := range s.Pods {
		if holds(p, gpu) {
			on = append(on, pods[i])
		}
	}
	on = s.withUnattributed(gpu, on)
	return combine(nil, append([]series{un}, on...), func(t time.Duration) float64 {
		v := un.value(t)
		for _, p := range on {
			v += p.value(t)
		}
		return min(v, 1)
	})
}

// UtilAt is pod's busy ratio at scenario time t: 0 outside [From, To).
func (s *Scenario) UtilAt(pod int, t time.Duration) float64 {
	return s.podSeries(pod).value(t)
}

// GPUUtilAt is GPU gpu's busy ratio at scenario time t as the simulated
// driver reports it: the holders' ratios plus unallocated activity, capped at 1.
// For a GPU in MIG mode it is its MIG devices' ratios weighted by their
// compute slices (a busy 3g device makes the GPU 3/7 busy).
func (s *Scenario) GPUUtilAt(gpu int, t time.Duration) float64 {
	pods := make([]series, len(s.Pods))
	for i := range s.Pods {
		pods[i] = s.podSeries(i)
	}
	return s.gpuSeries(gpu, pods).value(t)
}

// TruthRow is the exact ground truth of one pod on one device over the whole
// scenario, for checking what the engine integrates from samples.
type TruthRow struct {
	Namespace string
	Pod       string
	Container string
	// Device is the scenario device the pod holds.
	Device DeviceSpec
	// UUID is the device's NVML UUID: the GPU's (for a replica too), or
	// the MIG device's; a dynamic MIG device's is the one made for the
	// pod's claim.
	UUID string
	// Claim is a DRA pod's claim name (in Namespace) and DRADevice the
	// device's name in the node's ResourceSlices; both empty for a
	// device-plugin pod.
	Claim, DRADevice string
	// AllocatedSeconds is To−From.
	AllocatedSeconds float64
	// IdleSeconds is the allocated time the pod's own busy ratio was below
	// the threshold.
	IdleSeconds float64
	// ActiveSeconds is the integral of the pod's own busy ratio.
	ActiveSeconds float64
}

// Truth is the ground truth per pod and device, in scenario order. For a
// shared GPU it counts each pod's own ratio, as the engine does with
// per-process utilization; so for the pods of a shared DRA claim.
func (s *Scenario) Truth(threshold float64) []TruthRow {
	var rows []TruthRow
	plan, _ := s.migPlan()
	ids := s.identities(plan)
	for i, p := range s.Pods {
		if p.AdminAccess {
			continue // it holds nothing
		}
		ser := s.podSeries(i)
		for k, dev := range p.Devices {
			rows = append(rows, TruthRow{
				Namespace:        p.Namespace,
				Pod:              p.Name,
				Container:        p.Container,
				Device:           dev,
				UUID:             ids.uuid[i][k],
				Claim:            p.Claim,
				DRADevice:        ids.draName[i][k],
				AllocatedSeconds: (p.To - p.From).Seconds(),
				IdleSeconds:      ser.below(threshold, p.From, p.To),
				ActiveSeconds:    ser.integral(p.From, p.To),
			})
		}
	}
	return rows
}

// fmtDur prints a duration the way a scenario spells it: 1h30m, not 1h30m0s.
func fmtDur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func fmtBytes(b uint64) string {
	switch {
	case b%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", b>>30)
	case b >= 1<<30:
		return strconv.FormatFloat(float64(b)/(1<<30), 'f', -1, 64) + "GiB"
	case b%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", b>>20)
	default:
		return fmt.Sprintf("%dB", b)
	}
}

func systemNames() []string {
	names := make([]string, 0, len(systems))
	for n := range systems {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// errNoScenario guards NewNode against a nil scenario.
var errNoScenario = errors.New("sim: no scenario")
