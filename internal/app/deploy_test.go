package app

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// agentFlags returns the names of the agent's flags, from its -h output.
func agentFlags(t *testing.T) []string {
	t.Helper()
	code, out, errs := runCmd(t, "agent", "-h")
	if code != 0 {
		t.Fatalf("agent -h exited %d: %s", code, errs)
	}
	var names []string
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z][a-z0-9.-]*)`).FindAllStringSubmatch(out+errs, -1) {
		names = append(names, m[1])
	}
	if len(names) < 10 {
		t.Fatalf("found %d flags in agent -h: %q", len(names), out+errs)
	}
	return names
}

// TestDeployedFlags: the Helm chart has a value for every agent flag, and the
// chart and the kustomize base pass only flags the agent knows, so that a
// flag added or renamed here fails until the manifests follow.
func TestDeployedFlags(t *testing.T) {
	t.Parallel()
	known := agentFlags(t)
	flagRef := regexp.MustCompile(`--([a-z][a-z0-9]*(?:[.-][a-z0-9]+)*)`)
	files := map[string]string{
		"chart":          "../../deploy/helm/gpuxray/templates/daemonset.yaml",
		"kustomize base": "../../deploy/kubernetes/base/daemonset.yaml",
	}
	used := map[string][]string{}
	for what, path := range files {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range flagRef.FindAllStringSubmatch(string(b), -1) {
			if !slices.Contains(known, m[1]) {
				t.Errorf("the %s (%s) passes --%s, which gpuxray agent does not know", what, path, m[1])
			}
			used[what] = append(used[what], m[1])
		}
	}
	// Flags that make no sense in a DaemonSet.
	notDeployed := []string{"simulate"}
	for _, f := range known {
		if !slices.Contains(notDeployed, f) && !slices.Contains(used["chart"], f) {
			t.Errorf("the Helm chart has no value for --%s: add it to deploy/helm/gpuxray (values.yaml, values.schema.json, templates/daemonset.yaml)", f)
		}
	}
	if !slices.Contains(used["kustomize base"], "web.health-listen-address") {
		t.Errorf("the kustomize base's agent has no --web.health-listen-address: its probes need it (%s)", strings.Join(used["kustomize base"], ", "))
	}
}
