package sim

import (
	"sort"
	"strconv"
	"time"

	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// ListResponse is the kubelet's pod-resources List answer at the clock's
// now: the pods whose allocation is current, sorted by namespace and name,
// each with its one container and its devices in scenario order: a
// device-plugin pod's by UUID ("GPU-…", "GPU-…::R" for a time-slicing
// replica, "MIG-…") under its resource, a DRA pod's as its claim's
// dynamic_resources (see claimResources).
func (n *Node) ListResponse() *podresourcesv1.ListPodResourcesResponse {
	t, _ := n.now()
	var idx []int
	for i, p := range n.sc.Pods {
		if p.From <= t && t < p.To {
			idx = append(idx, i)
		}
	}
	sort.SliceStable(idx, func(a, b int) bool {
		pa, pb := n.sc.Pods[idx[a]], n.sc.Pods[idx[b]]
		if pa.Namespace != pb.Namespace {
			return pa.Namespace < pb.Namespace
		}
		return pa.Name < pb.Name
	})
	resp := &podresourcesv1.ListPodResourcesResponse{}
	for _, i := range idx {
		p := n.sc.Pods[i]
		c := &podresourcesv1.ContainerResources{Name: p.Container}
		if p.Allocation == AllocationDRA {
			c.DynamicResources = []*podresourcesv1.DynamicResource{n.claimResources(i)}
		} else {
			ids := make([]string, len(p.Devices))
			for k, d := range p.Devices {
				ids[k] = n.DeviceID(d)
			}
			c.Devices = []*podresourcesv1.ContainerDevices{{ResourceName: p.Resource, DeviceIds: ids}}
		}
		resp.PodResources = append(resp.PodResources, &podresourcesv1.PodResources{
			Namespace:  p.Namespace,
			Name:       p.Name,
			Containers: []*podresourcesv1.ContainerResources{c},
		})
	}
	n.faultyList(resp, t)
	return resp
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
// name and namespace, and per device the driver (gpu.nvidia.com), the pool
// (the node's name), the device's name in the node's ResourceSlices and
// the CDI device NVIDIA's driver prepares for it
// (k8s.gpu.nvidia.com/claim=<claim UID>-<device>). share_id is unset: the
// driver's devices are not allocated several times over; pods share one by
// sharing its claim.
func (n *Node) claimResources(i int) *podresourcesv1.DynamicResource {
	p := n.sc.Pods[i]
	uid := ClaimUID(n.sc.Node, p.Namespace, p.Claim)
	dr := &podresourcesv1.DynamicResource{ClaimName: p.Claim, ClaimNamespace: p.Namespace}
	for _, name := range n.devIDs.draName[i] {
		dr.ClaimResources = append(dr.ClaimResources, &podresourcesv1.ClaimResource{
			DriverName: DRADriver,
			PoolName:   n.sc.Node,
			DeviceName: name,
			CdiDevices: []*podresourcesv1.CDIDevice{{Name: "k8s." + DRADriver + "/claim=" + uid + "-" + name}},
		})
	}
	return dr
}
