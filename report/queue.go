package report

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/model"
)

// The queue X-ray's queries (docs/report.md, "The queue"). Every one keeps
// `cluster`: a pod waits for the GPUs of its own cluster, so the matching
// is done per cluster.
const (
	// qPendingRequests is the GPUs each unscheduled Pending pod requests
	// (nvidia.com/gpu), as the rules'
	// namespace:kube_pod_container_resource_requests_gpu_pending:sum counts
	// them.
	qPendingRequests = `(max by (cluster, namespace, pod, container) (kube_pod_container_resource_requests{resource="nvidia_com_gpu", node=""}) * on (cluster, namespace, pod) group_left () (max by (cluster, namespace, pod) (kube_pod_status_phase{phase="Pending"}) == 1))`
	// qPendingClaims is the GPUs each unallocated DRA ResourceClaim asks
	// for (device class gpu.nvidia.com), as the rules'
	// namespace_resourceclaim:kube_resourceclaim_gpu_devices_unallocated:sum
	// counts them, credited to the pod that owns the claim (one made from a
	// ResourceClaimTemplate), or to a pod named resourceclaim/<claim> when
	// no pod owns it.
	qClaimsUnallocated = `sum by (cluster, namespace, resourceclaim) (max by (cluster, namespace, resourceclaim, request) (kube_customresource_resourceclaim_request_devices{device_class=~"gpu[.]nvidia[.]com"}) unless on (cluster, namespace, resourceclaim) kube_customresource_resourceclaim_allocated_device_info)`
	qClaimOwner        = `topk by (cluster, namespace, resourceclaim) (1, label_replace(max by (cluster, namespace, resourceclaim, owner_name) (kube_customresource_resourceclaim_owner_info{owner_kind="Pod"}), "pod", "$1", "owner_name", "(.*)"))`
	qPendingClaims     = `sum by (cluster, namespace, pod) ((` + qClaimsUnallocated + ` * on (cluster, namespace, resourceclaim) group_left (pod) ` + qClaimOwner +
		`) or on (cluster, namespace, resourceclaim) label_replace(` + qClaimsUnallocated + `, "pod", "resourceclaim/$1", "resourceclaim", "(.*)"))`
	// qQueuePodsBase is the GPUs each waiting pod wants: requested, or
	// through its unallocated claims (a pod with both has two series, one
	// without container); qPending sums it.
	qQueuePodsBase = `(` + qPendingRequests + ` or ` + qPendingClaims + `)`
	// qWaitPods is each waiting pod's GPUs; the qWait* queries below are
	// what kube-state-metrics says of those pods: its priority class, its
	// Kueue LocalQueue (kube_pod_labels with the queue-name label
	// allowed), the GPU product its node selector asks for (GFD's
	// nvidia.com/gpu.product through the opt-in kube_pod_nodeselectors)
	// and its creation time.
	qWaitPods     = `sum by (cluster, namespace, pod) ` + qQueuePodsBase
	qWaitIfPod    = ` and on (cluster, namespace, pod) ` + qWaitPods
	qWaitClass    = `max by (cluster, namespace, pod, priority_class) (kube_pod_info)` + qWaitIfPod
	qWaitQueue    = `max by (cluster, namespace, pod, queue) (label_replace(kube_pod_labels, "queue", "$1", "label_kueue_x_k8s_io_queue_name", "(.+)"))` + qWaitIfPod
	qWaitSelector = `max by (cluster, namespace, pod, gpu_type) (label_replace(kube_pod_nodeselectors, "gpu_type", "$1", "nodeselector_nvidia_com_gpu_product", "(.+)"))` + qWaitIfPod
	qWaitCreated  = `max by (cluster, namespace, pod) (kube_pod_created)` + qWaitIfPod
	// qWorkloads is the GPUs of each pod set of each Kueue Workload that
	// has no quota (status.resourceRequests, which Kueue fills for
	// workloads not admitted), from deploy/kube-state-metrics/kueue.yaml:
	// a suspended Job has no pods, so this is its demand. A workload a
	// Pod owns (Kueue's pod integration) is left out: its gated pods are
	// Pending pods, counted above. The qWorkload* queries are the rest of
	// what the configuration says of them.
	qWorkloads        = `sum by (cluster, namespace, workload, podset) (max by (cluster, namespace, workload, podset) (kube_customresource_kueue_workload_pending_gpus) unless on (cluster, namespace, workload) kube_customresource_kueue_workload_owner_info{owner_kind="Pod"})`
	qWorkloadIf       = ` and on (cluster, namespace, workload) ` + qWorkloads
	qWorkloadInfo     = `max by (cluster, namespace, workload, queue, priority_class) (kube_customresource_kueue_workload_info)` + qWorkloadIf
	qWorkloadPriority = `max by (cluster, namespace, workload) (kube_customresource_kueue_workload_priority)` + qWorkloadIf
	qWorkloadPodSets  = `max by (cluster, namespace, workload, podset, gpu_type) (kube_customresource_kueue_workload_podset_pods)` + qWorkloadIf
	qWorkloadCreated  = `max by (cluster, namespace, workload) (kube_customresource_kueue_workload_created)` + qWorkloadIf
	qKueueLocalQueues = `max by (cluster, namespace, local_queue, cluster_queue) (kube_customresource_kueue_localqueue_info)`
	qQueueClasses     = `max by (cluster, priority_class) (gpuxray_priority_class_value)`
	qQueueWholeGPU    = ` * on (cluster, job, instance, uuid) group_left (name) max by (cluster, job, instance, uuid, name) (gpuxray_device_info{parent_uuid="", mig_mode!="enabled"})`
	qQueueHolder      = `max by (cluster, job, instance, uuid, namespace, workload_kind, workload, priority_class, cluster_queue) (max_over_time(gpuxray_allocation_info[S]))`
	// qQueueHolders is the idle time in each step of whole GPUs not in
	// MIG mode (a MIG slice cannot take a pod that asks for
	// nvidia.com/gpu), by node (job, instance) and GPU product, credited
	// to the highest-ranked of each GPU's holders, by its workload, class
	// and ClusterQueue. A class the agents do not know ranks 0, as no
	// class does. topk picks the holder by its class's value; 0 * … + 1
	// keeps its labels and drops the value, which must not scale the idle
	// time.
	qQueueHolders = `sum by (cluster, job, instance, name, namespace, workload_kind, workload, priority_class, cluster_queue) (sum by (cluster, job, instance, uuid) (increase(gpuxray_device_allocated_idle_seconds_total[S]))` + qQueueWholeGPU +
		` * on (cluster, job, instance, uuid) group_left (namespace, workload_kind, workload, priority_class, cluster_queue) (0 * topk by (cluster, job, instance, uuid) (1, ` +
		qQueueHolder + ` * on (cluster, priority_class) group_left () max by (cluster, priority_class) (max_over_time(gpuxray_priority_class_value[S])) or ` + qQueueHolder + ` * 0) + 1))`
	// qQueueFree is the free time of whole GPUs not in MIG mode, by node
	// and product: held by nobody and not busy with work outside
	// Kubernetes.
	qQueueFree = `sum by (cluster, job, instance, name) (clamp_min(sum by (cluster, job, instance, uuid) (increase(gpuxray_device_unallocated_seconds_total[S])) - sum by (cluster, job, instance, uuid) (increase(gpuxray_device_unallocated_active_seconds_total[S])), 0)` + qQueueWholeGPU + `)`
	// Kueue's ClusterQueues (max by flavor: several Kueue replicas may
	// report one queue). kueue_cluster_queue_resource_pending has no
	// flavor: pending workloads are not assigned to flavors yet.
	qKueueUsage       = `sum by (cluster, cohort, cluster_queue) (max by (cluster, cohort, cluster_queue, flavor) (kueue_cluster_queue_resource_usage{resource="nvidia.com/gpu"}))`
	qKueueNominal     = `sum by (cluster, cohort, cluster_queue) (max by (cluster, cohort, cluster_queue, flavor) (kueue_cluster_queue_nominal_quota{resource="nvidia.com/gpu"}))`
	qKueuePending     = `sum by (cluster, cluster_queue) (max by (cluster, cluster_queue, status) (kueue_pending_workloads))`
	qKueuePendingGPUs = `max by (cluster, cluster_queue) (kueue_cluster_queue_resource_pending{resource="nvidia.com/gpu"})`
)

