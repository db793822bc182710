package sim

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
)

func TestParseQueueErrors(t *testing.T) {
	t.Parallel()
	classes := "priority_classes: {high: 1000, low: 10}\n"
	checkParseErrors(t, []parseErrorCase{
		{"class not a mapping", head + "priority_classes: [high]\n", `t.yaml:5: priority_classes: want a mapping of class names to values, got a list`},
		{"class value", head + "priority_classes: {high: lots}\n", "t.yaml:5: priority_classes.high: lots is not a whole number"},
		{"pod class unknown", head + classes + "pods:\n  - {namespace: a, name: p, devices: [\"gpu:0\"], priority_class: mid}\n",
			`t.yaml:7: pods[0].priority_class: "mid" is not a class of priority_classes (high, low)`},
		{"pod class without classes", head + "pods:\n  - {namespace: a, name: p, devices: [\"gpu:0\"], priority_class: mid}\n",
			`t.yaml:6: pods[0].priority_class: "mid" is not a class of priority_classes, which the scenario does not have`},
		{"unscheduled class unknown", head + classes + "unscheduled:\n  - {namespace: a, name: w, priority_class: mid}\n",
			`t.yaml:7: unscheduled[0].priority_class: "mid" is not a class of priority_classes (high, low)`},
		{"queue without name", head + "kueue:\n  - {cohort: c}\n", "t.yaml:6: kueue[0].cluster_queue: missing"},
		{"queue twice", head + "kueue:\n  - {cluster_queue: q}\n  - {cluster_queue: q}\n", "t.yaml:7: kueue[1].cluster_queue: q is given twice"},
		{"local queue form", head + "kueue:\n  - {cluster_queue: q, local_queues: [team]}\n", `t.yaml:6: kueue[0].local_queues[0]: "team" is not namespace/name`},
		{"local queue twice", head + "kueue:\n  - {cluster_queue: q, local_queues: [a/t]}\n  - {cluster_queue: r, local_queues: [a/t]}\n",
			"t.yaml:7: kueue[1].local_queues[0]: a/t already feeds q"},
		{"queue unknown key", head + "kueue:\n  - {cluster_queue: q, quota: 3}\n",
			"t.yaml:6: kueue[0].quota: unknown key; want one of cluster_queue, cohort, nominal_quota, borrowing_limit, local_queues"},
	})
}

// clusterA and clusterB are two nodes of one cluster with two Kueue
// ClusterQueues: research (4 GPUs of its own) and inference (none, so it
// borrows everything it holds, up to 4).
const clusterA = `start: 2026-12-01T08:00:00Z
duration: 2h
node: node-a
system: dgxh100
gpus: 4
priority_classes: {train-high: 100000, notebook: 10}
kueue:
  - {cluster_queue: research, cohort: gpus, nominal_quota: 4, local_queues: [research/team]}
  - {cluster_queue: inference, cohort: gpus, nominal_quota: 0, borrowing_limit: 4, local_queues: [serving/online]}
pods:
  - {namespace: research, name: train-0, priority_class: train-high, devices: ["gpu:0", "gpu:1"], to: 1h,
     labels: {kueue.x-k8s.io/local-queue-name: team, kueue.x-k8s.io/cluster-queue-name: research}}
  - {namespace: serving, name: embed-0, devices: ["gpu:2"], labels: {kueue.x-k8s.io/cluster-queue-name: inference}}
  - {namespace: lab, name: nb-0, priority_class: notebook, devices: ["gpu:3"]}
unscheduled:
  - {namespace: research, name: big-0, gpus: 4, priority_class: train-high, queue: team, from: 30m, to: 90m}
`

const clusterB = `start: 2026-12-01T08:00:00Z
duration: 2h
node: node-b
system: dgxh100
gpus: 2
priority_classes: {train-high: 100000, notebook: 10}
kueue:
  - {cluster_queue: inference, cohort: gpus, nominal_quota: 0, borrowing_limit: 4, local_queues: [serving/online]}
pods:
  - {namespace: serving, name: embed-1, devices: ["gpu:0", "gpu:1"], labels: {kueue.x-k8s.io/cluster-queue-name: inference}}
`

