package report

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
)

// The queue X-ray's queries (docs/report.md, "The queue"). Every one keeps
// `cluster`: a pod waits for the GPUs of its own cluster, so the matching
// is done per cluster and summed.
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
	qQueueLabels   = `max by (cluster, namespace, pod, queue) (label_replace(kube_pod_labels, "queue", "$1", "label_kueue_x_k8s_io_queue_name", "(.*)"))`
	qQueueInfo     = `max by (cluster, namespace, pod, priority_class) (kube_pod_info)`
	// qQueuePods is pending GPUs by priority class (kube_pod_info) and
	// Kueue LocalQueue (kube_pod_labels); a pod either series lacks keeps
	// what the other says, so the total is qPending's.
	qQueuePods = `sum by (cluster, priority_class, queue) ((` + qQueuePodsBase + ` * on (cluster, namespace, pod) group_left (priority_class, queue) max by (cluster, namespace, pod, priority_class, queue) ((` +
		qQueueInfo + ` * on (cluster, namespace, pod) group_left (queue) ` + qQueueLabels + `) or on (cluster, namespace, pod) ` + qQueueInfo + ` or on (cluster, namespace, pod) ` + qQueueLabels +
		`)) or on (cluster, namespace, pod, container) ` + qQueuePodsBase + `)`
	// qQueueClasses is each PriorityClass's value.
	qQueueClasses = `max by (cluster, priority_class) (gpuxray_priority_class_value)`
	// qQueueHolders is the idle time in each step of whole GPUs not in MIG
	// mode (a MIG slice cannot take a pod that asks for nvidia.com/gpu),
	// credited to the highest-ranked of each GPU's holders, by its
	// workload, class and ClusterQueue. A class the agents do not know
	// ranks 0, as no class does. topk picks the holder by its class's
	// value; 0 * … + 1 keeps its labels and drops the value, which must
	// not scale the idle time.
	qQueueHolder   = `max by (cluster, job, instance, uuid, namespace, workload_kind, workload, priority_class, cluster_queue) (max_over_time(gpuxray_allocation_info[S]))`
	qQueueWholeGPU = ` * on (cluster, job, instance, uuid) group_left () max by (cluster, job, instance, uuid) (gpuxray_device_info{parent_uuid="", mig_mode!="enabled"})`
	qQueueHolders  = `sum by (cluster, namespace, workload_kind, workload, priority_class, cluster_queue) (sum by (cluster, job, instance, uuid) (increase(gpuxray_device_allocated_idle_seconds_total[S]))` + qQueueWholeGPU +
		` * on (cluster, job, instance, uuid) group_left (namespace, workload_kind, workload, priority_class, cluster_queue) (0 * topk by (cluster, job, instance, uuid) (1, ` +
		qQueueHolder + ` * on (cluster, priority_class) group_left () max by (cluster, priority_class) (max_over_time(gpuxray_priority_class_value[S])) or ` + qQueueHolder + ` * 0) + 1))`
	// qQueueFree is the free time of whole GPUs not in MIG mode: held by
	// nobody and not busy with work outside Kubernetes.
	qQueueFree = `sum by (cluster) (clamp_min(sum by (cluster, job, instance, uuid) (increase(gpuxray_device_unallocated_seconds_total[S])) - sum by (cluster, job, instance, uuid) (increase(gpuxray_device_unallocated_active_seconds_total[S])), 0)` + qQueueWholeGPU + `)`
	// Kueue's ClusterQueues (max by flavor: several Kueue replicas may
	// report one queue).
	qKueueUsage       = `sum by (cluster, cohort, cluster_queue) (max by (cluster, cohort, cluster_queue, flavor) (kueue_cluster_queue_resource_usage{resource="nvidia.com/gpu"}))`
	qKueueNominal     = `sum by (cluster, cohort, cluster_queue) (max by (cluster, cohort, cluster_queue, flavor) (kueue_cluster_queue_nominal_quota{resource="nvidia.com/gpu"}))`
	qKueuePending     = `sum by (cluster, cluster_queue) (max by (cluster, cluster_queue, status) (kueue_pending_workloads))`
	qKueuePendingGPUs = `max by (cluster, cluster_queue) (kueue_cluster_queue_resource_pending{resource="nvidia.com/gpu"})`
)

