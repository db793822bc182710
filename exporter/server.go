package exporter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/exporter-toolkit/web"
	"go.uber.org/zap"
	"go.uber.org/zap/exp/zapslog"
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
}

// DefaultConfig returns the defaults of the web flags.
func DefaultConfig() Config {
	return Config{ListenAddress: ":9471", MetricsPath: "/metrics"}
}

// Validate returns one sentence naming the first bad value. It reads the web
// configuration file and its certificates, so that a bad one ends the agent
// at start-up rather than failing every scrape.
func (c Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.ListenAddress); err != nil {
		return fmt.Errorf("listen address %q is not host:port: %w", c.ListenAddress, err)
	}
	if len(c.MetricsPath) < 2 || c.MetricsPath[0] != '/' {
		return fmt.Errorf("metrics path %q must start with / and name a path", c.MetricsPath)
	}
	if c.HealthListenAddress != "" {
		if _, _, err := net.SplitHostPort(c.HealthListenAddress); err != nil {
			return fmt.Errorf("health listen address %q is not host:port: %w", c.HealthListenAddress, err)
		}
		if c.HealthListenAddress == c.ListenAddress {
			return fmt.Errorf("health listen address %q is the listen address; leave it empty to serve health there", c.HealthListenAddress)
		}
	}
	if err := web.Validate(c.ConfigFile); err != nil {
		return fmt.Errorf("web config file %q: %w", c.ConfigFile, err)
	}
	return nil
}

// scrapeTimeout bounds a scrape: after it the scraper gets a 503.
const scrapeTimeout = 10 * time.Second

// NewHandler serves metrics from g at metricsPath, /healthz (the process is
// serving) and /readyz (ready reports true: a poll has completed). Metrics
// are gzipped at BestSpeed when the scraper accepts gzip (see withGzip). A
// *Registry's text and OpenMetrics scrapes are written by the fast path (see
// Registry). In OpenMetrics a counter foo_total beside a family foo is
// served as unknown (see openMetricsFamilies).
func NewHandler(g prometheus.Gatherer, metricsPath string, ready func() bool, logger *zap.Logger) http.Handler {
	mux := http.NewServeMux()
	opts := promhttp.HandlerOpts{
		ErrorLog:            zap.NewStdLog(logger),
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
		EnableOpenMetrics:   true,
		// withGzip compresses, at a cheaper level than promhttp's.
		DisableCompression: true,
	}
	// promhttp's answers (a *Registry's text and OpenMetrics written by the
	// fast path), each family named once in OpenMetrics (openmetrics.go).
	metrics := newTextHandler(g, opts)
	// The timeout is promhttp's Timeout (same handler, same message), set
	// here so that it is outside the compression: http.TimeoutHandler
	// buffers the whole body, which costs about as much again as gzip at
	// BestSpeed for 266 KB of text, and little for the 15 KB it compresses
	// to.
	mux.Handle(metricsPath, http.TimeoutHandler(withGzip(metrics), scrapeTimeout,
		fmt.Sprintf("Exceeded configured timeout of %v.\n", scrapeTimeout)))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !ready() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("waiting for the first poll\n"))
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<html><head><title>gpuxray</title></head><body><h1>gpuxray</h1><p><a href="%s">Metrics</a> · <a href="/healthz">Health</a> · <a href="/readyz">Readiness</a></p></body></html>`, metricsPath)
	})
	return mux
}

// withPprof adds net/http/pprof's handlers in front of h; not
// /debug/pprof/cmdline: no command line leaves the process.
func withPprof(h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.Handle("/", h)
	return mux
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
}

// newHTTPServer sets the timeouts and header limit every listener keeps,
// whatever the web configuration.
func newHTTPServer(h http.Handler, logger *zap.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
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
	s := &Server{cfg: cfg, ln: ln, log: logger}
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
	go func() {
		// exporter-toolkit applies the web configuration: TLS, basic auth,
		// headers; with no file it serves plain HTTP.
		errc <- web.Serve(s.ln, s.srv, &web.FlagConfig{
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
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var errs []error
	for _, srv := range []*http.Server{s.srv, s.health} {
		if srv == nil {
			continue
		}
		if err := srv.Shutdown(shutdownCtx); err != nil {
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
