package workload

import (
	"strconv"
	"strings"
)

// OwnerRef is one of a pod's metadata.ownerReferences.
type OwnerRef struct {
	APIVersion string // e.g. "apps/v1", "kubeflow.org/v1"
	Kind       string
	Name       string
	// Controller is set on the owner that manages the pod; a pod has at most one.
	Controller bool
}

// Workload kinds that Resolve returns besides an owner's own kind.
const (
	// KindPod is a pod that no controller manages (created by a person or
	// a static pod): the pod is its own workload.
	KindPod = "Pod"
	// KindDeployment, KindCronJob, KindRollout are owners of a pod's owner,
	// recognised from the name and labels of the pod's direct owner.
	KindDeployment = "Deployment"
	KindCronJob    = "CronJob"
	KindRollout    = "Rollout"
	// KindPodGroup is a group of plain pods that Kueue admits together
	// (label kueue.x-k8s.io/pod-group-name).
	KindPodGroup = "PodGroup"
	// KindKnativeService is a Knative Serving Service (serving.knative.dev);
	// named apart from the core Service it is not.
	KindKnativeService = "KnativeService"
)

// Labels and annotations that name a workload. Each is set by the
// controller named, on every pod it creates (directly or through the Jobs,
// StatefulSets or RayClusters it creates).
const (
	// LabelWorkload and LabelWorkloadKind let a person name the workload
	// of a pod outright; they win over everything else.
	LabelWorkload     = "gpuxray.io/workload"
	LabelWorkloadKind = "gpuxray.io/workload-kind"

	labelPodTemplateHash      = "pod-template-hash"          // Deployment's ReplicaSets
	labelRolloutsTemplateHash = "rollouts-pod-template-hash" // Argo Rollouts' ReplicaSets
	labelTrainJob             = "trainer.kubeflow.org/trainjob-name"
	labelKubeflowJob          = "training.kubeflow.org/job-name"
	labelKubeflowOperator     = "training.kubeflow.org/operator-name"
	labelLWS                  = "leaderworkerset.sigs.k8s.io/name"
	labelRayCluster           = "ray.io/cluster"
	labelRayFromCRD           = "ray.io/originated-from-crd"
	labelRayFromCRName        = "ray.io/originated-from-cr-name"
	labelJobSet               = "jobset.sigs.k8s.io/jobset-name"
	labelInferenceService     = "serving.kserve.io/inferenceservice"
	labelKnativeService       = "serving.knative.dev/service"
	labelKueuePodGroup        = "kueue.x-k8s.io/pod-group-name"
)

// kubeflowOperators maps training.kubeflow.org/operator-name to the kind of
// job that operator runs (Kubeflow training-operator v1 and mpi-operator v2).
var kubeflowOperators = map[string]string{
	"pytorchjob-controller":  "PyTorchJob",
	"tfjob-controller":       "TFJob",
	"mpijob-controller":      "MPIJob",
	"mpi-operator":           "MPIJob",
	"xgboostjob-controller":  "XGBoostJob",
	"paddlejob-controller":   "PaddleJob",
	"jaxjob-controller":      "JAXJob",
	"mxjob-controller":       "MXJob",
	"lightgbmjob-controller": "LightGBMJob",
}

