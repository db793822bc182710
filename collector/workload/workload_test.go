package workload

import "testing"

// ctl is a controlling owner reference, as controllers set them.
func ctl(apiVersion, kind, name string) []OwnerRef {
	return []OwnerRef{{APIVersion: apiVersion, Kind: kind, Name: name, Controller: true}}
}

// The cases are the owner references and labels real controllers put on the
// pods they create (the labels a controller does not set are left out).
func TestResolve(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		owners   []OwnerRef
		labels   map[string]string
		kind, wl string
	}{
		{
			name:   "deployment",
			owners: ctl("apps/v1", "ReplicaSet", "vllm-llama-7c9d5b8f6d"),
			labels: map[string]string{"app": "vllm-llama", "pod-template-hash": "7c9d5b8f6d"},
			kind:   "Deployment", wl: "vllm-llama",
		},
		{
			name:   "deployment with dashes and a short hash",
			owners: ctl("apps/v1", "ReplicaSet", "team-a-llama-ft-serve-5f4d8"),
			labels: map[string]string{"pod-template-hash": "5f4d8"},
			kind:   "Deployment", wl: "team-a-llama-ft-serve",
		},
		{
			name:   "deployment without the hash label: a hash-like suffix",
			owners: ctl("apps/v1", "ReplicaSet", "embedder-58b9c7d6f4"),
			kind:   "Deployment", wl: "embedder",
		},
		{
			name:   "a bare ReplicaSet stays one",
			owners: ctl("apps/v1", "ReplicaSet", "web-frontend"),
			kind:   "ReplicaSet", wl: "web-frontend",
		},
		{
			name:   "hash label not a suffix, name not hash-like",
			owners: ctl("apps/v1", "ReplicaSet", "batch-runner"),
			labels: map[string]string{"pod-template-hash": "6d4cf56db6"},
			kind:   "ReplicaSet", wl: "batch-runner",
		},
		{
			name:   "argo rollout",
			owners: ctl("apps/v1", "ReplicaSet", "canary-llm-6b9f7c8d5"),
			labels: map[string]string{"rollouts-pod-template-hash": "6b9f7c8d5"},
			kind:   "Rollout", wl: "canary-llm",
		},
		{
			name:   "job",
			owners: ctl("batch/v1", "Job", "llama-ft"),
			labels: map[string]string{
				"batch.kubernetes.io/controller-uid": "0b1c7a3e-58a0-4c43-9f1e-6f7f3d1f2e11",
				"batch.kubernetes.io/job-name":       "llama-ft",
				"controller-uid":                     "0b1c7a3e-58a0-4c43-9f1e-6f7f3d1f2e11",
				"job-name":                           "llama-ft",
			},
			kind: "Job", wl: "llama-ft",
		},
		{
			name:   "cronjob: Job named <cronjob>-<unix minutes>",
			owners: ctl("batch/v1", "Job", "nightly-eval-29481120"),
			labels: map[string]string{"batch.kubernetes.io/job-name": "nightly-eval-29481120", "job-name": "nightly-eval-29481120"},
			kind:   "CronJob", wl: "nightly-eval",
		},
		{
			name:   "a Job with a date suffix is not a CronJob's",
			owners: ctl("batch/v1", "Job", "train-20240101"),
			kind:   "Job", wl: "train-20240101",
		},
		{
			name:   "a Job with a build number suffix is not a CronJob's",
			owners: ctl("batch/v1", "Job", "bench-4312"),
			kind:   "Job", wl: "bench-4312",
		},
		{
			name:   "a Volcano Job is not a batch Job",
			owners: ctl("batch.volcano.sh/v1alpha1", "Job", "vc-train-29481120"),
			kind:   "Job", wl: "vc-train-29481120",
		},
		{
			name:   "statefulset",
			owners: ctl("apps/v1", "StatefulSet", "triton"),
			labels: map[string]string{"apps.kubernetes.io/pod-index": "0", "controller-revision-hash": "triton-6c8b9d7f5", "statefulset.kubernetes.io/pod-name": "triton-0"},
			kind:   "StatefulSet", wl: "triton",
		},
		{
			name:   "daemonset",
			owners: ctl("apps/v1", "DaemonSet", "gpu-burn"),
			labels: map[string]string{"controller-revision-hash": "7d9f8b6c5", "pod-template-generation": "1"},
			kind:   "DaemonSet", wl: "gpu-burn",
		},
		{
			name:   "leaderworkerset leader (owned by the leader StatefulSet)",
			owners: ctl("apps/v1", "StatefulSet", "vllm-multinode"),
			labels: map[string]string{
				"leaderworkerset.sigs.k8s.io/name": "vllm-multinode", "leaderworkerset.sigs.k8s.io/group-index": "0",
				"leaderworkerset.sigs.k8s.io/worker-index": "0", "leaderworkerset.sigs.k8s.io/group-key": "689ad2d1d6f6b8b6e6fa0d9b48d0cb6c8a3e7f8c",
			},
			kind: "LeaderWorkerSet", wl: "vllm-multinode",
		},
		{
			name:   "leaderworkerset worker (owned by a group's StatefulSet), admitted by Kueue",
			owners: ctl("apps/v1", "StatefulSet", "vllm-multinode-0"),
			labels: map[string]string{
				"leaderworkerset.sigs.k8s.io/name": "vllm-multinode", "leaderworkerset.sigs.k8s.io/worker-index": "1",
				"kueue.x-k8s.io/pod-group-name": "leaderworkerset-vllm-multinode-0-fd0f7", "kueue.x-k8s.io/queue-name": "lws-lq",
			},
			kind: "LeaderWorkerSet", wl: "vllm-multinode",
		},
		{
			name:   "pytorchjob (training-operator v1)",
			owners: ctl("kubeflow.org/v1", "PyTorchJob", "bert-ft"),
			labels: map[string]string{
				"training.kubeflow.org/job-name": "bert-ft", "training.kubeflow.org/operator-name": "pytorchjob-controller",
				"training.kubeflow.org/replica-index": "0", "training.kubeflow.org/replica-type": "master", "training.kubeflow.org/job-role": "master",
			},
			kind: "PyTorchJob", wl: "bert-ft",
		},
		{
			name:   "tfjob",
			owners: ctl("kubeflow.org/v1", "TFJob", "resnet"),
			labels: map[string]string{"training.kubeflow.org/job-name": "resnet", "training.kubeflow.org/operator-name": "tfjob-controller", "training.kubeflow.org/replica-type": "worker"},
			kind:   "TFJob", wl: "resnet",
		},
		{
			name:   "xgboostjob",
			owners: ctl("kubeflow.org/v1", "XGBoostJob", "xgb-iris"),
			labels: map[string]string{"training.kubeflow.org/job-name": "xgb-iris", "training.kubeflow.org/operator-name": "xgboostjob-controller"},
			kind:   "XGBoostJob", wl: "xgb-iris",
		},
		{
			name:   "mpijob worker (mpi-operator v2)",
			owners: ctl("kubeflow.org/v2beta1", "MPIJob", "nccl-allreduce"),
			labels: map[string]string{"training.kubeflow.org/job-name": "nccl-allreduce", "training.kubeflow.org/job-role": "worker", "training.kubeflow.org/operator-name": "mpi-operator", "training.kubeflow.org/replica-index": "0"},
			kind:   "MPIJob", wl: "nccl-allreduce",
		},
		{
			name:   "mpijob launcher: owned by the launcher Job",
			owners: ctl("batch/v1", "Job", "nccl-allreduce-launcher"),
			labels: map[string]string{"training.kubeflow.org/job-name": "nccl-allreduce", "training.kubeflow.org/job-role": "launcher", "training.kubeflow.org/operator-name": "mpi-operator", "job-name": "nccl-allreduce-launcher"},
			kind:   "MPIJob", wl: "nccl-allreduce",
		},
		{
			name:   "trainjob (Kubeflow Trainer v2): pod of a JobSet's Job",
			owners: ctl("batch/v1", "Job", "llama-sft-node-0"),
			labels: map[string]string{
				"trainer.kubeflow.org/trainjob-name": "llama-sft", "jobset.sigs.k8s.io/jobset-name": "llama-sft",
				"jobset.sigs.k8s.io/replicatedjob-name": "node", "jobset.sigs.k8s.io/job-index": "0",
				"batch.kubernetes.io/job-completion-index": "0", "job-name": "llama-sft-node-0",
			},
			kind: "TrainJob", wl: "llama-sft",
		},
		{
			name:   "jobset",
			owners: ctl("batch/v1", "Job", "maxtext-slice-1"),
			labels: map[string]string{
				"jobset.sigs.k8s.io/jobset-name": "maxtext", "jobset.sigs.k8s.io/replicatedjob-name": "slice",
				"jobset.sigs.k8s.io/job-index": "1", "jobset.sigs.k8s.io/job-key": "9f3c0a1b", "job-name": "maxtext-slice-1",
			},
			kind: "JobSet", wl: "maxtext",
		},
		{
			name:   "raycluster head",
			owners: ctl("ray.io/v1", "RayCluster", "ray-gpu"),
			labels: map[string]string{"ray.io/cluster": "ray-gpu", "ray.io/node-type": "head", "ray.io/group": "headgroup", "ray.io/is-ray-node": "yes", "app.kubernetes.io/created-by": "kuberay-operator", "app.kubernetes.io/name": "kuberay"},
			kind:   "RayCluster", wl: "ray-gpu",
		},
		{
			name:   "rayjob worker: the RayJob's cluster",
			owners: ctl("ray.io/v1", "RayCluster", "rayjob-ft-x7k2p"),
			labels: map[string]string{"ray.io/cluster": "rayjob-ft-x7k2p", "ray.io/node-type": "worker", "ray.io/group": "gpu-group", "ray.io/originated-from-crd": "RayJob", "ray.io/originated-from-cr-name": "rayjob-ft"},
			kind:   "RayJob", wl: "rayjob-ft",
		},
		{
			name:   "rayservice worker",
			owners: ctl("ray.io/v1", "RayCluster", "llm-serve-raycluster-9vmzt"),
			labels: map[string]string{"ray.io/cluster": "llm-serve-raycluster-9vmzt", "ray.io/node-type": "worker", "ray.io/originated-from-crd": "RayService", "ray.io/originated-from-cr-name": "llm-serve"},
			kind:   "RayService", wl: "llm-serve",
		},
		{
			name:   "rayservice worker, KubeRay before 1.1 (no originated-from labels)",
			owners: ctl("ray.io/v1", "RayCluster", "llm-serve-raycluster-9vmzt"),
			labels: map[string]string{"ray.io/cluster": "llm-serve-raycluster-9vmzt", "ray.io/node-type": "worker"},
			kind:   "RayService", wl: "llm-serve",
		},
		{
			name:   "kserve raw deployment",
			owners: ctl("apps/v1", "ReplicaSet", "llama3-predictor-5d7b9c6f8"),
			labels: map[string]string{"serving.kserve.io/inferenceservice": "llama3", "component": "predictor", "pod-template-hash": "5d7b9c6f8"},
			kind:   "InferenceService", wl: "llama3",
		},
		{
			name:   "knative service revision",
			owners: ctl("apps/v1", "ReplicaSet", "whisper-00003-deployment-7f8c9d6b5"),
			labels: map[string]string{"serving.knative.dev/service": "whisper", "serving.knative.dev/revision": "whisper-00003", "serving.knative.dev/configuration": "whisper", "pod-template-hash": "7f8c9d6b5"},
			kind:   "KnativeService", wl: "whisper",
		},
		{
			name:   "kueue-managed batch Job: the queue is not the workload",
			owners: ctl("batch/v1", "Job", "sample-job-x9f2q"),
			labels: map[string]string{"kueue.x-k8s.io/queue-name": "user-queue", "kueue.x-k8s.io/podset": "main", "job-name": "sample-job-x9f2q"},
			kind:   "Job", wl: "sample-job-x9f2q",
		},
		{
			name:   "kueue plain pod group",
			labels: map[string]string{"kueue.x-k8s.io/queue-name": "user-queue", "kueue.x-k8s.io/pod-group-name": "nccl-test", "kueue.x-k8s.io/managed": "true"},
			kind:   "PodGroup", wl: "nccl-test",
		},
		{
			name: "bare pod",
			kind: "Pod", wl: "",
		},
		{
			name:   "static pod's mirror: owned by its Node",
			owners: ctl("v1", "Node", "gpu-node-7"),
			kind:   "Pod", wl: "",
		},
		{
			name:   "an operator's own kind",
			owners: ctl("nvidia.com/v1alpha1", "NIMService", "llama3-8b-nim"),
			kind:   "NIMService", wl: "llama3-8b-nim",
		},
		{
			name: "no controller: the first owner",
			owners: []OwnerRef{
				{APIVersion: "example.com/v1", Kind: "Notebook", Name: "alice-nb"},
				{APIVersion: "example.com/v1", Kind: "Profile", Name: "alice"},
			},
			kind: "Notebook", wl: "alice-nb",
		},
		{
			name: "the controller among others",
			owners: []OwnerRef{
				{APIVersion: "example.com/v1", Kind: "Profile", Name: "alice"},
				{APIVersion: "apps/v1", Kind: "StatefulSet", Name: "alice-nb", Controller: true},
			},
			kind: "StatefulSet", wl: "alice-nb",
		},
		{
			name:   "a person's explicit say wins",
			owners: ctl("apps/v1", "ReplicaSet", "vllm-7c9d5b8f6d"),
			labels: map[string]string{"gpuxray.io/workload": "chat-prod", "gpuxray.io/workload-kind": "Product", "pod-template-hash": "7c9d5b8f6d"},
			kind:   "Product", wl: "chat-prod",
		},
		{
			name:   "explicit name without a kind",
			labels: map[string]string{"gpuxray.io/workload": "chat-prod"},
			kind:   "Workload", wl: "chat-prod",
		},
		{
			name:   "a kubeflow job of an operator not listed",
			owners: ctl("kubeflow.org/v1", "AscendJob", "npu-train"),
			labels: map[string]string{"training.kubeflow.org/job-name": "npu-train", "training.kubeflow.org/operator-name": "ascendjob-controller"},
			kind:   "AscendJob", wl: "npu-train",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			kind, wl := Resolve(tt.owners, tt.labels)
			if kind != tt.kind || wl != tt.wl {
				t.Errorf("Resolve = (%q, %q), want (%q, %q)", kind, wl, tt.kind, tt.wl)
			}
		})
	}
}

