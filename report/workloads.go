package report

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Usage is the GPU time of one workload or model, in GPU-hours, over the
// whole range and at peak.
type Usage struct {
	Allocated     float64 `json:"allocated_gpu_hours"`
	Idle          float64 `json:"idle_gpu_hours"`
	Active        float64 `json:"active_gpu_hours"`
	PeakAllocated float64 `json:"peak_allocated_gpu_hours"`
	PeakIdle      float64 `json:"peak_idle_gpu_hours"`
	PeakActive    float64 `json:"peak_active_gpu_hours"`
	// Efficiency is Active/Allocated; PeakEfficiency the same at peak.
	Efficiency     float64 `json:"efficiency"`
	PeakEfficiency float64 `json:"peak_efficiency"`
	// LongestIdleStreakSeconds is the longest an allocation stayed idle
	// without a break (max_over_time of gpuxray_allocation_idle_streak_seconds).
	LongestIdleStreakSeconds float64 `json:"longest_idle_streak_seconds"`
}

func (u *Usage) add(o Usage) {
	u.Allocated += o.Allocated
	u.Idle += o.Idle
	u.Active += o.Active
	u.PeakAllocated += o.PeakAllocated
	u.PeakIdle += o.PeakIdle
	u.PeakActive += o.PeakActive
	u.LongestIdleStreakSeconds = max(u.LongestIdleStreakSeconds, o.LongestIdleStreakSeconds)
}

func (u *Usage) finish() {
	u.Efficiency = ratio(u.Active, u.Allocated)
	u.PeakEfficiency = ratio(u.PeakActive, u.PeakAllocated)
}

// Workload is one owning workload (with its model) and what it did with its GPUs.
type Workload struct {
	Namespace string `json:"namespace"`
	Kind      string `json:"workload_kind"`
	Name      string `json:"workload"`
	Model     string `json:"model"`
	Usage
	// PeakActivity is the highest utilization (active/allocated) of any
	// step in which the workload held at least half a GPU; ActivityHours
	// the time the data covers in those steps, what PeakActivity and the
	// right-sizing hints rest on.
	PeakActivity  float64 `json:"peak_activity"`
	ActivityHours float64 `json:"activity_hours"`
	// PeakMemoryBytes is the most memory one of its allocations used;
	// MemoryTotalBytes that allocation's whole GPU's (0 for MIG instances
	// and shared GPUs' unknowns).
	PeakMemoryBytes  float64 `json:"peak_memory_bytes"`
	MemoryTotalBytes float64 `json:"memory_total_bytes"`
	// SharedGPU is whether it held a shared GPU (time-slicing or MPS,
	// gpuxray_allocation_info{shared="true"}) in the range.
	SharedGPU bool `json:"shared_gpu"`
	// GPUNames are the product names of the whole GPUs it held, sorted.
	GPUNames []string `json:"gpu_names"`
	// Work is what its GPU time bought and cost (value.go).
	Work
}

// ID is namespace/workload, or namespace/(none) for pods with no owner.
func (w Workload) ID() string {
	n := w.Name
	if n == "" {
		n = "(no owner)"
	}
	return w.Namespace + "/" + n
}

// Model is the GPU time of one model across workloads.
type Model struct {
	Model string `json:"model"`
	Usage
	Workloads int `json:"workloads"`
	// Work is what its GPU time bought and cost (value.go).
	Work
}

// TopByPeakIdle sorts workloads by idle GPU-hours at peak, most first (then
// by name, so the order is stable), and keeps n.
func TopByPeakIdle(ws []Workload, n int) []Workload { return TopBy(ws, n, BasisPeak) }

// TopBy sorts workloads by idle GPU-hours on basis (BasisPeak: at peak;
// BasisAll: over all hours, for a range with no peak time), most first,
// and keeps n.
func TopBy(ws []Workload, n int, basis string) []Workload {
	s := slices.Clone(ws)
	slices.SortFunc(s, func(a, b Workload) int {
		return cmp.Or(cmp.Compare(b.idleOn(basis), a.idleOn(basis)), cmp.Compare(b.Idle, a.Idle), cmp.Compare(a.ID(), b.ID()), cmp.Compare(a.Model, b.Model))
	})
	return s[:min(n, len(s))]
}

