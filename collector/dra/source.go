// Package dra maps devices allocated through Dynamic Resource Allocation to
// NVML UUIDs, from the node's ResourceSlices.
//
// The kubelet lists a DRA device as (claim, driver, pool, device): a name
// in the driver's ResourceSlices, not a UUID. Source lists and watches the
// slices of one node (field selector spec.nodeName=<node>) through a small
// typed REST client (resource.k8s.io v1, falling back to v1beta2 and
// v1beta1 on older API servers) and keeps, per device of the configured
// drivers, the value of its UUID attribute (NVIDIA's driver publishes
// "uuid" for every GPU and fixed MIG device) or, for a MIG device without
// one (its dynamic MIG partitions), the parent, GPU-instance profile ID
// and placement its name and parentUUID say. Resolver wraps the kubelet
// client: it replaces each DRA allocation's device by its UUID or MIG
// placement, or, when it cannot — the slices are not listed yet, the
// device is not in them, or it has neither — drops it from the
// allocations, counts it in AllocationList.Unresolved and reports it,
// never guessing. Devices of other drivers are ignored and counted;
// VFIO passthrough devices are dropped (NVML does not see them).
//
// When the API server cannot be reached, or RBAC denies the list or watch,
// the source keeps the slices it last knew, reports itself down through
// Health and counts each failure; the reflector relists and rewatches with
// backoff, and relists after a watch's resource version expired (410).
//
// For a replay on a virtual clock, NewClient takes any *rest.Config (a
// loopback API server over plain HTTP), and WaitForResourceVersion waits
// until the store reflects a given resource version.
//
// The agent's service account needs get, list and watch on resourceslices
// (group resource.k8s.io) cluster wide.
package dra

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuxray/gpuxray/collector"
	"github.com/gpuxray/gpuxray/collector/internal/apihealth"
)

// Reasons of gpuxray_source_errors_total{source="dra"}.
const (
	ReasonForbidden    = apihealth.ReasonForbidden    // RBAC denies list or watch on resourceslices
	ReasonUnauthorized = apihealth.ReasonUnauthorized // the credentials are refused
	ReasonUnavailable  = apihealth.ReasonUnavailable  // the API server cannot be reached or is overloaded
	ReasonOther        = apihealth.ReasonOther
	// ReasonUnresolvedDevice: the kubelet lists a device of a GPU driver
	// that the node's slices do not map to a UUID (counted per answer of
	// the kubelet, as long as it lasts).
	ReasonUnresolvedDevice = "unresolved_device"
	// ReasonOtherDriver: the kubelet lists a device of a driver that is not
	// a GPU driver (counted once per device while the kubelet lists it).
	ReasonOtherDriver = "other_driver"
)

// Errors of Source.Resolve, wrapped.
var (
	// ErrNotSynced: the node's slices have not been listed yet.
	ErrNotSynced = errors.New("the node's ResourceSlices are not listed yet")
	// ErrUnknownDevice: the device is in no slice of the node.
	ErrUnknownDevice = errors.New("no ResourceSlice of the node lists the device")
	// ErrNoUUID: the device is listed, without a usable UUID attribute.
	ErrNoUUID = errors.New("the device has no UUID attribute")
	// ErrPassthrough: the device is a GPU passed through to a VM (VFIO),
	// which NVML on the host does not see; its uuid is the driver's own.
	ErrPassthrough = errors.New("the device is a GPU passed through to a VM")
)

// Source is the ResourceSlice source of one node. Its methods are safe for
// concurrent use; Resolve and Health never block on the API server.
type Source struct {
	cfg    Config
	client SliceClient
	log    *zap.Logger

	running atomic.Bool
	health  *apihealth.Tracker
	// notServed is set while the API server serves no ResourceSlices.
	notServed atomic.Bool
	// lastSync is set by Run: the controller, for its reflector's resource
	// version.
	lastSync atomic.Pointer[cache.Controller]
	// relist asks Run to start its list and watch again (Relist).
	relist chan struct{}

	mu     sync.Mutex
	synced bool
	// syncedCh is closed when synced is first set.
	syncedCh chan struct{}
	slices   map[string]*slice // by slice name
	rv       string            // the latest resource version the store reflects
	// changed is closed, and replaced, whenever rv or the slices change.
	changed chan struct{}
}

// slice is what the store keeps of one ResourceSlice of a GPU driver.
type slice struct {
	driver, pool string
	generation   int64
	devices      map[string]device
}