// queueQuery is one query of the queue X-ray: its expression, whether it
// is a gauge (read at each step's middle) and where its series go.
type queueQuery struct {
	expr string
	// gauge is read at each step's middle; edge also at its end, for the
	// step in which kube-state-metrics' data begins (atEdges); signed
	// keeps negative values (a PriorityClass's).
	gauge, edge, signed bool
	dst                 func(*queueInput) *[]series
}

// queueQueries are the queue X-ray's queries, in the order Build runs
// them.
var queueQueries = []queueQuery{
	{expr: qWaitPods, gauge: true, edge: true, dst: func(q *queueInput) *[]series { return &q.pods }},
	{expr: qWaitClass, gauge: true, edge: true, dst: func(q *queueInput) *[]series { return &q.podClass }},
	{expr: qWaitQueue, gauge: true, edge: true, dst: func(q *queueInput) *[]series { return &q.podQueue }},
	{expr: qWaitSelector, gauge: true, edge: true, dst: func(q *queueInput) *[]series { return &q.podType }},
	{expr: qWaitCreated, gauge: true, edge: true, dst: func(q *queueInput) *[]series { return &q.podCreated }},
	{expr: qWorkloads, gauge: true, edge: true, dst: func(q *queueInput) *[]series { return &q.workloads }},
	{expr: qWorkloadInfo, gauge: true, edge: true, dst: func(q *queueInput) *[]series { return &q.wlInfo }},
	{expr: qWorkloadPriority, gauge: true, edge: true, signed: true, dst: func(q *queueInput) *[]series { return &q.wlPriority }},
	{expr: qWorkloadPodSets, gauge: true, edge: true, dst: func(q *queueInput) *[]series { return &q.wlPodSets }},
	{expr: qWorkloadCreated, gauge: true, edge: true, dst: func(q *queueInput) *[]series { return &q.wlCreated }},
	{expr: qKueueLocalQueues, gauge: true, dst: func(q *queueInput) *[]series { return &q.localQueues }},
	{expr: qQueueClasses, gauge: true, signed: true, dst: func(q *queueInput) *[]series { return &q.classes }},
	{expr: qQueueHolders, dst: func(q *queueInput) *[]series { return &q.holders }},
	{expr: qQueueFree, dst: func(q *queueInput) *[]series { return &q.free }},
	{expr: qKueueUsage, gauge: true, dst: func(q *queueInput) *[]series { return &q.kueueUsage }},
	{expr: qKueueNominal, gauge: true, dst: func(q *queueInput) *[]series { return &q.kueueNominal }},
	{expr: qKueuePending, gauge: true, dst: func(q *queueInput) *[]series { return &q.kueuePending }},
	{expr: qKueuePendingGPUs, gauge: true, dst: func(q *queueInput) *[]series { return &q.kueuePendingGPUs }},
}

// Queue is the queue X-ray: who waited for GPUs, at what priority, in
// which queue and for which GPU type, how long, and what could have run
// them. docs/report.md defines every figure.
type Queue struct {
	// Available is false when no kube-state-metrics series were found:
	// who waited is unknown.
	Available bool `json:"available"`
	// PrioritiesKnown is whether the agents export PriorityClass values
	// (gpuxray_priority_class_value); without them every pod ranks 0.
	PrioritiesKnown bool `json:"priorities_known"`
	// Kueue is whether Kueue's ClusterQueue series were found;
	// KueueWorkloads whether the per-Workload series of
	// deploy/kube-state-metrics/kueue.yaml were.
	Kueue          bool `json:"kueue"`
	KueueWorkloads bool `json:"kueue_workloads"`
	// Basis is BasisPeak, or BasisAll when the range has no peak time:
	// what Kind and Sentence are judged on.
	Basis string `json:"basis"`
	// Kind is QueueScheduling, QueueIdle, QueueFragmentation,
	// QueueCapacity, QueueNone or QueueUnknown; Sentence says it, Knobs
	// are what to look at.
	Kind     string   `json:"kind"`
	Sentence string   `json:"sentence"`
	Knobs    []string `json:"knobs"`
	// All and Peak are the figures over all covered time and at peak.
	All  QueueFigures `json:"all"`
	Peak QueueFigures `json:"peak"`
	// GPUTypes are the figures by the GPU type waiters selected, and the
	// idle GPUs of each type: every type that waited or idled.
	GPUTypes []QueueGPUType `json:"gpu_types"`
	// Wait is how long waiters waited, all of them; PeakWait those that
	// waited during peak time.
	Wait     QueueWait `json:"wait"`
	PeakWait QueueWait `json:"peak_wait"`
	// SLO is each --slo.wait target, judged.
	SLO []QueueSLO `json:"slo"`
	// Classes are the figures by priority class and queue, most pending
	// GPU-hours at peak first.
	Classes []QueueClass `json:"classes"`
	// TopHolders are the workloads whose idle GPUs waiters could have
	// used, most such GPU-hours (on Basis) first, --top of them.
	TopHolders []QueueHolder `json:"top_holders"`
	// ClusterQueues are Kueue's queues, by cluster.
	ClusterQueues []ClusterQueueUse `json:"cluster_queues"`

	// types is, by GPU type, each step's pending GPUs, the part of them no
	// idle GPU of their type could hold (shortfall and other type), and
	// that type's idle and free GPUs: what the verdict is judged on.
	types map[string]*typeSteps
}

