package sim

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

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

var clusterQueueKeys = []string{"cluster_queue", "cohort", "nominal_quota", "borrowing_limit", "local_queues"}

// priorityClasses decodes `priority_classes: {name: value, …}`.
func (d *decoder) priorityClasses(n *yaml.Node, s *Scenario) error {
	if n.Kind != yaml.MappingNode {
		return d.errf(n, "priority_classes", "want a mapping of class names to values, got %s", kindName(n))
	}
	s.PriorityClasses = make(map[string]int32, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], resolve(n.Content[i+1])
		f := "priority_classes." + k.Value
		if k.Value == "" {
			return d.errf(k, "priority_classes", "a class name must not be empty")
		}
		if _, dup := s.PriorityClasses[k.Value]; dup {
			return d.errf(k, f, "given twice")
		}
		// The API server's bound: user classes are at most one billion.
		val, err := d.integer(v, f, math.MinInt32, 2000001000)
		if err != nil {
			return err
		}
		s.PriorityClasses[k.Value] = int32(val)
	}
	return nil
}

// kueue decodes `kueue: [{cluster_queue, cohort, nominal_quota,
// borrowing_limit, local_queues}, …]`.
func (d *decoder) kueue(n *yaml.Node, s *Scenario) error {
	items, err := d.seq(n, "kueue")
	if err != nil {
		return err
	}
	owner := map[string]string{}
	for i, it := range items {
		p := fmt.Sprintf("kueue[%d]", i)
		m, err := d.mapping(it, p, clusterQueueKeys...)
		if err != nil {
			return err
		}
		if m["cluster_queue"] == nil {
			return d.errf(it, p+".cluster_queue", "missing")
		}
		cq := ClusterQueue{BorrowingLimit: -1}
		if cq.Name, err = d.str(m["cluster_queue"], p+".cluster_queue"); err != nil {
			return err
		}
		if slices.ContainsFunc(s.Kueue, func(o ClusterQueue) bool { return o.Name == cq.Name }) {
			return d.errf(m["cluster_queue"], p+".cluster_queue", "%s is given twice", cq.Name)
		}
		if c := m["cohort"]; c != nil {
			if cq.Cohort, err = d.str(c, p+".cohort"); err != nil {
				return err
			}
		}
		if q := m["nominal_quota"]; q != nil {
			v, err := d.integer(q, p+".nominal_quota", 0, 100000)
			if err != nil {
				return err
			}
			cq.NominalQuota = int(v)
		}
		if q := m["borrowing_limit"]; q != nil {
			v, err := d.integer(q, p+".borrowing_limit", 0, 100000)
			if err != nil {
				return err
			}
			cq.BorrowingLimit = int(v)
		}
		if l := m["local_queues"]; l != nil {
			lqs, err := d.seq(l, p+".local_queues")
			if err != nil {
				return err
			}
			for j, lq := range lqs {
				f := fmt.Sprintf("%s.local_queues[%d]", p, j)
				v, err := d.str(lq, f)
				if err != nil {
					return err
				}
				if ns, name, ok := strings.Cut(v, "/"); !ok || ns == "" || name == "" {
					return d.errf(lq, f, "%q is not namespace/name", v)
				}
				if prev, dup := owner[v]; dup {
					return d.errf(lq, f, "%s already feeds %s", v, prev)
				}
				owner[v] = cq.Name
				cq.LocalQueues = append(cq.LocalQueues, v)
			}
		}
		s.Kueue = append(s.Kueue, cq)
	}
	return nil
}

// priorityClass decodes a pod's `priority_class`, which must be one of the
// scenario's priority_classes.
func (d *decoder) priorityClass(n *yaml.Node, field string, s *Scenario) (string, error) {
	c, err := d.str(n, field)
	if err != nil {
		return "", err
	}
	if _, ok := s.PriorityClasses[c]; !ok {
		known := make([]string, 0, len(s.PriorityClasses))
		for k := range s.PriorityClasses {
			known = append(known, k)
		}
		slices.Sort(known)
		if len(known) == 0 {
			return "", d.errf(n, field, "%q is not a class of priority_classes, which the scenario does not have", c)
		}
		return "", d.errf(n, field, "%q is not a class of priority_classes (%s)", c, strings.Join(known, ", "))
	}
	return c, nil
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
