//go:build e2e

package exporter_test

import (
	"testing"
	"time"

	"github.com/gpuxray/gpuxray/collector/sim"
	"github.com/gpuxray/gpuxray/exporter"
	"github.com/gpuxray/gpuxray/test/bench/scenario"
	"github.com/gpuxray/gpuxray/test/bench/simnode"
)

// TestSimulatedNodesExposition: the agent's handler serves simulated
// nodes' series in full, as many as the registry gathers.
func TestSimulatedNodesExposition(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml []byte
	}{{"node-110.yaml", scenario.Node110()}, {"mig-56.yaml", scenario.MIG56()}} {
		t.Run(tc.name, func(t *testing.T) {
			sc, err := sim.ParseScenario(tc.yaml, tc.name)
			if err != nil {
				t.Fatal(err)
			}
			n := simnode.New(t, sc, nil)
			c := exporter.NewCollector(n.Engine, &exporter.BuildInfo{Version: "1.2.3", Revision: "abc\"def", GoVersion: "go1.26"})
			for _, until := range []time.Duration{time.Minute, 2 * time.Minute, 10 * time.Minute} {
				n.Run(time.Second, until)
				r := agentGatherer(c, stable{})
				a := do(t, handler(r), scrapeReq{name: "text", method: "GET", accept: "text/plain;version=0.0.4"})
				if got, want := parseSeries(t, a.body), gatherCount(t, r); got != want || got < 100 {
					t.Errorf("at %v: %d series parsed, %d gathered", until, got, want)
				}
			}
		})
	}
}
