package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// kinds are the objects gpuxray's manifests may hold, by apiVersion and kind.
var kinds = map[string]func() any{
	"v1/Namespace":      func() any { return &corev1.Namespace{} },
	"v1/ServiceAccount": func() any { return &corev1.ServiceAccount{} },
	"v1/Service":        func() any { return &corev1.Service{} },
	"v1/ConfigMap":      func() any { return &corev1.ConfigMap{} },
	"v1/Secret":         func() any { return &corev1.Secret{} },
	"v1/ResourceQuota":  func() any { return &corev1.ResourceQuota{} },
	"apps/v1/DaemonSet": func() any { return &appsv1.DaemonSet{} },
	"rbac.authorization.k8s.io/v1/ClusterRole":        func() any { return &rbacv1.ClusterRole{} },
	"scheduling.k8s.io/v1/PriorityClass":              func() any { return &schedulingv1.PriorityClass{} },
	"rbac.authorization.k8s.io/v1/ClusterRoleBinding": func() any { return &rbacv1.ClusterRoleBinding{} },
	"monitoring.coreos.com/v1/ServiceMonitor":         func() any { return &monitoringv1.ServiceMonitor{} },
	"monitoring.coreos.com/v1/PodMonitor":             func() any { return &monitoringv1.PodMonitor{} },
	"monitoring.coreos.com/v1/PrometheusRule":         func() any { return &monitoringv1.PrometheusRule{} },
}

// manifest is every object of a rendered set of manifests, decoded strictly
// into its Go type: an unknown or misspelt field, a duplicate key or a
// wrong type is an error.
type manifest struct {
	objects []any
}

func decodeManifest(b []byte) (*manifest, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	m := &manifest{}
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return m, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(doc)) == 0 || string(bytes.TrimSpace(doc)) == "---" {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, err
		}
		if tm.APIVersion == "" && tm.Kind == "" {
			var v any
			if err := yaml.Unmarshal(doc, &v); err == nil && v == nil {
				continue // a document of comments only
			}
		}
		newObj, ok := kinds[tm.APIVersion+"/"+tm.Kind]
		if !ok {
			return nil, fmt.Errorf("unexpected object %s %s:\n%s", tm.APIVersion, tm.Kind, doc)
		}
		obj := newObj()
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			return nil, fmt.Errorf("%s: %w\n%s", tm.Kind, err, doc)
		}
		m.objects = append(m.objects, obj)
	}
}

// all returns the objects of type T.
func all[T any](m *manifest) []*T {
	var out []*T
	for _, o := range m.objects {
		if v, ok := o.(*T); ok {
			out = append(out, v)
		}
	}
	return out
}

// one returns the only object of type T, failing the test otherwise.
func one[T any](t *testing.T, m *manifest) *T {
	t.Helper()
	l := all[T](m)
	if len(l) != 1 {
		var zero T
		t.Fatalf("want one %T, got %d", zero, len(l))
	}
	return l[0]
}
