package nvml

import (
	"context"
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/collector"
)

// migRescanInterval bounds how often Read walks the node's GPUs: their
// handles, UUIDs and MIG modes, and the MIG device indices of the
// MIG-enabled ones for MIG devices made or destroyed since the last walk
// (a DRA driver makes one for each claim that asks for one, and turns MIG
// mode on and off as they come and go): at most once per interval of the
// reader's clock, however often Read runs. A walk costs DeviceGetCount,
// then DeviceGetHandleByIndex, GetUUID and GetMigMode per GPU, and
// GetMaxMigDeviceCount, then GetMigDeviceHandleByIndex and GetUUID per
// index, per MIG-enabled GPU (see BenchmarkMIGRescan).
const migRescanInterval = time.Second

// After the driver went away under an initialised NVML (unloaded,
// reloaded, or another version), Init is retried from reloadRetryMin,
// doubling to reloadRetryMax: the node is expected back within minutes,
// and a GPU unread is time lost.
const (
	reloadRetryMin = time.Second
	reloadRetryMax = 2 * time.Second
)

// migRescan is what the reader keeps of its walks.
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

// migWalk is one walk of the node's GPUs and of the MIG indices of some
// MIG-enabled GPUs, run on a goroutine of its own, which alone touches
// count, gpus and found until done closes.
type migWalk struct {
	epoch   int
	parents []migParent
	// count and countRet are DeviceGetCount's answer; gpus what each
	// index holds now.
	count    int
	countRet nvml.Return
	gpus     []gpuSeen
	found    []migFound
	done     chan struct{}
}

