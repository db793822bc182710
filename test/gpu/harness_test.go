package gpu

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.uber.org/zap"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpuxray/gpuxray/agent"
	"github.com/gpuxray/gpuxray/collector"
	"github.com/gpuxray/gpuxray/collector/kubelet"
	"github.com/gpuxray/gpuxray/collector/nvml"
	"github.com/gpuxray/gpuxray/collector/sim"
)

// The one pod the fake kubelet lists, holding GPU 0.
const (
	podNamespace = "gpu-check"
	podName      = "load"
	podContainer = "load"
)

// probe is the engine's device source: the real reader, whose reading of the
// checked GPU it keeps for the poll's record.
type probe struct {
	reader *nvml.Reader
	uuid   string

	mu   sync.Mutex
	last collector.DeviceReading
	ok   bool
	errs []string
}

func (p *probe) Read(ctx context.Context) (collector.DeviceSnapshot, error) {
	snap, err := p.reader.Read(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ok, p.errs = false, nil
	if err != nil {
		p.errs = append(p.errs, err.Error())
	}
	for _, e := range snap.Errors {
		p.errs = append(p.errs, e.Error())
	}
	for _, rd := range snap.Devices {
		if rd.Device.UUID == p.uuid {
			p.last, p.ok = rd, true
		}
	}
	return snap, err
}

// stack is the agent's stack on one GPU: the real NVML reader on lib, a fake
// kubelet that gives GPU 0 to one pod, the real kubelet client, the engine.
type stack struct {
	engine *agent.Engine
	probe  *probe
	uuid   string
	clock  nvml.Clock
	recs   []Record
}

// gpu0UUID reads GPU 0's UUID from lib, which must be initialized.
func gpu0UUID(lib gonvml.Interface) (gonvml.Device, string, error) {
	dev, ret := lib.DeviceGetHandleByIndex(0)
	if ret != gonvml.SUCCESS {
		return nil, "", fmt.Errorf("GPU 0: %s", ret.Error())
	}
	uuid, ret := dev.GetUUID()
	if ret != gonvml.SUCCESS {
		return nil, "", fmt.Errorf("GPU 0 UUID: %s", ret.Error())
	}
	return dev, uuid, nil
}

func newStack(t *testing.T, lib gonvml.Interface, clock nvml.Clock, uuid string, log *zap.Logger) *stack {
	t.Helper()
	// Unix socket paths are limited to 108 bytes: t.TempDir() can be longer.
	dir, err := os.MkdirTemp("", "gpuxray-gpu")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	socket := filepath.Join(dir, "kubelet.sock")
	srv := sim.NewKubeletServer(func() *podresourcesv1.ListPodResourcesResponse {
		return &podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{{
			Namespace: podNamespace,
			Name:      podName,
			Containers: []*podresourcesv1.ContainerResources{{
				Name:    podContainer,
				Devices: []*podresourcesv1.ContainerDevices{{ResourceName: sim.ResourceGPU, DeviceIds: []string{uuid}}},
			}},
		}}}
	})
	if err := srv.Start(socket); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	reader := nvml.New(lib, nvml.DefaultConfig(), log.Named("nvml"), clock)
	if err := reader.Init(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reader.Shutdown() })
	kcfg := kubelet.DefaultConfig()
	kcfg.Socket, kcfg.Clock = socket, clock
	kube, err := kubelet.New(kcfg, log.Named("kubelet"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kube.Close() })
	p := &probe{reader: reader, uuid: uuid}
	engine, err := agent.New(agent.DefaultConfig(), p, kube, clock, log.Named("engine"))
	if err != nil {
		t.Fatal(err)
	}
	return &stack{engine: engine, probe: p, uuid: uuid, clock: clock}
}

// poll polls once and records the pod's and the device's counters.
func (s *stack) poll() Record {
	s.engine.Poll(context.Background())
	snap := s.engine.Snapshot()
	r := Record{T: unix(snap.At)}
	for _, a := range snap.Allocations {
		if a.UUID == s.uuid && a.Namespace == podNamespace && a.Pod == podName {
			for _, c := range a.Counters {
				r.Allocated += c.Allocated
				r.Idle += c.Idle
				r.Active += c.Active
			}
		}
	}
	for _, d := range snap.Devices {
		if d.UUID != s.uuid {
			continue
		}
		for _, c := range d.Counters {
			r.Observed += c.Observed
			r.DevIdle += c.Idle
			r.Gap += c.Gap
		}
		r.HasUtil, r.Util = d.HasUtilization, d.Utilization
		r.HasGPM, r.SMActive, r.SMOccupancy, r.TensorActive = d.HasGPM, d.SMActive, d.SMOccupancy, d.TensorActive
		r.MemoryUsed = d.MemoryUsedBytes
	}
	s.probe.mu.Lock()
	if s.probe.ok {
		for _, x := range s.probe.last.Samples {
			r.Samples = append(r.Samples, [2]float64{unix(x.Time), x.Value})
		}
		for _, x := range s.probe.last.ProcessSamples {
			r.ProcSamples = append(r.ProcSamples, [3]float64{float64(x.PID), unix(x.Time), x.Value})
		}
	}
	r.Errors = append(r.Errors, s.probe.errs...)
	s.probe.mu.Unlock()
	s.recs = append(s.recs, r)
	return r
}

