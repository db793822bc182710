// Package sim simulates a GPU node from a scenario file: NVML (go-nvml's
// mock servers with their activity calls driven by the scenario), the
// kubelet's pod-resources view, and the API server's pods and DRA objects,
// all as pure functions of a Clock, so the real readers, the engine and the
// exporter run unchanged on a laptop, in a replay, or second by second in a
// test.
//
// The scenario format is specified in docs/scenarios.md; what each
// simulated component does, and the real source each behaviour follows, in
// docs/simulator.md. A behaviour added here is described and cited there.
package sim
