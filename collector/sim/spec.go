package sim

import (
	"bytes"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// ScenarioSpec is a scenario file as written: yaml.v3 decodes it with
// KnownFields, and validate turns it into a Scenario. Its leaf types parse
// their own spelling; ranges and everything that spans fields are checked
// by validate. Marshal writes it back.
type ScenarioSpec struct {
	Start           Timestamp          `yaml:"start"`
	Duration        Duration           `yaml:"duration"`
	LeadIn          Duration           `yaml:"lead_in,omitempty"`
	Node            string             `yaml:"node,omitempty"`
	System          string             `yaml:"system"`
	GPUs            Whole              `yaml:"gpus"`
	Allocation      string             `yaml:"allocation,omitempty"`
	MIG             map[string]MIGSpec `yaml:"mig,omitempty"`
	Pods            []PodSpec          `yaml:"pods,omitempty"`
	Unallocated     []UnallocatedSpec  `yaml:"unallocated,omitempty"`
	Cgroup          string             `yaml:"cgroup,omitempty"`
	Unattributed    []UnattributedSpec `yaml:"unattributed,omitempty"`
	Faults          []FaultSpec        `yaml:"faults,omitempty"`
	Unscheduled     []UnscheduledSpec  `yaml:"unscheduled,omitempty"`
	PriorityClasses map[string]Whole   `yaml:"priority_classes,omitempty"`
	Kueue           []ClusterQueueSpec `yaml:"kueue,omitempty"`
	Driver          *DriverSpec        `yaml:"driver,omitempty"`
	DeviceIDs       string             `yaml:"device_ids,omitempty"`
	MinorNumbers    []Whole            `yaml:"minor_numbers,omitempty,flow"`
	VFIO            []GPURef           `yaml:"vfio,omitempty,flow"`
	NUMANodes       map[string][]Whole `yaml:"numa_nodes,omitempty,flow"`
	Kubelet         *KubeletFileSpec   `yaml:"kubelet,omitempty"`
}

// PodSpec is one entry of pods.
type PodSpec struct {
	Namespace     string            `yaml:"namespace"`
	Name          string            `yaml:"name"`
	Container     string            `yaml:"container,omitempty"`
	Owner         *Owner            `yaml:"owner,omitempty,flow"`
	Labels        map[string]string `yaml:"labels,omitempty,flow"`
	Cmdline       []string          `yaml:"cmdline,omitempty,flow"`
	ParentCmdline []string          `yaml:"parent_cmdline,omitempty,flow"`
	Allocation    string            `yaml:"allocation,omitempty"`
	Claim         string            `yaml:"claim,omitempty"`
	Resource      string            `yaml:"resource,omitempty"`
	PID           Whole             `yaml:"pid,omitempty"`
	Devices       []DeviceSpec      `yaml:"devices,flow"`
	From          Duration          `yaml:"from,omitempty"`
	To            Duration          `yaml:"to,omitempty"`
	Memory        Bytes             `yaml:"memory,omitempty"`
	Util          *Steps            `yaml:"util,omitempty,flow"`
	PriorityClass string            `yaml:"priority_class,omitempty"`
	Static        Bool              `yaml:"static,omitempty"`
	SMFraction    Ratio             `yaml:"sm_fraction,omitempty"`
	Engine        *EngineSpec       `yaml:"engine,omitempty"`
	GPUFraction   Ratio             `yaml:"gpu_fraction,omitempty"`
	ContainerType string            `yaml:"container_type,omitempty"`
	AdminAccess   Bool              `yaml:"admin_access,omitempty"`
	Request       string            `yaml:"request,omitempty"`
}

// StepSpec is {at, value} or {at, duty}.
type StepSpec struct {
	At    Duration  `yaml:"at"`
	Value *Ratio    `yaml:"value,omitempty"`
	Duty  *DutySpec `yaml:"duty,omitempty"`
}

// DutySpec is {period, busy, value, idle}.
type DutySpec struct {
	Period Duration `yaml:"period"`
	Busy   Duration `yaml:"busy"`
	Value  Ratio    `yaml:"value"`
	Idle   Ratio    `yaml:"idle,omitempty"`
}

// Steps is a util list of steps, or {duty: …}: one duty cycle from the
// pod's from.
type Steps struct {
	List []StepSpec `yaml:"-"`
	Duty *DutySpec  `yaml:"duty"`
}

// UnallocatedSpec is one entry of unallocated.
type UnallocatedSpec struct {
	Device GPURef   `yaml:"device"`
	At     Duration `yaml:"at"`
	Value  Ratio    `yaml:"value"`
}

// UnattributedSpec is one entry of unattributed.
type UnattributedSpec struct {
	Device  GPURef   `yaml:"device"`
	PID     Whole    `yaml:"pid"`
	Memory  Bytes    `yaml:"memory,omitempty"`
	Cmdline []string `yaml:"cmdline,omitempty,flow"`
	From    Duration `yaml:"from,omitempty"`
	To      Duration `yaml:"to,omitempty"`
	Util    *Steps   `yaml:"util,omitempty,flow"`
}

// EngineSpec is a pod's engine.
type EngineSpec struct {
	Kind            string         `yaml:"kind"`
	Model           string         `yaml:"model,omitempty"`
	Metrics         string         `yaml:"metrics,omitempty"`
	KVCacheUsage    *Levels[Ratio] `yaml:"kv_cache_usage,omitempty"`
	TokensPerSecond *Levels[Level] `yaml:"tokens_per_second,omitempty"`
	Running         *Levels[Level] `yaml:"requests_running,omitempty"`
	Waiting         *Levels[Level] `yaml:"requests_waiting,omitempty"`
}

// FaultSpec is one entry of faults; which keys a kind takes is faultKeys'.
type FaultSpec struct {
	Kind  string    `yaml:"kind"`
	From  *Duration `yaml:"from,omitempty"`
	To    *Duration `yaml:"to,omitempty"`
	At    *Duration `yaml:"at,omitempty"`
	GPU   *GPURef   `yaml:"gpu,omitempty"`
	Call  string    `yaml:"call,omitempty"`
	Error string    `yaml:"error,omitempty"`
	Stamp string    `yaml:"stamp,omitempty"`
	Delay Duration  `yaml:"delay,omitempty"`
	Code  string    `yaml:"code,omitempty"`
	Pod   string    `yaml:"pod,omitempty"`
	IDs   []string  `yaml:"ids,omitempty,flow"`
	Phase string    `yaml:"phase,omitempty"`
}

// UnscheduledSpec is one entry of unscheduled.
type UnscheduledSpec struct {
	Namespace     string            `yaml:"namespace"`
	Name          string            `yaml:"name"`
	Container     string            `yaml:"container,omitempty"`
	Owner         *Owner            `yaml:"owner,omitempty,flow"`
	Resource      string            `yaml:"resource,omitempty"`
	GPUs          Whole             `yaml:"gpus,omitempty"`
	From          Duration          `yaml:"from,omitempty"`
	To            Duration          `yaml:"to,omitempty"`
	PriorityClass string            `yaml:"priority_class,omitempty"`
	Queue         string            `yaml:"queue,omitempty"`
	Claim         string            `yaml:"claim,omitempty"`
	NodeSelector  map[string]string `yaml:"node_selector,omitempty,flow"`
	Suspended     Bool              `yaml:"suspended,omitempty"`
}

// ClusterQueueSpec is one entry of kueue.
type ClusterQueueSpec struct {
	ClusterQueue   string   `yaml:"cluster_queue"`
	Cohort         string   `yaml:"cohort,omitempty"`
	NominalQuota   Whole    `yaml:"nominal_quota,omitempty"`
	BorrowingLimit *Whole   `yaml:"borrowing_limit,omitempty"`
	LocalQueues    []string `yaml:"local_queues,omitempty,flow"`
}

// KubeletFileSpec is the top-level kubelet key.
type KubeletFileSpec struct {
	DynamicResources *Bool `yaml:"dynamic_resources,omitempty"`
}

// DriverSpec is the top-level driver key: the shapes of the driver's
// answers, its traps and its runtime changes.
type DriverSpec struct {
	ProcessSamples      string           `yaml:"process_samples,omitempty"`
	ProcessRefresh      Duration         `yaml:"process_refresh,omitempty"`
	SampleClock         string           `yaml:"sample_clock,omitempty"`
	IdleSamples         *Bool            `yaml:"idle_samples,omitempty"`
	Version             string           `yaml:"version,omitempty"`
	MIGParentPermission string           `yaml:"mig_parent_permission,omitempty"`
	MPS                 []GPURef         `yaml:"mps,omitempty,flow"`
	Graphics            []GPURef         `yaml:"graphics,omitempty,flow"`
	MemoryNotAvailable  []GPURef         `yaml:"memory_not_available,omitempty,flow"`
	Zombies             []ZombieSpec     `yaml:"zombies,omitempty"`
	ComputeInstances    map[string]Whole `yaml:"compute_instances,omitempty"`
	MIGMode             []MIGModeSpec    `yaml:"mig_mode,omitempty"`
	Reloads             []ReloadSpec     `yaml:"reloads,omitempty"`
	NodeLabels          []NodeLabelSpec  `yaml:"node_labels,omitempty"`
}

// ZombieSpec is one entry of driver.zombies.
type ZombieSpec struct {
	Device GPURef `yaml:"device"`
	PID    Whole  `yaml:"pid"`
	Shape  string `yaml:"shape"`
	Value  Ratio  `yaml:"value,omitempty"`
}

// MIGModeSpec is one entry of driver.mig_mode.
type MIGModeSpec struct {
	GPU  GPURef   `yaml:"gpu"`
	At   Duration `yaml:"at"`
	Mode string   `yaml:"mode"`
}

// ReloadSpec is one entry of driver.reloads.
type ReloadSpec struct {
	At      Duration `yaml:"at"`
	For     Duration `yaml:"for"`
	Version string   `yaml:"version,omitempty"`
}

// NodeLabelSpec is one entry of driver.node_labels.
type NodeLabelSpec struct {
	Key   string   `yaml:"key"`
	Value string   `yaml:"value"`
	From  Duration `yaml:"from,omitempty"`
	To    Duration `yaml:"to,omitempty"`
}

// MIGSpec is one GPU's MIG layout: its profiles by MIG device index
// ("empty" for an unused one), or the dynamic mode.
type MIGSpec struct {
	Profiles []string `yaml:"-"`
	Dynamic  bool     `yaml:"-"`
}

// Levels is an engine figure: one value from the pod's start, or a list of
// {at, value} steps.
type Levels[T Ratio | Level] struct {
	Value *T             `yaml:"-"`
	List  []LevelStep[T] `yaml:"-"`
}

// LevelStep is a step of a Levels list.
type LevelStep[T Ratio | Level] struct {
	At    Duration `yaml:"at"`
	Value T        `yaml:"value"`
}

// valueError is a leaf that does not parse, at its node; ParseScenario
// names its field.
type valueError struct {
	line, col int
	kind      yaml.Kind
	// sub, when set, is a key under the node that the error names.
	sub string
	msg string
}

func (e *valueError) Error() string { return e.msg }

func valueErrorf(n *yaml.Node, format string, args ...any) error {
	return &valueError{line: n.Line, col: n.Column, kind: n.Kind, msg: fmt.Sprintf(format, args...)}
}

// scalar returns n's value, or an error when n is not a scalar.
func scalar(n *yaml.Node) (string, error) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		return "", valueErrorf(n, "want a value, got %s", kindName(n))
	}
	return n.Value, nil
}

