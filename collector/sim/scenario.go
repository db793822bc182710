package sim

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
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
	Kind string
	Name string
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

// yamlLine finds the line in yaml.v3's own syntax errors ("yaml: line 3: …").
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

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

// ParseScenario parses and validates a scenario; name is the file name used
// in errors. Every error is a *ScenarioError.
func ParseScenario(data []byte, name string) (*Scenario, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		msg := err.Error()
		if m := yamlLine.FindStringSubmatch(msg); m != nil {
			line, _ := strconv.Atoi(m[1])
			return nil, &ScenarioError{File: name, Line: line, Msg: m[2]}
		}
		return nil, &ScenarioError{File: name, Msg: strings.TrimPrefix(msg, "yaml: ")}
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil, &ScenarioError{File: name, Msg: "empty scenario"}
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		line := next.Line
		if err != nil {
			line = 0 // a syntax error in what follows: still a second document
		}
		return nil, &ScenarioError{File: name, Line: line, Msg: "a second YAML document (after ---): a scenario is one document"}
	}
	literal, expanded := nodeCounts(&doc)
	if expanded-literal > MaxAliasNodes {
		return nil, &ScenarioError{File: name, Msg: fmt.Sprintf("its aliases expand to more than %d YAML nodes beyond the file's %d; write the values out", MaxAliasNodes, literal)}
	}
	d := &decoder{file: name}
	s, err := d.scenario(doc.Content[0])
	if err != nil {
		return nil, err
	}
	s.Name = name
	return s, nil
}

// decoder turns yaml.Nodes into a Scenario, keeping the nodes of fields that
// later cross-checks blame.
type decoder struct {
	file string
	// Nodes kept for cross-checks, per pod.
	podNode   []*yaml.Node
	devNodes  [][]*yaml.Node
	devList   []*yaml.Node
	memNode   []*yaml.Node
	pidNode   []*yaml.Node
	unalNodes []*yaml.Node
	// migKeys are the keys of the mig mapping, by GPU.
	migKeys map[int]*yaml.Node
}

func (d *decoder) errf(n *yaml.Node, field, format string, args ...any) error {
	return &ScenarioError{File: d.file, Line: n.Line, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// nodeCounts returns the YAML nodes of n as written, and as the decoder
// walks them with each alias expanded, counted without expanding (each
// node's expanded size is computed once): so that a file of nested
// aliases is refused before it is walked. A count that passes the bound
// stops growing.
func nodeCounts(n *yaml.Node) (literal, expanded int64) {
	const stop = math.MaxInt64 / 4
	memo := map[*yaml.Node]int64{}
	var size func(n *yaml.Node, depth int) int64
	size = func(n *yaml.Node, depth int) int64 {
		if n == nil {
			return 0
		}
		if v, ok := memo[n]; ok {
			return v
		}
		if depth > 10_000 {
			return stop // a cycle, or nesting no scenario has
		}
		memo[n] = stop // while in progress: a cycle counts as unbounded
		var total int64 = 1
		if n.Kind == yaml.AliasNode {
			total = size(n.Alias, depth+1)
		} else {
			for _, c := range n.Content {
				total += size(c, depth+1)
				if total >= stop {
					total = stop
					break
				}
			}
		}
		memo[n] = total
		return total
	}
	var count func(n *yaml.Node)
	count = func(n *yaml.Node) {
		literal++
		for _, c := range n.Content {
			count(c)
		}
	}
	count(n)
	return literal, size(n, 0)
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func resolve(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// mapping checks that n is a mapping with only known, distinct keys, and
// returns its values by key.
func (d *decoder) mapping(n *yaml.Node, path string, known ...string) (map[string]*yaml.Node, error) {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		what := path
		if what == "" {
			what = "the scenario"
		}
		return nil, d.errf(n, path, "want a mapping for %s, got %s", what, kindName(n))
	}
	out := make(map[string]*yaml.Node, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], resolve(n.Content[i+1])
		if k.Value == "<<" {
			return nil, d.errf(k, path, "merge keys (<<) are not supported")
		}
		if !contains(known, k.Value) {
			return nil, d.errf(k, join(path, k.Value), "unknown key; want one of %s", strings.Join(known, ", "))
		}
		if _, dup := out[k.Value]; dup {
			return nil, d.errf(k, join(path, k.Value), "given twice")
		}
		out[k.Value] = v
	}
	return out, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing"
		}
		return fmt.Sprintf("%q", n.Value)
	default:
		return "something else"
	}
}

