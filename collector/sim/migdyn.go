package sim

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// MIGDynamicMode is the `mig` value that puts a GPU in dynamic MIG mode.
const MIGDynamicMode = "dynamic"

// forever is the end of a MIG device that is never destroyed.
const forever = time.Duration(1<<63 - 1)

// migProfileIDs are the GPU instance profile IDs that NVML reports (and
// nvidia-smi mig -lgip lists) for go-nvml's profile indices: the same on
// A100, H100, H200 and B200. NVIDIA's DRA driver names MIG devices with them.
var migProfileIDs = map[uint32]int{
	nvml.GPU_INSTANCE_PROFILE_1_SLICE:      19,
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1: 20,
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2: 15,
	nvml.GPU_INSTANCE_PROFILE_2_SLICE:      14,
	nvml.GPU_INSTANCE_PROFILE_3_SLICE:      9,
	nvml.GPU_INSTANCE_PROFILE_4_SLICE:      5,
	nvml.GPU_INSTANCE_PROFILE_7_SLICE:      0,
}

// profileID is p's GPU instance profile ID as NVML reports it.
func (p migProfile) profileID() int {
	if id, ok := migProfileIDs[p.info.Id]; ok {
		return id
	}
	return int(p.info.Id)
}

// starts are the memory slices a GPU instance of p may start at, as NVML's
// GetGpuInstancePossiblePlacements lists them on the GPUs simulated here
// (go-nvml's mock tables count placements in compute slices; NVML counts
// memory slices): one-slice instances anywhere but the last slice, 1g
// instances with two memory slices on even slices, 2g on 0, 2 and 4, 3g on
// 0 and 4, and the 4g and 7g instances at 0.
func (p migProfile) starts() []int {
	switch {
	case p.memSlices == 1:
		return []int{0, 1, 2, 3, 4, 5, 6}
	case p.memSlices == 2 && p.info.SliceCount == 1:
		return []int{0, 2, 4, 6}
	case p.memSlices == 2:
		return []int{0, 2, 4}
	case p.memSlices == 4 && p.info.SliceCount == 3:
		return []int{0, 4}
	default:
		return []int{0}
	}
}

// draName is the name NVIDIA's DRA driver gives a MIG device of profile p
// placed at memory slice start on the GPU with minor number gpu:
// gpu-<minor>-mig-<profile without dots>-<profile ID>-<placement start>,
// as gpu-0-mig-1g10gb-19-3.
func (p migProfile) draName(gpu, start int) string {
	return fmt.Sprintf("gpu-%d-mig-%s-%d-%d", gpu, strings.ReplaceAll(p.name, ".", ""), p.profileID(), start)
}

// slices is the bit set of the memory slices an instance of p at start takes.
func (p migProfile) slices(start int) uint {
	return (1<<uint(p.memSlices) - 1) << uint(start)
}

// migHolding is one dynamic MIG device: the DRA driver creates it when the
// first pod of its claim starts and destroys it when the last one ends.
type migHolding struct {
	gpu     int
	profile migProfile
	start   int // placement: the first memory slice
	// from and to bound the device's life: [from, to).
	from, to time.Duration
	// pods are the claim's pods, dev the index of this device in each
	// one's Devices.
	pods []int
	dev  int
	// namespace and claim name the claim the device was made for.
	namespace, claim string
	// slot is its MIG device index, gi its GPU instance ID.
	slot, gi int
	uuid     string
}

// planError says which pod's device could not be placed.
type planError struct {
	pod, dev int
	msg      string
}

