package sim

import (
	"encoding/binary"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// DriverTraps are the behaviours of real drivers that a reader written
// from nvml.h alone trips over, as the scenario's `driver:` keys ask for
// them (see the package documentation, "Driver traps"). The zero value is
// the system's mock driver with none of them.
type DriverTraps struct {
	// Version is what SystemGetDriverVersion answers, and decides which
	// symbols the library has; empty for the mock's (550.54.15 on the
	// DGX systems).
	Version string
	// MIGParentDenied makes memory and process queries of a GPU in MIG mode
	// answer NO_PERMISSION, as for a caller without the privileges nvml.h
	// asks for.
	MIGParentDenied bool
	// MPS are the GPUs whose pods' processes are MPS clients: listed by
	// GetMPSComputeRunningProcesses, not by GetComputeRunningProcesses.
	MPS map[int]bool
	// Graphics are the GPUs whose pods' processes hold a graphics context
	// too: listed by GetGraphicsRunningProcesses as well, with the same
	// memory.
	Graphics map[int]bool
	// MemoryNotAvailable are the GPUs whose process lists say
	// NVML_VALUE_NOT_AVAILABLE for every process's memory.
	MemoryNotAvailable map[int]bool
	// Zombies are entries of the per-process utilization table that belong
	// to no running process.
	Zombies []Zombie
	// ComputeInstances splits MIG devices' GPU instances into compute
	// instances: (GPU, MIG device index) to how many.
	ComputeInstances map[[2]int]int
	// MIGModeChanges, Reloads and Labels are runtime changes of the node.
	MIGModeChanges []MIGModeChange
	Reloads        []DriverReload
	Labels         []NodeLabel
}

// Zombie is a per-process utilization entry of a process that is not
// running, as GetProcessUtilization returns it on every call.
type Zombie struct {
	GPU int
	PID uint32
	// Shape is ZombieGarbage (nvtop #110's values: smUtil 37100 and a
	// stamp decades off, beside one stamped now) or ZombieStale (a
	// plausible entry of Value, stamped at the newest sample each call).
	Shape string
	Value float64
}

// Zombie shapes.
const (
	ZombieGarbage = "garbage"
	ZombieStale   = "stale"
)

var driverVersionRE = regexp.MustCompile(`^\d{3}\.\d{1,3}(\.\d{1,3})?$`)

// driverTraps checks the trap keys of the driver mapping; the GPUs, MIG
// layouts and pods are checked already.
func (d *validator) driverTraps(spec *ScenarioSpec, s *Scenario) error {
	ds, t := spec.Driver, &s.Traps
	if ds == nil {
		return nil
	}
	if d.has("driver.version") {
		if !driverVersionRE.MatchString(ds.Version) {
			return d.errf("driver.version", "%q is not a driver version such as 470.256.02 or 535.54.03", ds.Version)
		}
		t.Version = ds.Version
	}
	if d.has("driver.mig_parent_permission") {
		if err := d.oneOf("driver.mig_parent_permission", ds.MIGParentPermission, "allowed", "denied"); err != nil {
			return err
		}
		t.MIGParentDenied = ds.MIGParentPermission == "denied"
	}
	for _, k := range []struct {
		key  string
		refs []GPURef
		set  *map[int]bool
	}{{"mps", ds.MPS, &t.MPS}, {"graphics", ds.Graphics, &t.Graphics}, {"memory_not_available", ds.MemoryNotAvailable, &t.MemoryNotAvailable}} {
		if !d.has("driver." + k.key) {
			continue
		}
		*k.set = map[int]bool{}
		for i, ref := range k.refs {
			f := fmt.Sprintf("driver.%s[%d]", k.key, i)
			dev, err := d.gpu(f, ref.DeviceSpec, s.GPUs)
			if err != nil {
				return err
			}
			if dev.Replicated {
				return d.errf(f, "name the GPU, gpu:%d", dev.GPU)
			}
			(*k.set)[dev.GPU] = true
		}
	}
	for i, zs := range ds.Zombies {
		p := fmt.Sprintf("driver.zombies[%d]", i)
		if err := d.required(p, "device", "pid", "shape"); err != nil {
			return err
		}
		dev, err := d.gpu(p+".device", zs.Device.DeviceSpec, s.GPUs)
		if err != nil {
			return err
		}
		pid, err := d.whole(p+".pid", zs.PID, 1, math.MaxInt32)
		if err != nil {
			return err
		}
		if err := d.oneOf(p+".shape", zs.Shape, ZombieGarbage, ZombieStale); err != nil {
			return err
		}
		t.Zombies = append(t.Zombies, Zombie{GPU: dev.GPU, PID: uint32(pid), Shape: zs.Shape, Value: float64(zs.Value)})
	}
	if ds.ComputeInstances != nil {
		t.ComputeInstances = map[[2]int]int{}
	}
	for _, k := range sortedKeys(ds.ComputeInstances) {
		field := "driver.compute_instances." + k
		gpu, slot, ok := parseMIGRef(k)
		if !ok {
			return d.errf(field, "%q is not a MIG device such as mig:0/0", k)
		}
		layout := s.MIG[gpu]
		if slot >= len(layout) || layout[slot] == "" {
			return d.errf(field, "%s is no MIG device of the scenario's fixed MIG layouts", k)
		}
		p, _ := systems[s.System].migProfile(layout[slot])
		count, err := d.whole(field, ds.ComputeInstances[k], 2, int64(p.info.SliceCount))
		if err != nil {
			return err
		}
		if int(p.info.SliceCount)%int(count) != 0 {
			return d.errf(field, "%d compute instances do not divide the %d slices of a %s evenly", count, p.info.SliceCount, layout[slot])
		}
		if free := MaxMIGDevices - len(layout); int(count)-1 > free-len(t.ComputeInstances) {
			return d.errf(field, "no MIG device index is left for %d more compute instances (at most %d MIG devices)", count-1, MaxMIGDevices)
		}
		t.ComputeInstances[[2]int{gpu, slot}] = int(count)
	}
	return nil
}

// parseMIGRef reads "mig:N/S".
func parseMIGRef(v string) (gpu, slot int, ok bool) {
	rest, found := strings.CutPrefix(v, "mig:")
	if !found {
		return 0, 0, false
	}
	g, s, found := strings.Cut(rest, "/")
	if !found {
		return 0, 0, false
	}
	gpu, err1 := strconv.Atoi(g)
	slot, err2 := strconv.Atoi(s)
	return gpu, slot, err1 == nil && err2 == nil && gpu >= 0 && slot >= 0
}

// driverVersion is what SystemGetDriverVersion answers: the last reload's
// version once it is loaded.
func (n *Node) driverVersion() string {
	t, _ := n.now()
	for i := len(n.sc.Traps.Reloads) - 1; i >= 0; i-- {
		if r := n.sc.Traps.Reloads[i]; r.Version != "" && r.At+r.For <= t {
			return r.Version
		}
	}
	if n.sc.Traps.Version != "" {
		return n.sc.Traps.Version
	}
	return n.srv.DriverVersion
}

// versionAtLeast reports whether the driver's version is at least
// major.minor.
func (n *Node) versionAtLeast(major, minor int) bool {
	parts := strings.SplitN(n.driverVersion(), ".", 3)
	ma, _ := strconv.Atoi(parts[0])
	mi := 0
	if len(parts) > 1 {
		mi, _ = strconv.Atoi(parts[1])
	}
	return ma > major || ma == major && mi >= minor
}

// processStructBug reports whether the driver is one of 535.43 to 535.86,
// whose _v3 process lists write 32-byte entries (nvitop #89).
func (n *Node) processStructBug() bool {
	return n.versionAtLeast(535, 43) && !n.versionAtLeast(535, 87)
}

// symbolAbsent reports whether the driver's library lacks symbol name:
// nvmlDeviceGetMemoryInfo_v2 and the _v3 process lists are R510's, GPM
// R520's; 535.98 dropped the _v3 process lists and 535.104 brought them
// back (nvitop #89 and #94, from nvidia-settings' nvml.h history).
func (n *Node) symbolAbsent(name string) bool {
	switch {
	case name == "nvmlDeviceGetMemoryInfo_v2":
		return !n.versionAtLeast(510, 0)
	case strings.HasSuffix(name, "RunningProcesses_v3"):
		return !n.versionAtLeast(510, 0) || n.versionAtLeast(535, 98) && !n.versionAtLeast(535, 104)
	case gpmSymbols[name]:
		return !n.versionAtLeast(520, 0)
	}
	return false
}

// processSymbols are the process lists of every version.
var processSymbols = map[string]bool{
	"nvmlDeviceGetMPSComputeRunningProcesses": true, "nvmlDeviceGetMPSComputeRunningProcesses_v2": true,
	"nvmlDeviceGetMPSComputeRunningProcesses_v3": true, "nvmlDeviceGetGraphicsRunningProcesses": true,
	"nvmlDeviceGetGraphicsRunningProcesses_v2": true, "nvmlDeviceGetGraphicsRunningProcesses_v3": true,
}

// missingSymbol is what a call of a symbol the driver lacks does to the
// process: go-nvml binds it lazily, and the dynamic linker ends the
// process ("symbol lookup error"). A panic ends a test the same way.
func (n *Node) missingSymbol(name string) {
	if n.symbolAbsent(name) {
		panic(fmt.Sprintf("sim: symbol lookup error: undefined symbol: %s (driver %s)", name, n.driverVersion()))
	}
}

// parentDenied reports whether GPU g's memory and process queries answer
// NO_PERMISSION.
func (n *Node) parentDenied(g int) bool {
	return n.sc.Traps.MIGParentDenied && n.migEnabled(g)
}

// Which process list a call reads.
const (
	listCompute = iota
	listMPS
	listGraphics
)

// processList answers GPU g's process list of the given kind.
func (n *Node) processList(g, list int) ([]nvml.ProcessInfo, nvml.Return) {
	if n.parentDenied(g) {
		return nil, nvml.ERROR_NO_PERMISSION
	}
	tr := &n.sc.Traps
	t, _ := n.now()
	var out []nvml.ProcessInfo
	for _, p := range n.running(g, t) {
		pod := p.pod < len(n.sc.Pods)
		switch list {
		case listCompute:
			if pod && tr.MPS[g] {
				continue
			}
		case listMPS:
			if !pod || !tr.MPS[g] {
				continue
			}
		case listGraphics:
			if !pod || !tr.Graphics[g] {
				continue
			}
		}
		// Without MIG, NVML reports 0xFFFFFFFF for the instance IDs; in MIG
		// mode the parent lists every instance's processes with theirs.
		gi, ci := n.instanceIDs(g, p.pid)
		mem := p.memory
		if tr.MemoryNotAvailable[g] {
			mem = math.MaxUint64
		}
		out = append(out, nvml.ProcessInfo{Pid: p.pid, UsedGpuMemory: mem, GpuInstanceId: gi, ComputeInstanceId: ci})
	}
	return n.asDecoded(out), nvml.SUCCESS
}

// asDecoded is list as go-nvml decodes what the driver wrote: on the 535.43
// to 535.86 drivers the _v3 calls write 32-byte entries (pid, memory, GPU
// and compute instance, usedGpuCcProtectedMemory) into go-nvml's array of
// 24-byte ProcessInfo, which go-nvml then reads at its own stride.
func (n *Node) asDecoded(list []nvml.ProcessInfo) []nvml.ProcessInfo {
	if !n.processStructBug() || len(list) == 0 {
		return list
	}
	raw := make([]byte, 32*len(list))
	for i, p := range list {
		e := raw[32*i:]
		binary.LittleEndian.PutUint32(e[0:], p.Pid)
		binary.LittleEndian.PutUint64(e[8:], p.UsedGpuMemory)
		binary.LittleEndian.PutUint32(e[16:], p.GpuInstanceId)
		binary.LittleEndian.PutUint32(e[20:], p.ComputeInstanceId)
	}
	out := make([]nvml.ProcessInfo, len(list))
	for i := range out {
		e := raw[24*i:]
		out[i] = nvml.ProcessInfo{
			Pid:               binary.LittleEndian.Uint32(e[0:]),
			UsedGpuMemory:     binary.LittleEndian.Uint64(e[8:]),
			GpuInstanceId:     binary.LittleEndian.Uint32(e[16:]),
			ComputeInstanceId: binary.LittleEndian.Uint32(e[20:]),
		}
	}
	return out
}

// zombieSamples appends GPU g's zombie entries to out for a call asking
// for samples newer than lastSeen.
func (n *Node) zombieSamples(g int, lastSeen uint64, out []nvml.ProcessUtilizationSample) []nvml.ProcessUtilizationSample {
	_, last, ok := n.window(g, lastSeen)
	for _, z := range n.sc.Traps.Zombies {
		if z.GPU != g {
			continue
		}
		switch z.Shape {
		case ZombieGarbage:
			// nvtop #110: "PID=50554 %SM=37100 %ENC=50583 %DEC=50624
			// TS=217144956601725".
			out = append(out, nvml.ProcessUtilizationSample{Pid: z.PID, TimeStamp: 217144956601725, SmUtil: 37100, EncUtil: 50583, DecUtil: 50624})
			if ok {
				out = append(out, nvml.ProcessUtilizationSample{Pid: z.PID, TimeStamp: n.stamp(last), SmUtil: 38305, EncUtil: 49270, DecUtil: 50571})
			}
		case ZombieStale:
			if ok {
				out = append(out, nvml.ProcessUtilizationSample{Pid: z.PID, TimeStamp: n.stamp(last), SmUtil: uint32(math.Round(100 * z.Value))})
			}
		}
	}
	return out
}

// splitComputeInstances splits the MIG devices the scenario names into
// compute instances: the device keeps its index, its UUID, its pods and
// compute instance 0; each further compute instance is a MIG device of its
// own at the next free index after the layout, with a UUID of its own, the
// same GPU instance, no pods, and compute instance IDs 1, 2, …. Each has
// the GPU instance's memory and gpuInstanceSliceCount, and its share of
// the slices as computeInstanceSliceCount (nvml.h, nvmlDeviceAttributes_t).
func (n *Node) splitComputeInstances() {
	keys := make([][2]int, 0, len(n.sc.Traps.ComputeInstances))
	for k := range n.sc.Traps.ComputeInstances {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b [2]int) int {
		if a[0] != b[0] {
			return a[0] - b[0]
		}
		return a[1] - b[1]
	})
	next := map[int]int{}
	for _, k := range keys {
		count := n.sc.Traps.ComputeInstances[k]
		gpu, slot := k[0], k[1]
		var md *migDevice
		for _, m := range n.mig[gpu] {
			if m.slot == slot && m.holding == nil {
				md = m
			}
		}
		if md == nil {
			continue
		}
		if _, ok := next[gpu]; !ok {
			next[gpu] = len(n.sc.MIG[gpu])
		}
		ciSlices := int(md.profile.info.SliceCount) / count
		md.ciSlices = ciSlices
		for ci := 1; ci < count; ci++ {
			extra := &migDevice{gpu: gpu, slot: next[gpu], profile: md.profile, gi: md.gi, ci: ci, ciSlices: ciSlices,
				uuid: migUUID(n.sc.Node, gpu, next[gpu]), util: series{}, from: md.from, to: md.to, start: md.start}
			next[gpu]++
			n.mig[gpu] = append(n.mig[gpu], extra)
		}
	}
}

