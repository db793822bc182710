package sim

import (
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"
)

// UnscheduledPod is a pod that requests GPUs and that no node has taken:
// over [From, To) it waits, Pending and bound to no node, as the scheduler
// leaves a pod that fits nowhere. The simulated node never sees it; only
// kube-state-metrics' view of the cluster (KubeState) shows it.
type UnscheduledPod struct {
	Namespace string
	Name      string
	Container string
	Owner     Owner
	// Resource is the extended resource the pod requests GPUs of.
	Resource string
	GPUs     int
	// From and To bound the wait: [From, To).
	From, To time.Duration
	// PriorityClass is one of the scenario's PriorityClasses, empty for
	// none; Queue the Kueue LocalQueue in the pod's namespace that its
	// kueue.x-k8s.io/queue-name label names, empty for none.
	PriorityClass string
	Queue         string
	// Claim, when set, names the DRA ResourceClaim the pod waits on (made
	// from a template, so owned by the pod): GPUs devices of device class
	// gpu.nvidia.com that the scheduler has not allocated. Such a pod
	// requests no extended resource (Resource is empty).
	Claim string
}

var unscheduledKeys = []string{"namespace", "name", "container", "owner", "resource", "gpus", "from", "to", "priority_class", "queue", "claim"}

func (d *decoder) unscheduled(n *yaml.Node, s *Scenario) error {
	items, err := d.seq(n, "unscheduled")
	if err != nil {
		return err
	}
	seen := map[string]string{}
	for i, p := range s.Pods {
		seen[p.Namespace+"/"+p.Name] = fmt.Sprintf("pods[%d]", i)
	}
	for i, it := range items {
		p := fmt.Sprintf("unscheduled[%d]", i)
		m, err := d.mapping(it, p, unscheduledKeys...)
		if err != nil {
			return err
		}
		u := UnscheduledPod{Container: "main", Resource: ResourceGPU, GPUs: 1, To: s.Duration}
		for _, k := range []string{"namespace", "name"} {
			if m[k] == nil {
				return d.errf(it, join(p, k), "missing")
			}
		}
		if u.Namespace, err = d.str(m["namespace"], p+".namespace"); err != nil {
			return err
		}
		if u.Name, err = d.str(m["name"], p+".name"); err != nil {
			return err
		}
		key := u.Namespace + "/" + u.Name
		if prev, dup := seen[key]; dup {
			return d.errf(m["name"], p+".name", "%s is already %s", key, prev)
		}
		seen[key] = p
		if c := m["container"]; c != nil {
			if u.Container, err = d.str(c, p+".container"); err != nil {
				return err
			}
		}
		if o := m["owner"]; o != nil {
			if u.Owner, err = d.owner(o, p+".owner"); err != nil {
				return err
			}
		}
		if r := m["resource"]; r != nil {
			if u.Resource, err = d.str(r, p+".resource"); err != nil {
				return err
			}
			if u.Resource != ResourceGPU && u.Resource != ResourceGPUShared && !strings.HasPrefix(u.Resource, ResourceMIGPrefix) {
				return d.errf(r, p+".resource", "%q is not %s, %s or %s<profile>", u.Resource, ResourceGPU, ResourceGPUShared, ResourceMIGPrefix)
			}
		}
		if c := m["claim"]; c != nil {
			if m["resource"] != nil {
				return d.errf(c, p+".claim", "a pod that waits on a DRA claim requests no resource; drop resource")
			}
			if u.Claim, err = d.str(c, p+".claim"); err != nil {
				return err
			}
			u.Resource = ""
		}
		if g := m["gpus"]; g != nil {
			n, err := d.integer(g, p+".gpus", 1, 1024)
			if err != nil {
				return err
			}
			u.GPUs = int(n)
		}
		if err := d.window(m, p, s.Duration, &u.From, &u.To); err != nil {
			return err
		}
		if n := m["priority_class"]; n != nil {
			if u.PriorityClass, err = d.priorityClass(n, p+".priority_class", s); err != nil {
				return err
			}
		}
		if n := m["queue"]; n != nil {
			if u.Queue, err = d.str(n, p+".queue"); err != nil {
				return err
			}
		}
		s.Unscheduled = append(s.Unscheduled, u)
	}
	return nil
}

// KubeState returns the series kube-state-metrics (and Kueue, when the
// scenario has ClusterQueues) would serve for the scenario's pods at the
// clock's now: see Cluster.At. gpuxray's rules join these with the agent's
// series (GPUPodsPendingWhileGPUsIdle, GPUPendingWhileLowerPriorityIdle).
// The agent never serves them: only `agent --simulate` does, on a path of
// its own.
func (n *Node) KubeState() prometheus.Collector {
	return clusterState{c: &Cluster{scs: []*Scenario{n.sc}, queues: n.sc.Kueue}, now: n.clock.Now}
}