// typeSteps is one GPU type's figures at each step, in GPUs.
type typeSteps struct{ pending, short, idle []float64 }

// Kinds of queue.
const (
	// QueueScheduling: most of the waiting could have run on free GPUs or
	// on idle GPUs the scheduler or Kueue could take back.
	QueueScheduling = "scheduling"
	// QueueIdle: most of it could have run only on idle GPUs held by work
	// of equal or higher priority: idle allocation to cull.
	QueueIdle = "idle"
	// QueueFragmentation: most of it could have run on idle GPUs of its
	// type, but not on one node: fragmentation to undo.
	QueueFragmentation = "fragmentation"
	// QueueCapacity: most of it found no idle GPU of its type at all.
	QueueCapacity = "capacity"
	// QueueNone: nothing waited.
	QueueNone = "none"
	// QueueUnknown: no kube-state-metrics series.
	QueueUnknown = "unknown"
)

// QueueFigures is where the waiting went, in GPU-hours: pending GPUs ×
// time, split by what could have run them at the same step (docs/report.md
// gives the order). The parts add up to PendingGPUHours.
type QueueFigures struct {
	// Hours is the covered time the figures are over.
	Hours           float64 `json:"hours"`
	PendingGPUHours float64 `json:"pending_gpu_hours"`
	// FreeGPUHours could have run on whole GPUs nobody held.
	FreeGPUHours float64 `json:"free_gpu_hours"`
	// QuotaGPUHours on idle GPUs a Kueue ClusterQueue held on borrowed
	// quota, or on free GPUs while Kueue held the workload back
	// (suspended): reclaimable by quota.
	QuotaGPUHours float64 `json:"quota_gpu_hours"`
	// PreemptionGPUHours on idle GPUs held by work of lower priority
	// (reclaimable by preemption).
	PreemptionGPUHours float64 `json:"preemption_gpu_hours"`
	// OutrankedGPUHours only on idle GPUs held by work of equal or higher
	// priority: neither the scheduler nor Kueue takes those back.
	OutrankedGPUHours float64 `json:"outranked_gpu_hours"`
	// FragmentedGPUHours could have run on the idle and free GPUs of its
	// type the cluster had, but no one node had enough of them.
	FragmentedGPUHours float64 `json:"fragmented_gpu_hours"`
	// OtherTypeGPUHours could have run only on idle or free GPUs of
	// another type than the one it selected.
	OtherTypeGPUHours float64 `json:"other_type_gpu_hours"`
	// ShortfallGPUHours no idle GPU could have served: true capacity
	// shortfall.
	ShortfallGPUHours float64 `json:"shortfall_gpu_hours"`
	// heldBack is the part of QuotaGPUHours on free GPUs, which Kueue held
	// the waiting back from.
	heldBack float64
}

// ReclaimableGPUHours is the waiting that idle GPUs held by lower-priority
// or borrowing work could have run.
func (f QueueFigures) ReclaimableGPUHours() float64 { return f.QuotaGPUHours + f.PreemptionGPUHours }

// OnOneNodeGPUHours is the waiting that free or idle GPUs of its type on
// one node could have run, whoever held them: what reclaiming them all
// would have done for it.
func (f QueueFigures) OnOneNodeGPUHours() float64 {
	return f.FreeGPUHours + f.QuotaGPUHours + f.PreemptionGPUHours + f.OutrankedGPUHours
}

func (f *QueueFigures) add(w float64, c [numQueueParts]float64) {
	f.FreeGPUHours += c[partFree] * w
	f.QuotaGPUHours += (c[partQuota] + c[partHeldBack]) * w
	f.heldBack += c[partHeldBack] * w
	f.PreemptionGPUHours += c[partPreemption] * w
	f.OutrankedGPUHours += c[partOutranked] * w
	f.FragmentedGPUHours += c[partFragmented] * w
	f.OtherTypeGPUHours += c[partOtherType] * w
	f.ShortfallGPUHours += c[partShortfall] * w
	for _, v := range c {
		f.PendingGPUHours += v * w
	}
}

// QueueClass is the waiting of one priority class in one Kueue LocalQueue
// ("" for pods no queue names, or a kube-state-metrics that does not
// export the queue-name label) and the ClusterQueue it feeds ("" where
// unknown).
type QueueClass struct {
	PriorityClass string `json:"priority_class"`
	// Priority is the class's value (0 for no class or one the agents do
	// not know); a Kueue workload's own priority where it says one.
	Priority     float64      `json:"priority"`
	Queue        string       `json:"queue"`
	ClusterQueue string       `json:"cluster_queue"`
	All          QueueFigures `json:"all"`
	Peak         QueueFigures `json:"peak"`
	Wait         QueueWait    `json:"wait"`
	PeakWait     QueueWait    `json:"peak_wait"`
}

// QueueGPUType is the waiting of the waiters that selected one GPU type
// (GPUType, the GFD label value, or "any" for those that selected none),
// and the idle and free GPUs of that type.
type QueueGPUType struct {
	GPUType string       `json:"gpu_type"`
	All     QueueFigures `json:"all"`
	Peak    QueueFigures `json:"peak"`
	// IdleGPUHours is the GPU time of this type's whole GPUs (not in MIG
	// mode) free or held idle; Peak* at peak. 0 for "any".
	IdleGPUHours     float64   `json:"idle_gpu_hours"`
	PeakIdleGPUHours float64   `json:"peak_idle_gpu_hours"`
	Wait             QueueWait `json:"wait"`
	PeakWait         QueueWait `json:"peak_wait"`
}

// QueueHolder is a workload whose idle GPUs waiters could have used.
type QueueHolder struct {
	Namespace     string  `json:"namespace"`
	Kind          string  `json:"workload_kind"`
	Name          string  `json:"workload"`
	PriorityClass string  `json:"priority_class"`
	Priority      float64 `json:"priority"`
	ClusterQueue  string  `json:"cluster_queue"`
	// IdleGPUHours is its idle whole GPUs' time; PeakIdleGPUHours at peak.
	IdleGPUHours     float64 `json:"idle_gpu_hours"`
	PeakIdleGPUHours float64 `json:"peak_idle_gpu_hours"`
	// Of that, what waiters could have run on, by how it could be taken
	// back, all hours and at peak.
	QuotaGPUHours          float64 `json:"quota_gpu_hours"`
	PreemptionGPUHours     float64 `json:"preemption_gpu_hours"`
	OutrankedGPUHours      float64 `json:"outranked_gpu_hours"`
	PeakQuotaGPUHours      float64 `json:"peak_quota_gpu_hours"`
	PeakPreemptionGPUHours float64 `json:"peak_preemption_gpu_hours"`
	PeakOutrankedGPUHours  float64 `json:"peak_outranked_gpu_hours"`
}

