package exporter

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"golang.org/x/crypto/bcrypt"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yml", "basic_auth_users:\n  prometheus: $2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi\n")
	unknownKey := write("unknown.yml", "basic_auth_user:\n  prometheus: x\n")
	missingCert := write("cert.yml", "tls_server_config:\n  cert_file: /nonexistent/tls.crt\n  key_file: /nonexistent/tls.key\n")
	tests := []struct {
		name string
		cfg  func(*Config)
		want string // "" is valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"web config file", func(c *Config) { c.ConfigFile = good }, ""},
		{"health listener", func(c *Config) { c.HealthListenAddress = ":9472" }, ""},
		{"bad listen address", func(c *Config) { c.ListenAddress = "9471" }, `listen address "9471" is not host:port`},
		{"bad metrics path", func(c *Config) { c.MetricsPath = "metrics" }, `metrics path "metrics" must start with /`},
		{"bad health address", func(c *Config) { c.HealthListenAddress = "9472" }, `health listen address "9472" is not host:port`},
		{"health on the listen address", func(c *Config) { c.HealthListenAddress = ":9471" }, "is the listen address"},
		{"missing web config file", func(c *Config) { c.ConfigFile = filepath.Join(dir, "none.yml") }, "none.yml"},
		{"unknown key in web config", func(c *Config) { c.ConfigFile = unknownKey }, "field basic_auth_user not found"},
		{"missing certificate", func(c *Config) { c.ConfigFile = missingCert }, "/nonexistent/tls.crt"},
		{"custom metrics path", func(c *Config) { c.MetricsPath = "/gpuxray/metrics-v2" }, ""},
		{"metrics path of the health check", func(c *Config) { c.MetricsPath = "/healthz" }, `metrics path "/healthz" is the server's own /healthz`},
		{"metrics path of the readiness check", func(c *Config) { c.MetricsPath = "/readyz" }, `metrics path "/readyz" is the server's own /readyz`},
		{"metrics path under pprof", func(c *Config) { c.MetricsPath = "/debug/pprof/metrics" }, `metrics path "/debug/pprof/metrics" is the server's own /debug/pprof/`},
		{"metrics path of pprof", func(c *Config) { c.MetricsPath = "/debug/pprof" }, `is the server's own /debug/pprof/`},
		{"metrics path of the index", func(c *Config) { c.MetricsPath = "/" }, `metrics path "/" must start with / and name a path`},
		{"unclosed wildcard", func(c *Config) { c.MetricsPath = "/metrics/{x" }, `metrics path "/metrics/{x": '{' is not allowed`},
		{"wildcard", func(c *Config) { c.MetricsPath = "/{x}" }, `metrics path "/{x}": '{' is not allowed`},
		{"space", func(c *Config) { c.MetricsPath = "/a b" }, `metrics path "/a b": ' ' is not allowed`},
		{"method prefix", func(c *Config) { c.MetricsPath = "GET /metrics" }, `metrics path "GET /metrics" must start with /`},
		{"host prefix", func(c *Config) { c.MetricsPath = "example.com/metrics" }, `must start with /`},
		{"control character", func(c *Config) { c.MetricsPath = "/metrics\n" }, `'\n' is not allowed`},
		{"query", func(c *Config) { c.MetricsPath = "/metrics?x=1" }, `'?' is not allowed`},
		{"percent escape", func(c *Config) { c.MetricsPath = "/m%65trics" }, `'%' is not allowed`},
		{"not ASCII", func(c *Config) { c.MetricsPath = "/métrics" }, `'é' is not allowed`},
		{"trailing slash", func(c *Config) { c.MetricsPath = "/metrics/" }, `metrics path "/metrics/" is not a clean path`},
		{"double slash", func(c *Config) { c.MetricsPath = "//metrics" }, `is not a clean path`},
		{"dot segment", func(c *Config) { c.MetricsPath = "/a/../metrics" }, `is not a clean path`},
		{"negative max requests", func(c *Config) { c.MaxRequests = -1 }, "max requests -1 must not be negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := DefaultConfig()
			tc.cfg(&c)
			err := c.Validate()
			if err == nil {
				// A valid path registers without a panic.
				NewHandler(prometheus.NewRegistry(), c.MetricsPath, func() bool { return true }, zap.NewNop(), DefaultMaxRequests)
			}
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// serve starts a Server on loopback ports and stops it when the test ends.
func serve(t *testing.T, cfg Config) *Server {
	t.Helper()
	return serveWith(t, cfg, nil)
}

// serveWith is serve with tune applied to the Server before it serves.
func serveWith(t *testing.T, cfg Config, tune func(*Server)) *Server {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(fixed{testSnapshot()}, nil))
	h := NewHandler(reg, cfg.MetricsPath, func() bool { return true }, zap.NewNop(), DefaultMaxRequests)
	s, err := Listen(cfg, h, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if tune != nil {
		tune(s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve after cancel = %v, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Serve did not return within 10s of cancel")
		}
	})
	return s
}

func status(t *testing.T, url, user, pass string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	// Retry a refused connection briefly: Serve starts in a goroutine, but the
	// listener is bound, so connections queue; this only guards slow CI.
	for i := 0; ; i++ {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			return resp.StatusCode
		}
		if i == 50 {
			t.Fatalf("GET %s: %v", url, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestServerListeners: the health listener serves only the probes, without
// authentication, while the main listener asks for credentials; pprof is
// there only when enabled.
func TestServerListeners(t *testing.T) {
	t.Parallel()
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	webConfig := filepath.Join(t.TempDir(), "web.yml")
	if err := os.WriteFile(webConfig, []byte("basic_auth_users:\n  prometheus: "+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	secured := serve(t, Config{
		ListenAddress: "127.0.0.1:0", MetricsPath: "/metrics", ConfigFile: webConfig,
		HealthListenAddress: "127.0.0.1:0", EnablePprof: true,
	})
	plain := serve(t, Config{ListenAddress: "127.0.0.1:0", MetricsPath: "/metrics"})
	if plain.HealthAddr() != nil {
		t.Errorf("HealthAddr() = %v without a health listener, want nil", plain.HealthAddr())
	}
	main, health := "http://"+secured.Addr().String(), "http://"+secured.HealthAddr().String()
	tests := []struct {
		url, user, pass string
		want            int
	}{
		{main + "/metrics", "", "", 401},
		{main + "/metrics", "prometheus", "wrong", 401},
		{main + "/metrics", "prometheus", "s3cret", 200},
		{main + "/healthz", "", "", 401},
		{main + "/debug/pprof/", "", "", 401},
		{main + "/debug/pprof/", "prometheus", "s3cret", 200},
		{health + "/healthz", "", "", 200},
		{health + "/readyz", "", "", 200},
		{health + "/metrics", "", "", 404},
		{health + "/debug/pprof/", "", "", 404},
		{health + "/", "", "", 404},
		{"http://" + plain.Addr().String() + "/metrics", "", "", 200},
		{"http://" + plain.Addr().String() + "/debug/pprof/", "", "", 404},
	}
	for _, tc := range tests {
		if got := status(t, tc.url, tc.user, tc.pass); got != tc.want {
			t.Errorf("GET %s as %q = %d, want %d", tc.url, tc.user, got, tc.want)
		}
	}
}

func TestServerTimeouts(t *testing.T) {
	t.Parallel()
	s, err := Listen(Config{ListenAddress: "127.0.0.1:0", MetricsPath: "/metrics", HealthListenAddress: "127.0.0.1:0"}, http.NotFoundHandler(), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer s.ln.Close()
	defer s.healthLn.Close()
	for name, srv := range map[string]*http.Server{"main": s.srv, "health": s.health} {
		if srv.ReadHeaderTimeout != 5*time.Second || srv.ReadTimeout != 10*time.Second || srv.WriteTimeout != 30*time.Second || srv.MaxHeaderBytes != 64<<10 {
			t.Errorf("%s server: read header %s, read %s, write %s, max header %d; want 5s, 10s, 30s, 65536",
				name, srv.ReadHeaderTimeout, srv.ReadTimeout, srv.WriteTimeout, srv.MaxHeaderBytes)
		}
	}
}

func TestListenTaken(t *testing.T) {
	t.Parallel()
	s := serve(t, Config{ListenAddress: "127.0.0.1:0", MetricsPath: "/metrics"})
	_, err := Listen(Config{ListenAddress: "127.0.0.1:0", MetricsPath: "/metrics", HealthListenAddress: s.Addr().String()}, http.NotFoundHandler(), zap.NewNop())
	if err == nil || !strings.Contains(err.Error(), "cannot listen on "+s.Addr().String()) {
		t.Errorf("Listen on a taken health port = %v, want a start-up error naming it", err)
	}
}

// TestMethods: the metrics, health and readiness endpoints answer GET and
// HEAD; anything else is 405 with Allow: GET, HEAD.
func TestMethods(t *testing.T) {
	t.Parallel()
	s := serve(t, Config{ListenAddress: "127.0.0.1:0", MetricsPath: "/metrics"})
	base := "http://" + s.Addr().String()
	for _, path := range []string{"/metrics", "/healthz", "/readyz", "/"} {
		for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodOptions, http.MethodPatch} {
			req, err := http.NewRequest(m, base+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			want, allow := http.StatusOK, ""
			if m != http.MethodGet && m != http.MethodHead {
				want, allow = http.StatusMethodNotAllowed, "GET, HEAD"
			}
			if resp.StatusCode != want || resp.Header.Get("Allow") != allow {
				t.Errorf("%s %s = %d, Allow %q; want %d, Allow %q", m, path, resp.StatusCode, resp.Header.Get("Allow"), want, allow)
			}
		}
	}
}

// TestPprofSeconds: profiles that run for ?seconds= are refused with 400
// beyond what ends within the write timeout, through the real server; a
// one-second profile, trace and delta profile are served.
func TestPprofSeconds(t *testing.T) {
	t.Parallel()
	s := serve(t, Config{ListenAddress: "127.0.0.1:0", MetricsPath: "/metrics", EnablePprof: true})
	base := "http://" + s.Addr().String() + "/debug/pprof/"
	// Without the bound a refused request runs for its seconds: the
	// client's timeout turns that into a failure, not a wait.
	tr := &http.Transport{}
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	// Before the server's shutdown (cleanups run last first): a connection
	// the transport dialled for a parallel request and then left unused
	// holds Shutdown for 5 s, as one that has not sent its request yet.
	t.Cleanup(tr.CloseIdleConnections)
	tests := []struct {
		method, path, body string
		want               int
		msg                string
	}{
		{"GET", "profile?seconds=60", "", 400, `seconds=60: give a whole number of seconds from 1 to 25`},
		{"GET", "profile?seconds=26", "", 400, "within the server's 30s write timeout"},
		{"GET", "profile?seconds=abc", "", 400, `seconds="abc"`},
		{"GET", "profile?seconds=0.5", "", 400, "whole number"},
		{"POST", "profile", "seconds=1000", 405, "use GET or HEAD"}, // a POSTed form was read too; POST is refused now
		{"GET", "trace?seconds=1000", "", 400, `seconds=1000: give a number of seconds up to 25`},
		{"GET", "trace?seconds=NaN", "", 400, "seconds"},
		{"GET", "trace?seconds=Inf", "", 400, "seconds"},
		{"GET", "heap?seconds=26", "", 400, "seconds=26"},
		{"GET", "allocs?seconds=100", "", 400, "seconds=100"},
		{"GET", "block?seconds=1000", "", 400, "seconds=1000"},
		{"GET", "mutex?seconds=1000", "", 400, "seconds=1000"},
		{"GET", "goroutine?seconds=1000", "", 400, "seconds=1000"},
		{"GET", "profile?seconds=1", "", 200, ""},
		{"GET", "trace?seconds=1", "", 200, ""},
		{"GET", "trace?seconds=0.2", "", 200, ""},
		{"GET", "heap?seconds=1", "", 200, ""},
		{"GET", "goroutine?debug=1", "", 200, ""},
		{"GET", "", "", 200, ""},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			if tc.want != 200 {
				// One CPU profile and one trace at a time: those served run
				// one after the other.
				t.Parallel()
			}
			req, err := http.NewRequest(tc.method, base+tc.path, strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if tc.body != "" {
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			}
			start := time.Now()
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v after %s", tc.method, tc.path, err, time.Since(start))
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want || !strings.Contains(string(b), tc.msg) {
				t.Errorf("%s %s = %d %q, want %d containing %q", tc.method, tc.path, resp.StatusCode, b, tc.want, tc.msg)
			}
			if tc.want == 400 && strings.Count(strings.TrimSpace(string(b)), "\n") > 0 {
				t.Errorf("%s %s: want one sentence, got %q", tc.method, tc.path, b)
			}
		})
	}
}

// TestPprofProfileDefault: a CPU profile without ?seconds= runs for the
// bound, not pprof's 30 s, which would outlast the write timeout.
func TestPprofProfileDefault(t *testing.T) {
	t.Parallel()
	var got string
	h := boundSeconds(func(_ http.ResponseWriter, r *http.Request) { got = r.FormValue("seconds") }, false, true)
	h(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/debug/pprof/profile", nil))
	if got != "25" {
		t.Errorf("profile without seconds runs for %q seconds, want 25", got)
	}
}

// blockingGatherer holds every Gather until release is closed.
type blockingGatherer struct {
	entered chan struct{}
	release chan struct{}
}

func (g blockingGatherer) Gather() ([]*dto.MetricFamily, error) {
	g.entered <- struct{}{}
	<-g.release
	return nil, nil
}

// TestInFlightQueue: beyond the in-flight limit a scrape waits for a slot,
// half of its X-Prometheus-Scrape-Timeout-Seconds (at most 5 s), before a
// 503; a slot freed within that time serves it.
func TestInFlightQueue(t *testing.T) {
	t.Parallel()
	g := blockingGatherer{entered: make(chan struct{}, 8), release: make(chan struct{})}
	srv := httptest.NewServer(NewHandler(g, "/metrics", func() bool { return true }, zap.NewNop(), 2))
	defer srv.Close()
	get := func(timeout string) <-chan int {
		c := make(chan int, 1)
		go func() {
			req, _ := http.NewRequest(http.MethodGet, srv.URL+"/metrics", nil)
			if timeout != "" {
				req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", timeout)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				c <- 0
				return
			}
			resp.Body.Close()
			c <- resp.StatusCode
		}()
		return c
	}
	held := []<-chan int{get(""), get("")}
	<-g.entered
	<-g.entered // both slots taken
	start := time.Now()
	if code := <-get("0.4"); code != http.StatusServiceUnavailable {
		t.Errorf("a scrape finding no slot for half its 0.4 s timeout = %d, want 503", code)
	}
	// At least half its timeout; a loaded machine only makes it longer.
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("it waited %s for a slot, want 0.2 s", d)
	}
	waiting := get("10") // waits up to 5 s
	time.AfterFunc(100*time.Millisecond, func() { close(g.release) })
	for i, c := range append(held, waiting) {
		if code := <-c; code != http.StatusOK {
			t.Errorf("scrape %d = %d, want 200 once a slot is free", i, code)
		}
	}
}

// TestInFlightDefault: the default limit is node_exporter's 40.
func TestInFlightDefault(t *testing.T) {
	t.Parallel()
	g := blockingGatherer{entered: make(chan struct{}, 64), release: make(chan struct{})}
	srv := httptest.NewServer(NewHandler(g, "/metrics", func() bool { return true }, zap.NewNop(), DefaultMaxRequests))
	defer srv.Close()
	codes := make(chan int, 41)
	scrape := func(timeout string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/metrics", nil)
		req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", timeout)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			codes <- 0
			return
		}
		resp.Body.Close()
		codes <- resp.StatusCode
	}
	for range 40 {
		go scrape("10")
	}
	for range 40 {
		<-g.entered
	}
	scrape("0.1")
	if code := <-codes; code != http.StatusServiceUnavailable {
		t.Errorf("the 41st scrape = %d, want 503", code)
	}
	close(g.release)
	for range 40 {
		if code := <-codes; code != http.StatusOK {
			t.Errorf("a scrape within the limit = %d, want 200", code)
		}
	}
}

// TestServeStopsCleanlyWithSilentClient: a client that opens a connection
// and sends nothing holds Go's Shutdown past its grace; the stop is still
// clean (nil), so SIGTERM does not exit 1.
func TestServeStopsCleanlyWithSilentClient(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	s, err := Listen(Config{ListenAddress: "127.0.0.1:0", MetricsPath: "/metrics"},
		NewHandler(reg, "/metrics", func() bool { return true }, zap.NewNop(), DefaultMaxRequests), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	s.SetShutdownGrace(200 * time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	conn, err := net.Dial("tcp", s.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A request on another connection proves the server accepts by now.
	if code := status(t, "http://"+s.Addr().String()+"/healthz", "", ""); code != 200 {
		t.Fatalf("healthz = %d", code)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve = %v, want nil: a silent client must not fail the stop", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
}
