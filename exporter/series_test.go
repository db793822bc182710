package exporter

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/gpuxray/gpuxray/agent"
	"github.com/gpuxray/gpuxray/collector"
)

// constCollector renders a snapshot as the collector did before it cached
// label pairs: a prometheus.MustNewConstMetric per series and scrape. It is
// the reference the cached rendering must match byte for byte, and it
// spells the families out apart from families.go, which both renderings
// take them from, so that a wrong entry there (a family missing, a value
// or a label set swapped) fails here rather than agreeing with itself.
type constCollector struct{ *Collector }

func (c constCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.src.Snapshot()
	d := c.d
	gauge := func(desc *prometheus.Desc, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, labelValues(lv)...)
	}
	counter := func(desc *prometheus.Desc, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, v, labelValues(lv)...)
	}
	if c.build != nil {
		gauge(d.buildInfo, 1, c.build.Version, c.build.Revision, c.build.GoVersion)
	}
	for _, dev := range s.Devices {
		gpu := strconv.Itoa(dev.GPU)
		gauge(d.deviceInfo, 1, dev.UUID, gpu, dev.Name, dev.MIGProfile, dev.ParentUUID, migMode(dev.Device), dev.DriverVersion, dev.UtilizationSource)
		gauge(d.deviceUp, boolValue(dev.Present), dev.UUID, gpu)
		if dev.HasUtilization {
			gauge(d.deviceUtil, dev.Utilization, dev.UUID, gpu)
		}
		if dev.HasMemory {
			gauge(d.deviceMemUsed, float64(dev.MemoryUsedBytes), dev.UUID, gpu)
			gauge(d.deviceMemTotal, float64(dev.MemoryTotalBytes), dev.UUID, gpu)
		}
		if dev.HasPower {
			gauge(d.devicePower, dev.PowerWatts, dev.UUID, gpu)
		}
		if dev.HasEnergy {
			counter(d.deviceEnergy, dev.EnergyJoules, dev.UUID, gpu)
		}
		if dev.HasGPM {
			gauge(d.deviceSMActive, dev.SMActive, dev.UUID, gpu)
			gauge(d.deviceSMOccupancy, dev.SMOccupancy, dev.UUID, gpu)
			gauge(d.deviceTensorActive, dev.TensorActive, dev.UUID, gpu)
		}
		if dev.HasUnattributedMemory {
			gauge(d.deviceUnattributedMem, float64(dev.UnattributedMemoryBytes), dev.UUID, gpu)
		}
		for w := agent.Window(0); w < agent.NumWindows; w++ {
			wc, win := dev.Counters[w], w.String()
			counter(d.deviceObserved, wc.Observed, dev.UUID, gpu, win)
			counter(d.deviceIdle, wc.Idle, dev.UUID, gpu, win)
			counter(d.deviceUnalloc, wc.Unallocated, dev.UUID, gpu, win)
			counter(d.deviceUnallocActive, wc.UnallocatedActive, dev.UUID, gpu, win)
			counter(d.deviceGap, wc.Gap, dev.UUID, gpu, win)
			counter(d.deviceUnattributed, wc.Unattributed, dev.UUID, gpu, win)
			counter(d.deviceAllocated, wc.Allocated, dev.UUID, gpu, win)
			counter(d.deviceAllocIdle, wc.AllocatedIdle, dev.UUID, gpu, win)
			counter(d.deviceAllocActive, wc.AllocatedActive, dev.UUID, gpu, win)
		}
	}
	for _, a := range s.Allocations {
		gpu := ""
		if a.GPU >= 0 {
			gpu = strconv.Itoa(a.GPU)
		}
		lv := []string{a.UUID, gpu, a.Namespace, a.Pod, a.Container, a.WorkloadKind, a.Workload, a.Model}
		for _, name := range c.extra {
			lv = append(lv, a.ExtraLabels[name])
		}
		if a.Live {
			gauge(d.allocInfo, 1, append(slices.Clip(lv), a.Resource, strconv.FormatBool(a.Shared), a.Attribution, strconv.FormatBool(a.Stale),
				a.DRA.ClaimNamespace, a.DRA.Claim, a.DRA.Driver, a.DRA.Pool, a.DRA.Device,
				a.Scheduling.PriorityClass, priorityValue(a.Scheduling), a.Scheduling.Queue, a.Scheduling.ClusterQueue)...)
		}
		for w := agent.Window(0); w < agent.NumWindows; w++ {
			ac, wlv := a.Counters[w], append(slices.Clip(lv), w.String())
			counter(d.allocSeconds, ac.Allocated, wlv...)
			counter(d.allocIdle, ac.Idle, wlv...)
			counter(d.allocActive, ac.Active, wlv...)
		}
		if a.HasIdleStreak {
			gauge(d.allocStreak, a.IdleStreak, lv...)
		}
		if a.HasMemory {
			gauge(d.allocMemory, float64(a.MemoryUsedBytes), lv...)
		}
	}
	if s.Overflowed > 0 {
		counter(d.allocOverflow, float64(s.Overflowed))
	}
	for _, src := range s.Sources {
		gauge(d.sourceUp, boolValue(src.Up), src.Name)
		for reason, n := range src.Errors {
			counter(d.sourceErrors, float64(n), src.Name, reason)
		}
	}
}

