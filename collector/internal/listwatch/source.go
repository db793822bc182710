// Package listwatch is the one pattern by which the agent reads a resource
// of the Kubernetes API: a client-go Reflector lists and watches it (with
// its resource versions, relists after 410 Gone, pagination, bookmarks and
// backoff), every object is converted to the small value the agent needs
// as it is decoded, and a store bounded in count keeps the values. The pod,
// PriorityClass and ResourceSlice sources are each a Config of it.
//
// Around the reflector it adds what a node agent needs from a hostile or
// failing API server: a deadline on every list and on the wait for a
// watch's answer, bounded answers (LimitResponses), a bound on the objects
// kept (MaxObjects; beyond, objects are refused and counted), health
// through an apihealth.Tracker that counts watches cut at once, and
// resources that the API server does not serve (NotServed).
//
// A new resource is a REST client with List and Watch (see collector/dra's
// Client, with LimitResponses on its rest.Config), a type decoded from its
// JSON, and a Config: What, List, Watch, FieldSelector, Convert (object →
// value, or not kept, or refused), MaxObjects, a Health tracker of its
// source; then New, Run in the agent's errgroup, and Get, ByIndex or Range
// to read. collector/pods' PriorityClasses is the smallest example.
package listwatch

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/gpuxray/gpuxray/collector/internal/apihealth"
)

// DefaultCallTimeout bounds one list, and the wait for a watch's answer
// (its headers; the stream then lasts as long as the server keeps it). The
// API server ends a request after 60 s (k8s.io/apiserver's
// RequestTimeout); a node's objects list in well under a second.
const DefaultCallTimeout = 30 * time.Second

// shortWatch is how soon a watch that ends without an event is counted as
// cut by the server: client-go's reflector uses the same second
// (VeryShortWatchError).
const shortWatch = time.Second

// Config is one resource, as a source reads it.
type Config[V any] struct {
	// What names the objects in logs and errors: "pods on node gpu-1".
	What string
	// List and Watch are the REST client's calls. List returns a list
	// whose Items are the objects (a PodList, say).
	List  func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error)
	Watch func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	// FieldSelector narrows every list and watch (spec.nodeName=<node>).
	FieldSelector string
	// StreamFirstList lets the reflector stream its first list through a
	// watch, where client-go's WatchListClient feature is on; an API
	// server without it answers 422, and the reflector lists instead.
	StreamFirstList bool
	// Convert returns what to keep of obj, an item of a list or the object
	// of a watch event: keep false keeps nothing and forgets what was kept
	// under its name; an error refuses it, counted with apihealth.Classify's
	// reason (a *apihealth.TooLargeError is too_large) and forgets it too.
	Convert func(obj runtime.Object) (v V, keep bool, err error)
	// Index returns other keys v is found by (a pod's UIDs); nil for none.
	Index func(v V) []string
	// MaxObjects bounds the values kept: beyond, new objects are refused
	// and counted (too_many). It must be positive.
	MaxObjects int
	// NotServed reports whether a list's error says that the API server
	// serves no such resource (a 404 for every version of its group).
	// Before any list has succeeded, that is an empty answer: the source is
	// synced and up with nothing. After, it is a failure and the values
	// last seen are kept. Nil: every error is a failure.
	NotServed func(error) bool
	// CallTimeout bounds one list and the wait for a watch's answer;
	// 0 is DefaultCallTimeout.
	CallTimeout time.Duration
	Health      *apihealth.Tracker
	Logger      *zap.Logger
}

// Source lists and watches one resource and keeps its values. Its reading
// methods are safe for concurrent use and never block on the API server.
type Source[V any] struct {
	cfg     Config[V]
	store   *store[V]
	log     *zap.Logger
	running atomic.Bool
	// served is set by a list the API server answered.
	served    atomic.Bool
	notServed atomic.Bool
	relist    chan struct{}
}

// New returns the Source of cfg; it lists nothing until Run.
func New[V any](cfg Config[V]) (*Source[V], error) {
	switch {
	case cfg.List == nil || cfg.Watch == nil || cfg.Convert == nil:
		return nil, errors.New("listwatch: List, Watch and Convert are needed")
	case cfg.MaxObjects <= 0:
		return nil, fmt.Errorf("listwatch: MaxObjects %d must be positive", cfg.MaxObjects)
	case cfg.Health == nil:
		return nil, errors.New("listwatch: no health tracker")
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	return &Source[V]{
		cfg:    cfg,
		store:  newStore(cfg.MaxObjects, cfg.Index, cfg.Health, cfg.What),
		log:    cfg.Logger,
		relist: make(chan struct{}, 1),
	}, nil
}

// Run lists and watches until ctx is done, then returns nil once the
// reflector has stopped. API failures do not end it: the reflector retries
// with client-go's backoff (0.8 s doubling to 30 s, jittered up to twice
// that), and they are reported through Health. A Source runs once.
func (s *Source[V]) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return fmt.Errorf("listwatch: %s: already running", s.cfg.What)
	}
	for {
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.runOnce(runCtx)
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
		s.log.Debug("listing again, as asked", zap.String("what", s.cfg.What))
	}
}