// TestClusterKueue: a ClusterQueue's usage adds up the running pods it
// admitted on every node; its pending workloads are the unscheduled pods
// of its LocalQueues; kube_pod_info names the pods' priority classes and
// kube_pod_labels their queues.
func TestClusterKueue(t *testing.T) {
	t.Parallel()
	a, err := ParseScenario([]byte(clusterA), "a.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b, err := ParseScenario([]byte(clusterB), "b.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCluster(a, b)
	if err != nil {
		t.Fatal(err)
	}
	kueue := func(researchUsage, pending, pendingGPUs string) string {
		return `# HELP kueue_cluster_queue_resource_usage Reports the cluster_queue's total resource usage within all the flavors
# TYPE kueue_cluster_queue_resource_usage gauge
kueue_cluster_queue_resource_usage{cluster_queue="inference",cohort="gpus",flavor="default",replica_role="standalone",resource="nvidia.com/gpu"} 3
kueue_cluster_queue_resource_usage{cluster_queue="research",cohort="gpus",flavor="default",replica_role="standalone",resource="nvidia.com/gpu"} ` + researchUsage + `
# HELP kueue_cluster_queue_borrowing_limit Reports the cluster_queue's resource borrowing limit within all the flavors. If borrowingLimit is unset, this metric reports +Inf.
# TYPE kueue_cluster_queue_borrowing_limit gauge
kueue_cluster_queue_borrowing_limit{cluster_queue="inference",cohort="gpus",flavor="default",replica_role="standalone",resource="nvidia.com/gpu"} 4
kueue_cluster_queue_borrowing_limit{cluster_queue="research",cohort="gpus",flavor="default",replica_role="standalone",resource="nvidia.com/gpu"} +Inf
# HELP kueue_pending_workloads The number of pending workloads, per 'cluster_queue' and 'status'.
# TYPE kueue_pending_workloads gauge
kueue_pending_workloads{cluster_queue="inference",replica_role="standalone",status="active"} 0
kueue_pending_workloads{cluster_queue="inference",replica_role="standalone",status="inadmissible"} 0
kueue_pending_workloads{cluster_queue="research",replica_role="standalone",status="active"} ` + pending + `
kueue_pending_workloads{cluster_queue="research",replica_role="standalone",status="inadmissible"} 0
# HELP kueue_cluster_queue_resource_pending Reports the cluster_queue's total pending resource requests. Unlike resource_reservation, pending workloads have not yet been assigned to flavors.
# TYPE kueue_cluster_queue_resource_pending gauge
kueue_cluster_queue_resource_pending{cluster_queue="inference",replica_role="standalone",resource="nvidia.com/gpu"} 0
kueue_cluster_queue_resource_pending{cluster_queue="research",replica_role="standalone",resource="nvidia.com/gpu"} ` + pendingGPUs + `
`
	}
	for _, tt := range []struct {
		at                            time.Duration
		usage, pending, pendingGPUs   string
		wantInfo, wantLabels, notInfo string
	}{
		{10 * time.Minute, "2", "0", "0",
			`kube_pod_info{created_by_kind="<none>",created_by_name="<none>",host_ip="",host_network="false",namespace="research",node="node-a",pod="train-0",pod_ip="",priority_class="train-high",uid="` + PodUID("node-a", "research", "train-0") + `"} 1`,
			`kube_pod_labels{label_kueue_x_k8s_io_queue_name="team",namespace="research",pod="train-0",uid="` + PodUID("node-a", "research", "train-0") + `"} 1`,
			`pod="big-0"`},
		{45 * time.Minute, "2", "1", "4",
			`kube_pod_info{created_by_kind="<none>",created_by_name="<none>",host_ip="",host_network="false",namespace="research",node="",pod="big-0",pod_ip="",priority_class="train-high",uid="` + PodUID("node-a", "research", "big-0") + `"} 1`,
			`kube_pod_labels{label_kueue_x_k8s_io_queue_name="team",namespace="research",pod="big-0",uid="` + PodUID("node-a", "research", "big-0") + `"} 1`,
			""},
		{70 * time.Minute, "0", "1", "4", `priority_class="notebook"`, `pod="nb-0"`, ""},
	} {
		col := c.At(a.Start.Add(tt.at))
		if err := testutil.CollectAndCompare(col, strings.NewReader(kueue(tt.usage, tt.pending, tt.pendingGPUs)),
			"kueue_cluster_queue_resource_usage", "kueue_cluster_queue_borrowing_limit", "kueue_pending_workloads", "kueue_cluster_queue_resource_pending"); err != nil {
			t.Errorf("at %s: %v", tt.at, err)
		}
		text := testText(t, col)
		for _, want := range []string{tt.wantInfo, tt.wantLabels} {
			if !strings.Contains(text, want) {
				t.Errorf("at %s: no %s in\n%s", tt.at, want, text)
			}
		}
		if tt.notInfo != "" && strings.Contains(text, tt.notInfo) {
			t.Errorf("at %s: %s is there before it waits", tt.at, tt.notInfo)
		}
	}
	if _, err := NewCluster(a, a); err == nil || !strings.Contains(err.Error(), "pod research/train-0 is a.yaml's too") {
		t.Errorf("a cluster of one scenario twice: %v", err)
	}
	b2 := *b
	b2.Kueue = []ClusterQueue{{Name: "inference", Cohort: "gpus", NominalQuota: 2, BorrowingLimit: 4, LocalQueues: []string{"serving/online"}}}
	if _, err := NewCluster(a, &b2); err == nil || !strings.Contains(err.Error(), "ClusterQueue inference differs") {
		t.Errorf("a ClusterQueue given two ways: %v", err)
	}
}

// testText is col's series in the text format.
func testText(t *testing.T, col prometheus.Collector) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(col)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// TestClusterOpenMetrics: the written series are what promtool backfills:
// each family once, each series' samples together, in time order, with the
// target's labels and without empty ones, and # EOF last.
func TestClusterOpenMetrics(t *testing.T) {
	t.Parallel()
	a, err := ParseScenario([]byte(clusterA), "a.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCluster(a)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	from := a.Start.Add(29 * time.Minute)
	if err := c.WriteOpenMetrics(&buf, from, from.Add(2*time.Minute), time.Minute, map[string]string{"job": "kube-state-metrics", "instance": "ksm:8080"}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	uid := PodUID("node-a", "research", "big-0")
	want := `kube_pod_container_resource_requests{container="main",instance="ksm:8080",job="kube-state-metrics",namespace="research",pod="big-0",resource="nvidia_com_gpu",uid="` + uid + `",unit="integer"} 4 ` +
		itoa(from.Add(time.Minute).Unix()) + "\n" +
		`kube_pod_container_resource_requests{container="main",instance="ksm:8080",job="kube-state-metrics",namespace="research",pod="big-0",resource="nvidia_com_gpu",uid="` + uid + `",unit="integer"} 4 ` +
		itoa(from.Add(2*time.Minute).Unix()) + "\n"
	if !strings.Contains(out, want) {
		t.Errorf("the waiting pod's requests, from 30m, bound to no node (no node label):\nwant\n%s\nin\n%s", want, out)
	}
	if !strings.HasSuffix(out, "# EOF\n") || strings.Count(out, "# TYPE kube_pod_info gauge\n") != 1 {
		t.Errorf("not one family each and # EOF last:\n%s", out)
	}
	if !strings.Contains(out, `kueue_cluster_queue_borrowing_limit{cluster_queue="research",cohort="gpus",flavor="default",instance="ksm:8080",job="kube-state-metrics",replica_role="standalone",resource="nvidia.com/gpu"} +Inf `) {
		t.Errorf("no unset borrowing limit as +Inf:\n%s", out)
	}
}

func itoa(i int64) string { return strconv.FormatInt(i, 10) }

// TestClusterClaims: an unscheduled pod that waits on a DRA claim requests
// no resource; within its window its claim is there, unallocated, asking
// for its GPUs and owned by it, as kube-state-metrics with
// deploy/kube-state-metrics/resourceclaims.yaml serves it; outside it there
// is no claim.
func TestClusterClaims(t *testing.T) {
	t.Parallel()
	sc, err := ParseScenario([]byte(`start: 2026-12-01T08:00:00Z
duration: 2h
node: node-d
system: dgxh100
gpus: 2
priority_classes: {train-high: 1000}
unscheduled:
  - {namespace: research, name: dra-0, claim: dra-0-gpu, gpus: 3, priority_class: train-high, from: 30m, to: 90m}
`), "d.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCluster(sc)
	if err != nil {
		t.Fatal(err)
	}
	const want = `# HELP kube_customresource_resourceclaim_request_devices Devices a request of a DRA ResourceClaim asks for (exactly.count).
# TYPE kube_customresource_resourceclaim_request_devices gauge
kube_customresource_resourceclaim_request_devices{allocation_mode="ExactCount",customresource_group="resource.k8s.io",customresource_kind="ResourceClaim",customresource_version="v1",device_class="gpu.nvidia.com",namespace="research",request="gpu",resourceclaim="dra-0-gpu"} 3
# HELP kube_customresource_resourceclaim_owner_info An owner of a DRA ResourceClaim (the pod of a claim made from a template).
# TYPE kube_customresource_resourceclaim_owner_info gauge
kube_customresource_resourceclaim_owner_info{customresource_group="resource.k8s.io",customresource_kind="ResourceClaim",customresource_version="v1",namespace="research",owner_kind="Pod",owner_name="dra-0",resourceclaim="dra-0-gpu"} 1
`
	names := []string{"kube_customresource_resourceclaim_request_devices", "kube_customresource_resourceclaim_owner_info", "kube_pod_container_resource_requests"}
	if err := testutil.CollectAndCompare(c.At(sc.Start.Add(45*time.Minute)), strings.NewReader(want), names...); err != nil {
		t.Errorf("waiting: %v", err)
	}
	text := testText(t, c.At(sc.Start.Add(45*time.Minute)))
	if !strings.Contains(text, `kube_pod_status_phase{namespace="research",phase="Pending",pod="dra-0"`) {
		t.Errorf("the claim's pod is not Pending in\n%s", text)
	}
	for _, at := range []time.Duration{10 * time.Minute, 90 * time.Minute} {
		if n := testutil.CollectAndCount(c.At(sc.Start.Add(at)), names...); n != 0 {
			t.Errorf("at %s: %d claim or request series, want none", at, n)
		}
	}
	checkParseErrors(t, []parseErrorCase{
		{"claim and resource", head + "unscheduled:\n  - {namespace: a, name: w, resource: nvidia.com/gpu, claim: c}\n",
			"t.yaml:6: unscheduled[0].claim: a pod that waits on a DRA claim requests no resource; drop resource"},
		{"claim empty", head + "unscheduled:\n  - {namespace: a, name: w, claim: \"\"}\n",
			"t.yaml:6: unscheduled[0].claim: must not be empty"},
	})
}
