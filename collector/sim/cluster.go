package sim

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpuxray/gpuxray/collector/workload"
)

// Cluster is what the cluster around one or more simulated nodes shows
// beyond the nodes' own agents: kube-state-metrics' pod series and Kueue's
// ClusterQueue series, as functions of time. A ClusterQueue's usage is the
// GPUs of all the nodes' running pods it admitted, so a cluster of several
// nodes is one Cluster, not one per node.
type Cluster struct {
	scs    []*Scenario
	queues []ClusterQueue
	// selectors are the node selector keys of all the pods, sorted: the
	// label names of kube_pod_nodeselectors.
	selectors []string
	nodeSel   *prometheus.Desc
}

// newCluster is the cluster of scs with queues, its descriptors built.
func newCluster(scs []*Scenario, queues []ClusterQueue) *Cluster {
	c := &Cluster{scs: scs, queues: queues}
	keys := map[string]bool{}
	for _, sc := range scs {
		for _, u := range sc.Unscheduled {
			for k := range u.NodeSelector {
				keys[k] = true
			}
		}
	}
	for k := range keys {
		c.selectors = append(c.selectors, k)
	}
	slices.Sort(c.selectors)
	// kube-state-metrics names each selector's label nodeselector_<key>,
	// its key's characters outside [a-zA-Z0-9_] made "_"
	// (internal/store/pod.go, kubeMapToPrometheusLabels).
	names := []string{"namespace", "pod", "uid"}
	for _, k := range c.selectors {
		names = append(names, "nodeselector_"+ksmUnsafe.ReplaceAllString(k, "_"))
	}
	c.nodeSel = prometheus.NewDesc("kube_pod_nodeselectors", "Describes the Pod nodeSelectors.", names, nil)
	return c
}

// NewCluster returns the cluster of scenarios scs (one per node). Their
// ClusterQueues are merged: a queue given by several scenarios must be
// given alike, and a pod name is the cluster's once.
func NewCluster(scs ...*Scenario) (*Cluster, error) {
	var queues []ClusterQueue
	pods := map[string]string{}
	for _, sc := range scs {
		for _, cq := range sc.Kueue {
			i := slices.IndexFunc(queues, func(o ClusterQueue) bool { return o.Name == cq.Name })
			switch {
			case i < 0:
				queues = append(queues, cq)
			case !equalQueues(queues[i], cq):
				return nil, fmt.Errorf("%s: ClusterQueue %s differs from the one another scenario gives", sc.Name, cq.Name)
			}
		}
		names := make([]string, 0, len(sc.Pods)+len(sc.Unscheduled))
		for _, p := range sc.Pods {
			names = append(names, p.Namespace+"/"+p.Name)
		}
		for _, u := range sc.Unscheduled {
			names = append(names, u.Namespace+"/"+u.Name)
		}
		for _, n := range names {
			if prev, dup := pods[n]; dup {
				return nil, fmt.Errorf("%s: pod %s is %s's too", sc.Name, n, prev)
			}
			pods[n] = sc.Name
		}
	}
	return newCluster(scs, queues), nil
}

func equalQueues(a, b ClusterQueue) bool {
	return a.Name == b.Name && a.Cohort == b.Cohort && a.NominalQuota == b.NominalQuota &&
		a.BorrowingLimit == b.BorrowingLimit && slices.Equal(a.LocalQueues, b.LocalQueues)
}

