package sim

import (
	"crypto/sha1"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpuxray/gpuxray/collector"
)

// Device ID schemes a node's device plugin may write: the top-level
// `device_ids`.
const (
	// DeviceIDsNVIDIA is NVIDIA's device plugin: "GPU-<uuid>", with
	// "::<replica>" for a time-slicing replica, and "MIG-<uuid>".
	DeviceIDsNVIDIA = "nvidia"
	// DeviceIDsGKE is GKE's device plugin: "nvidia<minor>",
	// "nvidia<minor>/vgpu<R>" for share R of a time-sharing GPU, and
	// "nvidia<minor>/gi<G>" for GPU instance G, all as nvidia.com/gpu.
	DeviceIDsGKE = "gke"
	// DeviceIDsHAMi is HAMi's device plugin: "GPU-<uuid>-<n>", slice n of
	// a GPU, of the slice the kubelet picked; the GPU HAMi gave the pod is
	// in its hami.io/vgpu-devices-allocated annotation.
	DeviceIDsHAMi = "hami"
)

// Container types a pod's `container_type` may name.
const (
	// ContainerInit is a regular init container: the kubelet's
	// pod-resources API never lists it (server_v1.go lists restartable
	// init containers only).
	ContainerInit = "init"
	// ContainerSidecar is a restartable init container (restartPolicy:
	// Always), which the kubelet lists before the pod's containers.
	ContainerSidecar = "sidecar"
)

// KAIReservationNamespace is where KAI Scheduler runs the pods that hold
// the GPUs its fraction pods share (pkg/common/constants:
// DefaultResourceReservationName).
const KAIReservationNamespace = collector.KAIReservationNamespace

// NodeAllocation is how the node's device plugin, kubelet and DRA driver
// name and hand out its GPUs, beyond `allocation`: the top-level keys
// device_ids, minor_numbers, vfio and numa_nodes.
type NodeAllocation struct {
	// DeviceIDs is the device plugin's ID scheme, one of the DeviceIDs*
	// constants; DeviceIDsNVIDIA when the file names none.
	DeviceIDs string
	// MinorNumbers are the GPUs' device minor numbers, by index; nil
	// means each GPU's minor number is its index.
	MinorNumbers []int
	// VFIO are the GPUs bound to vfio-pci for passthrough to VMs: NVML on
	// the host does not list them, and NVIDIA's DRA driver publishes each
	// as gpu-vfio-<n> with a uuid of its own making.
	VFIO map[int]bool
	// NUMANodes are the NUMA nodes the device plugin reports for a GPU's
	// devices; a GPU not listed is on node index/4.
	NUMANodes map[int][]int
	// Kubelet is the top-level kubelet key.
	Kubelet KubeletSpec
}

// PodAllocation is what a pod's allocation keys say beyond its devices:
// gpu_fraction and container_type.
type PodAllocation struct {
	// GPUFraction is the share of its one GPU that KAI Scheduler gave the
	// pod (its gpu-fraction annotation); 0 for a pod that is no fraction.
	// The kubelet does not list a fraction pod: KAI's reservation pod in
	// kai-resource-reservation holds the GPU for it.
	GPUFraction float64
	// ContainerType is "" for a regular container, ContainerInit or
	// ContainerSidecar.
	ContainerType string
	ClaimAccess
}

// minor is GPU g's minor number.
func (s *Scenario) minor(g int) int {
	if s.MinorNumbers != nil {
		return s.MinorNumbers[g]
	}
	return g
}

// numaNodes are the NUMA nodes of GPU g's devices.
func (s *Scenario) numaNodes(g int) []int {
	if n, ok := s.NUMANodes[g]; ok {
		return n
	}
	return []int{g / 4}
}