// Queue is the queue X-ray: who waited for GPUs, at what priority and in
// which queue, and what could have run them. docs/report.md defines every
// figure.
type Queue struct {
	// Available is false when no kube-state-metrics series were found:
	// who waited is unknown.
	Available bool `json:"available"`
	// PrioritiesKnown is whether the agents export PriorityClass values
	// (gpuxray_priority_class_value); without them every pod ranks 0.
	PrioritiesKnown bool `json:"priorities_known"`
	// Kueue is whether Kueue's ClusterQueue series were found.
	Kueue bool `json:"kueue"`
	// Basis is BasisPeak, or BasisAll when the range has no peak time:
	// what Kind and Sentence are judged on.
	Basis string `json:"basis"`
	// Kind is QueueScheduling, QueueIdle, QueueCapacity, QueueNone or
	// QueueUnknown; Sentence says it, Knobs are what to look at.
	Kind     string   `json:"kind"`
	Sentence string   `json:"sentence"`
	Knobs    []string `json:"knobs"`
	// All and Peak are the figures over all covered time and at peak.
	All  QueueFigures `json:"all"`
	Peak QueueFigures `json:"peak"`
	// Classes are the figures by priority class and queue, most pending
	// GPU-hours at peak first.
	Classes []QueueClass `json:"classes"`
	// TopHolders are the workloads whose idle GPUs waiters could have
	// used, most such GPU-hours (on Basis) first, --top of them.
	TopHolders []QueueHolder `json:"top_holders"`
	// ClusterQueues are Kueue's queues, by cluster.
	ClusterQueues []ClusterQueueUse `json:"cluster_queues"`
}

// Kinds of queue.
const (
	// QueueScheduling: most of the waiting could have run on free GPUs or
	// on idle GPUs the scheduler or Kueue could take back.
	QueueScheduling = "scheduling"
	// QueueIdle: most of it could have run only on idle GPUs held by work
	// of equal or higher priority: idle allocation to cull.
	QueueIdle = "idle"
	// QueueCapacity: most of it found no idle GPU at all.
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
	// quota (reclaimable by quota).
	QuotaGPUHours float64 `json:"quota_gpu_hours"`
	// PreemptionGPUHours on idle GPUs held by work of lower priority
	// (reclaimable by preemption).
	PreemptionGPUHours float64 `json:"preemption_gpu_hours"`
	// OutrankedGPUHours only on idle GPUs held by work of equal or higher
	// priority: neither the scheduler nor Kueue takes those back.
	OutrankedGPUHours float64 `json:"outranked_gpu_hours"`
	// ShortfallGPUHours no idle GPU could have served: true capacity
	// shortfall.
	ShortfallGPUHours float64 `json:"shortfall_gpu_hours"`
}

// ReclaimableGPUHours is the waiting that idle GPUs held by lower-priority
// or borrowing work could have run.
func (f QueueFigures) ReclaimableGPUHours() float64 { return f.QuotaGPUHours + f.PreemptionGPUHours }

func (f *QueueFigures) add(w float64, c [numQueueParts]float64) {
	f.FreeGPUHours += c[partFree] * w
	f.QuotaGPUHours += c[partQuota] * w
	f.PreemptionGPUHours += c[partPreemption] * w
	f.OutrankedGPUHours += c[partOutranked] * w
	f.ShortfallGPUHours += c[partShortfall] * w
	for _, v := range c {
		f.PendingGPUHours += v * w
	}
}

// QueueClass is the waiting of one priority class in one Kueue LocalQueue
// ("" for pods no queue names, or a kube-state-metrics that does not
// export the queue-name label).
type QueueClass struct {
	PriorityClass string `json:"priority_class"`
	// Priority is the class's value (0 for no class or one the agents do
	// not know).
	Priority float64      `json:"priority"`
	Queue    string       `json:"queue"`
	All      QueueFigures `json:"all"`
	Peak     QueueFigures `json:"peak"`
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
	// are not pending pods: they are here, not in the matching.
	PendingWorkloads float64 `json:"pending_workloads"`
	PendingGPUs      float64 `json:"pending_gpus"`
}

// The parts the waiting of a step is split into, in the order they are
// served.
const (
	partFree = iota
	partQuota
	partPreemption
	partOutranked
	partShortfall
	numQueueParts
)

// queueWaiter is the GPUs one priority class of one queue waits for at a
// step, and its rank (the class's value).
type queueWaiter struct {
	key  int // index of its QueueClass
	rank float64
	gpus float64
}

// queueIdle is the idle GPUs one holder workload held at a step.
type queueIdle struct {
	key  int // index of its QueueHolder
	rank float64
	cq   string
	gpus float64
}

// queueStep is one cluster at one step: who waits, and the supply that
// could have run them, in GPUs.
type queueStep struct {
	waiters  []queueWaiter
	free     float64
	idle     []queueIdle
	borrowed map[string]float64 // ClusterQueue → GPUs used beyond its nominal quota
}

