package workload

// Kueue's pod labels. Kueue keeps the queue of a workload on the Workload
// object; on pods it writes the LocalQueue and the ClusterQueue that
// admitted the workload (AssignQueueLabelsForPods, on by default from
// Kueue 0.17), and a plain pod queued by Kueue's pod integration carries
// the queue-name label its author set.
const (
	KueueQueueLabel        = "kueue.x-k8s.io/queue-name"
	KueueLocalQueueLabel   = "kueue.x-k8s.io/local-queue-name"
	KueueClusterQueueLabel = "kueue.x-k8s.io/cluster-queue-name"
)

// KueueQueues returns the Kueue LocalQueue and ClusterQueue a pod's labels
// name: the queue-name label, else the local-queue-name one; the
// ClusterQueue only where the pod says. Both are empty for a pod Kueue does
// not manage. Both are cleaned (CleanValue): a real API server checks
// label values, a fake or hostile one need not.
func KueueQueues(labels map[string]string) (queue, clusterQueue string) {
	queue = labels[KueueQueueLabel]
	if queue == "" {
		queue = labels[KueueLocalQueueLabel]
	}
	return CleanValue(queue, MaxNameBytes), CleanValue(labels[KueueClusterQueueLabel], MaxNameBytes)
}
