package workload

import (
	"math"
	"strings"
)

// MaxModelBytes caps a model name: longer names are cut (at a character
// boundary) so one pod cannot put an unbounded string into every series.
const MaxModelBytes = 128

// DefaultModelKeys are the pod labels and annotations ModelFromLabels looks
// at, most specific first:
//
//   - gpuxray.io/model: set for gpuxray.
//   - model: the vLLM production-stack chart's label, and a common habit.
//   - llm-d.ai/model: llm-d's model servers (the InferencePool selector).
//   - model.aibrix.ai/name: AIBrix's model deployments.
//   - ai.gke.io/model: GKE's AI/ML serving manifests.
//   - app.kubernetes.io/name: the application's name, last, because it
//     names a model only on a pod that serves one; on a trainer it names
//     the trainer.
//
// KServe's serving.kserve.io/inferenceservice names the InferenceService,
// which Resolve reports as the workload, not the model.
var DefaultModelKeys = []string{
	"gpuxray.io/model",
	"model",
	"llm-d.ai/model",
	"model.aibrix.ai/name",
	"ai.gke.io/model",
	"app.kubernetes.io/name",
}

// ModelFromLabels returns the value of the first of keys that the pod
// carries with a non-blank value, as a label or else as an annotation,
// cleaned (CleanValue: an annotation can hold terminal escapes), with
// surrounding space trimmed and capped at MaxModelBytes. It returns "" when
// none does.
func ModelFromLabels(labels, annotations map[string]string, keys []string) string {
	for _, k := range keys {
		for _, m := range []map[string]string{labels, annotations} {
			if v := strings.TrimSpace(CleanValue(m[k], math.MaxInt)); v != "" {
				return strings.TrimSpace(CapValue(v, MaxModelBytes))
			}
		}
	}
	return ""
}
