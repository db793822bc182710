package gpu

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	xunix "golang.org/x/sys/unix"
)

// The driver probe measures, beside the load, what nvml.h leaves open and
// the engine depends on (issue #26): it calls NVML itself, raw, once a
// second, and keeps every answer in probes.json for AnalyzeDriver.

var migProbeOut = flag.String("gpu.mig-probe", "", "internal: TestMIGParentProbe writes its answers here (run by TestRealGPU under setpriv)")

// ProcEntry is one per-process utilization entry as the driver returned it.
type ProcEntry struct {
	PID uint32 `json:"pid"`
	TS  uint64 `json:"ts"` // the driver's stamp, microseconds in its clock
	SM  uint32 `json:"sm"`
}

// GPMRead is one GPM interval: the metrics between the previous sample and
// this one.
type GPMRead struct {
	Ret          string  `json:"ret"`
	SMUtil       float64 `json:"sm_util"`       // percent of SMs busy (spatial)
	GraphicsUtil float64 `json:"graphics_util"` // percent of time any app was active
	SMOccupancy  float64 `json:"sm_occupancy"`
}

// DriverCall is one round of raw calls on GPU 0.
type DriverCall struct {
	T    float64 `json:"t"`    // Unix seconds when the round's first call answered
	Boot float64 `json:"boot"` // CLOCK_BOOTTIME seconds at the same moment
	Mono float64 `json:"mono"` // CLOCK_MONOTONIC seconds
	// SamplesRet and Stamps: GetSamples(GPU_UTILIZATION_SAMPLES, newest
	// stamp of the previous round): its code and the stamps it returned,
	// Values their busy percents.
	SamplesRet string    `json:"samples_ret"`
	Stamps     []uint64  `json:"stamps,omitempty"`
	Values     []float64 `json:"values,omitempty"`
	// Ring is len(GetSamples(..., 0)), every fifth round (-1 otherwise).
	Ring int `json:"ring"`
	// ProcAll is GetProcessUtilization(0): the driver's whole table;
	// ProcSince GetProcessUtilization(newest device stamp of the previous
	// round), as the agent asks.
	ProcAllRet   string      `json:"proc_all_ret"`
	ProcAll      []ProcEntry `json:"proc_all,omitempty"`
	ProcSinceRet string      `json:"proc_since_ret"`
	ProcSince    []ProcEntry `json:"proc_since,omitempty"`
	// Running are the compute processes' PIDs.
	Running []uint32 `json:"running,omitempty"`
	// RatesGPU is GetUtilizationRates' gpu percent (-1: failed).
	RatesGPU int      `json:"rates_gpu"`
	GPM      *GPMRead `json:"gpm,omitempty"`
}

// DeviceID is how one GPU is named: NVML index, minor number, PCI bus.
type DeviceID struct {
	Index int    `json:"index"`
	Minor int    `json:"minor"` // -1: not readable
	UUID  string `json:"uuid"`
	BusID string `json:"bus_id"`
	MIG   bool   `json:"mig"`
}

// MIGProbe is what one run of TestMIGParentProbe saw, under one identity.
type MIGProbe struct {
	As      string         `json:"as"` // "root", "root without CAP_SYS_ADMIN", "uid 65534"
	Skipped string         `json:"skipped,omitempty"`
	Calls   []MIGProbeCall `json:"calls,omitempty"`
}

// MIGProbeCall is one call's answer on one device.
type MIGProbeCall struct {
	Device string `json:"device"` // "GPU 0 (MIG parent)", "GPU 0 MIG 1", "GPU 1"
	Call   string `json:"call"`
	Ret    string `json:"ret"`
}

// DriverProbes is probes.json.
type DriverProbes struct {
	Devices []DeviceID   `json:"devices"`
	Calls   []DriverCall `json:"calls"`
	MIG     []MIGProbe   `json:"mig"`
}

// driverProbe calls NVML on dev once a second until ctx ends.
type driverProbe struct {
	lib   gonvml.Interface
	dev   gonvml.Device
	mu    sync.Mutex
	calls []DriverCall
}

func clockSeconds(id int32) float64 {
	var ts xunix.Timespec
	if xunix.ClockGettime(id, &ts) != nil {
		return 0
	}
	return float64(ts.Sec) + float64(ts.Nsec)/1e9
}

