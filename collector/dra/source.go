// Package dra maps devices allocated through Dynamic Resource Allocation to
// NVML UUIDs, from the node's ResourceSlices.
//
// The kubelet lists a DRA device as (claim, driver, pool, device): a name
// in the driver's ResourceSlices, not a UUID. Source lists and watches the
// slices of one node (field selector spec.nodeName=<node>) through a small
// typed REST client (resource.k8s.io v1, falling back to v1beta2 and
// v1beta1 on older API servers) and keeps, per device of the configured
// drivers, the value of its UUID attribute (NVIDIA's driver publishes
// "uuid" for every GPU and fixed MIG device) or, for a MIG device without
// one (its dynamic MIG partitions), the parent, GPU-instance profile ID
// and placement its name and parentUUID say. Resolver wraps the kubelet
// client: it replaces each DRA allocation's device by its UUID or MIG
// placement, or, when it cannot — the slices are not listed yet, the
// device is not in them, or it has neither — drops it from the
// allocations, counts it in AllocationList.Unresolved and reports it,
// never guessing. Devices of other drivers are ignored and counted;
// VFIO passthrough devices are dropped (NVML does not see them).
//
// The slices are listed and watched through collector/internal/listwatch,
// converted as they arrive: of a slice only its driver, pool, generation
// and per device the UUID (or why it has none) are kept, for at most
// MaxSlices slices of at most the API's 128 devices, attribute values of at
// most the API's 64 bytes. A slice beyond these bounds is refused and
// counted (too_large, too_many).
//
// When the API server cannot be reached, stalls, answers 404 for
// resource.k8s.io after the slices were listed, or RBAC denies the list or
// watch, the source keeps the slices it last knew, reports itself down
// through Health and counts each failure; the reflector relists and
// rewatches with backoff, and relists after a watch's resource version
// expired (410, in the stream or as the watch's status), which is not a
// failure.
//
// For a replay on a virtual clock, NewClient takes any *rest.Config (a
// loopback API server over plain HTTP), and WaitForResourceVersion waits
// until the store reflects a given resource version.
//
// The agent's service account needs get, list and watch on resourceslices
// (group resource.k8s.io) cluster wide.
package dra

import (
	"context"
	"errors"
	"fmt"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpuxray/gpuxray/collector"
	"github.com/gpuxray/gpuxray/collector/internal/apihealth"
	"github.com/gpuxray/gpuxray/collector/internal/listwatch"
	"github.com/gpuxray/gpuxray/collector/workload"
)

// Reasons of gpuxray_source_errors_total{source="dra"}.
const (
	ReasonForbidden    = apihealth.ReasonForbidden    // RBAC denies list or watch on resourceslices
	ReasonUnauthorized = apihealth.ReasonUnauthorized // the credentials are refused
	ReasonUnavailable  = apihealth.ReasonUnavailable  // the API server cannot be reached, is overloaded, or stalls
	ReasonTooLarge     = apihealth.ReasonTooLarge     // an answer or a slice beyond what the API server stores
	ReasonTooMany      = apihealth.ReasonTooMany      // a slice beyond MaxSlices
	ReasonOther        = apihealth.ReasonOther
	// ReasonUnresolvedDevice: the kubelet lists a device of a GPU driver
	// that the node's slices do not map to a UUID (counted per answer of
	// the kubelet, as long as it lasts).
	ReasonUnresolvedDevice = "unresolved_device"
	// ReasonOtherDriver: the kubelet lists a device of a driver that is not
	// a GPU driver (counted once per device while the kubelet lists it).
	ReasonOtherDriver = "other_driver"
)

// Errors of Source.Resolve, wrapped.
var (
	// ErrNotSynced: the node's slices have not been listed yet.
	ErrNotSynced = errors.New("the node's ResourceSlices are not listed yet")
	// ErrUnknownDevice: the device is in no slice of the node.
	ErrUnknownDevice = errors.New("no ResourceSlice of the node lists the device")
	// ErrNoUUID: the device is listed, without a usable UUID attribute.
	ErrNoUUID = errors.New("the device has no UUID attribute")
	// ErrPassthrough: the device is a GPU passed through to a VM (VFIO),
	// which NVML on the host does not see; its uuid is the driver's own.
	ErrPassthrough = errors.New("the device is a GPU passed through to a VM")
)

