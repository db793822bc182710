package app

import (
	"runtime/debug"
	"testing"

	"github.com/gpuxray/gpuxray/exporter"
)

// TestBuildInfoFrom: without ldflags the version and revision come from the
// build info Go embeds (the module version, vcs.revision and vcs.modified);
// ldflags, where set, win.
func TestBuildInfoFrom(t *testing.T) {
	t.Parallel()
	stamped := func(mainVersion string, settings ...string) *debug.BuildInfo {
		bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/gpuxray/gpuxray", Version: mainVersion}}
		for i := 0; i+1 < len(settings); i += 2 {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
		}
		return bi
	}
	const rev = "3144ed64e7d4ab958545c237eccef693a46abba0"
	tests := []struct {
		name              string
		ldVersion, ldRev  string
		bi                *debug.BuildInfo
		version, revision string
	}{
		{"no build info", "", "", nil, "dev", "unknown"},
		{"devel module, no VCS", "", "", stamped("(devel)"), "dev", "unknown"},
		{"clean checkout", "", "", stamped("(devel)", "vcs", "git", "vcs.revision", rev, "vcs.modified", "false"), "dev", rev},
		{"dirty checkout", "", "", stamped("(devel)", "vcs.revision", rev, "vcs.modified", "true"), "dev", rev + "-dirty"},
		{"go install at a tag", "", "", stamped("v1.4.0"), "v1.4.0", "unknown"},
		{"pseudo-version from VCS", "", "", stamped("v0.0.0-20261203115153-3144ed64e7d4+dirty", "vcs.revision", rev, "vcs.modified", "true"),
			"v0.0.0-20261203115153-3144ed64e7d4+dirty", rev + "-dirty"},
		{"ldflags win", "1.2.3", "abc123", stamped("v1.4.0", "vcs.revision", rev, "vcs.modified", "true"), "1.2.3", "abc123"},
		{"ldflags version only", "1.2.3", "", stamped("(devel)", "vcs.revision", rev), "1.2.3", rev},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := buildInfoFrom(tc.ldVersion, tc.ldRev, tc.bi)
			want := exporter.BuildInfo{Version: tc.version, Revision: tc.revision, GoVersion: got.GoVersion}
			if got != want || got.GoVersion == "" {
				t.Errorf("buildInfoFrom(%q, %q) = %+v, want %+v", tc.ldVersion, tc.ldRev, got, want)
			}
		})
	}
}
