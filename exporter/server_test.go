package exporter

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := DefaultConfig()
			tc.cfg(&c)
			err := c.Validate()
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
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(fixed{testSnapshot()}, nil))
	h := NewHandler(reg, cfg.MetricsPath, func() bool { return true }, zap.NewNop())
	s, err := Listen(cfg, h, zap.NewNop())
	if err != nil {
		t.Fatal(err)
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
