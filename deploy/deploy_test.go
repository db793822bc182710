// Package deploy holds gpuxray's deployment files: the kustomize base and
// overlays, the Helm chart, and (by other hands) the Prometheus rules and
// Grafana dashboards. Its tests render and parse them, since no cluster runs
// where the tests do.
package deploy

import (
	"os"
	"strings"
	"testing"
)

// dockerfile is the Dockerfile cut into its stages' instructions, with
// continuation lines joined.
type dockerStage struct {
	from  string // the FROM line's arguments
	instr []string
}

func parseDockerfile(t *testing.T, path string) []dockerStage {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var stages []dockerStage
	var line string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		if strings.HasSuffix(l, "\\") {
			line += strings.TrimSuffix(l, "\\") + " "
			continue
		}
		line = strings.Join(strings.Fields(line+l), " ")
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case strings.EqualFold(f[0], "FROM"):
			stages = append(stages, dockerStage{from: strings.Join(f[1:], " ")})
		case len(stages) > 0:
			s := &stages[len(stages)-1]
			s.instr = append(s.instr, strings.ToUpper(f[0])+" "+strings.Join(f[1:], " "))
		}
		line = ""
	}
	return stages
}

func (s dockerStage) has(prefix string) string {
	for _, i := range s.instr {
		if strings.HasPrefix(i, prefix) {
			return i
		}
	}
	return ""
}

// TestDockerfile: the build stage builds through make image-binaries, for
// the target's architecture, on the builder's platform; the runtime stage is
// a glibc distroless image that runs the binary as a non-root user.
func TestDockerfile(t *testing.T) {
	t.Parallel()
	stages := parseDockerfile(t, "../Dockerfile")
	if len(stages) != 2 {
		t.Fatalf("want a build and a runtime stage, got %d", len(stages))
	}
	build, runtime := stages[0], stages[1]
	checks := []struct {
		what string
		ok   bool
	}{
		{"the build stage runs on the builder's platform", strings.HasPrefix(build.from, "--platform=$BUILDPLATFORM golang:") && strings.HasSuffix(build.from, " AS build")},
		{"the build stage's one build is make image-binaries for the target", strings.Contains(build.has("RUN make "), `make image-binaries PLATFORMS="linux/${TARGETARCH}" BINDIR=/out`)},
		{"version and revision stamped", strings.Contains(build.has("RUN make "), `VERSION="${VERSION}" REVISION="${REVISION}"`)},
		{"no other go build", !strings.Contains(strings.Join(build.instr, "\n"), "go build")},
		{"the cross compiler make image-binaries uses for arm64", strings.Contains(build.has("RUN "), "gcc-aarch64-linux-gnu")},
		{"a glibc runtime (cgo)", runtime.from == "gcr.io/distroless/base-debian12:nonroot"},
		{"the binary make image-binaries writes for the target", runtime.has("COPY --from=build ") == "COPY --from=build /out/linux_${TARGETARCH}/gpuxray /usr/bin/gpuxray"},
		{"non-root by default", runtime.has("USER ") == "USER 65532:65532"},
		{"entrypoint", runtime.has("ENTRYPOINT ") == `ENTRYPOINT ["/usr/bin/gpuxray"]`},
		{"the agent by default", runtime.has("CMD ") == `CMD ["agent"]`},
	}
	for _, c := range checks {
		t.Run(c.what, func(t *testing.T) {
			if !c.ok {
				t.Errorf("Dockerfile: %s: no\nstages: %+v", c.what, stages)
			}
		})
	}
}
