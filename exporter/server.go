package exporter

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"html"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/exporter-toolkit/web"
	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"
	"go.yaml.in/yaml/v2" // exporter-toolkit's own: the image links no other
	"golang.org/x/time/rate"
)

// Config is the HTTP server's configuration.
type Config struct {
	// ListenAddress is host:port, e.g. ":9471".
	ListenAddress string
	// MetricsPath is where metrics are served, e.g. "/metrics".
	MetricsPath string
	// ConfigFile is an exporter-toolkit web configuration file (TLS, basic
	// auth, response headers), the same file every Prometheus exporter reads
	// with --web.config.file. Empty serves plain HTTP. It is read again on
	// each connection and request, so renewed certificates need no restart.
	ConfigFile string
	// HealthListenAddress, when set, is a second listener serving /healthz
	// and /readyz and nothing else, in plain HTTP without authentication:
	// kubelet probes cannot send basic-auth credentials.
	HealthListenAddress string
	// EnablePprof serves net/http/pprof under /debug/pprof/ on the main
	// listener, behind its TLS and authentication.
	EnablePprof bool
	// MaxRequests is how many scrapes are rendered at once (see
	// NewHandler); 0 is no limit.
	MaxRequests int
}

// DefaultConfig returns the defaults of the web flags.
func DefaultConfig() Config {
	return Config{ListenAddress: ":9471", MetricsPath: "/metrics", MaxRequests: DefaultMaxRequests}
}

// Validate returns one sentence naming the first bad value. It reads the web
// configuration file and its certificates, so that a bad one ends the agent
// at start-up rather than failing every scrape.
func (c Config) Validate() error {
	if err := validAddress("listen address", c.ListenAddress); err != nil {
		return err
	}
	if err := validMetricsPath(c.MetricsPath); err != nil {
		return err
	}
	if c.MaxRequests < 0 {
		return fmt.Errorf("max requests %d must not be negative (0 is no limit)", c.MaxRequests)
	}
	if c.HealthListenAddress != "" {
		if err := validAddress("health listen address", c.HealthListenAddress); err != nil {
			return err
		}
		if c.HealthListenAddress == c.ListenAddress {
			return fmt.Errorf("health listen address %q is the listen address; leave it empty to serve health there", c.HealthListenAddress)
		}
	}
	if c.ConfigFile != "" {
		if err := checkWebConfigFiles(c.ConfigFile); err != nil {
			return err
		}
	}
	if err := web.Validate(c.ConfigFile); err != nil {
		// A YAML decoder lists its problems one a line.
		return fmt.Errorf("web config file %q: %s", c.ConfigFile, strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), ":\n", ";")), " "))
	}
	return nil
}

// validAddress checks that addr is host:port with a port Listen can bind:
// a number from 0 to 65535, or a service name.
func validAddress(what, addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s %q is not host:port: %w", what, addr, err)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("%s %q: port %q is not a number from 0 to 65535 or a service name", what, addr, port)
	}
	return nil
}

// MaxWebConfigBytes bounds the web configuration file and each file it
// names (certificates, key, client CAs).
const MaxWebConfigBytes = 4 << 20

// checkWebConfigFiles checks that the web configuration file, and each
// certificate, key and CA file it names, is a regular file of at most
// MaxWebConfigBytes, without opening them: exporter-toolkit reads them
// again at each connection and request, and a FIFO would block that read
// (at start-up, with SIGTERM ignored) and /dev/zero never end it.
func checkWebConfigFiles(path string) error {
	if err := checkRegular("web config file", path); err != nil {
		return err
	}
	data, err := os.ReadFile(path) // regular and bounded: checked above
	if err != nil {
		return fmt.Errorf("web config file %q: %w", path, err)
	}
	var wc struct {
		TLS struct {
			Cert     string `yaml:"cert_file"`
			Key      string `yaml:"key_file"`
			ClientCA string `yaml:"client_ca_file"`
		} `yaml:"tls_server_config"`
	}
	if err := yaml.Unmarshal(data, &wc); err != nil {
		return nil // web.Validate says what is wrong, in its words
	}
	dir := filepath.Dir(path)
	for _, f := range []string{wc.TLS.Cert, wc.TLS.Key, wc.TLS.ClientCA} {
		if f == "" {
			continue
		}
		if !filepath.IsAbs(f) {
			f = filepath.Join(dir, f)
		}
		if err := checkRegular(fmt.Sprintf("web config file %q: the file", path), f); err != nil {
			return err
		}
	}
	return nil
}

