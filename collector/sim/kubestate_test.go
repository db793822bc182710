package sim

import (
	"reflect"
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
			"t.yaml:6: unscheduled[0].node: unknown key; want one of namespace, name, container, owner, resource, gpus, from, to, priority_class, queue, claim, node_selector, suspended"},
		{"node selector not a mapping", head + "unscheduled:\n  - {namespace: a, name: w, node_selector: [x]}\n",
			"t.yaml:6: unscheduled[0].node_selector: want a mapping of names to values, got a list"},
		{"suspended not a boolean", head + "unscheduled:\n  - {namespace: a, name: w, suspended: yes}\n",
			`t.yaml:6: unscheduled[0].suspended: want true or false, got "yes"`},
		{"suspended without a queue", head + "unscheduled:\n  - {namespace: a, name: w, suspended: true}\n",
			"t.yaml:6: unscheduled[0].suspended: a suspended job waits in a Kueue LocalQueue: queue must name one of kueue's local_queues in a"},
		{"suspended with a claim", head + "unscheduled:\n  - {namespace: a, name: w, claim: c, suspended: true}\n",
			"t.yaml:6: unscheduled[0].suspended: a suspended job has no pod, so no claim; drop claim"},
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
		!reflect.DeepEqual(sc.Unscheduled[0], UnscheduledPod{Namespace: "research", Name: "eval-0", Container: "eval", Owner: Owner{"Job", "eval"}, Resource: ResourceGPU, GPUs: 2, From: 5 * time.Minute, To: 30 * time.Minute}) {
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
		if err := testutil.CollectAndCompare(n.KubeState(), strings.NewReader(info+labels+phase+req), "kube_pod_info", "kube_pod_labels", "kube_pod_status_phase", "kube_pod_container_resource_requests"); err != nil {
			t.Errorf("at %s: %v", tt.at, err)
		}
	}
}

