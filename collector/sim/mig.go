package sim

import (
	"crypto/sha256"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// ResourceMIGPrefix starts the extended resource of a MIG device, as the
// NVIDIA device plugin's mixed strategy names it: nvidia.com/mig-3g.40gb.
const ResourceMIGPrefix = "nvidia.com/mig-"

const (
	// MaxMIGDevices is what GetMaxMigDeviceCount answers on a MIG-enabled
	// GPU, and the most slots a scenario's MIG layout may list.
	MaxMIGDevices = 7
	// migComputeSlices and migMemorySlices are what one GPU divides into:
	// seven compute slices and eight eighths of its memory.
	migComputeSlices = 7
	migMemorySlices  = 8
	// migEmpty marks an unused slot in a scenario's MIG layout.
	migEmpty = "empty"
)

// migProfile is one MIG GPU-instance profile of a system's GPU, named as
// nvidia-smi and the device plugin name it.
type migProfile struct {
	name string
	info nvml.GpuInstanceProfileInfo
	// memSlices is how many eighths of the GPU's memory the instance takes.
	memSlices int
}

// migProfileName is the profile name a reader derives from a MIG device's
// attributes: <slices>g.<memory in GiB, rounded up>gb.
func migProfileName(slices uint32, memoryMB uint64) string {
	return fmt.Sprintf("%dg.%dgb", slices, (memoryMB+1023)/1024)
}

// migProfiles lists the GPU-instance profiles of the system's GPU, smallest
// first, from go-nvml's mock tables. The media-extension profiles (1g.10gb+me)
// are left out: their attributes read the same as the plain profile's, so a
// reader could not tell them apart by name.
func (s system) migProfiles() []migProfile {
	var out []migProfile
	for id, info := range s.gpu.MIGProfiles.GpuInstanceProfiles {
		if id == nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1 {
			continue
		}
		mem := int(math.Round(float64(info.MemorySizeMB) * migMemorySlices / float64(s.gpu.MemoryMB)))
		out = append(out, migProfile{name: migProfileName(info.SliceCount, info.MemorySizeMB), info: info, memSlices: mem})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].info.SliceCount != out[j].info.SliceCount {
			return out[i].info.SliceCount < out[j].info.SliceCount
		}
		return out[i].info.MemorySizeMB < out[j].info.MemorySizeMB
	})
	return out
}

func (s system) migProfile(name string) (migProfile, bool) {
	for _, p := range s.migProfiles() {
		if p.name == name {
			return p, true
		}
	}
	return migProfile{}, false
}

func (s system) migProfileNames() []string {
	var names []string
	for _, p := range s.migProfiles() {
		names = append(names, p.name)
	}
	return names
}

// fmtLayout prints a MIG layout as a scenario spells it.
func fmtLayout(layout []string) string {
	out := make([]string, len(layout))
	for i, p := range layout {
		out[i] = p
		if p == "" {
			out[i] = migEmpty
		}
	}
	return "[" + strings.Join(out, ", ") + "]"
}

// mig checks the top-level mig mapping: GPU to the profile of each MIG
// device slot, "empty" for a slot with no device. The instances must fit the
// GPU: at most seven compute slices, eight eighths of its memory, and no more
// instances of a profile than the GPU offers.
func (d *validator) mig(spec *ScenarioSpec, s *Scenario) error {
	if spec.MIG == nil {
		return nil
	}
	sys := systems[s.System]
	s.MIG = make(map[int][]string, len(spec.MIG))
	for _, k := range sortedKeys(spec.MIG) {
		f := "mig." + k
		dev, err := d.gpuKey(f, k, s.GPUs)
		if err != nil {
			return err
		}
		if dev.Replicated {
			return d.errf(f, "MIG layouts are per GPU; want gpu:%d", dev.GPU)
		}
		if _, dup := s.MIG[dev.GPU]; dup {
			return d.errf(f, "given twice")
		}
		ms := spec.MIG[k]
		if ms.Dynamic {
			if s.MIGDynamic == nil {
				s.MIGDynamic = map[int]bool{}
			}
			s.MIG[dev.GPU], s.MIGDynamic[dev.GPU] = []string{}, true
			continue
		}
		if len(ms.Profiles) > MaxMIGDevices {
			return d.errf(f, "%d slots, more than the %d MIG devices a GPU holds", len(ms.Profiles), MaxMIGDevices)
		}
		layout := make([]string, len(ms.Profiles))
		count := map[string]uint32{}
		var compute, memory uint32
		for j, name := range ms.Profiles {
			fj := fmt.Sprintf("%s[%d]", f, j)
			if name == migEmpty {
				continue
			}
			p, ok := sys.migProfile(name)
			if !ok {
				return d.errf(fj, "%q is not a MIG profile of the %s; want one of %s, or %s for an unused slot",
					name, sys.gpu.Name, strings.Join(sys.migProfileNames(), ", "), migEmpty)
			}
			if count[name]++; count[name] > p.info.InstanceCount {
				return d.errf(fj, "a GPU holds at most %d %s instances", p.info.InstanceCount, name)
			}
			if compute += p.info.SliceCount; compute > migComputeSlices {
				return d.errf(fj, "%s brings gpu:%d to %d compute slices, more than the %d it has", name, dev.GPU, compute, migComputeSlices)
			}
			if memory += uint32(p.memSlices); memory > migMemorySlices {
				return d.errf(fj, "%s brings gpu:%d to %d eighths of its memory, more than the %d it has", name, dev.GPU, memory, migMemorySlices)
			}
			layout[j] = name
		}
		s.MIG[dev.GPU] = layout
	}
	return nil
}

