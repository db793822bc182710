package pods

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Pod is what the agent reads of a core/v1 Pod, decoded from the API
// server's JSON: its metadata (of which trim keeps the name, namespace,
// UID, resource version, labels, annotations, owner references and
// deletion time), the node it is bound to, its priority, its phase and its
// containers' IDs. JSON fields it does not name are skipped as they are
// decoded. It stands in for k8s.io/api/core/v1's Pod, whose package,
// with its generated protobuf and deep-copy code, was the largest the
// agent linked, for the handful of fields it reads.
type Pod struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              PodSpec   `json:"spec,omitempty"`
	Status            PodStatus `json:"status,omitempty"`
}

// PodSpec is the part of a pod's spec the agent reads.
type PodSpec struct {
	NodeName          string `json:"nodeName,omitempty"`
	PriorityClassName string `json:"priorityClassName,omitempty"`
	// Priority is the value of the pod's priority class, resolved by the
	// API server's admission; nil when the pod has none.
	Priority *int32 `json:"priority,omitempty"`
	// InitContainers and Containers are the pod's containers, by name, in
	// spec order: HAMi's device annotation is indexed by it.
	InitContainers []ContainerName `json:"initContainers,omitempty"`
	Containers     []ContainerName `json:"containers,omitempty"`
	// ResourceClaims are the pod's claims by the name its containers use:
	// a claim's own name, or a template the claim is made from.
	ResourceClaims []PodResourceClaim `json:"resourceClaims,omitempty"`
}

// ContainerName is a container of a pod's spec, of which its name, its
// restart policy (Always: a sidecar) and the claims it uses are read.
type ContainerName struct {
	Name          string `json:"name"`
	RestartPolicy string `json:"restartPolicy,omitempty"`
	Resources     struct {
		Claims []ContainerClaim `json:"claims,omitempty"`
	} `json:"resources,omitempty"`
}

// ContainerClaim is a container's reference to a claim of its pod, and
// the one request of it the container uses (empty: all of them).
type ContainerClaim struct {
	Name    string `json:"name"`
	Request string `json:"request,omitempty"`
}

// PodResourceClaim names a claim of a pod: resourceClaimName is an
// existing claim's name; a claim made from a template is named in the
// pod's status.
type PodResourceClaim struct {
	Name              string `json:"name"`
	ResourceClaimName string `json:"resourceClaimName,omitempty"`
}

// PodStatus is the part of a pod's status the agent reads.
type PodStatus struct {
	// Phase is Pending, Running, Succeeded, Failed or Unknown.
	Phase                 string            `json:"phase,omitempty"`
	InitContainerStatuses []ContainerStatus `json:"initContainerStatuses,omitempty"`
	ContainerStatuses     []ContainerStatus `json:"containerStatuses,omitempty"`
	// EphemeralContainerStatuses are the debug containers kubectl debug
	// adds: the kubelet lists none of them, but their processes may run on
	// the pod's GPUs.
	EphemeralContainerStatuses []ContainerStatus `json:"ephemeralContainerStatuses,omitempty"`
	// ResourceClaimStatuses name the claims made from templates for the
	// pod, by the pod's name of the claim.
	ResourceClaimStatuses []PodResourceClaim `json:"resourceClaimStatuses,omitempty"`
	// ExtendedResourceClaimStatus is the claim DRAExtendedResource made
	// for the pod's extended-resource requests (nvidia.com/gpu), and
	// which request of it each container's resource maps to.
	ExtendedResourceClaimStatus *ExtendedResourceClaimStatus `json:"extendedResourceClaimStatus,omitempty"`
}

// ExtendedResourceClaimStatus is core/v1's PodExtendedResourceClaimStatus.
type ExtendedResourceClaimStatus struct {
	RequestMappings []struct {
		ContainerName string `json:"containerName"`
		RequestName   string `json:"requestName"`
	} `json:"requestMappings,omitempty"`
	ResourceClaimName string `json:"resourceClaimName,omitempty"`
}

// ContainerStatus is a container's name and, once it has started, its
// runtime ID ("containerd://<64 hex>").
type ContainerStatus struct {
	Name        string `json:"name"`
	ContainerID string `json:"containerID,omitempty"`
}

// PodList is a list of pods.
type PodList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Pod `json:"items"`
}

// PriorityClass is what the agent reads of a scheduling.k8s.io/v1
// PriorityClass: its name and value.
type PriorityClass struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Value             int32 `json:"value"`
}

// PriorityClassList is a list of priority classes.
type PriorityClassList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PriorityClass `json:"items"`
}

// DeepCopyObject implements runtime.Object.
func (p *Pod) DeepCopyObject() runtime.Object {
	if p == nil {
		return nil
	}
	return p.deepCopy()
}

func (p *Pod) deepCopy() *Pod {
	out := &Pod{TypeMeta: p.TypeMeta, Spec: p.Spec, Status: PodStatus{Phase: p.Status.Phase}}
	p.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if p.Spec.Priority != nil {
		v := *p.Spec.Priority
		out.Spec.Priority = &v
	}
	out.Status.InitContainerStatuses = cloneStatuses(p.Status.InitContainerStatuses)
	out.Status.ContainerStatuses = cloneStatuses(p.Status.ContainerStatuses)
	out.Status.EphemeralContainerStatuses = cloneStatuses(p.Status.EphemeralContainerStatuses)
	out.Spec.InitContainers = slices.Clone(p.Spec.InitContainers)
	out.Spec.Containers = slices.Clone(p.Spec.Containers)
	return out
}

func cloneStatuses(in []ContainerStatus) []ContainerStatus {
	if in == nil {
		return nil
	}
	return append(make([]ContainerStatus, 0, len(in)), in...)
}

// DeepCopyObject implements runtime.Object.
func (l *PodList) DeepCopyObject() runtime.Object {
	if l == nil {
		return nil
	}
	out := &PodList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]Pod, len(l.Items))
		for i := range l.Items {
			out.Items[i] = *l.Items[i].deepCopy()
		}
	}
	return out
}

// DeepCopyObject implements runtime.Object.
func (c *PriorityClass) DeepCopyObject() runtime.Object {
	if c == nil {
		return nil
	}
	return c.deepCopy()
}

func (c *PriorityClass) deepCopy() *PriorityClass {
	out := &PriorityClass{TypeMeta: c.TypeMeta, Value: c.Value}
	c.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return out
}

// DeepCopyObject implements runtime.Object.
func (l *PriorityClassList) DeepCopyObject() runtime.Object {
	if l == nil {
		return nil
	}
	out := &PriorityClassList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]PriorityClass, len(l.Items))
		for i := range l.Items {
			out.Items[i] = *l.Items[i].deepCopy()
		}
	}
	return out
}
