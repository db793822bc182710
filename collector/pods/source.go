// Package pods watches the pods of one node through the Kubernetes API and
// answers, from memory, what pod-resources does not say: a pod's UID, phase,
// workload, model, extra labels and container IDs.
//
// It runs one client-go informer with the field selector
// spec.nodeName=<node>, so the API server sends only this node's pods and
// memory is bounded by them. Pods are read as JSON into this package's Pod,
// which holds of a pod's spec only the node name, priority class and
// priority, and of its status only the phase and container IDs (see
// NewClient: the agent links no k8s.io/api package); a transform trims the
// metadata to what is read (no managed fields) before the informer caches
// it, and the event handler computes the collector.Pod the agent exports —
// workload, model, extra labels — when a pod is added or changes, never
// per scrape.
//
// When the API server cannot be reached, or RBAC denies the list or watch,
// the source keeps what it last knew, reports itself down through Health,
// and counts each failure; the reflector retries with backoff and the
// source is up again after its next successful call. Before the first list
// completes it knows no pod at all.
//
// The agent's service account needs get, list and watch on pods cluster
// wide: a field selector narrows what is sent, not what RBAC checks.
package pods

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuxray/gpuxray/collector"
	"github.com/gpuxray/gpuxray/collector/internal/apihealth"
)

// Source is the pod source of one node. Its methods are safe for concurrent
// use; Pod, PodByUID and Health never block on the API server.
type Source struct {
	cfg    Config
	client PodClient
	log    *zap.Logger

	running atomic.Bool

	mu    sync.RWMutex
	byKey map[string]collector.Pod // "namespace/name"
	byUID map[string]string        // UID → "namespace/name"

	// synced reports whether the event handler has received the first
	// list; set by Run.
	synced atomic.Pointer[func() bool]

	health *apihealth.Tracker
}

// New returns a Source for cfg that reads pods through client (see
// NewClient). It watches nothing until Run.
func New(cfg Config, client PodClient, logger *zap.Logger) (*Source, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if client == nil {
		return nil, errors.New("pods: no Kubernetes client")
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	return &Source{
		cfg:    cfg,
		client: client,
		log:    logger,
		byKey:  map[string]collector.Pod{},
		byUID:  map[string]string{},
		health: apihealth.New(collector.SourcePods, "pods API", "pods are known as last seen until it recovers", logger),
	}, nil
}

// Run lists and watches the node's pods until ctx is done, then returns nil
// once the informer's goroutines have ended. API failures do not end it:
// they are retried with backoff and reported through Health. A Source runs
// once.
func (s *Source) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("pods: the source is already running")
	}
	selector := fields.OneTermEqualSelector("spec.nodeName", s.cfg.NodeName).String()
	pods := s.client
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector
			list, err := pods.List(ctx, opts)
			s.health.ObserveCall(ctx, "list", err)
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector
			w, err := pods.Watch(ctx, opts)
			if err != nil && opts.SendInitialEvents != nil && *opts.SendInitialEvents && apierrors.IsInvalid(err) {
				// An API server without the WatchList feature rejects a
				// streaming first list as invalid, and the reflector falls
				// back to a list: expected, not a failure.
				s.log.Debug("streaming list not supported: listing", zap.Error(err))
				return nil, err
			}
			s.health.ObserveCall(ctx, "watch", err)
			if err != nil {
				return nil, err
			}
			return s.health.ObserveWatch(ctx, w), nil
		},
	}
	inf := cache.NewSharedIndexInformerWithOptions(
		cache.ToListWatcherWithWatchListSemantics(lw, s.client),
		&Pod{},
		cache.SharedIndexInformerOptions{ObjectDescription: "pods on node " + s.cfg.NodeName},
	)
	if err := inf.SetTransform(trim); err != nil {
		return fmt.Errorf("pods: %w", err)
	}
	if err := inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, _ *cache.Reflector, err error) {
		s.health.ObserveStream(ctx, "list and watch", err)
	}); err != nil {
		return fmt.Errorf("pods: %w", err)
	}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.put(obj) },
		UpdateFunc: func(_, obj any) { s.put(obj) },
		DeleteFunc: func(obj any) { s.remove(obj) },
	})
	if err != nil {
		return fmt.Errorf("pods: %w", err)
	}
	hasSynced := reg.HasSynced
	s.synced.Store(&hasSynced)
	s.log.Info("watching pods", zap.String("node", s.cfg.NodeName))
	inf.RunWithContext(ctx)
	return nil
}

