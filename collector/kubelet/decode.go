package kubelet

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// A List answer is decoded here, from its wire bytes, rather than by the
// generated podresourcesv1 types: those build a message per pod, container
// and device group and a string per name and ID, about 1,300 allocations a
// poll on a 110-pod node, all garbage once the answer is converted. The
// decoder reads the bytes into views it keeps between answers and gives
// every name and ID the string the previous answer had for it, so that an
// answer like the last one allocates nothing. It reads the messages of
// k8s.io/kubelet's api.proto (v1) that List answers with, and skips every
// other field, as any protobuf parser skips an unknown one.
//
// Unlike the generated code, it does not fail a whole answer over a name
// that is not valid UTF-8: the conversion skips that entry as
// ReasonInvalidName, as it does a name too long.

// Field numbers of podresources v1 (api.proto).
const (
	fieldListPods = 1 // ListPodResourcesResponse.pod_resources

	fieldPodName       = 1 // PodResources.name
	fieldPodNamespace  = 2 // PodResources.namespace
	fieldPodContainers = 3 // PodResources.containers

	fieldContainerName    = 1 // ContainerResources.name
	fieldContainerDevices = 2 // ContainerResources.devices
	fieldContainerDynamic = 5 // ContainerResources.dynamic_resources

	fieldDevicesResource = 1 // ContainerDevices.resource_name
	fieldDevicesIDs      = 2 // ContainerDevices.device_ids

	fieldDynamicClaimName      = 2 // DynamicResource.claim_name
	fieldDynamicClaimNamespace = 3 // DynamicResource.claim_namespace
	fieldDynamicClaimResources = 4 // DynamicResource.claim_resources

	fieldClaimDriver = 2 // ClaimResource.driver_name
	fieldClaimPool   = 3 // ClaimResource.pool_name
	fieldClaimDevice = 4 // ClaimResource.device_name
	fieldClaimShare  = 5 // ClaimResource.share_id
)

// wireContainer is one container of a List answer, as the conversion
// reads it: its pod, its name, its device groups and its DRA claims. The
// slices are reused from container to container.
type wireContainer struct {
	namespace, pod, name string
	devices              []wireDevices
	claims               []wireClaim
}

// wireDevices is a ContainerDevices: a resource and its device IDs.
type wireDevices struct {
	resource string
	ids      []string
}

// wireClaim is a DynamicResource: a claim and its devices.
type wireClaim struct {
	name, namespace string
	resources       []wireClaimResource
}

// wireClaimResource is a ClaimResource.
type wireClaimResource struct {
	driver, pool, device, share string
}

// decoder decodes List answers. Not safe for concurrent use.
type decoder struct {
	// strings holds the string of every name and ID of the answer being
	// decoded, and previous those of the answer before: a name is
	// allocated once, when it first appears, and forgotten one answer
	// after it last did.
	strings, previous map[string]string
	c                 wireContainer
}

func newDecoder() *decoder {
	return &decoder{strings: map[string]string{}, previous: map[string]string{}}
}

var errWire = errors.New("malformed protobuf")

// decode calls each for every container of the ListPodResourcesResponse
// in b, in the answer's order. The container and its strings' slices are
// reused: each must not keep them.
func (d *decoder) decode(b []byte, each func(*wireContainer)) error {
	defer func() {
		d.strings, d.previous = d.previous, d.strings
		clear(d.strings)
	}()
	return fields(b, func(num protowire.Number, v []byte) error {
		if num != fieldListPods {
			return nil
		}
		return d.pod(v, each)
	})
}

// str returns the string of b, the one already made for it if any.
func (d *decoder) str(b []byte) string {
	if s, ok := d.strings[string(b)]; ok {
		return s
	}
	s, ok := d.previous[string(b)]
	if !ok {
		s = string(b)
	}
	d.strings[s] = s
	return s
}

