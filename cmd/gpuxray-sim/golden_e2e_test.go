//go:build e2e

package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestReplayGoldenLong is TestReplayGolden for the scenarios longer than
// longRaceReplay: hours of virtual time, which make test-e2e replays
// without the race detector.
func TestReplayGoldenLong(t *testing.T) {
	skipLongUnderRace(t)
	t.Parallel()
	for _, f := range goldenScenarios(t, true) {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".yaml"), func(t *testing.T) {
			t.Parallel()
			replayGolden(t, f)
		})
	}
}
