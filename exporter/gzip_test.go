package exporter

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

func gunzip(t *testing.T, b []byte) []byte {
	t.Helper()
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("not gzip: %v", err)
	}
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("bad gzip: %v", err)
	}
	return out
}

// varies reports whether h's Vary lines name every one of names.
func varies(h http.Header, names ...string) bool {
	var have []string
	for _, v := range h.Values("Vary") {
		for s := range strings.SplitSeq(v, ",") {
			have = append(have, http.CanonicalHeaderKey(strings.TrimSpace(s)))
		}
	}
	for _, n := range names {
		if !slices.Contains(have, n) {
			return false
		}
	}
	return true
}

// TestHandlerGzip: a scraper that accepts gzip gets a gzip body that decodes
// to the exposition an identity request gets, in either format; one that
// does not, or a HEAD request, gets it plain. Both through a recorder and
// through a real server.
func TestHandlerGzip(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(fixed{testSnapshot()}, nil))
	h := NewHandler(reg, "/metrics", func() bool { return true }, zap.NewNop(), DefaultMaxRequests)
	srv := httptest.NewServer(h)
	defer srv.Close()
	// A client that does not decode gzip itself, so the test sees the wire.
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	defer client.CloseIdleConnections()

	type answer struct {
		header http.Header
		body   []byte
	}
	get := func(method, accept, encoding string) (rec, wire answer) {
		t.Helper()
		req := httptest.NewRequest(method, "/metrics", nil)
		req.Header.Set("Accept", accept)
		if encoding != "" {
			req.Header.Set("Accept-Encoding", encoding)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			t.Fatalf("%s %q %q: %d", method, accept, encoding, w.Code)
		}
		rec = answer{w.Result().Header, w.Body.Bytes()}

		req, err := http.NewRequest(method, srv.URL+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", accept)
		if encoding != "" {
			req.Header.Set("Accept-Encoding", encoding)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %q %q on the wire: %s, %v", method, accept, encoding, resp.Status, err)
		}
		return rec, answer{resp.Header, body}
	}
	const prometheusAccept = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
	for _, accept := range []string{"", prometheusAccept} {
		plainRec, plainWire := get(http.MethodGet, accept, "")
		if !bytes.Contains(plainRec.body, []byte("gpuxray_device_power_watts")) {
			t.Fatalf("Accept %q: the identity exposition has no device series:\n%s", accept, plainRec.body)
		}
		for _, plain := range []answer{plainRec, plainWire} {
			if ce := plain.header.Get("Content-Encoding"); ce != "" {
				t.Errorf("Accept %q, no Accept-Encoding: Content-Encoding %q, want none", accept, ce)
			}
			if !varies(plain.header, "Accept", "Accept-Encoding") {
				t.Errorf("Accept %q, no Accept-Encoding: Vary %q, want Accept and Accept-Encoding", accept, plain.header.Values("Vary"))
			}
			if !bytes.Equal(plain.body, plainRec.body) {
				t.Errorf("Accept %q: the wire's identity body differs from the recorder's", accept)
			}
		}
		for _, encoding := range []string{"gzip", "gzip, deflate, br", "br;q=1.0, gzip;q=0.8, *;q=0.1"} {
			rec, wire := get(http.MethodGet, accept, encoding)
			for _, a := range []answer{rec, wire} {
				if ce := a.header.Get("Content-Encoding"); ce != "gzip" {
					t.Errorf("Accept %q, Accept-Encoding %q: Content-Encoding %q, want gzip", accept, encoding, ce)
					continue
				}
				if !varies(a.header, "Accept", "Accept-Encoding") {
					t.Errorf("Accept %q, Accept-Encoding %q: Vary %q, want Accept and Accept-Encoding", accept, encoding, a.header.Values("Vary"))
				}
				if ct, want := a.header.Get("Content-Type"), plainRec.header.Get("Content-Type"); ct != want {
					t.Errorf("Accept %q, Accept-Encoding %q: Content-Type %q, want %q", accept, encoding, ct, want)
				}
				if got := gunzip(t, a.body); !bytes.Equal(got, plainRec.body) {
					t.Errorf("Accept %q, Accept-Encoding %q: the gzip body decodes to\n%s\nwant\n%s", accept, encoding, got, plainRec.body)
				}
			}
		}
		for _, encoding := range []string{"identity", "gzip;q=0", "br", "*;q=0, identity", "gzip;q=0.5, identity"} {
			rec, wire := get(http.MethodGet, accept, encoding)
			for _, a := range []answer{rec, wire} {
				if ce := a.header.Get("Content-Encoding"); ce != "" || !bytes.Equal(a.body, plainRec.body) {
					t.Errorf("Accept %q, Accept-Encoding %q: Content-Encoding %q (identical body: %v), want an identity body", accept, encoding, ce, bytes.Equal(a.body, plainRec.body))
				}
			}
		}
		rec, wire := get(http.MethodHead, accept, "gzip")
		for _, a := range []answer{rec, wire} {
			if ce := a.header.Get("Content-Encoding"); ce != "" {
				t.Errorf("HEAD, Accept %q: Content-Encoding %q, want none", accept, ce)
			}
		}
	}
}