// nodeAllocation checks the top-level kubelet, device_ids, minor_numbers,
// vfio and numa_nodes, after gpus and allocation and before mig and pods.
func (d *validator) nodeAllocation(spec *ScenarioSpec, s *Scenario) error {
	s.Kubelet.DynamicResources = spec.Kubelet == nil || spec.Kubelet.DynamicResources == nil || bool(*spec.Kubelet.DynamicResources)
	s.DeviceIDs = DeviceIDsNVIDIA
	if d.has("device_ids") {
		v := spec.DeviceIDs
		if v != DeviceIDsNVIDIA && v != DeviceIDsGKE && v != DeviceIDsHAMi {
			return d.errf("device_ids", "%q is not a device ID scheme; want %s, %s or %s", v, DeviceIDsNVIDIA, DeviceIDsGKE, DeviceIDsHAMi)
		}
		s.DeviceIDs = v
	}
	if d.has("minor_numbers") {
		if len(spec.MinorNumbers) != s.GPUs {
			return d.errf("minor_numbers", "%d minor numbers for %d GPUs; give one per GPU, by index", len(spec.MinorNumbers), s.GPUs)
		}
		seen := map[int]int{}
		for i, w := range spec.MinorNumbers {
			f := fmt.Sprintf("minor_numbers[%d]", i)
			v, err := d.whole(f, w, 0, 255)
			if err != nil {
				return err
			}
			if j, dup := seen[int(v)]; dup {
				return d.errf(f, "%d is already gpu:%d's minor number", v, j)
			}
			seen[int(v)] = i
			s.MinorNumbers = append(s.MinorNumbers, int(v))
		}
	}
	if d.has("vfio") {
		s.VFIO = map[int]bool{}
		for i, ref := range spec.VFIO {
			f := fmt.Sprintf("vfio[%d]", i)
			dev, err := d.gpu(f, ref.DeviceSpec, s.GPUs)
			if err != nil {
				return err
			}
			if dev.Replicated {
				return d.errf(f, "%s: a whole GPU is passed through; want gpu:%d", dev, dev.GPU)
			}
			if s.VFIO[dev.GPU] {
				return d.errf(f, "given twice")
			}
			s.VFIO[dev.GPU] = true
		}
		if len(s.VFIO) == s.GPUs {
			return d.errf("vfio", "every GPU is passed through; leave NVML at least one")
		}
		if s.Allocation != AllocationDRA {
			return d.errf("vfio", "NVIDIA's DRA driver passes GPUs through to VMs; set allocation: %s", AllocationDRA)
		}
	}
	if spec.NUMANodes != nil {
		s.NUMANodes = map[int][]int{}
	}
	for _, k := range sortedKeys(spec.NUMANodes) {
		f := "numa_nodes." + k
		dev, err := d.gpuKey(f, k, s.GPUs)
		if err != nil {
			return err
		}
		if _, dup := s.NUMANodes[dev.GPU]; dup || dev.Replicated {
			return d.errf(f, "want each GPU once, as gpu:N")
		}
		nodes := spec.NUMANodes[k]
		if len(nodes) == 0 || len(nodes) > 4 {
			return d.errf(f, "want 1 to 4 NUMA nodes")
		}
		for j, w := range nodes {
			node, err := d.whole(fmt.Sprintf("%s[%d]", f, j), w, 0, 7)
			if err != nil {
				return err
			}
			s.NUMANodes[dev.GPU] = append(s.NUMANodes[dev.GPU], int(node))
		}
	}
	return nil
}

// podAllocation checks a pod's gpu_fraction, container_type and claim
// keys, after its allocation and devices.
func (d *validator) podAllocation(p string, ps *PodSpec, pod *Pod, s *Scenario) error {
	if err := d.claimAccess(p, ps, pod); err != nil {
		return err
	}
	if d.has(p + ".container_type") {
		v := ps.ContainerType
		if v != ContainerInit && v != ContainerSidecar {
			return d.errf(p+".container_type", "%q is not a container type; want %s or %s (a regular container gives none)", v, ContainerInit, ContainerSidecar)
		}
		pod.ContainerType = v
	}
	if s.DeviceIDs == DeviceIDsHAMi && pod.Allocation != AllocationDRA {
		for j, spec := range pod.Devices {
			if spec.MIG {
				return d.errf(fmt.Sprintf("%s.devices[%d]", p, j), "%s: HAMi's MIG mode is not simulated; hold a GPU or a slice of it (gpu:N::R)", spec)
			}
		}
	}
	for j, spec := range pod.Devices {
		if s.MIGDynamic[spec.GPU] && !spec.MIG && pod.Allocation != AllocationDRA {
			return d.errf(fmt.Sprintf("%s.devices[%d]", p, j), "%s is in dynamic MIG mode: only NVIDIA's DRA driver hands it out, whole as gpu-%d or in partitions; give the pod allocation: %s", spec, s.minor(spec.GPU), AllocationDRA)
		}
		if s.VFIO[spec.GPU] && (pod.Allocation != AllocationDRA || spec.MIG || spec.Replicated) {
			return d.errf(fmt.Sprintf("%s.devices[%d]", p, j), "%s is passed through (vfio): only a DRA pod holds it, whole", spec)
		}
	}
	if !d.has(p + ".gpu_fraction") {
		return nil
	}
	f := float64(ps.GPUFraction)
	if f == 0 {
		return d.errf(p+".gpu_fraction", "a fraction of 0 holds nothing; give more than 0")
	}
	if pod.Allocation == AllocationDRA || len(pod.Devices) != 1 || pod.Devices[0].MIG || pod.Devices[0].Replicated || pod.Resource != ResourceGPU || s.DeviceIDs == DeviceIDsHAMi {
		return d.errf(p+".gpu_fraction", "a KAI Scheduler fraction is of one whole GPU (devices: [gpu:N]) that the NVIDIA device plugin hands its reservation pod as %s", ResourceGPU)
	}
	pod.GPUFraction = f
	return nil
}

