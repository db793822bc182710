package app

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestAgentConfigValidate: the agent's Validate alone, on parsed flags and
// before any file, socket or API server is touched, refuses each bad
// setting with a UsageError of one sentence, and derives what the build
// reads from a good one.
func TestAgentConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		says string
	}{
		{"scenario without --simulate", []string{"x.yaml"}, `unexpected argument "x.yaml": a scenario FILE needs --simulate`},
		{"two scenarios", []string{"--simulate", "a.yaml", "b.yaml"}, `unexpected argument "b.yaml": --simulate takes one scenario FILE`},
		{"extra label", []string{"--pods.extra-labels=pod=team"}, `--pods.extra-labels: extra label "pod=team"`},
		{"empty resource name", []string{"--kubelet.resource-names=a,,b"}, `--kubelet.resource-names "a,,b": an empty name`},
		{"relative proc root", []string{"--proc.root=proc"}, `the proc root "proc" is not absolute`},
		{"missing kubeconfig", []string{"--kubeconfig=/nonexistent/kubeconfig"}, `the kubeconfig "/nonexistent/kubeconfig" cannot be read`},
		{"no DRA driver", []string{"--dra.drivers= "}, "no DRA driver is named"},
		{"engine", []string{"--idle.threshold=2"}, "idle threshold 2 must be a ratio in (0, 1]"},
		{"node watch", []string{"--node.watch-interval=10ms"}, "node watch interval 10ms is below 1s"},
		{"log level", []string{"--log.level=loud"}, `--log.level "loud" is not one of debug, info, warn, error`},
		{"log format", []string{"--log.format=xml"}, `--log.format "xml" is not one of json, console, auto`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := parseAgent(tc.args, io.Discard)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			err = c.Validate()
			var ue UsageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.says) || strings.Contains(err.Error(), "\n") {
				t.Errorf("Validate() = %v; want a one-line UsageError saying %q", err, tc.says)
			}
		})
	}
	t.Run("derived", func(t *testing.T) {
		t.Parallel()
		c, err := parseAgent([]string{"--simulate", "s.yaml", "--kubelet.resource-names= a.com/x ,b.com/y", "--pods.extra-labels=team=team",
			"--node.name=n1", "--pods.enabled=false", "--dra.enabled=false", "--kubelet.pod-resources-socket=/tmp/k.sock"}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		if c.scenario != "s.yaml" || !slices.Equal(c.kubelet.ResourceNames, []string{"a.com/x", "b.com/y"}) ||
			c.identity.ExtraLabels["team"] != "team" || c.node.Name != "n1" || !c.socketGiven {
			t.Errorf("scenario %q, resource names %q, extra labels %v, node %q, socket given %v",
				c.scenario, c.kubelet.ResourceNames, c.identity.ExtraLabels, c.node.Name, c.socketGiven)
		}
	})
}

// TestReportConfigValidate: the report's Validate alone refuses each bad
// setting with a one-line UsageError, before any file is read or query
// made, and derives the range, the zone and the writer.
func TestReportConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		says string
	}{
		{"argument", []string{"--prometheus=http://p:9090", "x"}, `takes no arguments, got ["x"]`},
		{"no prometheus", nil, "--prometheus is required"},
		{"not http", []string{"--prometheus=ftp://p"}, `--prometheus "ftp://p" is not an http:// or https:// URL`},
		{"range", []string{"--prometheus=http://p", "--range=soon"}, `--range "soon" is not a duration`},
		{"end", []string{"--prometheus=http://p", "--end=yesterday"}, `--end "yesterday" is not a time`},
		{"format", []string{"--prometheus=http://p", "--format=pdf"}, `--format "pdf" is not one of text, html, json`},
		{"currency", []string{"--prometheus=http://p", "--currency=euro"}, `--currency "euro" is not a three-letter ISO 4217 code`},
		{"step", []string{"--prometheus=http://p", "--step=7m"}, "step 7m0s must divide an hour"},
		{"price file not read", []string{"--prometheus=http://p", "--price.file=/nonexistent", "--top=0"}, "top 0 must be at least 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := parseReport(tc.args, io.Discard)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			err = c.Validate()
			var ue UsageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.says) || strings.Contains(err.Error(), "\n") {
				t.Errorf("Validate() = %v; want a one-line UsageError saying %q", err, tc.says)
			}
		})
	}
	c, err := parseReport([]string{"--prometheus=http://p:9090/prom", "--range=2d", "--end=2026-12-07", "--peak.timezone=Europe/Berlin", "--format=json"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	if c.report.Range != 48*time.Hour || !c.report.End.Equal(time.Date(2026, 12, 7, 0, 0, 0, 0, berlin)) || c.report.Location.String() != "Europe/Berlin" || c.write == nil || c.url.Host != "p:9090" {
		t.Errorf("range %s, end %s, zone %s, writer %v, url %v", c.report.Range, c.report.End, c.report.Location, c.write != nil, c.url)
	}
}

// TestSimulatedPathsValidated: with --simulate, Validate refuses a metrics
// path the simulator serves, before the scenario is read; without, the
// path is the agent's to take.
func TestSimulatedPathsValidated(t *testing.T) {
	t.Parallel()
	paths := map[string]string{"/simulate/ksm": "the simulated kube-state-metrics"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--simulate", "--web.telemetry-path=/simulate/ksm"}, "--web.telemetry-path /simulate/ksm is where --simulate serves the simulated kube-state-metrics; choose another path"},
		{[]string{"--web.telemetry-path=/simulate/ksm"}, ""},
		{[]string{"--simulate", "--web.telemetry-path=/metrics"}, ""},
	} {
		c, err := parseAgent(tc.args, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if c.simulate {
			c.simPaths = paths
		}
		err = c.Validate()
		if got := fmt.Sprint(err); (tc.want == "" && err != nil) || (tc.want != "" && got != tc.want) {
			t.Errorf("%q: Validate() = %v; want %q", tc.args, err, tc.want)
		}
	}
}
