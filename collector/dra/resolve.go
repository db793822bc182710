package dra

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/collector"
)

// Lister is the allocation source a Resolver wraps: the kubelet client.
type Lister interface {
	List(ctx context.Context) (collector.AllocationList, error)
}

// Resolver is an allocation source: the answers of another (the kubelet
// client) with every DRA device of a GPU driver resolved to its UUID
// through a Source. It is safe for concurrent use.
type Resolver struct {
	next Lister
	src  *Source // nil: DRA is off, no device can be resolved
	cfg  Config
	log  *zap.Logger

	mu sync.Mutex
	// others are the other drivers' devices the latest fresh answer
	// listed, each counted once while it stays listed.
	others map[collector.DRADevice]bool
	// unresolved are the devices the latest fresh answer could not
	// resolve, each logged once while it stays unresolved.
	unresolved map[collector.DRADevice]bool
	// passthrough are the VFIO devices the latest fresh answer listed,
	// each logged once while it stays listed.
	passthrough map[collector.DRADevice]bool

	// claims and pods are the node's pods' ResourceClaims (WithClaims);
	// nil: not read.
	claims     *Claims
	pods       ClaimPods
	waitClaims func() bool
	// noDyn are the containers' claims the latest fresh answer lacked,
	// each counted once while it stays so.
	noDyn map[ctrClaim]bool
}

// NewResolver returns a Resolver of next's DRA devices through src, for
// the drivers of cfg. With a nil src (DRA off: disabled, no node name, no
// API server) every GPU driver's device is unresolved, so that its GPU is
// never taken for an unallocated one.
func NewResolver(next Lister, src *Source, cfg Config, logger *zap.Logger) *Resolver {
	if logger == nil {
		logger = zap.NewNop()
	}
	return &Resolver{next: next, src: src, cfg: cfg, log: logger,
		others: map[collector.DRADevice]bool{}, unresolved: map[collector.DRADevice]bool{}, passthrough: map[collector.DRADevice]bool{}}
}

var errDRAOff = errors.New("DRA resolution is off (--dra.enabled=false, no node name, or no API server)")

// List returns next's answer (and error) with each DRA device of a GPU
// driver replaced by its UUID (collector.RefUUID; Allocation.DRA stays) or,
// for a dynamic MIG device its slices give no UUID, by its parent, profile
// and placement (collector.RefMIGPlacement, which the engine finds among
// the MIG instances NVML lists at the time), or dropped and counted in
// Unresolved when it cannot be. A VFIO passthrough device (type vfio) is
// dropped without a count: NVML on the host does not see a GPU bound to
// vfio-pci, so it hides none of the GPUs it sees. Other drivers' devices
// are dropped; those of NVIDIA's ComputeDomain driver (IMEX channels and
// daemons, no GPUs) silently. Problems gains a *collector.SourceError of
// source "dra" for each device not resolved (ReasonUnresolvedDevice) and
// for each other driver's device the first time it is listed
// (ReasonOtherDriver); like the kubelet's own, they are counted for a
// fresh answer only.
func (r *Resolver) List(ctx context.Context) (collector.AllocationList, error) {
	list, err := r.next.List(ctx)
	fresh := err == nil
	if r.claims != nil || r.pods != nil {
		list = r.applyClaims(ctx, list, fresh)
	}
	if !slices.ContainsFunc(list.Allocations, func(a collector.Allocation) bool { return a.Device.Kind == collector.RefDRA }) {
		// No DRA device (a device plugin's node): next's answer as it is,
		// without a copy a poll.
		if fresh {
			r.mu.Lock()
			clear(r.others)
			clear(r.unresolved)
			clear(r.passthrough)
			r.mu.Unlock()
		}
		return list, err
	}
	out := list
	out.Allocations = make([]collector.Allocation, 0, len(list.Allocations))
	out.Problems = slices.Clip(list.Problems) // the kubelet client's slice is shared
	others := map[collector.DRADevice]bool{}
	unresolved := map[collector.DRADevice]bool{}
	passthrough := map[collector.DRADevice]bool{}

	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range list.Allocations {
		if a.Device.Kind != collector.RefDRA {
			out.Allocations = append(out.Allocations, a)
			continue
		}
		d := a.DRA
		if companionDrivers[d.Driver] {
			continue // not a GPU, and not a problem
		}
		if !r.cfg.isDriver(d.Driver) {
			others[d] = true
			if fresh && !r.others[d] {
				r.log.Debug("ignoring a device of another DRA driver", zap.String("driver", d.Driver),
					zap.String("claim", d.ClaimNamespace+"/"+d.Claim), zap.String("device", d.Pool+"/"+d.Device))
				out.Problems = append(out.Problems, collector.NewSourceError(collector.SourceDRA, ReasonOtherDriver,
					fmt.Errorf("claim %s/%s: device %s/%s of driver %s, not a GPU driver", d.ClaimNamespace, d.Claim, d.Pool, d.Device, d.Driver)))
			}
			continue
		}
		ref, rerr := r.resolve(d)
		if errors.Is(rerr, ErrPassthrough) {
			passthrough[d] = true
			if fresh && !r.passthrough[d] {
				r.log.Info("a GPU is passed through to a VM (VFIO): NVML on the host does not see it, so its time is not counted",
					zap.String("pod", a.Namespace+"/"+a.Pod), zap.String("claim", d.ClaimNamespace+"/"+d.Claim),
					zap.String("device", d.Pool+"/"+d.Device))
			}
			continue
		}
		if rerr != nil {
			out.Unresolved++
			unresolved[d] = true
			if fresh {
				if !r.unresolved[d] {
					r.log.Warn("a DRA device cannot be resolved to a GPU: while it is not, GPUs no resolved claim holds count as unattributed",
						zap.String("pod", a.Namespace+"/"+a.Pod), zap.String("claim", d.ClaimNamespace+"/"+d.Claim),
						zap.String("driver", d.Driver), zap.String("pool", d.Pool), zap.String("device", d.Device), zap.Error(rerr))
				}
				out.Problems = append(out.Problems, collector.NewSourceError(collector.SourceDRA, ReasonUnresolvedDevice,
					fmt.Errorf("claim %s/%s: %w", d.ClaimNamespace, d.Claim, rerr)))
			}
			continue
		}
		if fresh && r.unresolved[d] {
			r.log.Info("DRA device resolved", zap.String("claim", d.ClaimNamespace+"/"+d.Claim),
				zap.String("device", d.Pool+"/"+d.Device), zap.String("uuid", ref.UUID))
		}
		a.Device = ref
		out.Allocations = append(out.Allocations, a)
	}
	if fresh {
		r.others, r.unresolved, r.passthrough = others, unresolved, passthrough
	}
	return out, err
}

