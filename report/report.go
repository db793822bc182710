package report

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"golang.org/x/sync/errgroup"
)

// SchemaVersion is the version of the JSON report's schema (docs/report.md).
const SchemaVersion = 1

// Config is what one report covers and how it reads Prometheus.
type Config struct {
	// Prometheus is the server's URL, shown in the report.
	Prometheus string
	// End is the end of the range (now when zero), to the second; the steps
	// are counted back from it.
	End time.Time
	// Range is the length of the range; a whole number of Steps.
	Range time.Duration
	// Step is the resolution of every figure: rates are taken over each step
	// and summed. It divides an hour.
	Step time.Duration
	// Location is the clock of the heatmap.
	Location *time.Location
	// Peak, when set, is the peak schedule the agents are expected to use
	// (--peak.schedule); the report follows the agents' window label and
	// warns where it disagrees. PeakSchedule is its spelling.
	Peak         func(time.Time) bool
	PeakSchedule string
	// Top is how many workloads and models are listed.
	Top int
	// Quantile of per-step shortfall at peak that decides the verdict.
	Quantile float64
	// SLOWait is the target p95 wait by priority class ("*": every
	// class without one of its own): --slo.wait.
	SLOWait map[string]time.Duration
	Hints   HintConfig
	// Prices are the GPU types' prices (--price, --price.file, --currency);
	// without any, the report has no money figures.
	Prices PriceSheet
	// Timeout bounds each query: the server is asked to give up a tenth
	// earlier, and a query it does not answer at all is tried once more,
	// halved, before the report gives up.
	Timeout time.Duration
	// MaxPoints is the most steps one range query asks for (Prometheus
	// refuses more than 11,000); smaller chunks are tried when the server
	// refuses, times out, or answers more than MaxAnswerBytes.
	MaxPoints int
	// MaxAnswerBytes bounds each answer's body; the caller's HTTP client
	// applies it (LimitAnswers), Build names it in errors.
	MaxAnswerBytes int64
	// MaxSeries is the most series one query may return: the report holds
	// each on the whole grid.
	MaxSeries int
	// Concurrency is how many queries run at once.
	Concurrency int
	// Progress, when set, is called as query steps complete.
	Progress func(done, total int)
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// DefaultConfig is a week at a 5-minute resolution.
func DefaultConfig() Config {
	return Config{
		Range:          7 * 24 * time.Hour,
		Step:           5 * time.Minute,
		Location:       time.UTC,
		Top:            10,
		Quantile:       0.95,
		Hints:          HintConfig{ActivityThreshold: 0.2, MemoryBound: 0.5, Headroom: 1.1, MinHours: 1, MinShare: 0.05},
		Timeout:        2 * time.Minute,
		MaxPoints:      10000,
		MaxAnswerBytes: 32 << 20,
		MaxSeries:      50000,
		Concurrency:    4,
	}
}

// Validate checks the configuration; its errors are one sentence each.
func (c Config) Validate() error {
	switch {
	case c.Step < time.Minute || time.Hour%c.Step != 0:
		return fmt.Errorf("step %s must divide an hour and be at least 1m (1m, 5m, 15m, 1h, …)", c.Step)
	case c.Range <= 0 || c.Range%c.Step != 0:
		return fmt.Errorf("range %s must be a positive whole number of steps (%s)", c.Range, c.Step)
	case c.Range/c.Step > 1_000_000:
		return fmt.Errorf("range %s at step %s is more than a million steps; take a longer step", c.Range, c.Step)
	case c.Top < 1:
		return fmt.Errorf("top %d must be at least 1", c.Top)
	case !(c.Quantile > 0 && c.Quantile <= 1):
		return fmt.Errorf("quantile %g must be in (0, 1]", c.Quantile)
	case c.Timeout <= 0:
		return fmt.Errorf("timeout %s must be positive", c.Timeout)
	case c.MaxPoints < 1 || c.MaxPoints > 11000:
		return fmt.Errorf("max points %d must be from 1 to 11000", c.MaxPoints)
	case c.MaxAnswerBytes < 1<<10:
		return fmt.Errorf("max answer bytes %d must be at least 1024", c.MaxAnswerBytes)
	case c.MaxSeries < 1:
		return fmt.Errorf("max series %d must be at least 1", c.MaxSeries)
	case c.Location == nil:
		return errors.New("no time zone")
	case badSLO(c.SLOWait) != "":
		return errors.New(badSLO(c.SLOWait))
	case !(c.Hints.ActivityThreshold > 0 && c.Hints.ActivityThreshold <= 1):
		return fmt.Errorf("activity threshold %g must be in (0, 1]", c.Hints.ActivityThreshold)
	case !(c.Hints.MemoryBound > 0 && c.Hints.MemoryBound <= 1):
		return fmt.Errorf("memory-bound share %g must be in (0, 1]", c.Hints.MemoryBound)
	case c.Hints.Headroom < 1:
		return fmt.Errorf("headroom %g must be at least 1", c.Hints.Headroom)
	case !(c.Hints.MinHours >= 0 && c.Hints.MinHours <= 24*366):
		return fmt.Errorf("hints' minimum time %gh must be from 0 to a year", c.Hints.MinHours)
	case !(c.Hints.MinShare >= 0 && c.Hints.MinShare <= 1):
		return fmt.Errorf("hints' minimum share %g must be in [0, 1]", c.Hints.MinShare)
	}
	return nil
}

// Report is the capacity report: what docs/report.md documents, field by field.
type Report struct {
	SchemaVersion int       `json:"schema_version"`
	GeneratedAt   time.Time `json:"generated_at"`
	Prometheus    string    `json:"prometheus"`
	Range         Range     `json:"range"`
	Funnel        struct {
		All  Funnel `json:"all"`
		Peak Funnel `json:"peak"`
	} `json:"funnel"`
	Verdict      Verdict    `json:"verdict"`
	Demand       Demand     `json:"demand"`
	Queue        Queue      `json:"queue"`
	TopWorkloads []Workload `json:"top_workloads"`
	TopModels    []Model    `json:"top_models"`
	// Ranking is what the top workloads and models are ranked by: idle
	// GPU-hours at peak (BasisPeak), or over all hours (BasisAll) when the
	// range has no peak time.
	Ranking       string          `json:"ranking"`
	Hints         []Hint          `json:"hints"`
	HintsWithheld HintsWithheld   `json:"hints_withheld"`
	Heatmap       Heatmap         `json:"heatmap"`
	Timeline      []TimelinePoint `json:"timeline"`
	Missing       []Missing       `json:"missing"`
	// Warnings are every warning; WarningsBySection the same, by the part
	// of the report each concerns.
	Warnings          []string          `json:"warnings"`
	WarningsBySection WarningsBySection `json:"warnings_by_section"`
	// Cost is the funnel in currency, Money the prices, levers and
	// shortfall (nil without prices); Forecast the buy date (value.go).
	Cost     *Cost    `json:"cost"`
	Money    *Money   `json:"money"`
	Forecast Forecast `json:"forecast"`
}

// WarningsBySection are the report's warnings by the part each concerns.
type WarningsBySection struct {
	// Range: the range and its peak time (a --peak.schedule that disagrees).
	Range []string `json:"range"`
	// Queue: the queue X-ray (no PriorityClass values).
	Queue []string `json:"queue"`
	// Data: the data read (a step under two scrapes, values refused,
	// Prometheus' own warnings); the missing spans sit beside them.
	Data []string `json:"data"`
}

// Sections of the warnings.
const (
	sectionRange = "range"
	sectionQueue = "queue"
	sectionData  = "data"
)

// warn adds a warning to Warnings and to its section.
func (r *Report) warn(section, w string) {
	r.Warnings = append(r.Warnings, w)
	switch section {
	case sectionRange:
		r.WarningsBySection.Range = append(r.WarningsBySection.Range, w)
	case sectionQueue:
		r.WarningsBySection.Queue = append(r.WarningsBySection.Queue, w)
	default:
		r.WarningsBySection.Data = append(r.WarningsBySection.Data, w)
	}
}

// Range is the time the report covers.
type Range struct {
	Start       time.Time `json:"start"`
	End         time.Time `json:"end"`
	StepSeconds float64   `json:"step_seconds"`
	Hours       float64   `json:"hours"`
	PeakHours   float64   `json:"peak_hours"`
	Timezone    string    `json:"timezone"`
	// PeakSchedule is the schedule checked against the agents' windows, "" if none.
	PeakSchedule string `json:"peak_schedule"`
}

// Heatmap is the mean number of idle allocated GPUs by weekday (0 = Sunday)
// and hour of day, on the report's clock; null where there is no data.
type Heatmap struct {
	Timezone          string          `json:"timezone"`
	IdleAllocatedGPUs [7][24]*float64 `json:"idle_allocated_gpus"`
}

// TimelinePoint is a bucket of the range: means over the time of its steps
// that the agents' data covers.
type TimelinePoint struct {
	Start           time.Time `json:"start"`
	OwnedGPUs       float64   `json:"owned_gpus"`
	AllocatedGPUs   float64   `json:"allocated_gpus"`
	ActiveGPUs      float64   `json:"active_gpus"`
	ReclaimableGPUs float64   `json:"reclaimable_gpus"`
	PendingGPUs     float64   `json:"pending_gpus"`
	Peak            float64   `json:"peak"`
	// Covered is the share of the bucket the agents' data covers; the means
	// are over that part, and all 0 where it is 0.
	Covered float64 `json:"covered"`
	// DemandCovered is the share kube-state-metrics covers too: PendingGPUs
	// is over that part, and unknown (0) where it is 0.
	DemandCovered float64 `json:"demand_covered"`
}

// Missing is a span without data from one source and instance.
type Missing struct {
	Source   string    `json:"source"`
	Instance string    `json:"instance"`
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
}

// The counters read, by window; S is the step. The GPU-capacity figures
// (the funnel, reclaimable capacity, the heatmap) read the devices' own
// counters of whole GPUs, which count a GPU's time once however many pods
// share it (a GPU in MIG mode adds up its instances); the workload figures
// read the allocations' pod-seconds.
const (
	wholeGPUs          = ` * on (cluster, job, instance, uuid) group_left () max by (cluster, job, instance, uuid) (gpuxray_device_info{parent_uuid=""}))`
	qObserved          = `sum by (window) (increase(gpuxray_device_observed_seconds_total[S])` + wholeGPUs
	qAllocated         = `sum by (window) (increase(gpuxray_device_allocated_seconds_total[S])` + wholeGPUs
	qActive            = `sum by (window) (increase(gpuxray_device_allocated_active_seconds_total[S])` + wholeGPUs
	qIdle              = `sum by (window) (increase(gpuxray_device_allocated_idle_seconds_total[S])` + wholeGPUs
	qUnallocated       = `sum by (window) (increase(gpuxray_device_unallocated_seconds_total[S])` + wholeGPUs
	qUnallocatedActive = `sum by (window) (increase(gpuxray_device_unallocated_active_seconds_total[S])` + wholeGPUs
	wl                 = `namespace, workload_kind, workload, model`
	qWLAllocated       = `sum by (` + wl + `, window) (increase(gpuxray_allocated_seconds_total[S]))`
	qWLActive          = `sum by (` + wl + `, window) (increase(gpuxray_allocated_active_seconds_total[S]))`
	qWLIdle            = `sum by (` + wl + `, window) (increase(gpuxray_allocated_idle_seconds_total[S]))`
	qWLStreak          = `max by (` + wl + `) (max_over_time(gpuxray_allocation_idle_streak_seconds[S]))`
	qWLMemory          = `max by (` + wl + `) (max_over_time(gpuxray_allocation_memory_used_bytes[S]))`
	qWLMemoryTotal     = `max by (` + wl + `) (max_over_time(gpuxray_allocation_memory_used_bytes[S]) * 0 + on (cluster, job, instance, uuid) group_left () max by (cluster, job, instance, uuid) (gpuxray_device_memory_total_bytes * on (cluster, job, instance, uuid) group_left () max by (cluster, job, instance, uuid) (gpuxray_device_info{parent_uuid=""})))`
	// qPending is the rules' priority_class:gpuxray_pending_gpus:sum
	// (GPUs requested by unscheduled Pending pods, plus those of
	// unallocated DRA claims), summed over clusters and classes.
	qPending = `sum(` + qQueuePodsBase + `)`
	qKSM     = `count by (instance) (count_over_time(kube_pod_status_phase[S]))`
	qNodes   = `max by (instance) (count_over_time(gpuxray_device_observed_seconds_total[S]))`
)

// qCovered is the time of each step the agents' data covers: the longest
// any device was watched in it (observed + gap = the agent's running time).
// Taken with increase() like the counters it divides, so a step the data
// covers in part still yields the right mean number of GPUs.
const qCovered = `max(sum by (cluster, job, instance, uuid) (increase(gpuxray_device_observed_seconds_total[S]) + increase(gpuxray_device_sample_gap_seconds_total[S])))`

// qWLGPU says, per workload, whether it held a shared GPU and which whole
// GPUs (by product name) it held: the `or` keeps allocations whose device
// has no name (MIG instances), with name "".
const qWLGPU = `max by (` + wl + `, shared, name) ((max_over_time(gpuxray_allocation_info[S]) * on (cluster, job, instance, uuid) group_left (name) max by (cluster, job, instance, uuid, name) (gpuxray_device_info{parent_uuid=""})) or max_over_time(gpuxray_allocation_info[S]))`

// Build reads the range from Prometheus and computes the report. It
// returns ctx's error as soon as ctx is done, whatever it was doing.
func Build(ctx context.Context, api API, c Config) (*Report, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	end := c.End
	if end.IsZero() {
		end = now()
	}
	// Not rounded to the step: data that began after the last step boundary
	// (minutes after Prometheus started) would fall outside the range.
	end = end.Truncate(time.Second)
	g := grid{start: end.Add(-c.Range), step: c.Step, n: int(c.Range / c.Step)}
	type job struct {
		expr   string
		offset time.Duration
		// signed: its values may be negative (a PriorityClass's value).
		signed bool
		out    []series
	}
	S := model.Duration(c.Step).String()
	jobs := []*job{{expr: qNodes}, {expr: qObserved}, {expr: qAllocated}, {expr: qActive}, {expr: qIdle}, {expr: qUnallocated}, {expr: qUnallocatedActive},
		{expr: qWLAllocated}, {expr: qWLActive}, {expr: qWLIdle}, {expr: qWLStreak}, {expr: qWLMemory}, {expr: qWLMemoryTotal},
		// A gauge is read at the middle of each step.
		{expr: qPending, offset: -c.Step / 2}, {expr: qKSM}, {expr: qCovered}, {expr: qWLGPU},
		// Pending demand at each step's end too, for the steps in which
		// kube-state-metrics' data begins (atEdges).
		{expr: qPending}}
	// The queue X-ray (queue.go), from jobs[queueFirst] on, then its
	// waiters' gauges at each step's end (atEdges) from jobs[edgeFirst].
	queueFirst := len(jobs)
	for _, qq := range queueQueries {
		j := &job{expr: qq.expr, signed: qq.signed}
		if qq.gauge {
			j.offset = -c.Step / 2
		}
		jobs = append(jobs, j)
	}
	edgeFirst := len(jobs)
	for _, qq := range queueQueries {
		if qq.edge {
			jobs = append(jobs, &job{expr: qq.expr, signed: qq.signed})
		}
	}
	// The work and money figures' queries (value.go).
	var vi valueInput
	valueJobs := valueJobs(c, &vi)
	q := &querier{api: api, base: c.Prometheus, timeout: c.Timeout, maxPoints: c.MaxPoints, maxSeries: c.MaxSeries, maxAnswerBytes: c.MaxAnswerBytes,
		g: g, progress: c.Progress, total: (len(jobs) + len(valueJobs)) * g.n}
	// The first query alone: an unreachable server is one error, not one per query.
	eg, ectx := errgroup.WithContext(ctx)
	eg.SetLimit(max(1, c.Concurrency))
	var err error
	if jobs[0].out, err = q.queryRange(ctx, strings.ReplaceAll(jobs[0].expr, "[S]", "["+S+"]"), 0, false); err != nil {
		return nil, err
	}
	for _, j := range jobs[1:] {
		eg.Go(func() error {
			var err error
			j.out, err = q.queryRange(ectx, strings.ReplaceAll(j.expr, "[S]", "["+S+"]"), j.offset, j.signed)
			return err
		})
	}
	startValue(ectx, eg, q, valueJobs)
	if err := eg.Wait(); err != nil {
		return nil, err
	}
	ksmHas := has(jobs[14].out, g.n)
	ksmBegins := begins(ksmHas)
	in := input{g: g, loc: c.Location, nodes: jobs[0].out,
		observed: byWindow(jobs[1].out, g.n), allocated: byWindow(jobs[2].out, g.n), active: byWindow(jobs[3].out, g.n),
		idle: byWindow(jobs[4].out, g.n), unallocated: byWindow(jobs[5].out, g.n), unallocatedActive: byWindow(jobs[6].out, g.n),
		wlAllocated: jobs[7].out, wlActive: jobs[8].out, wlIdle: jobs[9].out, wlStreak: jobs[10].out, wlMemory: jobs[11].out, wlMemoryTotal: jobs[12].out,
		pending: atEdges(jobs[13].out, jobs[17].out, ksmBegins), ksm: jobs[14].out, covered: coveredSeconds(jobs[15].out, byWindow(jobs[1].out, g.n), g), wlGPU: jobs[16].out, value: vi}
	in.demandCovered = slices.Clone(in.covered)
	if len(in.ksm) > 0 {
		for i, ok := range ksmHas {
			if !ok {
				in.demandCovered[i] = 0
			}
		}
	}
	e := edgeFirst
	for k, qq := range queueQueries {
		out := jobs[queueFirst+k].out
		if qq.edge {
			out = atEdges(out, jobs[e].out, ksmBegins)
			e++
		}
		*qq.dst(&in.queue) = out
	}
	if len(in.nodes) == 0 {
		return nil, fmt.Errorf("%w (%s to %s): is the agent scraped by this Prometheus, and is the range right?", ErrNoData,
			g.start.Format(time.RFC3339), end.Format(time.RFC3339))
	}
	if sum(in.covered) == 0 {
		return nil, fmt.Errorf("%w (%s to %s): the agents' series hold too few samples for a rate over a %s step; wait for more scrapes or take a longer --step", ErrNoData,
			g.start.Format(time.RFC3339), end.Format(time.RFC3339), c.Step)
	}
	// Computed aside, so that a signal ends the report at once however
	// long the computing takes.
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	done := make(chan *Report, 1)
	go func() { done <- compute(in, c) }()
	var r *Report
	select {
	case r = <-done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if err := refineMissing(ctx, q, r); err != nil {
		return nil, err
	}
	r.GeneratedAt = now().UTC()
	r.Prometheus = c.Prometheus
	for _, w := range q.allWarnings() {
		r.warn(sectionData, w)
	}
	if n := finite(reflect.ValueOf(r)); n > 0 {
		r.warn(sectionData, fmt.Sprintf("%d figures came out not finite and were set to 0: a bug; please report it with this report's JSON", n))
	}
	return r, nil
}

// has marks the steps in which kube-state-metrics has samples (qKSM).
func has(ksm []series, n int) []bool {
	out := make([]bool, n)
	for _, s := range ksm {
		for i, v := range s.vals {
			out[i] = out[i] || !math.IsNaN(v) && v > 0
		}
	}
	return out
}

// begins marks the steps in which kube-state-metrics' data begins: it has
// samples in the step and none in the step before. The range's first step
// is not one: its data may well have begun before the range.
func begins(has []bool) []bool {
	out := make([]bool, len(has))
	for i := 1; i < len(has); i++ {
		out[i] = has[i] && !has[i-1]
	}
	return out
}

// atEdges is a gauge read at each step's middle (mid), but at the step's
// end (end) where edge marks the step: a source whose data begins within a
// step has nothing to say at its middle when its first scrape came after
// it, and a step the agents' data covers would read as nothing waiting.
func atEdges(mid, end []series, edge []bool) []series {
	if !slices.Contains(edge, true) {
		return mid
	}
	idx := map[model.Fingerprint]int{}
	var out []series
	put := func(s series, atEnd bool) {
		fp := s.labels.Fingerprint()
		j, ok := idx[fp]
		if !ok {
			x := series{labels: s.labels, vals: make([]float64, len(edge))}
			for i := range x.vals {
				x.vals[i] = math.NaN()
			}
			j, idx[fp] = len(out), len(out)
			out = append(out, x)
		}
		for i, v := range s.vals {
			if edge[i] == atEnd {
				out[j].vals[i] = v
			}
		}
	}
	for _, s := range mid {
		put(s, false)
	}
	for _, s := range end {
		put(s, true)
	}
	sortSeries(out)
	return out
}

// finite sets every float of v that is not finite to 0 and counts them: a
// last guard so that the JSON report can always be written.
func finite(v reflect.Value) int {
	n := 0
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			n += finite(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				n += finite(v.Field(i))
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			n += finite(v.Index(i))
		}
	case reflect.Float64:
		if f := v.Float(); (math.IsNaN(f) || math.IsInf(f, 0)) && v.CanSet() {
			v.SetFloat(0)
			n++
		}
	}
	return n
}

// windowed is a cluster sum split by window, per step, in seconds.
type windowed struct{ peak, offpeak []float64 }

func (w windowed) all(i int) float64 { return w.peak[i] + w.offpeak[i] }

func byWindow(ss []series, n int) windowed {
	w := windowed{peak: make([]float64, n), offpeak: make([]float64, n)}
	for _, s := range ss {
		dst := w.offpeak
		if s.labels["window"] == "peak" {
			dst = w.peak
		}
		for i, v := range s.vals {
			if !math.IsNaN(v) {
				dst[i] += v
			}
		}
	}
	return w
}

// input is everything read from Prometheus, on the grid.
type input struct {
	g                                                                 grid
	loc                                                               *time.Location
	nodes                                                             []series
	observed, allocated, active, idle, unallocated, unallocatedActive windowed
	wlAllocated, wlActive, wlIdle, wlStreak, wlMemory, wlMemoryTotal  []series
	pending, ksm                                                      []series
	// covered is the seconds of each step the agents' data covers;
	// demandCovered the part of it kube-state-metrics covers too, where
	// pending demand is known (all of it without kube-state-metrics).
	covered, demandCovered []float64
	wlGPU                  []series
	queue                  queueInput
	value                  valueInput
}

// coveredSeconds is, per step, the time the agents' data covers: what
// qCovered says, at most the step; the whole step where it says nothing but
// GPU time was observed (a server whose increase() cannot see the gap
// counter still gets a report).
func coveredSeconds(ss []series, observed windowed, g grid) []float64 {
	out := sumSeries(ss, g.n)
	for i := range out {
		out[i] = min(out[i], g.step.Seconds())
		if out[i] <= 0 && observed.all(i) > 0 {
			out[i] = g.step.Seconds()
		}
	}
	return out
}

// coveredHours is the hours the data covers, all of them and at peak.
func coveredHours(peak, covered []float64) (all, atPeak float64) {
	for i, c := range covered {
		all += c / 3600
		atPeak += peak[i] * c / 3600
	}
	return all, atPeak
}

// perCovered is seconds of GPU time over the covered seconds of the same
// step: a mean number of GPUs, 0 where nothing is covered.
func perCovered(seconds, covered float64) float64 { return ratio(seconds, covered) }

func sum(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s
}

func compute(in input, c Config) *Report {
	g := in.g
	stepS := g.step.Seconds()
	stepH := g.step.Hours()
	r := &Report{SchemaVersion: SchemaVersion}
	r.Range = Range{Start: g.start, End: g.at(g.n - 1), StepSeconds: stepS, Hours: float64(g.n) * stepH,
		Timezone: c.Location.String(), PeakSchedule: c.PeakSchedule}

	// The peak share of each step, as the agents' window label says.
	peak := make([]float64, g.n)
	var mismatch int
	var firstMismatch time.Time
	for i := range peak {
		if o := in.observed.all(i); o > 0 {
			peak[i] = in.observed.peak[i] / o
			if c.Peak != nil {
				if s := scheduleShare(c.Peak, g.at(i).Add(-g.step), g.step); math.Abs(s-peak[i]) > 0.5 {
					if mismatch == 0 {
						firstMismatch = g.at(i).Add(-g.step)
					}
					mismatch++
				}
			}
		}
	}
	if mismatch > 0 {
		r.warn(sectionRange, fmt.Sprintf("the agents' peak window disagrees with --peak.schedule %q in %d of %d steps (first at %s); the report follows the agents' window label",
			c.PeakSchedule, mismatch, g.n, firstMismatch.In(c.Location).Format("Mon 2006-01-02 15:04 MST")))
	}

	// The funnel.
	f := &r.Funnel
	for i := 0; i < g.n; i++ {
		f.All.Owned += in.observed.all(i)
		f.All.Allocated += in.allocated.all(i)
		f.All.Active += in.active.all(i)
		f.All.Idle += in.idle.all(i)
		f.All.Unallocated += in.unallocated.all(i)
		f.All.UnallocatedActive += in.unallocatedActive.all(i)
		f.Peak.Owned += in.observed.peak[i]
		f.Peak.Allocated += in.allocated.peak[i]
		f.Peak.Active += in.active.peak[i]
		f.Peak.Idle += in.idle.peak[i]
		f.Peak.Unallocated += in.unallocated.peak[i]
		f.Peak.UnallocatedActive += in.unallocatedActive.peak[i]
	}
	f.All.Hours, f.Peak.Hours = coveredHours(peak, in.covered)
	for _, fu := range []*Funnel{&f.All, &f.Peak} {
		fu.Owned /= 3600
		fu.Allocated /= 3600
		fu.Active /= 3600
		fu.Idle /= 3600
		fu.Unallocated /= 3600
		fu.UnallocatedActive /= 3600
	}
	r.Range.PeakHours = f.Peak.Hours

	// Demand against reclaimable capacity, step by step.
	pending := sumSeries(in.pending, g.n)
	steps := make([]DemandStep, g.n)
	for i := range steps {
		cov := in.demandCovered[i]
		steps[i] = DemandStep{Hours: cov / 3600, Peak: peak[i], Pending: pending[i],
			IdleAllocated: perCovered(in.idle.all(i), cov), Unallocated: perCovered(in.unallocated.all(i), cov), UnallocatedActive: perCovered(in.unallocatedActive.all(i), cov)}
	}
	r.Queue = computeQueue(in, in.queue, peak, queueConfig{top: c.Top, slo: c.SLOWait, available: len(in.ksm) > 0})
	r.Demand, r.Verdict = judge(steps, r.Queue, c.Quantile, len(in.ksm) > 0)
	if !r.Queue.PrioritiesKnown && r.Queue.All.PendingGPUHours > 0 {
		r.warn(sectionQueue, "no gpuxray_priority_class_value series (agents before the queue X-ray, or RBAC that denies them priorityclasses): every pod ranks 0, so no waiter could preempt a holder")
	}

	// Workloads and models, ranked at peak or, when the range has none,
	// over all hours as the verdict is.
	ws := workloads(in)
	ws, c.Hints = withValue(ws, in, c, peak)
	r.Ranking = r.Demand.Basis
	r.TopWorkloads = TopBy(ws, c.Top, r.Ranking)
	r.TopModels = ModelsBy(ws, c.Top, r.Ranking)
	r.Hints, r.HintsWithheld = WithholdHints(TopBy(ws, len(ws), r.Ranking), c.Hints.Over(f.All.Hours))
	addMoney(r, in, c, ws)
	r.Forecast = forecast(g, peak, in.demandCovered, demandByType(r, in, steps), c.Quantile)

	// The heatmap and the timeline.
	var idleSum, covSum [7][24]float64
	r.Heatmap.Timezone = c.Location.String()
	for i := 0; i < g.n; i++ {
		if in.covered[i] <= 0 {
			continue
		}
		mid := g.at(i).Add(-g.step / 2).In(c.Location)
		idleSum[mid.Weekday()][mid.Hour()] += in.idle.all(i)
		covSum[mid.Weekday()][mid.Hour()] += in.covered[i]
	}
	for d := range idleSum {
		for h := range idleSum[d] {
			if covSum[d][h] > 0 {
				v := idleSum[d][h] / covSum[d][h]
				r.Heatmap.IdleAllocatedGPUs[d][h] = &v
			}
		}
	}
	// The timeline spans the data, not the range: a few minutes of a week
	// are drawn as minutes, in buckets of their own steps.
	first, last := -1, -1
	for i, c := range in.covered {
		if c > 0 {
			last = i
			if first < 0 {
				first = i
			}
		}
	}
	span := last - first + 1
	per := max(1, span/500)
	for per > 1 && time.Hour%(g.step*time.Duration(per)) != 0 && (g.step*time.Duration(per))%time.Hour != 0 {
		per++
	}
	for i := first; first >= 0 && i <= last; i += per {
		r.Timeline = append(r.Timeline, timelinePoint(in, steps, i, min(i+per, last+1)))
	}

	if w := stepWarning(in.nodes, g); w != "" {
		r.warn(sectionData, w)
	}
	if all, both := sum(in.covered)/3600, sum(in.demandCovered)/3600; len(in.ksm) > 0 && all-both >= 1.0/60 {
		r.warn(sectionData, fmt.Sprintf("kube-state-metrics was silent for %s of the %s the agents cover: pending demand, the queue and the verdict are judged over the %s both cover",
			humanDuration(all-both), humanDuration(all), humanDuration(both)))
	}

	// What is missing.
	r.Missing = append(missing("gpuxray", in.nodes, g), missing("kube-state-metrics", in.ksm, g)...)
	if r.Missing == nil {
		r.Missing = []Missing{}
	}
	if r.Hints == nil {
		r.Hints = []Hint{}
	}
	r.Warnings = nonNil(r.Warnings)
	ws2 := &r.WarningsBySection
	ws2.Range, ws2.Queue, ws2.Data = nonNil(ws2.Range), nonNil(ws2.Queue), nonNil(ws2.Data)
	return r
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// stepWarning says when the step is under twice the scrape interval seen
// in qNodes (samples of a series per step): increase() needs two samples
// in a step, so such steps lose data. The interval is the steps with data
// over their samples; "" when the step is long enough.
func stepWarning(nodes []series, g grid) string {
	var steps, samples float64
	for _, s := range nodes {
		for _, v := range s.vals {
			if !math.IsNaN(v) && v > 0 {
				steps++
				samples += v
			}
		}
	}
	if samples == 0 {
		return ""
	}
	interval := time.Duration(float64(g.step) * steps / samples).Round(time.Second)
	// 5% for scrapes that drift against the step boundaries.
	if float64(g.step) >= 2*float64(interval)*0.95 {
		return ""
	}
	suggest := time.Hour
	for _, d := range []time.Duration{1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30} {
		if d*time.Minute >= 2*interval {
			suggest = d * time.Minute
			break
		}
	}
	return fmt.Sprintf("the %s step holds fewer than two samples of each series (a scrape every %s): rates over it miss data; take --step %s or more",
		model.Duration(g.step), model.Duration(interval), model.Duration(suggest))
}

// timelinePoint is steps [from, to) as one bucket: means over the time the
// agents' data covers in it, so a bucket partly without data does not read
// as fewer GPUs.
func timelinePoint(in input, steps []DemandStep, from, to int) TimelinePoint {
	p := TimelinePoint{Start: in.g.at(from).Add(-in.g.step)}
	var cov, dcov float64
	for j := from; j < to; j++ {
		c, dc := in.covered[j], in.demandCovered[j]
		cov += c
		dcov += dc
		p.OwnedGPUs += in.observed.all(j)
		p.AllocatedGPUs += in.allocated.all(j)
		p.ActiveGPUs += in.active.all(j)
		p.ReclaimableGPUs += steps[j].Reclaimable() * c
		p.PendingGPUs += steps[j].Pending * dc
		p.Peak += steps[j].Peak * c
	}
	p.OwnedGPUs, p.AllocatedGPUs, p.ActiveGPUs = ratio(p.OwnedGPUs, cov), ratio(p.AllocatedGPUs, cov), ratio(p.ActiveGPUs, cov)
	p.ReclaimableGPUs, p.PendingGPUs, p.Peak = ratio(p.ReclaimableGPUs, cov), ratio(p.PendingGPUs, dcov), ratio(p.Peak, cov)
	bucket := float64(to-from) * in.g.step.Seconds()
	p.Covered, p.DemandCovered = cov/bucket, dcov/bucket
	return p
}

// scheduleShare is the share of [from, from+d) inside the schedule,
// probed every minute.
func scheduleShare(in func(time.Time) bool, from time.Time, d time.Duration) float64 {
	n, k := 0, 0
	for t := from.Add(30 * time.Second); t.Before(from.Add(d)); t = t.Add(time.Minute) {
		n++
		if in(t) {
			k++
		}
	}
	return ratio(float64(k), float64(n))
}

func sumSeries(ss []series, n int) []float64 {
	out := make([]float64, n)
	for _, s := range ss {
		for i, v := range s.vals {
			if !math.IsNaN(v) {
				out[i] += v
			}
		}
	}
	return out
}

// maxRefined is how many missing spans are given their data's real times:
// each costs two small queries.
const maxRefined = 64

// refineMissing moves each missing span's ends from step boundaries to the
// real times of the data around it: its last sample before the span and
// its first after. A span Prometheus cannot say this of keeps its step
// boundaries, and a warning says so; after a query it does not answer at
// all, the rest do too. Only ctx ending is an error.
func refineMissing(ctx context.Context, q *querier, r *Report) error {
	kept := max(0, len(r.Missing)-maxRefined)
	var why error
	for i := range r.Missing[:len(r.Missing)-kept] {
		m := &r.Missing[i]
		var sel string
		switch m.Source {
		case "gpuxray":
			sel = fmt.Sprintf("gpuxray_device_observed_seconds_total{instance=%s}", strconv.Quote(m.Instance))
		case "kube-state-metrics":
			sel = fmt.Sprintf(`kube_pod_status_phase{instance=%s, phase="Pending"}`, strconv.Quote(m.Instance))
		default:
			continue
		}
		if errors.Is(why, errNoAnswer) {
			kept++
			continue
		}
		start, end := m.Start, m.End
		var err error
		if !m.Start.Equal(q.g.start) {
			// The last sample of the step before the span.
			start, err = q.sampleTime(ctx, sel, m.Start, false)
		}
		if err == nil && !m.End.Equal(q.g.at(q.g.n-1)) {
			// The first sample of the step after it.
			end, err = q.sampleTime(ctx, sel, m.End.Add(q.g.step), true)
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			kept++
			why = err
			continue
		}
		m.Start, m.End = start, end
	}
	if kept > 0 {
		w := fmt.Sprintf("%d of the %d spans without data %s given to the %s step", kept, len(r.Missing), plural(kept, "is", "are"), model.Duration(q.g.step))
		if why != nil {
			w += fmt.Sprintf(": Prometheus did not say when their data stopped and began (%v)", why)
		} else {
			w += fmt.Sprintf(": only the first %d are given to the second", maxRefined)
		}
		r.warn(sectionData, w)
	}
	return nil
}

// missing lists, per instance seen in the range, the spans it has no data.
func missing(source string, ss []series, g grid) []Missing {
	var out []Missing
	for _, s := range ss {
		inst := string(s.labels["instance"])
		for i := 0; i < g.n; {
			if !math.IsNaN(s.vals[i]) {
				i++
				continue
			}
			j := i
			for j < g.n && math.IsNaN(s.vals[j]) {
				j++
			}
			out = append(out, Missing{Source: source, Instance: inst, Start: g.at(i).Add(-g.step), End: g.at(j - 1)})
			i = j
		}
	}
	return out
}

// gpus marks each workload of qWLGPU's series that held a shared GPU, and
// collects the names of its GPUs.
func gpus(ss []series, get func(wlKey) *Workload) {
	for _, s := range ss {
		if !slices.ContainsFunc(s.vals, func(v float64) bool { return !math.IsNaN(v) }) {
			continue
		}
		w := get(keyOf(s.labels))
		w.SharedGPU = w.SharedGPU || s.labels["shared"] == "true"
		if n := string(s.labels["name"]); n != "" && !slices.Contains(w.GPUNames, n) {
			w.GPUNames = append(w.GPUNames, n)
			slices.Sort(w.GPUNames)
		}
	}
}

type wlKey struct{ ns, kind, name, model string }

func keyOf(m model.Metric) wlKey {
	return wlKey{string(m["namespace"]), string(m["workload_kind"]), string(m["workload"]), string(m["model"])}
}

// workloads folds the per-workload series into Workloads.
func workloads(in input) []Workload {
	g := in.g
	by := map[wlKey]*Workload{}
	alloc := map[wlKey][]float64{}
	act := map[wlKey][]float64{}
	get := func(k wlKey) *Workload {
		w := by[k]
		if w == nil {
			w = &Workload{Namespace: k.ns, Kind: k.kind, Name: k.name, Model: k.model, GPUNames: []string{}}
			by[k] = w
			alloc[k], act[k] = make([]float64, g.n), make([]float64, g.n)
		}
		return w
	}
	add := func(ss []series, all, pk func(*Workload) *float64, perStep map[wlKey][]float64) {
		for _, s := range ss {
			k := keyOf(s.labels)
			w := get(k)
			isPeak := s.labels["window"] == "peak"
			for i, v := range s.vals {
				if math.IsNaN(v) {
					continue
				}
				*all(w) += v / 3600
				if isPeak {
					*pk(w) += v / 3600
				}
				if perStep != nil {
					perStep[k][i] += v
				}
			}
		}
	}
	add(in.wlAllocated, func(w *Workload) *float64 { return &w.Allocated }, func(w *Workload) *float64 { return &w.PeakAllocated }, alloc)
	add(in.wlActive, func(w *Workload) *float64 { return &w.Active }, func(w *Workload) *float64 { return &w.PeakActive }, act)
	add(in.wlIdle, func(w *Workload) *float64 { return &w.Idle }, func(w *Workload) *float64 { return &w.PeakIdle }, nil)
	maxOf := func(ss []series, f func(*Workload) *float64) {
		for _, s := range ss {
			w := get(keyOf(s.labels))
			for _, v := range s.vals {
				if !math.IsNaN(v) {
					*f(w) = max(*f(w), v)
				}
			}
		}
	}
	maxOf(in.wlStreak, func(w *Workload) *float64 { return &w.LongestIdleStreakSeconds })
	maxOf(in.wlMemory, func(w *Workload) *float64 { return &w.PeakMemoryBytes })
	maxOf(in.wlMemoryTotal, func(w *Workload) *float64 { return &w.MemoryTotalBytes })
	gpus(in.wlGPU, get)
	out := make([]Workload, 0, len(by))
	for k, w := range by {
		for i := range alloc[k] {
			if a := alloc[k][i]; a >= g.step.Seconds()/2 {
				w.PeakActivity = max(w.PeakActivity, act[k][i]/a)
				w.ActivityHours += in.covered[i] / 3600
			}
		}
		w.finish()
		out = append(out, *w)
	}
	return out
}
