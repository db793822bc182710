package pods

import (
	"context"
	"encoding/json"
	"sync"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	typedschedulingv1 "k8s.io/client-go/kubernetes/typed/scheduling/v1"
)

// The tests keep k8s.io/api's types and client-go's fake clientset, whose
// objects reach the source as the API server's JSON would: marshalled from
// k8s.io/api's types and unmarshalled into this package's.

// asPod returns p as the source reads it.
func asPod(p *corev1.Pod) *Pod {
	out := &Pod{}
	recode(p, out)
	return out
}

// fromCore returns obj, a pod, a priority class or a list of either, as
// this package's type; any other object (a watch's Status) as it is.
func fromCore(obj runtime.Object) runtime.Object {
	var out runtime.Object
	switch obj.(type) {
	case *corev1.Pod:
		out = &Pod{}
	case *corev1.PodList:
		out = &PodList{}
	case *schedulingv1.PriorityClass:
		out = &PriorityClass{}
	case *schedulingv1.PriorityClassList:
		out = &PriorityClassList{}
	default:
		return obj
	}
	recode(obj, out)
	return out
}

func recode(in, out any) {
	raw, err := json.Marshal(in)
	if err != nil {
		panic(err)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		panic(err)
	}
}

// fakePods is a fake clientset's pods as a PodClient. Like the clientset,
// it tells the reflector that it cannot serve watch-list requests (the fake
// sends no initial-events bookmark), so the informer lists, then watches.
type fakePods struct{ pods typedcorev1.PodInterface }

func (fakePods) IsWatchListSemanticsUnSupported() bool { return true }

func (f fakePods) List(ctx context.Context, opts metav1.ListOptions) (*PodList, error) {
	list, err := f.pods.List(ctx, opts)
	if err != nil {
		return nil, err
	}
	return fromCore(list).(*PodList), nil
}

func (f fakePods) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := f.pods.Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	return convertWatch(w), nil
}

// fakeClasses is a fake clientset's PriorityClasses as a
// PriorityClassClient.
type fakeClasses struct {
	classes typedschedulingv1.PriorityClassInterface
}

func (f fakeClasses) List(ctx context.Context, opts metav1.ListOptions) (*PriorityClassList, error) {
	list, err := f.classes.List(ctx, opts)
	if err != nil {
		return nil, err
	}
	return fromCore(list).(*PriorityClassList), nil
}

func (f fakeClasses) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := f.classes.Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	return convertWatch(w), nil
}

// convertedWatch passes a watch's events on with their objects fromCore.
// Unlike watch.Filter, its goroutine ends on Stop even when nobody reads.
type convertedWatch struct {
	in   watch.Interface
	out  chan watch.Event
	stop chan struct{}
	once sync.Once
}

func convertWatch(in watch.Interface) watch.Interface {
	w := &convertedWatch{in: in, out: make(chan watch.Event), stop: make(chan struct{})}
	go w.loop()
	return w
}

func (w *convertedWatch) loop() {
	defer close(w.out)
	for {
		select {
		case ev, ok := <-w.in.ResultChan():
			if !ok {
				return
			}
			ev.Object = fromCore(ev.Object)
			select {
			case w.out <- ev:
			case <-w.stop:
				return
			}
		case <-w.stop:
			return
		}
	}
}

func (w *convertedWatch) ResultChan() <-chan watch.Event { return w.out }

func (w *convertedWatch) Stop() {
	w.once.Do(func() {
		close(w.stop)
		w.in.Stop()
	})
}
