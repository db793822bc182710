package sim

import (
	"slices"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuxray/gpuxray/collector"
)

// KubeletSpec is how the node's kubelet answers beyond its defaults: the
// top-level `kubelet` key.
type KubeletSpec struct {
	// DynamicResources is false for a kubelet without the feature gate
	// KubeletPodResourcesDynamicResources (alpha and off from 1.27 to 1.33,
	// on from 1.34: pkg/features/kube_features.go), whose List leaves
	// every container's dynamic_resources empty (server_v1.go). Default
	// true.
	DynamicResources bool
}

// ClaimAccess is what a DRA pod's claim keys say: admin_access and
// request.
type ClaimAccess struct {
	// AdminAccess marks a DRA pod whose claim was allocated with admin
	// access (KEP-5018; a monitor such as DCGM): it holds nothing, and may
	// name devices that other claims hold. Its results carry adminAccess:
	// true in the claim's status.
	AdminAccess bool
	// Request is the claim's request the pod's container uses
	// (container.resources.claims[].request): pods that name one claim
	// with different requests each hold their own request's devices,
	// while the kubelet lists the claim's every device under each of
	// them. Empty: the container uses the whole claim, whose one request
	// is DefaultRequest.
	Request string
}

// DefaultRequest is the name of a simulated claim's request where the pod
// names none: NVIDIA's DRA driver's examples name their one request "gpu".
const DefaultRequest = "gpu"

// claimAccess checks a pod's admin_access and request, after its devices
// and util.
func (d *validator) claimAccess(p string, ps *PodSpec, pod *Pod) error {
	if ps.AdminAccess {
		if pod.Allocation != AllocationDRA {
			return d.errf(p+".admin_access", "admin access is a DRA claim's; give the pod allocation: %s", AllocationDRA)
		}
		if slices.ContainsFunc(pod.Util, func(s Step) bool { return s.Value > 0 }) {
			return d.errf(p+".util", "a pod with admin access monitors a GPU others hold: it runs no kernels")
		}
		pod.AdminAccess = true
	}
	if d.has(p + ".request") {
		v := ps.Request
		if pod.Allocation != AllocationDRA {
			return d.errf(p+".request", "a request is a DRA claim's; give the pod allocation: %s", AllocationDRA)
		}
		if len(v) > 63 || !claimNameRE.MatchString(v) || slices.Contains([]byte(v), '.') {
			return d.errf(p+".request", "%q is not a request name: a DNS label", v)
		}
		pod.Request = v
	}
	return nil
}

// request is the claim request pod i's devices were allocated for.
func (p Pod) request() string {
	if p.Request != "" {
		return p.Request
	}
	return DefaultRequest
}

// podClaims are the claims pod i's container uses, as the pod source reads
// them from its spec: none for a device-plugin pod, or for a regular init
// container (the kubelet never lists one).
func (n *Node) podClaims(i int) []collector.PodClaim {
	p := n.sc.Pods[i]
	if p.Allocation != AllocationDRA || p.ContainerType == ContainerInit {
		return nil
	}
	return []collector.PodClaim{{Container: p.Container, Claim: p.Claim, Request: p.Request}}
}

// ClaimPods returns the scenario's pods that use claims, as the pod source
// does: every pod the API server knows at the clock's now.
func (n *Node) ClaimPods() []collector.Pod {
	var out []collector.Pod
	for i, p := range n.sc.Pods {
		if p.Allocation == AllocationDRA && p.ContainerType != ContainerInit {
			out = append(out, n.pod(i))
		}
	}
	return out
}

// ResourceClaims returns the node's ResourceClaims as the API server
// serves them: one per claim the scenario's DRA pods name, allocated by
// the scheduler (status.allocation.devices.results: per device its
// request, driver, pool — the node's — and name, with adminAccess for an
// admin-access pod's) and reserved for its pods (status.reservedFor). They
// are served allocated throughout the run: which pods run is the
// kubelet's and the pod source's to say.
func (n *Node) ResourceClaims() []resourcev1.ResourceClaim {
	var out []resourcev1.ResourceClaim
	for _, g := range n.sc.claims() {
		c := resourcev1.ResourceClaim{
			TypeMeta: metav1.TypeMeta{APIVersion: resourcev1.SchemeGroupVersion.String(), Kind: "ResourceClaim"},
			ObjectMeta: metav1.ObjectMeta{Namespace: g.namespace, Name: g.name,
				UID: types.UID(ClaimUID(n.sc.Node, g.namespace, g.name))},
		}
		alloc := &resourcev1.AllocationResult{}
		seen := map[string]bool{}
		for _, i := range g.pods {
			p := n.sc.Pods[i]
			c.Status.ReservedFor = append(c.Status.ReservedFor, resourcev1.ResourceClaimConsumerReference{
				Resource: "pods", Name: p.Name, UID: types.UID(n.ids.uid[i])})
			for _, name := range n.devIDs.draName[i] {
				if seen[name] {
					continue
				}
				seen[name] = true
				r := resourcev1.DeviceRequestAllocationResult{Request: p.request(), Driver: DRADriver, Pool: n.sc.Node, Device: name}
				if p.AdminAccess {
					r.AdminAccess = new(true)
				}
				alloc.Devices.Results = append(alloc.Devices.Results, r)
			}
		}
		c.Status.Allocation = alloc
		out = append(out, c)
	}
	return out
}