// ID is namespace/workload.
func (h QueueHolder) ID() string { return h.Namespace + "/" + h.Name }

// Blocked is the waiting the holder's idle GPUs could have run, on basis
// (BasisPeak or BasisAll).
func (h QueueHolder) Blocked(basis string) float64 {
	if basis == BasisAll {
		return h.QuotaGPUHours + h.PreemptionGPUHours + h.OutrankedGPUHours
	}
	return h.PeakQuotaGPUHours + h.PeakPreemptionGPUHours + h.PeakOutrankedGPUHours
}

// ClusterQueueUse is one Kueue ClusterQueue over the range: means over the
// covered time, and GPU-hours.
type ClusterQueueUse struct {
	Cluster string `json:"cluster"`
	Cohort  string `json:"cohort"`
	Name    string `json:"cluster_queue"`
	// NominalGPUs and UsedGPUs are its nvidia.com/gpu quota and usage.
	NominalGPUs float64 `json:"nominal_gpus"`
	UsedGPUs    float64 `json:"used_gpus"`
	// BorrowedGPUHours is its usage beyond its nominal quota; the
	// IdleGPUHours its pods held idle; BorrowedIdleGPUHours, of those, the
	// part on borrowed quota. Peak* at peak.
	BorrowedGPUHours         float64 `json:"borrowed_gpu_hours"`
	IdleGPUHours             float64 `json:"idle_gpu_hours"`
	BorrowedIdleGPUHours     float64 `json:"borrowed_idle_gpu_hours"`
	PeakBorrowedGPUHours     float64 `json:"peak_borrowed_gpu_hours"`
	PeakBorrowedIdleGPUHours float64 `json:"peak_borrowed_idle_gpu_hours"`
	// PendingWorkloads is the mean number of workloads Kueue held back;
	// PendingGPUs the mean GPUs they asked for, -1 where this Kueue does
	// not say (kueue_cluster_queue_resource_pending, Kueue 0.18 and
	// newer). Workloads whose pods Kueue has not created (a suspended Job)
	// are in the matching too, from the per-Workload series or, without
	// them, as the part of PendingGPUs no waiting pod explains.
	PendingWorkloads float64 `json:"pending_workloads"`
	PendingGPUs      float64 `json:"pending_gpus"`
}

// cqKey is a ClusterQueue of a cluster.
type cqKey struct{ cluster, cq string }

// queueInput is what the queue X-ray reads, on the grid (queueQueries).
type queueInput struct {
	pods, podClass, podQueue, podType, podCreated       []series
	workloads, wlInfo, wlPriority, wlPodSets, wlCreated []series
	localQueues, classes, holders, free                 []series
	kueueUsage, kueueNominal, kueuePending              []series
	kueuePendingGPUs                                    []series
}

// queueConfig is what the queue X-ray takes from the report's Config.
type queueConfig struct {
	top       int
	slo       map[string]time.Duration
	available bool
}

// seriesIndex finds a labelled thing's series in a query's answer: by key,
// the indexes of its series.
type seriesIndex map[string][]int

func indexBy(ss []series, key func(model.Metric) string) seriesIndex {
	x := seriesIndex{}
	for i, s := range ss {
		k := key(s.labels)
		x[k] = append(x[k], i)
	}
	return x
}

// at returns the series of k with a value at step i, else its first; -1
// when k has none.
func (x seriesIndex) at(ss []series, k string, i int) int {
	ids := x[k]
	for _, j := range ids {
		if !math.IsNaN(ss[j].vals[i]) {
			return j
		}
	}
	if len(ids) > 0 {
		return ids[0]
	}
	return -1
}

// firstValue is a series' first value, NaN for none: a value that never
// changes (a creation time, a priority) read at whatever step has it.
func firstValue(s series) float64 {
	for _, v := range s.vals {
		if !math.IsNaN(v) {
			return v
		}
	}
	return math.NaN()
}

func key3(m model.Metric, a, b, c model.LabelName) string {
	return string(m[a]) + "\x00" + string(m[b]) + "\x00" + string(m[c])
}

