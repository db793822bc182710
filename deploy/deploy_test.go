// Package deploy holds gpuxray's deployment files; its tests parse them,
// since no cluster runs where the tests do.
package deploy

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// docs decodes every YAML document of a file.
func docs(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	var out []map[string]any
	for {
		var d map[string]any
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, d)
	}
}

// at walks a decoded document by keys and list indexes.
func at(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("at %v: %q is not in a map", path, k)
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				t.Fatalf("at %v: no item %d", path, k)
			}
			v = l[k]
		}
	}
	return v
}

func TestDaemonSet(t *testing.T) {
	var ds map[string]any
	for _, d := range docs(t, "kubernetes/daemonset.yaml") {
		if d["kind"] == "DaemonSet" {
			ds = d
		}
	}
	if ds == nil {
		t.Fatal("no DaemonSet")
	}
	pod := at(t, ds, "spec", "template", "spec")
	c := at(t, pod, "containers", 0)
	sc := at(t, c, "securityContext").(map[string]any)
	checks := []struct {
		what      string
		got, want any
	}{
		{"hostPID off by default", at(t, pod, "hostPID"), nil},
		{"system-node-critical", at(t, pod, "priorityClassName"), "system-node-critical"},
		{"metrics port", at(t, c, "ports", 0, "containerPort"), 9471},
		{"liveness on /healthz", at(t, c, "livenessProbe", "httpGet", "path"), "/healthz"},
		{"readiness on /readyz", at(t, c, "readinessProbe", "httpGet", "path"), "/readyz"},
		{"read-only root", sc["readOnlyRootFilesystem"], true},
		{"no privilege escalation", sc["allowPrivilegeEscalation"], false},
		{"not privileged", sc["privileged"], false},
		{"all capabilities dropped", at(t, sc, "capabilities", "drop", 0), "ALL"},
		{"pod-resources mount path", at(t, c, "volumeMounts", 0, "mountPath"), "/var/lib/kubelet/pod-resources"},
		{"pod-resources read-only", at(t, c, "volumeMounts", 0, "readOnly"), true},
		{"pod-resources from the host", at(t, pod, "volumes", 0, "hostPath", "path"), "/var/lib/kubelet/pod-resources"},
		{"NODE_NAME from the downward API", at(t, c, "env", 0, "valueFrom", "fieldRef", "fieldPath"), "spec.nodeName"},
		{"GPU taint tolerated", at(t, pod, "tolerations", 0, "key"), "nvidia.com/gpu"},
	}
	for _, ch := range checks {
		if ch.got != ch.want {
			t.Errorf("%s: got %v, want %v", ch.what, ch.got, ch.want)
		}
	}
}

func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var froms []string
	var user, entry string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch strings.ToUpper(f[0]) {
		case "FROM":
			froms = append(froms, f[1])
		case "USER":
			user = f[1]
		case "ENTRYPOINT":
			entry = strings.Join(f[1:], " ")
		}
	}
	if len(froms) < 2 {
		t.Errorf("want a multi-stage build, got stages %v", froms)
	}
	if !strings.Contains(string(b), "make build") {
		t.Error("the build stage must build through the Makefile's build target (cgo flags live there)")
	}
	if user == "" || strings.HasPrefix(user, "root") || strings.HasPrefix(user, "0") {
		t.Errorf("the image's default user is %q, want a non-root user", user)
	}
	if entry != `["/usr/bin/gpuxray"]` {
		t.Errorf("ENTRYPOINT %s, want the gpuxray binary", entry)
	}
}
