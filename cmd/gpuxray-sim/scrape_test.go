//go:build e2e

package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/agent"
	"github.com/gpuxray/gpuxray/collector/kubelet"
	"github.com/gpuxray/gpuxray/collector/nvml"
	"github.com/gpuxray/gpuxray/collector/sim"
	"github.com/gpuxray/gpuxray/exporter"
)

// TestConcurrentScrapes polls the demo node while 50 clients scrape the
// metrics endpoint as fast as they can (run it with -race, as make test-e2e
// does): every answer is a whole, parseable exposition or a 503 from the
// in-flight limit, and the polls go on.
func TestConcurrentScrapes(t *testing.T) {
	t.Parallel()
	sc := sim.Demo()
	clock := sim.NewVirtualClock(sc.Start)
	s, err := startSimulation(sc, clock)
	if err != nil {
		t.Fatal(err)
	}
	defer s.stop()
	reader := nvml.New(s.nvml(), nvml.DefaultConfig(), zap.NewNop(), clock)
	if err := reader.Init(); err != nil {
		t.Fatal(err)
	}
	defer reader.Shutdown()
	kubeCfg := kubelet.DefaultConfig()
	kubeCfg.Socket, kubeCfg.Clock = s.socket, clock
	kube, err := kubelet.New(kubeCfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer kube.Close()
	engine, err := agent.New(agent.DefaultConfig(), reader, kube, clock, zap.NewNop(), s.engineOptions(zap.NewNop())...)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(exporter.NewCollector(engine, nil))
	srv := httptest.NewServer(exporter.NewHandler(reg, "/metrics", engine.Ready, zap.NewNop(), exporter.DefaultMaxRequests))
	defer srv.Close()

	var polling atomic.Bool
	polling.Store(true)
	var ok, limited atomic.Int64
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for polling.Load() {
				resp, err := http.Get(srv.URL + "/metrics")
				if err != nil {
					t.Error(err)
					return
				}
				switch resp.StatusCode {
				case http.StatusOK:
					p := expfmt.NewTextParser(model.UTF8Validation)
					if _, err := p.TextToMetricFamilies(resp.Body); err != nil {
						t.Errorf("a scrape during polling does not parse: %v", err)
					}
					ok.Add(1)
				case http.StatusServiceUnavailable:
					limited.Add(1)
				default:
					t.Errorf("scrape answered %s", resp.Status)
				}
				resp.Body.Close()
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	const polls = 120
	for i := range polls {
		clock.Set(sc.Start.Add(time.Duration(i) * time.Second))
		engine.Poll(context.Background())
	}
	polling.Store(false)
	wg.Wait()
	if engine.Snapshot().Polls != polls {
		t.Errorf("%d polls completed, want %d", engine.Snapshot().Polls, polls)
	}
	if ok.Load() == 0 {
		t.Error("no scrape succeeded")
	}
	t.Logf("%d scrapes answered, %d refused by the in-flight limit", ok.Load(), limited.Load())
}