// computeQueue builds the queue X-ray from in, each step weighted by its
// covered hours (and by its share of peak for the peak figures), as the
// Demand section is. Its cost is linear in the answers' points: each
// series is indexed once, each step reads the series of its own cluster.
func computeQueue(in input, qi queueInput, peak []float64, qc queueConfig) Queue {
	g := in.g
	q := Queue{Available: qc.available, PrioritiesKnown: len(qi.classes) > 0, Kueue: len(qi.kueueUsage)+len(qi.kueueNominal) > 0,
		KueueWorkloads: len(qi.workloads)+len(qi.localQueues) > 0,
		Classes:        []QueueClass{}, GPUTypes: []QueueGPUType{}, TopHolders: []QueueHolder{}, ClusterQueues: []ClusterQueueUse{}, Knobs: []string{},
		types: map[string]*typeSteps{}}

	// The class values of each cluster at each step.
	type ckey struct{ cluster, class string }
	values := map[ckey]series{}
	for _, s := range qi.classes {
		values[ckey{string(s.labels["cluster"]), string(s.labels["priority_class"])}] = s
	}
	firstRank := map[ckey]float64{}
	rank := func(cluster, class string, i int) float64 {
		k := ckey{cluster, class}
		s, ok := values[k]
		if !ok {
			return 0
		}
		if v := s.vals[i]; !math.IsNaN(v) {
			return v
		}
		// The class's value at another step: a class's value never changes.
		v, ok := firstRank[k]
		if !ok {
			v = firstValue(s)
			if math.IsNaN(v) {
				v = 0
			}
			firstRank[k] = v
		}
		return v
	}
	classIdx := map[[3]string]int{}
	classOf := func(class, queue, cq string) int {
		k := [3]string{class, queue, cq}
		if i, ok := classIdx[k]; ok {
			return i
		}
		classIdx[k] = len(q.Classes)
		q.Classes = append(q.Classes, QueueClass{PriorityClass: class, Queue: queue, ClusterQueue: cq})
		return len(q.Classes) - 1
	}
	typeIdx := map[string]int{}
	typeOf := func(name string) int {
		if i, ok := typeIdx[name]; ok {
			return i
		}
		typeIdx[name] = len(q.GPUTypes)
		q.GPUTypes = append(q.GPUTypes, QueueGPUType{GPUType: name})
		q.types[name] = &typeSteps{pending: make([]float64, g.n), short: make([]float64, g.n), idle: make([]float64, g.n)}
		return len(q.GPUTypes) - 1
	}
	type hkey struct{ ns, kind, name, class, cq string }
	holderIdx := map[hkey]int{}
	var holders []QueueHolder
	holderOf := func(k hkey) int {
		if i, ok := holderIdx[k]; ok {
			return i
		}
		holderIdx[k] = len(holders)
		holders = append(holders, QueueHolder{Namespace: k.ns, Kind: k.kind, Name: k.name, PriorityClass: k.class, ClusterQueue: k.cq})
		return len(holders) - 1
	}

	// Indexes, each built once.
	podKey := func(m model.Metric) string { return key3(m, "cluster", "namespace", "pod") }
	wlKey := func(m model.Metric) string { return key3(m, "cluster", "namespace", "workload") }
	podClass, podQueue, podType, podCreated := indexBy(qi.podClass, podKey), indexBy(qi.podQueue, podKey), indexBy(qi.podType, podKey), indexBy(qi.podCreated, podKey)
	wlInfo, wlPriority, wlCreated := indexBy(qi.wlInfo, wlKey), indexBy(qi.wlPriority, wlKey), indexBy(qi.wlCreated, wlKey)
	wlPodSets := indexBy(qi.wlPodSets, func(m model.Metric) string { return wlKey(m) + "\x00" + string(m["podset"]) })
	// LocalQueue → ClusterQueue, by cluster and namespace.
	lqs := map[string]string{}
	for _, s := range qi.localQueues {
		lqs[key3(s.labels, "cluster", "namespace", "local_queue")] = string(s.labels["cluster_queue"])
	}
	clusterQueueOf := func(cluster, ns, queue string) (string, bool) {
		if queue == "" {
			return "", true
		}
		cq, ok := lqs[cluster+"\x00"+ns+"\x00"+queue]
		return cq, ok
	}
	// Each cluster's series.
	type clusterSeries struct {
		pods, holders, free, pendingGPUs []int
		// usage and nominal are each ClusterQueue's series.
		usage, nominal map[string][]int
		workloads      map[string][]int
		wlOrder        []string
	}
	clusters := map[string]*clusterSeries{}
	cs := func(m model.Metric) *clusterSeries {
		c := string(m["cluster"])
		if clusters[c] == nil {
			clusters[c] = &clusterSeries{workloads: map[string][]int{}, usage: map[string][]int{}, nominal: map[string][]int{}}
		}
		return clusters[c]
	}
	products := map[string]string{}
	product := func(name string) string {
		p, ok := products[name]
		if !ok {
			p = productOf(name)
			products[name] = p
		}
		return p
	}
	for i, s := range qi.pods {
		c := cs(s.labels)
		c.pods = append(c.pods, i)
	}
	for i, s := range qi.workloads {
		c := cs(s.labels)
		k := wlKey(s.labels)
		if c.workloads[k] == nil {
			c.wlOrder = append(c.wlOrder, k)
		}
		c.workloads[k] = append(c.workloads[k], i)
	}
	for i, s := range qi.holders {
		c := cs(s.labels)
		c.holders = append(c.holders, i)
	}
	for i, s := range qi.free {
		c := cs(s.labels)
		c.free = append(c.free, i)
	}
	for i, s := range qi.kueuePendingGPUs {
		c := cs(s.labels)
		c.pendingGPUs = append(c.pendingGPUs, i)
	}
	for i, s := range qi.kueueUsage {
		c := cs(s.labels)
		cq := string(s.labels["cluster_queue"])
		c.usage[cq] = append(c.usage[cq], i)
	}
	for i, s := range qi.kueueNominal {
		c := cs(s.labels)
		cq := string(s.labels["cluster_queue"])
		c.nominal[cq] = append(c.nominal[cq], i)
	}
	names := make([]string, 0, len(clusters))
	for c := range clusters {
		names = append(names, c)
	}
	slices.Sort(names)

	spans := map[string]*waitSpan{}
	seen := func(id string, i, class int, gpuType string, created func() float64) {
		sp := spans[id]
		if sp == nil {
			sp = &waitSpan{first: i, created: created()}
			spans[id] = sp
		}
		sp.last, sp.class, sp.gpuType = i, class, gpuType
		typeOf(gpuType)
		sp.peak = sp.peak || peak[i] > 0
	}

	cqIdle := map[cqKey][2][2]float64{} // [all, peak][idle, borrowed idle]
	// Per step, reused: the step's GPU types (global index → local) and
	// nodes by job, instance and product.
	local := map[int]int{}
	var globalOf []int
	type nodeKey struct{ job, instance, product string }
	nodes := map[nodeKey]int{}
	for i := 0; i < g.n; i++ {
		cov := in.demandCovered[i]
		wAll, wPeak := cov/3600, peak[i]*cov/3600
		if cov > 0 {
			q.All.Hours += wAll
			q.Peak.Hours += wPeak
		}
		for _, cluster := range names {
			c := clusters[cluster]
			clear(local)
			globalOf = globalOf[:0]
			localType := func(name string) int {
				if name == GPUTypeAny {
					return anyType
				}
				gt := typeOf(name)
				if l, ok := local[gt]; ok {
					return l
				}
				local[gt] = len(globalOf)
				globalOf = append(globalOf, gt)
				return len(globalOf) - 1
			}
			st := queueStep{}
			explained := map[string]float64{} // ClusterQueue → GPUs its waiting pods and workloads account for
			var unmapped float64              // GPUs of waiters whose LocalQueue names no known ClusterQueue

			// The waiting pods.
			for _, j := range c.pods {
				s := qi.pods[j]
				v := s.vals[i]
				if math.IsNaN(v) || v <= 0 {
					continue
				}
				k := podKey(s.labels)
				ns := string(s.labels["namespace"])
				class, queue, product := "", "", GPUTypeAny
				if m := podClass.at(qi.podClass, k, i); m >= 0 {
					class = string(qi.podClass[m].labels["priority_class"])
				}
				if m := podQueue.at(qi.podQueue, k, i); m >= 0 {
					queue = string(qi.podQueue[m].labels["queue"])
				}
				if m := podType.at(qi.podType, k, i); m >= 0 {
					product = selectedProduct(string(qi.podType[m].labels["gpu_type"]))
				}
				cq, ok := clusterQueueOf(cluster, ns, queue)
				if !ok {
					unmapped += v
				} else if cq != "" {
					explained[cq] += v
				}
				key := classOf(class, queue, cq)
				seen("p\x00"+k, i, key, product, func() float64 {
					if m := podCreated.at(qi.podCreated, k, i); m >= 0 {
						return firstValue(qi.podCreated[m])
					}
					return math.NaN()
				})
				if cov > 0 {
					st.waiters = append(st.waiters, queueWaiter{key: key, gtype: localType(product), rank: rank(cluster, class, i), pods: []podSet{{gpus: v, count: 1}}})
				}
			}
			// Suspended Kueue workloads: each pod set of count pods, all
			// of them at once.
			for _, k := range c.wlOrder {
				var w queueWaiter
				var gpus float64
				product := ""
				for _, j := range c.workloads[k] {
					s := qi.workloads[j]
					v := s.vals[i]
					if math.IsNaN(v) || v <= 0 {
						continue
					}
					count, pt := 1.0, ""
					if m := wlPodSets.at(qi.wlPodSets, k+"\x00"+string(s.labels["podset"]), i); m >= 0 {
						if n := qi.wlPodSets[m].vals[i]; !math.IsNaN(n) && n >= 1 {
							count = math.Round(n)
						} else if n := firstValue(qi.wlPodSets[m]); !math.IsNaN(n) && n >= 1 {
							count = math.Round(n)
						}
						pt = string(qi.wlPodSets[m].labels["gpu_type"])
					}
					if product == "" && pt != "" {
						product = pt
					}
					w.pods = append(w.pods, podSet{gpus: v / count, count: count})
					gpus += v
				}
				if gpus <= 0 {
					continue
				}
				product = selectedProduct(product)
				s := qi.workloads[c.workloads[k][0]]
				ns := string(s.labels["namespace"])
				class, queue := "", ""
				if m := wlInfo.at(qi.wlInfo, k, i); m >= 0 {
					class, queue = string(qi.wlInfo[m].labels["priority_class"]), string(qi.wlInfo[m].labels["queue"])
				}
				cq, ok := clusterQueueOf(cluster, ns, queue)
				if !ok {
					unmapped += gpus
				} else if cq != "" {
					explained[cq] += gpus
				}
				w.key = classOf(class, queue, cq)
				w.rank = rank(cluster, class, i)
				if m := wlPriority.at(qi.wlPriority, k, i); m >= 0 {
					if p := firstValue(qi.wlPriority[m]); !math.IsNaN(p) {
						w.rank = p
					}
				}
				w.gang, w.kueue = true, true
				seen("w\x00"+k, i, w.key, product, func() float64 {
					if m := wlCreated.at(qi.wlCreated, k, i); m >= 0 {
						return firstValue(qi.wlCreated[m])
					}
					return math.NaN()
				})
				if cov > 0 {
					w.gtype = localType(product)
					st.waiters = append(st.waiters, w)
				}
			}
			if cov <= 0 {
				continue
			}
			// What Kueue says its ClusterQueues wait for beyond what the
			// pods and workloads above explain: suspended workloads
			// without per-workload series. Waiters whose ClusterQueue is
			// unknown are taken off all queues in proportion.
			type rem struct {
				cq   string
				gpus float64
			}
			var rems []rem
			var remAll float64
			for _, j := range c.pendingGPUs {
				s := qi.kueuePendingGPUs[j]
				v := s.vals[i]
				cq := string(s.labels["cluster_queue"])
				if math.IsNaN(v) || v-explained[cq] <= capEps {
					continue
				}
				rems = append(rems, rem{cq, v - explained[cq]})
				remAll += v - explained[cq]
			}
			for _, r := range rems {
				gpus := r.gpus * max(0, remAll-unmapped) / remAll
				if gpus > capEps {
					st.waiters = append(st.waiters, queueWaiter{key: classOf("", "", r.cq), gtype: anyType, pods: []podSet{{gpus: 1, count: gpus}}, kueue: true})
				}
			}

			// The supply: free GPUs and idle holders, by node and type.
			clear(nodes)
			nodeOf := func(m model.Metric) int {
				k := nodeKey{string(m["job"]), string(m["instance"]), product(string(m["name"]))}
				if n, ok := nodes[k]; ok {
					return n
				}
				nodes[k] = len(st.nodes)
				st.nodes = append(st.nodes, queueNode{gtype: localType(k.product)})
				return len(st.nodes) - 1
			}
			for _, j := range c.free {
				s := qi.free[j]
				if v := s.vals[i]; !math.IsNaN(v) && v > 0 {
					st.nodes[nodeOf(s.labels)].free += v / cov
				}
			}
			for _, j := range c.holders {
				s := qi.holders[j]
				v := s.vals[i]
				if math.IsNaN(v) || v <= 0 {
					continue
				}
				class, cq := string(s.labels["priority_class"]), string(s.labels["cluster_queue"])
				k := hkey{string(s.labels["namespace"]), string(s.labels["workload_kind"]), string(s.labels["workload"]), class, cq}
				st.idle = append(st.idle, queueIdle{key: holderOf(k), node: nodeOf(s.labels), rank: rank(cluster, class, i), cq: cq, gpus: v / cov})
			}
			st.borrowed = borrowedAt(qi, st.idle, c.usage, c.nominal, i)
			st.types = len(globalOf)
			if len(st.waiters) == 0 && len(st.nodes) == 0 {
				continue
			}

			m := match(st)
			for j, w := range st.waiters {
				cl := &q.Classes[w.key]
				cl.Priority = w.rank
				cl.All.add(wAll, m.waiter[j])
				cl.Peak.add(wPeak, m.waiter[j])
				q.All.add(wAll, m.waiter[j])
				q.Peak.add(wPeak, m.waiter[j])
				name := GPUTypeAny
				if w.gtype != anyType {
					name = q.GPUTypes[globalOf[w.gtype]].GPUType
				}
				t := &q.GPUTypes[typeOf(name)]
				t.All.add(wAll, m.waiter[j])
				t.Peak.add(wPeak, m.waiter[j])
				ts := q.types[name]
				for _, v := range m.waiter[j] {
					ts.pending[i] += v
				}
				ts.short[i] += m.waiter[j][partShortfall] + m.waiter[j][partOtherType]
			}
			for _, nd := range st.nodes {
				t := &q.GPUTypes[globalOf[nd.gtype]]
				t.IdleGPUHours += nd.free * wAll
				t.PeakIdleGPUHours += nd.free * wPeak
				q.types[t.GPUType].idle[i] += nd.free
			}
			for j, h := range st.idle {
				t := &q.GPUTypes[globalOf[st.nodes[h.node].gtype]]
				t.IdleGPUHours += h.gpus * wAll
				t.PeakIdleGPUHours += h.gpus * wPeak
				q.types[t.GPUType].idle[i] += h.gpus
				x := &holders[h.key]
				x.Priority = h.rank
				x.IdleGPUHours += h.gpus * wAll
				x.PeakIdleGPUHours += h.gpus * wPeak
				u := m.idle[j]
				x.QuotaGPUHours += u[partQuota] * wAll
				x.PreemptionGPUHours += u[partPreemption] * wAll
				x.OutrankedGPUHours += u[partOutranked] * wAll
				x.PeakQuotaGPUHours += u[partQuota] * wPeak
				x.PeakPreemptionGPUHours += u[partPreemption] * wPeak
				x.PeakOutrankedGPUHours += u[partOutranked] * wPeak
				if h.cq != "" {
					k := cqKey{cluster, h.cq}
					v := cqIdle[k]
					v[0][0] += h.gpus * wAll
					v[1][0] += h.gpus * wPeak
					v[0][1] += m.borrowedShare[j] * wAll
					v[1][1] += m.borrowedShare[j] * wPeak
					cqIdle[k] = v
				}
			}
		}
	}
	q.Basis = BasisPeak
	if q.Peak.Hours == 0 {
		q.Basis = BasisAll
	}
	basis := func(f QueueFigures, all QueueFigures) QueueFigures {
		if q.Basis == BasisAll {
			return all
		}
		return f
	}
	ws := make([]waitSpan, 0, len(spans))
	for _, sp := range spans {
		ws = append(ws, *sp)
	}
	setWaits(&q, ws, g, qc.slo)
	slices.SortStableFunc(q.Classes, func(a, b QueueClass) int {
		return cmp.Or(cmp.Compare(basis(b.Peak, b.All).PendingGPUHours, basis(a.Peak, a.All).PendingGPUHours), cmp.Compare(b.All.PendingGPUHours, a.All.PendingGPUHours),
			cmp.Compare(b.Priority, a.Priority), cmp.Compare(a.PriorityClass, b.PriorityClass), cmp.Compare(a.Queue, b.Queue), cmp.Compare(a.ClusterQueue, b.ClusterQueue))
	})
	// Types: most waiting first, then most idle; "any" among them.
	slices.SortStableFunc(q.GPUTypes, func(a, b QueueGPUType) int {
		return cmp.Or(cmp.Compare(basis(b.Peak, b.All).PendingGPUHours, basis(a.Peak, a.All).PendingGPUHours), cmp.Compare(b.All.PendingGPUHours, a.All.PendingGPUHours),
			cmp.Compare(b.IdleGPUHours, a.IdleGPUHours), cmp.Compare(a.GPUType, b.GPUType))
	})
	for _, h := range holders {
		if h.QuotaGPUHours+h.PreemptionGPUHours+h.OutrankedGPUHours > 0 {
			q.TopHolders = append(q.TopHolders, h)
		}
	}
	slices.SortStableFunc(q.TopHolders, func(a, b QueueHolder) int {
		return cmp.Or(cmp.Compare(b.Blocked(q.Basis), a.Blocked(q.Basis)), cmp.Compare(b.Blocked(BasisAll), a.Blocked(BasisAll)), cmp.Compare(a.ID(), b.ID()))
	})
	if len(q.TopHolders) > qc.top {
		q.TopHolders = q.TopHolders[:qc.top]
	}
	q.ClusterQueues = clusterQueues(in, qi, peak, cqIdle)
	q.Kind, q.Sentence, q.Knobs = queueVerdict(q)
	return q
}

