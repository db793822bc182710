package pods

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuxray/gpuxray/collector"
	"github.com/gpuxray/gpuxray/collector/workload"
)

// AnnotationMirror is the annotation the kubelet puts on a static pod's
// mirror: its value is the static pod's UID (the kubelet's hash of the
// manifest, also its kubernetes.io/config.hash annotation), which the
// pod's cgroups are named by, and which differs from the mirror's UID.
const AnnotationMirror = "kubernetes.io/config.mirror"

// convert computes what the agent exports of pod p.
func (s *Source) convert(p *Pod) collector.Pod {
	owners := make([]workload.OwnerRef, 0, len(p.OwnerReferences))
	for _, o := range p.OwnerReferences {
		owners = append(owners, workload.OwnerRef{
			APIVersion: o.APIVersion, Kind: o.Kind, Name: o.Name,
			Controller: o.Controller != nil && *o.Controller,
		})
	}
	kind, name := workload.ResolvePod(p.Name, owners, p.Labels)
	sched := collector.Scheduling{PriorityClass: p.Spec.PriorityClassName}
	if p.Spec.Priority != nil {
		sched.Priority, sched.HasPriority = *p.Spec.Priority, true
	}
	sched.Queue, sched.ClusterQueue = workload.KueueQueues(p.Labels)
	return collector.Pod{
		UID:          string(p.UID),
		StaticUID:    staticUID(p),
		Namespace:    p.Namespace,
		Name:         p.Name,
		Phase:        p.Status.Phase,
		WorkloadKind: kind,
		Workload:     name,
		Model:        workload.ModelFromLabels(p.Labels, p.Annotations, s.cfg.ModelKeys),
		ExtraLabels:  workload.ExtraLabels(s.cfg.ExtraLabels, p.Labels),
		ContainerIDs: containerIDs(p),
		Scheduling:   sched,
		Sharing:      sharing(p),
	}
}

// staticUID returns the static pod's UID that mirror pod p stands for,
// or "" when p is no mirror (or names its own UID).
func staticUID(p *Pod) string {
	uid := p.Annotations[AnnotationMirror]
	if uid == string(p.UID) {
		return ""
	}
	return uid
}

// containerIDs maps each started container of p (init, sidecar and
// ephemeral containers included: a native sidecar can hold a GPU, and a
// debug container's processes can run on the pod's) to its runtime ID,
// without the "containerd://", "cri-o://" or "docker://" scheme.
func containerIDs(p *Pod) map[string]string {
	n := len(p.Status.ContainerStatuses) + len(p.Status.InitContainerStatuses) + len(p.Status.EphemeralContainerStatuses)
	if n == 0 {
		return nil
	}
	ids := make(map[string]string, n)
	for _, list := range [][]ContainerStatus{p.Status.InitContainerStatuses, p.Status.ContainerStatuses, p.Status.EphemeralContainerStatuses} {
		for _, c := range list {
			if id := stripScheme(c.ContainerID); id != "" {
				ids[c.Name] = id
			}
		}
	}
	return ids
}

// stripScheme returns a container ID without its runtime scheme
// ("containerd://<id>" → "<id>").
func stripScheme(id string) string {
	if _, rest, ok := strings.Cut(id, "://"); ok {
		return rest
	}
	return id
}

// trim keeps of a pod only what convert and the store read: name,
// namespace, UID, resource version, labels, annotations, owner references
// and deletion time of its metadata; its spec and status, which Pod
// already holds to spec.nodeName, priorityClassName and priority, the
// phase and the containers' names and IDs. It drops the rest of the
// metadata (managed fields above all) before the informer caches the pod,
// so the cache costs a few hundred bytes a pod; the spec's containers,
// volumes and tolerations, conditions and images were never decoded.
func trim(obj any) (any, error) {
	p, ok := obj.(*Pod)
	if !ok {
		return obj, nil
	}
	return &Pod{
		TypeMeta: p.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			Labels: p.Labels, Annotations: p.Annotations, OwnerReferences: p.OwnerReferences,
			DeletionTimestamp: p.DeletionTimestamp,
		},
		Spec:   p.Spec,
		Status: p.Status,
	}, nil
}
