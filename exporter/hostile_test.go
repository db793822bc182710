package exporter

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

// TestPprofMethods: /debug/pprof/ and its profiles answer GET and HEAD
// only (the symbol endpoint also POST, pprof's protocol for addresses);
// any other method gets 405 with Allow. Before, every method got 200.
func TestPprofMethods(t *testing.T) {
	t.Parallel()
	s := serve(t, Config{ListenAddress: "127.0.0.1:0", MetricsPath: "/metrics", EnablePprof: true})
	base := "http://" + s.Addr().String()
	for _, tc := range []struct {
		path, allow string
	}{
		{"/debug/pprof/", "GET, HEAD"},
		{"/debug/pprof/heap", "GET, HEAD"},
		{"/debug/pprof/goroutine?debug=1", "GET, HEAD"},
		{"/debug/pprof/profile?seconds=1", "GET, HEAD"},
		{"/debug/pprof/trace?seconds=0.1", "GET, HEAD"},
		{"/debug/pprof/symbol", "GET, HEAD, POST"},
	} {
		for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodOptions} {
			allowed := strings.Contains(tc.allow, m)
			if allowed {
				continue
			}
			req, err := http.NewRequest(m, base+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != tc.allow {
				t.Errorf("%s %s = %d, Allow %q; want 405, Allow %q", m, tc.path, resp.StatusCode, resp.Header.Get("Allow"), tc.allow)
			}
		}
	}
	if got := status(t, base+"/debug/pprof/", "", ""); got != http.StatusOK {
		t.Errorf("GET /debug/pprof/ = %d", got)
	}
}

// TestConfigValidateHostile: a port out of range, a web configuration or
// a certificate it names that is a FIFO or a device, and YAML errors are
// each one sentence at start-up, without reading (or blocking on) the
// file. Before, the FIFO hung start-up, /dev/zero grew the process until
// it was killed, the port failed only at Listen, after the sources had
// started and logged, and YAML errors spanned lines.
func TestConfigValidateHostile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fifo := filepath.Join(dir, "web.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no FIFO here: %v", err)
	}
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	certFIFO := write("cert-fifo.yml", "tls_server_config:\n  cert_file: web.fifo\n  key_file: /dev/zero\n")
	twoErrors := write("two.yml", "basic_auth_user:\n  a: b\nhttp_server_confi:\n  x: 1\n")
	for _, tc := range []struct {
		name string
		cfg  func(*Config)
		want string
	}{
		{"port out of range", func(c *Config) { c.ListenAddress = "127.0.0.1:99999" }, `port "99999" is not a number from 0 to 65535`},
		{"health port out of range", func(c *Config) { c.HealthListenAddress = ":70000" }, `health listen address ":70000": port "70000"`},
		{"web config a FIFO", func(c *Config) { c.ConfigFile = fifo }, "is not a regular file"},
		{"web config /dev/zero", func(c *Config) { c.ConfigFile = "/dev/zero" }, "is not a regular file"},
		{"certificate a FIFO", func(c *Config) { c.ConfigFile = certFIFO }, "web.fifo\" is not a regular file"},
		{"YAML errors on one line", func(c *Config) { c.ConfigFile = twoErrors }, "field basic_auth_user not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := DefaultConfig()
			tc.cfg(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("Validate() = %q: more than one line", err)
			}
		})
	}
	c := DefaultConfig()
	c.ListenAddress = "127.0.0.1:http"
	if err := c.Validate(); err != nil {
		t.Errorf("a service name as port: %v", err)
	}
}

// TestCredentialGate: clients flooding wrong basic-auth passwords reach
// exporter-toolkit's bcrypt check at the gate's rate only (the rest get
// 429 without a check), while a scraper whose credentials passed once goes
// straight through. Before, every wrong password was checked (12 clients
// kept 0.9 of a core busy), and the in-flight limit came after.
func TestCredentialGate(t *testing.T) {
	t.Parallel()
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	webConfig := filepath.Join(t.TempDir(), "web.yml")
	if err := os.WriteFile(webConfig, []byte("basic_auth_users:\n  prometheus: "+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := Config{ListenAddress: "127.0.0.1:0", MetricsPath: "/metrics", ConfigFile: webConfig}
	s := serveWith(t, cfg, func(s *Server) { s.credRate, s.credBurst = 1e-6, 3 }) // 3 checks, then none
	url := "http://" + s.Addr().String() + "/metrics"

	if got := status(t, url, "prometheus", "s3cret"); got != http.StatusOK {
		t.Fatalf("the scraper's first scrape = %d, want 200", got)
	}
	var mu sync.Mutex
	codes := map[int]int{}
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := status(t, url, "prometheus", "wrong-"+string(rune('a'+i)))
			mu.Lock()
			codes[c]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if codes[http.StatusUnauthorized] != 2 || codes[http.StatusTooManyRequests] != 18 {
		t.Errorf("wrong passwords: %v, want 2 checked (401) and 18 refused unchecked (429)", codes)
	}
	for range 5 {
		if got := status(t, url, "prometheus", "s3cret"); got != http.StatusOK {
			t.Errorf("the scraper's scrape during the flood = %d, want 200", got)
		}
	}
	if got := status(t, url, "", ""); got != http.StatusUnauthorized {
		t.Errorf("no credentials = %d, want 401", got)
	}
}
