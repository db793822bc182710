package exporter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// Config is the HTTP server's configuration.
type Config struct {
	// ListenAddress is host:port, e.g. ":9471".
	ListenAddress string
	// MetricsPath is where metrics are served, e.g. "/metrics".
	MetricsPath string
}

// DefaultConfig returns the defaults of the web flags.
func DefaultConfig() Config {
	return Config{ListenAddress: ":9471", MetricsPath: "/metrics"}
}

// Validate returns one sentence naming the first bad value.
func (c Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.ListenAddress); err != nil {
		return fmt.Errorf("listen address %q is not host:port: %w", c.ListenAddress, err)
	}
	if len(c.MetricsPath) < 2 || c.MetricsPath[0] != '/' {
		return fmt.Errorf("metrics path %q must start with / and name a path", c.MetricsPath)
	}
	return nil
}

// NewHandler serves metrics from g at metricsPath, /healthz (the process is
// serving) and /readyz (ready reports true: a poll has completed).
func NewHandler(g prometheus.Gatherer, metricsPath string, ready func() bool, logger *zap.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(metricsPath, promhttp.HandlerFor(g, promhttp.HandlerOpts{
		ErrorLog:            zap.NewStdLog(logger),
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
		EnableOpenMetrics:   true,
	}))
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

// Server is the exporter's HTTP server.
type Server struct {
	srv *http.Server
	ln  net.Listener
	log *zap.Logger
}

// Listen binds the listen address, so that a taken port is a start-up error.
func Listen(cfg Config, h http.Handler, logger *zap.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", cfg.ListenAddress)
	if err != nil {
		return nil, fmt.Errorf("cannot listen on %s: %w", cfg.ListenAddress, err)
	}
	return &Server{
		srv: &http.Server{
			Handler:           h,
			ReadHeaderTimeout: 5 * time.Second,
			ReadTimeout:       10 * time.Second,
			WriteTimeout:      30 * time.Second,
			IdleTimeout:       2 * time.Minute,
			MaxHeaderBytes:    64 << 10,
			ErrorLog:          zap.NewStdLog(logger),
		},
		ln:  ln,
		log: logger,
	}, nil
}

// Addr is the bound address (useful with port 0).
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Serve serves until ctx is done, then shuts down with a fresh timeout.
func (s *Server) Serve(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(s.ln) }()
	s.log.Info("serving", zap.String("address", s.ln.Addr().String()))
	select {
	case err := <-errc:
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("http shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http server: %w", err)
	}
	return nil
}
