package kubelet_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpuxray/gpuxray/collector/kubelet"
	"github.com/gpuxray/gpuxray/collector/sim"
)

// BenchmarkList1000Pods is one List of a 1,000-pod answer (each pod with one
// GPU container and a sidecar without devices) over the unix socket,
// including the conversion to allocations.
func BenchmarkList1000Pods(b *testing.B) {
	resp := &podresourcesv1.ListPodResourcesResponse{}
	for i := 0; i < 1000; i++ {
		id := fmt.Sprintf("GPU-%08x-1111-2222-3333-444455556666::%d", i%8, i%32)
		resp.PodResources = append(resp.PodResources, &podresourcesv1.PodResources{
			Namespace: fmt.Sprintf("team-%d", i%20), Name: fmt.Sprintf("pod-%04d", i),
			Containers: []*podresourcesv1.ContainerResources{
				{Name: "main", Devices: []*podresourcesv1.ContainerDevices{{ResourceName: "nvidia.com/gpu.shared", DeviceIds: []string{id}}}},
				{Name: "sidecar"},
			},
		})
	}
	dir, err := os.MkdirTemp("", "gpuxray-bench")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	socket := filepath.Join(dir, "kubelet.sock")
	srv := sim.NewKubeletServer(func() *podresourcesv1.ListPodResourcesResponse { return resp })
	if err := srv.Start(socket); err != nil {
		b.Fatal(err)
	}
	defer srv.Stop()
	cfg := kubelet.DefaultConfig()
	cfg.Socket = socket
	c, err := kubelet.New(cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		list, err := c.List(ctx)
		if err != nil || len(list.Allocations) != 1000 {
			b.Fatalf("List: %d allocations, %v", len(list.Allocations), err)
		}
	}
}