// Bounds of what the source keeps, from the API's validation
// (k8s.io/api v0.37.0, resource/v1/types.go): a slice lists at most
// ResourceSliceMaxDevices devices, an attribute's string at most
// DeviceAttributeMaxValueLength bytes, a device's name is a DNS label.
const (
	// MaxSlices bounds the slices of GPU drivers kept for one node: NVIDIA's
	// driver publishes one per node, and a few more with partitionable
	// devices (at most 128 devices each).
	MaxSlices          = 256
	maxSliceDevices    = 128
	maxAttributeBytes  = 64
	maxDeviceNameBytes = 63
	maxPoolBytes       = 253 // PoolNameMaxLength
)

// Source is the ResourceSlice source of one node. Its methods are safe for
// concurrent use; Resolve and Health never block on the API server.
type Source struct {
	cfg Config
	log *zap.Logger
	lw  *listwatch.Source[*slice]
}

// slice is what the store keeps of one ResourceSlice of a GPU driver.
type slice struct {
	driver, pool string
	generation   int64
	devices      map[string]device
}

// device is one device of a slice: its UUID, or why it has none.
type device struct {
	ref     collector.DeviceRef // Kind collector.RefUUID, or zero
	problem string              // set when ref is zero
	// typ, parent and profile are NVIDIA's "type", "parentUUID" and
	// "profile" attributes, for the log of a device that has no UUID.
	typ, parent, profile string
}

// New returns a Source for cfg that reads slices through client (see
// NewClient). It watches nothing until Run.
func New(cfg Config, client SliceClient, logger *zap.Logger) (*Source, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if client == nil {
		return nil, errors.New("dra: no Kubernetes client")
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	s := &Source{cfg: cfg, log: logger}
	lw, err := listwatch.New(listwatch.Config[*slice]{
		What: "ResourceSlices on node " + cfg.NodeName,
		List: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return client.List(ctx, opts)
		},
		Watch:         client.Watch,
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", cfg.NodeName).String(),
		Convert:       s.convert,
		MaxObjects:    MaxSlices,
		NotServed:     func(err error) bool { return errors.Is(err, ErrNotServed) },
		CallTimeout:   cfg.APITimeout,
		Health: apihealth.New(collector.SourceDRA, "ResourceSlice API",
			"DRA devices are resolved from the slices last seen; devices not in them are unresolved until it recovers", logger),
		Logger: logger,
	})
	if err != nil {
		return nil, err
	}
	s.lw = lw
	return s, nil
}

// Run lists and watches the node's ResourceSlices until ctx is done, then
// returns nil. API failures do not end it: they are retried with backoff
// and reported through Health. A Source runs once.
func (s *Source) Run(ctx context.Context) error {
	s.log.Info("watching ResourceSlices", zap.String("node", s.cfg.NodeName), zap.Strings("drivers", s.cfg.Drivers))
	return s.lw.Run(ctx)
}

// Relist makes Run list the slices again now and watch from there, instead
// of when client-go's reflector backoff next allows. A replay calls it when
// its simulated API server is back from an outage, so that the outage's
// real duration does not decide when the agent sees the slices again; the
// store keeps what it has until the list replaces it.
func (s *Source) Relist() { s.lw.Relist() }

// HasSynced reports whether the first list of the node's slices has been
// stored (or the API server was found to serve none).
func (s *Source) HasSynced() bool { return s.lw.HasSynced() }

// WaitForSync waits until the first list has been stored or ctx is done,
// and reports which.
func (s *Source) WaitForSync(ctx context.Context) bool { return s.lw.WaitForSync(ctx) }

// ResourceVersion returns the latest resource version the store reflects:
// of its latest list, watch event or bookmark.
func (s *Source) ResourceVersion() string { return s.lw.ResourceVersion() }

// WaitForResourceVersion waits until the store reflects resource version rv
// or a later one, or ctx is done. Resource versions are opaque: two that
// both parse as integers are compared as such (as the API server's are),
// others must be equal.
func (s *Source) WaitForResourceVersion(ctx context.Context, rv string) error {
	return s.lw.WaitForResourceVersion(ctx, rv)
}

// Health reports whether the source is up — the first list has completed
// (or the server serves no slices), the latest call to the API server
// succeeded and nothing failed or was refused since the previous Health
// call — and returns the failures since that call, each a
// *collector.SourceError of source "dra" with reason "forbidden",
// "unauthorized", "unavailable", "too_large", "too_many" or "other".
func (s *Source) Health() (up bool, errs []error) { return s.lw.Health() }

