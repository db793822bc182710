package sim

import "testing"

// TestDemoWorkloads: every pod of the embedded demo resolves to the workload
// README's owner chains promise; the vLLM pod's ReplicaSet to its
// Deployment, as the pod informer resolves a Deployment's pods.
func TestDemoWorkloads(t *testing.T) {
	t.Parallel()
	sc := Demo()
	n, err := NewNode(sc, NewVirtualClock(sc.Start))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]string{
		"research/llama-train-0":     {"Job", "llama-train"},
		"data-science/notebook-0":    {"StatefulSet", "notebook"},
		"ml-dev/embed-nightly-5xq2m": {"Job", "embed-nightly"},
		"ml-dev/dev-alice-0":         {"StatefulSet", "dev-alice"},
	}
	deployments := 0
	for _, sp := range sc.Pods {
		p, ok := n.Pod(sp.Namespace, sp.Name)
		if !ok {
			t.Fatalf("Pod(%s/%s) not found", sp.Namespace, sp.Name)
		}
		key := sp.Namespace + "/" + sp.Name
		if sp.Owner.Kind == "ReplicaSet" {
			deployments++
			if p.WorkloadKind != "Deployment" || p.Workload != "vllm-llama" {
				t.Errorf("%s (owned by ReplicaSet %s) resolves to %s %q, want Deployment \"vllm-llama\"", key, sp.Owner.Name, p.WorkloadKind, p.Workload)
			}
			continue
		}
		w, ok := want[key]
		if !ok {
			t.Errorf("demo pod %s has no expected workload in this test", key)
			continue
		}
		if p.WorkloadKind != w[0] || p.Workload != w[1] {
			t.Errorf("%s resolves to %s %q, want %s %q", key, p.WorkloadKind, p.Workload, w[0], w[1])
		}
	}
	if deployments != 1 {
		t.Errorf("%d demo pods are owned by a ReplicaSet, want 1 (the vLLM server)", deployments)
	}
}
