package pods

import (
	"strings"

	"github.com/gpuxray/gpuxray/collector"
	"github.com/gpuxray/gpuxray/collector/internal/apihealth"
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
	sched := collector.Scheduling{PriorityClass: workload.CleanValue(p.Spec.PriorityClassName, workload.MaxNameBytes)}
	if p.Spec.Priority != nil {
		sched.Priority, sched.HasPriority = *p.Spec.Priority, true
	}
	sched.Queue, sched.ClusterQueue = workload.KueueQueues(p.Labels)
	return collector.Pod{
		UID:          string(p.UID),
		StaticUID:    staticUID(p),
		Namespace:    workload.CleanValue(p.Namespace, workload.MaxNameBytes),
		Name:         workload.CleanValue(p.Name, workload.MaxNameBytes),
		Phase:        workload.CleanValue(p.Status.Phase, maxPhaseBytes),
		WorkloadKind: kind,
		Workload:     name,
		Model:        workload.ModelFromLabels(p.Labels, p.Annotations, s.cfg.ModelKeys),
		ExtraLabels:  workload.ExtraLabels(s.cfg.ExtraLabels, p.Labels),
		ContainerIDs: containerIDs(p),
		Scheduling:   sched,
		Sharing:      sharing(p),
		Claims:       claims(p),
	}
}

// claims lists the claims p's sidecars and containers use, by claim name
// (pkg/kubelet/cm/dra/manager.go resolves them the same way: a pod claim's
// resourceClaimName, else the name its status gives the claim made from
// its template), and DRAExtendedResource's request mappings.
func claims(p *Pod) []collector.PodClaim {
	names := make(map[string]string, len(p.Spec.ResourceClaims))
	for _, c := range p.Spec.ResourceClaims {
		names[c.Name] = c.ResourceClaimName
	}
	for _, c := range p.Status.ResourceClaimStatuses {
		if names[c.Name] == "" {
			names[c.Name] = c.ResourceClaimName
		}
	}
	var out []collector.PodClaim
	add := func(ctr string, claims []ContainerClaim) {
		for _, c := range claims {
			if len(out) < MaxClaims {
				out = append(out, collector.PodClaim{Container: ctr, Claim: names[c.Name], Request: c.Request})
			}
		}
	}
	for _, c := range p.Spec.InitContainers {
		if c.RestartPolicy == "Always" {
			add(c.Name, c.Resources.Claims)
		}
	}
	for _, c := range p.Spec.Containers {
		add(c.Name, c.Resources.Claims)
	}
	if e := p.Status.ExtendedResourceClaimStatus; e != nil && e.ResourceClaimName != "" {
		for _, m := range e.RequestMappings {
			if len(out) < MaxClaims {
				out = append(out, collector.PodClaim{Container: m.ContainerName, Claim: e.ResourceClaimName, Request: m.RequestName})
			}
		}
	}
	return out
}

// staticUID returns the static pod's UID that mirror pod p stands for,
// or "" when p is no mirror (or names its own UID, or one longer than any
// UID: the kubelet writes a 32-character hash).
func staticUID(p *Pod) string {
	uid := p.Annotations[AnnotationMirror]
	if uid == string(p.UID) || len(uid) > maxUIDBytes {
		return ""
	}
	return uid
}

// Bounds of what is kept of one pod.
const (
	maxUIDBytes         = 128 // a UID is 36 bytes, a static pod's hash 32
	maxPhaseBytes       = 32  // Pending, Running, Succeeded, Failed, Unknown
	maxContainerIDBytes = 256 // a runtime's scheme and 64 hex digits
	// MaxClaims bounds the claim references kept of one pod: the API
	// allows 32 claims a pod (core/v1 validation), each named by a few
	// containers.
	MaxClaims = 128
)

// checkPod refuses a pod that no API server stores: a name, namespace or
// UID longer than Kubernetes allows, or more container statuses than
// MaxContainers. Memory per pod kept is then bounded.
func checkPod(p *Pod) error {
	switch {
	case len(p.Name) > workload.MaxNameBytes || len(p.Namespace) > workload.MaxNameBytes:
		return &apihealth.TooLargeError{What: "a pod name or namespace", Limit: workload.MaxNameBytes}
	case len(p.UID) > maxUIDBytes:
		return &apihealth.TooLargeError{What: "a pod UID", Limit: maxUIDBytes}
	case len(p.Status.ContainerStatuses)+len(p.Status.InitContainerStatuses)+len(p.Status.EphemeralContainerStatuses) > MaxContainers:
		return &apihealth.TooLargeError{What: "a pod's container statuses", Limit: MaxContainers, Unit: "containers"}
	}
	return nil
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
			// A container name is a DNS label; an ID longer than any
			// runtime writes names no container that runs.
			if id := stripScheme(c.ContainerID); id != "" && len(c.ContainerID) <= maxContainerIDBytes && len(c.Name) <= 63 {
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
