package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpuxray/gpuxray/report"
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

// hostileProm answers every range query with one series valued 300 at
// each step (a 5m step's seconds) but poison at the third, its labels
// padded with pad bytes, every instant query with nothing; or, with stall
// set, never answers.
func hostileProm(t *testing.T, poison string, pad int, stall bool) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The form read, the server sees the client hang up.
		if err := r.ParseForm(); err != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		if stall {
			<-r.Context().Done()
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/api/v1/query" {
			fmt.Fprint(w, `{"status":"success","data":{"resultType":"matrix","result":[]}}`)
			return
		}
		start, _ := strconv.ParseFloat(r.Form.Get("start"), 64)
		end, _ := strconv.ParseFloat(r.Form.Get("end"), 64)
		step, _ := strconv.ParseFloat(r.Form.Get("step"), 64)
		var vals []string
		for i, at := 0, start; at <= end; i, at = i+1, at+step {
			v := "300"
			if i == 2 {
				v = poison
			}
			vals = append(vals, fmt.Sprintf(`[%.3f,%q]`, at, v))
		}
		fmt.Fprintf(w, `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"instance":"n1","window":"peak","pad":%q},"values":[%s]}]}}`,
			strings.Repeat("x", pad), strings.Join(vals, ","))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestReportHostilePrometheus: answers no figure can hold, an answer over
// the size limit, a stalled server and a redirect loop, through the
// command: exit codes and one sentence each.
func TestReportHostilePrometheus(t *testing.T) {
	t.Parallel()
	args := func(url string, more ...string) []string {
		return append([]string{"report", "--prometheus=" + url, "--range=1h", "--end=2026-12-02T10:00:00Z"}, more...)
	}
	for _, poison := range []string{"+Inf", "-Inf", "NaN", "1.7e308"} {
		srv := hostileProm(t, poison, 0, false)
		for _, format := range []string{"text", "html", "json"} {
			t.Run(poison+" "+format, func(t *testing.T) {
				t.Parallel()
				var stdout, stderr strings.Builder
				if code := run(context.Background(), args(srv.URL, "--format="+format), &stdout, &stderr); code != 0 {
					t.Fatalf("exit %d: %s", code, stderr.String())
				}
				out := stdout.String()
				if format == "json" {
					var r report.Report
					if err := json.Unmarshal([]byte(out), &r); err != nil {
						t.Fatalf("the JSON report does not decode: %v", err)
					}
					if !strings.Contains(strings.Join(r.Warnings, "\n"), "that no figure can hold") {
						t.Errorf("no warning of the values left out: %q", r.Warnings)
					}
				}
				if !strings.Contains(out, "that no figure can hold") {
					t.Errorf("the %s report does not say values were left out", format)
				}
			})
		}
	}
	bad := hostileProm(t, "300", 0, false)
	big := hostileProm(t, "300", 4096, false)
	stalled := hostileProm(t, "300", 0, true)
	loop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.String(), http.StatusFound)
	}))
	t.Cleanup(loop.Close)
	for _, c := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"answer over the limit", args(big.URL, "--prometheus.max-answer-bytes=1024"), 1, "is larger than --prometheus.max-answer-bytes (1024 bytes): raise the limit if the answer is right"},
		{"stalled", args(stalled.URL, "--prometheus.timeout=300ms"), 1, "Prometheus at " + stalled.URL + " did not answer query "},
		{"redirect loop", args(loop.URL), 1, "Prometheus is unreachable at " + loop.URL + ": stopped after 10 redirects"},
		{"answer limit too small", args(bad.URL, "--prometheus.max-answer-bytes=10"), 2, "max answer bytes 10 must be at least 1024"},
		{"series limit", args(bad.URL, "--prometheus.max-series=0"), 2, "max series 0 must be at least 1"},
		{"hints' share", args(bad.URL, "--hints.min-share=2"), 2, "hints' minimum share 2 must be in [0, 1]"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr strings.Builder
			code := run(context.Background(), c.args, &stdout, &stderr)
			if code != c.code || !strings.Contains(stderr.String(), c.says) || strings.Count(strings.TrimSpace(stderr.String()), "\n") > 0 {
				t.Errorf("exit %d, stderr %q; want %d and one line with %q", code, stderr.String(), c.code, c.says)
			}
		})
	}
}

// TestReportSignal: the binary itself, reading a server that never
// answers, ends on SIGTERM with "interrupted" and exit 1.
func TestReportSignal(t *testing.T) {
	t.Parallel()
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm() // then the server sees the client go
		requests.Add(1)
		<-r.Context().Done()
	}))
	defer srv.Close()
	var stderr bytes.Buffer
	cmd := exec.Command(os.Args[0], "report", "--prometheus="+srv.URL, "--range=1h")
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Signalled once it is reading, its signal handling installed.
	for deadline := time.Now().Add(20 * time.Second); requests.Load() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("the report asked nothing: %s", stderr.String())
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || strings.TrimSpace(stderr.String()) != "gpuxray report: interrupted" {
			t.Errorf("after SIGTERM: %v, stderr %q; want exit 1 and interrupted", err, stderr.String())
		}
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		<-exited
		t.Fatalf("the report still runs 20s after SIGTERM; stderr %q", stderr.String())
	}
}