// migPlan places the dynamic MIG devices of the scenario's claims, in the
// order the driver would create them: at each device's start, after the
// devices that end then are destroyed, the lowest free placement of its
// profile (the first matching device of its ResourceSlice, which is what
// the scheduler picks), the lowest free MIG device index and GPU instance ID.
func (s *Scenario) migPlan() ([]migHolding, *planError) {
	if len(s.MIGDynamic) == 0 {
		return nil, nil
	}
	sys := systems[s.System]
	var hs []migHolding
	for _, c := range s.claims() {
		first := s.Pods[c.pods[0]]
		for k, d := range first.Devices {
			if !d.Dynamic {
				continue
			}
			p, _ := sys.migProfile(d.Profile)
			h := migHolding{gpu: d.GPU, profile: p, from: forever, pods: c.pods, dev: k, namespace: first.Namespace, claim: first.Claim}
			for _, i := range c.pods {
				h.from, h.to = min(h.from, s.Pods[i].From), max(h.to, s.Pods[i].To)
			}
			hs = append(hs, h)
		}
	}
	sort.SliceStable(hs, func(a, b int) bool { return hs[a].from < hs[b].from })
	alive := map[int][]*migHolding{} // by GPU
	for i := range hs {
		h := &hs[i]
		// The whole GPU consumes every counter its partitions do: the
		// scheduler never allocates both at once.
		for j, p := range s.Pods {
			if holds(p, h.gpu) && p.From < h.to && h.from < p.To && slices.ContainsFunc(p.Devices, func(d DeviceSpec) bool { return !d.MIG && d.GPU == h.gpu }) {
				return nil, &planError{pod: h.pods[0], dev: h.dev, msg: fmt.Sprintf(
					"mig:%d:%s cannot be made from %s to %s while %s/%s (pods[%d]) holds gpu:%d whole", h.gpu, h.profile.name, fmtDur(h.from), fmtDur(h.to), p.Namespace, p.Name, j, h.gpu)}
			}
		}
		live := alive[h.gpu][:0]
		for _, o := range alive[h.gpu] {
			if o.to > h.from {
				live = append(live, o)
			}
		}
		var used uint
		compute := h.profile.info.SliceCount
		slots, gis := map[int]bool{}, map[int]bool{}
		for _, o := range live {
			used |= o.profile.slices(o.start)
			compute += o.profile.info.SliceCount
			slots[o.slot], gis[o.gi] = true, true
		}
		h.start = -1
		if compute <= migComputeSlices {
			for _, st := range h.profile.starts() {
				if used&h.profile.slices(st) == 0 {
					h.start = st
					break
				}
			}
		}
		if h.start < 0 {
			var beside []string
			for _, o := range live {
				beside = append(beside, fmt.Sprintf("%s of %s/%s", o.profile.name, o.namespace, o.claim))
			}
			return nil, &planError{pod: h.pods[0], dev: h.dev, msg: fmt.Sprintf(
				"mig:%d:%s does not fit on gpu:%d at %s beside the MIG devices made for %s", h.gpu, h.profile.name, h.gpu, fmtDur(h.from), strings.Join(beside, ", "))}
		}
		for slots[h.slot] {
			h.slot++
		}
		h.gi = firstFreeGI(h.profile, gis)
		h.uuid = dynamicMIGUUID(s.Node, h)
		alive[h.gpu] = append(live, h)
	}
	return hs, nil
}

// firstFreeGI is the GPU instance ID the driver hands a new instance of p
// when the IDs in used are taken.
func firstFreeGI(p migProfile, used map[int]bool) int {
	for _, id := range migGIIDs[p.info.SliceCount] {
		if !used[id] {
			return id
		}
	}
	gi := 14
	for used[gi] {
		gi++
	}
	return gi
}

// dynamicMIGUUID derives the UUID of a dynamic MIG device from its node,
// claim and creation: a device made again for another claim, or for the
// same claim later, has a UUID of its own, as on a real GPU.
func dynamicMIGUUID(node string, h *migHolding) string {
	b := sha256.Sum256(fmt.Appendf(nil, "gpuxray-sim/%s/gpu/%d/mig-dynamic/%s/%s/%d/%d/%d", node, h.gpu, h.namespace, h.claim, h.dev, h.start, h.from))
	b[6] = b[6]&0x0f | 0x50
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("MIG-%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// holdingSeries is a dynamic MIG device's busy ratio: its claim's pods'
// ratios summed, capped at 1 (they share it as time-sliced pods do).
func (s *Scenario) holdingSeries(h *migHolding, pods []series) series {
	on := make([]series, len(h.pods))
	for i, p := range h.pods {
		on[i] = pods[p]
	}
	return combine(nil, on, func(t time.Duration) float64 {
		v := 0.0
		for _, p := range on {
			v += p.value(t)
		}
		return min(v, 1)
	})
}

// staticPlacements finds where each MIG device of a fixed layout sits on
// its GPU's memory slices, so that the DRA driver can name it: the start of
// each slot's instance, -1 for an empty slot. It reports false when the
// layout fits by counts but no placement holds it.
func (s system) staticPlacements(layout []string) ([]int, bool) {
	out := make([]int, len(layout))
	profiles := make([]migProfile, len(layout))
	for i, name := range layout {
		out[i] = -1
		if name != "" {
			profiles[i], _ = s.migProfile(name)
		}
	}
	var place func(i int, used uint) bool
	place = func(i int, used uint) bool {
		if i == len(layout) {
			return true
		}
		if layout[i] == "" {
			return place(i+1, used)
		}
		p := profiles[i]
		for _, st := range p.starts() {
			if used&p.slices(st) == 0 {
				out[i] = st
				if place(i+1, used|p.slices(st)) {
					return true
				}
			}
		}
		out[i] = -1
		return false
	}
	return out, place(0, 0)
}