// podDevice checks a device a pod holds: gpu:N, gpu:N::R, mig:N/S (slot S
// of GPU N's MIG layout) or mig:N:<profile>. A GPU in MIG mode is held only
// by its slots.
func (d *validator) podDevice(field string, spec DeviceSpec, s *Scenario) (DeviceSpec, error) {
	v := spec.String()
	if spec.MIG && spec.GPU >= s.GPUs {
		return DeviceSpec{}, d.errf(field, "%s is not on one of the node's %d GPUs (gpu:0 to gpu:%d)", v, s.GPUs, s.GPUs-1)
	}
	gpu := spec.GPU
	switch {
	case spec.Dynamic:
		if !s.MIGDynamic[gpu] {
			if _, on := s.MIG[gpu]; on {
				return DeviceSpec{}, d.errf(field, "%s: gpu:%d has a fixed MIG layout; hold one of its devices as mig:%d/S, or make it %s under mig", v, gpu, gpu, MIGDynamicMode)
			}
			return DeviceSpec{}, d.errf(field, `%s: gpu:%d is not in dynamic MIG mode; give it mig: {"gpu:%d": %s}`, v, gpu, gpu, MIGDynamicMode)
		}
		sys := systems[s.System]
		if _, ok := sys.migProfile(spec.Profile); !ok {
			return DeviceSpec{}, d.errf(field, "%s: %q is not a MIG profile of the %s; want one of %s", v, spec.Profile, sys.gpu.Name, strings.Join(sys.migProfileNames(), ", "))
		}
		return spec, nil
	case spec.MIG:
		layout, on := s.MIG[gpu]
		if !on {
			return DeviceSpec{}, d.errf(field, "%s: gpu:%d has no MIG layout; give it one under mig, or hold it whole as gpu:%d", v, gpu, gpu)
		}
		if s.MIGDynamic[gpu] {
			return DeviceSpec{}, d.errf(field, "%s: gpu:%d is in dynamic MIG mode; ask for a profile, as mig:%d:<profile>", v, gpu, gpu)
		}
		if spec.MIGSlot >= len(layout) || layout[spec.MIGSlot] == "" {
			return DeviceSpec{}, d.errf(field, "%s: gpu:%d has no MIG device %d; its layout is %s", v, gpu, spec.MIGSlot, fmtLayout(layout))
		}
		return spec, nil
	}
	if _, err := d.gpu(field, spec, s.GPUs); err != nil {
		return spec, err
	}
	if s.MIGDynamic[gpu] && systems[s.System].migToggle() && !spec.Replicated {
		// NVIDIA's DRA driver offers the whole GPU beside its partitions
		// where MIG mode changes without a reset (nvlib.go).
		return spec, nil
	}
	if _, on := s.MIG[gpu]; on {
		if s.MIGDynamic[gpu] {
			return spec, d.errf(field, "%s: the %s cannot leave MIG mode without a reset, so NVIDIA's DRA driver offers only its MIG devices (mig:%d:<profile>)", spec, systems[s.System].gpu.Name, gpu)
		}
		return spec, d.errf(field, "%s: the GPU is in MIG mode; hold one of its MIG devices (mig:%d/S)", spec, gpu)
	}
	return spec, nil
}

// migToggle reports whether the system's GPUs change MIG mode without a
// reset: Hopper and newer (NVIDIA/k8s-dra-driver-gpu, nvlib.go
// supportsMIGModeToggle: arch >= DEVICE_ARCH_HOPPER).
func (s system) migToggle() bool { return s.gpu.Architecture >= nvml.DEVICE_ARCH_HOPPER }