// queueMatch is how a step's waiting was served: per waiter (as
// queueStep.waiters) its GPUs by part; per idle holder (as queueStep.idle)
// its GPUs that waiters used, by part, and the part of its idle GPUs that
// was on borrowed quota.
type queueMatch struct {
	waiter        [][numQueueParts]float64
	idle          [][numQueueParts]float64
	borrowedShare []float64
}

// match serves a step's waiting, each idle GPU at most one waiting GPU
// (docs/report.md, "The queue"):
//
//  1. Free GPUs, which any waiter can take: lowest-ranked waiters first,
//     since the higher ones can take more of what follows.
//  2. Idle GPUs held on borrowed quota (at most what each ClusterQueue
//     borrows, the rest of its idle GPUs going to step 3), which Kueue
//     gives back to any queue of the cohort: lowest-ranked first again.
//  3. Idle GPUs held by work of lower priority than the waiter: highest-
//     ranked waiters first, each from the highest-ranked holders below it,
//     which fewer waiters can take.
//  4. Idle GPUs left, held by work of equal or higher priority: outranked.
//  5. The rest: shortfall.
//
// This serves the most waiting GPUs by steps 1-3 that any assignment could
// (the waiters' reach is nested by rank). A pool shared by several holders
// is drawn from each in proportion to its idle GPUs.
func match(s queueStep) queueMatch {
	m := queueMatch{waiter: make([][numQueueParts]float64, len(s.waiters)), idle: make([][numQueueParts]float64, len(s.idle)), borrowedShare: make([]float64, len(s.idle))}
	need := make([]float64, len(s.waiters))
	for i, w := range s.waiters {
		need[i] = max(0, w.gpus)
	}
	up := make([]int, len(s.waiters)) // waiters by rank, lowest first
	for i := range up {
		up[i] = i
	}
	slices.SortStableFunc(up, func(a, b int) int { return cmp.Compare(s.waiters[a].rank, s.waiters[b].rank) })

	// The quota pool: each ClusterQueue's idle GPUs, at most its borrowing.
	byCQ := map[string]float64{}
	for _, h := range s.idle {
		if h.cq != "" {
			byCQ[h.cq] += max(0, h.gpus)
		}
	}
	rest := make([]float64, len(s.idle)) // what step 3 may take from each holder
	quota := make([]float64, len(s.idle))
	var quotaTotal float64
	for i, h := range s.idle {
		g := max(0, h.gpus)
		rest[i] = g
		if h.cq == "" || byCQ[h.cq] <= 0 {
			continue
		}
		b := min(byCQ[h.cq], max(0, s.borrowed[h.cq]))
		quota[i] = g * b / byCQ[h.cq]
		rest[i] = g - quota[i]
		quotaTotal += quota[i]
		m.borrowedShare[i] = quota[i]
	}

	// 1 and 2: universal supplies, lowest-ranked waiters first.
	universal := func(part int, supply float64) float64 {
		used := 0.0
		for _, i := range up {
			t := min(need[i], supply-used)
			if t <= 0 {
				continue
			}
			m.waiter[i][part] += t
			need[i] -= t
			used += t
		}
		return used
	}
	universal(partFree, max(0, s.free))
	if used := universal(partQuota, quotaTotal); used > 0 {
		for i := range s.idle {
			m.idle[i][partQuota] = quota[i] * used / quotaTotal
		}
	}

	// Pools of the rest by holder rank, highest first.
	type pool struct {
		rank    float64
		holders []int
		left    float64
	}
	var pools []*pool
	for i, h := range s.idle {
		j := slices.IndexFunc(pools, func(p *pool) bool { return p.rank == h.rank })
		if j < 0 {
			pools = append(pools, &pool{rank: h.rank})
			j = len(pools) - 1
		}
		pools[j].holders = append(pools[j].holders, i)
		pools[j].left += rest[i]
	}
	slices.SortFunc(pools, func(a, b *pool) int { return cmp.Compare(b.rank, a.rank) })
	take := func(i int, p *pool, part int) {
		t := min(need[i], p.left)
		if t <= 0 {
			return
		}
		m.waiter[i][part] += t
		need[i] -= t
		// Drawn from the pool's holders in proportion to what each has left.
		for _, h := range p.holders {
			m.idle[h][part] += t * rest[h] / p.left
			rest[h] -= t * rest[h] / p.left
		}
		p.left -= t
	}
	// 3: highest-ranked waiters first, from the highest pool below each.
	for k := len(up) - 1; k >= 0; k-- {
		i := up[k]
		for _, p := range pools {
			if p.rank < s.waiters[i].rank {
				take(i, p, partPreemption)
			}
		}
	}
	// 4: what is idle still, whoever holds it.
	for _, i := range up {
		for _, p := range pools {
			take(i, p, partOutranked)
		}
	}
	for i := range need {
		m.waiter[i][partShortfall] = need[i]
	}
	return m
}