// Process lists of a GPU, and of a MIG device.

func (h *handle) GetMPSComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	if ret, ok := h.n.nvmlFault(h.g, CallProcesses); ok {
		return nil, ret
	}
	return h.n.processList(h.g, listMPS)
}

func (h *handle) GetGraphicsRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	if ret, ok := h.n.nvmlFault(h.g, CallProcesses); ok {
		return nil, ret
	}
	return h.n.processList(h.g, listGraphics)
}

// A MIG device's MPS and graphics lists are empty: the traps that fill
// them are per GPU, and a GPU in MIG mode runs neither here.

func (m *migHandle) GetMPSComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	return m.emptyList()
}

func (m *migHandle) GetGraphicsRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	return m.emptyList()
}

func (m *migHandle) emptyList() ([]nvml.ProcessInfo, nvml.Return) {
	t, _ := m.parent.n.now()
	if !m.m.alive(t) {
		return nil, nvml.ERROR_NOT_FOUND
	}
	return []nvml.ProcessInfo{}, nvml.SUCCESS
}

func (d *driver) DeviceGetMPSComputeRunningProcesses(h nvml.Device) ([]nvml.ProcessInfo, nvml.Return) {
	return h.GetMPSComputeRunningProcesses()
}

func (d *driver) DeviceGetGraphicsRunningProcesses(h nvml.Device) ([]nvml.ProcessInfo, nvml.Return) {
	return h.GetGraphicsRunningProcesses()
}

