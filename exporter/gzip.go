package exporter

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/klauspost/compress/gzip"
)

// gzipWriters holds gzip writers at BestSpeed. promhttp compresses at the
// default level, which took about half the CPU of a scrape of a 110-pod node
// (266 KB of text); BestSpeed costs a third as much for a body a little
// larger. The writers are klauspost/compress's, whose BestSpeed takes about
// half the time of compress/gzip's for a body a little smaller (see
// BenchmarkGzipBestSpeed), now that compression is a good part of what the
// text fast path leaves of a scrape.
var gzipWriters = sync.Pool{New: func() any {
	w, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed)
	return w
}}

// withGzip compresses h's responses with gzip when the request accepts it
// (see acceptsGzip), except for HEAD and empty responses; h must not
// compress them itself. Every response says it varies with Accept-Encoding.
//
// It is the exporter's one gzip path (promhttp's own is off), and ours
// rather than klauspost's gzhttp wrapper, tried in its place: gzhttp
// compresses for a scraper that prefers identity ("gzip;q=0.5, identity")
// and gives an empty response a gzip body and a Content-Encoding
// (TestHandlerGzip and TestGzipNoBody fail with it).
func withGzip(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gw := &gzipResponseWriter{ResponseWriter: w, accept: r.Method != http.MethodHead && acceptsGzip(r.Header)}
		defer gw.close()
		h.ServeHTTP(gw, r)
	})
}

// gzipResponseWriter holds the status until the first byte of the body, so
// that it sets Content-Encoding only on a response that has one: headers are
// passed on then (or when the handler returns), with Vary added.
type gzipResponseWriter struct {
	http.ResponseWriter
	accept bool         // the request accepts gzip
	code   int          // the status the handler wrote, 0 before
	sent   bool         // the headers are passed on
	gz     *gzip.Writer // the body's compressor, nil for identity
}

func (g *gzipResponseWriter) WriteHeader(code int) {
	if g.sent || g.code != 0 {
		return
	}
	if code < 200 { // informational: passed on, the final status follows
		g.ResponseWriter.WriteHeader(code)
		return
	}
	g.code = code
}

func (g *gzipResponseWriter) Write(p []byte) (int, error) {
	if !g.sent {
		if len(p) == 0 {
			return 0, nil
		}
		g.send(p)
	}
	if g.gz != nil {
		return g.gz.Write(p)
	}
	return g.ResponseWriter.Write(p)
}

// send passes the headers on, compressing the body that starts with p when
// the request accepts gzip and the status may have a body.
func (g *gzipResponseWriter) send(p []byte) {
	g.sent = true
	if g.code == 0 {
		g.code = http.StatusOK
	}
	h := g.Header()
	h.Add("Vary", "Accept-Encoding")
	if g.accept && len(p) > 0 && g.code != http.StatusNoContent && g.code != http.StatusNotModified && h.Get("Content-Encoding") == "" {
		if h.Get("Content-Type") == "" {
			h.Set("Content-Type", http.DetectContentType(p))
		}
		h.Set("Content-Encoding", "gzip")
		h.Del("Content-Length")
		g.gz = gzipWriters.Get().(*gzip.Writer)
		g.gz.Reset(g.ResponseWriter)
	}
	g.ResponseWriter.WriteHeader(g.code)
}

// close ends the body, or passes the headers on if there was none.
func (g *gzipResponseWriter) close() {
	if !g.sent {
		if g.code == 0 {
			// The handler wrote nothing: net/http answers 200 with an
			// empty body, with the Vary that says the answer could differ.
			g.Header().Add("Vary", "Accept-Encoding")
			return
		}
		g.send(nil)
		return
	}
	if g.gz != nil {
		_ = g.gz.Close()
		g.gz.Reset(io.Discard)
		gzipWriters.Put(g.gz)
		g.gz = nil
	}
}

// acceptsGzip reports whether the request's Accept-Encoding takes gzip (or
// x-gzip, or *) with a q-value above 0 and no lower than identity's, where
// identity is named, or *'s. Prometheus sends "gzip"; no header, or one
// naming other codings only, is identity.
func acceptsGzip(h http.Header) bool {
	gzipQ, identityQ, anyQ := -1.0, -1.0, -1.0
	for _, v := range h.Values("Accept-Encoding") {
		for part := range strings.SplitSeq(v, ",") {
			coding, params, _ := strings.Cut(part, ";")
			q := 1.0
			for param := range strings.SplitSeq(params, ";") {
				name, value, _ := strings.Cut(param, "=")
				if strings.EqualFold(strings.TrimSpace(name), "q") {
					f, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
					if err != nil || f < 0 || f > 1 {
						f = 0 // a bad q-value: the coding is not taken
					}
					q = f
				}
			}
			switch strings.ToLower(strings.TrimSpace(coding)) {
			case "gzip", "x-gzip":
				gzipQ = max(gzipQ, q)
			case "identity":
				identityQ = q
			case "*":
				anyQ = q
			}
		}
	}
	if gzipQ < 0 {
		gzipQ = anyQ
	}
	if identityQ < 0 {
		identityQ = max(anyQ, 0)
	}
	return gzipQ > 0 && gzipQ >= identityQ
}