// Resolve returns the UUID of driver's device in pool, parsed, from the
// node's slices: of the pool's slices, only those of its newest generation count
// (older ones are being replaced). The error wraps ErrNotSynced,
// ErrUnknownDevice or ErrNoUUID.
func (s *Source) Resolve(driver, pool, name string) (collector.DeviceRef, error) {
	gen, found := int64(-1), false
	var dev device
	s.lw.Range(func(_ string, sl *slice) {
		if sl.driver != driver || sl.pool != pool || sl.generation < gen {
			return
		}
		d, ok := sl.devices[name]
		if sl.generation > gen {
			gen, found, dev = sl.generation, ok, d
		} else if ok {
			found, dev = true, d
		}
	})
	switch {
	case !found && !s.HasSynced():
		return collector.DeviceRef{}, ErrNotSynced
	case !found:
		return collector.DeviceRef{}, fmt.Errorf("%w (driver %s, pool %s, device %s)", ErrUnknownDevice, driver, pool, name)
	case dev.typ == DeviceTypeVFIO:
		return collector.DeviceRef{}, fmt.Errorf("%w (driver %s, pool %s, device %s)", ErrPassthrough, driver, pool, name)
	case dev.ref.Kind == 0:
		return collector.DeviceRef{}, fmt.Errorf("%w (driver %s, pool %s, device %s, type %q, parent %q, profile %q): %s",
			ErrNoUUID, driver, pool, name, dev.typ, dev.parent, dev.profile, dev.problem)
	}
	return dev.ref, nil
}

// convert keeps what resolution needs of a slice of a GPU driver on this
// node; any other slice is not kept. A slice beyond the API's bounds is
// refused.
func (s *Source) convert(obj runtime.Object) (*slice, bool, error) {
	rs, ok := obj.(*ResourceSlice)
	// The field selector already keeps other nodes' slices away; this
	// guards the store against a server that ignores it.
	if !ok || rs == nil || !s.cfg.isDriver(rs.Spec.Driver) || rs.Spec.NodeName != s.cfg.NodeName {
		return nil, false, nil
	}
	if len(rs.Spec.Devices) > maxSliceDevices {
		return nil, false, &apihealth.TooLargeError{What: "a ResourceSlice's device list", Limit: maxSliceDevices, Unit: "devices"}
	}
	sl := &slice{driver: rs.Spec.Driver, pool: workload.CleanValue(rs.Spec.Pool.Name, maxPoolBytes), generation: rs.Spec.Pool.Generation,
		devices: make(map[string]device, len(rs.Spec.Devices))}
	keys := s.cfg.uuidKeys(rs.Spec.Driver)
	for i := range rs.Spec.Devices {
		d := &rs.Spec.Devices[i]
		if len(d.Name) > maxDeviceNameBytes {
			return nil, false, &apihealth.TooLargeError{What: "a ResourceSlice's device name", Limit: maxDeviceNameBytes}
		}
		attrs := d.attributes()
		str := func(name string) string {
			for _, k := range []string{name, rs.Spec.Driver + "/" + name} {
				if a, ok := attrs[k]; ok && a.String != nil && len(*a.String) <= maxAttributeBytes {
					return workload.CleanValue(*a.String, maxAttributeBytes)
				}
			}
			return ""
		}
		dev := device{typ: str("type"), parent: str("parentUUID"), profile: str("profile")}
		dev.ref, dev.problem = refOf(d.Name, dev.typ, dev.parent, dev.profile, attrs, keys)
		sl.devices[d.Name] = dev
	}
	return sl, true, nil
}

// uuidOf returns the device's UUID attribute, or why it has none.
func uuidOf(attrs map[string]DeviceAttribute, keys []string) (collector.DeviceRef, string) {
	for _, k := range keys {
		a, ok := attrs[k]
		if !ok {
			continue
		}
		if a.String == nil {
			return collector.DeviceRef{}, fmt.Sprintf("attribute %s is not a string", k)
		}
		if len(*a.String) > maxAttributeBytes {
			return collector.DeviceRef{}, fmt.Sprintf("attribute %s of %d bytes is longer than the API's %d", k, len(*a.String), maxAttributeBytes)
		}
		ref, err := collector.ParseDeviceID(*a.String)
		if err != nil || ref.Kind != collector.RefUUID || ref.Replicated {
			return collector.DeviceRef{}, fmt.Sprintf("attribute %s of %d bytes is not a GPU-… or MIG-… UUID", k, len(*a.String))
		}
		return ref, ""
	}
	return collector.DeviceRef{}, fmt.Sprintf("none of the attributes %q (a MIG device the driver has not created yet has none)", keys)
}