// MIGModeChange turns a GPU's MIG mode on or off at a scenario time, as
// nvidia-mig-parted or NVIDIA's DRA driver do at runtime; the change takes
// a GPU reset, which empties the GPU's sample ring.
type MIGModeChange struct {
	GPU     int
	At      time.Duration
	Enabled bool
}

// DriverReload is the node's driver unloaded at At and loaded again For
// later, as Version (empty: unchanged), as the GPU Operator's driver
// upgrade does. Meanwhile Init answers ERROR_DRIVER_NOT_LOADED; a session
// opened before it answers ERROR_DRIVER_NOT_LOADED during it and
// ERROR_LIB_RM_VERSION_MISMATCH after, until it is shut down.
type DriverReload struct {
	At, For time.Duration
	Version string
}

// NodeLabel is a label the node object carries over [From, To): the GPU
// Operator's MIG manager and driver upgrade controller announce a
// reconfiguration so.
type NodeLabel struct {
	Key, Value string
	From, To   time.Duration
}

// runtimeTraps checks the runtime-change keys of the driver mapping.
func (d *validator) runtimeTraps(spec *ScenarioSpec, s *Scenario) error {
	ds, t := spec.Driver, &s.Traps
	if ds == nil {
		return nil
	}
	changed := map[int]bool{}
	for i, cs := range ds.MIGMode {
		p := fmt.Sprintf("driver.mig_mode[%d]", i)
		if err := d.required(p, "gpu", "at", "mode"); err != nil {
			return err
		}
		dev, err := d.gpu(p+".gpu", cs.GPU.DeviceSpec, s.GPUs)
		if err != nil {
			return err
		}
		at, err := d.offset(p+".at", cs.At, s.Duration)
		if err != nil {
			return err
		}
		mode := cs.Mode
		if err := d.oneOf(p+".mode", mode, "enabled", "disabled"); err != nil {
			return err
		}
		if changed[dev.GPU] {
			return d.errf(p, "gpu:%d changes MIG mode once at most", dev.GPU)
		}
		changed[dev.GPU] = true
		_, inMIG := s.MIG[dev.GPU]
		enabled := mode == "enabled"
		if enabled == inMIG {
			return d.errf(p+".mode", "gpu:%d is %s already", dev.GPU, mode)
		}
		if enabled && len(s.MIG[dev.GPU]) > 0 {
			return d.errf(p, "gpu:%d turns MIG mode on with no MIG device", dev.GPU)
		}
		for _, pod := range s.Pods {
			for _, dv := range pod.Devices {
				// Whole-GPU holders before MIG mode, MIG holders
				// before it ends.
				if dv.GPU == dev.GPU && pod.To > at && (enabled && !dv.MIG || !enabled && dv.MIG) {
					return d.errf(p, "pod %s/%s holds %s after %s, when gpu:%d's MIG mode changes", pod.Namespace, pod.Name, dv, fmtDur(at), dev.GPU)
				}
				if dv.GPU == dev.GPU && !enabled && !dv.MIG && pod.From < at {
					return d.errf(p, "pod %s/%s holds %s before %s, while gpu:%d is in MIG mode", pod.Namespace, pod.Name, dv, fmtDur(at), dev.GPU)
				}
			}
		}
		t.MIGModeChanges = append(t.MIGModeChanges, MIGModeChange{GPU: dev.GPU, At: at, Enabled: enabled})
	}
	var last time.Duration = -1
	for i, rs := range ds.Reloads {
		p := fmt.Sprintf("driver.reloads[%d]", i)
		if !d.has(p+".at") || !d.has(p+".for") {
			return d.errf(p, "want at and for")
		}
		r := DriverReload{For: time.Duration(rs.For), Version: rs.Version}
		var err error
		if r.At, err = d.offset(p+".at", rs.At, s.Duration); err != nil {
			return err
		}
		if r.At <= last {
			return d.errf(p+".at", "%s is not after the previous reload's end", fmtDur(r.At))
		}
		last = r.At + r.For
		if d.has(p+".version") && !driverVersionRE.MatchString(r.Version) {
			return d.errf(p+".version", "%q is not a driver version such as 550.90.07", r.Version)
		}
		t.Reloads = append(t.Reloads, r)
	}
	for i, ls := range ds.NodeLabels {
		p := fmt.Sprintf("driver.node_labels[%d]", i)
		if !d.has(p+".key") || !d.has(p+".value") {
			return d.errf(p, "want key and value")
		}
		l := NodeLabel{Key: ls.Key, Value: ls.Value, To: s.Duration}
		if err := d.window(p, ls.From, ls.To, s.Duration, &l.From, &l.To); err != nil {
			return err
		}
		t.Labels = append(t.Labels, l)
	}
	return nil
}

