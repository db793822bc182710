package app

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/config"
	"github.com/prometheus/common/model"

	"github.com/gpuxray/gpuxray/agent"
	"github.com/gpuxray/gpuxray/report"
)

// reportFlags are the report command's flags that are not report.Config's.
type reportFlags struct {
	prometheus, end, format, output string
	rangeStr                        string
	httpConfigFile                  string
	basicUser, basicPasswordFile    string
	bearerTokenFile                 string
	caFile, certFile, keyFile       string
	serverName                      string
	insecure                        bool
}

// reportConfig is the report command's configuration as its flags give
// it. Validate checks it and derives the rest of report.Config.
type reportConfig struct {
	report  report.Config
	flags   reportFlags
	minTime time.Duration
	peak    *peakFlags
	prices  *priceOptions
	args    []string
	// scheduleGiven is whether --peak.schedule was set, on the command
	// line or in the environment: only then does the report check it.
	scheduleGiven bool

	// Derived by Validate.
	url   *url.URL
	write func(io.Writer, *report.Report) error
}

// parseReport binds the report's flags and parses args (and the flags'
// environment variables) into a configuration, not yet validated.
func parseReport(args []string, stderr io.Writer) (*reportConfig, error) {
	c := &reportConfig{report: report.DefaultConfig()}
	cfg, f := &c.report, &c.flags
	fs := flag.NewFlagSet("gpuxray report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.prometheus, "prometheus", "", "URL of the Prometheus server that scrapes the agents (and kube-state-metrics), e.g. http://prometheus:9090")
	fs.StringVar(&f.rangeStr, "range", "7d", "how far back from --end the report reaches, e.g. 7d, 30d, 36h")
	fs.StringVar(&f.end, "end", "", "end of the range: RFC 3339 (2026-12-07T00:00:00Z) or a date (2026-12-07, midnight of --peak.timezone); now when empty")
	fs.DurationVar(&cfg.Step, "step", cfg.Step, "resolution: rates are taken over each step and summed; must divide an hour and be at least 1m, and should be at least twice the scrape interval (the report warns when it is not)")
	fs.StringVar(&f.format, "format", "text", "output: text, html (a self-contained page with charts) or json (docs/report.md)")
	fs.StringVar(&f.output, "output", "", "write the report to this file instead of standard output")
	fs.IntVar(&cfg.Top, "top", cfg.Top, "how many workloads and models to list")
	fs.Float64Var(&cfg.Quantile, "verdict.quantile", cfg.Quantile, "quantile of peak time at which pending demand beyond reclaimable capacity counts as a shortage")
	fs.Float64Var(&cfg.Hints.ActivityThreshold, "hints.activity-threshold", cfg.Hints.ActivityThreshold, "right-sizing: a workload whose activity never exceeds this ratio is listed")
	fs.Float64Var(&cfg.Hints.MemoryBound, "hints.memory-bound", cfg.Hints.MemoryBound, "right-sizing: share of its GPU's memory above which a compute-idle workload is memory-bound")
	c.minTime = time.Duration(cfg.Hints.MinHours * float64(time.Hour))
	fs.DurationVar(&c.minTime, "hints.min-time", c.minTime, "right-sizing: the least time a workload's activity must have been measured over for a hint (raised to --hints.min-share of the time covered); hints withheld are counted")
	fs.Float64Var(&cfg.Hints.MinShare, "hints.min-share", cfg.Hints.MinShare, "right-sizing: the least share of the time the data covers that a workload's activity must have been measured over for a hint")
	fs.DurationVar(&cfg.Timeout, "prometheus.timeout", cfg.Timeout, "deadline of each query: the server is asked to stop a tenth earlier; a query it does not answer at all is tried once more, halved, then the report gives up")
	fs.IntVar(&cfg.MaxPoints, "prometheus.max-points", cfg.MaxPoints, "most steps per range query; longer ranges are split (and split further when the server refuses, or answers more than --prometheus.max-answer-bytes)")
	fs.Int64Var(&cfg.MaxAnswerBytes, "prometheus.max-answer-bytes", cfg.MaxAnswerBytes, "most bytes of one answer (decompressed): a larger one is split, and one step's larger answer ends the report")
	fs.IntVar(&cfg.MaxSeries, "prometheus.max-series", cfg.MaxSeries, "most series one query may return (the report holds each over the whole range)")
	fs.StringVar(&f.httpConfigFile, "prometheus.http-config-file", "", "Prometheus' HTTP client configuration (basic_auth, authorization, tls_config, proxy_url, …), as in a scrape config; the flags below add to it")
	fs.StringVar(&f.basicUser, "prometheus.basic-auth.username", "", "basic authentication user")
	fs.StringVar(&f.basicPasswordFile, "prometheus.basic-auth.password-file", "", "file holding the basic authentication password")
	fs.StringVar(&f.bearerTokenFile, "prometheus.bearer-token-file", "", "file holding a bearer token (read at each request)")
	fs.StringVar(&f.caFile, "prometheus.tls.ca-file", "", "CA certificates to verify the server with")
	fs.StringVar(&f.certFile, "prometheus.tls.cert-file", "", "client certificate")
	fs.StringVar(&f.keyFile, "prometheus.tls.key-file", "", "client certificate's key")
	fs.StringVar(&f.serverName, "prometheus.tls.server-name", "", "server name to verify the certificate against")
	fs.BoolVar(&f.insecure, "prometheus.tls.insecure-skip-verify", false, "do not verify the server's certificate")
	var sched agent.Config // peakFlags checks each value as it is set
	c.peak = &peakFlags{cfg: &sched, spec: agent.DefaultPeakSchedule, loc: time.UTC}
	sched.Windows = c.peak.build()
	fs.Func("peak.schedule", "the agents' --peak.schedule: the report follows the agents' window label and warns where it differs from this; unchecked when not given", c.peak.setSchedule)
	fs.Func("peak.timezone", "the agents' --peak.timezone: the clock of the report's dates and hour-of-day heatmap", c.peak.setZone)
	fs.Func("slo.wait", "a target for how long GPU jobs wait: CLASS=DURATION (a priority class, or * for every class without its own), the 95th-percentile wait the report holds each class to; repeatable", sloFlag(&cfg.SLOWait))
	c.prices = priceFlags(fs)
	fs.Lookup("peak.schedule").DefValue = agent.DefaultPeakSchedule
	fs.Lookup("peak.timezone").DefValue = "UTC"
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: gpuxray report --prometheus URL [--range 7d] [--end TIME] [--format text|html|json] [--output FILE]\n\nReads the agents' series (and kube-state-metrics' pending pods) from Prometheus\nover the range and answers \"do we need more GPUs?\": where the GPU time went,\nwho held it idle at peak, whether pending demand could have run on reclaimable\nGPUs, right-sizing hints, and the verdict with its arithmetic.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	positional, err := parseFlags(fs, args, os.Getenv)
	if err != nil {
		return nil, err
	}
	c.args = positional
	c.scheduleGiven = given(fs, "peak.schedule") || os.Getenv(envName("peak.schedule")) != ""
	return c, nil
}