// device is one device of a slice: its UUID, or why it has none.
type device struct {
	ref     collector.DeviceRef // Kind collector.RefUUID, or zero
	problem string              // set when ref is zero
	// typ, parent and profile are NVIDIA's "type", "parentUUID" and
	// "profile" attributes, for the log of a device that has no UUID.
	typ, parent, profile string
}

// New returns a Source for cfg that reads slices through client (see
// NewClient). It watches nothing until Run.
func New(cfg Config, client SliceClient, logger *zap.Logger) (*Source, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if client == nil {
		return nil, errors.New("dra: no Kubernetes client")
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	return &Source{
		cfg:    cfg,
		client: client,
		log:    logger,
		health: apihealth.New(collector.SourceDRA, "ResourceSlice API",
			"DRA devices are resolved from the slices last seen; devices not in them are unresolved until it recovers", logger),
		slices:   map[string]*slice{},
		changed:  make(chan struct{}),
		syncedCh: make(chan struct{}),
		relist:   make(chan struct{}, 1),
	}, nil
}

// Run lists and watches the node's ResourceSlices until ctx is done, then
// returns nil. API failures do not end it: they are retried with backoff
// and reported through Health. A Source runs once.
func (s *Source) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("dra: the source is already running")
	}
	selector := fields.OneTermEqualSelector("spec.nodeName", s.cfg.NodeName).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector
			list, err := s.client.List(ctx, opts)
			if errors.Is(err, ErrNotServed) {
				s.health.ObserveCall(ctx, "list", nil) // an answer, not a failure
				s.noAPI(err)
				return nil, err // the reflector retries with backoff: a later upgrade is found
			}
			s.notServed.Store(false)
			s.health.ObserveCall(ctx, "list", err)
			if err != nil {
				return nil, err
			}
			return list, nil
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			w, err := s.client.Watch(ctx, opts)
			s.health.ObserveCall(ctx, "watch", err)
			if err != nil {
				return nil, err
			}
			return s.health.ObserveWatch(ctx, w), nil
		},
	}
	s.log.Info("watching ResourceSlices", zap.String("node", s.cfg.NodeName), zap.Strings("drivers", s.cfg.Drivers))
	for {
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.runOnce(runCtx, lw)
		}()
		select {
		case <-ctx.Done():
		case <-s.relist:
		}
		stop()
		<-done
		if ctx.Err() != nil {
			return nil
		}
		s.log.Debug("listing ResourceSlices again, as asked")
	}
}

// Relist makes Run list the slices again now and watch from there, instead
// of when client-go's reflector backoff next allows. A replay calls it when
// its simulated API server is back from an outage, so that the outage's
// real duration does not decide when the agent sees the slices again; the
// store keeps what it has until the list replaces it.
func (s *Source) Relist() {
	select {
	case s.relist <- struct{}{}:
	default:
	}
}

// runOnce runs one controller (a reflector over lw) until ctx is done.
func (s *Source) runOnce(ctx context.Context, lw *cache.ListWatch) {
	q := &queue{store: (*store)(s), closed: make(chan struct{})}
	ctl := cache.New(&cache.Config{
		Queue:         q,
		ListerWatcher: cache.ToListWatcherWithWatchListSemantics(lw, s.client),
		ObjectType:    &ResourceSlice{},
		// The store applies every change as the reflector delivers it;
		// nothing is queued, so nothing is processed.
		Process:           func(any, bool) error { return nil },
		ObjectDescription: "ResourceSlices on node " + s.cfg.NodeName,
		WatchErrorHandlerWithContext: func(ctx context.Context, _ *cache.Reflector, err error) {
			if !errors.Is(err, ErrNotServed) {
				s.health.ObserveStream(ctx, "list and watch", err)
			}
		},
	})
	s.lastSync.Store(&ctl)
	ctl.RunWithContext(ctx)
}

// noAPI records that the API server serves no ResourceSlices: nothing can
// be allocated through DRA there, so an empty store is the truth, and the
// source is up.
func (s *Source) noAPI(err error) {
	if !s.notServed.Swap(true) {
		s.log.Info("no DRA on this cluster: DRA devices cannot be resolved", zap.Error(err))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.slices)
	s.setSyncedLocked()
	s.notifyLocked()
}

// HasSynced reports whether the first list of the node's slices has been
// stored (or the API server was found to serve none).
func (s *Source) HasSynced() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.synced
}

