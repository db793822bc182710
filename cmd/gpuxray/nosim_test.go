//go:build e2e && !nosim

package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoSimBuild: the image's build (-tags nosim) links none of the
// simulator's packages nor any of k8s.io/api (the pod and DRA sources
// decode JSON into small types of their own), and its --simulate and replay say why they cannot
// run, as a usage error.
func TestNoSimBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds gpuxray")
	}
	t.Parallel()
	deps, err := exec.Command("go", "list", "-tags", "nosim", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -tags nosim: %v", err)
	}
	for _, d := range strings.Fields(string(deps)) {
		switch d {
		case "github.com/gpuxray/gpuxray/collector/sim", "github.com/NVIDIA/go-nvml/pkg/nvml/mock", "go.yaml.in/yaml/v3":
			t.Errorf("the nosim build links %s", d)
		}
		if strings.HasPrefix(d, "k8s.io/api/") {
			t.Errorf("the nosim build links %s", d)
		}
	}
	bin := filepath.Join(t.TempDir(), "gpuxray")
	build := exec.Command("go", "build", "-tags", "nosim", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -tags nosim: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"agent", "--simulate"}, {"replay", "x.yaml"}} {
		out, err := exec.Command(bin, args...).CombinedOutput()
		code := -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if code != 2 || !strings.Contains(string(out), "built without the simulator") {
			t.Errorf("gpuxray %s: exit %d, %q; want exit 2 saying it was built without the simulator", strings.Join(args, " "), code, out)
		}
	}
}