func checkRegular(what, path string) error {
	st, err := os.Stat(path)
	switch {
	case err != nil:
		return fmt.Errorf("%s %q cannot be read: %w", what, path, err)
	case !st.Mode().IsRegular():
		return fmt.Errorf("%s %q is not a regular file: it is read again at each connection, which a pipe or a device cannot serve", what, path)
	case st.Size() > MaxWebConfigBytes:
		return fmt.Errorf("%s %q is larger than %d MiB", what, path, MaxWebConfigBytes>>20)
	}
	return nil
}

// validMetricsPath checks that p is a literal path that http.ServeMux
// registers as itself (no {wildcard}, no method or host before it, nothing
// it would clean or redirect), and that no other route of the server
// answers it: ServeMux panics on a malformed pattern or a duplicate.
func validMetricsPath(p string) error {
	if len(p) < 2 || p[0] != '/' {
		return fmt.Errorf("metrics path %q must start with / and name a path", p)
	}
	for _, r := range p {
		if !pathRune(r) {
			return fmt.Errorf("metrics path %q: %q is not allowed; give a literal path of letters, digits and -._~!$&'()*+,;=:@/", p, r)
		}
	}
	if path.Clean(p) != p {
		return fmt.Errorf("metrics path %q is not a clean path (no //, /./, /../ or trailing /)", p)
	}
	for _, own := range []string{"/healthz", "/readyz"} {
		if p == own {
			return fmt.Errorf("metrics path %q is the server's own %s", p, own)
		}
	}
	if p == "/debug/pprof" || strings.HasPrefix(p, "/debug/pprof/") {
		return fmt.Errorf("metrics path %q is the server's own /debug/pprof/ (--web.enable-pprof)", p)
	}
	return nil
}

// pathRune reports whether r may appear in a metrics path: RFC 3986's
// unreserved characters, sub-delimiters, ':', '@' and '/'. Left out are
// what ServeMux reads as pattern syntax ({ }), a space (it separates a
// method), '%' (escapes are matched decoded), '?' and '#', and anything
// outside ASCII.
func pathRune(r rune) bool {
	switch {
	case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9':
		return true
	}
	return strings.ContainsRune("-._~!$&'()*+,;=:@/", r)
}

// scrapeTimeout bounds a scrape: after it the scraper gets a 503.
const scrapeTimeout = 10 * time.Second

// DefaultMaxRequests is the default in-flight limit of scrapes, as
// node_exporter's --web.max-requests.
//
// The limit bounds the memory of scrapes rendered at once (a buffer and a
// gzip writer each). It was 4, with a 503 for the rest at once: six clients
// polling /metrics without pause took the slots so often that a
// once-a-second scraper failed 40% of its scrapes, twelve 60%. A
// sequential client holds at most one slot, so forty slots leave room for
// Prometheus beside dozens of such clients, and a scrape that still finds
// none waits for one in line (see limitInFlight) rather than failing. No
// slot is reserved for authenticated scrapers: with basic auth configured,
// exporter-toolkit answers unauthenticated requests with 401 before they
// reach the limit.
const DefaultMaxRequests = 40

// maxQueueWait is the longest a scrape waits for a slot; see queueWait.
const maxQueueWait = scrapeTimeout / 2

