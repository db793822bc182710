package sim

import (
	"github.com/gpuxray/gpuxray/collector"
	"github.com/gpuxray/gpuxray/collector/workload"
)

// Identity is how the simulated node's pod source names pods' workloads,
// models and extra labels; it mirrors the pod informer's configuration.
type Identity struct {
	// ModelKeys are the pod label keys tried for the model, in order; nil
	// means workload.DefaultModelKeys.
	ModelKeys []string
	// ExtraLabels maps Prometheus label names to pod label keys, as
	// workload.ParseExtraLabels returns them.
	ExtraLabels map[string]string
}

// SetIdentity sets how pods' identity is derived. Call it before the node is
// used; it is not safe to change while the node is read.
func (n *Node) SetIdentity(id Identity) { n.identity = id }

// apiVersions are the API groups of the owner kinds a scenario names
// without one, so that owner resolution sees what a cluster would show.
var apiVersions = map[string]string{
	"ReplicaSet": "apps/v1", "StatefulSet": "apps/v1", "DaemonSet": "apps/v1", "Deployment": "apps/v1",
	"Job": "batch/v1", "CronJob": "batch/v1",
	"PyTorchJob": "kubeflow.org/v1", "TFJob": "kubeflow.org/v1", "MPIJob": "kubeflow.org/v2beta1", "XGBoostJob": "kubeflow.org/v1",
	"RayCluster": "ray.io/v1", "RayJob": "ray.io/v1", "RayService": "ray.io/v1",
	"JobSet": "jobset.x-k8s.io/v1alpha2", "LeaderWorkerSet": "leaderworkerset.x-k8s.io/v1",
	"Node": "v1",
}

// identify fills the workload, model, extra labels, priority and Kueue
// queues of pod i, as the pod informer would from the pod's owner
// reference, labels and spec.
func (n *Node) identify(i int, p *collector.Pod) {
	sp := n.sc.Pods[i]
	var owners []workload.OwnerRef
	if sp.Owner.Kind != "" {
		owners = []workload.OwnerRef{{APIVersion: apiVersions[sp.Owner.Kind], Kind: sp.Owner.Kind, Name: sp.Owner.Name, Controller: true}}
	}
	p.WorkloadKind, p.Workload = workload.ResolvePod(sp.Name, owners, sp.Labels)
	keys := n.identity.ModelKeys
	if keys == nil {
		keys = workload.DefaultModelKeys
	}
	p.Model = workload.ModelFromLabels(sp.Labels, nil, keys)
	p.ExtraLabels = workload.ExtraLabels(n.identity.ExtraLabels, sp.Labels)
	// The admission controller gives every pod a priority: its class's,
	// or 0.
	p.Scheduling = collector.Scheduling{PriorityClass: sp.PriorityClass, Priority: n.sc.PriorityOf(sp.PriorityClass), HasPriority: true}
	p.Scheduling.Queue, p.Scheduling.ClusterQueue = workload.KueueQueues(sp.Labels)
	n.sharing(i, p)
}
