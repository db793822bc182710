package sim

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

const (
	// SamplePeriod is the simulated driver's utilization sampling period,
	// 1/6 s rounded to the microsecond as the driver stamps it.
	SamplePeriod = samplePeriodMicros * time.Microsecond
	// SampleBuffer is how many samples the simulated driver keeps per device
	// (and per process): older ones are gone, as in the driver's ring.
	SampleBuffer = 120

	samplePeriodMicros = 166667
)

// Node is a simulated GPU node: NVML and the kubelet's pod-resources view of
// one scenario, as pure functions of a Clock. It keeps no per-call state, so
// it is safe for concurrent use.
type Node struct {
	sc    *Scenario
	clock Clock
	sys   system
	srv   *server.Server
	drv   *driver
	uuids []string
	pods  []series
	gpus  []gpuModel
	// mig holds every MIG device of each GPU, over the whole scenario
	// (see newMIGDevices); migOn tells the GPUs in MIG mode.
	mig   [][]*migDevice
	migOn []bool
	// plan are the dynamic MIG devices, in the order they are created;
	// devIDs name every pod's devices.
	plan   []migHolding
	devIDs deviceIdentity
	ids    podIDs
	// identity says how the pod source names workloads and models.
	identity Identity
	// partitionUUIDs puts the uuid of a dynamic MIG partition's MIG device
	// in its slice while it lives, which NVIDIA's driver does not
	// (SetPartitionUUIDs); migUnprivileged refuses GetGpuInstanceById
	// (SetMIGPrivileged).
	partitionUUIDs, migUnprivileged bool
	// visible are the GPUs NVML lists, in index order: all but those
	// passed through to VMs (vfio); kai are KAI Scheduler's reservation
	// pods (alloc.go).
	visible []int
	kai     []reservation
	// closed releases the calls hang faults hold (Close).
	closed    chan struct{}
	closeOnce sync.Once
	// hangEnds counts the calls blocked in a hang, by the hang's end.
	hangMu   sync.Mutex
	hangEnds map[time.Duration]int
	// sessions are the NVML sessions open, for the driver reloads.
	sessions sessions
}

// gpuModel is what the simulated driver knows of one GPU.
type gpuModel struct {
	util series
	// sm is GPM's SM_UTIL (smSeries); util for a GPU in MIG mode, whose
	// own GPM the reader does not sample.
	sm    series
	procs []proc // by PID
}

// proc is one pod's process on one GPU.
type proc struct {
	pid      uint32
	pod      int
	from, to time.Duration
	memory   uint64
}

// NewNode builds the simulated node of sc on clock. sc should come from
// ParseScenario, which validates it; NewNode re-checks only what would
// otherwise panic.
func NewNode(sc *Scenario, clock Clock) (*Node, error) {
	if sc == nil {
		return nil, errNoScenario
	}
	if clock == nil {
		return nil, fmt.Errorf("sim: scenario %s: no clock", sc.Name)
	}
	sys, ok := systems[sc.System]
	if !ok {
		return nil, fmt.Errorf("sim: scenario %s: unknown system %q", sc.Name, sc.System)
	}
	srv := sys.newServer()
	for _, d := range srv.Devices {
		if md, ok := d.(*server.Device); ok {
			md.Config.Name = sys.gpu.Name
		}
	}
	if sc.GPUs < 1 || sc.GPUs > len(srv.Devices) {
		return nil, fmt.Errorf("sim: scenario %s: %d GPUs, want 1 to %d", sc.Name, sc.GPUs, len(srv.Devices))
	}
	for _, p := range sc.Pods {
		for _, d := range p.Devices {
			if d.GPU < 0 || d.GPU >= sc.GPUs {
				return nil, fmt.Errorf("sim: scenario %s: pod %s/%s holds %s, not one of %d GPUs", sc.Name, p.Namespace, p.Name, d, sc.GPUs)
			}
		}
	}
	n := &Node{sc: sc, clock: clock, sys: sys, srv: srv, ids: newPodIDs(sc), closed: make(chan struct{}), hangEnds: map[time.Duration]int{}}
	n.pods = make([]series, len(sc.Pods))
	for i := range sc.Pods {
		n.pods[i] = sc.podSeries(i)
	}
	n.gpus = make([]gpuModel, sc.GPUs)
	for g := range n.gpus {
		n.gpus[g].util = sc.gpuSeries(g, n.pods)
		n.gpus[g].sm = n.gpus[g].util
		if _, on := sc.MIG[g]; !on && !sc.MIGDynamic[g] {
			n.gpus[g].sm = sc.smSeries(n.pods, sc.holdersOf(func(d DeviceSpec) bool { return !d.MIG && d.GPU == g }),
				sc.withUnattributed(g, []series{sc.unallocatedSeries(g)}))
		}
	}
	for i, p := range sc.Pods {
		for k, d := range p.Devices {
			n.gpus[d.GPU].procs = append(n.gpus[d.GPU].procs, proc{pid: sc.PID(i, k), pod: i, from: p.From, to: p.To, memory: p.Memory})
		}
	}
	n.addUnattributed()
	for g := range n.gpus {
		procs := n.gpus[g].procs
		sort.Slice(procs, func(a, b int) bool { return procs[a].pid < procs[b].pid })
	}

	mig, on, err := newMIGDevices(n)
	if err != nil {
		return nil, err
	}
	n.mig, n.migOn = mig, on
	n.splitComputeInstances()
	n.applyMIGModeChanges()
	n.devIDs = sc.identities(n.plan)
	n.kai = sc.reservations()

	srv.Devices = srv.Devices[:sc.GPUs]
	n.uuids = make([]string, sc.GPUs)
	for g := range srv.Devices {
		n.uuids[g] = deviceUUID(sc.Node, g)
		dev := srv.Devices[g].(*server.Device)
		dev.UUID = n.uuids[g]
		n.identifyGPU(g, dev)
	}
	n.drv = newDriver(n)
	return n, nil
}

