package app

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpuxray/gpuxray/collector"
	"github.com/gpuxray/gpuxray/collector/kubelet"
	"github.com/gpuxray/gpuxray/collector/sim"
	"github.com/gpuxray/gpuxray/internal/testtool"
)

const (
	draUUID0 = "GPU-3b9f1e2a-7c4d-4e8f-9a1b-2c3d4e5f6a7b"
	draUUID1 = "GPU-4c0a2f3b-8d5e-4f90-ab2c-3d4e5f6a7b8c"
)

// sliceServer answers, in JSON, a list of node n1's one ResourceSlice
// (NVIDIA's shape: gpu-0 and gpu-1 with their uuid) and holds watches
// open until the client goes.
func sliceServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/apis/resource.k8s.io/v1/resourceslices" || r.URL.Query().Get("fieldSelector") != "spec.nodeName=n1" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("watch") == "true" {
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		fmt.Fprintf(w, `{"kind":"ResourceSliceList","apiVersion":"resource.k8s.io/v1","metadata":{"resourceVersion":"5"},"items":[
{"metadata":{"name":"n1-gpu.nvidia.com-x","resourceVersion":"4"},"spec":{"driver":"gpu.nvidia.com","nodeName":"n1",
"pool":{"name":"n1","generation":1,"resourceSliceCount":1},"devices":[
{"name":"gpu-0","attributes":{"type":{"string":"gpu"},"uuid":{"string":%q}}},
{"name":"gpu-1","attributes":{"type":{"string":"gpu"},"gpu.nvidia.com/uuid":{"string":%q}}}]}}]}`, draUUID0, draUUID1)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func kubeconfigFor(t *testing.T, server string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q}}]
users: [{name: u, user: {token: not-a-real-token}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`, server)
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestDRAWiring runs the agent's allocation path on a mixed node: a fake
// kubelet on a unix socket lists a device plugin's GPU and two DRA claims'
// devices (one of a NIC driver), a loopback API server the node's slices;
// the engine's source sees UUIDs, the claims kept, the NIC ignored.
func TestDRAWiring(t *testing.T) {
	t.Parallel()
	api := sliceServer(t)
	ctr := &podresourcesv1.ContainerResources{Name: "main",
		Devices: []*podresourcesv1.ContainerDevices{{ResourceName: "nvidia.com/gpu", DeviceIds: []string{"GPU-5d1b3a4c-9e6f-4a01-bc3d-4e5f6a7b8c9d"}}},
		DynamicResources: []*podresourcesv1.DynamicResource{
			{ClaimNamespace: "ml", ClaimName: "gpus", ClaimResources: []*podresourcesv1.ClaimResource{
				{DriverName: "gpu.nvidia.com", PoolName: "n1", DeviceName: "gpu-1"},
				{DriverName: "gpu.nvidia.com", PoolName: "n1", DeviceName: "gpu-0"},
			}},
			{ClaimNamespace: "ml", ClaimName: "nic", ClaimResources: []*podresourcesv1.ClaimResource{
				{DriverName: "nic.example.com", PoolName: "n1", DeviceName: "eth1"},
			}},
		}}
	kl := sim.NewKubeletServer(func() *podresourcesv1.ListPodResourcesResponse {
		return &podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{{Namespace: "ml", Name: "train-0", Containers: []*podresourcesv1.ContainerResources{ctr}}}}
	})
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

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("the DRA source did not stop")
		}
	})
	var draCfg draSourceConfig
	draCfg.enabled, draCfg.drivers, draCfg.uuidAttribute = true, "gpu.nvidia.com", "uuid"
	pc := podSourceConfig{nodeName: "n1", kubeconfig: kubeconfigFor(t, api.URL)}
	// The slices' and the claims' sources both run until ctx is done.
	var runs sync.WaitGroup
	src, claims, err := startDRASource(ctx, draCfg, pc, zaptest.NewLogger(t), func(f func() error) {
		runs.Go(func() {
			if err := f(); err != nil {
				t.Errorf("DRA source: %v", err)
			}
		})
	})
	go func() { runs.Wait(); close(done) }()
	if err != nil || src == nil || !src.HasSynced() {
		t.Fatalf("startDRASource = %v, %v; want a synced source", src, err)
	}
	allocs, opts := DRAAllocations(kube, src, claims, nil, nil, draCfg.config(pc.nodeName), zaptest.NewLogger(t))
	if len(opts) != 1 {
		t.Errorf("%d engine options, want WithDRA", len(opts))
	}
	list, err := allocs.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range list.Allocations {
		got = append(got, a.Resource+" "+a.Device.UUID+" "+a.DRA.Claim)
	}
	want := []string{ // in the kubelet client's order: by device ID
		"nvidia.com/gpu GPU-5d1b3a4c-9e6f-4a01-bc3d-4e5f6a7b8c9d ",
		"gpu.nvidia.com " + draUUID0 + " gpus",
		"gpu.nvidia.com " + draUUID1 + " gpus",
	}
	if !reflect.DeepEqual(got, want) || list.Unresolved != 0 {
		t.Errorf("allocations %q (%d unresolved), want %q", got, list.Unresolved, want)
	}
	if len(list.Problems) != 1 {
		t.Errorf("problems %v, want the NIC's other_driver", list.Problems)
	}
	for _, a := range list.Allocations {
		if a.Device.Kind != collector.RefUUID {
			t.Errorf("allocation %+v not resolved to a UUID", a)
		}
	}
}

// TestDRAOff: disabled, or with no node name, the agent runs without a
// DRA source, and the DRA devices stay unresolved.
func TestDRAOff(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		c    draSourceConfig
		pc   podSourceConfig
	}{
		{"disabled", draSourceConfig{enabled: false, drivers: "gpu.nvidia.com", uuidAttribute: "uuid"}, podSourceConfig{nodeName: "n1"}},
		{"no node name", draSourceConfig{enabled: true, drivers: "gpu.nvidia.com", uuidAttribute: "uuid"}, podSourceConfig{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, _, err := startDRASource(t.Context(), tc.c, tc.pc, zaptest.NewLogger(t), func(func() error) { t.Error("a source was started") })
			if err != nil || src != nil {
				t.Errorf("startDRASource = %v, %v; want none", src, err)
			}
			if _, opts := DRAAllocations(nil, nil, nil, nil, nil, tc.c.config(""), zaptest.NewLogger(t)); len(opts) != 0 {
				t.Error("engine options without a source")
			}
		})
	}
}
