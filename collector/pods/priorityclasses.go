package pods

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuxray/gpuxray/collector"
	"github.com/gpuxray/gpuxray/collector/internal/apihealth"
)

// PriorityClassClient lists and watches the cluster's PriorityClasses
// (scheduling.k8s.io/v1). NewPriorityClassClient returns one; a test may
// give its own.
type PriorityClassClient interface {
	List(ctx context.Context, opts metav1.ListOptions) (*PriorityClassList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// schedulingV1 is the API group and version of PriorityClasses.
var schedulingV1 = schema.GroupVersion{Group: "scheduling.k8s.io", Version: "v1"}

// NewPriorityClassClient returns the PriorityClassClient for c, a REST
// client for scheduling.k8s.io/v1's PriorityClasses alone, read as JSON
// into this package's PriorityClass (see NewClient).
func NewPriorityClassClient(c Config) (PriorityClassClient, error) {
	client, params, err := newRESTClient(c, schedulingV1, "/apis", &PriorityClass{}, &PriorityClassList{})
	if err != nil {
		return nil, err
	}
	return &restPriorityClasses{client: client, params: params}, nil
}

type restPriorityClasses struct {
	client *rest.RESTClient
	params runtime.ParameterCodec
}

func (p *restPriorityClasses) List(ctx context.Context, opts metav1.ListOptions) (*PriorityClassList, error) {
	list := &PriorityClassList{}
	err := p.client.Get().Resource("priorityclasses").VersionedParams(&opts, p.params).Timeout(timeoutOf(opts)).Do(ctx).Into(list)
	return list, err
}

func (p *restPriorityClasses) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return p.client.Get().Resource("priorityclasses").VersionedParams(&opts, p.params).Timeout(timeoutOf(opts)).Watch(ctx)
}

// PriorityClasses watches the cluster's PriorityClasses and answers, from
// memory, each one's value. kube-state-metrics names a pending pod's class
// but not its priority, and a class's value cannot change once it is made,
// so this table turns the class of a waiting pod into the number the
// scheduler compares: the agent exports it as
// gpuxray_priority_class_value. A cluster has a handful of classes; the
// watch is one long request per agent.
//
// Failures are those of the pod source: counted under source "pods", with
// the reasons of the pods API, and the table is kept as last seen. The
// agent's service account needs get, list and watch on priorityclasses.
type PriorityClasses struct {
	client  PriorityClassClient
	log     *zap.Logger
	running atomic.Bool

	mu     sync.RWMutex
	values map[string]int32

	synced atomic.Pointer[func() bool]
	health *apihealth.Tracker
}

// NewPriorityClasses returns the watch of client's PriorityClasses; it
// watches nothing until Run.
func NewPriorityClasses(client PriorityClassClient, logger *zap.Logger) (*PriorityClasses, error) {
	if client == nil {
		return nil, errors.New("pods: no Kubernetes client for PriorityClasses")
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	return &PriorityClasses{
		client: client, log: logger, values: map[string]int32{},
		health: apihealth.New(collector.SourcePods, "priorityclasses API", "priority classes are known as last seen until it recovers", logger),
	}, nil
}

// Run lists and watches PriorityClasses until ctx is done, retrying API
// failures with backoff. It runs once.
func (p *PriorityClasses) Run(ctx context.Context) error {
	if !p.running.CompareAndSwap(false, true) {
		return errors.New("pods: the PriorityClass watch is already running")
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			list, err := p.client.List(ctx, opts)
			p.health.ObserveCall(ctx, "list", err)
			return list, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			w, err := p.client.Watch(ctx, opts)
			p.health.ObserveCall(ctx, "watch", err)
			if err != nil {
				return nil, err
			}
			return p.health.ObserveWatch(ctx, w), nil
		},
	}
	// List, then watch: the few classes need no streamed first list, and
	// so every API server answers alike.
	inf := cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, unsupportedWatchList{}), &PriorityClass{},
		cache.SharedIndexInformerOptions{ObjectDescription: "priority classes"})
	if err := inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, _ *cache.Reflector, err error) {
		p.health.ObserveStream(ctx, "list and watch", err)
	}); err != nil {
		return fmt.Errorf("pods: %w", err)
	}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { p.put(obj) },
		UpdateFunc: func(_, obj any) { p.put(obj) },
		DeleteFunc: func(obj any) { p.remove(obj) },
	})
	if err != nil {
		return fmt.Errorf("pods: %w", err)
	}
	hasSynced := reg.HasSynced
	p.synced.Store(&hasSynced)
	inf.RunWithContext(ctx)
	return nil
}

// unsupportedWatchList tells the reflector to list, then watch.
type unsupportedWatchList struct{}

func (unsupportedWatchList) IsWatchListSemanticsUnSupported() bool { return true }

// HasSynced reports whether the first list has been stored.
func (p *PriorityClasses) HasSynced() bool {
	f := p.synced.Load()
	return f != nil && (*f)()
}

// WaitForSync waits until the first list has been stored or ctx is done,
// and reports which.
func (p *PriorityClasses) WaitForSync(ctx context.Context) bool {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for !p.HasSynced() {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}

// PriorityClasses returns each known class's value by name (a copy).
func (p *PriorityClasses) PriorityClasses() map[string]int32 {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return maps.Clone(p.values)
}

// Health reports whether the watch is up and its failures since the
// previous call, each a *collector.SourceError of source "pods".
func (p *PriorityClasses) Health() (up bool, errs []error) {
	return p.health.Take(p.HasSynced())
}

func (p *PriorityClasses) put(obj any) {
	pc, ok := obj.(*PriorityClass)
	if !ok || pc == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.values[pc.Name] = pc.Value
}

func (p *PriorityClasses) remove(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	pc, ok := obj.(*PriorityClass)
	if !ok || pc == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.values, pc.Name)
}