// Validate checks every setting, with one sentence for the first that is
// wrong, and derives the range, the end, the peak schedule, the time zone
// and the writer of the format. It is the report's only validation; the
// files the flags name are read by buildReport.
func (c *reportConfig) Validate() error {
	f, cfg := &c.flags, &c.report
	if len(c.args) != 0 {
		return usagef("takes no arguments, got %q", c.args)
	}
	if f.prometheus == "" {
		return usagef("--prometheus is required: the URL of the Prometheus server that scrapes the agents")
	}
	u, err := url.Parse(f.prometheus)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usagef("--prometheus %q is not an http:// or https:// URL", f.prometheus)
	}
	c.url = u
	r, err := model.ParseDuration(f.rangeStr)
	if err != nil || r <= 0 {
		return usagef("--range %q is not a duration such as 7d, 36h or 2w", f.rangeStr)
	}
	cfg.Range = time.Duration(r)
	cfg.Location = c.peak.loc
	cfg.Hints.MinHours = c.minTime.Hours()
	if f.end != "" {
		if cfg.End, err = time.Parse(time.RFC3339, f.end); err != nil {
			if cfg.End, err = time.ParseInLocation(time.DateOnly, f.end, c.peak.loc); err != nil {
				return usagef("--end %q is not a time such as 2026-12-07T00:00:00Z or a date such as 2026-12-07", f.end)
			}
		}
	}
	if c.scheduleGiven {
		s, err := agent.ParseSchedule(c.peak.spec, c.peak.loc)
		if err != nil {
			return usagef("--peak.schedule: %v", err)
		}
		cfg.Peak, cfg.PeakSchedule = s.At, c.peak.spec
	}
	switch f.format {
	case "text":
		c.write = report.WriteText
	case "html":
		c.write = report.WriteHTML
	case "json":
		c.write = report.WriteJSON
	default:
		return usagef("--format %q is not one of text, html, json", f.format)
	}
	if err := c.prices.Validate(); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return usageError{err}
	}
	return nil
}