// Relist makes Run list again now and watch from there, instead of when
// the reflector's backoff next allows; the values are kept until the list
// replaces them.
func (s *Source[V]) Relist() {
	select {
	case s.relist <- struct{}{}:
	default:
	}
}

// runOnce runs one reflector until ctx is done.
func (s *Source[V]) runOnce(ctx context.Context) {
	lw := &cache.ListWatch{
		ListWithContextFunc:  s.list(),
		WatchFuncWithContext: s.watch,
	}
	var lwi cache.ListerWatcher = lw
	if !s.cfg.StreamFirstList {
		lwi = cache.ToListWatcherWithWatchListSemantics(lw, listThenWatch{})
	}
	backoff := Backoff
	r := cache.NewReflectorWithOptions(lwi, &Object[V]{}, s.store, cache.ReflectorOptions{
		Name: s.cfg.What, TypeDescription: s.cfg.What, Backoff: &backoff,
	})
	// As Reflector.RunWithContext, with the error of each round observed:
	// a bare reflector takes no error handler.
	delay := backoff.DelayWithReset(clock.RealClock{}, backoffReset)
	_ = delay.Until(ctx, true, true, func(ctx context.Context) (bool, error) {
		err := r.ListAndWatchWithContext(ctx)
		if err != nil && !(s.notServed.Load() && s.cfg.NotServed(err)) {
			s.cfg.Health.ObserveStream(ctx, "list and watch", err)
		}
		return false, nil
	})
}

// Backoff is the wait between failed rounds of list and watch, and between
// failed watches: client-go's reflector's (0.8 s doubling to 30 s, with up
// to as much again of jitter), so that a DaemonSet's agents do not all
// call a recovering API server at once. It is reset after backoffReset
// without a failure.
var Backoff = wait.Backoff{Duration: 800 * time.Millisecond, Cap: 30 * time.Second, Steps: 38, Factor: 2, Jitter: 1}

const backoffReset = 2 * time.Minute

// listThenWatch tells the reflector to list, then watch.
type listThenWatch struct{}

func (listThenWatch) IsWatchListSemanticsUnSupported() bool { return true }

// list returns the list function of one reflector: it bounds the call in
// time and the objects of one round (a first page and its continuations)
// in number, and converts every item.
func (s *Source[V]) list() func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	var round int // objects kept in this round's pages so far
	return func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		opts.FieldSelector = s.cfg.FieldSelector
		cctx, cancel := context.WithTimeout(ctx, s.cfg.CallTimeout)
		defer cancel()
		raw, err := s.cfg.List(cctx, opts)
		if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("%s: no list within %s: %w", s.cfg.What, s.cfg.CallTimeout, err)
		}
		if err != nil && s.cfg.NotServed != nil && s.cfg.NotServed(err) {
			if !s.served.Load() {
				s.cfg.Health.ObserveCall(ctx, "list", nil) // an answer, not a failure
				if !s.notServed.Swap(true) {
					s.log.Info("the API server serves none: nothing to read", zap.String("what", s.cfg.What), zap.Error(err))
				}
				s.store.clear()
				return nil, err // the reflector retries with backoff: a later upgrade is found
			}
			err = fmt.Errorf("%s served before, no longer: the values last seen are kept: %w", s.cfg.What, err)
		}
		s.cfg.Health.ObserveCall(ctx, "list", err)
		if err != nil {
			return nil, err
		}
		s.served.Store(true)
		s.notServed.Store(false)
		if opts.Continue == "" {
			round = 0
		}
		out, kept, err := s.convertList(raw, s.cfg.MaxObjects-round)
		round += kept
		return out, err
	}
}

// convertList converts the items of raw, keeping at most room of them; the
// rest are refused, and the list's continuation is dropped so that no
// further page is read.
func (s *Source[V]) convertList(raw runtime.Object, room int) (*List[V], int, error) {
	lm, err := meta.ListAccessor(raw)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", s.cfg.What, err)
	}
	items, err := meta.ExtractList(raw)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", s.cfg.What, err)
	}
	out := &List[V]{ListMeta: metav1.ListMeta{
		ResourceVersion: lm.GetResourceVersion(), Continue: lm.GetContinue(), RemainingItemCount: lm.GetRemainingItemCount(),
	}}
	refused := 0
	for _, item := range items {
		o, ok := s.convert(item)
		if !ok || !o.Keep {
			continue
		}
		if len(out.Items) >= room {
			refused++
			continue
		}
		out.Items = append(out.Items, *o)
	}
	if refused > 0 {
		s.cfg.Health.Refuse(fmt.Errorf("%s: %d listed beyond the %d kept: %w", s.cfg.What, refused, s.cfg.MaxObjects, apihealth.ErrTooMany))
		out.Continue, out.RemainingItemCount = "", nil
	}
	return out, len(out.Items), nil
}