// pod decodes a PodResources. Fields may come in any order, so its name
// and namespace are read before its containers.
func (d *decoder) pod(b []byte, each func(*wireContainer)) error {
	var name, namespace []byte
	err := fields(b, func(num protowire.Number, v []byte) error {
		switch num {
		case fieldPodName:
			name = v
		case fieldPodNamespace:
			namespace = v
		}
		return nil
	})
	if err != nil {
		return err
	}
	ns, pod := d.str(namespace), d.str(name)
	return fields(b, func(num protowire.Number, v []byte) error {
		if num != fieldPodContainers {
			return nil
		}
		if err := d.container(v, ns, pod); err != nil {
			return err
		}
		each(&d.c)
		return nil
	})
}

// container decodes a ContainerResources into d.c.
func (d *decoder) container(b []byte, namespace, pod string) error {
	c := &d.c
	c.namespace, c.pod, c.name = namespace, pod, ""
	c.devices, c.claims = c.devices[:0], c.claims[:0]
	return fields(b, func(num protowire.Number, v []byte) error {
		switch num {
		case fieldContainerName:
			c.name = d.str(v)
		case fieldContainerDevices:
			c.devices = grow(c.devices)
			dev := &c.devices[len(c.devices)-1]
			dev.resource, dev.ids = "", dev.ids[:0]
			return fields(v, func(num protowire.Number, v []byte) error {
				switch num {
				case fieldDevicesResource:
					dev.resource = d.str(v)
				case fieldDevicesIDs:
					dev.ids = append(dev.ids, d.str(v))
				}
				return nil
			})
		case fieldContainerDynamic:
			c.claims = grow(c.claims)
			cl := &c.claims[len(c.claims)-1]
			cl.name, cl.namespace, cl.resources = "", "", cl.resources[:0]
			return fields(v, func(num protowire.Number, v []byte) error {
				switch num {
				case fieldDynamicClaimName:
					cl.name = d.str(v)
				case fieldDynamicClaimNamespace:
					cl.namespace = d.str(v)
				case fieldDynamicClaimResources:
					var r wireClaimResource
					err := fields(v, func(num protowire.Number, v []byte) error {
						switch num {
						case fieldClaimDriver:
							r.driver = d.str(v)
						case fieldClaimPool:
							r.pool = d.str(v)
						case fieldClaimDevice:
							r.device = d.str(v)
						case fieldClaimShare:
							r.share = d.str(v)
						}
						return nil
					})
					cl.resources = append(cl.resources, r)
					return err
				}
				return nil
			})
		}
		return nil
	})
}

// grow returns s one element longer, reusing the element's memory (and
// the slices in it) where s has the capacity.
func grow[T any](s []T) []T {
	if len(s) < cap(s) {
		return s[:len(s)+1]
	}
	var zero T
	return append(s, zero)
}

// fields calls f with the number and contents of each length-delimited
// field of the message b (strings, bytes, messages), in order, and skips
// the others: every field this decoder reads is length-delimited, and a
// field of another wire type is one it does not know.
func fields(b []byte, f func(protowire.Number, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: %w", errWire, protowire.ParseError(n))
		}
		b = b[n:]
		if typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return fmt.Errorf("%w: field %d: %w", errWire, num, protowire.ParseError(n))
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return fmt.Errorf("%w: field %d: %w", errWire, num, protowire.ParseError(n))
		}
		b = b[n:]
		if err := f(num, v); err != nil {
			return err
		}
	}
	return nil
}

// rawAnswer is an answer's bytes as they came off the wire, kept between
// calls.
type rawAnswer struct{ b []byte }

// rawCodec is the gRPC codec of List: it sends the request, which has no
// field, as no bytes, and copies the answer's bytes into a *rawAnswer for
// the decoder. It names itself "proto", so the call's content type is
// application/grpc+proto, which every gRPC server takes as protobuf.
type rawCodec struct{}

func (rawCodec) Marshal(any) (mem.BufferSlice, error) { return nil, nil }

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	r, ok := v.(*rawAnswer)
	if !ok {
		return fmt.Errorf("kubelet: raw codec cannot decode into %T", v)
	}
	r.b = r.b[:0]
	for _, buf := range data {
		r.b = append(r.b, buf.ReadOnlyData()...)
	}
	return nil
}

func (rawCodec) Name() string { return "proto" }
