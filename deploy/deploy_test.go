//go:build e2e

// Package deploy holds gpuxray's deployment files: the kustomize base and
// overlays, the Helm chart, and (by other hands) the Prometheus rules and
// Grafana dashboards. Its tests render and parse them, since no cluster runs
// where the tests do.
package deploy

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
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

// TestImageBinaries runs the Dockerfile's build step, make image-binaries,
// for both architectures (arm64 with Debian's cross compiler), and checks
// what it wrote: an ELF for each machine, linked against glibc, with the
// version stamped.
func TestImageBinaries(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("cross-compiles the agent twice")
	}
	need(t, "aarch64-linux-gnu-gcc") // apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross
	need(t, "make")
	out := t.TempDir()
	cmd := exec.Command("make", "-C", "..", "image-binaries", "PLATFORMS=linux/amd64 linux/arm64", "BINDIR="+out,
		"VERSION=v0.0.0-imagetest", "REVISION=0123456789abcdef")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make image-binaries: %v\n%s", err, b)
	}
	for arch, machine := range map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64} {
		p := filepath.Join(out, "linux_"+arch, "gpuxray")
		f, err := elf.Open(p)
		if err != nil {
			t.Errorf("%s: %v", arch, err)
			continue
		}
		libs, _ := f.ImportedLibraries()
		interp := ""
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				b := make([]byte, prog.Filesz)
				_, _ = prog.ReadAt(b, 0)
				interp = string(bytes.TrimRight(b, "\x00"))
			}
		}
		f.Close()
		if f.Machine != machine {
			t.Errorf("%s: machine %v, want %v", arch, f.Machine, machine)
		}
		if !strings.Contains(strings.Join(libs, " "), "libc.so.6") || !strings.HasPrefix(interp, "/lib") {
			t.Errorf("%s: libraries %v, interpreter %q: want a glibc dynamic binary (cgo)", arch, libs, interp)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []string{"v0.0.0-imagetest", "0123456789abcdef"} {
			if !bytes.Contains(b, []byte(s)) {
				t.Errorf("%s: %s is not stamped into the binary", arch, s)
			}
		}
		// -tags nosim: the image carries no simulator (docs/benchmarks.md).
		if bytes.Contains(b, []byte("gpuxray/collector/sim.")) {
			t.Errorf("%s: the image's binary links the simulator; want make image-binaries to build with -tags nosim", arch)
		}
	}
	// The host's binary runs and says its version.
	if b, err := exec.Command(filepath.Join(out, "linux_"+runtime.GOARCH, "gpuxray"), "version").Output(); err != nil ||
		!strings.HasPrefix(string(b), "gpuxray v0.0.0-imagetest (revision 0123456789abcdef,") {
		t.Errorf("gpuxray version = %q, %v", b, err)
	}
}