// convert returns the Object of an API object, or false when it is
// refused (counted) or has no metadata.
func (s *Source[V]) convert(obj runtime.Object) (*Object[V], bool) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, false
	}
	o := &Object[V]{ObjectMeta: metav1.ObjectMeta{
		Name: m.GetName(), Namespace: m.GetNamespace(), UID: m.GetUID(), ResourceVersion: m.GetResourceVersion(),
	}}
	v, keep, err := s.cfg.Convert(obj)
	if err != nil {
		s.cfg.Health.Refuse(fmt.Errorf("%s %s: %w", s.cfg.What, keyOf(o), err))
		return o, true // Keep false: forget it
	}
	o.Value, o.Keep = v, keep
	return o, true
}

// HasSynced reports whether the first list has been stored (or the API
// server was found to serve none).
func (s *Source[V]) HasSynced() bool {
	s.store.mu.RLock()
	defer s.store.mu.RUnlock()
	return s.store.synced
}

// WaitForSync waits until the first list has been stored or ctx is done,
// and reports which.
func (s *Source[V]) WaitForSync(ctx context.Context) bool {
	for {
		s.store.mu.RLock()
		synced, changed := s.store.synced, s.store.changed
		s.store.mu.RUnlock()
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

// ResourceVersion returns the latest resource version the values reflect:
// of the latest list, event or bookmark.
func (s *Source[V]) ResourceVersion() string {
	s.store.mu.RLock()
	defer s.store.mu.RUnlock()
	return s.store.rv
}

// WaitForResourceVersion waits until the values reflect resource version
// rv or a later one, or ctx is done.
func (s *Source[V]) WaitForResourceVersion(ctx context.Context, rv string) error {
	for {
		s.store.mu.RLock()
		have, changed := s.store.rv, s.store.changed
		s.store.mu.RUnlock()
		if reached(have, rv) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s at resource version %q, not %q: %w", s.cfg.What, have, rv, ctx.Err())
		case <-changed:
		}
	}
}

// Health reports whether the source is up — synced, the latest call
// succeeded, nothing failed or was refused since the previous call — and
// the failures since then.
func (s *Source[V]) Health() (bool, []error) {
	return s.cfg.Health.Take(s.HasSynced())
}

// Get returns the value kept under key (namespace/name, or name for a
// cluster-scoped resource).
func (s *Source[V]) Get(key string) (V, bool) {
	s.store.mu.RLock()
	defer s.store.mu.RUnlock()
	e, ok := s.store.items[key]
	return e.v, ok
}

// ByIndex returns the value that Config.Index gave the key k.
func (s *Source[V]) ByIndex(k string) (V, bool) {
	s.store.mu.RLock()
	defer s.store.mu.RUnlock()
	e, ok := s.store.items[s.store.byIdx[k]]
	return e.v, ok
}

// Len returns how many values are kept.
func (s *Source[V]) Len() int {
	s.store.mu.RLock()
	defer s.store.mu.RUnlock()
	return len(s.store.items)
}

// Range calls f with every value kept, under a read lock: f must not call
// the Source.
func (s *Source[V]) Range(f func(key string, v V)) {
	s.store.mu.RLock()
	defer s.store.mu.RUnlock()
	for k, e := range s.store.items {
		f(k, e.v)
	}
}

// Apply gives the store obj, an API object, converted, as the reflector
// does for a watch event of type typ (Added, Modified or Deleted): a test
// drives the store without an API server with it.
func (s *Source[V]) Apply(typ watch.EventType, obj runtime.Object) error {
	o, ok := s.convert(obj)
	if !ok {
		return nil
	}
	if typ == watch.Deleted {
		return s.store.Delete(o)
	}
	return s.store.Add(o)
}

// ApplyList gives the store a list of API objects at resource version rv,
// converted, as the reflector does after a list.
func (s *Source[V]) ApplyList(objs []runtime.Object, rv string) error {
	list := make([]any, 0, len(objs))
	for _, obj := range objs {
		if o, ok := s.convert(obj); ok {
			list = append(list, o)
		}
	}
	return s.store.Replace(list, rv)
}