// reportRun is a report ready to be read from Prometheus.
type reportRun struct {
	cfg    report.Config
	api    v1.API
	write  func(io.Writer, *report.Report) error
	output string
}

// buildReport reads the files a valid c names (the price file, the HTTP
// client configuration and the secrets it names) and builds the
// Prometheus client.
func buildReport(ctx context.Context, c *reportConfig) (*reportRun, error) {
	cfg := c.report
	var err error
	if cfg.Prices, err = c.prices.sheet(); err != nil {
		return nil, err
	}
	httpCfg, err := c.flags.httpConfig(ctx)
	if err != nil {
		return nil, err
	}
	client, err := config.NewClientFromConfig(*httpCfg, "gpuxray-report")
	if err != nil {
		return nil, usagef("Prometheus client configuration: %v", err)
	}
	client.Transport = report.LimitAnswers(client.Transport, cfg.MaxAnswerBytes)
	apiClient, err := api.NewClient(api.Config{Address: c.flags.prometheus, Client: client})
	if err != nil {
		return nil, usagef("--prometheus %q: %v", c.flags.prometheus, err)
	}
	cfg.Prometheus = c.url.Scheme + "://" + c.url.Host + c.url.Path
	return &reportRun{cfg: cfg, api: v1.NewAPI(apiClient), write: c.write, output: c.flags.output}, nil
}