// kube-state-metrics' pod series, with its label names.
var (
	ksmPodInfo = prometheus.NewDesc("kube_pod_info", "[STABLE] Information about pod.",
		[]string{"namespace", "pod", "uid", "host_ip", "pod_ip", "node", "created_by_kind", "created_by_name", "priority_class", "host_network"}, nil)
	ksmPodPhase = prometheus.NewDesc("kube_pod_status_phase", "[STABLE] The pods current phase.",
		[]string{"namespace", "pod", "uid", "phase"}, nil)
	ksmPodRequests = prometheus.NewDesc("kube_pod_container_resource_requests",
		"[STABLE] The number of requested request resource by a container. It is recommended to use the kube_pod_resource_requests metric exposed by kube-scheduler instead, as it is more precise.",
		[]string{"namespace", "pod", "uid", "container", "node", "resource", "unit"}, nil)
	// ksmPodCreated is the pod's creation time, in Unix seconds
	// (internal/store/pod.go, createPodCreatedFamilyGenerator).
	ksmPodCreated = prometheus.NewDesc("kube_pod_created", "[STABLE] Unix creation timestamp",
		[]string{"namespace", "pod", "uid"}, nil)
	// ksmPodLabels is kube_pod_labels with kube-state-metrics run with
	// --metric-labels-allowlist=pods=[kueue.x-k8s.io/queue-name]: a label
	// the pod does not have is empty, which Prometheus reads as absent.
	ksmPodLabels = prometheus.NewDesc("kube_pod_labels", "[STABLE] Kubernetes labels converted to Prometheus labels.",
		[]string{"namespace", "pod", "uid", "label_kueue_x_k8s_io_queue_name"}, nil)
)

// The ResourceClaim series of kube-state-metrics' custom-resource-state
// configuration deploy/kube-state-metrics/resourceclaims.yaml, with its
// label names.
var (
	ksmClaimDevices = prometheus.NewDesc("kube_customresource_resourceclaim_request_devices", "Devices a request of a DRA ResourceClaim asks for (exactly.count).",
		[]string{"customresource_group", "customresource_kind", "customresource_version", "namespace", "resourceclaim", "request", "device_class", "allocation_mode"}, nil)
	ksmClaimOwner = prometheus.NewDesc("kube_customresource_resourceclaim_owner_info", "An owner of a DRA ResourceClaim (the pod of a claim made from a template).",
		[]string{"customresource_group", "customresource_kind", "customresource_version", "namespace", "resourceclaim", "owner_kind", "owner_name"}, nil)
)

// claimGVK is the labels kube-state-metrics' custom-resource-state puts on
// every series of a ResourceClaim.
var claimGVK = []string{"resource.k8s.io", "ResourceClaim", "v1"}

// The Kueue Workload and LocalQueue series of kube-state-metrics'
// custom-resource-state configuration deploy/kube-state-metrics/kueue.yaml,
// with its label names: what a Workload Kueue has not admitted asks for
// (status.resourceRequests, which Kueue fills only then), its pod sets,
// priority, creation and owner, and which ClusterQueue each LocalQueue
// feeds.
var (
	gvkLabels       = []string{"customresource_group", "customresource_kind", "customresource_version"}
	ksmWorkloadGPUs = prometheus.NewDesc("kube_customresource_kueue_workload_pending_gpus", "GPUs (nvidia.com/gpu) a pod set of a Kueue Workload not admitted asks for, all its pods (status.resourceRequests).",
		append(slices.Clone(gvkLabels), "namespace", "workload", "podset"), nil)
	ksmWorkloadInfo = prometheus.NewDesc("kube_customresource_kueue_workload_info", "A Kueue Workload's LocalQueue and priority class.",
		append(slices.Clone(gvkLabels), "namespace", "workload", "queue", "priority_class"), nil)
	ksmWorkloadPriority = prometheus.NewDesc("kube_customresource_kueue_workload_priority", "A Kueue Workload's priority (spec.priority).",
		append(slices.Clone(gvkLabels), "namespace", "workload"), nil)
	ksmWorkloadPodSet = prometheus.NewDesc("kube_customresource_kueue_workload_podset_pods", "Pods of a pod set of a Kueue Workload, with the GPU product its node selector names.",
		append(slices.Clone(gvkLabels), "namespace", "workload", "podset", "gpu_type"), nil)
	ksmWorkloadCreated = prometheus.NewDesc("kube_customresource_kueue_workload_created", "A Kueue Workload's creation time, Unix seconds.",
		append(slices.Clone(gvkLabels), "namespace", "workload"), nil)
	ksmWorkloadOwner = prometheus.NewDesc("kube_customresource_kueue_workload_owner_info", "An owner of a Kueue Workload (the Job or Pod it stands for).",
		append(slices.Clone(gvkLabels), "namespace", "workload", "owner_kind", "owner_name"), nil)
	ksmLocalQueue = prometheus.NewDesc("kube_customresource_kueue_localqueue_info", "The ClusterQueue a Kueue LocalQueue feeds.",
		append(slices.Clone(gvkLabels), "namespace", "local_queue", "cluster_queue"), nil)
)