// WaitForSync waits until the first list has been stored or ctx is done,
// and reports which.
func (s *Source) WaitForSync(ctx context.Context) bool {
	for {
		s.mu.Lock()
		synced, changed := s.synced, s.changed
		s.mu.Unlock()
		if synced {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-changed:
		}
	}
}

// ResourceVersion returns the latest resource version the store reflects:
// of its latest list, watch event or bookmark.
func (s *Source) ResourceVersion() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rv
}

// WaitForResourceVersion waits until the store reflects resource version rv
// or a later one, or ctx is done. Resource versions are opaque: two that
// both parse as integers are compared as such (as the API server's are),
// others must be equal.
func (s *Source) WaitForResourceVersion(ctx context.Context, rv string) error {
	for {
		s.mu.Lock()
		have, changed := s.rv, s.changed
		s.mu.Unlock()
		if reached(have, rv) {
			return nil
		}
		if c := s.lastSync.Load(); c != nil && reached((*c).LastSyncResourceVersion(), rv) {
			// A bookmark moved the reflector on without changing the store,
			// which has applied every event before it.
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("ResourceSlices at resource version %q, not %q: %w", have, rv, ctx.Err())
		case <-changed:
		}
	}
}

func reached(have, want string) bool {
	if have == "" {
		return false
	}
	h, err1 := strconv.ParseUint(have, 10, 64)
	w, err2 := strconv.ParseUint(want, 10, 64)
	if err1 == nil && err2 == nil {
		return h >= w
	}
	return have == want
}

// Health reports whether the source is up — the first list has completed
// (or the server serves no slices), the latest call to the API server
// succeeded and none failed since the previous Health call — and returns
// the failures since that call, each a *collector.SourceError of source
// "dra" with reason "forbidden", "unauthorized", "unavailable" or "other".
func (s *Source) Health() (up bool, errs []error) {
	return s.health.Take(s.HasSynced())
}

// Resolve returns the UUID of driver's device in pool, parsed, from the
// node's slices: of the pool's slices, only those of its newest generation count
// (older ones are being replaced). The error wraps ErrNotSynced,
// ErrUnknownDevice or ErrNoUUID.
func (s *Source) Resolve(driver, pool, name string) (collector.DeviceRef, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	gen, found := int64(-1), false
	var dev device
	for _, sl := range s.slices {
		if sl.driver != driver || sl.pool != pool || sl.generation < gen {
			continue
		}
		d, ok := sl.devices[name]
		if sl.generation > gen {
			gen, found, dev = sl.generation, ok, d
		} else if ok {
			found, dev = true, d
		}
	}
	switch {
	case !found && !s.synced:
		return collector.DeviceRef{}, ErrNotSynced
	case !found:
		return collector.DeviceRef{}, fmt.Errorf("%w (driver %s, pool %s, device %s)", ErrUnknownDevice, driver, pool, name)
	case dev.typ == DeviceTypeVFIO:
		return collector.DeviceRef{}, fmt.Errorf("%w (driver %s, pool %s, device %s)", ErrPassthrough, driver, pool, name)
	case dev.ref.Kind == 0:
		return collector.DeviceRef{}, fmt.Errorf("%w (driver %s, pool %s, device %s, type %q, parent %q, profile %q): %s",
			ErrNoUUID, driver, pool, name, dev.typ, dev.parent, dev.profile, dev.problem)
	}
	return dev.ref, nil
}

// convert keeps what resolution needs of a slice of a GPU driver on this
// node, or returns nil for any other slice.
func (s *Source) convert(obj any) (string, *slice) {
	rs, ok := sliceOf(obj)
	if !ok {
		return "", nil
	}
	// The field selector already keeps other nodes' slices away; this
	// guards the store against a server that ignores it.
	if !s.cfg.isDriver(rs.Spec.Driver) || rs.Spec.NodeName != s.cfg.NodeName {
		return rs.Name, nil
	}
	sl := &slice{driver: rs.Spec.Driver, pool: rs.Spec.Pool.Name, generation: rs.Spec.Pool.Generation,
		devices: make(map[string]device, len(rs.Spec.Devices))}
	keys := s.cfg.uuidKeys(rs.Spec.Driver)
	for i := range rs.Spec.Devices {
		d := &rs.Spec.Devices[i]
		attrs := d.attributes()
		str := func(name string) string {
			for _, k := range []string{name, rs.Spec.Driver + "/" + name} {
				if a, ok := attrs[k]; ok && a.String != nil {
					return *a.String
				}
			}
			return ""
		}
		dev := device{typ: str("type"), parent: str("parentUUID"), profile: str("profile")}
		dev.ref, dev.problem = refOf(d.Name, dev.typ, dev.parent, dev.profile, attrs, keys)
		sl.devices[d.Name] = dev
	}
	return rs.Name, sl
}

