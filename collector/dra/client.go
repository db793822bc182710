package dra

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	resourcev1beta1 "k8s.io/api/resource/v1beta1"
	resourcev1beta2 "k8s.io/api/resource/v1beta2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpuxray/gpuxray/collector/internal/apihealth"
)

// SliceClient lists and watches ResourceSlices, answering in
// resource.k8s.io/v1 types whatever version the API server serves. Client
// is one; a test may give its own.
type SliceClient interface {
	List(ctx context.Context, opts metav1.ListOptions) (*resourcev1.ResourceSliceList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// ErrNotServed is returned, wrapped, by Client.List when the API server
// serves no version of resource.k8s.io's ResourceSlices: the cluster has no
// DRA, and no device can be allocated through it.
var ErrNotServed = errors.New("the API server serves no ResourceSlices (resource.k8s.io v1, v1beta2 or v1beta1)")

// Versions are the versions of resource.k8s.io a Client tries, in order:
// v1 is GA from Kubernetes 1.34; v1beta2 (1.33) and v1beta1 (1.32) are
// served by older API servers with DRA enabled.
var Versions = []string{resourcev1.SchemeGroupVersion.Version, resourcev1beta2.SchemeGroupVersion.Version, resourcev1beta1.SchemeGroupVersion.Version}

// Client is the SliceClient of one API server: a REST client per version
// of resource.k8s.io, not a clientset (whose scheme registers every API
// group at init; see collector/pods). List tries v1, then v1beta2, then
// v1beta1, and Watch uses the version that served the latest list. Objects
// are read as protobuf where the server offers it, and trimmed to what
// resolution reads. Safe for concurrent use.
type Client struct {
	versions []versionClient
	params   runtime.ParameterCodec
	current  atomic.Int32 // index into versions of the latest list's
}

type versionClient struct {
	gv     schema.GroupVersion
	client *rest.RESTClient
}

// LoadConfig returns the API server configuration of kubeconfig, or the
// in-cluster one (the pod's service account) when kubeconfig is empty.
func LoadConfig(kubeconfig string) (*rest.Config, error) {
	var (
		rc  *rest.Config
		err error
	)
	if kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client configuration: %w", err)
	}
	return rc, nil
}

// NewClient returns the Client of the API server rc reaches (over TLS, or
// plain HTTP for a loopback test server).
func NewClient(rc *rest.Config) (*Client, error) {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{resourcev1.AddToScheme, resourcev1beta2.AddToScheme, resourcev1beta1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, fmt.Errorf("resourceslice client: %w", err)
		}
	}
	codecs := serializer.NewCodecFactory(scheme).WithoutConversion()
	c := &Client{params: runtime.NewParameterCodec(scheme)}
	for _, gv := range []schema.GroupVersion{resourcev1.SchemeGroupVersion, resourcev1beta2.SchemeGroupVersion, resourcev1beta1.SchemeGroupVersion} {
		cfg := rest.CopyConfig(rc)
		cfg.UserAgent = "gpuxray"
		cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
		cfg.ContentType = "application/vnd.kubernetes.protobuf"
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
func (c *Client) List(ctx context.Context, opts metav1.ListOptions) (*resourcev1.ResourceSliceList, error) {
	var notFound error
	for i, v := range c.versions {
		list, err := c.list(ctx, v, opts)
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

func (c *Client) list(ctx context.Context, v versionClient, opts metav1.ListOptions) (*resourcev1.ResourceSliceList, error) {
	req := v.client.Get().Resource("resourceslices").VersionedParams(&opts, c.params).Timeout(timeoutOf(opts))
	out := &resourcev1.ResourceSliceList{}
	switch v.gv.Version {
	case "v1":
		var list resourcev1.ResourceSliceList
		if err := req.Do(ctx).Into(&list); err != nil {
			return nil, err
		}
		out.ListMeta = list.ListMeta
		for i := range list.Items {
			out.Items = append(out.Items, *fromV1(&list.Items[i]))
		}
	case "v1beta2":
		var list resourcev1beta2.ResourceSliceList
		if err := req.Do(ctx).Into(&list); err != nil {
			return nil, err
		}
		out.ListMeta = list.ListMeta
		for i := range list.Items {
			out.Items = append(out.Items, *fromV1beta2(&list.Items[i]))
		}
	default:
		var list resourcev1beta1.ResourceSliceList
		if err := req.Do(ctx).Into(&list); err != nil {
			return nil, err
		}
		out.ListMeta = list.ListMeta
		for i := range list.Items {
			out.Items = append(out.Items, *fromV1beta1(&list.Items[i]))
		}
	}
	return out, nil
}

// Watch watches ResourceSlices in the version of the latest list, whose
// resource version opts carries.
func (c *Client) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	v := c.versions[c.current.Load()]
	opts.Watch = true
	w, err := v.client.Get().Resource("resourceslices").VersionedParams(&opts, c.params).Timeout(timeoutOf(opts)).Watch(ctx)
	if err != nil {
		return nil, err
	}
	return apihealth.MapWatch(w, func(ev watch.Event) watch.Event {
		switch o := ev.Object.(type) {
		case *resourcev1.ResourceSlice:
			ev.Object = fromV1(o)
		case *resourcev1beta2.ResourceSlice:
			ev.Object = fromV1beta2(o)
		case *resourcev1beta1.ResourceSlice:
			ev.Object = fromV1beta1(o)
		}
		return ev
	}), nil
}

// timeoutOf returns the client-side timeout of a request with opts, as a
// clientset sets it: the server-side one, or none.
func timeoutOf(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}

// meta keeps of an object's metadata what the reflector and the store
// read; the bookmark annotation stays so that a bookmark is still one.
func meta(m *metav1.ObjectMeta) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: m.Name, UID: m.UID, ResourceVersion: m.ResourceVersion, Annotations: bookmarkOnly(m.Annotations)}
}

func bookmarkOnly(a map[string]string) map[string]string {
	if v, ok := a[metav1.InitialEventsAnnotationKey]; ok {
		return map[string]string{metav1.InitialEventsAnnotationKey: v}
	}
	return nil
}

// The from* functions return a slice as v1 types, with what resolution
// reads only: driver, pool, node, and each device's name and attributes.
// Capacities, counters, taints and selectors are dropped.

func fromV1(s *resourcev1.ResourceSlice) *resourcev1.ResourceSlice {
	out := &resourcev1.ResourceSlice{
		TypeMeta:   metav1.TypeMeta{APIVersion: resourcev1.SchemeGroupVersion.String(), Kind: "ResourceSlice"},
		ObjectMeta: meta(&s.ObjectMeta),
		Spec: resourcev1.ResourceSliceSpec{
			Driver: s.Spec.Driver, Pool: s.Spec.Pool, NodeName: s.Spec.NodeName,
			Devices: make([]resourcev1.Device, 0, len(s.Spec.Devices)),
		},
	}
	for _, d := range s.Spec.Devices {
		out.Spec.Devices = append(out.Spec.Devices, resourcev1.Device{Name: d.Name, Attributes: d.Attributes})
	}
	return out
}

func fromV1beta2(s *resourcev1beta2.ResourceSlice) *resourcev1.ResourceSlice {
	out := &resourcev1.ResourceSlice{
		TypeMeta:   metav1.TypeMeta{APIVersion: resourcev1.SchemeGroupVersion.String(), Kind: "ResourceSlice"},
		ObjectMeta: meta(&s.ObjectMeta),
		Spec: resourcev1.ResourceSliceSpec{
			Driver:   s.Spec.Driver,
			Pool:     resourcev1.ResourcePool(s.Spec.Pool),
			NodeName: s.Spec.NodeName,
			Devices:  make([]resourcev1.Device, 0, len(s.Spec.Devices)),
		},
	}
	for _, d := range s.Spec.Devices {
		out.Spec.Devices = append(out.Spec.Devices, resourcev1.Device{Name: d.Name, Attributes: attributesV1beta2(d.Attributes)})
	}
	return out
}

func fromV1beta1(s *resourcev1beta1.ResourceSlice) *resourcev1.ResourceSlice {
	out := &resourcev1.ResourceSlice{
		TypeMeta:   metav1.TypeMeta{APIVersion: resourcev1.SchemeGroupVersion.String(), Kind: "ResourceSlice"},
		ObjectMeta: meta(&s.ObjectMeta),
		Spec: resourcev1.ResourceSliceSpec{
			Driver:  s.Spec.Driver,
			Pool:    resourcev1.ResourcePool(s.Spec.Pool),
			Devices: make([]resourcev1.Device, 0, len(s.Spec.Devices)),
		},
	}
	if s.Spec.NodeName != "" {
		out.Spec.NodeName = &s.Spec.NodeName
	}
	for _, d := range s.Spec.Devices {
		dev := resourcev1.Device{Name: d.Name}
		if d.Basic != nil {
			dev.Attributes = attributesV1beta1(d.Basic.Attributes)
		}
		out.Spec.Devices = append(out.Spec.Devices, dev)
	}
	return out
}

// attributesV1beta2 and attributesV1beta1 convert a beta version's device
// attributes, which have v1's fields.
func attributesV1beta2(in map[resourcev1beta2.QualifiedName]resourcev1beta2.DeviceAttribute) map[resourcev1.QualifiedName]resourcev1.DeviceAttribute {
	if in == nil {
		return nil
	}
	out := make(map[resourcev1.QualifiedName]resourcev1.DeviceAttribute, len(in))
	for k, v := range in {
		out[resourcev1.QualifiedName(k)] = resourcev1.DeviceAttribute(v)
	}
	return out
}

func attributesV1beta1(in map[resourcev1beta1.QualifiedName]resourcev1beta1.DeviceAttribute) map[resourcev1.QualifiedName]resourcev1.DeviceAttribute {
	if in == nil {
		return nil
	}
	out := make(map[resourcev1.QualifiedName]resourcev1.DeviceAttribute, len(in))
	for k, v := range in {
		out[resourcev1.QualifiedName(k)] = resourcev1.DeviceAttribute(v)
	}
	return out
}