// limitInFlight lets max requests into h at once. One that finds every
// slot taken waits for one, first come first served (blocked channel
// senders are woken in order), for queueWait, then gets a 503: an instant
// 503 let clients that retry at once crowd out a scraper that asks once a
// second, and the wait slows such clients down instead. Waiting costs no
// more than the connection already does: nothing is rendered for it.
func limitInFlight(h http.Handler, max int) http.Handler {
	if max <= 0 {
		return h
	}
	slots := make(chan struct{}, max)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case slots <- struct{}{}:
		default:
			t := time.NewTimer(queueWait(r))
			defer t.Stop()
			select {
			case slots <- struct{}{}:
			case <-t.C:
				http.Error(w, fmt.Sprintf("Limit of concurrent requests reached (%d), try again later.", max), http.StatusServiceUnavailable)
				return
			case <-r.Context().Done():
				return // the client left
			}
		}
		defer func() { <-slots }()
		h.ServeHTTP(w, r)
	})
}

// queueWait is how long r waits for a slot: half the scrape timeout its
// scraper announces in X-Prometheus-Scrape-Timeout-Seconds, leaving it the
// other half to be rendered, and at most maxQueueWait (the header's 10 s
// default halved, and what a request without it waits).
func queueWait(r *http.Request) time.Duration {
	v := r.Header.Get("X-Prometheus-Scrape-Timeout-Seconds")
	s, err := strconv.ParseFloat(v, 64)
	if v == "" || err != nil || !(s > 0) || s/2 >= maxQueueWait.Seconds() {
		return maxQueueWait
	}
	return time.Duration(s / 2 * float64(time.Second))
}

// onlyGetHead answers 405 to any method but GET and HEAD: the endpoints
// change nothing, and a 200 to PUT or DELETE says they did.
func onlyGetHead(h http.HandlerFunc) http.HandlerFunc {
	return onlyMethods(h, http.MethodGet, http.MethodHead)
}

// onlyMethods answers 405, with Allow, to any method not in methods.
func onlyMethods(h http.HandlerFunc, methods ...string) http.HandlerFunc {
	allow := strings.Join(methods, ", ")
	return func(w http.ResponseWriter, r *http.Request) {
		if !slices.Contains(methods, r.Method) {
			w.Header().Set("Allow", allow)
			http.Error(w, fmt.Sprintf("Method %s is not allowed; use %s.", r.Method, strings.Join(methods, " or ")), http.StatusMethodNotAllowed)
			return
		}
		h(w, r)
	}
}

// NewHandler serves metrics from g at metricsPath, /healthz (the process is
// serving) and /readyz (ready reports true: a poll has completed). Metrics
// are promhttp.HandlerFor's, OpenMetrics and gzip included, each family
// named once in OpenMetrics (see metricsHandler). maxRequests scrapes are
// rendered at once (0 is no limit); one beyond them waits in line for half
// its scrape timeout, then gets a 503.
func NewHandler(g prometheus.Gatherer, metricsPath string, ready func() bool, logger *zap.Logger, maxRequests int) http.Handler {
	mux := http.NewServeMux()
	metrics := metricsHandler(g, promhttp.HandlerOpts{
		ErrorLog:          zap.NewStdLog(logger),
		ErrorHandling:     promhttp.ContinueOnError,
		EnableOpenMetrics: true,
		Timeout:           scrapeTimeout,
	})
	// The wait for a slot is outside the timeout, which bounds rendering.
	mux.HandleFunc(metricsPath, onlyGetHead(limitInFlight(metrics, maxRequests).ServeHTTP))
	mux.HandleFunc("/healthz", onlyGetHead(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	}))
	mux.HandleFunc("/readyz", onlyGetHead(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !ready() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("waiting for the first poll\n"))
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		onlyGetHead(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprintf(w, `<html><head><title>gpuxray</title></head><body><h1>gpuxray</h1><p><a href="%s">Metrics</a> · <a href="/healthz">Health</a> · <a href="/readyz">Readiness</a></p></body></html>`, html.EscapeString(metricsPath))
		})(w, r)
	})
	return mux
}