// applyMIGModeChanges ends the MIG devices of GPUs whose MIG mode is turned
// off when it is.
func (n *Node) applyMIGModeChanges() {
	for _, c := range n.sc.Traps.MIGModeChanges {
		if c.Enabled {
			continue
		}
		for _, md := range n.mig[c.GPU] {
			md.to = min(md.to, c.At)
		}
	}
}

// migModeAt is GPU g's MIG mode at scenario time t.
func (n *Node) migModeAt(g int, t time.Duration) bool {
	on := n.migOn[g]
	for _, c := range n.sc.Traps.MIGModeChanges {
		if c.GPU == g && c.At <= t {
			on = c.Enabled
		}
	}
	return on
}

// migModeReset is the latest MIG mode change of GPU g by t: it reset the
// GPU.
func (n *Node) migModeReset(g int, t time.Duration) (time.Duration, bool) {
	for _, c := range n.sc.Traps.MIGModeChanges {
		if c.GPU == g && c.At <= t {
			return c.At, true
		}
	}
	return 0, false
}

// reloadAt is the reload under way at t, or the index of the reloads done
// by t: gen counts the reloads begun by t.
func (n *Node) reloadAt(t time.Duration) (active bool, gen int) {
	for _, r := range n.sc.Traps.Reloads {
		if r.At <= t {
			gen++
			active = active || t < r.At+r.For
		}
	}
	return active, gen
}

