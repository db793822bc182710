package dra

import (
	"maps"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// ResourceSlice is what the agent reads of a resource.k8s.io ResourceSlice,
// decoded from the JSON of v1, v1beta2 or v1beta1: the three spell these
// fields alike, but for v1beta1's attributes under devices[].basic. It
// stands in for k8s.io/api/resource's types, whose three versions would
// link every DRA type into the agent for the handful of fields it reads.
type ResourceSlice struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ResourceSliceSpec `json:"spec"`
}

// ResourceSliceSpec is the part of a slice's spec that names devices.
type ResourceSliceSpec struct {
	Driver   string       `json:"driver"`
	Pool     ResourcePool `json:"pool"`
	NodeName string       `json:"nodeName,omitempty"`
	Devices  []Device     `json:"devices,omitempty"`
}

// ResourcePool is a slice's pool: a driver publishes a pool's devices in
// one or more slices of the same generation.
type ResourcePool struct {
	Name       string `json:"name"`
	Generation int64  `json:"generation"`
}

// Device is one device of a slice. Attribute names are QualifiedNames: an
// unqualified name is in the driver's domain.
type Device struct {
	Name       string                     `json:"name"`
	Attributes map[string]DeviceAttribute `json:"attributes,omitempty"`
	// Basic holds the attributes in v1beta1.
	Basic *BasicDevice `json:"basic,omitempty"`
}

// BasicDevice is v1beta1's wrapper of a device's attributes.
type BasicDevice struct {
	Attributes map[string]DeviceAttribute `json:"attributes,omitempty"`
}

// DeviceAttribute is one attribute's value; exactly one field is set.
type DeviceAttribute struct {
	Int     *int64  `json:"int,omitempty"`
	Bool    *bool   `json:"bool,omitempty"`
	String  *string `json:"string,omitempty"`
	Version *string `json:"version,omitempty"`
}

// attributes returns the device's attributes, whichever version's place
// they came in.
func (d *Device) attributes() map[string]DeviceAttribute {
	if d.Basic != nil && len(d.Attributes) == 0 {
		return d.Basic.Attributes
	}
	return d.Attributes
}

// ResourceSliceList is a list of slices.
type ResourceSliceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ResourceSlice `json:"items"`
}

// DeepCopyObject implements runtime.Object.
func (s *ResourceSlice) DeepCopyObject() runtime.Object {
	if s == nil {
		return nil
	}
	out := &ResourceSlice{TypeMeta: s.TypeMeta, Spec: s.Spec}
	s.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec.Devices = make([]Device, len(s.Spec.Devices))
	for i, d := range s.Spec.Devices {
		out.Spec.Devices[i] = Device{Name: d.Name, Attributes: copyAttributes(d.Attributes)}
		if d.Basic != nil {
			out.Spec.Devices[i].Basic = &BasicDevice{Attributes: copyAttributes(d.Basic.Attributes)}
		}
	}
	if s.Spec.Devices == nil {
		out.Spec.Devices = nil
	}
	return out
}

// DeepCopyObject implements runtime.Object.
func (l *ResourceSliceList) DeepCopyObject() runtime.Object {
	if l == nil {
		return nil
	}
	out := &ResourceSliceList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]ResourceSlice, len(l.Items))
		for i := range l.Items {
			out.Items[i] = *l.Items[i].DeepCopyObject().(*ResourceSlice)
		}
	}
	return out
}

func copyAttributes(in map[string]DeviceAttribute) map[string]DeviceAttribute {
	if in == nil {
		return nil
	}
	out := maps.Clone(in)
	for k, a := range out {
		out[k] = DeviceAttribute{Int: clonePtr(a.Int), Bool: clonePtr(a.Bool), String: clonePtr(a.String), Version: clonePtr(a.Version)}
	}
	return out
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

// ResourceClaim is what the agent reads of a resource.k8s.io ResourceClaim,
// decoded from the JSON of v1, v1beta2 or v1beta1, which spell these
// fields alike (k8s.io/api resource/v1 types.go: AllocationResult,
// DeviceRequestAllocationResult, ResourceClaimConsumerReference).
type ResourceClaim struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Status            ResourceClaimStatus `json:"status"`
}

// ResourceClaimStatus is a claim's allocation and the consumers it is
// reserved for.
type ResourceClaimStatus struct {
	Allocation  *AllocationResult   `json:"allocation,omitempty"`
	ReservedFor []ConsumerReference `json:"reservedFor,omitempty"`
}

// AllocationResult is the devices the scheduler allocated to a claim.
type AllocationResult struct {
	Devices struct {
		Results []DeviceResult `json:"results,omitempty"`
	} `json:"devices"`
}

// DeviceResult is one allocated device: the request it was allocated for
// ("<request>" or "<request>/<subrequest>" of a prioritized list), its
// name in the driver's slices, and whether it was allocated with admin
// access (KEP-5018: a monitor's access that holds nothing).
type DeviceResult struct {
	Request     string  `json:"request"`
	Driver      string  `json:"driver"`
	Pool        string  `json:"pool"`
	Device      string  `json:"device"`
	AdminAccess *bool   `json:"adminAccess,omitempty"`
	ShareID     *string `json:"shareID,omitempty"`
}

// ConsumerReference is an entry of a claim's reservedFor: a pod, usually.
type ConsumerReference struct {
	APIGroup string `json:"apiGroup,omitempty"`
	Resource string `json:"resource"`
	Name     string `json:"name"`
	UID      string `json:"uid"`
}

// ResourceClaimList is a list of claims.
type ResourceClaimList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ResourceClaim `json:"items"`
}

// DeepCopyObject implements runtime.Object.
func (c *ResourceClaim) DeepCopyObject() runtime.Object {
	if c == nil {
		return nil
	}
	out := &ResourceClaim{TypeMeta: c.TypeMeta}
	c.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Status.ReservedFor = slices.Clone(c.Status.ReservedFor)
	if a := c.Status.Allocation; a != nil {
		out.Status.Allocation = &AllocationResult{}
		for _, r := range a.Devices.Results {
			r.AdminAccess, r.ShareID = clonePtr(r.AdminAccess), clonePtr(r.ShareID)
			out.Status.Allocation.Devices.Results = append(out.Status.Allocation.Devices.Results, r)
		}
	}
	return out
}

// DeepCopyObject implements runtime.Object.
func (l *ResourceClaimList) DeepCopyObject() runtime.Object {
	if l == nil {
		return nil
	}
	out := &ResourceClaimList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]ResourceClaim, len(l.Items))
		for i := range l.Items {
			out.Items[i] = *l.Items[i].DeepCopyObject().(*ResourceClaim)
		}
	}
	return out
}
