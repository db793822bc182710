package app

import (
	"context"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"k8s.io/klog/v2"
)

// TestKlogRoutedToZap: a warning client-go writes through klog reaches the
// agent's logger as a structured entry. Not parallel: klog is global.
func TestKlogRoutedToZap(t *testing.T) {
	core, logs := observer.New(zap.DebugLevel)
	routeKlog(zap.New(core))
	defer klog.ClearLogger()
	klog.Warning("watch of *v1.Pod ended with: too old resource version")
	klog.Flush()
	entries := logs.FilterLoggerName("client-go").All()
	if len(entries) != 1 || entries[0].Message != "watch of *v1.Pod ended with: too old resource version" {
		t.Fatalf("client-go entries %+v, want the klog warning", entries)
	}
}

// TestOwnsProcess: only main's context may set process-wide state; the
// runs tests make side by side must not route each other's klog lines.
func TestOwnsProcess(t *testing.T) {
	t.Parallel()
	if ownsProcess(context.Background()) {
		t.Error("a plain context owns the process")
	}
	if !ownsProcess(context.WithValue(context.Background(), wholeProcess{}, true)) {
		t.Error("main's context does not own the process")
	}
}
