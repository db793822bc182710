package pods

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/gpuxray/gpuxray/collector"
	"github.com/gpuxray/gpuxray/collector/internal/apihealth"
	"github.com/gpuxray/gpuxray/collector/internal/listwatch"
	"github.com/gpuxray/gpuxray/collector/workload"
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
// gpuxray_priority_class_value. A cluster has a handful of classes; at most
// max are kept (and exported), the first in the list's order by name, and
// any beyond are refused and counted (too_many). The watch is one long
// request per agent.
//
// Failures are those of the pod source: counted under source "pods", with
// the reasons of the pods API, and the table is kept as last seen. The
// agent's service account needs get, list and watch on priorityclasses.
type PriorityClasses struct {
	lw *listwatch.Source[int32]
}

// NewPriorityClasses returns the watch of client's PriorityClasses, which
// keeps at most max of them (0 is DefaultMaxPriorityClasses); it watches
// nothing until Run.
func NewPriorityClasses(client PriorityClassClient, max int, logger *zap.Logger) (*PriorityClasses, error) {
	return newPriorityClasses(client, max, 0, logger)
}

func newPriorityClasses(client PriorityClassClient, max int, timeout time.Duration, logger *zap.Logger) (*PriorityClasses, error) {
	if client == nil {
		return nil, errors.New("pods: no Kubernetes client for PriorityClasses")
	}
	if max <= 0 {
		max = DefaultMaxPriorityClasses
	}
	lw, err := listwatch.New(listwatch.Config[int32]{
		What: "priority classes",
		List: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return client.List(ctx, opts)
		},
		Watch: client.Watch,
		Convert: func(obj runtime.Object) (int32, bool, error) {
			pc, ok := obj.(*PriorityClass)
			if !ok || pc == nil {
				return 0, false, nil
			}
			if len(pc.Name) > workload.MaxNameBytes {
				return 0, false, &apihealth.TooLargeError{What: "a PriorityClass name", Limit: workload.MaxNameBytes}
			}
			return pc.Value, true, nil
		},
		MaxObjects:  max,
		CallTimeout: timeout,
		Health:      apihealth.New(collector.SourcePods, "priorityclasses API", "priority classes are known as last seen until it recovers", logger),
		Logger:      logger,
	})
	if err != nil {
		return nil, err
	}
	return &PriorityClasses{lw: lw}, nil
}

// Run lists and watches PriorityClasses until ctx is done, retrying API
// failures with backoff. It runs once.
func (p *PriorityClasses) Run(ctx context.Context) error { return p.lw.Run(ctx) }

// HasSynced reports whether the first list has been stored.
func (p *PriorityClasses) HasSynced() bool { return p.lw.HasSynced() }

// WaitForSync waits until the first list has been stored or ctx is done,
// and reports which.
func (p *PriorityClasses) WaitForSync(ctx context.Context) bool { return p.lw.WaitForSync(ctx) }

// PriorityClasses returns each known class's value by name (a copy), its
// names cleaned (workload.CleanValue).
func (p *PriorityClasses) PriorityClasses() map[string]int32 {
	out := make(map[string]int32, p.lw.Len())
	p.lw.Range(func(name string, v int32) { out[workload.CleanValue(name, workload.MaxNameBytes)] = v })
	return out
}

// Health reports whether the watch is up and its failures since the
// previous call, each a *collector.SourceError of source "pods".
func (p *PriorityClasses) Health() (up bool, errs []error) { return p.lw.Health() }