func (r *Resolver) resolve(d collector.DRADevice) (collector.DeviceRef, error) {
	if r.src == nil {
		return collector.DeviceRef{}, errDRAOff
	}
	return r.src.Resolve(d.Driver, d.Pool, d.Device)
}

// companionDrivers are DRA drivers that run beside a GPU driver and whose
// devices are no GPUs: NVIDIA's ComputeDomain driver hands workloads IMEX
// channels and daemons for multi-node NVLink (NVIDIA/k8s-dra-driver-gpu,
// cmd/compute-domain-kubelet-plugin/main.go: DriverName). Their devices
// are expected beside GPUs, not a misconfiguration worth counting.
var companionDrivers = map[string]bool{"compute-domain.nvidia.com": true}

// DeviceTypeVFIO is the type attribute of a GPU that NVIDIA's DRA driver
// passes through to a VM (cmd/gpu-kubelet-plugin/types.go VfioDeviceType).
const DeviceTypeVFIO = "vfio"

// migNameRE is NVIDIA's DRA driver's name of a MIG device,
// gpu-<parent minor>-mig-<profile>-<GI profile ID>-<placement start>
// (cmd/gpu-kubelet-plugin/mig.go canonicalMigNameRegex).
var migNameRE = regexp.MustCompile(`^gpu-(\d+)-mig-(.+)-(\d+)-(\d+)$`)

// refOf maps a device of a GPU driver's slice to the device NVML knows:
// its UUID attribute, or, for a MIG device without one (NVIDIA's driver
// publishes dynamic MIG partitions so, whether or not a MIG device has
// been made of them), its parent's UUID, GI profile ID and placement from
// its name; or it says why neither can be had.
func refOf(name, typ, parent, profile string, attrs map[string]DeviceAttribute, keys []string) (collector.DeviceRef, string) {
	ref, problem := uuidOf(attrs, keys)
	if ref.Kind != 0 || typ != DeviceTypeMIG {
		return ref, problem
	}
	m := migNameRE.FindStringSubmatch(name)
	pref, err := collector.ParseDeviceID(parent)
	if m == nil || err != nil || pref.Kind != collector.RefUUID || pref.Replicated || !strings.HasPrefix(parent, "GPU-") {
		return ref, problem + fmt.Sprintf("; nor is it a MIG device named gpu-<minor>-mig-<profile>-<profile ID>-<placement> with a parentUUID (%d bytes)", len(parent))
	}
	gip, err1 := strconv.Atoi(m[3])
	start, err2 := strconv.Atoi(m[4])
	if err1 != nil || err2 != nil {
		return ref, problem + "; its name's profile ID or placement is not a number"
	}
	return collector.DeviceRef{ID: name, Kind: collector.RefMIGPlacement, UUID: parent, GIProfile: gip, Placement: start, Profile: profile}, ""
}

// DeviceTypeMIG is the type attribute of a MIG device, static or dynamic,
// in NVIDIA's DRA driver's slices (mig.go CommonAttributesMig).
const DeviceTypeMIG = "mig"
