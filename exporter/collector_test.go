package exporter

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/agent"
	"github.com/gpuxray/gpuxray/collector"
)

type fixed struct{ s *agent.Snapshot }

func (f fixed) Snapshot() *agent.Snapshot { return f.s }

const uuid0 = "GPU-00000000-0000-0000-0000-000000000000"

func testSnapshot() *agent.Snapshot {
	s := &agent.Snapshot{
		Polls: 3,
		Devices: []agent.DeviceSnapshot{{
			Device: collector.Device{
				UUID: uuid0, GPU: 0, Name: "NVIDIA H100 80GB HBM3", DriverVersion: "550.54.15",
				UtilizationSource: collector.UtilizationSamples,
			},
			Present:        true,
			HasUtilization: true, Utilization: 0.25,
			DeviceGauges: collector.DeviceGauges{
				HasMemory: true, MemoryUsedBytes: 1 << 30, MemoryTotalBytes: 80 << 30,
				HasPower: true, PowerWatts: 123.5,
				HasEnergy: true, EnergyJoules: 1000,
			},
		}},
		Allocations: []*agent.AllocationSnapshot{
			{AllocationInfo: &agent.AllocationInfo{UUID: uuid0, GPU: 0, Namespace: "ml", Pod: "train-0", Container: "main", Resource: "nvidia.com/gpu"},
				Attribution: "device", Live: true, HasIdleStreak: true, IdleStreak: 42, HasMemory: true, MemoryUsedBytes: 512 << 20},
			{AllocationInfo: &agent.AllocationInfo{UUID: "GPU-11111111-0000-0000-0000-000000000000", GPU: -1, Namespace: "ml", Pod: "ended", Container: "main",
				Resource: "nvidia.com/gpu"}, Attribution: "device", Live: false},
		},
		Sources: []agent.SourceSnapshot{
			{Name: "kubelet", Up: false, Errors: map[string]uint64{"unavailable": 2}},
			{Name: "nvml", Up: true, Errors: map[string]uint64{}},
		},
	}
	s.Devices[0].Counters[agent.Offpeak] = agent.DeviceCounters{Observed: 100, Idle: 60, Unallocated: 10, UnallocatedActive: 1.5, Gap: 2}
	s.Devices[0].Counters[agent.Peak] = agent.DeviceCounters{Observed: 5}
	s.Allocations[0].Counters[agent.Offpeak] = agent.AllocationCounters{Allocated: 90, Idle: 55, Active: 20}
	s.Allocations[1].Counters[agent.Peak] = agent.AllocationCounters{Allocated: 7, Idle: 7}
	return s
}

