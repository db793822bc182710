package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/gpuxray/gpuxray/exporter"
)

// version and revision are stamped by the build:
// -ldflags "-X main.version=1.2.3 -X main.revision=abc123".
var (
	version  = "dev"
	revision = ""
)

func buildInfo() exporter.BuildInfo {
	rev := revision
	if rev == "" {
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" {
					rev = s.Value
				}
			}
		}
	}
	if rev == "" {
		rev = "unknown"
	}
	return exporter.BuildInfo{Version: version, Revision: rev, GoVersion: runtime.Version()}
}

func versionString() string {
	b := buildInfo()
	return fmt.Sprintf("gpuxray %s (revision %s, %s %s/%s)", b.Version, b.Revision, b.GoVersion, runtime.GOOS, runtime.GOARCH)
}