// withPprof adds net/http/pprof's handlers in front of h; not
// /debug/pprof/cmdline: no command line leaves the process. Profiles that
// run for ?seconds= are bounded by boundSeconds. They answer GET and HEAD
// only (405 otherwise, as the other endpoints), but for the symbol
// endpoint's POST, by which pprof's protocol sends addresses to look up.
func withPprof(h http.Handler) http.Handler {
	mux := http.NewServeMux()
	// The named profiles (heap, allocs, block, mutex, goroutine, ...)
	// take ?seconds= for a delta profile.
	mux.HandleFunc("/debug/pprof/", onlyGetHead(boundSeconds(pprof.Index, false, false)))
	mux.HandleFunc("/debug/pprof/profile", onlyGetHead(boundSeconds(pprof.Profile, false, true)))
	mux.HandleFunc("/debug/pprof/symbol", onlyMethods(pprof.Symbol, http.MethodGet, http.MethodHead, http.MethodPost))
	mux.HandleFunc("/debug/pprof/trace", onlyGetHead(boundSeconds(pprof.Trace, true, false)))
	mux.Handle("/", h)
	return mux
}

// writeTimeout bounds writing a response (http.Server.WriteTimeout).
const writeTimeout = 30 * time.Second

// pprofMaxSeconds is the longest profile served: one that ends within the
// write timeout, with 5 s to send it. net/http/pprof extends the write
// deadline by the seconds asked, so without this bound trace?seconds=1000
// streamed for 17 minutes and profile?seconds=60 was served.
const pprofMaxSeconds = int((writeTimeout - 5*time.Second) / time.Second)

// boundSeconds refuses, with 400 and one sentence, a ?seconds= (in the
// query or a POSTed form, as pprof reads it) beyond pprofMaxSeconds, or
// one pprof would not read as asked: the CPU profile and the delta
// profiles take whole seconds, and the CPU profile falls back to 30 s on
// anything else. fractional allows parts of a second (the trace);
// defaultBound gives the CPU profile, whose own default is 30 s, the bound
// when no seconds are asked.
func boundSeconds(h http.HandlerFunc, fractional, defaultBound bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v := r.FormValue("seconds") // parses r.Form, which pprof reads
		if v == "" {
			if defaultBound {
				r.Form.Set("seconds", strconv.Itoa(pprofMaxSeconds))
			}
			h(w, r)
			return
		}
		var ok bool
		if fractional {
			s, err := strconv.ParseFloat(v, 64)
			ok = err == nil && s > 0 && s <= float64(pprofMaxSeconds)
		} else {
			s, err := strconv.Atoi(v)
			ok = err == nil && s >= 1 && s <= pprofMaxSeconds
		}
		if !ok {
			want := fmt.Sprintf("a whole number of seconds from 1 to %d", pprofMaxSeconds)
			if fractional {
				want = fmt.Sprintf("a number of seconds up to %d", pprofMaxSeconds)
			}
			quoted := v
			if _, err := strconv.ParseFloat(v, 64); err != nil {
				quoted = strconv.Quote(v)
			}
			http.Error(w, fmt.Sprintf("seconds=%s: give %s, so that the profile ends within the server's %s write timeout.", quoted, want, writeTimeout),
				http.StatusBadRequest)
			return
		}
		h(w, r)
	}
}

// healthOnly passes /healthz and /readyz to h and answers 404 to the rest,
// so that the unauthenticated health listener exposes no metric.
func healthOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" && r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Server is the exporter's HTTP server: the main listener (metrics, behind
// the web configuration) and the optional plain health listener.
type Server struct {
	cfg      Config
	srv      *http.Server
	ln       net.Listener
	health   *http.Server
	healthLn net.Listener
	log      *zap.Logger
	// grace is how long shutdown waits for requests in flight.
	grace time.Duration
	// credRate and credBurst bound the checks of credentials not seen to
	// pass before (credentialGate).
	credRate  rate.Limit
	credBurst int
}

