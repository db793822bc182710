package dra

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/gpuxray/gpuxray/collector/internal/kubeconfig"
	"github.com/gpuxray/gpuxray/collector/internal/listwatch"
)

// SliceClient lists and watches ResourceSlices, whatever version the API
// server serves. Client is one; a test may give its own.
type SliceClient interface {
	List(ctx context.Context, opts metav1.ListOptions) (*ResourceSliceList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// ErrNotServed is returned, wrapped, by Client.List when the API server
// serves no version of resource.k8s.io's ResourceSlices: the cluster has no
// DRA, and no device can be allocated through it.
var ErrNotServed = errors.New("the API server serves no ResourceSlices (resource.k8s.io v1, v1beta2 or v1beta1)")

// Versions are the versions of resource.k8s.io a Client tries, in order:
// v1 is GA from Kubernetes 1.34; v1beta2 (1.33) and v1beta1 (1.32) are
// served by older API servers with DRA enabled.
var Versions = []string{"v1", "v1beta2", "v1beta1"}

// Client is the SliceClient of one API server: a REST client per version
// of resource.k8s.io, not a clientset (whose scheme registers every API
// group at init; see collector/pods). List tries v1, then v1beta2, then
// v1beta1, and Watch uses the version that served the latest list. Slices
// are read as JSON into this package's ResourceSlice, which the three
// versions all decode into. Safe for concurrent use.
type Client struct {
	versions []versionClient
	params   runtime.ParameterCodec
	current  atomic.Int32 // index into versions of the latest list's
}

type versionClient struct {
	gv     schema.GroupVersion
	client *rest.RESTClient
}

// LoadConfig returns the API server configuration of the kubeconfig file at
// path, or the in-cluster one when path is empty (kubeconfig.Load).
func LoadConfig(path string) (*rest.Config, error) { return kubeconfig.Load(path) }

// NewClient returns the Client of the API server rc reaches (over TLS, or
// plain HTTP for a loopback test server). Its answers are read within
// listwatch.LimitResponses's bounds.
func NewClient(rc *rest.Config) (*Client, error) {
	scheme := runtime.NewScheme()
	var gvs []schema.GroupVersion
	for _, v := range Versions {
		gv := schema.GroupVersion{Group: "resource.k8s.io", Version: v}
		scheme.AddKnownTypes(gv, &ResourceSlice{}, &ResourceSliceList{})
		// meta/v1's options, status and watch events in this version.
		metav1.AddToGroupVersion(scheme, gv)
		gvs = append(gvs, gv)
	}
	codecs := serializer.NewCodecFactory(scheme).WithoutConversion()
	c := &Client{params: runtime.NewParameterCodec(scheme)}
	rc = listwatch.LimitResponses(rc)
	for _, gv := range gvs {
		cfg := rest.CopyConfig(rc)
		cfg.UserAgent = "gpuxray"
		// JSON: this package's types have no protobuf encoding, and a
		// node's slices are few and seldom change.
		cfg.AcceptContentTypes = "application/json"
		cfg.ContentType = "application/json"
		cfg.GroupVersion = &gv
		cfg.APIPath = "/apis"
		cfg.NegotiatedSerializer = codecs
		client, err := rest.RESTClientFor(cfg)
		if err != nil {
			return nil, fmt.Errorf("resourceslice client: %w", err)
		}
		c.versions = append(c.versions, versionClient{gv: gv, client: client})
	}
	return c, nil
}

// IsWatchListSemanticsUnSupported tells client-go's reflector to list,
// then watch, rather than stream its first list through a watch: a node's
// slices are few, and so every API server that serves them answers alike.
func (c *Client) IsWatchListSemanticsUnSupported() bool { return true }

// Version returns the version of resource.k8s.io that served the latest
// list ("v1" before any).
func (c *Client) Version() string { return c.versions[c.current.Load()].gv.Version }

// List lists ResourceSlices in the first version the server serves.
func (c *Client) List(ctx context.Context, opts metav1.ListOptions) (*ResourceSliceList, error) {
	var notFound error
	for i, v := range c.versions {
		list := &ResourceSliceList{}
		err := v.client.Get().Resource("resourceslices").VersionedParams(&opts, c.params).Timeout(timeoutOf(opts)).
			Do(ctx).Into(list)
		if apierrors.IsNotFound(err) {
			notFound = err // this version is not served: try the next
			continue
		}
		if err != nil {
			return nil, err
		}
		c.current.Store(int32(i))
		return list, nil
	}
	return nil, fmt.Errorf("%w: %w", ErrNotServed, notFound)
}

// Watch watches ResourceSlices in the version of the latest list, whose
// resource version opts carries.
func (c *Client) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	v := c.versions[c.current.Load()]
	opts.Watch = true
	return v.client.Get().Resource("resourceslices").VersionedParams(&opts, c.params).Timeout(timeoutOf(opts)).Watch(ctx)
}

// timeoutOf returns the client-side timeout of a request with opts, as a
// clientset sets it: the server-side one, or none.
func timeoutOf(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}
