package pods

import (
	"k8s.io/apimachinery/pkg/watch"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuxray/gpuxray/collector"
)

// TestConvertSharing: what HAMi and KAI Scheduler write on a pod reaches
// collector.Pod.Sharing: HAMi's devices by container, in the spec's order
// of init containers then containers; KAI's group and the container that
// gets the GPU (the annotation's, else the first container).
func TestConvertSharing(t *testing.T) {
	t.Parallel()
	const gpu = "GPU-3b9f1e2a-7c4d-4e8f-9a1b-2c3d4e5f6a7b"
	src, err := New(testConfig(), fakePods{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	hami := &Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "h", Namespace: "ml", Annotations: map[string]string{collector.AnnotationHAMiDevices: ";" + gpu + ",NVIDIA,8000,50:;"}},
		Spec:       PodSpec{InitContainers: []ContainerName{{Name: "fetch"}}, Containers: []ContainerName{{Name: "server"}}},
	}
	if got := src.convert(hami).Sharing; !reflect.DeepEqual(got.Devices, map[string][]string{"server": {gpu}}) || got.GPUGroups != nil {
		t.Errorf("HAMi pod: %+v", got)
	}
	kai := &Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "k", Namespace: "ml", Labels: map[string]string{collector.LabelKAIGPUGroup: "g"}},
		Spec:       PodSpec{Containers: []ContainerName{{Name: "first"}, {Name: "second"}}},
	}
	if got := src.convert(kai).Sharing; !reflect.DeepEqual(got, collector.Sharing{GPUGroups: []string{"g"}, GPUContainer: "first"}) {
		t.Errorf("KAI pod: %+v", got)
	}
	kai.Annotations = map[string]string{collector.AnnotationKAIFractionContainer: "second"}
	if got := src.convert(kai).Sharing.GPUContainer; got != "second" {
		t.Errorf("KAI pod with gpu-fraction-container-name: container %q", got)
	}
	if err := src.lw.Apply(watch.Added, &Pod{ObjectMeta: kai.ObjectMeta, Spec: PodSpec{NodeName: node, Containers: kai.Spec.Containers}}); err != nil {
		t.Fatal(err)
	}
	if got := src.PodsInGPUGroup("g"); len(got) != 1 || got[0].Name != "k" {
		t.Errorf("PodsInGPUGroup(g) = %+v", got)
	}
}
