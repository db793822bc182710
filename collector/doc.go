// Package collector holds the readings every source returns: plain structs that
// the engine joins. It imports no library, so the engine can be driven in tests
// without NVML, gRPC or Prometheus.
package collector