// workloadGVK and localQueueGVK are the labels custom-resource-state puts
// on the Kueue series (Kueue's storage version, v1beta2).
var (
	workloadGVK   = []string{"kueue.x-k8s.io", "Workload", "v1beta2"}
	localQueueGVK = []string{"kueue.x-k8s.io", "LocalQueue", "v1beta2"}
)

// Kueue's ClusterQueue series, with its label names (Kueue 0.18; the
// resource is Kubernetes' name, nvidia.com/gpu, and a scenario's queues
// have one flavor, "default").
var (
	kueueNominalQuota = prometheus.NewDesc("kueue_cluster_queue_nominal_quota", "Reports the cluster_queue's resource nominal quota within all the flavors",
		[]string{"cohort", "cluster_queue", "flavor", "resource", "replica_role"}, nil)
	kueueBorrowingLimit = prometheus.NewDesc("kueue_cluster_queue_borrowing_limit", "Reports the cluster_queue's resource borrowing limit within all the flavors. If borrowingLimit is unset, this metric reports +Inf.",
		[]string{"cohort", "cluster_queue", "flavor", "resource", "replica_role"}, nil)
	kueueUsage = prometheus.NewDesc("kueue_cluster_queue_resource_usage", "Reports the cluster_queue's total resource usage within all the flavors",
		[]string{"cohort", "cluster_queue", "flavor", "resource", "replica_role"}, nil)
	kueuePendingResource = prometheus.NewDesc("kueue_cluster_queue_resource_pending", "Reports the cluster_queue's total pending resource requests. Unlike resource_reservation, pending workloads have not yet been assigned to flavors.",
		[]string{"cluster_queue", "resource", "replica_role"}, nil)
	kueuePending = prometheus.NewDesc("kueue_pending_workloads", "The number of pending workloads, per 'cluster_queue' and 'status'.",
		[]string{"cluster_queue", "status", "replica_role"}, nil)
	kueueAdmitted = prometheus.NewDesc("kueue_admitted_active_workloads", "The number of admitted Workloads that are active, per 'cluster_queue'",
		[]string{"cluster_queue", "replica_role"}, nil)
)

// ksmPhases are the phases kube-state-metrics writes a series for, each pod.
var ksmPhases = []string{"Pending", "Succeeded", "Failed", "Unknown", "Running"}

// ksmUnsafe is what kube-state-metrics replaces with "_" in a resource name
// to make it a label value: nvidia.com/gpu is nvidia_com_gpu.
var ksmUnsafe = regexp.MustCompile(`[^a-zA-Z0-9_]`)