// exposition renders c as a scrape does, in the given format, through a
// pedantic registry (which also checks every series against its Desc).
func exposition(t *testing.T, c prometheus.Collector, format expfmt.Format) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	enc := expfmt.NewEncoder(&b, format)
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	if cl, ok := enc.(expfmt.Closer); ok {
		if err := cl.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// richSnapshot is testSnapshot with every optional series present, a MIG
// device, a device NVML does not know, extra labels, bad label values and an
// overflow.
func richSnapshot() *agent.Snapshot {
	s := testSnapshot()
	dev := s.Devices[0]
	dev.UUID, dev.GPU, dev.MIGProfile, dev.ParentUUID = "MIG-1", 0, "3g.40gb", uuid0
	dev.HasGPM, dev.SMActive, dev.SMOccupancy, dev.TensorActive = true, 0.5, 0.25, 0.125
	dev.HasUnattributedMemory, dev.UnattributedMemoryBytes = true, 4096
	dev.Present = false
	s.Devices = append(s.Devices, dev)
	a := s.Allocations[0]
	a.WorkloadKind, a.Workload, a.Model = "Deployment", "train", "llama-\xff"
	a.ExtraLabels = map[string]string{"team": "vision", "cost_center": strings.Repeat("c", 300)}
	a.Shared, a.Stale = true, true
	s.Allocations = append(s.Allocations, &agent.AllocationSnapshot{
		AllocationInfo: &agent.AllocationInfo{
			UUID: "MIG-1", GPU: 0, Namespace: "ml", Pod: "infer-0", Container: "srv", Resource: "nvidia.com/mig-3g.40gb",
			ExtraLabels: map[string]string{"team": "nlp"},
			Scheduling:  collector.Scheduling{PriorityClass: "serving", Priority: -5, HasPriority: true, Queue: "team-a", ClusterQueue: "cq-a"},
		},
		Attribution: "process", Live: true,
	}, &agent.AllocationSnapshot{
		AllocationInfo: &agent.AllocationInfo{
			UUID: uuid0, GPU: 0, Namespace: "ml", Pod: "dra-0", Container: "main", Resource: "gpu.nvidia.com",
			DRA: collector.DRADevice{ClaimNamespace: "ml", Claim: "dra-0-gpu", Driver: "gpu.nvidia.com", Pool: "node-1", Device: "gpu-0"},
		},
		Attribution: "device", Live: true,
	})
	s.Overflowed = 3
	return s
}

// TestCollectorMatchesConstMetrics: the cached rendering is the const
// metrics' one, byte for byte, in both text formats, scrape after scrape
// (the second scrape renders from the cache).
func TestCollectorMatchesConstMetrics(t *testing.T) {
	t.Parallel()
	for name, s := range map[string]*agent.Snapshot{"test": testSnapshot(), "rich": richSnapshot(), "empty": {}} {
		for _, format := range []expfmt.Format{expfmt.NewFormat(expfmt.TypeTextPlain), expfmt.NewFormat(expfmt.TypeOpenMetrics)} {
			c := NewCollector(fixed{s}, &BuildInfo{Version: "1.0.0", Revision: "abc", GoVersion: "go1.26"}, WithExtraLabels("team", "cost_center"))
			want := exposition(t, constCollector{c}, format)
			for i := range 2 {
				if got := exposition(t, c, format); got != want {
					t.Errorf("%s snapshot, %s, scrape %d: got\n%s\nwant\n%s", name, format, i, got, want)
				}
			}
		}
	}
}

// snapshots is a SnapshotSource whose snapshot the test replaces.
type snapshots struct {
	p atomic.Pointer[agent.Snapshot]
}

func (s *snapshots) Snapshot() *agent.Snapshot { return s.p.Load() }

func churnAlloc(i int) *agent.AllocationSnapshot {
	return &agent.AllocationSnapshot{
		AllocationInfo: &agent.AllocationInfo{
			UUID: uuid0, GPU: 0, Namespace: "batch", Pod: fmt.Sprintf("job-%d", i), Container: "main",
			Resource: "nvidia.com/gpu", ExtraLabels: map[string]string{"team": "t" + strconv.Itoa(i%7)},
		},
		Attribution: "device", Live: i%3 != 0,
	}
}

// TestLabelCacheChurn: 1,000 allocations come and go, 20 at a time; the
// cache holds the live ones only, and what it renders is the const metrics'
// rendering.
func TestLabelCacheChurn(t *testing.T) {
	t.Parallel()
	src := &snapshots{}
	c := NewCollector(src, nil, WithExtraLabels("team"))
	ref := constCollector{c}
	const total, live = 1000, 20
	text := expfmt.NewFormat(expfmt.TypeTextPlain)
	for first := 0; first <= total; first += 5 {
		s := testSnapshot()
		s.Allocations = nil
		for i := first; i < min(first+live, total); i++ {
			s.Allocations = append(s.Allocations, churnAlloc(i))
		}
		src.p.Store(s)
		got := exposition(t, c, text)
		if n := len(c.labels.allocs); n != len(s.Allocations) {
			t.Fatalf("allocations %d–%d: the cache holds %d allocations, want %d", first, first+len(s.Allocations), n, len(s.Allocations))
		}
		if n := len(c.labels.devices); n != len(s.Devices) {
			t.Fatalf("the cache holds %d devices, want %d", n, len(s.Devices))
		}
		if first%100 == 0 {
			if want := exposition(t, ref, text); got != want {
				t.Fatalf("allocations from %d: got\n%s\nwant\n%s", first, got, want)
			}
		}
	}
	src.p.Store(&agent.Snapshot{})
	exposition(t, c, text)
	if len(c.labels.allocs) != 0 || len(c.labels.devices) != 0 {
		t.Errorf("after an empty snapshot the cache holds %d allocations and %d devices, want none", len(c.labels.allocs), len(c.labels.devices))
	}
}

// TestCollectorLabelChange: a label value that changes (workload, model,
// an extra label, stale, the pod's priority or queue, the device's driver) shows in the next scrape, and
// the old value is gone.
func TestCollectorLabelChange(t *testing.T) {
	t.Parallel()
	src := &snapshots{}
	c := NewCollector(src, nil, WithExtraLabels("team"))
	text := expfmt.NewFormat(expfmt.TypeTextPlain)
	s := testSnapshot()
	s.Allocations[0].Workload, s.Allocations[0].Model = "train", "llama"
	s.Allocations[0].ExtraLabels = map[string]string{"team": "vision"}
	src.p.Store(s)
	before := exposition(t, c, text)
	for _, want := range []string{`workload="train"`, `model="llama"`, `team="vision"`, `stale="false"`, `driver_version="550.54.15"`} {
		if !strings.Contains(before, want) {
			t.Fatalf("first scrape has no %s:\n%s", want, before)
		}
	}
	changes := []struct {
		change    func(*agent.Snapshot)
		old, want string
	}{
		{func(s *agent.Snapshot) { s.Allocations[0].Workload = "train-v2" }, `workload="train"`, `workload="train-v2"`},
		{func(s *agent.Snapshot) { s.Allocations[0].Model = "mistral" }, `model="llama"`, `model="mistral"`},
		{func(s *agent.Snapshot) { s.Allocations[0].ExtraLabels = map[string]string{"team": "nlp"} }, `team="vision"`, `team="nlp"`},
		{func(s *agent.Snapshot) { s.Allocations[0].Stale = true }, `stale="false"`, `stale="true"`},
		{func(s *agent.Snapshot) {
			s.Allocations[0].Scheduling = collector.Scheduling{PriorityClass: "low", Priority: 10, HasPriority: true}
		}, `priority=""`, `priority="10"`},
		{func(s *agent.Snapshot) { s.Allocations[0].Scheduling.Queue = "team-b" }, `,queue=""`, `,queue="team-b"`},
		{func(s *agent.Snapshot) { s.Devices[0].DriverVersion = "560.1" }, `driver_version="550.54.15"`, `driver_version="560.1"`},
	}
	for _, tc := range changes {
		t.Run(tc.want, func(t *testing.T) {
			next := *src.Snapshot()
			next.Devices = slices.Clone(next.Devices)
			next.Allocations = slices.Clone(next.Allocations)
			for i, a := range next.Allocations { // shared with the snapshot before
				rec, info := *a, *a.AllocationInfo
				rec.AllocationInfo = &info
				next.Allocations[i] = &rec
			}
			tc.change(&next)
			src.p.Store(&next)
			got := exposition(t, c, text)
			if !strings.Contains(got, tc.want) || strings.Contains(got, tc.old) {
				t.Errorf("after the change to %s the scrape has %s: %v, %s: %v\n%s", tc.want, tc.want, strings.Contains(got, tc.want), tc.old, strings.Contains(got, tc.old), got)
			}
			if want := exposition(t, constCollector{c}, text); got != want {
				t.Errorf("after the change to %s: got\n%s\nwant\n%s", tc.want, got, want)
			}
			if len(c.labels.allocs) != len(next.Allocations) || len(c.labels.devices) != len(next.Devices) {
				t.Errorf("the cache holds %d allocations and %d devices, want %d and %d", len(c.labels.allocs), len(c.labels.devices), len(next.Allocations), len(next.Devices))
			}
		})
	}
}

// TestCollectorConcurrentScrapes: scrapes of changing snapshots at once
// (run with -race) each render their own snapshot whole.
func TestCollectorConcurrentScrapes(t *testing.T) {
	t.Parallel()
	src := &snapshots{}
	c := NewCollector(src, nil, WithExtraLabels("team"))
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	snap := func(first int) *agent.Snapshot {
		s := testSnapshot()
		s.Allocations = nil
		for i := first; i < first+10; i++ {
			s.Allocations = append(s.Allocations, churnAlloc(i))
		}
		return s
	}
	src.p.Store(snap(0))
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 50 {
				mfs, err := reg.Gather()
				if err != nil {
					t.Error(err)
					return
				}
				for _, mf := range mfs {
					if mf.GetName() == "gpuxray_allocated_seconds_total" && len(mf.GetMetric()) != 10*int(agent.NumWindows) {
						t.Errorf("%d series of %s, want %d", len(mf.GetMetric()), mf.GetName(), 10*agent.NumWindows)
					}
				}
			}
		})
	}
	for i := range 100 {
		src.p.Store(snap(i))
	}
	wg.Wait()
}
