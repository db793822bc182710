//go:build e2e

package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// testCA makes a CA and a server certificate for 127.0.0.1, writes the
// server's certificate and key under dir, and returns a pool trusting the CA.
func testCA(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey, srvKey := newKey(), newKey()
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gpuxray test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	srv := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "gpuxray"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srv, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	for f, block := range map[string]*pem.Block{certFile: {Type: "CERTIFICATE", Bytes: srvDER}, keyFile: {Type: "EC PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(f, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	pool = x509.NewCertPool()
	pool.AddCert(caCert)
	return certFile, keyFile, pool
}

// TestWebConfig: the demo agent with a web configuration (TLS and basic
// auth, the exporter-toolkit file every Prometheus exporter reads) asks for
// credentials, serves metrics with them, refuses plain HTTP, and keeps its
// probes reachable on the plain health port.
func TestWebConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile, pool := testCA(t, dir)
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	webConfig := filepath.Join(dir, "web.yml")
	if err := os.WriteFile(webConfig, []byte("tls_server_config:\n  cert_file: "+certFile+"\n  key_file: "+keyFile+
		"\nbasic_auth_users:\n  prometheus: "+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr, healthAddr := freeAddr(t), freeAddr(t)
	p := start(t, binary, "agent", "--simulate", "--log.format=json",
		"--web.listen-address="+addr, "--web.health-listen-address="+healthAddr, "--web.config.file="+webConfig)
	waitFor(t, "http://"+healthAddr+"/readyz", 30*time.Second)

	// The client trusts only the test CA: the agent serves the configured certificate.
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	get := func(c *http.Client, url, user, pass string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	plain := &http.Client{Timeout: 5 * time.Second}
	tests := []struct {
		what           string
		c              *http.Client
		url, user, pwd string
		code           int
		contains       string
	}{
		{"no credentials", client, "https://" + addr + "/metrics", "", "", 401, "Unauthorized"},
		{"a wrong password", client, "https://" + addr + "/metrics", "prometheus", "guess", 401, "Unauthorized"},
		{"an unknown user", client, "https://" + addr + "/metrics", "admin", "s3cret", 401, "Unauthorized"},
		{"the credentials", client, "https://" + addr + "/metrics", "prometheus", "s3cret", 200, "gpuxray_build_info{"},
		{"plain HTTP to the TLS port", plain, "http://" + addr + "/metrics", "prometheus", "s3cret", 400, "HTTP request to an HTTPS server"},
		{"pprof is off by default", client, "https://" + addr + "/debug/pprof/", "prometheus", "s3cret", 404, ""},
		{"liveness on the health port", plain, "http://" + healthAddr + "/healthz", "", "", 200, "ok"},
		{"readiness on the health port", plain, "http://" + healthAddr + "/readyz", "", "", 200, "ok"},
		{"no metrics on the health port", plain, "http://" + healthAddr + "/metrics", "", "", 404, ""},
	}
	for _, tc := range tests {
		t.Run(tc.what, func(t *testing.T) {
			code, body := get(tc.c, tc.url, tc.user, tc.pwd)
			if code != tc.code || !strings.Contains(body, tc.contains) {
				t.Errorf("%s: GET %s = %d %.80q, want %d containing %q", tc.what, tc.url, code, body, tc.code, tc.contains)
			}
			if tc.code != 200 && strings.Contains(body, "gpuxray_") {
				t.Errorf("%s: GET %s leaked metrics", tc.what, tc.url)
			}
		})
	}
	// A client that does not trust the CA is refused at the handshake.
	untrusting := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: x509.NewCertPool()}}}
	if _, err := untrusting.Get("https://" + addr + "/metrics"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a client without the CA: %v, want a certificate error", err)
	}
	if code := p.stop(t); code != 0 {
		t.Errorf("agent exited %d after SIGTERM, want 0", code)
	}
}

// TestWebConfigInvalid: a web configuration that cannot be used ends the
// agent at start-up with exit code 2 and one sentence naming the file.
func TestWebConfigInvalid(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "web.yml")
	if err := os.WriteFile(bad, []byte("tls_server_config:\n  cert_file: "+dir+"/missing.crt\n  key_file: "+dir+"/missing.key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "agent", "--simulate", "--web.listen-address="+freeAddr(t), "--web.config.file="+bad)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), bad) || strings.Count(strings.TrimSpace(string(out)), "\n") != 0 {
		t.Errorf("agent with %s: %v, output %q; want exit 2 and one line naming the file", bad, err, out)
	}
}