// migPod checks a pod's MIG devices against its resource and memory, and
// derives the resource from the first MIG device's profile when the pod
// names none. A DRA pod has no resource: only its memory is checked.
func (d *validator) migPod(path string, ps *PodSpec, pod *Pod, s *Scenario) error {
	sys := systems[s.System]
	dra := pod.Allocation == AllocationDRA
	// GKE's device plugin hands every device out as nvidia.com/gpu.
	gke := s.DeviceIDs == DeviceIDsGKE
	if !d.has(path+".resource") && !dra && !gke {
		for _, spec := range pod.Devices {
			if spec.MIG {
				pod.Resource = ResourceMIGPrefix + s.MIG[spec.GPU][spec.MIGSlot]
				break
			}
		}
	}
	for j, spec := range pod.Devices {
		f := fmt.Sprintf("%s.devices[%d]", path, j)
		if !spec.MIG {
			if !dra && strings.HasPrefix(pod.Resource, ResourceMIGPrefix) {
				return d.errf(f, "%s is not a MIG device, but %s hands out MIG devices (mig:N/S)", spec, pod.Resource)
			}
			continue
		}
		name := spec.Profile
		if !spec.Dynamic {
			name = s.MIG[spec.GPU][spec.MIGSlot]
		}
		if want := ResourceMIGPrefix + name; !dra && !gke && pod.Resource != want {
			return d.errf(f, "%s is a %s MIG device, handed out as %s, not %s", spec, name, want, pod.Resource)
		}
		p, _ := sys.migProfile(name)
		if limit := p.info.MemorySizeMB << 20; pod.Memory > limit {
			return d.errAt(d.first(path+".memory", f), path+".memory", "%s is more than the %s of %s (%s)", fmtBytes(pod.Memory), fmtBytes(limit), spec, name)
		}
	}
	return nil
}

// migSeries is the busy ratio of MIG device slot on gpu: the sum of its
// holders' ratios, capped at 1 (holders take turns; they never overlap).
func (s *Scenario) migSeries(gpu, slot int, pods []series) series {
	var on []series
	for i, p := range s.Pods {
		for _, d := range p.Devices {
			if d.MIG && !d.Dynamic && d.GPU == gpu && d.MIGSlot == slot {
				on = append(on, pods[i])
			}
		}
	}
	return combine(nil, on, func(t time.Duration) float64 {
		v := 0.0
		for _, p := range on {
			v += p.value(t)
		}
		return min(v, 1)
	})
}

// migGPUSeries is the busy ratio of a GPU in MIG mode: the mean of its MIG
// devices' ratios weighted by their compute slices, so a busy 3g device
// makes the GPU 3/7 busy. Power, energy and whole-GPU GPM follow it.
func (s *Scenario) migGPUSeries(gpu int, pods []series) series {
	sys := systems[s.System]
	var parts []series
	var weights []float64
	for slot, name := range s.MIG[gpu] {
		if name == "" {
			continue
		}
		p, _ := sys.migProfile(name)
		ser := s.migSeries(gpu, slot, pods)
		parts, weights = append(parts, ser), append(weights, float64(p.info.SliceCount)/migComputeSlices)
	}
	// A dynamic MIG device's ratio is 0 outside its life: its pods' are;
	// so are the ratios of the pods that hold the GPU whole while it is
	// out of MIG mode.
	for i, p := range s.Pods {
		for _, d := range p.Devices {
			if !d.MIG && d.GPU == gpu {
				parts, weights = append(parts, pods[i]), append(weights, 1)
			}
		}
	}
	plan, _ := s.migPlan()
	for i := range plan {
		if h := &plan[i]; h.gpu == gpu {
			parts, weights = append(parts, s.holdingSeries(h, pods)), append(weights, float64(h.profile.info.SliceCount)/migComputeSlices)
		}
	}
	return combine(nil, parts, func(t time.Duration) float64 {
		v := 0.0
		for i, p := range parts {
			v += weights[i] * p.value(t)
		}
		return min(v, 1)
	})
}

// MIGUtilAt is the busy ratio of MIG device slot of gpu at scenario time t:
// its holder's ratio, 0 when nobody holds it.
func (s *Scenario) MIGUtilAt(gpu, slot int, t time.Duration) float64 {
	pods := make([]series, len(s.Pods))
	for i := range s.Pods {
		pods[i] = s.podSeries(i)
	}
	return s.migSeries(gpu, slot, pods).value(t)
}

