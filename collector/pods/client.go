package pods

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/gpuxray/gpuxray/collector/internal/kubeconfig"
	"github.com/gpuxray/gpuxray/collector/internal/listwatch"
)

// PodClient lists and watches the pods of all namespaces. NewClient returns
// one; a test may give its own.
//
// A PodClient that also has a method IsWatchListSemanticsUnSupported() bool
// returning true (as client-go's fakes do) is never sent watch-list
// requests; otherwise the source streams its first list through a watch
// where client-go's WatchListClient feature is on, as with a clientset.
type PodClient interface {
	List(ctx context.Context, opts metav1.ListOptions) (*PodList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// coreV1 is the API group and version of pods: the legacy core group,
// served under /api.
var coreV1 = schema.GroupVersion{Version: "v1"}

// NewClient returns the PodClient for c: of c.REST, else from c.Kubeconfig,
// else in-cluster. Pods are read as JSON into this package's Pod, which
// holds only what the agent reads, and answers within
// listwatch.LimitResponses's bounds.
//
// It is a REST client for core/v1's pods alone, not a clientset, and knows
// no type of k8s.io/api: a clientset's scheme registers every API group at
// init, and k8s.io/api/core/v1 alone was the largest package the agent
// linked (see collector/dra, which reads ResourceSlices alike).
func NewClient(c Config) (PodClient, error) {
	client, params, err := newRESTClient(c, coreV1, "/api", &Pod{}, &PodList{})
	if err != nil {
		return nil, err
	}
	return &restPods{client: client, params: params}, nil
}

// newRESTClient returns a REST client for group-version gv under apiPath
// (/api for the core group, /apis for the others) of the API server c
// reaches, whose scheme knows only types (in gv) and meta/v1's options,
// status and watch events. It reads and writes JSON: the types have no
// protobuf encoding.
func newRESTClient(c Config, gv schema.GroupVersion, apiPath string, types ...runtime.Object) (*rest.RESTClient, runtime.ParameterCodec, error) {
	rc := c.REST
	if rc == nil {
		var err error
		if rc, err = kubeconfig.Load(c.Kubeconfig); err != nil {
			return nil, nil, err
		}
	}
	scheme := newScheme(gv, types...)
	rc = listwatch.LimitResponses(rc)
	rc.UserAgent = "gpuxray"
	rc.AcceptContentTypes = "application/json"
	rc.ContentType = "application/json"
	rc.GroupVersion = &gv
	rc.APIPath = apiPath
	rc.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	client, err := rest.RESTClientFor(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return client, runtime.NewParameterCodec(scheme), nil
}

// newScheme returns a scheme that knows types in gv, and meta/v1's
// options, status and watch events.
func newScheme(gv schema.GroupVersion, types ...runtime.Object) *runtime.Scheme {
	scheme := runtime.NewScheme()
	scheme.AddKnownTypes(gv, types...)
	metav1.AddToGroupVersion(scheme, gv)
	return scheme
}

// restPods is the PodClient of NewClient: the requests a clientset's
// CoreV1().Pods("") makes, on a REST client that knows only Pod.
type restPods struct {
	client *rest.RESTClient
	params runtime.ParameterCodec
}

func (p *restPods) List(ctx context.Context, opts metav1.ListOptions) (*PodList, error) {
	list := &PodList{}
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

// ParseKubeconfig returns the API server configuration of kubeconfig data
// read from path, for a command that reads its kubeconfig itself, within
// bounds; check is called first with each file it names that client-go
// reads on its own (token file, certificates).
func ParseKubeconfig(data []byte, path string, check func(file string) error) (*rest.Config, error) {
	return kubeconfig.Parse(data, path, check)
}

// InClusterConfig returns the API server configuration of the pod's
// service account.
func InClusterConfig() (*rest.Config, error) { return kubeconfig.Load("") }
