package dra

import (
	"context"
	"errors"
	"fmt"
	"sync"
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
	// group asks for /apis/resource.k8s.io once the versions were found
	// missing, to learn in one GET whether they came.
	group *rest.RESTClient

	mu sync.Mutex
	// notServedAt is when every version was last found missing (zero:
	// never, or served since); until RecheckNotServed later, lists say so
	// without a request.
	notServedAt time.Time
	served      bool // a list has succeeded
	now         func() time.Time
}

// RecheckNotServed is how long an API server found to serve no
// resource.k8s.io is taken at its word: the reflector's retries in between
// make no request, and then one GET of /apis/resource.k8s.io tells whether
// the group came (an upgrade) before the lists are tried again. Without it
// every agent of a cluster without DRA would fail three GETs every 30-60 s.
var RecheckNotServed = 10 * time.Minute

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
		scheme.AddKnownTypes(gv, &ResourceSlice{}, &ResourceSliceList{}, &ResourceClaim{}, &ResourceClaimList{})
		// meta/v1's options, status and watch events in this version.
		metav1.AddToGroupVersion(scheme, gv)
		gvs = append(gvs, gv)
	}
	codecs := serializer.NewCodecFactory(scheme).WithoutConversion()
	c := &Client{params: runtime.NewParameterCodec(scheme), now: time.Now}
	rc = listwatch.LimitResponses(rc)
	gcfg := rest.CopyConfig(rc)
	gcfg.UserAgent, gcfg.AcceptContentTypes, gcfg.ContentType = "gpuxray", "application/json", "application/json"
	gcfg.GroupVersion, gcfg.APIPath = &schema.GroupVersion{}, "/apis"
	gcfg.NegotiatedSerializer = codecs
	group, err := rest.UnversionedRESTClientFor(gcfg)
	if err != nil {
		return nil, fmt.Errorf("resource.k8s.io discovery client: %w", err)
	}
	c.group = group
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
	list := &ResourceSliceList{}
	if err := c.list(ctx, "", "resourceslices", opts, list); err != nil {
		return nil, err
	}
	return list, nil
}

// ListClaims lists the ResourceClaims of namespace that opts select, in
// the first version the server serves.
func (c *Client) ListClaims(ctx context.Context, namespace string, opts metav1.ListOptions) (*ResourceClaimList, error) {
	list := &ResourceClaimList{}
	if err := c.list(ctx, namespace, "resourceclaims", opts, list); err != nil {
		return nil, err
	}
	return list, nil
}

// WatchClaims watches the ResourceClaims of namespace that opts select, in
// the version of the latest list.
func (c *Client) WatchClaims(ctx context.Context, namespace string, opts metav1.ListOptions) (watch.Interface, error) {
	v := c.versions[c.current.Load()]
	opts.Watch = true
	return v.client.Get().Namespace(namespace).Resource("resourceclaims").VersionedParams(&opts, c.params).Timeout(timeoutOf(opts)).Watch(ctx)
}

// list lists resource (of namespace, or cluster-scoped for "") into out,
// trying the versions in order from the one that served last. An API
// server found to serve none of them is believed for RecheckNotServed.
func (c *Client) list(ctx context.Context, namespace, resource string, opts metav1.ListOptions, out runtime.Object) error {
	if err := c.checkServed(ctx); err != nil {
		return err
	}
	var notFound error
	start := int(c.current.Load())
	for k := range c.versions {
		i := (start + k) % len(c.versions)
		v := c.versions[i]
		err := v.client.Get().Namespace(namespace).Resource(resource).VersionedParams(&opts, c.params).Timeout(timeoutOf(opts)).
			Do(ctx).Into(out)
		if apierrors.IsNotFound(err) {
			// This version is not served: try the next. (A list in a
			// namespace that does not exist is empty, not a 404.)
			notFound = err
			continue
		}
		if err != nil {
			return err
		}
		c.current.Store(int32(i))
		c.mu.Lock()
		c.notServedAt, c.served = time.Time{}, true
		c.mu.Unlock()
		return nil
	}
	c.mu.Lock()
	if !c.served {
		// A cluster without DRA; one that served it and stops (a
		// misconfigured upgrade) is a failure, retried as one.
		c.notServedAt = c.now()
	}
	c.mu.Unlock()
	return fmt.Errorf("%w: %w", ErrNotServed, notFound)
}

// checkServed returns ErrNotServed, without a request, while the versions
// were found missing less than RecheckNotServed ago; after, one GET of the
// group says whether to try them again.
func (c *Client) checkServed(ctx context.Context) error {
	c.mu.Lock()
	at := c.notServedAt
	c.mu.Unlock()
	if at.IsZero() {
		return nil
	}
	if since := c.now().Sub(at); since < RecheckNotServed {
		return fmt.Errorf("%w (found %s ago; asked again %s after)", ErrNotServed, since.Truncate(time.Second), RecheckNotServed)
	}
	err := c.group.Get().AbsPath("/apis/resource.k8s.io").Timeout(listwatch.DefaultCallTimeout).Do(ctx).Error()
	if apierrors.IsNotFound(err) {
		c.mu.Lock()
		c.notServedAt = c.now()
		c.mu.Unlock()
		return fmt.Errorf("%w: %w", ErrNotServed, err)
	}
	return err // served (try the versions), or a failure to count
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
