//go:build e2e

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
		// The image carries no simulator: cmd/gpuxray links none (docs/design/simulator-build.md).
		if bytes.Contains(b, []byte("gpuxray/collector/sim.")) {
			t.Errorf("%s: the image's binary links the simulator; want make image-binaries to build cmd/gpuxray, which links none", arch)
		}
	}
	// The host's binary runs and says its version.
	if b, err := exec.Command(filepath.Join(out, "linux_"+runtime.GOARCH, "gpuxray"), "version").Output(); err != nil ||
		!strings.HasPrefix(string(b), "gpuxray v0.0.0-imagetest (revision 0123456789abcdef,") {
		t.Errorf("gpuxray version = %q, %v", b, err)
	}
}