// fractionPods reports whether pods a and b are both KAI fractions of a
// GPU: they share it, as their reservation pod holds it for them.
func (s *Scenario) fractionPods(a, b int) bool {
	return s.Pods[a].GPUFraction > 0 && s.Pods[b].GPUFraction > 0
}

// shareGPU reports whether pods a and b may hold the same device at once:
// they name one DRA claim, or are KAI fractions.
func (s *Scenario) shareGPU(a, b int) bool {
	return s.sameClaim(a, b) || s.fractionPods(a, b) || s.Pods[a].AdminAccess || s.Pods[b].AdminAccess
}

// allocationCheck validates what spans pods for the keys above: KAI
// fractions of a GPU add up to one at most, and a GPU is shared by
// fractions or held otherwise, never both.
func (d *validator) allocationCheck(_ *ScenarioSpec, s *Scenario) error {
	for j, b := range s.Pods {
		if b.GPUFraction == 0 {
			continue
		}
		sum := b.GPUFraction
		for i, a := range s.Pods {
			if i == j || a.From > b.From || b.From >= a.To || !holds(a, b.Devices[0].GPU) {
				continue
			}
			if a.GPUFraction == 0 {
				return d.errf(fmt.Sprintf("pods[%d].devices[0]", j),
					"%s is held whole by %s/%s (pods[%d]) when this fraction starts", b.Devices[0], a.Namespace, a.Name, i)
			}
			sum += a.GPUFraction
		}
		if sum > 1+1e-9 {
			return d.errAt(fmt.Sprintf("pods[%d]", j), fmt.Sprintf("pods[%d].gpu_fraction", j), "%s's fractions add up to %g at %s, more than one GPU", b.Devices[0], sum, fmtDur(b.From))
		}
	}
	return nil
}

// reservation is one KAI reservation pod: it holds GPU gpu over [from,
// to), the union of its group's fraction pods' lives (KAI's binder makes
// it for the group's first pod and deletes it when no Pending or Running
// fraction pod is left).
type reservation struct {
	gpu      int
	from, to time.Duration
	// name is gpu-reservation-<node>-<5 characters>, group the GPU group
	// label its fraction pods and it carry.
	name, group string
	pods        []int
}

// reservations are the scenario's KAI reservation pods, by start.
func (s *Scenario) reservations() []reservation {
	var out []reservation
	for g := range s.GPUs {
		var idx []int
		for i, p := range s.Pods {
			if p.GPUFraction > 0 && p.Devices[0].GPU == g {
				idx = append(idx, i)
			}
		}
		sort.SliceStable(idx, func(a, b int) bool { return s.Pods[idx[a]].From < s.Pods[idx[b]].From })
		for _, i := range idx {
			p := s.Pods[i]
			if n := len(out); n > 0 && out[n-1].gpu == g && p.From <= out[n-1].to {
				out[n-1].to = max(out[n-1].to, p.To)
				out[n-1].pods = append(out[n-1].pods, i)
				continue
			}
			key := fmt.Sprintf("gpu/%d/from/%d", g, p.From)
			out = append(out, reservation{gpu: g, from: p.From, to: p.To, pods: []int{i},
				name:  "gpu-reservation-" + s.Node + "-" + nameSuffix(s.Node, "kai/"+key),
				group: ClaimUID(s.Node, KAIReservationNamespace, key)})
		}
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].from < out[b].from })
	return out
}

// reservationOf returns the reservation that holds pod i's GPU.
func (s *Scenario) reservationOf(rs []reservation, i int) (reservation, bool) {
	for _, r := range rs {
		if slices.Contains(r.pods, i) {
			return r, true
		}
	}
	return reservation{}, false
}

// hamiListedGPU is the GPU whose slice the kubelet lists for a HAMi pod
// that HAMi gave GPU g: the next GPU NVML lists, the shape in which the
// kubelet's ID names another GPU than the pod's.
func (n *Node) hamiListedGPU(g int) int {
	if len(n.visible) < 2 {
		return g
	}
	i := slices.Index(n.visible, g)
	return n.visible[(i+1)%len(n.visible)]
}

