package main

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/gpuxray/gpuxray/internal/testtool"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestNVMLUnavailable runs the agent as on a node without NVML (this
// machine has no libnvidia-ml.so.1) until it has retried Init once: README
// promises one log line for it, and each Init attempt, not each 1 s poll,
// is counted in gpuxray_source_errors_total{source="nvml",reason="init"}
// (the engine logs each count at debug, the reader each attempt).
func TestNVMLUnavailable(t *testing.T) {
	t.Parallel()
	var stderr testtool.SyncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"agent", "--web.listen-address=127.0.0.1:0", "--log.level=debug", "--log.format=json",
			"--kubelet.pod-resources-socket=" + filepath.Join(t.TempDir(), "kubelet.sock"),
			"--pods.enabled=false", "--dra.enabled=false", "--node.name="}, &bytes.Buffer{}, &stderr)
	}()
	type line struct {
		Level, Logger, Msg, Source, Reason string
	}
	read := func() (lines []line) {
		for _, l := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
			var x line
			if json.Unmarshal([]byte(l), &x) == nil {
				lines = append(lines, x)
			}
		}
		return lines
	}
	// attempts and counted: the reader's failed Init attempts, the engine's
	// counted nvml init errors.
	tally := func(lines []line) (attempts, counted int) {
		for _, l := range lines {
			switch {
			case l.Logger == "nvml" && l.Msg == "NVML Init failed":
				attempts++
			case l.Logger == "engine" && l.Msg == "source call failed" && l.Source == "nvml" && l.Reason == "init":
				counted++
			}
		}
		return attempts, counted
	}
	// The retry comes 5 s after the first attempt; the polls between are 1 s.
	deadline := time.Now().Add(45 * time.Second)
	for {
		lines := read()
		for _, l := range lines {
			if l.Msg == "NVML initialised" {
				t.Skip("this machine has NVML")
			}
		}
		if _, counted := tally(lines); counted >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("agent exited %d: %s", code, stderr.String())
	}
	lines := read()
	attempts, counted := tally(lines)
	polls := 0
	var loud []string
	for _, l := range lines {
		if l.Logger == "engine" && l.Msg == "source call failed" && l.Source == "kubelet" {
			polls++ // the kubelet's socket is missing too: one a poll
		}
		if (l.Level == "warn" || l.Level == "error") && (l.Logger == "nvml" || l.Source == "nvml") {
			loud = append(loud, l.Logger+": "+l.Msg)
		}
	}
	if attempts < 2 || counted != attempts || polls <= attempts {
		t.Errorf("%d Init attempts, %d counted, over %d polls: want each attempt counted once, not each poll\n%s", attempts, counted, polls, stderr.String())
	}
	if len(loud) != 1 {
		t.Errorf("NVML's absence said in %d lines at warn %q, want one", len(loud), loud)
	}
}
