package app

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/gpuxray/gpuxray/exporter"
)

// buildInfo is the binary's identity: b's Version and Revision, which the
// build stamps into each main package (-ldflags "-X main.version=1.2.3
// -X main.revision=abc123"), else what Go embedded (see buildInfoFrom).
func (b Binary) buildInfo() exporter.BuildInfo {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return buildInfoFrom(b.Version, b.Revision, bi)
}

// buildInfoFrom returns the binary's identity: the ldflags' version and
// revision where they are set, else what Go embedded in the binary (bi, nil
// when there is none). A plain go build in a git checkout embeds
// vcs.revision and vcs.modified (a linked git worktree gets none: the go
// command only recognises a .git directory), and a go install at a module
// version embeds that version; "(devel)" is no version.
func buildInfoFrom(ldVersion, ldRevision string, bi *debug.BuildInfo) exporter.BuildInfo {
	v, rev := ldVersion, ldRevision
	if bi != nil {
		if v == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		if rev == "" {
			var vcsRev string
			var modified bool
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					vcsRev = s.Value
				case "vcs.modified":
					modified = s.Value == "true"
				}
			}
			rev = vcsRev
			if rev != "" && modified {
				rev += "-dirty" // as git describe --dirty, which make build stamps
			}
		}
	}
	if v == "" {
		v = "dev"
	}
	if rev == "" {
		rev = "unknown"
	}
	return exporter.BuildInfo{Version: v, Revision: rev, GoVersion: runtime.Version()}
}

func (b Binary) versionString() string {
	i := b.buildInfo()
	return fmt.Sprintf("gpuxray %s (revision %s, %s %s/%s)", i.Version, i.Revision, i.GoVersion, runtime.GOOS, runtime.GOARCH)
}
