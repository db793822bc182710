package sim

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestParseLeadInAndUnscheduledErrors(t *testing.T) {
	t.Parallel()
	checkParseErrors(t, []parseErrorCase{
		{"lead_in at the end", head + "lead_in: 4h\n", "t.yaml:5: lead_in: 4h is not before the scenario's end at 4h"},
		{"lead_in malformed", head + "lead_in: soon\n", `t.yaml:5: lead_in: "soon" is not a duration such as 90s, 15m or 1h30m`},
		{"fault within the lead_in", head + "lead_in: 30m\nfaults:\n  - {kind: kubelet_down, from: 10m, to: 40m}\n",
			"t.yaml:7: faults[0].from: 10m is within the lead_in (30m), which agent --simulate plays at once on a virtual clock; a fault must start at or after it"},
		{"restart within the lead_in", head + "lead_in: 30m\nfaults:\n  - {kind: kubelet_restart, at: 29m}\n",
			"t.yaml:7: faults[0].at: 29m is within the lead_in (30m), which agent --simulate plays at once on a virtual clock; a fault must start at or after it"},
		{"unscheduled without name", head + "unscheduled:\n  - {namespace: a}\n", "t.yaml:6: unscheduled[0].name: missing"},
		{"unscheduled unknown key", head + "unscheduled:\n  - {namespace: a, name: w, node: x}\n",
			"t.yaml:6: unscheduled[0].node: unknown key; want one of namespace, name, container, owner, resource, gpus, from, to, priority_class, queue, claim"},
		{"unscheduled is a pod too", head + pod + "unscheduled:\n  - {namespace: a, name: p}\n", "t.yaml:10: unscheduled[0].name: a/p is already pods[0]"},
		{"unscheduled twice", head + "unscheduled:\n  - {namespace: a, name: w}\n  - {namespace: a, name: w}\n",
			"t.yaml:7: unscheduled[1].name: a/w is already unscheduled[0]"},
		{"unscheduled gpus zero", head + "unscheduled:\n  - {namespace: a, name: w, gpus: 0}\n",
			"t.yaml:6: unscheduled[0].gpus: 0 is not a whole number from 1 to 1024"},
		{"unscheduled resource", head + "unscheduled:\n  - {namespace: a, name: w, resource: amd.com/gpu}\n",
			`t.yaml:6: unscheduled[0].resource: "amd.com/gpu" is not nvidia.com/gpu, nvidia.com/gpu.shared or nvidia.com/mig-<profile>`},
		{"unscheduled to before from", head + "unscheduled:\n  - {namespace: a, name: w, from: 1h, to: 30m}\n",
			"t.yaml:6: unscheduled[0].to: 30m is not after from (1h)"},
	})
}

// kubeStateScenario: a pod on the node from 10m to 1h, a shared one from
// the start, and a pod that waits unscheduled for two GPUs from 5m to 30m.
const kubeStateScenario = `start: 2026-12-01T08:00:00Z
duration: 2h
lead_in: 20m
node: n1
system: dgxh100
gpus: 2
pods:
  - {namespace: ml, name: train-0, container: trainer, owner: {kind: Job, name: train}, devices: ["gpu:0"], from: 10m, to: 1h}
  - {namespace: ml, name: dev-0, resource: nvidia.com/gpu.shared, devices: ["gpu:1::0"]}
unscheduled:
  - {namespace: research, name: eval-0, container: eval, owner: {kind: Job, name: eval}, gpus: 2, from: 5m, to: 30m}
`