// uuidOf returns the device's UUID attribute, or why it has none.
func uuidOf(attrs map[string]DeviceAttribute, keys []string) (collector.DeviceRef, string) {
	for _, k := range keys {
		a, ok := attrs[k]
		if !ok {
			continue
		}
		if a.String == nil {
			return collector.DeviceRef{}, fmt.Sprintf("attribute %s is not a string", k)
		}
		ref, err := collector.ParseDeviceID(*a.String)
		if err != nil || ref.Kind != collector.RefUUID || ref.Replicated {
			return collector.DeviceRef{}, fmt.Sprintf("attribute %s of %d bytes is not a GPU-… or MIG-… UUID", k, len(*a.String))
		}
		return ref, ""
	}
	return collector.DeviceRef{}, fmt.Sprintf("none of the attributes %q (a MIG device the driver has not created yet has none)", keys)
}

// sliceOf returns the slice an event carries: the slice, or the last known
// state of a slice deleted while the watch was down.
func sliceOf(obj any) (*ResourceSlice, bool) {
	switch o := obj.(type) {
	case *ResourceSlice:
		return o, o != nil
	case cache.DeletedFinalStateUnknown:
		return sliceOf(o.Obj)
	}
	return nil, false
}

// setSyncedLocked records the first list; s.mu is held.
func (s *Source) setSyncedLocked() {
	if !s.synced {
		s.synced = true
		close(s.syncedCh)
	}
}

// notifyLocked wakes every waiter; s.mu is held.
func (s *Source) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// store is the reflector's store: it applies each list and event to the
// Source under its lock, as the reflector delivers them, so that a resource
// version the reflector reports is one the slices reflect.
type store Source

func (st *store) src() *Source { return (*Source)(st) }

func (st *store) Add(obj any) error    { return st.put(obj) }
func (st *store) Update(obj any) error { return st.put(obj) }

func (st *store) put(obj any) error {
	s := st.src()
	name, sl := s.convert(obj)
	s.mu.Lock()
	defer s.mu.Unlock()
	if sl == nil {
		delete(s.slices, name)
	} else {
		s.slices[name] = sl
	}
	s.setRVLocked(obj)
	s.notifyLocked()
	return nil
}

func (st *store) Delete(obj any) error {
	s := st.src()
	rs, ok := sliceOf(obj)
	if !ok {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.slices, rs.Name)
	s.setRVLocked(obj)
	s.notifyLocked()
	return nil
}

func (st *store) Replace(list []any, rv string) error {
	s := st.src()
	next := make(map[string]*slice, len(list))
	for _, obj := range list {
		if name, sl := s.convert(obj); sl != nil {
			next[name] = sl
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.slices, s.rv = next, rv
	s.setSyncedLocked()
	s.notifyLocked()
	return nil
}

func (st *store) Resync() error { return nil }

// UpdateResourceVersion is called by the reflector with each resource
// version it moves to, bookmarks included.
func (st *store) UpdateResourceVersion(rv string) {
	s := st.src()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rv = rv
	s.notifyLocked()
}

// setRVLocked moves the store's resource version to an event's object's;
// s.mu is held.
func (s *Source) setRVLocked(obj any) {
	if rs, ok := sliceOf(obj); ok && rs.ResourceVersion != "" {
		s.rv = rs.ResourceVersion
	}
}

// queue is the controller's queue: the store, applying each change at
// once, and a Pop that only waits for the end.
type queue struct {
	*store
	closed chan struct{}
	once   sync.Once
}

func (q *queue) Pop(cache.PopProcessFunc) (any, error) {
	<-q.closed
	return nil, cache.ErrFIFOClosed
}

func (q *queue) HasSynced() bool { return q.src().HasSynced() }

func (q *queue) HasSyncedChecker() cache.DoneChecker { return syncedChecker{q.src()} }

func (q *queue) Close() { q.once.Do(func() { close(q.closed) }) }

// syncedChecker is done once the first list is stored.
type syncedChecker struct{ s *Source }

func (c syncedChecker) Name() string { return "ResourceSlices on node " + c.s.cfg.NodeName }

func (c syncedChecker) Done() <-chan struct{} { return c.s.syncedCh }