// Resolve names the workload a person created for a pod, from the pod's
// owner references and labels alone (no API call): the owner of its owner
// when the pod's owner is an intermediate object that a controller made.
//
// In order, the first that applies:
//
//   - gpuxray.io/workload (kind from gpuxray.io/workload-kind, else "Workload"):
//     a person's explicit say.
//   - Kubeflow Trainer v2: TrainJob (trainer.kubeflow.org/trainjob-name; the
//     TrainJob's JobSet and Jobs are intermediate).
//   - Kubeflow training-operator v1 and mpi-operator: the owner when it is a
//     kubeflow.org kind (PyTorchJob, TFJob, MPIJob, XGBoostJob, …); else
//     training.kubeflow.org/job-name with the kind from
//     training.kubeflow.org/operator-name (an MPIJob's launcher pod is owned
//     by a batch Job).
//   - KServe: InferenceService (serving.kserve.io/inferenceservice), whether
//     it runs as a Deployment, a Knative revision or a LeaderWorkerSet.
//   - KubeRay: the RayJob or RayService a RayCluster was made for
//     (ray.io/originated-from-crd and ray.io/originated-from-cr-name), else
//     the RayCluster (ray.io/cluster, or the owner).
//   - LeaderWorkerSet (leaderworkerset.sigs.k8s.io/name; its pods are owned
//     by StatefulSets it made).
//   - JobSet (jobset.sigs.k8s.io/jobset-name; its pods are owned by Jobs).
//   - Knative Serving: KnativeService (serving.knative.dev/service).
//   - The controlling owner reference (or the first, when none controls):
//     a ReplicaSet is named after its Deployment (or Argo Rollout) plus a
//     pod-template-hash suffix, which is stripped; a batch Job whose name
//     ends in a plausible scheduled time (Unix minutes, as the CronJob
//     controller names its Jobs) is its CronJob's; a Node owner (a static
//     pod's mirror) is no workload; any other owner (StatefulSet,
//     DaemonSet, Job, ReplicationController, an operator's custom kind) is
//     the workload itself.
//   - No owner: a Kueue pod group (kueue.x-k8s.io/pod-group-name), else
//     KindPod with an empty name: the pod is its own workload (see
//     ResolvePod).
//
// Kueue's other labels say nothing about the workload: kueue.x-k8s.io/queue-name
// is the LocalQueue a job was submitted to, and Kueue's Workload object is
// its admission record for a job a person created (named job-<name>-<hash>),
// so the job, found as above, is the workload. Kueue also sets pod-group-name
// on the pods of Deployments, StatefulSets and LeaderWorkerSets it admits;
// their owners win.
func Resolve(owners []OwnerRef, labels map[string]string) (kind, name string) {
	if n := labels[LabelWorkload]; n != "" {
		k := labels[LabelWorkloadKind]
		if k == "" {
			k = "Workload"
		}
		return k, n
	}
	if n := labels[labelTrainJob]; n != "" {
		return "TrainJob", n
	}
	owner, hasOwner := controllerOf(owners)
	if hasOwner && group(owner.APIVersion) == "kubeflow.org" {
		return owner.Kind, owner.Name
	}
	if n := labels[labelKubeflowJob]; n != "" {
		if k, ok := kubeflowOperators[labels[labelKubeflowOperator]]; ok {
			return k, n
		}
		// An operator we do not know: its owner, if it is the job itself,
		// tells the kind; the label still names the job.
		if hasOwner && owner.Name == n {
			return owner.Kind, n
		}
		return "TrainingJob", n
	}
	if n := labels[labelInferenceService]; n != "" {
		return "InferenceService", n
	}
	if k, n := ray(owner, hasOwner, labels); k != "" {
		return k, n
	}
	if n := labels[labelLWS]; n != "" {
		return "LeaderWorkerSet", n
	}
	if n := labels[labelJobSet]; n != "" {
		return "JobSet", n
	}
	if n := labels[labelKnativeService]; n != "" {
		return KindKnativeService, n
	}
	if !hasOwner || (owner.Kind == "Node" && group(owner.APIVersion) == "") {
		if n := labels[labelKueuePodGroup]; n != "" && !hasOwner {
			return KindPodGroup, n
		}
		return KindPod, ""
	}
	switch {
	case owner.Kind == "ReplicaSet" && group(owner.APIVersion) == "apps":
		if h := labels[labelRolloutsTemplateHash]; h != "" {
			if n, ok := strings.CutSuffix(owner.Name, "-"+h); ok && n != "" {
				return KindRollout, n
			}
		}
		if n, ok := deploymentOf(owner.Name, labels[labelPodTemplateHash]); ok {
			return KindDeployment, n
		}
	case owner.Kind == "Job" && group(owner.APIVersion) == "batch":
		if n, ok := cronJobOf(owner.Name); ok {
			return KindCronJob, n
		}
	}
	return owner.Kind, owner.Name
}

// ResolvePod is Resolve for pod podName, with a pod that no controller
// manages named after itself: ("Pod", podName). A person who runs
// `kubectl run debug --image=…` created that pod by name, so
// `sum by (workload)` shows it apart from other bare pods. Both are
// cleaned (CleanValue) and capped at MaxNameBytes: owner names and labels
// come from the API server.
func ResolvePod(podName string, owners []OwnerRef, labels map[string]string) (kind, name string) {
	kind, name = Resolve(owners, labels)
	if kind == KindPod && name == "" {
		name = podName
	}
	return CleanValue(kind, MaxNameBytes), CleanValue(name, MaxNameBytes)
}