// At returns the series of the cluster at time t. kube-state-metrics': for
// every pod of every node kube_pod_info (with its priority class),
// kube_pod_labels (its Kueue queue-name label), kube_pod_status_phase (a
// series per phase, 1 for the pod's) and kube_pod_container_resource_requests
// of its GPU resource (unit="integer"); a node's pod is bound to the node,
// and Pending before from, Running, then Succeeded; an unscheduled pod is
// there only within its [from, to), Pending and bound to no node (node="").
// An unscheduled pod that waits on a claim requests nothing; within its
// [from, to) its claim is there, unallocated and owned by the pod
// (kube_customresource_resourceclaim_request_devices, _owner_info).
// Kueue's, for each ClusterQueue: its nominal quota and borrowing limit; its
// usage, the GPUs (nvidia.com/gpu) of the running pods labelled with its
// name; its pending workloads, the unscheduled pods whose LocalQueue feeds
// it (status "active"), and their GPUs; its admitted workloads, one per
// running pod.
func (c *Cluster) At(t time.Time) prometheus.Collector {
	if c.nodeSel == nil {
		c = newCluster(c.scs, c.queues)
	}
	return clusterState{c: c, now: func() time.Time { return t }}
}

type clusterState struct {
	c   *Cluster
	now func() time.Time
}

func (k clusterState) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{ksmPodInfo, ksmPodPhase, ksmPodRequests, ksmPodLabels, ksmPodCreated, k.c.nodeSel, ksmClaimDevices, ksmClaimOwner} {
		ch <- d
	}
	if len(k.c.queues) > 0 {
		for _, d := range []*prometheus.Desc{kueueNominalQuota, kueueBorrowingLimit, kueueUsage, kueuePendingResource, kueuePending, kueueAdmitted,
			ksmWorkloadGPUs, ksmWorkloadInfo, ksmWorkloadPriority, ksmWorkloadPodSet, ksmWorkloadCreated, ksmWorkloadOwner, ksmLocalQueue} {
			ch <- d
		}
	}
}

func (k clusterState) Collect(ch chan<- prometheus.Metric) {
	now := k.now()
	usage, admitted := map[string]float64{}, map[string]float64{}
	pending, pendingGPUs := map[string]float64{}, map[string]float64{}
	for _, sc := range k.c.scs {
		t := now.Sub(sc.Start)
		for _, p := range sc.Pods {
			phase := "Running"
			switch {
			case t < p.From:
				phase = "Pending"
			case t >= p.To:
				phase = "Succeeded"
			}
			queue, cq := workload.KueueQueues(p.Labels)
			uid := PodUID(sc.Node, p.Namespace, p.Name)
			podSeries(ch, p.Namespace, p.Name, uid, p.Container, sc.Node, phase, p.Owner, p.Resource, len(p.Devices), p.PriorityClass, queue)
			k.podMeta(ch, p.Namespace, p.Name, uid, sc.Start.Add(p.From), nil)
			if phase == "Running" && cq != "" && p.Resource == ResourceGPU {
				usage[cq] += float64(len(p.Devices))
				admitted[cq]++
			}
		}
		for _, u := range sc.Unscheduled {
			if t < u.From || t >= u.To {
				continue
			}
			if u.Suspended {
				// No pod: Kueue's pending series and the Workload's.
				cq := k.clusterQueueOf(u.Namespace, u.Queue)
				pending[cq]++
				pendingGPUs[cq] += float64(u.GPUs)
				k.workloadSeries(ch, sc, u)
				continue
			}
			uid := PodUID(sc.Node, u.Namespace, u.Name)
			podSeries(ch, u.Namespace, u.Name, uid, u.Container, "", "Pending", u.Owner, u.Resource, u.GPUs, u.PriorityClass, u.Queue)
			k.podMeta(ch, u.Namespace, u.Name, uid, sc.Start.Add(u.From), u.NodeSelector)
			if u.Claim != "" {
				claim := append(slices.Clone(claimGVK), u.Namespace, u.Claim)
				ch <- prometheus.MustNewConstMetric(ksmClaimDevices, prometheus.GaugeValue, float64(u.GPUs), append(claim, "gpu", "gpu.nvidia.com", "ExactCount")...)
				ch <- prometheus.MustNewConstMetric(ksmClaimOwner, prometheus.GaugeValue, 1, append(claim, "Pod", u.Name)...)
			}
			if cq := k.clusterQueueOf(u.Namespace, u.Queue); cq != "" && u.Resource == ResourceGPU {
				pending[cq]++
				pendingGPUs[cq] += float64(u.GPUs)
			}
		}
	}
	for _, cq := range k.c.queues {
		gauge := func(d *prometheus.Desc, v float64, lv ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, lv...)
		}
		limit := math.Inf(1)
		if cq.BorrowingLimit >= 0 {
			limit = float64(cq.BorrowingLimit)
		}
		quota := []string{cq.Cohort, cq.Name, "default", ResourceGPU, "standalone"}
		gauge(kueueNominalQuota, float64(cq.NominalQuota), quota...)
		gauge(kueueBorrowingLimit, limit, quota...)
		gauge(kueueUsage, usage[cq.Name], quota...)
		gauge(kueuePendingResource, pendingGPUs[cq.Name], cq.Name, ResourceGPU, "standalone")
		gauge(kueuePending, pending[cq.Name], cq.Name, "active", "standalone")
		gauge(kueuePending, 0, cq.Name, "inadmissible", "standalone")
		gauge(kueueAdmitted, admitted[cq.Name], cq.Name, "standalone")
		for _, lq := range cq.LocalQueues {
			ns, name, _ := strings.Cut(lq, "/")
			gauge(ksmLocalQueue, 1, append(slices.Clone(localQueueGVK), ns, name, cq.Name)...)
		}
	}
}