// gpuSeen is what a walk found at one GPU index.
type gpuSeen struct {
	ret        nvml.Return
	handle     nvml.Device
	uuid       string
	migEnabled bool
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

// rescanMIG walks the node's GPUs, at most once per migRescanInterval,
// and brings the reader's devices to what it finds: when a GPU's handle,
// UUID or MIG mode changed, or GPUs came or went, every device is
// enumerated anew; otherwise a MIG device that appeared is read from this
// Read on, one that is gone is dropped (its GPM samples freed) once no
// read of it is in flight. The walk is waited for at most
// Config.CallTimeout, like a device's read.
func (r *Reader) rescanMIG(ctx context.Context) {
	m := &r.migScan
	if m.pending != nil {
		select {
		case <-m.pending.done:
			r.log.Info("the hung GPU walk returned")
			w := m.pending
			m.pending = nil
			r.applyMIGWalk(w)
		default:
			return
		}
	}
	now := r.clock.Now()
	if !m.last.IsZero() && now.Sub(m.last) < migRescanInterval {
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
	m.last = now
	r.running.Add(1)
	go func() {
		r.walkGPUs(w)
		w.found = r.walkMIG(w.parents)
		close(w.done)
		r.running.Add(-1)
	}()
	g := r.giveUp()
	defer g.stop()
	if g.wait(ctx, w.done) {
		r.applyMIGWalk(w)
	} else {
		m.pending = w
		r.log.Warn("walking the GPUs has not returned; GPUs and MIG devices changed meanwhile are seen when it does",
			zap.Stringer("waited", g))
	}
}

// walkable reports whether rescanMIG walks d's MIG devices: a GPU in MIG
// mode that is read.
func walkable(d *device) bool { return d.info.MIGEnabled && !d.mig && !d.lost && !d.hung }

// walkGPUs reads what each GPU index holds now. It makes NVML calls only.
func (r *Reader) walkGPUs(w *migWalk) {
	w.count, w.countRet = r.lib.DeviceGetCount()
	if w.countRet != nvml.SUCCESS {
		return
	}
	w.gpus = make([]gpuSeen, w.count)
	for i := range w.gpus {
		g := &w.gpus[i]
		if g.handle, g.ret = r.lib.DeviceGetHandleByIndex(i); g.ret != nvml.SUCCESS {
			continue
		}
		if g.uuid, g.ret = g.handle.GetUUID(); g.ret != nvml.SUCCESS {
			continue
		}
		mode, _, ret := g.handle.GetMigMode()
		g.migEnabled = ret == nvml.SUCCESS && mode == nvml.DEVICE_MIG_ENABLE
	}
}

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

// topologyChange says why what w found differs from the devices the
// reader enumerated, or "" when it does not. A GPU whose index could not
// be read is left as it was: a lost GPU answers so until it is reset.
func (r *Reader) topologyChange(w *migWalk) string {
	if w.countRet != nvml.SUCCESS {
		return ""
	}
	if r.stale != "" {
		return r.stale
	}
	if w.count != r.count {
		return fmt.Sprintf("the driver counts %d GPUs, %d before", w.count, r.count)
	}
	for i, g := range w.gpus {
		if g.ret != nvml.SUCCESS {
			continue
		}
		d := r.wholeGPU(i)
		switch {
		case d == nil:
			return fmt.Sprintf("GPU index %d (%s) can be read now", i, g.uuid)
		case d.info.UUID != g.uuid:
			return fmt.Sprintf("GPU index %d is %s, %s before", i, g.uuid, d.info.UUID)
		case d.info.MIGEnabled != g.migEnabled:
			return fmt.Sprintf("GPU %d %s: MIG mode %s", d.info.GPU, g.uuid, map[bool]string{true: "enabled", false: "disabled"}[g.migEnabled])
		case !sameHandle(d.handle, g.handle):
			return fmt.Sprintf("GPU %d %s: its handle changed", d.info.GPU, g.uuid)
		}
	}
	return ""
}

// wholeGPU is the enumerated whole GPU of NVML index i, or nil.
func (r *Reader) wholeGPU(i int) *device {
	for _, d := range r.devices {
		if !d.mig && d.index == i {
			return d
		}
	}
	return nil
}

// sameHandle compares two handles; a handle type that cannot be compared
// counts as changed, so that the GPU is enumerated anew rather than read
// through a handle the driver may have replaced.
func sameHandle(a, b nvml.Device) (same bool) {
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}

// applyMIGWalk enumerates the devices anew when w found another topology
// of GPUs; else it adds the MIG devices w found after their GPU's others,
// and drops those it did not find.
func (r *Reader) applyMIGWalk(w *migWalk) {
	if w.epoch != r.migScan.epoch {
		freeWalk(r.lib, w)
		return
	}
	if driverGone(w.countRet) {
		freeWalk(r.lib, w)
		r.driverWentAway(fmt.Sprintf("DeviceGetCount: %v", retError(w.countRet)))
		return
	}
	if why := r.topologyChange(w); why != "" {
		freeWalk(r.lib, w)
		r.reenumerate(why)
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
			if f.complete && !f.present[c.info.UUID] {
				r.log.Info("MIG device is gone", zap.Int("gpu", c.info.GPU), zap.String("uuid", c.info.UUID), zap.String("profile", c.info.MIGProfile))
				r.retire(c)
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

// reenumerate enumerates the devices anew, keeping each one's newest
// sample stamps by UUID, so that samples already read are not read again.
func (r *Reader) reenumerate(why string) {
	r.log.Info("the node's GPUs changed; enumerating them anew", zap.String("change", why))
	if err := r.enumerate(); err != nil {
		r.log.Warn("enumerating the GPUs anew failed; retrying", zap.Error(err))
		r.driverWentAway(err.Error())
	}
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

// retire drops d's GPM samples: at once when no read of d is in flight,
// else when that read has ended (reapRetired). A read blocked in an NVML
// call may yet hand those buffers to GpmSampleGet: freeing them under it
// would let the driver write into freed memory.
func (r *Reader) retire(d *device) {
	if d.gpm == nil {
		return
	}
	if idle(d) {
		d.gpm.free(r.lib)
		d.gpm = nil
		return
	}
	r.retired = append(r.retired, d)
}

// reapRetired frees the GPM samples of retired devices whose read ended,
// and reports whether none is left.
func (r *Reader) reapRetired() bool {
	left := r.retired[:0]
	for _, d := range r.retired {
		if idle(d) {
			d.gpm.free(r.lib)
			d.gpm = nil
			continue
		}
		left = append(left, d)
	}
	clear(r.retired[len(left):])
	r.retired = left
	return len(left) == 0
}

// quiet reports whether no NVML call of the reader is in flight: no
// device read, no walk, no retired device's read.
func (r *Reader) quiet() bool {
	for _, d := range r.devices {
		if !idle(d) {
			return false
		}
	}
	if p := r.migScan.pending; p != nil {
		select {
		case <-p.done:
		default:
			return false
		}
	}
	return r.reapRetired()
}

// driverGone reports whether ret says the driver NVML was initialised
// with is no longer there: unloaded, or replaced by another version.
func driverGone(ret nvml.Return) bool {
	return ret == nvml.ERROR_UNINITIALIZED || ret == nvml.ERROR_DRIVER_NOT_LOADED || ret == nvml.ERROR_LIB_RM_VERSION_MISMATCH
}

// driverWentAway marks NVML for a new Init: the next Read shuts it down,
// once no call is in flight, and initialises it again at once.
func (r *Reader) driverWentAway(why string) {
	if !r.reinit {
		r.log.Warn("the NVML driver went away (unloaded, reloaded or replaced?); NVML is shut down and initialised anew", zap.String("why", why))
	}
	r.reinit = true
}

// reinitLocked shuts NVML down for driverWentAway, when no call is in
// flight, and sets Init to be retried at once, then from reloadRetryMin.
func (r *Reader) reinitLocked() {
	if !r.reinit || !r.initialized || !r.quiet() {
		return
	}
	r.shutdownLocked()
	r.reinit = false
	r.nextInit, r.initBackoff = time.Time{}, reloadRetryMin
	r.retryMax = reloadRetryMax
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