func unix(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// Ring is one read of the driver's whole utilization-sample ring
// (GetSamples with lastSeen 0).
type Ring struct {
	Samples int     `json:"samples"`
	SpanS   float64 `json:"span_s"` // newest - oldest stamp
	Error   string  `json:"error,omitempty"`
}

func readRing(lib gonvml.Interface, dev gonvml.Device) Ring {
	_, raw, ret := dev.GetSamples(gonvml.GPU_UTILIZATION_SAMPLES, 0)
	if ret != gonvml.SUCCESS {
		return Ring{Error: ret.Error()}
	}
	var r Ring
	var lo, hi uint64
	for _, s := range raw {
		if s.TimeStamp == 0 {
			continue
		}
		if r.Samples == 0 || s.TimeStamp < lo {
			lo = s.TimeStamp
		}
		hi = max(hi, s.TimeStamp)
		r.Samples++
	}
	if r.Samples > 0 {
		r.SpanS = float64(hi-lo) / 1e6
	}
	return r
}

// Info is what the check learned of the driver.
type Info struct {
	When         string      `json:"when"`
	Driver       string      `json:"driver"`
	NVML         string      `json:"nvml"`
	CUDADriver   int         `json:"cuda_driver"`
	GPU          string      `json:"gpu"`
	UUID         string      `json:"uuid"`
	RingAtStart  Ring        `json:"ring_at_start"`
	RingAtEnd    Ring        `json:"ring_at_end"`
	Samples      SampleStats `json:"samples"`
	PollInterval float64     `json:"poll_interval_s"`
}

func readInfo(lib gonvml.Interface, dev gonvml.Device, uuid string) Info {
	in := Info{UUID: uuid, PollInterval: agent.DefaultConfig().PollInterval.Seconds()}
	in.Driver, _ = lib.SystemGetDriverVersion()
	in.NVML, _ = lib.SystemGetNVMLVersion()
	in.CUDADriver, _ = lib.SystemGetCudaDriverVersion()
	in.GPU, _ = dev.GetName()
	return in
}

func (in Info) String() string {
	s := in.Samples
	return fmt.Sprintf(`driver %s, NVML %s, CUDA driver %d, %s %s
sample period: median %.6fs (min %.6f, max %.6f) over %d samples; %d gaps > 1s; at most %d samples per poll (poll %.0fs)
ring (GetSamples lastSeen=0): %d samples spanning %.3fs at start, %d samples spanning %.3fs at end %s%s
process samples: %d, %.3f of their stamps equal a device sample's, median |offset| to the nearest %.6fs
`, in.Driver, in.NVML, in.CUDADriver, in.GPU, in.UUID,
		s.PeriodMedianS, s.PeriodMinS, s.PeriodMaxS, s.N, s.GapsOverSecond, s.MaxPerPoll, in.PollInterval,
		in.RingAtStart.Samples, in.RingAtStart.SpanS, in.RingAtEnd.Samples, in.RingAtEnd.SpanS, in.RingAtStart.Error, in.RingAtEnd.Error,
		s.ProcSamples, s.ProcAlignedFrac, s.ProcOffsetMedianS)
}

// report analyzes recs against truth, writes results.txt, result.json and
// records.json to dir, logs the table and fails t on a missed target.
func report(t *testing.T, dir string, info Info, recs []Record, truth []Phase, opt Options) Result {
	t.Helper()
	info.Samples = Stats(recs)
	res, err := Analyze(recs, truth, opt)
	if err != nil {
		t.Fatal(err)
	}
	text := info.String() + "\n" + res.Table()
	t.Logf("\n%s", text)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name string, v any) {
		var data []byte
		if s, ok := v.(string); ok {
			data = []byte(s)
		} else {
			var err error
			if data, err = json.MarshalIndent(v, "", " "); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("results.txt", text)
	write("result.json", map[string]any{"info": info, "result": res, "truth": truth})
	write("records.json", recs)
	t.Logf("results in %s", dir)
	if !res.Pass && opt.NoAssert {
		t.Logf("targets missed (not asserted):\n%s", strings.Join(res.Failures(), "\n"))
	} else if !res.Pass {
		t.Errorf("targets missed:\n%s", strings.Join(res.Failures(), "\n"))
	}
	return res
}
