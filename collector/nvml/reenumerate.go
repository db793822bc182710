package nvml

import (
	"context"
	"slices"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/collector"
)

// migRescanInterval bounds how often Read walks the MIG device indices of
// the MIG-enabled GPUs for MIG devices made or destroyed since the last
// walk (a DRA driver makes one for each claim that asks for one): at most
// once per interval of the reader's clock, however often Read runs. A walk
// costs GetMaxMigDeviceCount, then GetMigDeviceHandleByIndex and GetUUID
// per index, per MIG-enabled GPU (see BenchmarkMIGRescan).
const migRescanInterval = time.Second

// migRescan is what the reader keeps of its MIG walks.
type migRescan struct {
	// last is when the last walk started, on the reader's clock.
	last time.Time
	// pending is a walk that outlived CallTimeout: NVML calls cannot be
	// cancelled, so its result is applied when it ends, and no other walk
	// starts meanwhile.
	pending *migWalk
	// epoch counts re-initialisations: a walk of an older NVML session's
	// handles is dropped.
	epoch int
}

// migWalk is one walk of the MIG indices of some MIG-enabled GPUs, run on
// a goroutine of its own, which alone touches found until done closes.
type migWalk struct {
	epoch   int
	parents []migParent
	found   []migFound
	done    chan struct{}
}

// migParent is a MIG-enabled GPU to walk and the MIG devices known on it.
type migParent struct {
	info   collector.Device
	handle nvml.Device
	known  map[string]bool
}

// migFound is what a walk found on one GPU.
type migFound struct {
	// complete says every index was read: only then is a known device
	// that was not found gone.
	complete bool
	present  map[string]bool
	// added are the devices found that were not known.
	added []*device
}

// rescanMIG walks the MIG indices of the MIG-enabled GPUs, at most once per
// migRescanInterval, and brings the reader's devices to what it finds:
// a MIG device that appeared is read from this Read on, one that is gone
// is dropped (its GPM samples freed) once no read of it is in flight. The
// walk is waited for at most Config.CallTimeout, like a device's read.
func (r *Reader) rescanMIG(ctx context.Context) {
	m := &r.migScan
	if m.pending != nil {
		select {
		case <-m.pending.done:
			r.log.Info("the hung MIG device walk returned")
			r.applyMIGWalk(m.pending)
			m.pending = nil
		default:
			return
		}
	}
	now := r.clock.Now()
	if !m.last.IsZero() && now.Sub(m.last) < migRescanInterval {
		return
	}
	// Most nodes have no GPU in MIG mode: nothing to walk, nothing made.
	if !slices.ContainsFunc(r.devices, walkable) {
		return
	}
	w := &migWalk{epoch: m.epoch, done: make(chan struct{})}
	for _, d := range r.devices {
		if !walkable(d) {
			continue
		}
		p := migParent{info: d.info, handle: d.handle, known: map[string]bool{}}
		for _, c := range r.devices {
			if c.mig && c.info.ParentUUID == d.info.UUID {
				p.known[c.info.UUID] = true
			}
		}
		w.parents = append(w.parents, p)
	}
	if len(w.parents) == 0 {
		return
	}
	m.last = now
	r.running.Add(1)
	go func() {
		w.found = r.walkMIG(w.parents)
		close(w.done)
		r.running.Add(-1)
	}()
	t := time.NewTimer(r.cfg.CallTimeout)
	defer t.Stop()
	select {
	case <-w.done:
		r.applyMIGWalk(w)
	case <-t.C:
		m.pending = w
	case <-ctx.Done():
		m.pending = w
	}
	if m.pending != nil {
		r.log.Warn("walking the MIG devices has not returned; MIG devices made or destroyed meanwhile are seen when it does",
			zap.Duration("waited", r.cfg.CallTimeout))
	}
}

// walkable reports whether rescanMIG walks d's MIG devices: a GPU in MIG
// mode that is read.
func walkable(d *device) bool { return d.info.MIGEnabled && !d.mig && !d.lost && !d.hung }

// walkMIG reads the MIG devices of each parent. It makes NVML calls only.
func (r *Reader) walkMIG(parents []migParent) []migFound {
	out := make([]migFound, len(parents))
	for i, p := range parents {
		f := &out[i]
		f.present = map[string]bool{}
		n, ret := p.handle.GetMaxMigDeviceCount()
		if ret != nvml.SUCCESS {
			continue
		}
		f.complete = true
		gpm, gpmKnown := false, false
		for slot := range n {
			h, ret := p.handle.GetMigDeviceHandleByIndex(slot)
			if ret == nvml.ERROR_NOT_FOUND {
				continue
			}
			if ret != nvml.SUCCESS {
				f.complete = false
				continue
			}
			uuid, ret := h.GetUUID()
			if ret != nvml.SUCCESS {
				f.complete = false
				continue
			}
			f.present[uuid] = true
			if p.known[uuid] {
				continue
			}
			if !gpmKnown {
				gpm, gpmKnown = gpmSupported(r.lib, p.handle), true
			}
			f.added = append(f.added, r.migDevice(p.info, p.handle, h, uuid, gpm, n))
		}
	}
	return out
}

// applyMIGWalk adds the MIG devices w found after their GPU's others, and
// drops those it did not find.
func (r *Reader) applyMIGWalk(w *migWalk) {
	if w.epoch != r.migScan.epoch {
		freeWalk(r.lib, w)
		return
	}
	found := make(map[string]*migFound, len(w.parents))
	for i, p := range w.parents {
		found[p.info.UUID] = &w.found[i]
	}
	out := make([]*device, 0, len(r.devices))
	for i := 0; i < len(r.devices); {
		d := r.devices[i]
		out = append(out, d)
		i++
		f := found[d.info.UUID]
		if d.mig || f == nil {
			continue
		}
		seen := map[string]bool{}
		for ; i < len(r.devices) && r.devices[i].mig && r.devices[i].info.ParentUUID == d.info.UUID; i++ {
			c := r.devices[i]
			if f.complete && !f.present[c.info.UUID] && idle(c) {
				r.log.Info("MIG device is gone", zap.Int("gpu", c.info.GPU), zap.String("uuid", c.info.UUID), zap.String("profile", c.info.MIGProfile))
				if c.gpm != nil {
					c.gpm.free(r.lib)
				}
				continue
			}
			seen[c.info.UUID] = true
			out = append(out, c)
		}
		for _, a := range f.added {
			if seen[a.info.UUID] {
				if a.gpm != nil {
					a.gpm.free(r.lib)
				}
				continue
			}
			r.log.Info("MIG device appeared", zap.Int("gpu", a.info.GPU), zap.String("uuid", a.info.UUID), zap.String("profile", a.info.MIGProfile))
			out = append(out, a)
		}
	}
	r.devices = out
}

// idle reports whether no read of d is in flight, collecting one that ended.
func idle(d *device) bool {
	if d.inflight == nil {
		return true
	}
	select {
	case <-d.inflight:
		d.inflight = nil
		return true
	default:
		return false
	}
}

// dropMIGWalks forgets the walks so far, when the devices are enumerated
// anew: a walk still running is dropped when it ends.
func (r *Reader) dropMIGWalks() {
	m := &r.migScan
	m.epoch++
	m.last = time.Time{}
	if m.pending != nil {
		select {
		case <-m.pending.done:
			freeWalk(r.lib, m.pending)
			m.pending = nil
		default:
		}
	}
}

func freeWalk(lib nvml.Interface, w *migWalk) {
	for _, f := range w.found {
		for _, a := range f.added {
			if a.gpm != nil {
				a.gpm.free(lib)
			}
		}
	}
}