// productOf is the GPU type of a device named name: its GFD product label,
// "unknown" for a device without a name.
func productOf(name string) string {
	if p := GPUProduct(name); p != "" {
		return p
	}
	return "unknown"
}

// borrowedAt is, at step i, the GPUs each ClusterQueue of an idle holder
// uses beyond its nominal quota, from the cluster's usage and nominal
// series by ClusterQueue: only the holders' queues are read, so a step
// costs its holders, not every queue Kueue reports.
func borrowedAt(qi queueInput, idle []queueIdle, usage, nominal map[string][]int, i int) map[string]float64 {
	if len(usage) == 0 {
		return nil
	}
	var out map[string]float64
	for _, h := range idle {
		if h.cq == "" {
			continue
		}
		if _, done := out[h.cq]; done {
			continue
		}
		var use, nom float64
		for _, j := range usage[h.cq] {
			if v := qi.kueueUsage[j].vals[i]; !math.IsNaN(v) {
				use += v
			}
		}
		for _, j := range nominal[h.cq] {
			if v := qi.kueueNominal[j].vals[i]; !math.IsNaN(v) {
				nom += v
			}
		}
		if out == nil {
			out = map[string]float64{}
		}
		out[h.cq] = max(0, use-nom)
	}
	return out
}

// clusterQueues folds Kueue's series into one ClusterQueueUse per queue.
func clusterQueues(in input, qi queueInput, peak []float64, idle map[cqKey][2][2]float64) []ClusterQueueUse {
	type key struct{ cluster, cq string }
	by := map[key]*ClusterQueueUse{}
	get := func(s series) *ClusterQueueUse {
		k := key{string(s.labels["cluster"]), string(s.labels["cluster_queue"])}
		u := by[k]
		if u == nil {
			u = &ClusterQueueUse{Cluster: k.cluster, Name: k.cq, PendingGPUs: -1}
			by[k] = u
		}
		if c := string(s.labels["cohort"]); c != "" {
			u.Cohort = c
		}
		return u
	}
	// Means over covered time of gauges read at each step's middle.
	mean := func(ss []series, f func(*ClusterQueueUse) *float64) {
		for _, s := range ss {
			u := get(s)
			var sum, cov float64
			for i, v := range s.vals {
				if c := in.covered[i]; c > 0 && !math.IsNaN(v) {
					sum += v * c
					cov += c
				}
			}
			*f(u) = ratio(sum, cov)
		}
	}
	mean(qi.kueueUsage, func(u *ClusterQueueUse) *float64 { return &u.UsedGPUs })
	mean(qi.kueueNominal, func(u *ClusterQueueUse) *float64 { return &u.NominalGPUs })
	mean(qi.kueuePending, func(u *ClusterQueueUse) *float64 { return &u.PendingWorkloads })
	mean(qi.kueuePendingGPUs, func(u *ClusterQueueUse) *float64 { return &u.PendingGPUs })
	// Each queue's nominal series, found once: a lookup per usage series
	// and step would cost their product (issue #31: 50,000 series ran for
	// CPU-minutes).
	nominal := map[key][]int{}
	for j, n := range qi.kueueNominal {
		k := key{string(n.labels["cluster"]), string(n.labels["cluster_queue"])}
		nominal[k] = append(nominal[k], j)
	}
	for _, s := range qi.kueueUsage {
		u := get(s)
		noms := nominal[key{string(s.labels["cluster"]), string(s.labels["cluster_queue"])}]
		for i, v := range s.vals {
			c := in.covered[i]
			if c <= 0 || math.IsNaN(v) {
				continue
			}
			nom := 0.0
			for _, j := range noms {
				if n := qi.kueueNominal[j]; !math.IsNaN(n.vals[i]) {
					nom += n.vals[i]
				}
			}
			b := max(0, v-nom) * c / 3600
			u.BorrowedGPUHours += b
			u.PeakBorrowedGPUHours += b * peak[i]
		}
	}
	for k, v := range idle {
		u := by[key{k.cluster, k.cq}]
		if u == nil {
			continue // a label that names a queue Kueue does not report
		}
		u.IdleGPUHours, u.BorrowedIdleGPUHours, u.PeakBorrowedIdleGPUHours = v[0][0], v[0][1], v[1][1]
	}
	out := make([]ClusterQueueUse, 0, len(by))
	for _, u := range by {
		out = append(out, *u)
	}
	slices.SortFunc(out, func(a, b ClusterQueueUse) int {
		return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.Name, b.Name))
	})
	return out
}

