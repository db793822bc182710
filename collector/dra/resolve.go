package dra

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
		others: map[collector.DRADevice]bool{}, unresolved: map[collector.DRADevice]bool{}}
}

var errDRAOff = errors.New("DRA resolution is off (--dra.enabled=false, no node name, or no API server)")

// List returns next's answer (and error) with each DRA device of a GPU
// driver replaced by its UUID (collector.RefUUID; Allocation.DRA stays), or
// dropped and counted in Unresolved when it cannot be. Other drivers'
// devices are dropped. Problems gains a *collector.SourceError of source
// "dra" for each device not resolved (ReasonUnresolvedDevice) and for each
// other driver's device the first time it is listed (ReasonOtherDriver);
// like the kubelet's own, they are counted for a fresh answer only.
func (r *Resolver) List(ctx context.Context) (collector.AllocationList, error) {
	list, err := r.next.List(ctx)
	fresh := err == nil
	if !slices.ContainsFunc(list.Allocations, func(a collector.Allocation) bool { return a.Device.Kind == collector.RefDRA }) {
		// No DRA device (a device plugin's node): next's answer as it is,
		// without a copy a poll.
		if fresh {
			r.mu.Lock()
			clear(r.others)
			clear(r.unresolved)
			r.mu.Unlock()
		}
		return list, err
	}
	out := list
	out.Allocations = make([]collector.Allocation, 0, len(list.Allocations))
	out.Problems = slices.Clip(list.Problems) // the kubelet client's slice is shared
	others := map[collector.DRADevice]bool{}
	unresolved := map[collector.DRADevice]bool{}

	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range list.Allocations {
		if a.Device.Kind != collector.RefDRA {
			out.Allocations = append(out.Allocations, a)
			continue
		}
		d := a.DRA
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
		r.others, r.unresolved = others, unresolved
	}
	return out, err
}

func (r *Resolver) resolve(d collector.DRADevice) (collector.DeviceRef, error) {
	if r.src == nil {
		return collector.DeviceRef{}, errDRAOff
	}
	return r.src.Resolve(d.Driver, d.Pool, d.Device)
}