// idleOn is the idle GPU-hours a ranking on basis sorts by.
func (u Usage) idleOn(basis string) float64 {
	if basis == BasisAll {
		return u.Idle
	}
	return u.PeakIdle
}

// Models groups workloads by model ("" is "(unknown)") and sorts them as
// TopByPeakIdle does.
func Models(ws []Workload, n int) []Model { return ModelsBy(ws, n, BasisPeak) }

// ModelsBy is Models ranked as TopBy ranks on basis.
func ModelsBy(ws []Workload, n int, basis string) []Model {
	by := map[string]*Model{}
	for _, w := range ws {
		name := w.Model
		if name == "" {
			name = "(unknown)"
		}
		m := by[name]
		if m == nil {
			m = &Model{Model: name}
			by[name] = m
		}
		m.add(w.Usage)
		m.Workloads++
	}
	out := make([]Model, 0, len(by))
	for _, m := range by {
		m.finish()
		out = append(out, *m)
	}
	slices.SortFunc(out, func(a, b Model) int {
		return cmp.Or(cmp.Compare(b.idleOn(basis), a.idleOn(basis)), cmp.Compare(b.Idle, a.Idle), cmp.Compare(a.Model, b.Model))
	})
	return out[:min(n, len(out))]
}

// HintConfig sets when a right-sizing hint is given.
type HintConfig struct {
	// ActivityThreshold: a workload whose activity never exceeds it is
	// reported (default 0.2).
	ActivityThreshold float64
	// MemoryBound: a workload using at least this share of its GPU's memory
	// while its efficiency stays under ActivityThreshold is memory-bound but
	// compute-idle (default 0.5).
	MemoryBound float64
	// Headroom multiplies peak memory and activity before fitting them into
	// a smaller slice (default 1.1).
	Headroom float64
	// MinHours is the least ActivityHours a workload needs for a hint
	// (default 1): minutes of a job warming up say nothing of how it runs.
	// MinShare raises it to that share of the time the data covers
	// (default 0.05), applied by Over: an hour of a month is a passer-by.
	MinHours, MinShare float64

	// types are the cluster's GPU types, for model hints (advice.go).
	types []gpuTypeInfo
}

// Over is c for a report whose data covers coveredHours: MinHours raised
// to MinShare of them.
func (c HintConfig) Over(coveredHours float64) HintConfig {
	c.MinHours = max(c.MinHours, c.MinShare*coveredHours)
	c.MinShare = 0
	return c
}

// HintsWithheld says what right-sizing hints the report held back for lack
// of data.
type HintsWithheld struct {
	// Workloads is how many workloads a hint applied to whose
	// ActivityHours were under MinHours.
	Workloads int `json:"workloads"`
	// MinHours is the activity time a hint needed (HintConfig.Over's).
	MinHours float64 `json:"min_hours"`
	// LongestHours is the most ActivityHours of those workloads.
	LongestHours float64 `json:"longest_hours"`
}

// Hint kinds.
const (
	HintMIG         = "mig"
	HintShared      = "shared"
	HintMemoryBound = "memory_bound"
	HintLowActivity = "low_activity"
)

// Hint is one right-sizing suggestion for a workload.
type Hint struct {
	Namespace string `json:"namespace"`
	Kind      string `json:"workload_kind"`
	Name      string `json:"workload"`
	Model     string `json:"model"`
	// Hint is one of mig, shared, memory_bound, low_activity,
	// smaller_gpu, quantize, consolidate, precision.
	Hint string `json:"hint"`
	// Profile is the smallest MIG profile that fits (mig only).
	Profile string `json:"profile,omitempty"`
	Message string `json:"message"`
	// HintMath is its arithmetic (advice.go).
	HintMath
}

// migProfiles are the MIG profiles of a GPU with 7 compute and 8 memory
// slices (A100, H100, H200, B200), smallest first, without the whole GPU.
var migProfiles = []struct{ compute, memory int }{{1, 1}, {2, 2}, {3, 4}, {4, 4}}

// migFamilies are the GPUs whose MIG has the 7 compute and 8 memory slices
// of migProfiles, by a part of their product name (GH200 and GB200 contain
// H200 and B200). A30 (4 slices) and GPUs without MIG (L4, L40S, A10, T4)
// are not among them.
var migFamilies = []string{"A100", "A800", "H100", "H800", "H200", "H20", "B200", "B300"}

