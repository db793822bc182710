package fleet

import (
	"context"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/klauspost/compress/s2"
	"google.golang.org/protobuf/encoding/protowire"
)

const omText = `# TYPE gpuxray_allocated_seconds counter
# HELP gpuxray_allocated_seconds Allocated time.
gpuxray_allocated_seconds_total{instance="gx-003",pod="train-gx-003-0",uuid="GPU-edc8a031-644e-5838-9a56-ed3eb2b4cdd8",window="peak"} 0 1795392000.000
gpuxray_allocated_seconds_total{instance="gx-003",pod="train-gx-003-0",uuid="GPU-edc8a031-644e-5838-9a56-ed3eb2b4cdd8",window="peak"} 300.5 1795392300.250
gpuxray_allocated_seconds_total{instance="gx-003",pod="a \"quoted\" \\ pod",uuid="",window="offpeak"} 7 1795392000.000
# TYPE gpuxray_device_info gauge
gpuxray_device_info{instance="gx-003",uuid="MIG-1"} 1 1795392000.000
# EOF
`

func TestReadOM(t *testing.T) {
	t.Parallel()
	var got []*series
	var comments []string
	err := readOM(strings.NewReader(omText), func(s *series) error { got = append(got, s); return nil },
		func(l []byte) error { comments = append(comments, string(l)); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || len(comments) != 4 {
		t.Fatalf("%d series and %d comments, want 3 and 4", len(got), len(comments))
	}
	first := got[0]
	if first.name != "gpuxray_allocated_seconds_total" || !reflect.DeepEqual(first.ts, []int64{1795392000000, 1795392300250}) ||
		!reflect.DeepEqual(first.vals, []float64{0, 300.5}) {
		t.Errorf("first series %+v", first)
	}
	if got[1].labels[1] != (label{"pod", `a "quoted" \ pod`}) {
		t.Errorf("escaped label %+v", got[1].labels)
	}
	// Written back, it reads the same.
	var b []byte
	for _, s := range got {
		b = appendOMLines(b, s)
	}
	var again []*series
	if err := readOM(strings.NewReader(string(b)), func(s *series) error { again = append(again, s); return nil }, nil); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again, got) {
		t.Errorf("written back and read again:\n%s", b)
	}
}

// TestIdentity: a copy of a node's history is a node of its own: its
// name everywhere, UUIDs of its own, and the same values.
func TestIdentity(t *testing.T) {
	t.Parallel()
	var got []*series
	if err := readOM(strings.NewReader(omText), func(s *series) error { got = append(got, s); return nil }, nil); err != nil {
		t.Fatal(err)
	}
	id := identity{from: "gx-003", to: "gx-043", shiftMS: 1500}
	c := id.apply(got[0])
	lb := map[string]string{}
	for _, l := range c.labels {
		lb[l.name] = l.value
	}
	if lb["instance"] != "gx-043" || lb["pod"] != "train-gx-043-0" {
		t.Errorf("copy's labels %v", lb)
	}
	if u := lb["uuid"]; u == got[0].labels[2].value || !strings.HasPrefix(u, "GPU-edc8a031-644e-5838-9a56-") || len(u) != len(got[0].labels[2].value) {
		t.Errorf("copy's UUID %q", u)
	}
	if id.uuid(got[0].labels[2].value) != lb["uuid"] || (identity{from: "gx-003", to: "gx-044"}).uuid(got[0].labels[2].value) == lb["uuid"] {
		t.Error("a copy's UUIDs are not its own, or not the same each time")
	}
	if c.ts[1] != got[0].ts[1]+1500 || c.vals[1] != got[0].vals[1] {
		t.Errorf("copy's samples %v %v", c.ts, c.vals)
	}
	if got[0].labels[0].value != "gx-003" {
		t.Error("apply changed the original")
	}
	if same := (identity{from: "gx-003", to: "gx-003"}).apply(got[0]); same != got[0] {
		t.Error("the identity of a node onto itself copied it")
	}
}

// TestRemoteWrite: the request is a snappy-compressed protobuf
// WriteRequest, as the remote-write protocol defines it, with a staleness
// marker where a series went.
func TestRemoteWrite(t *testing.T) {
	t.Parallel()
	var body []byte
	var headers http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		headers = r.Header
		body, _ = io.ReadAll(r.Body)
	}))
	defer srv.Close()
	w := &remoteWriter{ctx: context.Background(), url: srv.URL}
	s := &series{name: "up", labels: []label{{"job", "gpuxray"}}, ts: []int64{1000, 2000}, vals: []float64{1, 0.5}}
	if err := w.add(withStaleMarker(s, 1000, 3000)); err != nil {
		t.Fatal(err)
	}
	if err := w.flush(); err != nil {
		t.Fatal(err)
	}
	if headers.Get("Content-Encoding") != "snappy" || headers.Get("Content-Type") != "application/x-protobuf" || headers.Get("X-Prometheus-Remote-Write-Version") != "0.1.0" {
		t.Errorf("headers %v", headers)
	}
	raw, err := s2.Decode(nil, body)
	if err != nil {
		t.Fatal(err)
	}
	var labels []string
	var samples [][2]float64
	ts := field(t, raw, 1)
	for _, l := range fields(t, ts, 1) {
		labels = append(labels, string(field(t, l, 1))+"="+string(field(t, l, 2)))
	}
	for _, smp := range fields(t, ts, 2) {
		v, _ := protowire.ConsumeFixed64(smp[1:])
		tm, _ := protowire.ConsumeVarint(smp[10:])
		samples = append(samples, [2]float64{math.Float64frombits(v), float64(tm)})
	}
	if !reflect.DeepEqual(labels, []string{"__name__=up", "job=gpuxray"}) {
		t.Errorf("labels %v", labels)
	}
	if len(samples) != 3 || samples[1] != [2]float64{0.5, 2000} || math.Float64bits(samples[2][0]) != 0x7ff0000000000002 || samples[2][1] != 3000 {
		t.Errorf("samples %v, want two and a staleness marker at 3000", samples)
	}
	if m := withStaleMarker(s, 1000, 2500); len(m.ts) != 2 {
		t.Error("a marker after the end of the history")
	}
	if len(s.ts) != 2 {
		t.Error("withStaleMarker changed the series")
	}
}

// fields returns the bytes fields numbered num of a protobuf message.
func fields(t *testing.T, b []byte, num protowire.Number) [][]byte {
	t.Helper()
	var out [][]byte
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			t.Fatal("bad tag")
		}
		b = b[l:]
		if typ != protowire.BytesType {
			t.Fatalf("field %d of type %d", n, typ)
		}
		v, l := protowire.ConsumeBytes(b)
		if l < 0 {
			t.Fatal("bad bytes")
		}
		b = b[l:]
		if n == num {
			out = append(out, v)
		}
	}
	return out
}

func field(t *testing.T, b []byte, num protowire.Number) []byte {
	t.Helper()
	f := fields(t, b, num)
	if len(f) == 0 {
		t.Fatalf("no field %d", num)
	}
	return f[0]
}
