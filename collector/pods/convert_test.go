package pods

import (
	"testing"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpuxray/gpuxray/collector"
)

// TestConvertScheduling: a pod's priority class and priority, and its Kueue
// queues, reach collector.Pod: the queue-name label its author set wins
// over the local-queue-name Kueue writes; the ClusterQueue is taken only
// where the pod names it; a pod of no class has no priority.
func TestConvertScheduling(t *testing.T) {
	t.Parallel()
	src, err := New(testConfig(), podClient(fake.NewClientset()), nil)
	if err != nil {
		t.Fatal(err)
	}
	prio := int32(100000)
	for _, tt := range []struct {
		name   string
		labels map[string]string
		class  string
		prio   *int32
		want   collector.Scheduling
	}{
		{"kueue job's pod", map[string]string{"kueue.x-k8s.io/local-queue-name": "team-a", "kueue.x-k8s.io/cluster-queue-name": "cq-a"},
			"train-high", &prio, collector.Scheduling{PriorityClass: "train-high", Priority: 100000, HasPriority: true, Queue: "team-a", ClusterQueue: "cq-a"}},
		{"plain pod queued by Kueue", map[string]string{"kueue.x-k8s.io/queue-name": "team-b", "kueue.x-k8s.io/local-queue-name": "other"},
			"", nil, collector.Scheduling{Queue: "team-b"}},
		{"no class, no queue", nil, "", nil, collector.Scheduling{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			core := vllmPod("uid-" + tt.name)
			core.Labels = tt.labels
			core.Spec.PriorityClassName, core.Spec.Priority = tt.class, tt.prio
			p := asPod(core)
			if got := src.convert(p).Scheduling; got != tt.want {
				t.Errorf("as listed: %+v, want %+v", got, tt.want)
			}
		})
	}
}
