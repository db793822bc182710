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
	// NodeSelector is the pod's spec.nodeSelector, served as
	// kube_pod_nodeselectors: GFD's nvidia.com/gpu.product label selects a
	// GPU type (ProductLabel).
	NodeSelector map[string]string
	// Suspended makes it a Kueue-suspended job: a Workload of one pod set
	// (GPUs on one pod) waiting in the ClusterQueue its Queue feeds,
	// whose Job Kueue keeps suspended, so it has no pod. Only Kueue's
	// pending series and the Workload's (deploy/kube-state-metrics/
	// kueue.yaml) show it.
	Suspended bool
}

// ProductLabel is GPU Feature Discovery's node label of a GPU's product
// (NVIDIA/k8s-device-plugin, internal/lm/resource.go).
const ProductLabel = "nvidia.com/gpu.product"

var unscheduledKeys = []string{"namespace", "name", "container", "owner", "resource", "gpus", "from", "to", "priority_class", "queue", "claim", "node_selector", "suspended"}

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
		if n := m["node_selector"]; n != nil {
			if u.NodeSelector, err = d.stringMap(n, p+".node_selector"); err != nil {
				return err
			}
		}
		if n := m["suspended"]; n != nil {
			if u.Suspended, err = d.boolean(n, p+".suspended"); err != nil {
				return err
			}
		}
		if u.Suspended {
			switch {
			case u.Claim != "":
				return d.errf(m["suspended"], p+".suspended", "a suspended job has no pod, so no claim; drop claim")
			case u.Resource != ResourceGPU:
				return d.errf(m["suspended"], p+".suspended", "Kueue counts a suspended job's %s; resource %s is not one", ResourceGPU, u.Resource)
			case s.clusterQueueOf(u.Namespace, u.Queue) == "":
				return d.errf(m["suspended"], p+".suspended", "a suspended job waits in a Kueue LocalQueue: queue must name one of kueue's local_queues in %s", u.Namespace)
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
	return clusterState{c: newCluster([]*Scenario{n.sc}, n.sc.Kueue), now: n.clock.Now}
}

// stringMap decodes a mapping of names to string values, such as a node
// selector.
func (d *decoder) stringMap(n *yaml.Node, field string) (map[string]string, error) {
	if n.Kind != yaml.MappingNode {
		return nil, d.errf(n, field, "want a mapping of names to values, got %s", kindName(n))
	}
	out := make(map[string]string, len(n.Content)/2)
	for j := 0; j+1 < len(n.Content); j += 2 {
		k, v := n.Content[j], resolve(n.Content[j+1])
		f := field + "." + k.Value
		if k.Value == "" {
			return nil, d.errf(k, field, "a name must not be empty")
		}
		if _, dup := out[k.Value]; dup {
			return nil, d.errf(k, f, "given twice")
		}
		val, err := d.scalar(v, f)
		if err != nil {
			return nil, err
		}
		out[k.Value] = val
	}
	return out, nil
}

// boolean decodes true or false.
func (d *decoder) boolean(n *yaml.Node, field string) (bool, error) {
	v, err := d.scalar(n, field)
	if err != nil {
		return false, err
	}
	switch v {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, d.errf(n, field, "%q is not true or false", v)
}
