//go:build !nosim

package main

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestReportCommandErrors(t *testing.T) {
	t.Parallel()
	closed := httptest.NewServer(nil)
	url := closed.URL
	closed.Close()
	for _, c := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"no URL", []string{"report"}, 2, "--prometheus is required"},
		{"bad URL", []string{"report", "--prometheus=localhost:9090"}, 2, "is not an http:// or https:// URL"},
		{"bad range", []string{"report", "--prometheus=http://x", "--range=week"}, 2, "--range \"week\""},
		{"bad format", []string{"report", "--prometheus=http://x", "--format=pdf"}, 2, "--format \"pdf\""},
		{"bad end", []string{"report", "--prometheus=http://x", "--end=yesterday"}, 2, "--end \"yesterday\""},
		{"bad step", []string{"report", "--prometheus=http://x", "--step=7m"}, 2, "must divide an hour"},
		{"bad schedule", []string{"report", "--prometheus=http://x", "--peak.schedule=Mon 25:00-26:00"}, 2, "peak.schedule"},
		{"SLO without a class", []string{"report", "--prometheus=http://x", "--slo.wait=30m"}, 2, `--slo.wait "30m": want CLASS=DURATION`},
		{"SLO not a duration", []string{"report", "--prometheus=http://x", "--slo.wait=training=soon"}, 2, `"soon" is not a positive duration`},
		{"SLO twice", []string{"report", "--prometheus=http://x", "--slo.wait=*=1h", "--slo.wait=*=2h"}, 2, "class * is given twice"},
		{"unreachable", []string{"report", "--prometheus=" + url, "--range=1h"}, 1, "Prometheus is unreachable at " + url},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			code := run(context.Background(), c.args, &stdout, &stderr)
			if code != c.code || !strings.Contains(stderr.String(), c.says) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr.String(), c.code, c.says)
			}
			// The flag package prints the usage after its own parse errors.
			if lines := strings.Count(strings.TrimSpace(stderr.String()), "\n"); lines > 0 && !strings.Contains(stderr.String(), "Usage:") {
				t.Errorf("stderr has %d lines, want one sentence: %q", lines+1, stderr.String())
			}
		})
	}
}
