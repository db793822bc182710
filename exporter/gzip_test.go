package exporter

import (
	"bytes"
	"compress/gzip"
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
// does not gets it plain. Both through a recorder and through a real
// server.
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
		// HEAD: the headers a GET would get (RFC 9110, 9.3.2), no body.
		rec, wire := get(http.MethodHead, accept, "gzip")
		if ce := wire.header.Get("Content-Encoding"); ce != "gzip" || len(wire.body) != 0 {
			t.Errorf("HEAD, Accept %q: Content-Encoding %q and %d bytes of body, want gzip and none", accept, ce, len(wire.body))
		}
		if ct, want := rec.header.Get("Content-Type"), plainRec.header.Get("Content-Type"); ct != want {
			t.Errorf("HEAD, Accept %q: Content-Type %q, want %q", accept, ct, want)
		}
	}
}