// TestKubeState: the simulated kube-state-metrics series follow the clock:
// the node's pods bound to the node, Pending before their from, Running,
// then Succeeded; the unscheduled pod Pending with node="" while it waits,
// and gone afterwards.
func TestKubeState(t *testing.T) {
	t.Parallel()
	sc, err := ParseScenario([]byte(kubeStateScenario), "ksm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if sc.LeadIn != 20*time.Minute || len(sc.Unscheduled) != 1 ||
		sc.Unscheduled[0] != (UnscheduledPod{Namespace: "research", Name: "eval-0", Container: "eval", Owner: Owner{"Job", "eval"}, Resource: ResourceGPU, GPUs: 2, From: 5 * time.Minute, To: 30 * time.Minute}) {
		t.Fatalf("lead_in %s, unscheduled %+v", sc.LeadIn, sc.Unscheduled)
	}
	clock := NewVirtualClock(sc.Start)
	n, err := NewNode(sc, clock)
	if err != nil {
		t.Fatal(err)
	}
	train, dev, eval := PodUID("n1", "ml", "train-0"), PodUID("n1", "ml", "dev-0"), PodUID("n1", "research", "eval-0")
	phases := func(ns, pod, uid, phase string) string {
		var b strings.Builder
		for _, ph := range []string{"Failed", "Pending", "Running", "Succeeded", "Unknown"} {
			v := "0"
			if ph == phase {
				v = "1"
			}
			b.WriteString(`kube_pod_status_phase{namespace="` + ns + `",phase="` + ph + `",pod="` + pod + `",uid="` + uid + `"} ` + v + "\n")
		}
		return b.String()
	}
	header := map[string]string{
		"kube_pod_info":                        "# HELP kube_pod_info [STABLE] Information about pod.\n# TYPE kube_pod_info gauge\n",
		"kube_pod_labels":                      "# HELP kube_pod_labels [STABLE] Kubernetes labels converted to Prometheus labels.\n# TYPE kube_pod_labels gauge\n",
		"kube_pod_status_phase":                "# HELP kube_pod_status_phase [STABLE] The pods current phase.\n# TYPE kube_pod_status_phase gauge\n",
		"kube_pod_container_resource_requests": "# HELP kube_pod_container_resource_requests [STABLE] The number of requested request resource by a container. It is recommended to use the kube_pod_resource_requests metric exposed by kube-scheduler instead, as it is more precise.\n# TYPE kube_pod_container_resource_requests gauge\n",
	}
	for _, tt := range []struct {
		at         time.Duration
		trainPhase string
		waiting    bool
	}{
		{0, "Pending", false},
		{7 * time.Minute, "Pending", true},
		{20 * time.Minute, "Running", true},
		{30 * time.Minute, "Running", false},
		{time.Hour, "Succeeded", false},
	} {
		clock.Set(sc.Start.Add(tt.at))
		info := header["kube_pod_info"] +
			`kube_pod_info{created_by_kind="<none>",created_by_name="<none>",host_ip="",host_network="false",namespace="ml",node="n1",pod="dev-0",pod_ip="",priority_class="",uid="` + dev + `"} 1` + "\n" +
			`kube_pod_info{created_by_kind="Job",created_by_name="train",host_ip="",host_network="false",namespace="ml",node="n1",pod="train-0",pod_ip="",priority_class="",uid="` + train + `"} 1` + "\n"
		labels := header["kube_pod_labels"] +
			`kube_pod_labels{label_kueue_x_k8s_io_queue_name="",namespace="ml",pod="dev-0",uid="` + dev + `"} 1` + "\n" +
			`kube_pod_labels{label_kueue_x_k8s_io_queue_name="",namespace="ml",pod="train-0",uid="` + train + `"} 1` + "\n"
		phase := header["kube_pod_status_phase"] + phases("ml", "dev-0", dev, "Running") + phases("ml", "train-0", train, tt.trainPhase)
		req := header["kube_pod_container_resource_requests"] +
			`kube_pod_container_resource_requests{container="main",namespace="ml",node="n1",pod="dev-0",resource="nvidia_com_gpu_shared",uid="` + dev + `",unit="integer"} 1` + "\n" +
			`kube_pod_container_resource_requests{container="trainer",namespace="ml",node="n1",pod="train-0",resource="nvidia_com_gpu",uid="` + train + `",unit="integer"} 1` + "\n"
		if tt.waiting {
			info += `kube_pod_info{created_by_kind="Job",created_by_name="eval",host_ip="",host_network="false",namespace="research",node="",pod="eval-0",pod_ip="",priority_class="",uid="` + eval + `"} 1` + "\n"
			labels += `kube_pod_labels{label_kueue_x_k8s_io_queue_name="",namespace="research",pod="eval-0",uid="` + eval + `"} 1` + "\n"
			phase += phases("research", "eval-0", eval, "Pending")
			req += `kube_pod_container_resource_requests{container="eval",namespace="research",node="",pod="eval-0",resource="nvidia_com_gpu",uid="` + eval + `",unit="integer"} 2` + "\n"
		}
		if err := testutil.CollectAndCompare(n.KubeState(), strings.NewReader(info+labels+phase+req)); err != nil {
			t.Errorf("at %s: %v", tt.at, err)
		}
	}
}
