//go:build !nosim

package main

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
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
	allocs, opts := draAllocations(kube, src, claims, nil, nil, draCfg, pc.nodeName, zaptest.NewLogger(t))
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
			if _, opts := draAllocations(nil, nil, nil, nil, nil, tc.c, "", zaptest.NewLogger(t)); len(opts) != 0 {
				t.Error("engine options without a source")
			}
		})
	}
}

// TestReplayAPIServerDown replays two dynamic-MIG DRA nodes whose API
// server is down. In dra-apiserver-down.yaml it is down while the driver
// makes a MIG device: NVIDIA's driver does not change its slices for that,
// so embed-0 is credited from its start and nothing is unattributed. In
// dra-apiserver-down-start.yaml it is down from the agent's start: the
// claims' devices' time until the slices are first listed is
// unattributed, no second of it is invented as unallocated or idle, the
// pods are credited from then on, and the DRA source says it was down.
func TestReplayAPIServerDown(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		path string
		// outage is how long each of the pods was held by an unknown
		// holder: the slices are listed again at 2m.
		outage float64
		pods   []string
	}{
		{"testdata/dra-apiserver-down.yaml", 0, []string{"embed-0"}},
		{"testdata/dra-apiserver-down-start.yaml", 120, []string{"finetune-0", "eval-0"}},
	} {
		t.Run(filepath.Base(tc.path), func(t *testing.T) {
			t.Parallel()
			code, out, errs := runCmd(t, "replay", tc.path)
			if code != 0 {
				t.Fatalf("replay exited %d: %s", code, errs)
			}
			parser := expfmt.NewTextParser(model.UTF8Validation)
			mfs, err := parser.TextToMetricFamilies(strings.NewReader(out))
			if err != nil {
				t.Fatal(err)
			}
			sc, err := sim.LoadScenario(tc.path)
			if err != nil {
				t.Fatal(err)
			}
			sum := func(metric string, match func(*dto.Metric) bool) float64 {
				var v float64
				for _, m := range mfs[metric].GetMetric() {
					if match(m) {
						v += m.GetCounter().GetValue() + m.GetGauge().GetValue()
					}
				}
				return v
			}
			for _, r := range sc.Truth(0.05) {
				if !slices.Contains(tc.pods, r.Pod) {
					continue
				}
				onDevice := func(m *dto.Metric) bool { return label(m, "uuid") == r.UUID }
				for _, c := range []struct {
					what      string
					got, want float64
				}{
					{r.Pod + " allocated", sum("gpuxray_allocated_seconds_total", func(m *dto.Metric) bool { return label(m, "pod") == r.Pod }), r.AllocatedSeconds - tc.outage},
					{"its device unattributed", sum("gpuxray_device_unattributed_seconds_total", onDevice), tc.outage},
					{"its device allocated", sum("gpuxray_device_allocated_seconds_total", onDevice), r.AllocatedSeconds - tc.outage},
				} {
					if math.Abs(c.got-c.want) > 0.01*r.AllocatedSeconds {
						t.Errorf("%s = %.1f s, want %.1f ± 1%%", c.what, c.got, c.want)
					}
				}
				// Never invented: the device was held all the pod's life.
				if v := sum("gpuxray_device_unallocated_seconds_total", onDevice); v > 2 {
					t.Errorf("%s's device counted %.1f s unallocated while held", r.Pod, v)
				}
			}
			if v := sum("gpuxray_source_errors_total", func(m *dto.Metric) bool { return label(m, "source") == "dra" && label(m, "reason") == "unavailable" }); v == 0 {
				t.Error("no DRA source error counted while the API server was down")
			}
			if v := sum("gpuxray_source_up", func(m *dto.Metric) bool { return label(m, "source") == "dra" }); v != 1 {
				t.Errorf("gpuxray_source_up{source=\"dra\"} = %g at the end, want 1", v)
			}
		})
	}
}
