package sim

import (
	"slices"
	"sort"
	"strconv"
	"time"

	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// ListResponse is the kubelet's pod-resources List answer at the clock's
// now, as the kubelet builds it (kubernetes/kubernetes,
// pkg/kubelet/apis/podresources/server_v1.go List): the active pods, sorted
// here by namespace and name, each with its restartable init containers
// (sidecars) and then its containers, never its regular init containers.
// A device-plugin container lists one ContainerDevices per device and NUMA
// node, each with one device ID and that node as its topology
// (containerDevicesFromResourceDeviceInstances), the IDs in the node's
// device_ids scheme; a DRA container lists its claim's dynamic_resources
// (see claimResources). A KAI fraction pod is not listed (it requests no
// GPU); its reservation pod, which holds the GPU for it, is.
func (n *Node) ListResponse() *podresourcesv1.ListPodResourcesResponse {
	t, _ := n.now()
	type entry struct {
		namespace, name string
		pod             int // -1 for a reservation pod
		res             reservation
	}
	var list []entry
	for i, p := range n.sc.Pods {
		if p.From <= t && t < p.To && p.GPUFraction == 0 {
			list = append(list, entry{p.Namespace, p.Name, i, reservation{}})
		}
	}
	for _, r := range n.kai {
		if r.from <= t && t < r.to {
			list = append(list, entry{KAIReservationNamespace, r.name, -1, r})
		}
	}
	sort.SliceStable(list, func(a, b int) bool {
		if list[a].namespace != list[b].namespace {
			return list[a].namespace < list[b].namespace
		}
		return list[a].name < list[b].name
	})
	resp := &podresourcesv1.ListPodResourcesResponse{}
	for _, e := range list {
		if e.pod < 0 {
			resp.PodResources = append(resp.PodResources, &podresourcesv1.PodResources{
				Namespace: e.namespace, Name: e.name,
				Containers: []*podresourcesv1.ContainerResources{{
					Name:    KAIReservationContainer,
					Devices: n.containerDevices(ResourceGPU, []DeviceSpec{{GPU: e.res.gpu}}),
				}},
			})
			continue
		}
		i := e.pod
		p := n.sc.Pods[i]
		c := &podresourcesv1.ContainerResources{Name: p.Container}
		if p.Allocation == AllocationDRA {
			if n.sc.Kubelet.DynamicResources {
				c.DynamicResources = []*podresourcesv1.DynamicResource{n.claimResources(i)}
			}
		} else {
			c.Devices = n.containerDevices(p.Resource, p.Devices)
		}
		pr := &podresourcesv1.PodResources{Namespace: p.Namespace, Name: p.Name}
		switch p.ContainerType {
		case ContainerSidecar:
			pr.Containers = []*podresourcesv1.ContainerResources{c, {Name: p.appContainer()}}
		case ContainerInit:
			pr.Containers = []*podresourcesv1.ContainerResources{{Name: p.appContainer()}}
		default:
			pr.Containers = []*podresourcesv1.ContainerResources{c}
		}
		resp.PodResources = append(resp.PodResources, pr)
	}
	n.faultyList(resp, t)
	return resp
}

// containerDevices lists devs of resource as the kubelet does: one entry
// per device and NUMA node of the device.
func (n *Node) containerDevices(resource string, devs []DeviceSpec) []*podresourcesv1.ContainerDevices {
	var out []*podresourcesv1.ContainerDevices
	for _, d := range devs {
		id := n.deviceIDOf(d)
		for _, node := range n.sc.numaNodes(d.GPU) {
			out = append(out, &podresourcesv1.ContainerDevices{
				ResourceName: resource,
				DeviceIds:    []string{id},
				Topology:     &podresourcesv1.TopologyInfo{Nodes: []*podresourcesv1.NUMANode{{ID: int64(node)}}},
			})
		}
	}
	return out
}

// appContainer names the regular container of a pod whose GPU container
// is an init container or a sidecar.
func (p Pod) appContainer() string {
	if p.Container == "app" {
		return "main"
	}
	return "app"
}

// faultyList adds what device_ids and ghost_pod faults active at scenario
// time t make the kubelet list: extra device IDs, and pods that hold a GPU
// they should not (a terminated pod an older kubelet still lists).
func (n *Node) faultyList(resp *podresourcesv1.ListPodResourcesResponse, t time.Duration) {
	for _, f := range n.sc.Faults {
		if !f.active(t) || (f.Kind != FaultDeviceIDs && f.Kind != FaultGhostPod) {
			continue
		}
		ids := f.IDs
		if f.Kind == FaultGhostPod {
			ids = []string{n.uuids[f.GPU]}
		}
		resp.PodResources = append(resp.PodResources, &podresourcesv1.PodResources{
			Namespace: f.Namespace,
			Name:      f.Pod,
			Containers: []*podresourcesv1.ContainerResources{{
				Name:    "main",
				Devices: []*podresourcesv1.ContainerDevices{{ResourceName: ResourceGPU, DeviceIds: ids}},
			}},
		})
	}
}

// DeviceID is the kubelet's device ID for a scenario device: the GPU's UUID,
// with "::R" for a time-slicing replica, or the MIG device's UUID, as the
// NVIDIA device plugin names them; "" for a dynamic MIG device, whose UUID
// depends on its claim (TruthRow.UUID).
func (n *Node) DeviceID(d DeviceSpec) string {
	if d.Dynamic {
		return ""
	}
	if d.MIG {
		return n.MIGDeviceUUID(d.GPU, d.MIGSlot)
	}
	id := n.uuids[d.GPU]
	if d.Replicated {
		id += "::" + strconv.Itoa(d.Replica)
	}
	return id
}

// claimResources is DRA pod i's claim as the kubelet lists it: the claim's
// name and namespace, and per device of the claim — all of them, whatever
// request the pod's container uses (pkg/kubelet/cm/dra/manager.go
// GetResources gathers a claim's CDI devices for every container naming
// it, and pkg/kubelet/cm/container_manager_linux.go GetDynamicResources
// lists every device of the claim's ClaimInfo) — the driver (gpu.nvidia.com), the pool
// (the node's name), the device's name in the node's ResourceSlices and
// the CDI devices NVIDIA's driver prepares
// (k8s.gpu.nvidia.com/claim=<claim UID>-<device>), accumulated. share_id is unset: the
// driver's devices are not allocated several times over; pods share one by
// sharing its claim.
func (n *Node) claimResources(i int) *podresourcesv1.DynamicResource {
	p := n.sc.Pods[i]
	uid := ClaimUID(n.sc.Node, p.Namespace, p.Claim)
	dr := &podresourcesv1.DynamicResource{ClaimName: p.Claim, ClaimNamespace: p.Namespace}
	// The kubelet gathers a driver's CDI devices in one slice that each
	// device's ClaimResource is handed as it grows, so the n-th device of
	// a driver lists the CDI devices of the first n
	// (pkg/kubelet/cm/container_manager_linux.go GetDynamicResources).
	var cdi []*podresourcesv1.CDIDevice
	for _, name := range n.claimDevices(p.Namespace, p.Claim) {
		cdi = append(cdi, &podresourcesv1.CDIDevice{Name: "k8s." + DRADriver + "/claim=" + uid + "-" + name})
		dr.ClaimResources = append(dr.ClaimResources, &podresourcesv1.ClaimResource{
			DriverName: DRADriver,
			PoolName:   n.sc.Node,
			DeviceName: name,
			CdiDevices: cdi,
		})
	}
	return dr
}

// claimDevices are the devices of claim namespace/name in the order its
// pods name them, each once: every request's.
func (n *Node) claimDevices(namespace, name string) []string {
	var out []string
	for i, p := range n.sc.Pods {
		if p.Allocation != AllocationDRA || p.Namespace != namespace || p.Claim != name {
			continue
		}
		for _, d := range n.devIDs.draName[i] {
			if !slices.Contains(out, d) {
				out = append(out, d)
			}
		}
	}
	return out
}
