package exporter

import (
	"context"
	"crypto/sha256"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Credentials not yet seen to pass are checked at most credentialRate a
// second (credentialBurst at once). exporter-toolkit checks basic auth with
// bcrypt before any handler of ours, tens of milliseconds of CPU a check
// (serialised: one core at most), and caches only the passwords it has
// seen: twelve clients sending new wrong passwords kept 0.9 of a core busy.
// A scraper whose credentials passed once is never held back.
const (
	credentialRate  = 2
	credentialBurst = 4
	// maxVerified bounds the credentials remembered as good.
	maxVerified = 64
)

// credentialGate sits in front of exporter-toolkit's authentication. A
// request without credentials, or with credentials that passed it before,
// goes on at once; any other waits in line for a check (as limitInFlight's
// wait: queueWait), or gets 429. Authentication itself stays the
// toolkit's: the gate only decides when a check may run.
type credentialGate struct {
	next    http.Handler
	limiter *rate.Limiter

	mu       sync.Mutex
	verified map[[32]byte]bool
}

func newCredentialGate(next http.Handler, r rate.Limit, burst int) *credentialGate {
	return &credentialGate{next: next, limiter: rate.NewLimiter(r, burst), verified: map[[32]byte]bool{}}
}

type credentialKey struct{}

func (g *credentialGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	auth := r.Header.Get("Authorization")
	if auth == "" {
		g.next.ServeHTTP(w, r) // refused without a check
		return
	}
	key := sha256.Sum256([]byte(auth))
	g.mu.Lock()
	known := g.verified[key]
	g.mu.Unlock()
	if !known {
		res := g.limiter.Reserve()
		wait := res.Delay()
		if !res.OK() || wait > queueWait(r) {
			res.Cancel()
			w.Header().Set("Retry-After", strconv.Itoa(1+int(wait.Seconds())))
			http.Error(w, "Too many credentials to check; try again later.", http.StatusTooManyRequests)
			return
		}
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				res.Cancel()
				return // the client left
			}
		}
	}
	rec := &statusRecorder{ResponseWriter: w}
	g.next.ServeHTTP(rec, r.WithContext(contextWithKey(r, key)))
	if known && rec.status == http.StatusUnauthorized {
		// The password changed in the web configuration.
		g.mu.Lock()
		delete(g.verified, key)
		g.mu.Unlock()
	}
}

// passed records that the credentials of r passed authentication: the
// request reached the handler behind it.
func (g *credentialGate) passed(r *http.Request) {
	key, ok := r.Context().Value(credentialKey{}).([32]byte)
	if !ok {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.verified[key] && len(g.verified) >= maxVerified {
		clear(g.verified)
	}
	g.verified[key] = true
}

// behind wraps the handler the toolkit calls once a request is
// authenticated.
func (g *credentialGate) behind(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.passed(r)
		h.ServeHTTP(w, r)
	})
}

// statusRecorder notes the status a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(p []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(p)
}

func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection (pprof's
// write deadlines).
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// gateOnAccept is the main listener, which puts the gate in front of the
// handler web.Serve installed (its authentication) when the server first
// accepts a connection: web.Serve wraps the server's handler itself, so
// nothing can be put in front of it before. Accept runs on the goroutine
// that called web.Serve, after it set the handler and before any request
// is served, so the swap races with nothing.
type gateOnAccept struct {
	net.Listener
	once    sync.Once
	install func()
}

func (l *gateOnAccept) Accept() (net.Conn, error) {
	l.once.Do(l.install)
	return l.Listener.Accept()
}

func contextWithKey(r *http.Request, key [32]byte) context.Context {
	return context.WithValue(r.Context(), credentialKey{}, key)
}
