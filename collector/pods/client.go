package pods

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/gpuxray/gpuxray/collector/internal/kubeconfig"
)

// PodClient lists and watches the pods of all namespaces. NewClient returns
// one; a clientset's CoreV1().Pods(metav1.NamespaceAll) is one too.
//
// A PodClient that also has a method IsWatchListSemanticsUnSupported() bool
// returning true (as client-go's fakes do) is never sent watch-list
// requests; otherwise the informer streams its first list through a watch
// where client-go's WatchListClient feature is on, as with a clientset.
type PodClient interface {
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// NewClient returns the PodClient for c: from c.Kubeconfig, or in-cluster.
// Pods are read as protobuf, which the API server encodes and the agent
// decodes at a fraction of JSON's cost.
//
// It is a REST client for core/v1 alone, not a clientset: a clientset's
// scheme registers every API group at init, and linking it is most of the
// agent's binary and of its resident memory.
func NewClient(c Config) (PodClient, error) {
	rc, err := kubeconfig.Load(c.Kubeconfig)
	if err != nil {
		return nil, err
	}
	scheme := runtime.NewScheme()
	// core/v1, and meta/v1's options, status and watch events in it.
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	rc = rest.CopyConfig(rc)
	rc.UserAgent = "gpuxray"
	rc.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	rc.ContentType = "application/vnd.kubernetes.protobuf"
	gv := corev1.SchemeGroupVersion
	rc.GroupVersion = &gv
	rc.APIPath = "/api"
	rc.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	client, err := rest.RESTClientFor(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return &restPods{client: client, params: runtime.NewParameterCodec(scheme)}, nil
}

// restPods is the PodClient of NewClient: the requests a clientset's
// CoreV1().Pods("") makes, on a REST client that knows only core/v1.
type restPods struct {
	client *rest.RESTClient
	params runtime.ParameterCodec
}

func (p *restPods) List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error) {
	list := &corev1.PodList{}
	err := p.client.Get().
		Resource("pods").
		VersionedParams(&opts, p.params).
		Timeout(timeoutOf(opts)).
		Do(ctx).
		Into(list)
	return list, err
}

func (p *restPods) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return p.client.Get().
		Resource("pods").
		VersionedParams(&opts, p.params).
		Timeout(timeoutOf(opts)).
		Watch(ctx)
}

// timeoutOf returns the client-side timeout of a request with opts, as a
// clientset sets it: the server-side one, or none.
func timeoutOf(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}
