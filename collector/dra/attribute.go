package dra

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/collector"
)

// ReasonNoDynamicResources (source "kubelet"): the kubelet lists a running
// pod's container without the claims its spec names — a kubelet without
// the KubeletPodResourcesDynamicResources gate (alpha and off from 1.27 to
// 1.33, on from 1.34: pkg/features/kube_features.go). Counted once per
// container and claim; its devices are read from the claim instead.
const ReasonNoDynamicResources = "no_dynamic_resources"

// ClaimPods lists the node's pods whose containers use ResourceClaims:
// the pod source.
type ClaimPods interface {
	ClaimPods() []collector.Pod
}

// WithClaims makes r read the node's pods' ResourceClaims through claims
// and pods (either may be nil: the source is off). With them, r
//
//   - gives a running pod's container the devices of its claims where the
//     kubelet lists none (a kubelet without dynamic_resources), and counts
//     that; while such a claim is not known (RBAC denies it, the API
//     server is down) its devices are held, unresolved;
//   - drops a device its claim holds with admin access (KEP-5018): a
//     monitor sees the device, it does not hold it;
//   - keeps of a claim's devices, for each container, those of the
//     requests the container uses (container.resources.claims[].request,
//     DRAExtendedResource's request mappings): the kubelet lists a claim's
//     every device under every container that names the claim
//     (pkg/kubelet/cm/dra/manager.go GetResources).
//
// While wait (nil: never) returns true, each List waits for newly wanted
// claims to be listed (a replay, whose answers must not depend on the
// loopback API server's speed, but for while it is down). It returns r.
func (r *Resolver) WithClaims(claims *Claims, pods ClaimPods, wait func() bool) *Resolver {
	r.claims, r.pods, r.waitClaims = claims, pods, wait
	return r
}

type ctrClaim struct{ namespace, pod, container, claim string }

