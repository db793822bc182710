package listwatch

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Object is what the reflector handles of one API object: its identity
// (name, namespace, UID, resource version; a bookmark's annotations) and
// the value V the source converted it to. Lists and watch events are
// converted as they arrive, so no API object outlives its decoding.
type Object[V any] struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// Value is what the source keeps; it is shared, never modified.
	Value V `json:"-"`
	// Keep is false for an object the source does not keep (another
	// node's pod): whatever is stored under its name is forgotten.
	Keep bool `json:"-"`
}

// DeepCopyObject implements runtime.Object; Value is shared.
func (o *Object[V]) DeepCopyObject() runtime.Object {
	if o == nil {
		return nil
	}
	out := &Object[V]{TypeMeta: o.TypeMeta, Value: o.Value, Keep: o.Keep}
	o.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return out
}

// List is a converted list: the reflector's pager and its store read Items.
type List[V any] struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Object[V] `json:"items"`
}

// DeepCopyObject implements runtime.Object; the items' values are shared.
func (l *List[V]) DeepCopyObject() runtime.Object {
	if l == nil {
		return nil
	}
	out := &List[V]{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]Object[V], len(l.Items))
		for i := range l.Items {
			out.Items[i] = *l.Items[i].DeepCopyObject().(*Object[V])
		}
	}
	return out
}
