package exporter_test

import (
	"bytes"
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuxray/gpuxray/agent"
	"github.com/gpuxray/gpuxray/exporter"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// goldenReqs are the scrapes whose answers are kept in testdata/: each
// text format Prometheus negotiates, gzipped as it asks.
var goldenReqs = []scrapeReq{
	{name: "text", method: http.MethodGet, encoding: "gzip"},
	{name: "text-values", method: http.MethodGet, accept: "text/plain;version=0.0.4;escaping=values"},
	{name: "openmetrics-1.0.0", method: http.MethodGet, encoding: "gzip",
		accept: "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1"},
	{name: "openmetrics-0.0.1", method: http.MethodGet, accept: "application/openmetrics-text;version=0.0.1"},
}

// TestExpositionGolden: the agent's handler answers the edge snapshot (label
// values to escape and cap, values of every form, stale, ended and
// overflowing allocations), beside other families that sort before,
// between and after the engine's, as testdata/ holds it: Content-Type and
// body, byte for byte. go test -update rewrites the files.
func TestExpositionGolden(t *testing.T) {
	for _, snap := range []struct {
		name string
		s    *agent.Snapshot
	}{{"edge", edgeSnapshot()}, {"empty", &agent.Snapshot{}}} {
		c := exporter.NewCollector(&swappable{s: snap.s}, &exporter.BuildInfo{Version: "v\"1\"\n", Revision: "\\", GoVersion: "go1.26"},
			exporter.WithExtraLabels("team", "cost_center"))
		h := handler(goldenGatherer(c, stable{}))
		for _, req := range goldenReqs {
			a := do(t, h, req)
			if a.code != http.StatusOK {
				t.Fatalf("%s %s: status %d", snap.name, req.name, a.code)
			}
			got := append([]byte("Content-Type: "+a.headers.Get("Content-Type")+"\n\n"), a.body...)
			path := filepath.Join("testdata", snap.name+"."+req.name+".golden")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s %s: differs from %s:\n%s", snap.name, req.name, path, firstDiff(got, want))
			}
		}
	}
}
