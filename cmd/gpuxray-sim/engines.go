package main

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpuxray/gpuxray/collector/sim"
	"github.com/gpuxray/gpuxray/internal/app"
)

// enginePathPrefix is where `agent --simulate` serves the scenario's
// inference engines' own metrics, one path per kind (/simulate/vllm,
// /simulate/sglang, /simulate/tgi), each scraped as job="<kind>" with
// honor_labels (its series carry namespace and pod).
const enginePathPrefix = "/simulate/"

// withEngines serves each engine kind's series at enginePathPrefix+kind,
// in front of h, as withKubeState serves kube-state-metrics'.
func (s *simulation) withEngines(h http.Handler, metricsPath string) (http.Handler, error) {
	paths := map[string]http.Handler{}
	for _, kind := range sim.EngineKinds {
		path := enginePathPrefix + kind
		if metricsPath == path {
			return nil, app.Usagef("--web.telemetry-path %s is where --simulate serves the simulated %s metrics; choose another path", metricsPath, kind)
		}
		reg := prometheus.NewPedanticRegistry()
		if err := reg.Register(s.node.Engines(kind)); err != nil {
			return nil, fmt.Errorf("simulated %s: %w", kind, err)
		}
		paths[path] = promhttp.HandlerFor(reg, promhttp.HandlerOpts{MaxRequestsInFlight: kubeStateMaxRequests})
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e, ok := paths[r.URL.Path]
		if !ok || !strings.HasPrefix(r.URL.Path, enginePathPrefix) {
			h.ServeHTTP(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, fmt.Sprintf("Method %s is not allowed; use GET or HEAD.", r.Method), http.StatusMethodNotAllowed)
			return
		}
		e.ServeHTTP(w, r)
	}), nil
}

// replayEngines registers the scenario's inference engines on a replay's
// registry as their own scrape targets would be stored: each kind as
// job="<kind>", instance=NODE, with the namespace and pod labels its
// series carry (the recorder keeps a metric's own job and instance).
func replayEngines(reg prometheus.Registerer, node *sim.Node) {
	for _, kind := range sim.EngineKinds {
		prometheus.WrapRegistererWith(prometheus.Labels{"job": kind, "instance": node.Scenario().Node}, reg).MustRegister(node.Engines(kind))
	}
}

// Paths are the paths `agent --simulate` serves beside the agent's own:
// the simulated kube-state-metrics and each inference engine kind's.
func (simulator) Paths() map[string]string {
	paths := map[string]string{kubeStatePath: "the simulated kube-state-metrics"}
	for _, kind := range sim.EngineKinds {
		paths[enginePathPrefix+kind] = "the simulated " + kind + " metrics"
	}
	return paths
}