// migDevice is one MIG device as the simulated driver knows it: a GPU
// instance with one compute instance (ID 0) spanning it, which exists over
// [from, to): always for a fixed layout's, over its claim's life for a
// dynamic one.
type migDevice struct {
	gpu, slot int
	profile   migProfile
	gi        int
	// ci is its compute instance ID, and ciSlices its compute instance's
	// slices when the GPU instance is split into several (0: one compute
	// instance spans it).
	ci, ciSlices int
	uuid         string
	util         series
	sm           series // GPM's SM_UTIL: see smSeries
	procs        []proc // by PID
	from, to     time.Duration
	// start is the first memory slice of its placement; -1 when a fixed
	// layout has none (the DRA driver then cannot name it).
	start int
	// holding is the claim's device a dynamic MIG device is; nil for a
	// fixed layout's.
	holding *migHolding
}

func (md *migDevice) alive(t time.Duration) bool { return md.from <= t && t < md.to }

// computeSlices is the slices of the device's compute instance.
func (md *migDevice) computeSlices() uint32 {
	if md.ciSlices > 0 {
		return uint32(md.ciSlices)
	}
	return md.profile.info.SliceCount
}

// migGIIDs are the GPU instance IDs the driver hands out by instance size,
// first free first, close to what a real driver gives the usual placements
// (7g: 0; 4g: 1; 3g: 2 and 1; 2g: 3 to 5; 1g: 7 to 13). They differ from
// the MIG device indices on purpose: readers must not confuse the two.
var migGIIDs = map[uint32][]int{
	7: {0}, 4: {1}, 3: {2, 1}, 2: {3, 4, 5}, 1: {7, 8, 9, 10, 11, 12, 13},
}

// newMIGDevices builds the MIG devices of every GPU in MIG mode, by GPU:
// a fixed layout's in slot order, then the dynamic ones in the order the
// driver creates them; and which GPUs are in MIG mode.
func newMIGDevices(n *Node) ([][]*migDevice, []bool, error) {
	sc := n.sc
	out := make([][]*migDevice, sc.GPUs)
	on := make([]bool, sc.GPUs)
	static := make([][]*migDevice, sc.GPUs) // by slot
	for gpu, layout := range sc.MIG {
		if gpu < 0 || gpu >= sc.GPUs {
			return nil, nil, fmt.Errorf("sim: scenario %s: MIG layout for gpu:%d, not one of %d GPUs", sc.Name, gpu, sc.GPUs)
		}
		if len(layout) > MaxMIGDevices {
			return nil, nil, fmt.Errorf("sim: scenario %s: gpu:%d has %d MIG slots, more than %d", sc.Name, gpu, len(layout), MaxMIGDevices)
		}
		// A GPU in dynamic MIG mode is in MIG mode while the driver has
		// made a MIG device on it, where the GPU can change mode
		// (draMIGModeAt).
		on[gpu] = !sc.MIGDynamic[gpu]
		starts, placed := n.sys.staticPlacements(layout)
		static[gpu] = make([]*migDevice, len(layout))
		used := map[int]bool{}
		for slot, name := range layout {
			if name == "" {
				continue
			}
			p, ok := n.sys.migProfile(name)
			if !ok {
				return nil, nil, fmt.Errorf("sim: scenario %s: gpu:%d slot %d: %q is not a MIG profile of the %s", sc.Name, gpu, slot, name, n.sys.gpu.Name)
			}
			gi := firstFreeGI(p, used)
			used[gi] = true
			md := &migDevice{gpu: gpu, slot: slot, profile: p, gi: gi, uuid: migUUID(sc.Node, gpu, slot), util: sc.migSeries(gpu, slot, n.pods), from: -forever, to: forever, start: -1}
			md.sm = sc.smSeries(n.pods, sc.holdersOf(func(d DeviceSpec) bool { return d.MIG && !d.Dynamic && d.GPU == gpu && d.MIGSlot == slot }), nil)
			if placed {
				md.start = starts[slot]
			}
			static[gpu][slot] = md
			out[gpu] = append(out[gpu], md)
		}
	}
	for i, p := range sc.Pods {
		for k, d := range p.Devices {
			switch {
			case !d.MIG:
				if _, mig := sc.MIG[d.GPU]; mig && !(sc.MIGDynamic[d.GPU] && n.sys.migToggle()) {
					return nil, nil, fmt.Errorf("sim: scenario %s: pod %s/%s holds %s, which is in MIG mode", sc.Name, p.Namespace, p.Name, d)
				}
			case d.Dynamic:
				if !sc.MIGDynamic[d.GPU] {
					return nil, nil, fmt.Errorf("sim: scenario %s: pod %s/%s holds %s, but the GPU is not in dynamic MIG mode", sc.Name, p.Namespace, p.Name, d)
				}
			default:
				if d.MIGSlot < 0 || d.MIGSlot >= len(static[d.GPU]) || static[d.GPU][d.MIGSlot] == nil {
					return nil, nil, fmt.Errorf("sim: scenario %s: pod %s/%s holds %s, which is no MIG device", sc.Name, p.Namespace, p.Name, d)
				}
				md := static[d.GPU][d.MIGSlot]
				md.procs = append(md.procs, proc{pid: sc.PID(i, k), pod: i, from: p.From, to: p.To, memory: p.Memory})
			}
		}
	}
	plan, pe := sc.migPlan()
	if pe != nil {
		return nil, nil, fmt.Errorf("sim: scenario %s: %s", sc.Name, pe.msg)
	}
	n.plan = plan
	for i := range plan {
		h := &plan[i]
		md := &migDevice{gpu: h.gpu, slot: h.slot, profile: h.profile, gi: h.gi, uuid: h.uuid, util: sc.holdingSeries(h, n.pods), from: h.from, to: h.to, start: h.start, holding: h}
		md.sm = sc.smSeries(n.pods, h.pods, nil)
		for _, pi := range h.pods {
			p := sc.Pods[pi]
			md.procs = append(md.procs, proc{pid: sc.PID(pi, h.dev), pod: pi, from: p.From, to: p.To, memory: p.Memory})
		}
		out[h.gpu] = append(out[h.gpu], md)
	}
	for _, devs := range out {
		for _, md := range devs {
			sort.Slice(md.procs, func(a, b int) bool { return md.procs[a].pid < md.procs[b].pid })
		}
	}
	return out, on, nil
}