// Duration is a non-negative duration such as 90s, 15m or 1h30m.
type Duration time.Duration

func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := scalar(n)
	if err != nil {
		return err
	}
	t, err := time.ParseDuration(v)
	if err != nil {
		return valueErrorf(n, "%q is not a duration such as 90s, 15m or 1h30m", v)
	}
	if t < 0 {
		return valueErrorf(n, "%s is negative", v)
	}
	*d = Duration(t)
	return nil
}

func (d Duration) MarshalYAML() (any, error) { return fmtDur(time.Duration(d)), nil }

// Timestamp is an RFC 3339 time.
type Timestamp time.Time

func (t *Timestamp) UnmarshalYAML(n *yaml.Node) error {
	v, err := scalar(n)
	if err != nil {
		return err
	}
	p, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return valueErrorf(n, "%q is not a time such as 2026-12-01T08:00:00Z", v)
	}
	*t = Timestamp(p)
	return nil
}

func (t Timestamp) MarshalYAML() (any, error) {
	return time.Time(t).Format(time.RFC3339Nano), nil
}

// Ratio is a number from 0 to 1.
type Ratio float64

func (r *Ratio) UnmarshalYAML(n *yaml.Node) error {
	v, err := scalar(n)
	if err != nil {
		return err
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || f < 0 || f > 1 {
		return valueErrorf(n, "%s is not a ratio between 0 and 1", v)
	}
	*r = Ratio(f)
	return nil
}

// Level is a finite number of at least 0.
type Level float64

func (l *Level) UnmarshalYAML(n *yaml.Node) error {
	v, err := scalar(n)
	if err != nil {
		return err
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
		return valueErrorf(n, "%s is not a number of at least 0", v)
	}
	*l = Level(f)
	return nil
}

// Whole is a whole number; its range is the field's, checked by validate.
type Whole int64

func (w *Whole) UnmarshalYAML(n *yaml.Node) error {
	v, err := scalar(n)
	if err != nil {
		return err
	}
	i, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return valueErrorf(n, "%s is not a whole number", v)
	}
	*w = Whole(i)
	return nil
}