// deviceIDOf is the device plugin's ID of device d of a device-plugin pod
// at the clock's now, in the node's scheme.
func (n *Node) deviceIDOf(d DeviceSpec) string {
	switch n.sc.DeviceIDs {
	case DeviceIDsGKE:
		id := "nvidia" + strconv.Itoa(n.sc.minor(d.GPU))
		if d.MIG {
			t, _ := n.now()
			if md := n.migAt(d.GPU, d.MIGSlot, t); md != nil {
				id += "/gi" + strconv.Itoa(md.gi)
			}
		}
		if d.Replicated {
			id += "/vgpu" + strconv.Itoa(d.Replica)
		}
		return id
	case DeviceIDsHAMi:
		// The kubelet picks any free slice: HAMi's device plugin has no
		// GetPreferredAllocation by default (values.yaml:
		// enablegetpreferredallocation: false) and its Allocate gives
		// the annotation's GPU, whichever slice was picked.
		return n.uuids[n.hamiListedGPU(d.GPU)] + "-" + strconv.Itoa(d.Replica)
	}
	return n.DeviceID(d)
}

// identifyGPU gives GPU g its minor number and, unless it is passed
// through to VMs, its NVML index: NVML enumerates only the GPUs bound to
// nvidia, so those after a passed-through one move up.
func (n *Node) identifyGPU(g int, dev *server.Device) {
	dev.Minor = n.sc.minor(g)
	if n.sc.VFIO[g] {
		return
	}
	dev.Index = len(n.visible)
	n.visible = append(n.visible, g)
}

// nvmlVisible reports whether NVML lists GPU g.
func (n *Node) nvmlVisible(g int) bool { return !n.sc.VFIO[g] }

// VFIOUUID is the uuid NVIDIA's DRA driver gives a GPU it passes through,
// derived from its PCI address as uuid.NewSHA1(uuid.NameSpaceDNS,
// address) derives it (RFC 4122 version 5): no "GPU-" prefix, and no UUID
// NVML knows.
func VFIOUUID(pciAddress string) string {
	ns := [16]byte{0x6b, 0xa7, 0xb8, 0x10, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}
	h := sha1.Sum(append(ns[:], pciAddress...))
	h[6] = h[6]&0x0f | 0x50
	h[8] = h[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

// KAIReservationContainer is the container of a KAI reservation pod
// (resource_reservation.go: resourceReservation).
const KAIReservationContainer = "resource-reservation"

// reservationPod is the pod source's view of reservation pod name, if it
// runs at the clock's now or ran: labeled with its GPU group, as KAI's
// binder makes it (createResourceReservationPod: app and runai-gpu-group
// labels).
func (n *Node) reservationPod(namespace, name string) (collector.Pod, bool) {
	if namespace != KAIReservationNamespace {
		return collector.Pod{}, false
	}
	t, _ := n.now()
	for _, r := range n.kai {
		if r.name != name {
			continue
		}
		phase := "Running"
		switch {
		case t < r.from:
			phase = "Pending"
		case t >= r.to:
			phase = "Succeeded"
		}
		return collector.Pod{
			UID: PodUID(n.sc.Node, namespace, name), Namespace: namespace, Name: name, Phase: phase,
			WorkloadKind: "Pod", Workload: name,
			ContainerIDs: map[string]string{KAIReservationContainer: ContainerID(n.sc.Node, namespace, name, KAIReservationContainer)},
			Sharing:      collector.Sharing{GPUGroups: []string{r.group}},
		}, true
	}
	return collector.Pod{}, false
}

// PodsInGPUGroup returns the pods of KAI GPU group group at the clock's
// now that have not ended, the reservation pod included, as a pod
// informer filtered by the runai-gpu-group label would.
func (n *Node) PodsInGPUGroup(group string) []collector.Pod {
	var out []collector.Pod
	for _, r := range n.kai {
		if r.group != group {
			continue
		}
		for _, i := range r.pods {
			out = append(out, n.pod(i))
		}
		if p, ok := n.reservationPod(KAIReservationNamespace, r.name); ok {
			out = append(out, p)
		}
	}
	return out
}

// sharing fills what sharing schedulers wrote on pod i: HAMi's
// annotation naming the GPU of each device it gave the pod's container,
// and KAI's GPU group label of a fraction pod.
func (n *Node) sharing(i int, p *collector.Pod) {
	sp := n.sc.Pods[i]
	if sp.GPUFraction > 0 {
		if r, ok := n.sc.reservationOf(n.kai, i); ok {
			p.Sharing.GPUGroups = []string{r.group}
			p.Sharing.GPUContainer = sp.Container
		}
	}
	if n.sc.DeviceIDs == DeviceIDsHAMi && sp.Allocation != AllocationDRA {
		uuids := make([]string, len(sp.Devices))
		for k, d := range sp.Devices {
			uuids[k] = n.uuids[d.GPU]
		}
		p.Sharing.Devices = map[string][]string{sp.Container: uuids}
	}
}