func (d *decoder) scalar(n *yaml.Node, field string) (string, error) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return "", d.errf(n, field, "want a value, got %s", kindName(n))
	}
	return n.Value, nil
}

func (d *decoder) str(n *yaml.Node, field string) (string, error) {
	v, err := d.scalar(n, field)
	if err == nil && v == "" {
		err = d.errf(n, field, "must not be empty")
	}
	return v, err
}

func (d *decoder) seq(n *yaml.Node, field string) ([]*yaml.Node, error) {
	if n.Kind != yaml.SequenceNode {
		return nil, d.errf(n, field, "want a list, got %s", kindName(n))
	}
	items := make([]*yaml.Node, len(n.Content))
	for i, c := range n.Content {
		items[i] = resolve(c)
	}
	return items, nil
}

func (d *decoder) duration(n *yaml.Node, field string) (time.Duration, error) {
	v, err := d.scalar(n, field)
	if err != nil {
		return 0, err
	}
	dur, perr := time.ParseDuration(v)
	if perr != nil {
		return 0, d.errf(n, field, "%q is not a duration such as 90s, 15m or 1h30m", v)
	}
	if dur < 0 {
		return 0, d.errf(n, field, "%s is negative", v)
	}
	return dur, nil
}

// offset is a scenario time: a duration within [0, total].
func (d *decoder) offset(n *yaml.Node, field string, total time.Duration) (time.Duration, error) {
	t, err := d.duration(n, field)
	if err == nil && t > total {
		err = d.errf(n, field, "%s is after the scenario's end at %s", fmtDur(t), fmtDur(total))
	}
	return t, err
}

// window reads the optional from and to keys of mapping m at path p into
// *from and *to (left as they are when absent: the caller's defaults), both
// within the scenario's total, and checks that to is after from.
func (d *decoder) window(m map[string]*yaml.Node, p string, total time.Duration, from, to *time.Duration) error {
	var err error
	if n := m["from"]; n != nil {
		if *from, err = d.offset(n, p+".from", total); err != nil {
			return err
		}
	}
	if n := m["to"]; n != nil {
		if *to, err = d.offset(n, p+".to", total); err != nil {
			return err
		}
	}
	if *from >= *to {
		n := m["to"]
		if n == nil {
			n = m["from"]
		}
		return d.errf(n, p+".to", "%s is not after from (%s)", fmtDur(*to), fmtDur(*from))
	}
	return nil
}

func (d *decoder) ratio(n *yaml.Node, field string) (float64, error) {
	v, err := d.scalar(n, field)
	if err != nil {
		return 0, err
	}
	f, perr := strconv.ParseFloat(v, 64)
	if perr != nil || math.IsNaN(f) || f < 0 || f > 1 {
		return 0, d.errf(n, field, "%s is not a ratio between 0 and 1", v)
	}
	return f, nil
}

func (d *decoder) integer(n *yaml.Node, field string, lo, hi int64) (int64, error) {
	v, err := d.scalar(n, field)
	if err != nil {
		return 0, err
	}
	i, perr := strconv.ParseInt(v, 10, 64)
	if perr != nil || i < lo || i > hi {
		return 0, d.errf(n, field, "%s is not a whole number from %d to %d", v, lo, hi)
	}
	return i, nil
}

// byteUnits are the memory suffixes a scenario accepts, decimal and binary,
// with the Kubernetes quantity spellings (Gi) too.
var byteUnits = map[string]float64{
	"": 1, "B": 1,
	"KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
	"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
	"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40,
}