func TestResolvePod(t *testing.T) {
	t.Parallel()
	if k, n := ResolvePod("debug-gpu", nil, nil); k != "Pod" || n != "debug-gpu" {
		t.Errorf("bare pod: (%q, %q), want (Pod, debug-gpu)", k, n)
	}
	if k, n := ResolvePod("kube-apiserver-n1", ctl("v1", "Node", "n1"), nil); k != "Pod" || n != "kube-apiserver-n1" {
		t.Errorf("mirror pod: (%q, %q), want (Pod, kube-apiserver-n1)", k, n)
	}
	if k, n := ResolvePod("llama-ft-abcde", ctl("batch/v1", "Job", "llama-ft"), nil); k != "Job" || n != "llama-ft" {
		t.Errorf("job pod: (%q, %q), want (Job, llama-ft)", k, n)
	}
}

func TestCronJobOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		job, cron string
		ok        bool
	}{
		{"hello-29481120", "hello", true},         // 2026
		{"hello-23667840", "hello", true},         // 2015-01-01 exactly
		{"hello-23667839", "", false},             // just before
		{"hello-120968640", "", false},            // 2200
		{"hello-029481120", "", false},            // leading zero: not the controller's
		{"29481120", "", false},                   // no name
		{"hello-2948112x", "", false},             // not a number
		{"a-b-c-29481120", "a-b-c", true},         // dashes in the name
		{"hello-99999999999999999999", "", false}, // overflow
	}
	for _, tt := range tests {
		t.Run(tt.job, func(t *testing.T) {
			cron, ok := cronJobOf(tt.job)
			if cron != tt.cron || ok != tt.ok {
				t.Errorf("cronJobOf(%q) = (%q, %v), want (%q, %v)", tt.job, cron, ok, tt.cron, tt.ok)
			}
		})
	}
}