func TestAcceptsGzip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		header []string
		want   bool
	}{
		{nil, false},
		{[]string{""}, false},
		{[]string{"gzip"}, true},
		{[]string{"GZip"}, true},
		{[]string{"x-gzip"}, true},
		{[]string{"deflate, gzip"}, true},
		{[]string{"deflate", "gzip"}, true},
		{[]string{"gzip;q=0.001"}, true},
		{[]string{"gzip; q=0.5"}, true},
		{[]string{"*"}, true},
		{[]string{"br, *;q=0.1"}, true},
		{[]string{"gzip;q=0"}, false},
		{[]string{"gzip;q=0.0"}, false},
		{[]string{"gzip;q=bad"}, false},
		{[]string{"gzip;q=2"}, false},
		{[]string{"identity"}, false},
		{[]string{"br, deflate"}, false},
		{[]string{"*;q=0"}, false},
		{[]string{"*, gzip;q=0"}, false},
		{[]string{"gzip;q=0.5, identity"}, false},
		{[]string{"gzip;q=0.5, identity;q=0.5"}, true},
		{[]string{"identity;q=0.2, gzip;q=0.8"}, true},
		{[]string{"gzip;q=0.5, *;q=0.9"}, false},
		{[]string{"gzip, *;q=0"}, true},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%q", tc.header), func(t *testing.T) {
			h := http.Header{}
			for _, v := range tc.header {
				h.Add("Accept-Encoding", v)
			}
			if got := acceptsGzip(h); got != tc.want {
				t.Errorf("acceptsGzip(Accept-Encoding %q) = %v, want %v", tc.header, got, tc.want)
			}
		})
	}
}

// TestGzipNoBody: a response without a body is not gzipped, whatever the
// request accepts; an error body is.
func TestGzipNoBody(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		handler  http.HandlerFunc
		code     int
		encoding string
	}{
		{"nothing written", func(http.ResponseWriter, *http.Request) {}, 200, ""},
		{"empty write", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(nil) }, 200, ""},
		{"no content", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }, 204, ""},
		{"status only", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }, 503, ""},
		{"error", func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "busy", http.StatusServiceUnavailable) }, 503, "gzip"},
		{"body", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "hello") }, 200, "gzip"},
		{"already encoded", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Encoding", "br")
			_, _ = w.Write([]byte{1, 2, 3})
		}, 200, "br"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			req.Header.Set("Accept-Encoding", "gzip")
			withGzip(tc.handler).ServeHTTP(rec, req)
			res := rec.Result()
			if res.StatusCode != tc.code || res.Header.Get("Content-Encoding") != tc.encoding || !varies(res.Header, "Accept-Encoding") {
				t.Errorf("%s: %d, Content-Encoding %q, Vary %q; want %d, %q, Accept-Encoding", tc.name, res.StatusCode, res.Header.Get("Content-Encoding"), res.Header.Values("Vary"), tc.code, tc.encoding)
			}
			if tc.encoding == "gzip" && len(gunzip(t, rec.Body.Bytes())) == 0 {
				t.Errorf("%s: the gzip body is empty", tc.name)
			}
			if tc.encoding == "" && rec.Body.Len() != 0 {
				t.Errorf("%s: a %d-byte body, want none", tc.name, rec.Body.Len())
			}
		})
	}
}