// deviceUUID derives a stable UUID from the node name and GPU index, so
// metrics, golden files and kubelet device IDs agree across runs (the mock
// servers draw random ones).
func deviceUUID(node string, gpu int) string {
	h := sha256.Sum256(fmt.Appendf(nil, "gpuxray-sim/%s/gpu/%d", node, gpu))
	h[6] = h[6]&0x0f | 0x50 // version 5, name-based
	h[8] = h[8]&0x3f | 0x80 // RFC 4122 variant
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

// NVML returns the simulated driver: go-nvml's mock server of the scenario's
// system, trimmed to its GPUs, answering the simulated calls itself so that
// the mock records none of them. See the package documentation for the calls
// it answers; any other call panics, as the mock does.
func (n *Node) NVML() nvml.Interface { return n.drv }

// Scenario returns the scenario the node plays.
func (n *Node) Scenario() *Scenario { return n.sc }

// Clock returns the node's clock.
func (n *Node) Clock() Clock { return n.clock }

// DeviceUUID returns the UUID of GPU gpu ("GPU-…"), as NVML and the kubelet
// name it.
func (n *Node) DeviceUUID(gpu int) string { return n.uuids[gpu] }

// now is the clock's time as a scenario offset and as NVML's microsecond stamp.
func (n *Node) now() (time.Duration, int64) {
	t := n.clock.Now()
	return t.Sub(n.sc.Start), t.UnixMicro()
}

// window is the range of sample numbers [first, last] of GPU g newer than
// lastSeen (in the driver's sample clock) and still in the driver's ring (a
// GPU reset after a gpu_lost fault empties it). Sample k covers scenario
// time ((k-1)·period, k·period] and is stamped at its end.
func (n *Node) window(g int, lastSeen uint64) (first, last int64, ok bool) {
	start := n.sc.Start.UnixMicro()
	t, now := n.now()
	if now < start+samplePeriodMicros {
		return 0, 0, false
	}
	last = (now - start) / samplePeriodMicros
	first = 1
	ls, ok := n.unixStamp(lastSeen)
	if !ok {
		return 0, 0, false
	}
	if ls >= start {
		first = (ls-start)/samplePeriodMicros + 1
	}
	first = max(first, last-SampleBuffer+1)
	if at, reset := n.resetAt(g, t); reset {
		first = max(first, int64(at/SamplePeriod)+1)
	}
	if at, off := n.draMIGOffSince(g, t); off {
		// The rings start over when the GPU leaves MIG mode.
		first = max(first, int64(at/SamplePeriod)+1)
	}
	return first, last, first <= last
}

// stamp is sample k's timestamp in the driver's sample clock.
func (n *Node) stamp(k int64) uint64 {
	return n.driverStamp(n.sc.Start.UnixMicro() + k*samplePeriodMicros)
}

// driverStamp turns Unix microseconds into the driver's sample clock:
// microseconds of Unix time, or since the node's boot (driver.sample_clock).
func (n *Node) driverStamp(unixMicro int64) uint64 {
	if n.sc.Driver.bootClock() {
		unixMicro -= n.sc.BootTime().UnixMicro()
	}
	return uint64(max(unixMicro, 0))
}

// unixStamp turns a caller's lastSeenTimeStamp, in the driver's sample
// clock, into Unix microseconds; 0 (every sample) stays 0. ok is false for
// a stamp beyond any time the simulation reaches.
func (n *Node) unixStamp(lastSeen uint64) (int64, bool) {
	if lastSeen > math.MaxInt64/2 {
		return 0, false
	}
	ls := int64(lastSeen)
	if ls > 0 && n.sc.Driver.bootClock() {
		ls += n.sc.BootTime().UnixMicro()
	}
	return ls, true
}

// percent is the mean of s over sample k's period, as NVML's integer percent.
func percent(s series, k int64) uint32 {
	a := time.Duration((k-1)*samplePeriodMicros) * time.Microsecond
	b := time.Duration(k*samplePeriodMicros) * time.Microsecond
	p := math.Round(100 * s.integral(a, b) / (b - a).Seconds())
	return uint32(min(max(p, 0), 100))
}

func (n *Node) samples(g int, typ nvml.SamplingType, lastSeen uint64) (nvml.ValueType, []nvml.Sample, nvml.Return) {
	if typ != nvml.GPU_UTILIZATION_SAMPLES || n.migEnabled(g) {
		return nvml.VALUE_TYPE_UNSIGNED_INT, nil, nvml.ERROR_NOT_SUPPORTED
	}
	first, last, ok := n.window(g, lastSeen)
	t, _ := n.now()
	bad, hasBad := n.badStamp(g, t)
	if !ok && !hasBad {
		return nvml.VALUE_TYPE_UNSIGNED_INT, nil, nvml.ERROR_NOT_FOUND
	}
	out := make([]nvml.Sample, 0, last-first+2)
	for k := first; ok && k <= last; k++ {
		v := percent(n.gpus[g].util, k)
		if v == 0 && n.sc.Driver.DryWhenIdle {
			continue // the ring runs dry while the GPU is idle
		}
		s := nvml.Sample{TimeStamp: n.stamp(k)}
		binary.LittleEndian.PutUint32(s.SampleValue[:4], v)
		out = append(out, s)
	}
	if hasBad {
		s := nvml.Sample{TimeStamp: bad}
		binary.LittleEndian.PutUint32(s.SampleValue[:4], 100)
		out = append(out, s)
	}
	if len(out) == 0 {
		return nvml.VALUE_TYPE_UNSIGNED_INT, nil, nvml.ERROR_NOT_FOUND
	}
	return nvml.VALUE_TYPE_UNSIGNED_INT, out, nvml.SUCCESS
}

// utilizationRates is GetUtilizationRates: the busy percent of the latest
// complete sample period, as nvml.h defines utilization.gpu ("percent of
// time over the past sample period during which one or more kernels was
// executing"), whether or not the ring kept a sample of it. The simulation
// has no memory traffic: Memory is 0.
func (n *Node) utilizationRates(g int) (nvml.Utilization, nvml.Return) {
	if n.migEnabled(g) {
		return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED
	}
	_, now := n.now()
	k := (now - n.sc.Start.UnixMicro()) / samplePeriodMicros
	if k < 1 {
		return nvml.Utilization{}, nvml.SUCCESS
	}
	return nvml.Utilization{Gpu: percent(n.gpus[g].util, k)}, nvml.SUCCESS
}

// processUtilization answers GetProcessUtilization in the scenario's shape
// (driver.process_samples).
func (n *Node) processUtilization(g int, lastSeen uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
	if n.migEnabled(g) {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	var out []nvml.ProcessUtilizationSample
	if n.sc.Driver.perPeriod() {
		out = n.processesPerPeriod(g, lastSeen)
	} else {
		out = n.processesPerRead(g, lastSeen)
	}
	if len(out) == 0 {
		return nil, nvml.ERROR_NOT_FOUND
	}
	return out, nvml.SUCCESS
}

// processesPerPeriod lists, per sample period newer than lastSeen, the
// processes that were busy in it, each valued over that period.
func (n *Node) processesPerPeriod(g int, lastSeen uint64) []nvml.ProcessUtilizationSample {
	first, last, ok := n.window(g, lastSeen)
	if !ok {
		return nil
	}
	var out []nvml.ProcessUtilizationSample
	for k := first; k <= last; k++ {
		for _, p := range n.gpus[g].procs {
			if v := percent(n.pods[p.pod], k); v > 0 {
				out = append(out, nvml.ProcessUtilizationSample{Pid: p.pid, TimeStamp: n.stamp(k), SmUtil: v})
			}
		}
	}
	return out
}

// processesPerRead lists each process once, as real drivers answer: the
// driver refreshes a process's entry every driver.process_refresh, on a
// phase of its own (refreshPhase), while the process runs; an entry is
// listed when a refresh is newer than lastSeen, stamped at the newest
// refresh, and valued at the process's mean busy percent over the refresh
// windows newer than lastSeen (so the same refresh read with an older
// lastSeen averages more windows, as nvtop #110's output shows), and only
// when that mean is above zero. Windows older than the ring's span, or
// before a GPU reset, are gone.
func (n *Node) processesPerRead(g int, lastSeen uint64) []nvml.ProcessUtilizationSample {
	t, _ := n.now()
	ls, ok := n.unixStamp(lastSeen)
	if !ok {
		return nil
	}
	lsOff := time.Duration(ls-n.sc.Start.UnixMicro()) * time.Microsecond
	if lastSeen == 0 {
		lsOff = -forever
	}
	kept := t - SampleBuffer*SamplePeriod
	if at, reset := n.resetAt(g, t); reset {
		kept = max(kept, at)
	}
	refresh := n.sc.Driver.refresh()
	var out []nvml.ProcessUtilizationSample
	for _, p := range n.gpus[g].procs {
		phase := refreshPhase(p.pid, refresh)
		// The newest refresh while the process runs, no later than now.
		end := min(t, p.to-time.Microsecond)
		if end < phase {
			continue
		}
		newest := phase + (end-phase)/refresh*refresh
		if newest <= p.from || newest <= lsOff || newest <= kept {
			continue
		}
		// The first refresh newer than lastSeen and still kept.
		after := max(lsOff, kept, p.from)
		firstNew := phase + ((after-phase)/refresh+1)*refresh
		if after < phase {
			firstNew = phase
		}
		from := max(firstNew-refresh, p.from, kept)
		v := math.Round(100 * n.pods[p.pod].integral(from, newest) / (newest - from).Seconds())
		if v <= 0 {
			continue // NVML lists only processes with some utilization
		}
		out = append(out, nvml.ProcessUtilizationSample{
			Pid:       p.pid,
			TimeStamp: n.driverStamp(n.sc.Start.Add(newest).UnixMicro()),
			SmUtil:    uint32(min(v, 100)),
		})
	}
	return out
}

// refreshPhase is when, within each refresh, the driver refreshes process
// pid's entry: spread over the refresh by the PID, so that processes are
// refreshed at different times and off the device's sample grid, as the
// per-PID stamps of go-nvml #51 are.
func refreshPhase(pid uint32, refresh time.Duration) time.Duration {
	us := int64(refresh / time.Microsecond)
	return time.Duration((uint64(pid)*2654435761)%uint64(us)) * time.Microsecond
}

// running is the processes on GPU g at scenario time t.
func (n *Node) running(g int, t time.Duration) []proc {
	var out []proc
	for _, p := range n.gpus[g].procs {
		if p.from <= t && t < p.to {
			out = append(out, p)
		}
	}
	return out
}

func (n *Node) memory(g int) nvml.Memory_v2 {
	t, _ := n.now()
	m := nvml.Memory_v2{Total: n.sys.memTotal(), Reserved: reservedMemory}
	m.Version = nvml.STRUCT_VERSION(m, 2)
	for _, p := range n.running(g, t) {
		m.Used += p.memory
	}
	if m.Used+m.Reserved < m.Total {
		m.Free = m.Total - m.Used - m.Reserved
	}
	return m
}

func (n *Node) powerMilliwatts(g int) uint32 {
	t, _ := n.now()
	u := 0.0
	if t >= 0 {
		u = n.gpus[g].util.value(t)
	}
	return uint32(math.Round(1000 * (n.sys.idleWatts + u*(n.sys.maxWatts-n.sys.idleWatts))))
}

// energyMillijoules integrates the power of powerMilliwatts from the
// scenario start, exactly, since the busy ratio is piecewise constant.
func (n *Node) energyMillijoules(g int) uint64 {
	t, _ := n.now()
	if t <= 0 {
		return 0
	}
	j := n.sys.idleWatts*t.Seconds() + (n.sys.maxWatts-n.sys.idleWatts)*n.gpus[g].util.prefix(t)
	return uint64(math.Floor(1000 * j))
}