// Bool is true or false, as YAML 1.2 spells them (not yes or on).
type Bool bool

func (b *Bool) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" {
		return valueErrorf(n, "want true or false, got %s", kindName(n))
	}
	v, err := strconv.ParseBool(strings.ToLower(n.Value))
	*b = Bool(v)
	return err
}

// Bytes is a memory size such as 60GiB, 512MiB or 80GB.
type Bytes uint64

// byteUnits are the memory suffixes a scenario accepts, decimal and binary,
// with the Kubernetes quantity spellings (Gi) too.
var byteUnits = map[string]float64{
	"": 1, "B": 1,
	"KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
	"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
	"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40,
}

var bytesRE = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)$`)

func (b *Bytes) UnmarshalYAML(n *yaml.Node) error {
	v, err := scalar(n)
	if err != nil {
		return err
	}
	m := bytesRE.FindStringSubmatch(v)
	if m == nil {
		return valueErrorf(n, "%q is not a size such as 60GiB, 512MiB or 80GB", v)
	}
	unit, ok := byteUnits[m[2]]
	f, perr := strconv.ParseFloat(m[1], 64)
	if !ok || perr != nil || f*unit >= 1<<63 {
		return valueErrorf(n, "%q is not a size such as 60GiB, 512MiB or 80GB", v)
	}
	*b = Bytes(math.Round(f * unit))
	return nil
}

func (b Bytes) MarshalYAML() (any, error) { return fmtBytes(uint64(b)), nil }

var (
	deviceRE     = regexp.MustCompile(`^gpu:([0-9]+)(?:::([0-9]+))?$`)
	migDeviceRE  = regexp.MustCompile(`^mig:([0-9]+)/([0-9]+)$`)
	migDynamicRE = regexp.MustCompile(`^mig:([0-9]+):(.+)$`)
)

// atoi reads a GPU or slot number; one too large for an int is out of
// every range.
func atoi(s string) int {
	i, err := strconv.Atoi(s)
	if err != nil {
		return math.MaxInt
	}
	return i
}

// parseDevice reads gpu:N or gpu:N::R, and with mig also mig:N/S and
// mig:N:<profile>; which GPUs and slots exist is validate's to check.
func parseDevice(v string, mig bool) (DeviceSpec, string) {
	if m := migDynamicRE.FindStringSubmatch(v); mig && m != nil {
		return DeviceSpec{GPU: atoi(m[1]), MIG: true, Dynamic: true, Profile: m[2]}, ""
	}
	if m := migDeviceRE.FindStringSubmatch(v); mig && m != nil {
		return DeviceSpec{GPU: atoi(m[1]), MIG: true, MIGSlot: atoi(m[2])}, ""
	}
	m := deviceRE.FindStringSubmatch(v)
	if m == nil {
		if mig {
			return DeviceSpec{}, fmt.Sprintf("%q is not a device; want gpu:N, gpu:N::R, mig:N/S or mig:N:<profile>", v)
		}
		return DeviceSpec{}, fmt.Sprintf("%q is not a device; want gpu:N or gpu:N::R", v)
	}
	spec := DeviceSpec{GPU: atoi(m[1])}
	if m[2] != "" {
		r := atoi(m[2])
		if r > 1023 {
			return DeviceSpec{}, fmt.Sprintf("%s: replica must be a number from 0 to 1023", v)
		}
		spec.Replicated, spec.Replica = true, r
	}
	return spec, ""
}

func (d *DeviceSpec) UnmarshalYAML(n *yaml.Node) error {
	v, err := scalar(n)
	if err != nil {
		return err
	}
	spec, msg := parseDevice(v, true)
	if msg != "" {
		return valueErrorf(n, "%s", msg)
	}
	*d = spec
	return nil
}

func (d DeviceSpec) MarshalYAML() (any, error) { return d.String(), nil }

// GPURef is a device outside a pod: gpu:N, or gpu:N::R where the field
// says what is wrong with a replica.
type GPURef struct{ DeviceSpec }

func (g *GPURef) UnmarshalYAML(n *yaml.Node) error {
	v, err := scalar(n)
	if err != nil {
		return err
	}
	spec, msg := parseDevice(v, false)
	if msg != "" {
		return valueErrorf(n, "%s", msg)
	}
	g.DeviceSpec = spec
	return nil
}

func (g GPURef) MarshalYAML() (any, error) { return g.String(), nil }

func (s *Steps) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.MappingNode {
		var m struct {
			Duty *DutySpec `yaml:"duty"`
		}
		if err := n.Decode(&m); err != nil {
			return err
		}
		if m.Duty == nil {
			return &valueError{line: n.Line, col: n.Column, kind: n.Kind, sub: "duty", msg: "missing"}
		}
		s.Duty = m.Duty
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		return valueErrorf(n, "want a list, got %s", kindName(n))
	}
	return n.Decode(&s.List)
}

func (s Steps) MarshalYAML() (any, error) {
	if s.Duty != nil {
		return map[string]*DutySpec{"duty": s.Duty}, nil
	}
	return s.List, nil
}

func (l *Levels[T]) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		l.Value = new(T)
		return n.Decode(l.Value)
	}
	if n.Kind != yaml.SequenceNode {
		return valueErrorf(n, "want a list, got %s", kindName(n))
	}
	return n.Decode(&l.List)
}

func (l Levels[T]) MarshalYAML() (any, error) {
	if l.Value != nil {
		return *l.Value, nil
	}
	return l.List, nil
}

func (m *MIGSpec) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		if n.Value != MIGDynamicMode {
			return valueErrorf(n, "%q is not a MIG layout; want a list of profiles, such as [3g.40gb, 2g.20gb], or %s", n.Value, MIGDynamicMode)
		}
		m.Dynamic = true
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		return valueErrorf(n, "want a list, got %s", kindName(n))
	}
	return n.Decode(&m.Profiles)
}

func (m MIGSpec) MarshalYAML() (any, error) {
	if m.Dynamic {
		return MIGDynamicMode, nil
	}
	return m.Profiles, nil
}

// Marshal writes the scenario back as YAML that parses to the same
// Scenario: one line per entry of its lists (pods, unallocated, …), as
// generated scenarios of thousands of pods are written.
func (s *ScenarioSpec) Marshal() ([]byte, error) {
	var doc yaml.Node
	if err := doc.Encode(s); err != nil {
		return nil, err
	}
	for i := 1; i < len(doc.Content); i += 2 {
		if list := doc.Content[i]; list.Kind == yaml.SequenceNode {
			for _, it := range list.Content {
				it.Style = yaml.FlowStyle
			}
		}
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	err := enc.Close()
	return b.Bytes(), err
}
