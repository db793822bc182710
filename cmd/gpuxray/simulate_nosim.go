//go:build nosim

package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/agent"
	"github.com/gpuxray/gpuxray/collector/dra"
	"github.com/gpuxray/gpuxray/collector/node"
	"github.com/gpuxray/gpuxray/exporter"
)

// The production image's build (make image-binaries, -tags nosim) leaves
// the simulator out: the simulated driver, kubelet and API server, go-nvml's
// mock servers, the scenario parser and k8s.io/api's resource types are
// ≈ 3 MB of the binary, and the binary's pages are most of the agent's
// resident set (docs/benchmarks.md). `agent --simulate` and `replay` say so
// and exit 2.

var errNoSimulator = usageError{errors.New("this gpuxray was built without the simulator (-tags nosim, as the container image is): --simulate and replay need `go build ./cmd/gpuxray` or `make build`")}

// simulation is never made in this build.
type simulation struct {
	socket string
	faults *struct{}
}

func startSimulated(context.Context, string, *identityConfig, string, *zap.Logger) (*simulation, error) {
	return nil, errNoSimulator
}

func runReplay(context.Context, []string, io.Writer, io.Writer) error { return errNoSimulator }

func (*simulation) stop()                                                                     {}
func (*simulation) nvml() gonvml.Interface                                                    { return nil }
func (*simulation) nodeLabels() node.Source                                                   { return nil }
func (*simulation) agentClock() agent.Clock                                                   { return nil }
func (*simulation) engineOptions(*zap.Logger) []agent.Option                                  { return nil }
func (*simulation) priorityClasses() exporter.PriorityClassSource                             { return nil }
func (*simulation) playLiveLeadIn(context.Context, *agent.Engine, time.Duration, *zap.Logger) {}
func (*simulation) playFaults(context.Context, time.Duration, *zap.Logger) error              { return nil }
func (*simulation) withKubeState(h http.Handler, _ string) (http.Handler, error)              { return h, nil }
func (*simulation) withEngines(h http.Handler, _ string) (http.Handler, error)                { return h, nil }
func (*simulation) allocations(_ context.Context, kube dra.Lister, _ draSourceConfig, _ *zap.Logger, _ func(func() error)) (agent.AllocationSource, []agent.Option, error) {
	return kube, nil, nil
}