// HasSynced reports whether the first list of the node's pods has been
// stored.
func (s *Source) HasSynced() bool {
	f := s.synced.Load()
	return f != nil && (*f)()
}

// WaitForSync waits until the first list has been stored or ctx is done,
// and reports which.
func (s *Source) WaitForSync(ctx context.Context) bool {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for !s.HasSynced() {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}

// Pod returns what is known of pod namespace/name, and false when the pod
// is not (yet, or any more) known: not on this node, not listed yet, or the
// API server has not been reached. The maps in the result are shared and
// must not be modified.
func (s *Source) Pod(namespace, name string) (collector.Pod, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p, ok := s.byKey[namespace+"/"+name]
	return p, ok
}

// PodByUID returns the pod whose UID is uid, as Pod does. The UID of a
// static pod, which its processes' cgroups carry, finds the pod's mirror.
func (s *Source) PodByUID(uid string) (collector.Pod, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	key, ok := s.byUID[uid]
	if !ok {
		return collector.Pod{}, false
	}
	p, ok := s.byKey[key]
	return p, ok
}

// Len returns how many pods of the node are known.
func (s *Source) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.byKey)
}

// Health reports whether the source is up — the first list has completed,
// the latest call to the API server succeeded and none failed since the
// previous Health call — and returns the failures since that call, each a
// *collector.SourceError of source "pods" with reason "forbidden",
// "unauthorized", "unavailable" or "other".
func (s *Source) Health() (up bool, errs []error) {
	return s.health.Take(s.HasSynced())
}

// put stores the pod obj, or forgets it when it is not on this node (the
// field selector already keeps other nodes' pods away; this guards the
// store against a server or a fake that ignores it).
func (s *Source) put(obj any) {
	p, ok := podOf(obj)
	if !ok {
		return
	}
	if p.Spec.NodeName != s.cfg.NodeName {
		s.remove(p)
		return
	}
	cp := s.convert(p)
	key := cp.Namespace + "/" + cp.Name
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.byKey[key]; ok {
		s.forgetUIDs(key, old)
	}
	s.byKey[key] = cp
	// A static pod's processes run in cgroups named by the static pod's
	// UID, not its mirror's: both find the pod.
	for _, uid := range [...]string{cp.UID, cp.StaticUID} {
		if uid != "" {
			s.byUID[uid] = key
		}
	}
}

// forgetUIDs forgets the UIDs of p, stored under key, that still point
// to key. Called with s.mu held.
func (s *Source) forgetUIDs(key string, p collector.Pod) {
	for _, uid := range [...]string{p.UID, p.StaticUID} {
		if uid != "" && s.byUID[uid] == key {
			delete(s.byUID, uid)
		}
	}
}

// remove forgets the pod obj, if the pod stored under its name is the same
// pod (a StatefulSet's pod comes back under the same name with a new UID).
func (s *Source) remove(obj any) {
	p, ok := podOf(obj)
	if !ok {
		return
	}
	key := p.Namespace + "/" + p.Name
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.byKey[key]
	if !ok || (p.UID != "" && old.UID != string(p.UID)) {
		return
	}
	delete(s.byKey, key)
	s.forgetUIDs(key, old)
}

// podOf returns the pod an informer event carries: the pod, or the last
// known state of a pod deleted while the watch was down.
func podOf(obj any) (*Pod, bool) {
	switch o := obj.(type) {
	case *Pod:
		return o, o != nil
	case cache.DeletedFinalStateUnknown:
		return podOf(o.Obj)
	}
	return nil, false
}
