package sim

import (
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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

// unscheduled checks the unscheduled pods and fills in their defaults.
func (d *validator) unscheduled(spec *ScenarioSpec, s *Scenario) error {
	seen := map[string]string{}
	for i, p := range s.Pods {
		seen[p.Namespace+"/"+p.Name] = fmt.Sprintf("pods[%d]", i)
	}
	for i := range spec.Unscheduled {
		us := &spec.Unscheduled[i]
		p := fmt.Sprintf("unscheduled[%d]", i)
		if err := d.required(p, "namespace", "name"); err != nil {
			return err
		}
		u := UnscheduledPod{Namespace: us.Namespace, Name: us.Name, Container: "main", Resource: ResourceGPU, GPUs: 1, To: s.Duration,
			Queue: us.Queue, NodeSelector: us.NodeSelector, Suspended: bool(us.Suspended)}
		key := u.Namespace + "/" + u.Name
		if prev, dup := seen[key]; dup {
			return d.errf(p+".name", "%s is already %s", key, prev)
		}
		seen[key] = p
		if d.has(p + ".container") {
			u.Container = us.Container
		}
		if us.Owner != nil {
			if err := d.required(p+".owner", "kind", "name"); err != nil {
				return err
			}
			u.Owner = *us.Owner
		}
		if d.has(p + ".resource") {
			u.Resource = us.Resource
			if u.Resource != ResourceGPU && u.Resource != ResourceGPUShared && !strings.HasPrefix(u.Resource, ResourceMIGPrefix) {
				return d.errf(p+".resource", "%q is not %s, %s or %s<profile>", u.Resource, ResourceGPU, ResourceGPUShared, ResourceMIGPrefix)
			}
		}
		if d.has(p + ".claim") {
			if d.has(p + ".resource") {
				return d.errf(p+".claim", "a pod that waits on a DRA claim requests no resource; drop resource")
			}
			u.Claim, u.Resource = us.Claim, ""
		}
		if d.has(p + ".gpus") {
			n, err := d.whole(p+".gpus", us.GPUs, 1, 1024)
			if err != nil {
				return err
			}
			u.GPUs = int(n)
		}
		if err := d.window(p, us.From, us.To, s.Duration, &u.From, &u.To); err != nil {
			return err
		}
		if d.has(p + ".priority_class") {
			if err := d.priorityClass(p+".priority_class", us.PriorityClass, s); err != nil {
				return err
			}
			u.PriorityClass = us.PriorityClass
		}
		for _, k := range sortedKeys(u.NodeSelector) {
			if k == "" {
				return d.errf(p+".node_selector", "a name must not be empty")
			}
		}
		if u.Suspended {
			switch {
			case u.Claim != "":
				return d.errf(p+".suspended", "a suspended job has no pod, so no claim; drop claim")
			case u.Resource != ResourceGPU:
				return d.errf(p+".suspended", "Kueue counts a suspended job's %s; resource %s is not one", ResourceGPU, u.Resource)
			case s.clusterQueueOf(u.Namespace, u.Queue) == "":
				return d.errf(p+".suspended", "a suspended job waits in a Kueue LocalQueue: queue must name one of kueue's local_queues in %s", u.Namespace)
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