// shutdownGrace is how long a stopping server lets requests in flight end.
const shutdownGrace = 5 * time.Second

// newHTTPServer sets the timeouts and header limit every listener keeps,
// whatever the web configuration.
func newHTTPServer(h http.Handler, logger *zap.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          zap.NewStdLog(logger),
	}
}

// Listen binds the listen addresses, so that a taken port is a start-up error.
func Listen(cfg Config, h http.Handler, logger *zap.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", cfg.ListenAddress)
	if err != nil {
		return nil, fmt.Errorf("cannot listen on %s: %w", cfg.ListenAddress, err)
	}
	s := &Server{cfg: cfg, ln: ln, log: logger, credRate: credentialRate, credBurst: credentialBurst}
	root := h
	if cfg.EnablePprof {
		root = withPprof(h)
	}
	s.srv = newHTTPServer(root, logger)
	if cfg.HealthListenAddress != "" {
		s.healthLn, err = net.Listen("tcp", cfg.HealthListenAddress)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("cannot listen on %s: %w", cfg.HealthListenAddress, err)
		}
		s.health = newHTTPServer(healthOnly(h), logger)
	}
	return s, nil
}

// Addr is the bound address (useful with port 0).
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// HealthAddr is the health listener's bound address, nil without one.
func (s *Server) HealthAddr() net.Addr {
	if s.healthLn == nil {
		return nil
	}
	return s.healthLn.Addr()
}

// Serve serves until ctx is done, then shuts down with a fresh timeout.
func (s *Server) Serve(ctx context.Context) error {
	errc := make(chan error, 2)
	n := 1
	ln := s.ln
	if s.cfg.ConfigFile != "" {
		// The toolkit authenticates before our handlers: the gate goes in
		// front of it once it has wrapped ours, and learns from ours which
		// credentials passed.
		gate := newCredentialGate(nil, s.credRate, s.credBurst)
		s.srv.Handler = gate.behind(s.srv.Handler)
		ln = &gateOnAccept{Listener: s.ln, install: func() {
			gate.next = s.srv.Handler
			s.srv.Handler = gate
		}}
	}
	go func() {
		// exporter-toolkit applies the web configuration: TLS, basic auth,
		// headers; with no file it serves plain HTTP.
		errc <- web.Serve(ln, s.srv, &web.FlagConfig{
			WebListenAddresses: &[]string{s.cfg.ListenAddress},
			WebSystemdSocket:   new(bool),
			WebConfigFile:      &s.cfg.ConfigFile,
		}, slog.New(zapslog.NewHandler(s.log.Core())))
	}()
	if s.health != nil {
		n++
		go func() { errc <- s.health.Serve(s.healthLn) }()
		s.log.Info("serving health", zap.String("address", s.healthLn.Addr().String()))
	}
	select {
	case err := <-errc:
		s.close()
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	grace := cmp.Or(s.grace, shutdownGrace)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	var errs []error
	for _, srv := range []*http.Server{s.srv, s.health} {
		if srv == nil {
			continue
		}
		err := srv.Shutdown(shutdownCtx)
		if errors.Is(err, context.DeadlineExceeded) {
			// A client that opened a connection and sent nothing, or a
			// request that outlasts the grace, must not turn a clean stop
			// into a failure: close what is left.
			s.log.Warn("connections still open at shutdown; closing them", zap.Duration("grace", grace))
			err = srv.Close()
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("http shutdown: %w", err))
		}
	}
	for range n {
		if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, fmt.Errorf("http server: %w", err))
		}
	}
	return errors.Join(errs...)
}

// close ends both listeners after one of them failed.
func (s *Server) close() {
	s.srv.Close()
	if s.health != nil {
		s.health.Close()
	}
}
