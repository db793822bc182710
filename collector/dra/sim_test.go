package dra_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"k8s.io/client-go/rest"

	"github.com/gpuxray/gpuxray/collector"
	"github.com/gpuxray/gpuxray/collector/dra"
	"github.com/gpuxray/gpuxray/collector/kubelet"
	"github.com/gpuxray/gpuxray/collector/sim"
	"github.com/gpuxray/gpuxray/internal/testtool"
)

// TestSimulatedNode resolves a simulated DRA node's claims the way the agent
// does: the kubelet client reads the simulated kubelet over gRPC on a unix
// socket, the Source watches the simulated API server's ResourceSlices over
// HTTPS, and every GPU a claim holds resolves to the simulated GPU's UUID.
// The two halves meet only through the real protocols.
func TestSimulatedNode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		scenario string
		at       time.Duration
		want     map[string]int // pod → GPU index; -1: a MIG device
	}{
		{"dra-whole.yaml", time.Minute, nil},
		{"dra-mixed.yaml", time.Minute, map[string]int{"train-dra": 1, "notebook": 3}},
		{"dra-shared.yaml", time.Minute, nil},
		// Dynamic MIG: two MIG devices the driver has created, with the
		// UUIDs its slice entries carry while they exist.
		{"dra-mig.yaml", 10 * time.Minute, map[string]int{"finetune-0": -1, "embed-0": -1, "eval-0": 1}},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			t.Parallel()
			sc, err := sim.LoadScenario(filepath.Join("..", "..", "test", "scenarios", tc.scenario))
			if err != nil {
				t.Fatal(err)
			}
			clock := sim.NewVirtualClock(sc.Start.Add(tc.at))
			node, err := sim.NewNode(sc, clock)
			if err != nil {
				t.Fatal(err)
			}
			api := sim.NewAPIServer(node)
			if err := api.StartTLS(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(api.Stop)
			kl := sim.NewKubeletServer(node.ListResponse)
			socket := testtool.SocketPath(t, "kubelet.sock")
			if err := kl.Start(socket); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(kl.Stop)
			kcfg := kubelet.DefaultConfig()
			kcfg.Socket = socket
			kube, err := kubelet.New(kcfg, zaptest.NewLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { kube.Close() })

			rc := &rest.Config{Host: api.URL()}
			rc.TLSClientConfig.CAData = api.CACert()
			client, err := dra.NewClient(rc)
			if err != nil {
				t.Fatal(err)
			}
			cfg := dra.DefaultConfig(sc.Node)
			src, err := dra.New(cfg, client, zaptest.NewLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				_ = src.Run(ctx)
			}()
			t.Cleanup(func() {
				cancel()
				<-done
			})
			wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
			defer wcancel()
			if err := src.WaitForResourceVersion(wctx, api.ResourceVersion()); err != nil {
				t.Fatal(err)
			}

			list, err := dra.NewResolver(kube, src, cfg, zaptest.NewLogger(t)).List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if list.Unresolved != 0 {
				t.Errorf("%d DRA devices unresolved: %v", list.Unresolved, list.Problems)
			}
			uuids := map[string]int{}
			for gpu := range sc.GPUs {
				uuids[node.DeviceUUID(gpu)] = gpu
			}
			var dras int
			for _, a := range list.Allocations {
				if a.DRA.IsZero() {
					continue
				}
				dras++
				if want, ok := tc.want[a.Pod]; ok && want < 0 {
					// NVIDIA's driver publishes no uuid for a dynamic
					// partition: it resolves to its parent, profile and
					// placement, for the engine to find in NVML.
					if a.Device.Kind != collector.RefMIGPlacement || a.Device.UUID != node.DeviceUUID(0) || !strings.HasPrefix(a.DRA.Device, "gpu-0-mig-") {
						t.Errorf("%s: device %s resolved to %+v, want gpu:0's MIG placement", a.Pod, a.DRA.Device, a.Device)
					}
					continue
				}
				gpu, ok := uuids[a.Device.UUID]
				if a.Device.Kind != collector.RefUUID || !ok {
					t.Errorf("%s/%s: device %s resolved to %+v, not a simulated GPU", a.Namespace, a.Pod, a.DRA.Device, a.Device)
					continue
				}
				if want, ok := tc.want[a.Pod]; ok && gpu != want {
					t.Errorf("%s: resolved to GPU %d, want %d", a.Pod, gpu, want)
				}
			}
			if dras == 0 || (tc.want != nil && dras < len(tc.want)) {
				t.Errorf("%d DRA allocations listed, want at least %d", dras, max(1, len(tc.want)))
			}
		})
	}
}