// queueVerdict judges the waiting on the queue's basis: most of it
// schedulable (free GPUs, quota or preemption), held idle by work that
// outranks it, fragmented over nodes, or short of any idle GPU of its type.
func queueVerdict(q Queue) (kind, sentence string, knobs []string) {
	f, at := q.Peak, " at peak"
	if q.Basis == BasisAll {
		f, at = q.All, ""
	}
	knobs = []string{}
	if !q.Available {
		return QueueUnknown, "Who waits for GPUs is unknown (no kube-state-metrics series).", knobs
	}
	if f.PendingGPUHours < nothingIdle*max(f.Hours, 1e-9) {
		return QueueNone, fmt.Sprintf("Nothing waited for GPUs%s.", at), knobs
	}
	p := func(x float64) string { return fmt.Sprintf("%.0f%%", 100*ratio(x, f.PendingGPUHours)) }
	// A part is named, with its knob, when it rounds to 1% of the waiting
	// or more: a few GPU-seconds free as pods end and others start are no
	// placement problem.
	named := func(x float64) bool { return x > 0 && ratio(x, f.PendingGPUHours) >= 0.005 }
	sched := f.FreeGPUHours + f.ReclaimableGPUHours()
	capa := f.ShortfallGPUHours + f.OtherTypeGPUHours
	var parts []string
	if named(f.PreemptionGPUHours) {
		parts = append(parts, p(f.PreemptionGPUHours)+" by preemption")
	}
	borrowed := f.QuotaGPUHours - f.heldBack
	if named(borrowed) {
		parts = append(parts, p(borrowed)+" by reclaiming borrowed quota")
	}
	if named(f.heldBack) {
		parts = append(parts, p(f.heldBack)+" on free GPUs Kueue's quota held it back from")
	}
	if named(f.FreeGPUHours) {
		parts = append(parts, p(f.FreeGPUHours)+" on GPUs nobody held")
	}
	how := ""
	if len(parts) > 0 {
		how = " (" + strings.Join(parts, ", ") + ")"
	}
	// The knobs, in the order of the parts they would free.
	if named(f.PreemptionGPUHours) {
		knobs = append(knobs, "priority classes and preemption: the waiters' PriorityClass preemptionPolicy, Kueue's withinClusterQueue preemption")
	}
	if named(f.QuotaGPUHours) {
		knobs = append(knobs, "Kueue quotas and borrowing: nominalQuota, borrowingLimit, reclaimWithinCohort, and the workloads Kueue held back while GPUs were free")
	}
	if named(f.FreeGPUHours) {
		knobs = append(knobs, "placement: the waiters' node selectors, affinities and tolerations")
	}
	if named(f.OutrankedGPUHours) {
		knobs = append(knobs, "idle-notebook culling and idle timeouts for the holders that outrank the waiters")
	}
	if named(f.FragmentedGPUHours) {
		knobs = append(knobs, "defragmenting: bin-packing (the scheduler's MostAllocated scoring), gang and topology-aware placement, draining nodes of small GPU pods")
	}
	if named(f.OtherTypeGPUHours) {
		knobs = append(knobs, "GPU types: let waiters take the idle type (their nvidia.com/gpu.product node selectors, Kueue ResourceFlavors), or buy the type they wait for")
	}
	switch {
	case sched >= f.OutrankedGPUHours && sched >= f.FragmentedGPUHours && sched >= capa:
		kind = QueueScheduling
		// Most of it held back by Kueue while GPUs were free: say so, it
		// is Kueue's quota to fix.
		problem := "a scheduling problem"
		if f.heldBack > f.FreeGPUHours+f.PreemptionGPUHours+borrowed {
			problem = "a quota problem (Kueue held it back while GPUs were free)"
		}
		sentence = fmt.Sprintf("%s of the waiting%s could have run on idle GPUs held by lower-priority or borrowing work, or on free ones%s: %s, not a capacity one.", p(sched), at, how, problem)
		if !named(f.FreeGPUHours) && !named(f.heldBack) {
			sentence = fmt.Sprintf("%s of the waiting%s could have run on idle GPUs held by lower-priority or borrowing work%s: %s, not a capacity one.", p(sched), at, how, problem)
		}
	case f.OutrankedGPUHours >= f.FragmentedGPUHours && f.OutrankedGPUHours >= capa:
		kind = QueueIdle
		sentence = fmt.Sprintf("%s of the waiting%s could have run only on idle GPUs held by work of equal or higher priority, which neither preemption nor quota takes back: idle allocation, not capacity.", p(f.OutrankedGPUHours), at)
	case f.FragmentedGPUHours >= capa:
		kind = QueueFragmentation
		sentence = fmt.Sprintf("%s of the waiting%s could have run on the free and idle GPUs of its type, but no one node had enough of them: fragmentation, neither scheduling nor capacity.", p(f.FragmentedGPUHours), at)
	default:
		kind = QueueCapacity
		sentence = fmt.Sprintf("%s of the waiting%s found no idle GPU of its type that could have run it: a capacity problem, not a scheduling one", p(capa), at)
		if named(f.OtherTypeGPUHours) {
			sentence += fmt.Sprintf(" (%s only on idle GPUs of another type)", p(f.OtherTypeGPUHours))
		}
		if named(sched) {
			sentence += fmt.Sprintf("; %s could have run on idle GPUs held by lower-priority or borrowing work, or on free ones%s", p(sched), how)
		}
		sentence += "."
	}
	if len(knobs) > 0 {
		sentence += " Look at " + strings.Join(knobLeads(knobs), "; ") + "."
	}
	return kind, sentence, knobs
}

// knobLeads is each knob's name, before its colon.
func knobLeads(knobs []string) []string {
	out := make([]string, len(knobs))
	for i, k := range knobs {
		out[i], _, _ = strings.Cut(k, ":")
	}
	return out
}
