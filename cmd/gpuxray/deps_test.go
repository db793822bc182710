package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoSimulatorLinked: the production binary, the container image's, links
// none of the simulator — collector/sim, go-nvml's mock servers, the
// scenario format's YAML decoder — nor any of k8s.io/api (the pod and DRA
// sources decode JSON into small types of their own), without a build tag:
// cmd/gpuxray-sim is the binary that has them (docs/design/simulator-build.md).
func TestNoSimulatorLinked(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 100 {
		t.Fatalf("go list -deps listed %d packages; want the whole graph", len(deps))
	}
	for _, d := range deps {
		switch {
		case d == "github.com/gpuxray/gpuxray/collector/sim",
			strings.HasPrefix(d, "github.com/gpuxray/gpuxray/collector/sim/"),
			d == "github.com/NVIDIA/go-nvml/pkg/nvml/mock",
			strings.HasPrefix(d, "github.com/NVIDIA/go-nvml/pkg/nvml/mock/"),
			d == "go.yaml.in/yaml/v3", d == "gopkg.in/yaml.v3",
			strings.HasPrefix(d, "k8s.io/api/"):
			t.Errorf("cmd/gpuxray links %s", d)
		}
	}
}
