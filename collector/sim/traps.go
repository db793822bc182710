package sim

import (
	"encoding/binary"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.yaml.in/yaml/v3"
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

// driverTrapKeys are the keys of the `driver:` mapping that driverTraps
// reads.
var driverTrapKeys = []string{"version", "mig_parent_permission", "mps", "graphics", "memory_not_available", "zombies", "compute_instances"}

// driver decodes the top-level `driver:` mapping.
func (d *decoder) driver(n *yaml.Node, s *Scenario) error {
	m, err := d.mapping(n, "driver", driverTrapKeys...)
	if err != nil {
		return err
	}
	return d.driverTraps(m, s)
}

var driverVersionRE = regexp.MustCompile(`^\d{3}\.\d{1,3}(\.\d{1,3})?$`)

// driverTraps decodes the trap keys of the `driver:` mapping m; the GPUs,
// MIG layouts and pods must be decoded already.
func (d *decoder) driverTraps(m map[string]*yaml.Node, s *Scenario) error {
	t := &s.Traps
	if n := m["version"]; n != nil {
		v, err := d.str(n, "driver.version")
		if err != nil {
			return err
		}
		if !driverVersionRE.MatchString(v) {
			return d.errf(n, "driver.version", "%q is not a driver version such as 470.256.02 or 535.54.03", v)
		}
		t.Version = v
	}
	if n := m["mig_parent_permission"]; n != nil {
		v, err := d.str(n, "driver.mig_parent_permission")
		if err != nil {
			return err
		}
		switch v {
		case "denied":
			t.MIGParentDenied = true
		case "allowed":
		default:
			return d.errf(n, "driver.mig_parent_permission", "%q is not one of allowed, denied", v)
		}
	}
	for _, k := range []struct {
		key string
		set *map[int]bool
	}{{"mps", &t.MPS}, {"graphics", &t.Graphics}, {"memory_not_available", &t.MemoryNotAvailable}} {
		n := m[k.key]
		if n == nil {
			continue
		}
		items, err := d.seq(n, "driver."+k.key)
		if err != nil {
			return err
		}
		*k.set = map[int]bool{}
		for i, it := range items {
			spec, err := d.device(it, fmt.Sprintf("driver.%s[%d]", k.key, i), s.GPUs)
			if err != nil {
				return err
			}
			if spec.Replicated {
				return d.errf(it, fmt.Sprintf("driver.%s[%d]", k.key, i), "name the GPU, gpu:%d", spec.GPU)
			}
			(*k.set)[spec.GPU] = true
		}
	}
	if n := m["zombies"]; n != nil {
		items, err := d.seq(n, "driver.zombies")
		if err != nil {
			return err
		}
		for i, it := range items {
			p := fmt.Sprintf("driver.zombies[%d]", i)
			zm, err := d.mapping(it, p, "device", "pid", "shape", "value")
			if err != nil {
				return err
			}
			for _, k := range []string{"device", "pid", "shape"} {
				if zm[k] == nil {
					return d.errf(it, p+"."+k, "missing")
				}
			}
			spec, err := d.device(zm["device"], p+".device", s.GPUs)
			if err != nil {
				return err
			}
			pid, err := d.integer(zm["pid"], p+".pid", 1, math.MaxInt32)
			if err != nil {
				return err
			}
			z := Zombie{GPU: spec.GPU, PID: uint32(pid)}
			if z.Shape, err = d.str(zm["shape"], p+".shape"); err != nil {
				return err
			}
			if z.Shape != ZombieGarbage && z.Shape != ZombieStale {
				return d.errf(zm["shape"], p+".shape", "%q is not one of %s, %s", z.Shape, ZombieGarbage, ZombieStale)
			}
			if v := zm["value"]; v != nil {
				if z.Value, err = d.ratio(v, p+".value"); err != nil {
					return err
				}
			}
			t.Zombies = append(t.Zombies, z)
		}
	}
	if n := m["compute_instances"]; n != nil {
		if n.Kind != yaml.MappingNode {
			return d.errf(n, "driver.compute_instances", `want a mapping of MIG devices to compute instance counts, such as {"mig:0/0": 3}, got %s`, kindName(n))
		}
		t.ComputeInstances = map[[2]int]int{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			field := "driver.compute_instances." + k.Value
			gpu, slot, ok := parseMIGRef(k.Value)
			if !ok {
				return d.errf(k, field, "%q is not a MIG device such as mig:0/0", k.Value)
			}
			layout := s.MIG[gpu]
			if slot >= len(layout) || layout[slot] == "" {
				return d.errf(k, field, "%s is no MIG device of the scenario's fixed MIG layouts", k.Value)
			}
			p, _ := systems[s.System].migProfile(layout[slot])
			count, err := d.integer(v, field, 2, int64(p.info.SliceCount))
			if err != nil {
				return err
			}
			if int(p.info.SliceCount)%int(count) != 0 {
				return d.errf(v, field, "%d compute instances do not divide the %d slices of a %s evenly", count, p.info.SliceCount, layout[slot])
			}
			if free := MaxMIGDevices - len(layout); int(count)-1 > free-len(t.ComputeInstances) {
				return d.errf(v, field, "no MIG device index is left for %d more compute instances (at most %d MIG devices)", count-1, MaxMIGDevices)
			}
			t.ComputeInstances[[2]int{gpu, slot}] = int(count)
		}
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

// driverVersion is what SystemGetDriverVersion answers.
func (n *Node) driverVersion() string {
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