// controllerOf returns the controlling owner, or the first owner when none
// is marked as controller.
func controllerOf(owners []OwnerRef) (OwnerRef, bool) {
	for _, o := range owners {
		if o.Controller && o.Kind != "" && o.Name != "" {
			return o, true
		}
	}
	for _, o := range owners {
		if o.Kind != "" && o.Name != "" {
			return o, true
		}
	}
	return OwnerRef{}, false
}

// group returns the API group of apiVersion: "" for the core group ("v1").
func group(apiVersion string) string {
	g, _, ok := strings.Cut(apiVersion, "/")
	if !ok {
		return ""
	}
	return g
}

// ray resolves KubeRay's pods: a RayCluster's head and workers, and the
// RayJob or RayService the RayCluster was made for.
func ray(owner OwnerRef, hasOwner bool, labels map[string]string) (kind, name string) {
	if crd, n := labels[labelRayFromCRD], labels[labelRayFromCRName]; n != "" {
		switch crd {
		case "RayJob", "RayService", "RayCluster":
			return crd, n
		}
	}
	cluster := labels[labelRayCluster]
	if cluster == "" && hasOwner && owner.Kind == "RayCluster" && group(owner.APIVersion) == "ray.io" {
		cluster = owner.Name
	}
	if cluster == "" {
		return "", ""
	}
	// KubeRay before 1.1 set no originated-from labels; a RayService names
	// its clusters <service>-raycluster-<5 random characters>.
	if i := strings.LastIndex(cluster, "-raycluster-"); i > 0 && len(cluster)-i == len("-raycluster-")+5 {
		return "RayService", cluster[:i]
	}
	return "RayCluster", cluster
}

// hashAlphabet is the alphabet of a pod-template-hash (the apimachinery
// rand.SafeEncodeString alphabet: no vowels, no 0, 1 or 3, so that a hash
// never spells a word).
const hashAlphabet = "bcdfghjklmnpqrstvwxz2456789"

// deploymentOf returns the Deployment a ReplicaSet named rs belongs to: rs
// less the "-<pod-template-hash>" suffix the Deployment controller appends.
// Without the label, a suffix of 6 to 10 characters of the hash alphabet is
// taken as the hash (the hash encodes a 32-bit number's decimal digits).
func deploymentOf(rs, hash string) (string, bool) {
	if hash != "" {
		if n, ok := strings.CutSuffix(rs, "-"+hash); ok && n != "" {
			return n, true
		}
	}
	i := strings.LastIndexByte(rs, '-')
	if i <= 0 {
		return "", false
	}
	suffix := rs[i+1:]
	if len(suffix) < 6 || len(suffix) > 10 {
		return "", false
	}
	for _, c := range []byte(suffix) {
		if strings.IndexByte(hashAlphabet, c) < 0 {
			return "", false
		}
	}
	return rs[:i], true
}

// The CronJob controller names a Job <cronjob>-<scheduled time in Unix
// minutes>. A suffix is taken as a scheduled time when it is a number of
// minutes between 2015 (before any CronJob) and 2200: a date-like suffix
// such as 20240101 (minutes of 2008) or a build number is not.
const (
	minCronMinutes = 1420070400 / 60 // 2015-01-01T00:00:00Z
	maxCronMinutes = 7258118400 / 60 // 2200-01-01T00:00:00Z
)

// cronJobOf returns the CronJob a Job named job was created by, if its name
// has the shape the CronJob controller gives. The Job's own owner reference
// (to the CronJob) is not on the pod, and the controller puts no label on
// the pods, so the name is the only evidence without an API call.
func cronJobOf(job string) (string, bool) {
	i := strings.LastIndexByte(job, '-')
	if i <= 0 {
		return "", false
	}
	suffix := job[i+1:]
	if suffix == "" || suffix[0] == '0' || len(suffix) > 10 {
		return "", false
	}
	m, err := strconv.ParseUint(suffix, 10, 64)
	if err != nil || m < minCronMinutes || m >= maxCronMinutes {
		return "", false
	}
	return job[:i], true
}
