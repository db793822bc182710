package kubelet

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/collector"
)

// ReasonUnresolvedShare: a HAMi vGPU slice whose pod does not say (yet)
// which GPU HAMi gave it; the slice is held, by whom is not known.
const ReasonUnresolvedShare = "unresolved_shared_device"

// Lister is an allocation source: the kubelet client, or a wrapper of it.
type Lister interface {
	List(ctx context.Context) (collector.AllocationList, error)
}

// PodLookup is what Sharing reads of the node's pods: the pod source.
type PodLookup interface {
	Pod(namespace, name string) (collector.Pod, bool)
}

// GPUGroupLister is a PodLookup that also lists the pods of a KAI GPU
// group, for Sharing to hand a reservation pod's GPU to them.
type GPUGroupLister interface {
	PodsInGPUGroup(group string) []collector.Pod
}

// Sharing is an allocation source: another's answers (the kubelet
// client's) with the GPUs that sharing schedulers hand out behind the
// kubelet's back given to the pods that use them.
//
//   - HAMi: its device plugin advertises slices "GPU-<uuid>-<n>" and lets
//     the kubelet pick any free one (no GetPreferredAllocation by default),
//     then gives the container the GPU of its pod's
//     hami.io/vgpu-devices-allocated annotation (Project-HAMi/HAMi,
//     pkg/device-plugin/nvidiadevice/nvinternal/plugin/server.go Allocate).
//     So the slice's UUID need not be the GPU: each container's slices are
//     replaced by the GPUs its annotation names, shared; without the pod
//     or its annotation they are held but unresolved.
//   - KAI Scheduler: a fraction pod requests no GPU; a reservation pod in
//     kai-resource-reservation holds one through the device plugin for
//     every pod of its GPU group (runai-gpu-group label), which KAI's
//     binder points at it (NVIDIA/KAI-Scheduler,
//     pkg/binder/binding/resourcereservation). The reservation pod's GPU
//     is given to those of them that run, shared; while none runs, or
//     where the pod source cannot list a group, the reservation pod keeps
//     it.
//
// Sharing is safe for concurrent use.
type Sharing struct {
	next Lister
	pods PodLookup // nil: no pod source
	log  *zap.Logger

	mu sync.Mutex
	// unresolved are the containers whose slices the latest fresh answer
	// could not resolve, each logged once while it stays so.
	unresolved map[[3]string]bool
}

// NewSharing returns a Sharing over next, reading pods from pods (nil
// when the agent has no pod source).
func NewSharing(next Lister, pods PodLookup, logger *zap.Logger) *Sharing {
	if logger == nil {
		logger = zap.NewNop()
	}
	return &Sharing{next: next, pods: pods, log: logger, unresolved: map[[3]string]bool{}}
}

// List returns next's answer and error, with HAMi's slices replaced by
// the GPUs their pods' annotations name, or dropped and counted in
// Unresolved (with a problem of reason ReasonUnresolvedShare in a fresh
// answer), and KAI reservation pods' GPUs given to their groups' pods.
func (s *Sharing) List(ctx context.Context) (collector.AllocationList, error) {
	list, err := s.next.List(ctx)
	if !slices.ContainsFunc(list.Allocations, shared) {
		return list, err
	}
	fresh := err == nil
	out := list
	out.Allocations = make([]collector.Allocation, 0, len(list.Allocations))
	out.Problems = slices.Clip(list.Problems)
	unresolved := map[[3]string]bool{}
	done := map[[3]string]bool{}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range list.Allocations {
		switch {
		case a.Device.HAMi:
			key := [3]string{a.Namespace, a.Pod, a.Container}
			if done[key] {
				continue
			}
			uuids := s.hamiGPUs(a)
			if len(uuids) == 0 {
				out.Unresolved++
				unresolved[key] = true
				if fresh {
					if !s.unresolved[key] {
						s.log.Warn("a HAMi vGPU slice cannot be resolved to the GPU HAMi gave: its pod's "+collector.AnnotationHAMiDevices+" annotation is not known; while it is not, GPUs no resolved allocation holds count as unattributed",
							zap.String("pod", a.Namespace+"/"+a.Pod), zap.String("container", a.Container))
					}
					out.Problems = append(out.Problems, collector.NewSourceError(collector.SourceKubelet, ReasonUnresolvedShare,
						fmt.Errorf("pod %s/%s: HAMi slice %s of an unknown GPU", a.Namespace, a.Pod, a.Device.ID)))
				}
				continue
			}
			done[key] = true
			for _, uuid := range uuids {
				b := a
				b.Device = collector.DeviceRef{ID: a.Device.ID, Kind: collector.RefUUID, UUID: uuid, Replicated: true, HAMi: true}
				b.Shared = true
				out.Allocations = append(out.Allocations, b)
			}
		case a.Namespace == collector.KAIReservationNamespace && a.DRA.IsZero():
			out.Allocations = s.kaiHolders(a, out.Allocations)
		default:
			out.Allocations = append(out.Allocations, a)
		}
	}
	if fresh {
		s.unresolved = unresolved
	}
	slices.SortFunc(out.Allocations, compareAllocations)
	return out, err
}

// shared reports whether a is an allocation Sharing rewrites.
func shared(a collector.Allocation) bool {
	return a.Device.HAMi || (a.Namespace == collector.KAIReservationNamespace && a.DRA.IsZero())
}

// hamiGPUs returns the GPUs HAMi gave a's container, or none when the pod
// source does not say.
func (s *Sharing) hamiGPUs(a collector.Allocation) []string {
	if s.pods == nil {
		return nil
	}
	p, ok := s.pods.Pod(a.Namespace, a.Pod)
	if !ok {
		return nil
	}
	return p.Sharing.Devices[a.Container]
}

// kaiHolders appends the allocations of reservation allocation a's GPU:
// one per running pod of its GPU group, to the container KAI gives the
// GPU, or a itself when there is none.
func (s *Sharing) kaiHolders(a collector.Allocation, out []collector.Allocation) []collector.Allocation {
	groups, ok := s.pods.(GPUGroupLister)
	if s.pods == nil || !ok {
		return append(out, a)
	}
	rp, ok := s.pods.Pod(a.Namespace, a.Pod)
	if !ok || len(rp.Sharing.GPUGroups) == 0 {
		return append(out, a)
	}
	n := len(out)
	for _, g := range rp.Sharing.GPUGroups {
		for _, p := range groups.PodsInGPUGroup(g) {
			// A fraction pod holds the GPU once it runs: Pending, its
			// containers have not started (KAI keeps the reservation for
			// it meanwhile).
			if p.Namespace == collector.KAIReservationNamespace || p.Phase != "Running" || p.Sharing.GPUContainer == "" {
				continue
			}
			b := a
			b.Namespace, b.Pod, b.Container, b.Shared = p.Namespace, p.Name, p.Sharing.GPUContainer, true
			out = append(out, b)
		}
	}
	if len(out) == n {
		return append(out, a)
	}
	return out
}