// migUUID derives a stable MIG device UUID, like deviceUUID.
func migUUID(node string, gpu, slot int) string {
	h := sha256.Sum256(fmt.Appendf(nil, "gpuxray-sim/%s/gpu/%d/mig/%d", node, gpu, slot))
	h[6] = h[6]&0x0f | 0x50
	h[8] = h[8]&0x3f | 0x80
	return fmt.Sprintf("MIG-%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

// MIGDeviceUUID returns the UUID ("MIG-…") of the MIG device at index slot
// of gpu at the clock's now, or "" when there is none (an empty index, or
// a dynamic MIG device not created yet or destroyed).
func (n *Node) MIGDeviceUUID(gpu, slot int) string {
	t, _ := n.now()
	if md := n.migAt(gpu, slot, t); md != nil {
		return md.uuid
	}
	return ""
}

// migAt is the MIG device at index slot of gpu at scenario time t.
func (n *Node) migAt(gpu, slot int, t time.Duration) *migDevice {
	if gpu < 0 || gpu >= len(n.mig) {
		return nil
	}
	for _, md := range n.mig[gpu] {
		if md.slot == slot && md.alive(t) {
			return md
		}
	}
	return nil
}

// migEnabled reports whether gpu is in MIG mode at the clock's now.
// A trap's runtime MIG changes (driver: mig_mode) decide where a scenario
// has them; else NVIDIA's DRA driver does.
func (n *Node) migEnabled(gpu int) bool {
	t, _ := n.now()
	if len(n.sc.Traps.MIGModeChanges) > 0 {
		return n.migModeAt(gpu, t)
	}
	return n.draMIGModeAt(gpu, t)
}

// draMIGModeAt reports whether gpu is in MIG mode at scenario time t, as
// NVIDIA's DRA driver leaves it: a GPU
// with a fixed layout always is; one in dynamic MIG mode is while a MIG
// device the DRA driver made lives on it, where the GPU changes mode
// without a reset (the driver turns MIG mode on to create the first MIG
// device and off after destroying the last: nvlib.go createMigDevice,
// maybeDisableMigMode), and always is where it cannot (Ampere: the driver
// offers dynamic MIG only on a GPU already in MIG mode).
func (n *Node) draMIGModeAt(gpu int, t time.Duration) bool {
	if gpu < 0 || gpu >= len(n.migOn) {
		return false
	}
	if !n.sc.MIGDynamic[gpu] || !n.sys.migToggle() {
		_, mig := n.sc.MIG[gpu]
		return n.migOn[gpu] || mig
	}
	for _, md := range n.mig[gpu] {
		if md.holding != nil && md.alive(t) {
			return true
		}
	}
	return false
}

// draMIGOffSince is when gpu last left MIG mode at or before scenario time t,
// if it has: its sample rings start over then.
func (n *Node) draMIGOffSince(gpu int, t time.Duration) (time.Duration, bool) {
	if gpu < 0 || gpu >= len(n.mig) || !n.sc.MIGDynamic[gpu] || !n.sys.migToggle() || n.draMIGModeAt(gpu, t) {
		return 0, false
	}
	var off time.Duration
	found := false
	for _, md := range n.mig[gpu] {
		if md.holding != nil && md.to <= t && md.to > off && !n.draMIGModeAt(gpu, md.to) {
			off, found = md.to, true
		}
	}
	return off, found
}

// instanceIDs are the GPU and compute instance IDs NVML reports for process
// pid on gpu: those of its MIG device, or 0xFFFFFFFF for both without MIG.
func (n *Node) instanceIDs(gpu int, pid uint32) (gi, ci uint32) {
	for _, md := range n.mig[gpu] {
		for _, p := range md.procs {
			if p.pid == pid {
				return uint32(md.gi), 0
			}
		}
	}
	return math.MaxUint32, math.MaxUint32
}

func (md *migDevice) running(t time.Duration) []proc {
	var out []proc
	for _, p := range md.procs {
		if p.from <= t && t < p.to {
			out = append(out, p)
		}
	}
	return out
}

// memory is the MIG device's own framebuffer; the driver's reserve is
// counted on the parent only.
func (md *migDevice) memory(t time.Duration) nvml.Memory_v2 {
	m := nvml.Memory_v2{Total: md.profile.info.MemorySizeMB << 20}
	m.Version = nvml.STRUCT_VERSION(m, 2)
	for _, p := range md.running(t) {
		m.Used += p.memory
	}
	if m.Used < m.Total {
		m.Free = m.Total - m.Used
	}
	return m
}

// migSymbols are the MIG entry points the simulation implements, on every
// system (A100 and newer all have MIG).
var migSymbols = map[string]bool{
	"nvmlDeviceGetMaxMigDeviceCount": true, "nvmlDeviceGetMigDeviceHandleByIndex": true,
	"nvmlDeviceIsMigDeviceHandle": true, "nvmlDeviceGetAttributes_v2": true,
	"nvmlDeviceGetGpuInstanceId": true, "nvmlDeviceGetComputeInstanceId": true,
	"nvmlDeviceGetDeviceHandleFromMigDeviceHandle": true,
	"nvmlDeviceGetGpuInstanceById":                 true, "nvmlGpuInstanceGetInfo": true,
}

// migHandle is one MIG device as the driver hands it out. It embeds a bare
// go-nvml mock device only to be an nvml.Device: every call the simulation
// answers is a method here, and any other panics, unrecorded.
type migHandle struct {
	*mock.Device
	parent *handle
	m      *migDevice
}

var _ nvml.Device = (*migHandle)(nil)

// newMIGHandles builds a handle for each MIG device of parent's GPU, in
// the order of Node.mig; nil when its GPU is not in MIG mode.
func newMIGHandles(parent *handle) []*migHandle {
	devs := parent.n.mig[parent.g]
	out := make([]*migHandle, len(devs))
	for i, md := range devs {
		out[i] = &migHandle{Device: &mock.Device{}, parent: parent, m: md}
	}
	return out
}

// MIG calls on a parent GPU.

// GetMaxMigDeviceCount answers 7 in MIG mode and 0 without, as the driver.
func (h *handle) GetMaxMigDeviceCount() (int, nvml.Return) {
	if !h.n.migEnabled(h.g) {
		return 0, nvml.SUCCESS
	}
	return MaxMIGDevices, nvml.SUCCESS
}

// GetMigDeviceHandleByIndex answers ERROR_NOT_FOUND for an index with no MIG
// device at the clock's now: indices have gaps where instances were never
// made or destroyed, and a dynamic MIG device is there only while it lives.
func (h *handle) GetMigDeviceHandleByIndex(i int) (nvml.Device, nvml.Return) {
	if !h.n.migEnabled(h.g) {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	if i < 0 || i >= MaxMIGDevices {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	t, _ := h.n.now()
	for _, m := range h.migs {
		if m.m.slot == i && m.m.alive(t) {
			return m, nvml.SUCCESS
		}
	}
	return nil, nvml.ERROR_NOT_FOUND
}

func (h *handle) IsMigDeviceHandle() (bool, nvml.Return) { return false, nvml.SUCCESS }

// GetGpuInstanceById answers the GPU instance of that ID at the clock's
// now, ERROR_NOT_FOUND when there is none and ERROR_NOT_SUPPORTED outside
// MIG mode (nvml.h); with SetMIGPrivileged(false), NO_PERMISSION, as
// nvml.h says the call "Requires privileged user".
func (h *handle) GetGpuInstanceById(id int) (nvml.GpuInstance, nvml.Return) {
	if !h.n.migEnabled(h.g) {
		return nil, nvml.ERROR_NOT_SUPPORTED
	}
	if h.n.migUnprivileged {
		return nil, nvml.ERROR_NO_PERMISSION
	}
	t, _ := h.n.now()
	for _, m := range h.migs {
		if m.m.gi == id && m.m.alive(t) {
			return &gpuInstance{GpuInstance: &mock.GpuInstance{}, m: m}, nvml.SUCCESS
		}
	}
	return nil, nvml.ERROR_NOT_FOUND
}

// gpuInstance is a GPU instance handle: GetInfo only; anything else
// panics, as the mock does.
type gpuInstance struct {
	*mock.GpuInstance
	m *migHandle
}

// GetInfo answers the instance's ID, NVML's GPU instance profile ID (19
// for 1g.10gb, not go-nvml's profile index) and its placement in memory
// slices, as NVIDIA's DRA driver reads them (nvlib.go FindMigDevBySpec).
func (g *gpuInstance) GetInfo() (nvml.GpuInstanceInfo, nvml.Return) {
	md := g.m.m
	return nvml.GpuInstanceInfo{
		Device:    g.m.parent,
		Id:        uint32(md.gi),
		ProfileId: uint32(md.profile.profileID()),
		Placement: nvml.GpuInstancePlacement{Start: uint32(max(md.start, 0)), Size: uint32(md.profile.memSlices)},
	}, nvml.SUCCESS
}

// SetMIGPrivileged says whether the agent may query GPU instances (the
// default), or is refused as an unprivileged user is (NO_PERMISSION from
// GetGpuInstanceById). Call it before the node is used.
func (n *Node) SetMIGPrivileged(privileged bool) { n.migUnprivileged = !privileged }

// GetAttributes, as the driver, supports only MIG device handles.
func (h *handle) GetAttributes() (nvml.DeviceAttributes, nvml.Return) {
	return nvml.DeviceAttributes{}, nvml.ERROR_NOT_SUPPORTED
}
func (h *handle) GetGpuInstanceId() (int, nvml.Return)     { return 0, nvml.ERROR_NOT_SUPPORTED }
func (h *handle) GetComputeInstanceId() (int, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
func (h *handle) GetDeviceHandleFromMigDeviceHandle() (nvml.Device, nvml.Return) {
	return nil, nvml.ERROR_INVALID_ARGUMENT
}

// A MIG device's calls.

func (m *migHandle) GetUUID() (string, nvml.Return) { return m.m.uuid, nvml.SUCCESS }

// GetName is the parent's name and the profile: "NVIDIA H100 80GB HBM3 MIG 3g.40gb".
func (m *migHandle) GetName() (string, nvml.Return) {
	return m.parent.Config.Name + " MIG " + m.m.profile.name, nvml.SUCCESS
}

// GetIndex is the MIG device index within its parent, the one
// GetMigDeviceHandleByIndex takes (nvml.h: "When used with MIG device handles
// this API returns indices that can be passed to
// nvmlDeviceGetMigDeviceHandleByIndex"); it is not the GPU's index.
func (m *migHandle) GetIndex() (int, nvml.Return) { return m.m.slot, nvml.SUCCESS }

func (m *migHandle) GetMinorNumber() (int, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
func (m *migHandle) GetBrand() (nvml.BrandType, nvml.Return) {
	return m.parent.GetBrand()
}
func (m *migHandle) GetArchitecture() (nvml.DeviceArchitecture, nvml.Return) {
	return m.parent.GetArchitecture()
}
func (m *migHandle) GetCudaComputeCapability() (int, int, nvml.Return) {
	return m.parent.GetCudaComputeCapability()
}
func (m *migHandle) GetPciInfo() (nvml.PciInfo, nvml.Return) { return m.parent.GetPciInfo() }

func (m *migHandle) GetMigMode() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_NOT_SUPPORTED }
func (m *migHandle) GetMaxMigDeviceCount() (int, nvml.Return) {
	return 0, nvml.ERROR_NOT_SUPPORTED
}
func (m *migHandle) GetMigDeviceHandleByIndex(int) (nvml.Device, nvml.Return) {
	return nil, nvml.ERROR_NOT_SUPPORTED
}
func (m *migHandle) IsMigDeviceHandle() (bool, nvml.Return)   { return true, nvml.SUCCESS }
func (m *migHandle) GetGpuInstanceId() (int, nvml.Return)     { return m.m.gi, nvml.SUCCESS }
func (m *migHandle) GetComputeInstanceId() (int, nvml.Return) { return m.m.ci, nvml.SUCCESS }
func (m *migHandle) GetDeviceHandleFromMigDeviceHandle() (nvml.Device, nvml.Return) {
	return m.parent, nvml.SUCCESS
}

// GetAttributes describes the profile; the compute instance spans the GPU
// instance, so both slice counts are the profile's.
func (m *migHandle) GetAttributes() (nvml.DeviceAttributes, nvml.Return) {
	p := m.m.profile.info
	return nvml.DeviceAttributes{
		MultiprocessorCount:       p.MultiprocessorCount,
		SharedCopyEngineCount:     p.CopyEngineCount,
		SharedDecoderCount:        p.DecoderCount,
		SharedEncoderCount:        p.EncoderCount,
		SharedJpegCount:           p.JpegCount,
		SharedOfaCount:            p.OfaCount,
		GpuInstanceSliceCount:     p.SliceCount,
		ComputeInstanceSliceCount: m.m.computeSlices(),
		MemorySizeMB:              p.MemorySizeMB,
	}, nvml.SUCCESS
}

// Utilization samples, per-process utilization, power and energy are not
// supported on MIG devices.

func (m *migHandle) GetSamples(nvml.SamplingType, uint64) (nvml.ValueType, []nvml.Sample, nvml.Return) {
	return nvml.VALUE_TYPE_UNSIGNED_INT, nil, nvml.ERROR_NOT_SUPPORTED
}
func (m *migHandle) GetUtilizationRates() (nvml.Utilization, nvml.Return) {
	return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED
}
func (m *migHandle) GetProcessUtilization(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) {
	return nil, nvml.ERROR_NOT_SUPPORTED
}
func (m *migHandle) GetPowerUsage() (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
func (m *migHandle) GetTotalEnergyConsumption() (uint64, nvml.Return) {
	return 0, nvml.ERROR_NOT_SUPPORTED
}

// The activity calls on a handle of a destroyed MIG device answer
// ERROR_NOT_FOUND: the instance is gone.

func (m *migHandle) GetMemoryInfo_v2() (nvml.Memory_v2, nvml.Return) {
	m.parent.n.missingSymbol("nvmlDeviceGetMemoryInfo_v2")
	t, _ := m.parent.n.now()
	if !m.m.alive(t) {
		return nvml.Memory_v2{}, nvml.ERROR_NOT_FOUND
	}
	return m.m.memory(t), nvml.SUCCESS
}

func (m *migHandle) GetMemoryInfo() (nvml.Memory, nvml.Return) {
	t, _ := m.parent.n.now()
	if !m.m.alive(t) {
		return nvml.Memory{}, nvml.ERROR_NOT_FOUND
	}
	v2 := m.m.memory(t)
	return nvml.Memory{Total: v2.Total, Used: v2.Used + v2.Reserved, Free: v2.Free}, nvml.SUCCESS
}

func (m *migHandle) GetComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	t, _ := m.parent.n.now()
	if !m.m.alive(t) {
		return nil, nvml.ERROR_NOT_FOUND
	}
	running := m.m.running(t)
	out := make([]nvml.ProcessInfo, len(running))
	for i, p := range running {
		mem := p.memory
		if m.parent.n.sc.Traps.MemoryNotAvailable[m.m.gpu] {
			mem = math.MaxUint64
		}
		out[i] = nvml.ProcessInfo{Pid: p.pid, UsedGpuMemory: mem, GpuInstanceId: uint32(m.m.gi), ComputeInstanceId: uint32(m.m.ci)}
	}
	return m.parent.n.asDecoded(out), nvml.SUCCESS
}

// Library-style MIG calls delegate to the device, as the real library does.

func (d *driver) DeviceGetMaxMigDeviceCount(h nvml.Device) (int, nvml.Return) {
	return h.GetMaxMigDeviceCount()
}
func (d *driver) DeviceGetMigDeviceHandleByIndex(h nvml.Device, i int) (nvml.Device, nvml.Return) {
	return h.GetMigDeviceHandleByIndex(i)
}
func (d *driver) DeviceIsMigDeviceHandle(h nvml.Device) (bool, nvml.Return) {
	return h.IsMigDeviceHandle()
}
func (d *driver) DeviceGetAttributes(h nvml.Device) (nvml.DeviceAttributes, nvml.Return) {
	return h.GetAttributes()
}
func (d *driver) DeviceGetGpuInstanceId(h nvml.Device) (int, nvml.Return) {
	return h.GetGpuInstanceId()
}
func (d *driver) DeviceGetComputeInstanceId(h nvml.Device) (int, nvml.Return) {
	return h.GetComputeInstanceId()
}
func (d *driver) DeviceGetDeviceHandleFromMigDeviceHandle(h nvml.Device) (nvml.Device, nvml.Return) {
	return h.GetDeviceHandleFromMigDeviceHandle()
}
func (d *driver) DeviceGetGpuInstanceById(h nvml.Device, id int) (nvml.GpuInstance, nvml.Return) {
	return h.GetGpuInstanceById(id)
}
func (d *driver) GpuInstanceGetInfo(g nvml.GpuInstance) (nvml.GpuInstanceInfo, nvml.Return) {
	return g.GetInfo()
}