// podMeta sends a pod's creation time and its node selector.
func (k clusterState) podMeta(ch chan<- prometheus.Metric, namespace, name, uid string, created time.Time, selector map[string]string) {
	ch <- prometheus.MustNewConstMetric(ksmPodCreated, prometheus.GaugeValue, float64(created.Unix()), namespace, name, uid)
	lv := []string{namespace, name, uid}
	for _, key := range k.c.selectors {
		lv = append(lv, selector[key])
	}
	ch <- prometheus.MustNewConstMetric(k.c.nodeSel, prometheus.GaugeValue, 1, lv...)
}

// WorkloadName is the name of the Kueue Workload that stands for a
// suspended job: "job-" and the Job's name (its owner's, or the entry's
// own). Kueue adds a hash of the Job's UID, which a scenario has not.
func WorkloadName(u UnscheduledPod) string {
	if u.Owner.Name != "" {
		return "job-" + u.Owner.Name
	}
	return "job-" + u.Name
}

// workloadSeries sends the series deploy/kube-state-metrics/kueue.yaml
// makes of a suspended job's Workload: one pod set, "main", of one pod of
// its GPUs, created at its from, not admitted.
func (k clusterState) workloadSeries(ch chan<- prometheus.Metric, sc *Scenario, u UnscheduledPod) {
	wl := append(slices.Clone(workloadGVK), u.Namespace, WorkloadName(u))
	g := func(d *prometheus.Desc, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append(slices.Clone(wl), lv...)...)
	}
	owner := u.Owner
	if owner.Kind == "" {
		owner = Owner{Kind: "Job", Name: u.Name}
	}
	g(ksmWorkloadGPUs, float64(u.GPUs), "main")
	g(ksmWorkloadInfo, 1, u.Queue, u.PriorityClass)
	g(ksmWorkloadPriority, float64(sc.PriorityOf(u.PriorityClass)))
	g(ksmWorkloadPodSet, 1, "main", u.NodeSelector[ProductLabel])
	g(ksmWorkloadCreated, float64(sc.Start.Add(u.From).Unix()))
	g(ksmWorkloadOwner, 1, owner.Kind, owner.Name)
}

// clusterQueueOf returns the ClusterQueue LocalQueue namespace/queue
// feeds, "" for none.
func (k clusterState) clusterQueueOf(namespace, queue string) string {
	if queue == "" {
		return ""
	}
	for _, cq := range k.c.queues {
		if slices.Contains(cq.LocalQueues, namespace+"/"+queue) {
			return cq.Name
		}
	}
	return ""
}