// migCapable is whether every one of the GPUs named has migProfiles' MIG;
// false when none is known.
func migCapable(names []string) bool {
	if len(names) == 0 {
		return false
	}
	for _, n := range names {
		if !slices.ContainsFunc(migFamilies, func(f string) bool { return strings.Contains(n, f) }) {
			return false
		}
	}
	return true
}

// Hints gives each workload at most one right-sizing hint from its peak
// memory and activity: the first that applies of a MIG slice it fits (on a
// GPU with MIG), memory-bound, share the GPU (not to one that already
// shares a GPU), low activity. They overlap (a workload that fits a 1g
// slice could also share a GPU and is idle): the first is the one to act on.
//
// A workload whose ActivityHours are under c.MinHours gets none: see
// WithholdHints.
func Hints(ws []Workload, c HintConfig) []Hint {
	out, _ := WithholdHints(ws, c)
	return out
}

// WithholdHints is Hints, and what it held back: the workloads a hint
// applied to whose activity was measured over less than c.MinHours.
func WithholdHints(ws []Workload, c HintConfig) ([]Hint, HintsWithheld) {
	var out []Hint
	held := HintsWithheld{MinHours: c.MinHours}
	for _, w := range ws {
		h, ok := hintFor(w, c)
		switch {
		case !ok:
		case w.ActivityHours < c.MinHours-1.0/3600: // a second's rounding is enough
			held.Workloads++
			held.LongestHours = max(held.LongestHours, w.ActivityHours)
		default:
			out = append(out, h)
		}
	}
	return out, held
}

func hintFor(w Workload, c HintConfig) (Hint, bool) {
	if w.Allocated <= 0 {
		return Hint{}, false
	}
	if h, ok, done := modelHint(w, c); done {
		return h, ok
	}
	h := func(kind, profile, format string, a ...any) (Hint, bool) {
		return Hint{Namespace: w.Namespace, Kind: w.Kind, Name: w.Name, Model: w.Model, Hint: kind, Profile: profile, Message: fmt.Sprintf(format, a...)}, true
	}
	act, mem, total := w.PeakActivity*c.Headroom, w.PeakMemoryBytes*c.Headroom, w.MemoryTotalBytes
	if total > 0 && migCapable(w.GPUNames) {
		for _, p := range migProfiles {
			if act <= float64(p.compute)/7 && mem <= total*float64(p.memory)/8 {
				name := migName(p.compute, p.memory, total)
				return h(HintMIG, name, "peak memory %s of %s and activity at most %.0f%% fit a MIG %s slice (%d/7 of the compute)",
					bytesString(w.PeakMemoryBytes), bytesString(total), 100*w.PeakActivity, name, p.compute)
			}
		}
	}
	if total > 0 && w.PeakMemoryBytes >= c.MemoryBound*total && w.Efficiency < c.ActivityThreshold {
		return h(HintMemoryBound, "", "uses %s of %s memory but %.0f%% of the compute: memory-bound and compute-idle; a quantized or smaller model would free the GPU",
			bytesString(w.PeakMemoryBytes), bytesString(total), 100*w.Efficiency)
	}
	if total > 0 && !w.SharedGPU && act <= 0.5 && mem <= total/2 {
		return h(HintShared, "", "peak memory %s and activity at most %.0f%% leave room for a second workload: share the GPU (time-slicing or MPS)",
			bytesString(w.PeakMemoryBytes), 100*w.PeakActivity)
	}
	if w.PeakActivity < c.ActivityThreshold {
		return h(HintLowActivity, "", "activity never exceeded %.0f%% (at most %.0f%%)", 100*c.ActivityThreshold, 100*w.PeakActivity)
	}
	return Hint{}, false
}

// migName names a profile as NVIDIA does: compute slices and memory in GB
// of a GPU with total bytes ("1g.10gb" on an 80 GB GPU).
func migName(compute, memory int, total float64) string {
	gib := math.Round(total / (1 << 30))
	return fmt.Sprintf("%dg.%.0fgb", compute, math.Round(gib*float64(memory)/8))
}

func bytesString(b float64) string {
	return fmt.Sprintf("%.1f GiB", b/(1<<30))
}
