//go:build e2e

package fleet

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpuxray/gpuxray/collector/sim"
)

// vmagentMaxScrape is vmagent's -promscrape.maxScrapeSize by default: a
// larger scrape is dropped whole.
const vmagentMaxScrape = 16 << 20

// TestKubeStateShards: the fleet's kube-state-metrics is served in shards
// of NodesPerKubeState nodes, each under what vmagent takes by default,
// that together serve exactly the series one endpoint would. (One
// endpoint for a thousand nodes served 32 MB, and the shards' scrapes of
// it were dropped: the pending-GPU rules recorded nothing.)
func TestKubeStateShards(t *testing.T) {
	t.Parallel()
	nodes, err := Generate(GenConfig{Seed: 1, Nodes: NodesPerKubeState + 1, Start: monday, Duration: 7 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	f := &Fleet{}
	defer f.Stop()
	for _, n := range nodes {
		sc := *n.Scenario
		sc.Start = time.Now().Add(-36 * time.Hour) // into the week's first pods
		node, err := sim.NewNode(&sc, wallClock{})
		if err != nil {
			t.Fatal(err)
		}
		f.agents = append(f.agents, &liveAgent{node: n, scenario: &sc, sim: node})
	}
	if err := f.serveKubeState(); err != nil {
		t.Fatal(err)
	}
	addrs := f.KubeStateAddrs()
	if len(addrs) != 2 {
		t.Fatalf("%d nodes served by %d shards, want 2", len(nodes), len(addrs))
	}
	var got []string
	for i, a := range addrs {
		resp, err := http.Get("http://" + a + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("shard %d: HTTP %d, %v", i, resp.StatusCode, err)
		}
		t.Logf("shard %d: %d bytes", i, len(b))
		if len(b) >= vmagentMaxScrape {
			t.Errorf("shard %d serves %d bytes, over vmagent's %d", i, len(b), vmagentMaxScrape)
		}
		got = append(got, samples(b)...)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(fleetKubeState(f.agents))
	whole := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(whole, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	want := samples(whole.Body.Bytes())
	sort.Strings(got)
	sort.Strings(want)
	if len(want) == 0 || strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the shards serve %d samples, one endpoint %d; they differ", len(got), len(want))
	}
}

// samples are an exposition's sample lines.
func samples(b []byte) []string {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out
}