func (p *driverProbe) run(ctx context.Context) {
	var last, lastDev uint64
	gpm := gpmProbe(p.lib, p.dev)
	defer gpm.free()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for round := 0; ; round++ {
		c := DriverCall{Ring: -1, RatesGPU: -1}
		vt, samples, ret := p.dev.GetSamples(gonvml.GPU_UTILIZATION_SAMPLES, last)
		c.T, c.Boot, c.Mono = float64(time.Now().UnixNano())/1e9, clockSeconds(xunix.CLOCK_BOOTTIME), clockSeconds(xunix.CLOCK_MONOTONIC)
		c.SamplesRet = ret.String()
		for _, s := range samples {
			if s.TimeStamp == 0 {
				continue
			}
			c.Stamps = append(c.Stamps, s.TimeStamp)
			v := decodeSample(vt, s.SampleValue)
			c.Values = append(c.Values, v)
			last = max(last, s.TimeStamp)
		}
		if round%5 == 0 {
			_, all, ret := p.dev.GetSamples(gonvml.GPU_UTILIZATION_SAMPLES, 0)
			if ret == gonvml.SUCCESS {
				c.Ring = len(all)
			}
		}
		procs := func(since uint64) ([]ProcEntry, string) {
			raw, ret := p.dev.GetProcessUtilization(since)
			var out []ProcEntry
			for _, e := range raw {
				out = append(out, ProcEntry{PID: e.Pid, TS: e.TimeStamp, SM: e.SmUtil})
			}
			return out, ret.String()
		}
		c.ProcAll, c.ProcAllRet = procs(0)
		c.ProcSince, c.ProcSinceRet = procs(lastDev)
		lastDev = last
		if ps, ret := p.dev.GetComputeRunningProcesses(); ret == gonvml.SUCCESS {
			for _, pr := range ps {
				c.Running = append(c.Running, pr.Pid)
			}
		}
		if u, ret := utilizationRates(p.dev); ret == gonvml.SUCCESS {
			c.RatesGPU = int(u.Gpu)
		}
		c.GPM = gpm.read()
		p.mu.Lock()
		p.calls = append(p.calls, c)
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// utilizationRates calls GetUtilizationRates, which the simulated driver
// (the rehearsal's) does not answer: its mock panics.
func utilizationRates(dev gonvml.Device) (u gonvml.Utilization, ret gonvml.Return) {
	defer func() {
		if recover() != nil {
			ret = gonvml.ERROR_NOT_SUPPORTED
		}
	}()
	return dev.GetUtilizationRates()
}

// reportDriver writes probes.json and appends AnalyzeDriver's section to
// driver.txt, and logs it.
func reportDriver(t *testing.T, dir string, p DriverProbes, truth []Phase) {
	write(t, filepath.Join(dir, "probes.json"), p)
	r := AnalyzeDriver(p, truth)
	if err := os.WriteFile(filepath.Join(dir, "driver.txt"), []byte(r.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("driver probes:\n%s", r)
}

// decodeSample reads a sample's value union (little-endian on every
// platform NVML ships for); NaN for a type a utilization sample never has.
func decodeSample(vt gonvml.ValueType, b [8]byte) float64 {
	switch vt {
	case gonvml.VALUE_TYPE_UNSIGNED_INT:
		return float64(binary.LittleEndian.Uint32(b[:4]))
	case gonvml.VALUE_TYPE_UNSIGNED_LONG, gonvml.VALUE_TYPE_UNSIGNED_LONG_LONG:
		return float64(binary.LittleEndian.Uint64(b[:]))
	case gonvml.VALUE_TYPE_DOUBLE:
		return math.Float64frombits(binary.LittleEndian.Uint64(b[:]))
	}
	return math.NaN()
}

func (p *driverProbe) results() []DriverCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls)
}

// gpmPair is the probe's GPM samples, nil without GPM.
type gpmPair struct {
	lib       gonvml.Interface
	dev       gonvml.Device
	prev, cur gonvml.GpmSample
	has       bool
}

func gpmProbe(lib gonvml.Interface, dev gonvml.Device) *gpmPair {
	for _, s := range []string{"nvmlGpmQueryDeviceSupport", "nvmlGpmSampleAlloc", "nvmlGpmSampleGet", "nvmlGpmMetricsGet"} {
		if lib.Extensions().LookupSymbol(s) != nil {
			return nil
		}
	}
	if sup, ret := dev.GpmQueryDeviceSupport(); ret != gonvml.SUCCESS || sup.IsSupportedDevice == 0 {
		return nil
	}
	a, ret1 := lib.GpmSampleAlloc()
	b, ret2 := lib.GpmSampleAlloc()
	if ret1 != gonvml.SUCCESS || ret2 != gonvml.SUCCESS {
		return nil
	}
	return &gpmPair{lib: lib, dev: dev, prev: a, cur: b}
}

func (g *gpmPair) free() {
	if g != nil {
		g.lib.GpmSampleFree(g.prev)
		g.lib.GpmSampleFree(g.cur)
	}
}

func (g *gpmPair) read() *GPMRead {
	if g == nil {
		return nil
	}
	if ret := g.lib.GpmSampleGet(g.dev, g.cur); ret != gonvml.SUCCESS {
		return &GPMRead{Ret: ret.String()}
	}
	g.prev, g.cur = g.cur, g.prev
	if !g.has {
		g.has = true
		return nil
	}
	m := &gonvml.GpmMetricsGetType{NumMetrics: 3, Sample1: g.cur, Sample2: g.prev}
	m.Metrics[0].MetricId = uint32(gonvml.GPM_METRIC_SM_UTIL)
	m.Metrics[1].MetricId = uint32(gonvml.GPM_METRIC_GRAPHICS_UTIL)
	m.Metrics[2].MetricId = uint32(gonvml.GPM_METRIC_SM_OCCUPANCY)
	ret := g.lib.GpmMetricsGet(m)
	return &GPMRead{Ret: ret.String(), SMUtil: m.Metrics[0].Value, GraphicsUtil: m.Metrics[1].Value, SMOccupancy: m.Metrics[2].Value}
}

// deviceIDs names every GPU of lib.
func deviceIDs(lib gonvml.Interface) []DeviceID {
	n, ret := lib.DeviceGetCount()
	if ret != gonvml.SUCCESS {
		return nil
	}
	var out []DeviceID
	for i := range n {
		h, ret := lib.DeviceGetHandleByIndex(i)
		if ret != gonvml.SUCCESS {
			continue
		}
		id := DeviceID{Index: i, Minor: -1}
		if idx, ret := h.GetIndex(); ret == gonvml.SUCCESS {
			id.Index = idx
		}
		if m, ret := h.GetMinorNumber(); ret == gonvml.SUCCESS {
			id.Minor = m
		}
		id.UUID, _ = h.GetUUID()
		if pci, ret := h.GetPciInfo(); ret == gonvml.SUCCESS {
			id.BusID = cString(pci.BusIdLegacy[:])
		}
		mode, _, ret := h.GetMigMode()
		id.MIG = ret == gonvml.SUCCESS && mode == gonvml.DEVICE_MIG_ENABLE
		out = append(out, id)
	}
	return out
}

func cString[T ~int8 | ~uint8](b []T) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

// migIdentities are the identities TestMIGParentProbe is run as: the
// chart's (uid 0, every capability dropped) is the one that matters.
var migIdentities = []struct {
	as   string
	args []string
}{
	{"root", nil},
	{"root without CAP_SYS_ADMIN", []string{"--inh-caps=-sys_admin", "--bounding-set=-sys_admin"}},
	{"root without capabilities (the chart)", []string{"--inh-caps=-all", "--bounding-set=-all"}},
	{"uid 65534", []string{"--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"}},
}

// runMIGProbes runs TestMIGParentProbe in this test binary once per
// identity, under setpriv, and returns what each saw.
func runMIGProbes(t *testing.T) []MIGProbe {
	self, err := os.Executable()
	if err != nil {
		return []MIGProbe{{As: "all", Skipped: err.Error()}}
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		return []MIGProbe{{As: "all", Skipped: "setpriv (util-linux) not found"}}
	}
	// uid 65534 must write its answers: a folder anyone may write to.
	tmp, err := os.MkdirTemp("", "mig-probe")
	if err != nil {
		return []MIGProbe{{As: "all", Skipped: err.Error()}}
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o777); err != nil {
		return []MIGProbe{{As: "all", Skipped: err.Error()}}
	}
	var out []MIGProbe
	for i, id := range migIdentities {
		path := filepath.Join(tmp, "mig-probe-"+itoa(i)+".json")
		args := append([]string{}, id.args...)
		args = append(args, "--", self, "-test.run", "^TestMIGParentProbe$", "-gpu.mig-probe", path)
		cmd := exec.Command(setpriv, args...)
		if id.args == nil {
			cmd = exec.Command(self, "-test.run", "^TestMIGParentProbe$", "-gpu.mig-probe", path)
		}
		b, err := cmd.CombinedOutput()
		p := MIGProbe{As: id.as}
		if err != nil {
			p.Skipped = err.Error() + ": " + lastLine(string(b))
			out = append(out, p)
			continue
		}
		data, err := os.ReadFile(path)
		if err == nil {
			err = json.Unmarshal(data, &p.Calls)
		}
		if err != nil {
			p.Skipped = err.Error()
		}
		out = append(out, p)
		t.Logf("MIG probe as %s: %d answers", id.as, len(p.Calls))
	}
	return out
}

func lastLine(s string) string {
	for len(s) > 0 && s[len(s)-1] == '\n' {
		s = s[:len(s)-1]
	}
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '\n' {
			return s[i+1:]
		}
	}
	return s
}

// TestMIGParentProbe makes the memory and process calls of every GPU and
// MIG device and writes their answers to -gpu.mig-probe. TestRealGPU runs
// it under each identity of migIdentities; it changes no setting.
func TestMIGParentProbe(t *testing.T) {
	if *migProbeOut == "" {
		t.Skip("run by TestRealGPU")
	}
	lib := gonvml.New()
	if ret := lib.Init(); ret != gonvml.SUCCESS {
		write(t, *migProbeOut, []MIGProbeCall{{Device: "-", Call: "Init", Ret: ret.String()}})
		return
	}
	defer lib.Shutdown()
	var calls []MIGProbeCall
	probe := func(name string, h gonvml.Device) {
		add := func(call string, ret gonvml.Return) {
			calls = append(calls, MIGProbeCall{Device: name, Call: call, Ret: ret.String()})
		}
		_, ret := h.GetMemoryInfo()
		add("GetMemoryInfo", ret)
		if lib.Extensions().LookupSymbol("nvmlDeviceGetMemoryInfo_v2") == nil {
			_, ret = h.GetMemoryInfo_v2()
			add("GetMemoryInfo_v2", ret)
		}
		_, ret = h.GetComputeRunningProcesses()
		add("GetComputeRunningProcesses", ret)
		_, ret = h.GetGraphicsRunningProcesses()
		add("GetGraphicsRunningProcesses", ret)
		_, ret = h.GetMPSComputeRunningProcesses()
		add("GetMPSComputeRunningProcesses", ret)
	}
	n, _ := lib.DeviceGetCount()
	for i := range n {
		h, ret := lib.DeviceGetHandleByIndex(i)
		if ret != gonvml.SUCCESS {
			continue
		}
		mode, _, ret := h.GetMigMode()
		if ret != gonvml.SUCCESS || mode != gonvml.DEVICE_MIG_ENABLE {
			probe("GPU "+itoa(i), h)
			continue
		}
		probe("GPU "+itoa(i)+" (MIG parent)", h)
		count, _ := h.GetMaxMigDeviceCount()
		for j := range count {
			m, ret := h.GetMigDeviceHandleByIndex(j)
			if ret == gonvml.SUCCESS {
				probe("GPU "+itoa(i)+" MIG "+itoa(j), m)
			}
		}
	}
	write(t, *migProbeOut, calls)
}

func itoa(i int) string { return string(appendInt(nil, i)) }

func appendInt(b []byte, i int) []byte {
	if i >= 10 {
		b = appendInt(b, i/10)
	}
	return append(b, byte('0'+i%10))
}

func write(t *testing.T, path string, v any) {
	b, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