// run reads Prometheus, builds the report and writes it whole: to
// stdout, or to the output file through a rename.
func (r *reportRun) run(ctx context.Context, stdout, stderr io.Writer) error {
	cfg := r.cfg
	if isTerminal(stderr) {
		cfg.Progress = progressLine(stderr)
	}
	rep, err := report.Build(ctx, r.api, cfg)
	if cfg.Progress != nil {
		fmt.Fprint(stderr, "\r\033[K")
	}
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := r.write(&buf, rep); err != nil {
		return err
	}
	if r.output == "" {
		_, err = stdout.Write(buf.Bytes())
		return err
	}
	// Written whole, then renamed: a reader never sees half a report.
	tmp, err := os.CreateTemp(filepath.Dir(r.output), ".gpuxray-report-*")
	if err != nil {
		return fmt.Errorf("--output: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(buf.Bytes()); err != nil {
		tmp.Close()
		return fmt.Errorf("--output: %w", err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return fmt.Errorf("--output: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("--output: %w", err)
	}
	return os.Rename(tmp.Name(), r.output)
}

// runReport is the report command: parse, validate, build, run.
func runReport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseReport(args, stderr)
	if err != nil {
		return err
	}
	if err := c.Validate(); err != nil {
		return err
	}
	r, err := buildReport(ctx, c)
	if err != nil {
		return err
	}
	return r.run(ctx, stdout, stderr)
}

// httpConfig is --prometheus.http-config-file with the auth flags on top.
// The file is read within bounds until ctx is done (ReadFile), and every
// file the result names, which the client reads again at each request, is
// checked (checkFile).
func (f reportFlags) httpConfig(ctx context.Context) (*config.HTTPClientConfig, error) {
	c := config.DefaultHTTPClientConfig
	if f.httpConfigFile != "" {
		data, err := ReadFile(ctx, f.httpConfigFile, "Prometheus HTTP configuration", maxConfigBytes)
		if err != nil {
			return nil, err
		}
		loaded, err := config.LoadHTTPConfig(string(data))
		if err != nil {
			return nil, usagef("--prometheus.http-config-file %q: %s", f.httpConfigFile, oneLine(err.Error()))
		}
		loaded.SetDirectory(filepath.Dir(f.httpConfigFile))
		c = *loaded
	}
	if f.basicUser != "" || f.basicPasswordFile != "" {
		c.BasicAuth = &config.BasicAuth{Username: f.basicUser, PasswordFile: f.basicPasswordFile}
	}
	if f.bearerTokenFile != "" {
		c.Authorization = &config.Authorization{Type: "Bearer", CredentialsFile: f.bearerTokenFile}
	}
	t := &c.TLSConfig
	t.CAFile = cmpOr(f.caFile, t.CAFile)
	t.CertFile = cmpOr(f.certFile, t.CertFile)
	t.KeyFile = cmpOr(f.keyFile, t.KeyFile)
	t.ServerName = cmpOr(f.serverName, t.ServerName)
	t.InsecureSkipVerify = t.InsecureSkipVerify || f.insecure
	if err := c.Validate(); err != nil {
		return nil, usagef("Prometheus client configuration: %v", err)
	}
	for _, file := range httpConfigFiles(&c) {
		if err := checkFile(file, "Prometheus client configuration: the file", maxConfigBytes); err != nil {
			return nil, err
		}
	}
	return &c, nil
}

// httpConfigFiles are the files c names: secrets and certificates that
// the client reads at each request or connection.
func httpConfigFiles(c *config.HTTPClientConfig) []string {
	files := []string{c.BearerTokenFile, c.TLSConfig.CAFile, c.TLSConfig.CertFile, c.TLSConfig.KeyFile}
	if c.BasicAuth != nil {
		files = append(files, c.BasicAuth.PasswordFile, c.BasicAuth.UsernameFile)
	}
	if c.Authorization != nil {
		files = append(files, c.Authorization.CredentialsFile)
	}
	if c.OAuth2 != nil {
		files = append(files, c.OAuth2.ClientSecretFile, c.OAuth2.TLSConfig.CAFile, c.OAuth2.TLSConfig.CertFile, c.OAuth2.TLSConfig.KeyFile)
	}
	out := files[:0]
	for _, f := range files {
		if f != "" {
			out = append(out, f)
		}
	}
	return out
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progressLine rewrites one line of w as queries complete, at most a few
// times a second.
func progressLine(w io.Writer) func(done, total int) {
	var last time.Time
	return func(done, total int) {
		if now := time.Now(); now.Sub(last) >= 200*time.Millisecond || done == total {
			last = now
			fmt.Fprintf(w, "\rreading Prometheus: %3.0f%% of %d query steps", 100*float64(done)/float64(max(total, 1)), total)
		}
	}
}

// sloFlag sets --slo.wait CLASS=DURATION into slo, one class at a time.
func sloFlag(slo *map[string]time.Duration) func(string) error {
	return func(v string) error {
		class, d, ok := strings.Cut(v, "=")
		class = strings.TrimSpace(class)
		if !ok || class == "" {
			return fmt.Errorf("want CLASS=DURATION, such as training=30m or *=2h")
		}
		dur, err := model.ParseDuration(strings.TrimSpace(d))
		if err != nil || dur <= 0 {
			return fmt.Errorf("%q is not a positive duration such as 30m, 2h or 1d", d)
		}
		if *slo == nil {
			*slo = map[string]time.Duration{}
		}
		if _, dup := (*slo)[class]; dup {
			return fmt.Errorf("class %s is given twice", class)
		}
		(*slo)[class] = time.Duration(dur)
		return nil
	}
}