func podSeries(ch chan<- prometheus.Metric, namespace, name, uid, container, node, phase string, owner Owner, resource string, gpus int, class, queue string) {
	kind, ownerName := owner.Kind, owner.Name
	if kind == "" {
		kind, ownerName = "<none>", "<none>"
	}
	ch <- prometheus.MustNewConstMetric(ksmPodInfo, prometheus.GaugeValue, 1,
		namespace, name, uid, "", "", node, kind, ownerName, class, "false")
	ch <- prometheus.MustNewConstMetric(ksmPodLabels, prometheus.GaugeValue, 1, namespace, name, uid, queue)
	for _, ph := range ksmPhases {
		v := 0.0
		if ph == phase {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(ksmPodPhase, prometheus.GaugeValue, v, namespace, name, uid, ph)
	}
	if resource == "" {
		// A DRA pod requests its GPUs through claims, not resources.
		return
	}
	ch <- prometheus.MustNewConstMetric(ksmPodRequests, prometheus.GaugeValue, float64(gpus),
		namespace, name, uid, container, node, ksmUnsafe.ReplaceAllString(resource, "_"), "integer")
}

// WriteOpenMetrics writes the cluster's series as scrapes of one target
// every `every` over [from, to], with timestamps, in the OpenMetrics text
// format promtool's `tsdb create-blocks-from openmetrics` reads: each
// family once, each series' samples together and in order, "# EOF" last.
// target are labels every series gets (job, instance).
func (c *Cluster) WriteOpenMetrics(w io.Writer, from, to time.Time, every time.Duration, target map[string]string) error {
	if every <= 0 {
		return fmt.Errorf("scrape interval %s is not positive", every)
	}
	type family struct {
		help   string
		series map[string]*strings.Builder
		order  []string
	}
	fams := map[string]*family{}
	var names []string
	for t := from; !t.After(to); t = t.Add(every) {
		reg := prometheus.NewPedanticRegistry()
		if err := reg.Register(c.At(t)); err != nil {
			return err
		}
		mfs, err := reg.Gather()
		if err != nil {
			return err
		}
		ts := strconv.FormatInt(t.Unix(), 10)
		for _, mf := range mfs {
			f := fams[mf.GetName()]
			if f == nil {
				f = &family{help: mf.GetHelp(), series: map[string]*strings.Builder{}}
				fams[mf.GetName()] = f
				names = append(names, mf.GetName())
			}
			for _, m := range mf.GetMetric() {
				key := seriesText(mf.GetName(), m.GetLabel(), target)
				b := f.series[key]
				if b == nil {
					b = &strings.Builder{}
					f.series[key] = b
					f.order = append(f.order, key)
				}
				fmt.Fprintf(b, "%s %s %s\n", key, omValue(m.GetGauge().GetValue()), ts)
			}
		}
	}
	slices.Sort(names)
	bw := bufio.NewWriter(w)
	for _, n := range names {
		f := fams[n]
		fmt.Fprintf(bw, "# TYPE %s gauge\n# HELP %s %s\n", n, n, escapeHelp(f.help))
		slices.Sort(f.order)
		for _, k := range f.order {
			bw.WriteString(f.series[k].String())
		}
	}
	bw.WriteString("# EOF\n")
	return bw.Flush()
}

// seriesText is name{labels} with the target's labels, sorted by name; empty
// values are left out, as Prometheus stores them.
func seriesText(name string, pairs []*dto.LabelPair, target map[string]string) string {
	all := map[string]string{}
	for k, v := range target {
		all[k] = v
	}
	for _, p := range pairs {
		all[p.GetName()] = p.GetValue()
	}
	keys := make([]string, 0, len(all))
	for k, v := range all {
		if v != "" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var b strings.Builder
	b.WriteString(name)
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k)
		b.WriteString(`="`)
		b.WriteString(strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(all[k]))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

func escapeHelp(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}

func omValue(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