func TestCollectorOutput(t *testing.T) {
	t.Parallel()
	c := NewCollector(fixed{testSnapshot()}, &BuildInfo{Version: "1.0.0", Revision: "abc", GoVersion: "go1.26"})
	want := `
# HELP gpuxray_allocated_idle_seconds_total Allocated time whose samples were below the idle threshold.
# TYPE gpuxray_allocated_idle_seconds_total counter
gpuxray_allocated_idle_seconds_total{container="main",gpu="",model="",namespace="ml",pod="ended",uuid="GPU-11111111-0000-0000-0000-000000000000",window="offpeak",workload="",workload_kind=""} 0
gpuxray_allocated_idle_seconds_total{container="main",gpu="",model="",namespace="ml",pod="ended",uuid="GPU-11111111-0000-0000-0000-000000000000",window="peak",workload="",workload_kind=""} 7
gpuxray_allocated_idle_seconds_total{container="main",gpu="0",model="",namespace="ml",pod="train-0",uuid="GPU-00000000-0000-0000-0000-000000000000",window="offpeak",workload="",workload_kind=""} 55
gpuxray_allocated_idle_seconds_total{container="main",gpu="0",model="",namespace="ml",pod="train-0",uuid="GPU-00000000-0000-0000-0000-000000000000",window="peak",workload="",workload_kind=""} 0
# HELP gpuxray_allocation_info A device allocated to a container, as the kubelet lists it; stale="true" while the kubelet cannot be read; claim_namespace, claim, driver, pool and dra_device name a DRA claim's device; priority_class and priority are the pod's, queue and cluster_queue its Kueue LocalQueue and ClusterQueue.
# TYPE gpuxray_allocation_info gauge
gpuxray_allocation_info{attribution="device",claim="",claim_namespace="",cluster_queue="",container="main",dra_device="",driver="",gpu="0",model="",namespace="ml",pod="train-0",pool="",priority="",priority_class="",queue="",resource="nvidia.com/gpu",shared="false",stale="false",uuid="GPU-00000000-0000-0000-0000-000000000000",workload="",workload_kind=""} 1
# HELP gpuxray_allocation_idle_streak_seconds How long the allocation has been idle without a break.
# TYPE gpuxray_allocation_idle_streak_seconds gauge
gpuxray_allocation_idle_streak_seconds{container="main",gpu="0",model="",namespace="ml",pod="train-0",uuid="GPU-00000000-0000-0000-0000-000000000000",workload="",workload_kind=""} 42
# HELP gpuxray_device_info GPU or MIG device identity; mig_mode is enabled or disabled on a whole GPU, empty on a MIG instance; utilization_source says where busy ratios come from (samples, gpm, none).
# TYPE gpuxray_device_info gauge
gpuxray_device_info{driver_version="550.54.15",gpu="0",mig_mode="disabled",mig_profile="",name="NVIDIA H100 80GB HBM3",parent_uuid="",utilization_source="samples",uuid="GPU-00000000-0000-0000-0000-000000000000"} 1
# HELP gpuxray_device_sample_gap_seconds_total Time between samples that no sample covered; neither idle nor busy.
# TYPE gpuxray_device_sample_gap_seconds_total counter
gpuxray_device_sample_gap_seconds_total{gpu="0",uuid="GPU-00000000-0000-0000-0000-000000000000",window="offpeak"} 2
gpuxray_device_sample_gap_seconds_total{gpu="0",uuid="GPU-00000000-0000-0000-0000-000000000000",window="peak"} 0
# HELP gpuxray_source_errors_total Failed source calls, by reason.
# TYPE gpuxray_source_errors_total counter
gpuxray_source_errors_total{reason="unavailable",source="kubelet"} 2
# HELP gpuxray_source_up Whether the last read of the source succeeded.
# TYPE gpuxray_source_up gauge
gpuxray_source_up{source="kubelet"} 0
gpuxray_source_up{source="nvml"} 1
# HELP gpuxray_build_info Build information of the running gpuxray.
# TYPE gpuxray_build_info gauge
gpuxray_build_info{goversion="go1.26",revision="abc",version="1.0.0"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"gpuxray_allocated_idle_seconds_total", "gpuxray_allocation_info", "gpuxray_allocation_idle_streak_seconds",
		"gpuxray_device_info", "gpuxray_device_sample_gap_seconds_total", "gpuxray_source_errors_total",
		"gpuxray_source_up", "gpuxray_build_info"); err != nil {
		t.Fatal(err)
	}
	// 1 build + 25 device (7 gauges with up, 9 counters × 2 windows) + 9
	// live allocation (info, 3 counters × 2, streak, memory) + 6 ended
	// allocation (counters only) + 3 source series.
	if n := testutil.CollectAndCount(c); n != 44 {
		t.Errorf("collected %d metrics, want 44", n)
	}
}

func TestCollectorLint(t *testing.T) {
	t.Parallel()
	c := NewCollector(fixed{testSnapshot()}, &BuildInfo{Version: "1", Revision: "r", GoVersion: "go"})
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

func TestCollectorEmptySnapshot(t *testing.T) {
	t.Parallel()
	c := NewCollector(fixed{&agent.Snapshot{}}, nil)
	if n := testutil.CollectAndCount(c); n != 0 {
		t.Errorf("an empty snapshot rendered %d metrics, want 0", n)
	}
}

func TestHandler(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(fixed{testSnapshot()}, nil))
	ready := false
	h := NewHandler(reg, "/metrics", func() bool { return ready }, zap.NewNop(), DefaultMaxRequests)
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}
	tests := []struct {
		path     string
		ready    bool
		code     int
		contains string
	}{
		{"/healthz", false, 200, "ok"},
		{"/readyz", false, 503, "waiting for the first poll"},
		{"/readyz", true, 200, "ok"},
		{"/metrics", true, 200, `gpuxray_device_power_watts{gpu="0",uuid="GPU-00000000-0000-0000-0000-000000000000"} 123.5`},
		{"/", true, 200, `href="/metrics"`},
		{"/nope", true, 404, ""},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("GET %s ready=%v", tc.path, tc.ready), func(t *testing.T) {
			ready = tc.ready
			code, body := get(tc.path)
			if code != tc.code || !strings.Contains(body, tc.contains) {
				t.Errorf("GET %s (ready=%v) = %d %q, want %d containing %q", tc.path, tc.ready, code, body, tc.code, tc.contains)
			}
		})
	}
}

// TestCollectorBadLabelValues: names, models and pod labels come from
// outside the process; MustNewConstMetric panics on invalid UTF-8, and a
// 10,000-character value would blow up every series. Each is made valid and
// capped at render time.
func TestCollectorBadLabelValues(t *testing.T) {
	t.Parallel()
	s := testSnapshot()
	a := s.Allocations[0]
	a.Pod = "train-\xff\xfe"
	a.Model = strings.Repeat("m", 10000)
	a.Namespace = strings.Repeat("é", 200) // 400 bytes, cut at a character
	c := NewCollector(fixed{s}, nil)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := false
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				v := l.GetValue()
				if !utf8.ValidString(v) || len(v) > MaxLabelBytes {
					t.Fatalf("%s{%s=%q…}: not valid UTF-8 of at most %d bytes", mf.GetName(), l.GetName(), v[:min(len(v), 20)], MaxLabelBytes)
				}
				if l.GetName() == "pod" && v == "train-\uFFFD" {
					seen = true
				}
			}
		}
	}
	if !seen {
		t.Error("the pod with invalid UTF-8 is not exported with its bytes replaced")
	}
}

// TestAllocationInfoDRA: a DRA allocation's info series names its claim,
// driver, pool and device; its counters carry the same labels as a device
// plugin's.
func TestAllocationInfoDRA(t *testing.T) {
	t.Parallel()
	s := &agent.Snapshot{Allocations: []*agent.AllocationSnapshot{{
		AllocationInfo: &agent.AllocationInfo{
			UUID: uuid0, GPU: 0, Namespace: "ml", Pod: "train-0", Container: "main", Resource: "gpu.nvidia.com",
			DRA: collector.DRADevice{ClaimNamespace: "ml", Claim: "train-0-gpu", Driver: "gpu.nvidia.com", Pool: "node-1", Device: "gpu-0"},
		},
		Attribution: "device", Live: true,
	}}}
	s.Allocations[0].Counters[agent.Offpeak] = agent.AllocationCounters{Allocated: 3}
	c := NewCollector(fixed{s}, nil)
	want := `
# HELP gpuxray_allocation_info A device allocated to a container, as the kubelet lists it; stale="true" while the kubelet cannot be read; claim_namespace, claim, driver, pool and dra_device name a DRA claim's device; priority_class and priority are the pod's, queue and cluster_queue its Kueue LocalQueue and ClusterQueue.
# TYPE gpuxray_allocation_info gauge
gpuxray_allocation_info{attribution="device",claim="train-0-gpu",claim_namespace="ml",cluster_queue="",container="main",dra_device="gpu-0",driver="gpu.nvidia.com",gpu="0",model="",namespace="ml",pod="train-0",pool="node-1",priority="",priority_class="",queue="",resource="gpu.nvidia.com",shared="false",stale="false",uuid="GPU-00000000-0000-0000-0000-000000000000",workload="",workload_kind=""} 1
# HELP gpuxray_allocated_seconds_total Observed time the device was allocated to the container.
# TYPE gpuxray_allocated_seconds_total counter
gpuxray_allocated_seconds_total{container="main",gpu="0",model="",namespace="ml",pod="train-0",uuid="GPU-00000000-0000-0000-0000-000000000000",window="offpeak",workload="",workload_kind=""} 3
gpuxray_allocated_seconds_total{container="main",gpu="0",model="",namespace="ml",pod="train-0",uuid="GPU-00000000-0000-0000-0000-000000000000",window="peak",workload="",workload_kind=""} 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "gpuxray_allocation_info", "gpuxray_allocated_seconds_total"); err != nil {
		t.Error(err)
	}
}
