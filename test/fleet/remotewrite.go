package fleet

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"

	"github.com/klauspost/compress/s2"
	"google.golang.org/protobuf/encoding/protowire"
)

// staleNaN is Prometheus' staleness marker: the value a scraper writes
// for a series that has gone from its target. VictoriaMetrics ends the
// series there; without it, a gauge would be read up to a step (the
// default lookbehind of its range queries) after it went.
var staleNaN = math.Float64frombits(0x7ff0000000000002)

// remoteWriter sends series to a Prometheus remote-write endpoint
// (protobuf WriteRequests, snappy-compressed), as vmagent does.
type remoteWriter struct {
	ctx context.Context
	url string
	buf []byte
}

// maxRequest is the uncompressed size a request is sent at.
const maxRequest = 8 << 20

// add appends s to the request being built, sending it when it is full.
func (w *remoteWriter) add(s *series) error {
	var ts []byte
	ts = appendLabel(ts, "__name__", s.name)
	for _, l := range s.labels {
		ts = appendLabel(ts, l.name, l.value)
	}
	for i, t := range s.ts {
		var smp []byte
		smp = protowire.AppendTag(smp, 1, protowire.Fixed64Type)
		smp = protowire.AppendFixed64(smp, math.Float64bits(s.vals[i]))
		smp = protowire.AppendTag(smp, 2, protowire.VarintType)
		smp = protowire.AppendVarint(smp, uint64(t))
		ts = protowire.AppendTag(ts, 2, protowire.BytesType)
		ts = protowire.AppendBytes(ts, smp)
	}
	w.buf = protowire.AppendTag(w.buf, 1, protowire.BytesType)
	w.buf = protowire.AppendBytes(w.buf, ts)
	if len(w.buf) >= maxRequest {
		return w.flush()
	}
	return nil
}

func appendLabel(b []byte, name, value string) []byte {
	var l []byte
	l = protowire.AppendTag(l, 1, protowire.BytesType)
	l = protowire.AppendString(l, name)
	l = protowire.AppendTag(l, 2, protowire.BytesType)
	l = protowire.AppendString(l, value)
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	return protowire.AppendBytes(b, l)
}

// flush sends what was added.
func (w *remoteWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	body := s2.EncodeSnappy(nil, w.buf)
	w.buf = w.buf[:0]
	req, err := http.NewRequestWithContext(w.ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("Content-Encoding", "snappy")
	req.Header.Set("X-Prometheus-Remote-Write-Version", "0.1.0")
	resp, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("remote write to %s: HTTP %d: %s", w.url, resp.StatusCode, bytes.TrimSpace(b))
	}
	return nil
}

// withStaleMarker is s with a staleness marker at the scrape after its
// last sample, when that scrape is at or before endMS: a series that went
// before the end of the history.
func withStaleMarker(s *series, scrapeMS, endMS int64) *series {
	if len(s.ts) == 0 {
		return s
	}
	next := s.ts[len(s.ts)-1] + scrapeMS
	if next > endMS {
		return s
	}
	return &series{name: s.name, labels: s.labels,
		ts: append(s.ts[:len(s.ts):len(s.ts)], next), vals: append(s.vals[:len(s.vals):len(s.vals)], staleNaN)}
}