// applyClaims does what WithClaims says to list; fresh says whether list
// is a fresh answer of the kubelet.
func (r *Resolver) applyClaims(ctx context.Context, list collector.AllocationList, fresh bool) collector.AllocationList {
	var pods []collector.Pod
	if r.pods != nil {
		for _, p := range r.pods.ClaimPods() {
			if p.Phase == "Running" {
				pods = append(pods, p)
			}
		}
	}
	listed := map[ctrClaim]bool{}
	podListed := map[[2]string]bool{}
	want := map[ClaimKey]bool{}
	for _, a := range list.Allocations {
		if a.DRA.IsZero() {
			continue
		}
		listed[ctrClaim{a.Namespace, a.Pod, a.Container, a.DRA.Claim}] = true
		podListed[[2]string{a.Namespace, a.Pod}] = true
		want[ClaimKey{a.DRA.ClaimNamespace, a.DRA.Claim}] = true
	}
	// requests[container and claim] are the requests the container uses
	// of the claim; "" is all of them.
	requests := map[ctrClaim][]string{}
	for _, p := range pods {
		for _, c := range p.Claims {
			if c.Claim == "" {
				continue
			}
			want[ClaimKey{p.Namespace, c.Claim}] = true
			k := ctrClaim{p.Namespace, p.Name, c.Container, c.Claim}
			requests[k] = append(requests[k], c.Request)
		}
	}
	if fresh && r.claims != nil {
		r.claims.Want(want)
	}
	if r.waitClaims != nil && r.claims != nil && r.waitClaims() {
		wctx, cancel := context.WithTimeout(ctx, waitSyncedFor)
		if err := r.claims.WaitSynced(wctx); err != nil {
			r.log.Warn("ResourceClaims not listed in time", zap.Error(err))
		}
		cancel()
	}
	out := list
	out.Allocations = make([]collector.Allocation, 0, len(list.Allocations))
	for _, a := range list.Allocations {
		if a.DRA.IsZero() {
			out.Allocations = append(out.Allocations, a)
			continue
		}
		if cl, ok := r.claim(ClaimKey{a.DRA.ClaimNamespace, a.DRA.Claim}); ok {
			res, found := cl.result(a.DRA.Driver, a.DRA.Pool, a.DRA.Device, a.DRA.ShareID)
			if found && res.AdminAccess {
				continue // a monitor's access: it holds nothing
			}
			if reqs := requests[ctrClaim{a.Namespace, a.Pod, a.Container, a.DRA.Claim}]; found && !usesRequest(reqs, res.Request) {
				continue // another request's device, which another container uses
			}
		}
		out.Allocations = append(out.Allocations, a)
	}
	out.Problems = append([]error(nil), list.Problems...)
	noDyn := map[ctrClaim]bool{}
	for _, p := range pods {
		if podListed[[2]string{p.Namespace, p.Name}] {
			continue // the kubelet lists this pod's claims: it has dynamic_resources
		}
		done := map[ctrClaim]bool{}
		for _, c := range p.Claims {
			k := ctrClaim{p.Namespace, p.Name, c.Container, c.Claim}
			if c.Claim == "" || listed[k] || done[k] {
				continue
			}
			done[k] = true
			noDyn[k] = true
			if fresh && !r.noDyn[k] {
				r.log.Info("the kubelet lists a container without its ResourceClaims (no KubeletPodResourcesDynamicResources): its devices are read from the claim",
					zap.String("pod", p.Namespace+"/"+p.Name), zap.String("container", c.Container), zap.String("claim", c.Claim))
				out.Problems = append(out.Problems, collector.NewSourceError(collector.SourceKubelet, ReasonNoDynamicResources,
					fmt.Errorf("pod %s/%s container %s: claim %s not listed by the kubelet", p.Namespace, p.Name, c.Container, c.Claim)))
			}
			cl, ok := r.claim(ClaimKey{p.Namespace, c.Claim})
			if !ok || cl == nil {
				// Held, by a device not known: the node's free GPU time
				// is unattributed until the claim is read.
				out.Unresolved++
				if fresh {
					out.Problems = append(out.Problems, collector.NewSourceError(collector.SourceDRA, ReasonUnresolvedDevice,
						fmt.Errorf("pod %s/%s: claim %s/%s is not known (yet)", p.Namespace, p.Name, p.Namespace, c.Claim)))
				}
				continue
			}
			for _, res := range cl.Results {
				if res.AdminAccess || !usesRequest(requests[k], res.Request) {
					continue
				}
				d := collector.DRADevice{ClaimNamespace: p.Namespace, Claim: c.Claim, Driver: res.Driver, Pool: res.Pool, Device: res.Device, ShareID: res.ShareID}
				out.Allocations = append(out.Allocations, collector.Allocation{
					Namespace: p.Namespace, Pod: p.Name, Container: c.Container, Resource: d.Driver,
					Device: collector.DeviceRef{ID: d.Driver + "/" + d.Pool + "/" + d.Device, Kind: collector.RefDRA},
					DRA:    d,
				})
			}
		}
	}
	if fresh {
		r.noDyn = noDyn
	}
	markShared(out.Allocations)
	return out
}

// usesRequest reports whether a container that uses reqs of a claim (""
// all of them; none known: all) uses a device allocated for request.
func usesRequest(reqs []string, request string) bool {
	if len(reqs) == 0 {
		return true
	}
	for _, q := range reqs {
		if q == "" || q == request {
			return true
		}
	}
	return false
}

// markShared marks a DRA device shared when it has a share ID or when
// several containers hold it through one claim; two claims holding one
// device without a share stay exclusive, a conflict the engine counts.
func markShared(allocs []collector.Allocation) {
	type holder struct{ namespace, pod, container string }
	first := map[collector.DRADevice]holder{}
	shared := map[collector.DRADevice]bool{}
	for _, a := range allocs {
		if a.DRA.IsZero() {
			continue
		}
		h := holder{a.Namespace, a.Pod, a.Container}
		if f, ok := first[a.DRA]; !ok {
			first[a.DRA] = h
		} else if f != h {
			shared[a.DRA] = true
		}
	}
	for i := range allocs {
		if a := &allocs[i]; !a.DRA.IsZero() {
			a.Shared = a.DRA.ShareID != "" || shared[a.DRA]
		}
	}
}

// claim returns claim k if it is known; none is without a claim source.
func (r *Resolver) claim(k ClaimKey) (*Claim, bool) {
	if r.claims == nil {
		return nil, false
	}
	return r.claims.Get(k)
}
