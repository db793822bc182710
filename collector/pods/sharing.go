package pods

import (
	"slices"

	"github.com/gpuxray/gpuxray/collector"
)

// PodsInGPUGroup returns the known pods of KAI Scheduler GPU group group
// (the runai-gpu-group labels): the reservation pod that holds a GPU for
// the group, and the fraction pods that share it. A node holds a few
// dozen pods, so a scan of them is cheaper than an index kept on every
// event.
func (s *Source) PodsInGPUGroup(group string) []collector.Pod {
	var out []collector.Pod
	s.lw.Range(func(_ string, p collector.Pod) {
		if slices.Contains(p.Sharing.GPUGroups, group) {
			out = append(out, p)
		}
	})
	slices.SortFunc(out, func(a, b collector.Pod) int {
		if a.Namespace != b.Namespace {
			if a.Namespace < b.Namespace {
				return -1
			}
			return 1
		}
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}

// sharing reads what HAMi and KAI Scheduler wrote on p about its GPUs.
func sharing(p *Pod) collector.Sharing {
	var sh collector.Sharing
	if a := p.Annotations[collector.AnnotationHAMiDevices]; a != "" {
		names := make([]string, 0, len(p.Spec.InitContainers)+len(p.Spec.Containers))
		for _, c := range p.Spec.InitContainers {
			names = append(names, c.Name)
		}
		for _, c := range p.Spec.Containers {
			names = append(names, c.Name)
		}
		sh.Devices = collector.HAMiDevices(a, names)
	}
	if sh.GPUGroups = collector.KAIGroups(p.Labels); len(sh.GPUGroups) > 0 {
		sh.GPUContainer = p.Annotations[collector.AnnotationKAIFractionContainer]
		if sh.GPUContainer == "" && len(p.Spec.Containers) > 0 {
			// KAI gives the GPU to the first container unless told
			// (pkg/binder/common/gpu_access.go defaultFractionContainer).
			sh.GPUContainer = p.Spec.Containers[0].Name
		}
	}
	return sh
}

// ClaimPods returns the known pods whose containers use ResourceClaims:
// the DRA resolver reads their claims where the kubelet does not list them.
func (s *Source) ClaimPods() []collector.Pod {
	var out []collector.Pod
	s.lw.Range(func(_ string, p collector.Pod) {
		if len(p.Claims) > 0 {
			out = append(out, p)
		}
	})
	return out
}
