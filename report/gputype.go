package report

import (
	"strings"
)

// GPUTypeAny is the gpu_type of waiters that select no GPU product: they
// take a GPU of any type.
const GPUTypeAny = "any"

// GPUProduct returns the value GPU Feature Discovery gives the node label
// nvidia.com/gpu.product for a GPU whose NVML name is name: the name with
// every character outside [A-Za-z0-9-_. ] dropped and each run of blanks
// made one dash ("NVIDIA H100 80GB HBM3" → "NVIDIA-H100-80GB-HBM3"), as
// NVIDIA/k8s-device-plugin's internal/lm/resource.go (sanitise,
// getProductName) builds it. A waiter's node selector on that label is
// matched against it; docs/report.md lists the names.
func GPUProduct(name string) string {
	var b strings.Builder
	for _, r := range name {
		switch {
		case r >= 'A' && r <= 'Z', r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_', r == '.', r == ' ':
			b.WriteRune(r)
		}
	}
	return strings.Join(strings.Fields(b.String()), "-")
}

// selectedProduct is the GPU product a waiter's nvidia.com/gpu.product
// selector asks for, as whole GPUs are matched: GFD appends "-SHARED" to
// the label of a node whose GPUs are time-sliced or shared through MPS
// without being renamed (getProductName), and such a node's GPUs are the
// same product.
func selectedProduct(v string) string {
	v = strings.TrimSpace(v)
	if v == "" {
		return GPUTypeAny
	}
	return strings.TrimSuffix(v, "-SHARED")
}