// TestKubeStateQueueShapes: every pod's creation at its from and its node
// selector, as kube-state-metrics serves them (kube_pod_created,
// kube_pod_nodeselectors with nodeselector_<key> labels); a suspended job
// has no pod series, only Kueue's pending series of its ClusterQueue and
// its Workload's series of deploy/kube-state-metrics/kueue.yaml.
func TestKubeStateQueueShapes(t *testing.T) {
	t.Parallel()
	sc, err := ParseScenario([]byte(`start: 2026-12-01T08:00:00Z
duration: 2h
node: n1
system: dgxa100
gpus: 2
priority_classes: {training: 1000}
kueue:
  - {cluster_queue: research, nominal_quota: 4, local_queues: [research/team-a]}
pods:
  - {namespace: ml, name: train-0, devices: ["gpu:0"], from: 10m}
unscheduled:
  - {namespace: research, name: h100-0, gpus: 2, from: 5m, node_selector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}}
  - {namespace: research, name: big-0, owner: {kind: Job, name: big}, gpus: 8, from: 20m, queue: team-a, priority_class: training, suspended: true,
     node_selector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}}
`), "q.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if u := sc.Unscheduled[1]; !u.Suspended || u.NodeSelector[ProductLabel] != "NVIDIA-H100-80GB-HBM3" {
		t.Fatalf("unscheduled[1] = %+v", u)
	}
	clock := NewVirtualClock(sc.Start.Add(30 * time.Minute))
	n, err := NewNode(sc, clock)
	if err != nil {
		t.Fatal(err)
	}
	train, h100 := PodUID("n1", "ml", "train-0"), PodUID("n1", "research", "h100-0")
	gvk := `customresource_group="kueue.x-k8s.io",customresource_kind="Workload",customresource_version="v1beta2",`
	want := `# HELP kube_pod_created [STABLE] Unix creation timestamp
# TYPE kube_pod_created gauge
kube_pod_created{namespace="ml",pod="train-0",uid="` + train + `"} 1.7961126e+09
kube_pod_created{namespace="research",pod="h100-0",uid="` + h100 + `"} 1.7961123e+09
# HELP kube_pod_nodeselectors Describes the Pod nodeSelectors.
# TYPE kube_pod_nodeselectors gauge
kube_pod_nodeselectors{namespace="ml",nodeselector_nvidia_com_gpu_product="",pod="train-0",uid="` + train + `"} 1
kube_pod_nodeselectors{namespace="research",nodeselector_nvidia_com_gpu_product="NVIDIA-H100-80GB-HBM3",pod="h100-0",uid="` + h100 + `"} 1
# HELP kueue_cluster_queue_resource_pending Reports the cluster_queue's total pending resource requests. Unlike resource_reservation, pending workloads have not yet been assigned to flavors.
# TYPE kueue_cluster_queue_resource_pending gauge
kueue_cluster_queue_resource_pending{cluster_queue="research",replica_role="standalone",resource="nvidia.com/gpu"} 8
# HELP kueue_pending_workloads The number of pending workloads, per 'cluster_queue' and 'status'.
# TYPE kueue_pending_workloads gauge
kueue_pending_workloads{cluster_queue="research",replica_role="standalone",status="active"} 1
kueue_pending_workloads{cluster_queue="research",replica_role="standalone",status="inadmissible"} 0
# HELP kube_customresource_kueue_workload_pending_gpus GPUs (nvidia.com/gpu) a pod set of a Kueue Workload not admitted asks for, all its pods (status.resourceRequests).
# TYPE kube_customresource_kueue_workload_pending_gpus gauge
kube_customresource_kueue_workload_pending_gpus{` + gvk + `namespace="research",podset="main",workload="job-big"} 8
# HELP kube_customresource_kueue_workload_info A Kueue Workload's LocalQueue and priority class.
# TYPE kube_customresource_kueue_workload_info gauge
kube_customresource_kueue_workload_info{` + gvk + `namespace="research",priority_class="training",queue="team-a",workload="job-big"} 1
# HELP kube_customresource_kueue_workload_priority A Kueue Workload's priority (spec.priority).
# TYPE kube_customresource_kueue_workload_priority gauge
kube_customresource_kueue_workload_priority{` + gvk + `namespace="research",workload="job-big"} 1000
# HELP kube_customresource_kueue_workload_podset_pods Pods of a pod set of a Kueue Workload, with the GPU product its node selector names.
# TYPE kube_customresource_kueue_workload_podset_pods gauge
kube_customresource_kueue_workload_podset_pods{` + gvk + `gpu_type="NVIDIA-H100-80GB-HBM3",namespace="research",podset="main",workload="job-big"} 1
# HELP kube_customresource_kueue_workload_created A Kueue Workload's creation time, Unix seconds.
# TYPE kube_customresource_kueue_workload_created gauge
kube_customresource_kueue_workload_created{` + gvk + `namespace="research",workload="job-big"} 1.7961132e+09
# HELP kube_customresource_kueue_workload_owner_info An owner of a Kueue Workload (the Job or Pod it stands for).
# TYPE kube_customresource_kueue_workload_owner_info gauge
kube_customresource_kueue_workload_owner_info{` + gvk + `namespace="research",owner_kind="Job",owner_name="big",workload="job-big"} 1
# HELP kube_customresource_kueue_localqueue_info The ClusterQueue a Kueue LocalQueue feeds.
# TYPE kube_customresource_kueue_localqueue_info gauge
kube_customresource_kueue_localqueue_info{cluster_queue="research",customresource_group="kueue.x-k8s.io",customresource_kind="LocalQueue",customresource_version="v1beta2",local_queue="team-a",namespace="research"} 1
`
	names := []string{"kube_pod_created", "kube_pod_nodeselectors", "kueue_cluster_queue_resource_pending", "kueue_pending_workloads",
		"kube_customresource_kueue_workload_pending_gpus", "kube_customresource_kueue_workload_info", "kube_customresource_kueue_workload_priority",
		"kube_customresource_kueue_workload_podset_pods", "kube_customresource_kueue_workload_created", "kube_customresource_kueue_workload_owner_info",
		"kube_customresource_kueue_localqueue_info"}
	if err := testutil.CollectAndCompare(n.KubeState(), strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	// No pod series for the suspended job.
	if c := testutil.CollectAndCount(n.KubeState(), "kube_pod_info"); c != 2 {
		t.Errorf("kube_pod_info series = %d, want 2: the suspended job has no pod", c)
	}
}
