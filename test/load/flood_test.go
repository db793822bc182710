//go:build e2e

package load

import (
	"context"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/collector/sim"
	"github.com/gpuxray/gpuxray/exporter"
	"github.com/gpuxray/gpuxray/test/bench/simnode"
)

// TestScrapeUnderFlood: flooders GET /metrics in a loop with no pause (not
// rate-limited: each sends its next request as soon as it has the last
// answer) against the agent's real server and handler on the demo node,
// while a scraper asks, as Prometheus does, once per interval. With the
// old limit (4 in flight, the rest 503 at once) the scraper lost 60% of
// its scrapes to twelve flooders; it must now keep at least 99% of them,
// with the default limit and, through the wait in line, with a limit of 4.
func TestScrapeUnderFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("floods the server for a few seconds")
	}
	sc := sim.Demo()
	n := simnode.New(t, sc, nil)
	n.Run(time.Second, 10*time.Second) // series to render
	// What the agent registers beside the engine (internal/app/agent.go).
	n.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, tc := range []struct {
		name     string
		flooders int
		limit    int
	}{
		{"12 flooders, default limit", 12, exporter.DefaultMaxRequests},
		{"12 flooders, limit 4", 12, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, total, flood, refused := floodScrapes(t, n.Registry, tc.flooders, tc.limit)
			t.Logf("scraper: %d of %d scrapes answered 200; flooders: %d requests, %d of them 503", ok, total, flood, refused)
			if total < 10 {
				t.Fatalf("only %d scrapes were made", total)
			}
			// All of them is what is expected: a failure here is a refused
			// or timed-out scrape, not noise.
			if rate := float64(ok) / float64(total); rate < 0.99 {
				t.Errorf("scraper success %.1f%% (%d of %d), want at least 99%%", 100*rate, ok, total)
			}
		})
	}
}

// scrapeEvery and scrapes are the scraper's interval and how many scrapes
// it makes: short, for CI.
const (
	scrapeEvery = 100 * time.Millisecond
	scrapes     = 25
)

func floodScrapes(t *testing.T, reg prometheus.Gatherer, flooders, limit int) (ok, total, flood, refused int64) {
	cfg := exporter.Config{ListenAddress: "127.0.0.1:0", MetricsPath: "/metrics"}
	h := exporter.NewHandler(reg, cfg.MetricsPath, func() bool { return true }, zap.NewNop(), limit)
	srv, err := exporter.Listen(cfg, h, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx) }()
	url := "http://" + srv.Addr().String() + "/metrics"

	// Keep-alive connections, one per client, as real clients keep them.
	tr := &http.Transport{MaxIdleConnsPerHost: flooders + 1}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}

	var stop atomic.Bool
	var floods, refusals atomic.Int64
	var wg sync.WaitGroup
	for range flooders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				resp, err := client.Get(url)
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				floods.Add(1)
				if resp.StatusCode == http.StatusServiceUnavailable {
					refusals.Add(1)
				}
			}
		}()
	}
	// The flood is on before the first scrape.
	for deadline := time.Now().Add(30 * time.Second); floods.Load() < int64(4*flooders); {
		if time.Now().After(deadline) {
			t.Fatalf("flooders made %d requests in 30s", floods.Load())
		}
		time.Sleep(time.Millisecond)
	}

	// A count of scrapes, not a stretch of time: a loaded machine makes
	// fewer in a given time, and the test judges each one.
	tick := time.NewTicker(scrapeEvery)
	for range scrapes {
		<-tick.C
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5")
		req.Header.Set("X-Prometheus-Scrape-Timeout-Seconds", "10")
		total++
		resp, err := client.Do(req)
		if err != nil {
			t.Logf("scrape %d: %v", total, err)
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode == http.StatusOK && len(body) > 0 {
			ok++
		} else {
			t.Logf("scrape %d: %s", total, resp.Status)
		}
	}
	tick.Stop()
	stop.Store(true)
	wg.Wait()
	// Before the shutdown: a dialled connection left unused would hold it
	// for 5 s, as one that has not sent its request yet.
	tr.CloseIdleConnections()
	cancel()
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
	return ok, total, floods.Load(), refusals.Load()
}