// cqKey is a ClusterQueue of a cluster.
type cqKey struct{ cluster, cq string }

// queueInput is what the queue X-ray reads, on the grid.
type queueInput struct {
	pods, classes, holders, free           []series
	kueueUsage, kueueNominal, kueuePending []series
	kueuePendingGPUs                       []series
}

// computeQueue builds the queue X-ray from in, each step weighted by its
// covered hours (and by its share of peak for the peak figures), as the
// Demand section is.
func computeQueue(in input, qi queueInput, peak []float64, top int, available bool) Queue {
	g := in.g
	q := Queue{Available: available, PrioritiesKnown: len(qi.classes) > 0, Kueue: len(qi.kueueUsage)+len(qi.kueueNominal) > 0,
		Classes: []QueueClass{}, TopHolders: []QueueHolder{}, ClusterQueues: []ClusterQueueUse{}, Knobs: []string{}}

	// The class values of each cluster at each step.
	type ckey struct{ cluster, class string }
	values := map[ckey][]float64{}
	for _, s := range qi.classes {
		k := ckey{string(s.labels["cluster"]), string(s.labels["priority_class"])}
		values[k] = s.vals
	}
	rank := func(cluster, class string, i int) float64 {
		if v, ok := values[ckey{cluster, class}]; ok && !math.IsNaN(v[i]) {
			return v[i]
		}
		// The class's value at another step: a class's value never changes.
		if v, ok := values[ckey{cluster, class}]; ok {
			for _, x := range v {
				if !math.IsNaN(x) {
					return x
				}
			}
		}
		return 0
	}
	classIdx := map[[2]string]int{}
	classOf := func(class, queue string) int {
		k := [2]string{class, queue}
		if i, ok := classIdx[k]; ok {
			return i
		}
		classIdx[k] = len(q.Classes)
		q.Classes = append(q.Classes, QueueClass{PriorityClass: class, Queue: queue})
		return len(q.Classes) - 1
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
	borrowedAt := func(cluster string, i int) map[string]float64 {
		use, nom := map[string]float64{}, map[string]float64{}
		for _, s := range qi.kueueUsage {
			if string(s.labels["cluster"]) == cluster && !math.IsNaN(s.vals[i]) {
				use[string(s.labels["cluster_queue"])] += s.vals[i]
			}
		}
		for _, s := range qi.kueueNominal {
			if string(s.labels["cluster"]) == cluster && !math.IsNaN(s.vals[i]) {
				nom[string(s.labels["cluster_queue"])] += s.vals[i]
			}
		}
		out := map[string]float64{}
		for cq, u := range use {
			out[cq] = max(0, u-nom[cq])
		}
		return out
	}
	clusters := map[string]bool{}
	for _, ss := range [][]series{qi.pods, qi.holders, qi.free} {
		for _, s := range ss {
			clusters[string(s.labels["cluster"])] = true
		}
	}
	names := make([]string, 0, len(clusters))
	for c := range clusters {
		names = append(names, c)
	}
	slices.Sort(names)

	cqIdle := map[cqKey][2][2]float64{} // [all, peak][idle, borrowed idle]
	for i := 0; i < g.n; i++ {
		cov := in.covered[i]
		if cov <= 0 {
			continue
		}
		wAll, wPeak := cov/3600, peak[i]*cov/3600
		q.All.Hours += wAll
		q.Peak.Hours += wPeak
		for _, cluster := range names {
			st := queueStep{borrowed: borrowedAt(cluster, i)}
			for _, s := range qi.pods {
				if string(s.labels["cluster"]) != cluster || math.IsNaN(s.vals[i]) || s.vals[i] <= 0 {
					continue
				}
				class := string(s.labels["priority_class"])
				st.waiters = append(st.waiters, queueWaiter{key: classOf(class, string(s.labels["queue"])), rank: rank(cluster, class, i), gpus: s.vals[i]})
			}
			for _, s := range qi.free {
				if string(s.labels["cluster"]) == cluster && !math.IsNaN(s.vals[i]) {
					st.free += s.vals[i] / cov
				}
			}
			for _, s := range qi.holders {
				if string(s.labels["cluster"]) != cluster || math.IsNaN(s.vals[i]) || s.vals[i] <= 0 {
					continue
				}
				class, cq := string(s.labels["priority_class"]), string(s.labels["cluster_queue"])
				k := hkey{string(s.labels["namespace"]), string(s.labels["workload_kind"]), string(s.labels["workload"]), class, cq}
				st.idle = append(st.idle, queueIdle{key: holderOf(k), rank: rank(cluster, class, i), cq: cq, gpus: s.vals[i] / cov})
			}
			m := match(st)
			for j, w := range st.waiters {
				c := &q.Classes[w.key]
				c.Priority = w.rank
				c.All.add(wAll, m.waiter[j])
				c.Peak.add(wPeak, m.waiter[j])
				q.All.add(wAll, m.waiter[j])
				q.Peak.add(wPeak, m.waiter[j])
			}
			for j, h := range st.idle {
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
	basis := func(c QueueClass) QueueFigures {
		if q.Basis == BasisAll {
			return c.All
		}
		return c.Peak
	}
	slices.SortStableFunc(q.Classes, func(a, b QueueClass) int {
		return cmp.Or(cmp.Compare(basis(b).PendingGPUHours, basis(a).PendingGPUHours), cmp.Compare(b.All.PendingGPUHours, a.All.PendingGPUHours),
			cmp.Compare(b.Priority, a.Priority), cmp.Compare(a.PriorityClass, b.PriorityClass), cmp.Compare(a.Queue, b.Queue))
	})
	for _, h := range holders {
		if h.QuotaGPUHours+h.PreemptionGPUHours+h.OutrankedGPUHours > 0 {
			q.TopHolders = append(q.TopHolders, h)
		}
	}
	slices.SortStableFunc(q.TopHolders, func(a, b QueueHolder) int {
		return cmp.Or(cmp.Compare(b.Blocked(q.Basis), a.Blocked(q.Basis)), cmp.Compare(b.Blocked(BasisAll), a.Blocked(BasisAll)), cmp.Compare(a.ID(), b.ID()))
	})
	if len(q.TopHolders) > top {
		q.TopHolders = q.TopHolders[:top]
	}
	q.ClusterQueues = clusterQueues(in, qi, peak, cqIdle)
	q.Kind, q.Sentence, q.Knobs = queueVerdict(q)
	return q
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
	for _, s := range qi.kueueUsage {
		u := get(s)
		for i, v := range s.vals {
			c := in.covered[i]
			if c <= 0 || math.IsNaN(v) {
				continue
			}
			nom := 0.0
			for _, n := range qi.kueueNominal {
				if n.labels["cluster"] == s.labels["cluster"] && n.labels["cluster_queue"] == s.labels["cluster_queue"] && !math.IsNaN(n.vals[i]) {
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
// outranks it, or short of any idle GPU.
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
	var parts []string
	if named(f.PreemptionGPUHours) {
		parts = append(parts, p(f.PreemptionGPUHours)+" by preemption")
	}
	if named(f.QuotaGPUHours) {
		parts = append(parts, p(f.QuotaGPUHours)+" by reclaiming borrowed quota")
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
		knobs = append(knobs, "Kueue quotas and borrowing: nominalQuota, borrowingLimit, reclaimWithinCohort")
	}
	if named(f.FreeGPUHours) {
		knobs = append(knobs, "placement: the waiters' node selectors, affinities and tolerations, and GPUs fragmented across nodes")
	}
	if named(f.OutrankedGPUHours) {
		knobs = append(knobs, "idle-notebook culling and idle timeouts for the holders that outrank the waiters")
	}
	switch {
	case sched >= f.OutrankedGPUHours && sched >= f.ShortfallGPUHours:
		kind = QueueScheduling
		sentence = fmt.Sprintf("%s of the waiting%s could have run on idle GPUs held by lower-priority or borrowing work, or on free ones%s: a scheduling problem, not a capacity one.", p(sched), at, how)
		if !named(f.FreeGPUHours) {
			sentence = fmt.Sprintf("%s of the waiting%s could have run on idle GPUs held by lower-priority or borrowing work%s: a scheduling problem, not a capacity one.", p(sched), at, how)
		}
	case f.OutrankedGPUHours >= f.ShortfallGPUHours:
		kind = QueueIdle
		sentence = fmt.Sprintf("%s of the waiting%s could have run only on idle GPUs held by work of equal or higher priority, which neither preemption nor quota takes back: idle allocation, not capacity.", p(f.OutrankedGPUHours), at)
	default:
		kind = QueueCapacity
		sentence = fmt.Sprintf("%s of the waiting%s found no idle GPU that could have run it: a capacity problem, not a scheduling one", p(f.ShortfallGPUHours), at)
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