var bytesRE = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)$`)

func (d *decoder) bytes(n *yaml.Node, field string) (uint64, error) {
	v, err := d.scalar(n, field)
	if err != nil {
		return 0, err
	}
	m := bytesRE.FindStringSubmatch(v)
	if m == nil {
		return 0, d.errf(n, field, "%q is not a size such as 60GiB, 512MiB or 80GB", v)
	}
	unit, ok := byteUnits[m[2]]
	f, perr := strconv.ParseFloat(m[1], 64)
	if !ok || perr != nil || f*unit >= 1<<63 {
		return 0, d.errf(n, field, "%q is not a size such as 60GiB, 512MiB or 80GB", v)
	}
	return uint64(math.Round(f * unit)), nil
}

var deviceRE = regexp.MustCompile(`^gpu:([0-9]+)(?:::([0-9]+))?$`)

func (d *decoder) device(n *yaml.Node, field string, gpus int) (DeviceSpec, error) {
	v, err := d.scalar(n, field)
	if err != nil {
		return DeviceSpec{}, err
	}
	m := deviceRE.FindStringSubmatch(v)
	if m == nil {
		return DeviceSpec{}, d.errf(n, field, "%q is not a device; want gpu:N or gpu:N::R", v)
	}
	gpu, err1 := strconv.Atoi(m[1])
	if err1 != nil || gpu >= gpus {
		return DeviceSpec{}, d.errf(n, field, "%s is not one of the node's %d GPUs (gpu:0 to gpu:%d)", v, gpus, gpus-1)
	}
	spec := DeviceSpec{GPU: gpu}
	if m[2] != "" {
		r, err2 := strconv.Atoi(m[2])
		if err2 != nil || r > 1023 {
			return DeviceSpec{}, d.errf(n, field, "%s: replica must be a number from 0 to 1023", v)
		}
		spec.Replicated, spec.Replica = true, r
	}
	return spec, nil
}

// steps decodes a list of {at, value} or {at, duty} with strictly ascending
// times. With duty, the mapping form {duty: {...}} is one duty step at from.
func (d *decoder) steps(n *yaml.Node, path string, from, total time.Duration) ([]Step, error) {
	if n.Kind == yaml.MappingNode {
		m, err := d.mapping(n, path, "duty")
		if err != nil {
			return nil, err
		}
		if m["duty"] == nil {
			return nil, d.errf(n, path+".duty", "missing")
		}
		dc, err := d.duty(m["duty"], path+".duty")
		if err != nil {
			return nil, err
		}
		return []Step{{At: from, Duty: dc}}, nil
	}
	items, err := d.seq(n, path)
	if err != nil {
		return nil, err
	}
	out := make([]Step, 0, len(items))
	for i, it := range items {
		p := fmt.Sprintf("%s[%d]", path, i)
		m, err := d.mapping(it, p, "at", "value", "duty")
		if err != nil {
			return nil, err
		}
		st, err := d.dutyStep(it, m, p, total)
		if err != nil {
			return nil, err
		}
		if i > 0 && st.At <= out[i-1].At {
			return nil, d.errf(m["at"], p+".at", "%s does not come after the previous step's %s", fmtDur(st.At), fmtDur(out[i-1].At))
		}
		out = append(out, st)
	}
	return out, nil
}

// dutyStep decodes a step of a util list: {at, value} or {at, duty}.
func (d *decoder) dutyStep(n *yaml.Node, m map[string]*yaml.Node, path string, total time.Duration) (Step, error) {
	dn := m["duty"]
	if dn == nil {
		return d.step(n, m, path, total)
	}
	if m["value"] != nil {
		return Step{}, d.errf(m["value"], path+".value", "give value or duty, not both")
	}
	if m["at"] == nil {
		return Step{}, d.errf(n, path+".at", "missing")
	}
	at, err := d.offset(m["at"], path+".at", total)
	if err != nil {
		return Step{}, err
	}
	dc, err := d.duty(dn, path+".duty")
	return Step{At: at, Duty: dc}, err
}

// duty decodes {period, busy, value, idle}: busy of every period at value,
// the rest at idle (default 0).
func (d *decoder) duty(n *yaml.Node, path string) (*Duty, error) {
	m, err := d.mapping(n, path, "period", "busy", "value", "idle")
	if err != nil {
		return nil, err
	}
	for _, k := range []string{"period", "busy", "value"} {
		if m[k] == nil {
			return nil, d.errf(n, join(path, k), "missing")
		}
	}
	dc := &Duty{}
	if dc.Period, err = d.duration(m["period"], path+".period"); err != nil {
		return nil, err
	}
	if dc.Period < minDutyPeriod {
		return nil, d.errf(m["period"], path+".period", "%s is shorter than %s", fmtDur(dc.Period), fmtDur(minDutyPeriod))
	}
	if dc.Busy, err = d.duration(m["busy"], path+".busy"); err != nil {
		return nil, err
	}
	if dc.Busy == 0 || dc.Busy > dc.Period {
		return nil, d.errf(m["busy"], path+".busy", "%s is not within the period (more than 0s, at most %s)", fmtDur(dc.Busy), fmtDur(dc.Period))
	}
	if dc.Value, err = d.ratio(m["value"], path+".value"); err != nil {
		return nil, err
	}
	if n := m["idle"]; n != nil {
		if dc.Idle, err = d.ratio(n, path+".idle"); err != nil {
			return nil, err
		}
	}
	return dc, nil
}

func (d *decoder) step(n *yaml.Node, m map[string]*yaml.Node, path string, total time.Duration) (Step, error) {
	var st Step
	for _, k := range []string{"at", "value"} {
		if m[k] == nil {
			return st, d.errf(n, join(path, k), "missing")
		}
	}
	var err error
	if st.At, err = d.offset(m["at"], path+".at", total); err != nil {
		return st, err
	}
	st.Value, err = d.ratio(m["value"], path+".value")
	return st, err
}

func (d *decoder) scenario(root *yaml.Node) (*Scenario, error) {
	m, err := d.mapping(root, "", append([]string{"start", "duration", "lead_in", "node", "system", "gpus", "allocation", "mig", "pods", "unallocated", "cgroup", "unattributed", "faults", "unscheduled", "priority_classes", "kueue", "driver"}, nodeAllocationKeys...)...)
	if err != nil {
		return nil, err
	}
	root = resolve(root)
	for _, k := range []string{"start", "duration", "system", "gpus"} {
		if m[k] == nil {
			return nil, d.errf(root, k, "missing")
		}
	}
	s := &Scenario{Node: "sim-node"}
	v, err := d.scalar(m["start"], "start")
	if err != nil {
		return nil, err
	}
	if s.Start, err = time.Parse(time.RFC3339, v); err != nil {
		return nil, d.errf(m["start"], "start", "%q is not a time such as 2026-12-01T08:00:00Z", v)
	}
	if s.Start.Before(time.Unix(0, 0)) {
		// NVML stamps samples in microseconds since 1970, unsigned: a
		// run before it would have no sample, and count nothing.
		return nil, d.errf(m["start"], "start", "%s is before 1970, where NVML's sample stamps begin", v)
	}
	if s.Duration, err = d.duration(m["duration"], "duration"); err != nil {
		return nil, err
	}
	if s.Duration == 0 {
		return nil, d.errf(m["duration"], "duration", "must be longer than 0s")
	}
	if s.Duration > MaxDuration {
		return nil, d.errf(m["duration"], "duration", "%s is longer than the %s a scenario may last", fmtDur(s.Duration), fmtDur(MaxDuration))
	}
	if n := m["lead_in"]; n != nil {
		if s.LeadIn, err = d.duration(n, "lead_in"); err != nil {
			return nil, err
		}
		if s.LeadIn >= s.Duration {
			return nil, d.errf(n, "lead_in", "%s is not before the scenario's end at %s", fmtDur(s.LeadIn), fmtDur(s.Duration))
		}
		if s.LeadIn > MaxLeadIn {
			return nil, d.errf(n, "lead_in", "%s is longer than the %s played before the agent serves", fmtDur(s.LeadIn), fmtDur(MaxLeadIn))
		}
	}
	if n := m["node"]; n != nil {
		if s.Node, err = d.str(n, "node"); err != nil {
			return nil, err
		}
	}
	if s.System, err = d.str(m["system"], "system"); err != nil {
		return nil, err
	}
	if _, ok := systems[s.System]; !ok {
		return nil, d.errf(m["system"], "system", "%q is not a known system; want one of %s", s.System, strings.Join(systemNames(), ", "))
	}
	gpus, err := d.integer(m["gpus"], "gpus", 1, 8)
	if err != nil {
		return nil, err
	}
	s.GPUs = int(gpus)
	s.Allocation = AllocationDevicePlugin
	if n := m["allocation"]; n != nil {
		if s.Allocation, err = d.allocation(n, "allocation"); err != nil {
			return nil, err
		}
	}
	if err := d.nodeAllocation(m, s); err != nil {
		return nil, err
	}
	if n := m["mig"]; n != nil {
		if err := d.mig(n, s); err != nil {
			return nil, err
		}
	}
	if err := d.driverShapes(nil, s); err != nil { // the defaults; `driver:` is decoded below
		return nil, err
	}
	if n := m["priority_classes"]; n != nil {
		if err := d.priorityClasses(n, s); err != nil {
			return nil, err
		}
	}
	if n := m["kueue"]; n != nil {
		if err := d.kueue(n, s); err != nil {
			return nil, err
		}
	}
	if n := m["pods"]; n != nil {
		if err := d.pods(n, s); err != nil {
			return nil, err
		}
	}
	if n := m["unallocated"]; n != nil {
		if err := d.unallocated(n, s); err != nil {
			return nil, err
		}
	}
	if err := d.draCheck(s); err != nil {
		return nil, err
	}
	if err := d.crossCheck(s); err != nil {
		return nil, err
	}
	if err := d.allocationCheck(s); err != nil {
		return nil, err
	}
	if err := d.planCheck(s); err != nil {
		return nil, err
	}
	if err := d.processes(m, s); err != nil {
		return nil, err
	}
	if n := m["driver"]; n != nil {
		if err := d.driver(n, s); err != nil {
			return nil, err
		}
	}
	if n := m["faults"]; n != nil {
		if err := d.faults(n, s); err != nil {
			return nil, err
		}
	}
	if n := m["unscheduled"]; n != nil {
		if err := d.unscheduled(n, s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

var podKeys = append([]string{"namespace", "name", "container", "owner", "labels", "cmdline", "parent_cmdline", "allocation", "claim", "resource", "pid", "devices", "from", "to", "memory", "util", "priority_class", "static", "sm_fraction", "engine"}, podAllocationKeys...)

func (d *decoder) pods(n *yaml.Node, s *Scenario) error {
	items, err := d.seq(n, "pods")
	if err != nil {
		return err
	}
	seen := map[string]int{}
	sys := systems[s.System]
	for i, it := range items {
		p := fmt.Sprintf("pods[%d]", i)
		m, err := d.mapping(it, p, podKeys...)
		if err != nil {
			return err
		}
		pod := Pod{Container: "main", Resource: ResourceGPU, To: s.Duration, SMFraction: 1}
		for _, k := range []string{"namespace", "name", "devices"} {
			if m[k] == nil {
				return d.errf(it, join(p, k), "missing")
			}
		}
		if pod.Namespace, err = d.str(m["namespace"], p+".namespace"); err != nil {
			return err
		}
		if pod.Name, err = d.str(m["name"], p+".name"); err != nil {
			return err
		}
		key := pod.Namespace + "/" + pod.Name
		if j, dup := seen[key]; dup {
			return d.errf(m["name"], p+".name", "%s is already pods[%d]", key, j)
		}
		seen[key] = i
		if c := m["container"]; c != nil {
			if pod.Container, err = d.str(c, p+".container"); err != nil {
				return err
			}
		}
		if o := m["owner"]; o != nil {
			if pod.Owner, err = d.owner(o, p+".owner"); err != nil {
				return err
			}
		}
		if n := m["static"]; n != nil {
			if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
				return d.errf(n, p+".static", "want true or false, got %s", kindName(n))
			}
			if err := n.Decode(&pod.Static); err != nil {
				return d.errf(n, p+".static", "%v", err)
			}
		}
		if pod.Static {
			if m["owner"] != nil {
				return d.errf(m["owner"], p+".owner", "a static pod's owner is its node; give none")
			}
			// The mirror pod's owner reference names the node.
			pod.Owner = Owner{Kind: "Node", Name: s.Node}
		}
		if l := m["labels"]; l != nil {
			if l.Kind != yaml.MappingNode {
				return d.errf(l, p+".labels", "want a mapping of names to values, got %s", kindName(l))
			}
			pod.Labels = make(map[string]string, len(l.Content)/2)
			for j := 0; j+1 < len(l.Content); j += 2 {
				k, v := l.Content[j], resolve(l.Content[j+1])
				f := p + ".labels." + k.Value
				if _, dup := pod.Labels[k.Value]; dup {
					return d.errf(k, f, "given twice")
				}
				if pod.Labels[k.Value], err = d.scalar(v, f); err != nil {
					return err
				}
			}
		}
		for _, k := range []struct {
			key string
			dst *[]string
		}{{"cmdline", &pod.Cmdline}, {"parent_cmdline", &pod.ParentCmdline}} {
			c := m[k.key]
			if c == nil {
				continue
			}
			args, err := d.seq(c, p+"."+k.key)
			if err != nil {
				return err
			}
			for j, a := range args {
				v, err := d.str(a, fmt.Sprintf("%s.%s[%d]", p, k.key, j))
				if err != nil {
					return err
				}
				*k.dst = append(*k.dst, v)
			}
		}
		if n := m["priority_class"]; n != nil {
			if pod.PriorityClass, err = d.priorityClass(n, p+".priority_class", s); err != nil {
				return err
			}
		}
		if err := d.draPod(p, m, &pod, s); err != nil {
			return err
		}
		if pod.Static && pod.Allocation == AllocationDRA {
			return d.errf(m["static"], p+".static", "a static pod cannot use resource claims (DRA)")
		}
		if r := m["resource"]; r != nil {
			if pod.Resource, err = d.str(r, p+".resource"); err != nil {
				return err
			}
			if pod.Resource != ResourceGPU && pod.Resource != ResourceGPUShared && !strings.HasPrefix(pod.Resource, ResourceMIGPrefix) {
				return d.errf(r, p+".resource", "%q is not %s, %s or %s<profile>", pod.Resource, ResourceGPU, ResourceGPUShared, ResourceMIGPrefix)
			}
		}
		d.pidNode = append(d.pidNode, m["pid"])
		if n := m["pid"]; n != nil {
			pid, err := d.integer(n, p+".pid", 1, 4194304)
			if err != nil {
				return err
			}
			pod.PID = uint32(pid)
		}
		devs, err := d.seq(m["devices"], p+".devices")
		if err != nil {
			return err
		}
		if len(devs) == 0 {
			return d.errf(m["devices"], p+".devices", "must name at least one device")
		}
		for j, dn := range devs {
			f := fmt.Sprintf("%s.devices[%d]", p, j)
			spec, err := d.podDevice(dn, f, s)
			if err != nil {
				return err
			}
			if err := d.draDevice(dn, f, &pod, spec); err != nil {
				return err
			}
			for _, prev := range pod.Devices {
				// Dynamic MIG devices of one GPU get placements of their own.
				if prev.GPU == spec.GPU && !(prev.MIG && spec.MIG && (prev.Dynamic || prev.MIGSlot != spec.MIGSlot)) {
					return d.errf(dn, f, "%s: the pod already holds %s", spec, prev)
				}
			}
			if pod.Resource == ResourceGPUShared && !spec.Replicated && !spec.MIG {
				return d.errf(dn, f, "%s is a whole GPU, but %s hands out replicas (gpu:N::R)", spec, ResourceGPUShared)
			}
			pod.Devices = append(pod.Devices, spec)
		}
		if n := m["from"]; n != nil {
			if pod.From, err = d.offset(n, p+".from", s.Duration); err != nil {
				return err
			}
		}
		if n := m["to"]; n != nil {
			if pod.To, err = d.offset(n, p+".to", s.Duration); err != nil {
				return err
			}
		}
		if pod.From >= pod.To {
			n := m["to"]
			if n == nil {
				n = m["from"]
			}
			return d.errf(n, p+".to", "%s is not after from (%s)", fmtDur(pod.To), fmtDur(pod.From))
		}
		if n := m["memory"]; n != nil {
			if pod.Memory, err = d.bytes(n, p+".memory"); err != nil {
				return err
			}
			if usable := sys.memTotal() - reservedMemory; pod.Memory > usable {
				return d.errf(n, p+".memory", "%s is more than the %s an %s offers (%s less %s the driver reserves)",
					n.Value, fmtBytes(usable), sys.gpu.Name, fmtBytes(sys.memTotal()), fmtBytes(reservedMemory))
			}
		}
		if n := m["util"]; n != nil {
			if pod.Util, err = d.steps(n, p+".util", pod.From, s.Duration); err != nil {
				return err
			}
		}
		if n := m["sm_fraction"]; n != nil {
			if pod.SMFraction, err = d.ratio(n, p+".sm_fraction"); err != nil {
				return err
			}
			if pod.SMFraction == 0 {
				return d.errf(n, p+".sm_fraction", "0 is no share of the SMs; a pod whose kernels run occupies some")
			}
		}
		if n := m["engine"]; n != nil {
			if pod.Engine, err = d.engine(n, p+".engine", &pod, s); err != nil {
				return err
			}
		}
		if err := d.migPod(p, m, devs, &pod, s); err != nil {
			return err
		}
		if err := d.podAllocation(p, m, devs, &pod, s); err != nil {
			return err
		}
		s.Pods = append(s.Pods, pod)
		d.podNode = append(d.podNode, it)
		d.devNodes = append(d.devNodes, devs)
		d.devList = append(d.devList, m["devices"])
		d.memNode = append(d.memNode, m["memory"])
	}
	return nil
}

// owner decodes {kind, name}.
func (d *decoder) owner(n *yaml.Node, path string) (Owner, error) {
	m, err := d.mapping(n, path, "kind", "name")
	if err != nil {
		return Owner{}, err
	}
	for _, k := range []string{"kind", "name"} {
		if m[k] == nil {
			return Owner{}, d.errf(n, path+"."+k, "missing")
		}
	}
	var o Owner
	if o.Kind, err = d.str(m["kind"], path+".kind"); err != nil {
		return Owner{}, err
	}
	o.Name, err = d.str(m["name"], path+".name")
	return o, err
}

func (d *decoder) unallocated(n *yaml.Node, s *Scenario) error {
	items, err := d.seq(n, "unallocated")
	if err != nil {
		return err
	}
	last := map[int]time.Duration{}
	for i, it := range items {
		p := fmt.Sprintf("unallocated[%d]", i)
		m, err := d.mapping(it, p, "device", "at", "value")
		if err != nil {
			return err
		}
		if m["device"] == nil {
			return d.errf(it, p+".device", "missing")
		}
		spec, err := d.device(m["device"], p+".device", s.GPUs)
		if err != nil {
			return err
		}
		if spec.Replicated {
			return d.errf(m["device"], p+".device", "%s: unallocated activity is per GPU; want gpu:%d", spec, spec.GPU)
		}
		if _, on := s.MIG[spec.GPU]; on {
			return d.errf(m["device"], p+".device", "%s is in MIG mode; the simulation has no activity outside its MIG devices", spec)
		}
		st, err := d.step(it, m, p, s.Duration)
		if err != nil {
			return err
		}
		if prev, ok := last[spec.GPU]; ok && st.At <= prev {
			return d.errf(m["at"], p+".at", "%s does not come after the previous gpu:%d step's %s", fmtDur(st.At), spec.GPU, fmtDur(prev))
		}
		last[spec.GPU] = st.At
		s.Unallocated = append(s.Unallocated, UnallocatedStep{GPU: spec.GPU, At: st.At, Value: st.Value})
		d.unalNodes = append(d.unalNodes, it)
	}
	return nil
}

// crossCheck validates what spans pods: who holds a GPU when, process IDs,
// memory per GPU, and activity on GPUs that are held.
func (d *decoder) crossCheck(s *Scenario) error {
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
					return d.errf(d.devNodes[j][di], fmt.Sprintf("pods[%d].devices[%d]", j, di),
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
				n := d.pidNode[i]
				if n == nil {
					n = d.podNode[i]
				}
				return d.errf(n, fmt.Sprintf("pods[%d].pid", i), "process %d on %s is also a process of pods[%d]", pid, p.Devices[k], j)
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
				n := d.memNode[j]
				if n == nil {
					n = d.podNode[j]
				}
				return d.errf(n, fmt.Sprintf("pods[%d].memory", j), "gpu:%d would need %s at %s with the pods already on it, more than its %s",
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
					return d.errf(d.unalNodes[i], fmt.Sprintf("unallocated[%d]", i),
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
