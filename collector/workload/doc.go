// Package workload names, from what a pod carries, the things a person
// recognises: the workload they created (a Deployment, a Job, a PyTorchJob, a
// RayJob, …), the model the pod serves or trains, and the extra Prometheus
// labels copied from pod labels.
//
// It is plain Go with no Kubernetes client: the pod source
// (collector/pods) and the simulated node (collector/sim) both use it, and it
// never calls an API server. Everything it returns is safe to export as a
// Prometheus label value: bounded in length, valid UTF-8, free of control
// characters a terminal would act on (CleanValue), and — for model
// names read from a command line — restricted to the characters model names
// use, taken only from the value of a model flag, never from another
// argument, since a command line can hold tokens.
package workload
