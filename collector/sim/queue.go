package sim

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/gpuxray/gpuxray/collector/workload"
)

// ClusterQueue is a Kueue ClusterQueue of the scenario's cluster, with its
// GPU quota (resource nvidia.com/gpu, one flavor) and the LocalQueues
// (namespace/name) that feed it. Its usage is not given: it is the GPUs of
// the running pods whose kueue.x-k8s.io/cluster-queue-name label names it.
type ClusterQueue struct {
	Name   string
	Cohort string
	// NominalQuota is the GPUs the queue owns; it borrows what it uses
	// beyond them from its cohort.
	NominalQuota int
	// BorrowingLimit caps the borrowing; -1 when unset (+Inf in Kueue's
	// metric).
	BorrowingLimit int
	// LocalQueues are "namespace/name" of the LocalQueues pointing at it.
	LocalQueues []string
}

// PriorityOf returns the value of priority class class in the scenario, 0
// for none: a pod of no class has priority 0 when the cluster has no global
// default class, as the scenarios' clusters have not.
func (s *Scenario) PriorityOf(class string) int32 { return s.PriorityClasses[class] }

// priorityClasses checks `priority_classes: {name: value, …}`.
func (d *validator) priorityClasses(spec *ScenarioSpec, s *Scenario) error {
	if spec.PriorityClasses == nil {
		return nil
	}
	s.PriorityClasses = make(map[string]int32, len(spec.PriorityClasses))
	for _, k := range sortedKeys(spec.PriorityClasses) {
		if k == "" {
			return d.errf("priority_classes", "a class name must not be empty")
		}
		// The API server's bound: user classes are at most one billion.
		v, err := d.whole("priority_classes."+k, spec.PriorityClasses[k], math.MinInt32, 2000001000)
		if err != nil {
			return err
		}
		s.PriorityClasses[k] = int32(v)
	}
	return nil
}

// kueue checks `kueue: [{cluster_queue, cohort, nominal_quota,
// borrowing_limit, local_queues}, …]`.
func (d *validator) kueue(spec *ScenarioSpec, s *Scenario) error {
	owner := map[string]string{}
	for i, q := range spec.Kueue {
		p := fmt.Sprintf("kueue[%d]", i)
		if err := d.required(p, "cluster_queue"); err != nil {
			return err
		}
		cq := ClusterQueue{Name: q.ClusterQueue, Cohort: q.Cohort, BorrowingLimit: -1}
		if slices.ContainsFunc(s.Kueue, func(o ClusterQueue) bool { return o.Name == cq.Name }) {
			return d.errf(p+".cluster_queue", "%s is given twice", cq.Name)
		}
		v, err := d.whole(p+".nominal_quota", q.NominalQuota, 0, 100000)
		if err != nil {
			return err
		}
		cq.NominalQuota = int(v)
		if q.BorrowingLimit != nil {
			v, err := d.whole(p+".borrowing_limit", *q.BorrowingLimit, 0, 100000)
			if err != nil {
				return err
			}
			cq.BorrowingLimit = int(v)
		}
		for j, v := range q.LocalQueues {
			f := fmt.Sprintf("%s.local_queues[%d]", p, j)
			if ns, name, ok := strings.Cut(v, "/"); !ok || ns == "" || name == "" {
				return d.errf(f, "%q is not namespace/name", v)
			}
			if prev, dup := owner[v]; dup {
				return d.errf(f, "%s already feeds %s", v, prev)
			}
			owner[v] = cq.Name
			cq.LocalQueues = append(cq.LocalQueues, v)
		}
		s.Kueue = append(s.Kueue, cq)
	}
	return nil
}

// priorityClass checks a pod's `priority_class`, which must be one of the
// scenario's priority_classes.
func (d *validator) priorityClass(field, c string, s *Scenario) error {
	if _, ok := s.PriorityClasses[c]; !ok {
		known := sortedKeys(s.PriorityClasses)
		if len(known) == 0 {
			return d.errf(field, "%q is not a class of priority_classes, which the scenario does not have", c)
		}
		return d.errf(field, "%q is not a class of priority_classes (%s)", c, strings.Join(known, ", "))
	}
	return nil
}

// clusterQueueOf returns the ClusterQueue LocalQueue namespace/queue
// feeds, "" for none.
func (s *Scenario) clusterQueueOf(namespace, queue string) string {
	if queue == "" {
		return ""
	}
	key := namespace + "/" + queue
	for _, cq := range s.Kueue {
		if slices.Contains(cq.LocalQueues, key) {
			return cq.Name
		}
	}
	return ""
}

// KueueQueues returns pod i's Kueue LocalQueue and ClusterQueue, read from
// its labels as the pod source reads them.
func (s *Scenario) KueueQueues(i int) (queue, clusterQueue string) {
	return workload.KueueQueues(s.Pods[i].Labels)
}

// PriorityClasses returns the scenario's PriorityClasses by name, as the
// agent's PriorityClass watch would (exporter.PriorityClassSource).
func (n *Node) PriorityClasses() map[string]int32 { return maps.Clone(n.sc.PriorityClasses) }