// sessions is the simulated driver's view of NVML sessions: Init opens
// one, Shutdown closes one, and gen is the reload generation the newest
// was opened in. A reload that finds a session open would fail on a node
// (the kernel module is in use); here it happens, and HeldDuringReload
// says it was held.
type sessions struct {
	mu   sync.Mutex
	open int
	gen  int
	held bool
}

// initSession is Init: ERROR_DRIVER_NOT_LOADED during a reload.
func (n *Node) initSession() nvml.Return {
	t, _ := n.now()
	active, gen := n.reloadAt(t)
	if active {
		return nvml.ERROR_DRIVER_NOT_LOADED
	}
	s := &n.sessions
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open++
	s.gen = gen
	return nvml.SUCCESS
}

// closeSession is Shutdown.
func (n *Node) closeSession() nvml.Return {
	s := &n.sessions
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open == 0 {
		return nvml.ERROR_UNINITIALIZED
	}
	s.open--
	return nvml.SUCCESS
}

// reloadFault is what a call of an open session answers because of a
// reload: during it ERROR_DRIVER_NOT_LOADED, after it, for a session
// opened before, ERROR_LIB_RM_VERSION_MISMATCH.
func (n *Node) reloadFault() (nvml.Return, bool) {
	if len(n.sc.Traps.Reloads) == 0 {
		return nvml.SUCCESS, false
	}
	t, _ := n.now()
	active, gen := n.reloadAt(t)
	s := &n.sessions
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open == 0 || s.gen == gen && !active {
		return nvml.SUCCESS, false
	}
	s.held = s.held || active
	if active {
		return nvml.ERROR_DRIVER_NOT_LOADED, true
	}
	return nvml.ERROR_LIB_RM_VERSION_MISMATCH, true
}

// HeldDuringReload reports whether an NVML session was open, and used,
// while a reload was under way: on a node the reload would have failed.
func (n *Node) HeldDuringReload() bool {
	n.sessions.mu.Lock()
	defer n.sessions.mu.Unlock()
	return n.sessions.held
}

// OpenSessions is how many NVML sessions are open (Init without Shutdown).
func (n *Node) OpenSessions() int {
	n.sessions.mu.Lock()
	defer n.sessions.mu.Unlock()
	return n.sessions.open
}

// NodeLabels are the labels the node object carries at the clock's now
// that the scenario's node_labels set.
func (n *Node) NodeLabels() map[string]string {
	t, _ := n.now()
	out := map[string]string{}
	for _, l := range n.sc.Traps.Labels {
		if l.From <= t && t < l.To {
			out[l.Key] = l.Value
		}
	}
	return out
}
