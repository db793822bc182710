package sim_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"testing"
	"time"

	"github.com/gpuxray/gpuxray/internal/testtool"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpuxray/gpuxray/collector/sim"
)

func kubeletSocket(t *testing.T) string { return testtool.SocketPath(t, "kubelet.sock") }

// kubeletAnswer is a small answer: one pod with one GPU.
func kubeletAnswer() *podresourcesv1.ListPodResourcesResponse {
	return &podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{
		{Namespace: "research", Name: "train-0", Containers: []*podresourcesv1.ContainerResources{
			{Name: "trainer", Devices: []*podresourcesv1.ContainerDevices{
				{ResourceName: "nvidia.com/gpu", DeviceIds: []string{"GPU-3b9f1e2a-7c4d-4e8f-9a1b-2c3d4e5f6a7b"}},
			}},
		}},
		{Namespace: "serving", Name: "llm-0"},
	}}
}

// startKubelet starts a server on a fresh socket and a client connected to it.
func startKubelet(t *testing.T) (*sim.KubeletServer, string, podresourcesv1.PodResourcesListerClient) {
	t.Helper()
	srv := sim.NewKubeletServer(kubeletAnswer)
	path := kubeletSocket(t)
	if err := srv.Start(path); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return srv, path, podresourcesv1.NewPodResourcesListerClient(conn)
}

// callCtx bounds a test's calls to the simulated servers. It guards a hang
// only: TestAPIServerProtocol makes a dozen calls under one, TLS handshakes
// included, and a loaded machine under the race detector takes seconds.
func callCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestKubeletServerRestart(t *testing.T) {
	t.Parallel()
	srv, path, api := startKubelet(t)
	ctx := callCtx(t)

	if err := srv.Start(path); err == nil {
		t.Error("second Start on a running server succeeded")
	}
	resp, err := api.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if !proto.Equal(resp, kubeletAnswer()) {
		t.Errorf("List = %v, want %v", resp, kubeletAnswer())
	}

	srv.Stop()
	srv.Stop() // a second Stop does nothing
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("socket after Stop: %v, want it removed", err)
	}
	if _, err := api.List(ctx, &podresourcesv1.ListPodResourcesRequest{}); status.Code(err) != codes.Unavailable {
		t.Errorf("List after Stop: %v, want Unavailable", err)
	}

	// A stale file where the socket goes must not stop a restart.
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(path); err != nil {
		t.Fatalf("Start after Stop: %v", err)
	}
	// The client's connection comes back by itself, after its backoff.
	if _, err := api.List(ctx, &podresourcesv1.ListPodResourcesRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("List after restart: %v", err)
	}
	// The call made while stopped never reached the server.
	if got := srv.Calls(); got != 2 {
		t.Errorf("Calls() = %d, want 2", got)
	}
}

func TestKubeletServerSetError(t *testing.T) {
	t.Parallel()
	for _, code := range []codes.Code{codes.ResourceExhausted, codes.Unavailable, codes.Internal} {
		t.Run(code.String(), func(t *testing.T) {
			t.Parallel()
			srv, _, api := startKubelet(t)
			ctx := callCtx(t)
			srv.SetError(code)
			_, err := api.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
			if status.Code(err) != code {
				t.Errorf("List: %v, want %s", err, code)
			}
			_, err = api.GetAllocatableResources(ctx, &podresourcesv1.AllocatableResourcesRequest{})
			if status.Code(err) != code {
				t.Errorf("GetAllocatableResources: %v, want %s", err, code)
			}
			_, err = api.Get(ctx, &podresourcesv1.GetPodResourcesRequest{PodNamespace: "research", PodName: "train-0"})
			if status.Code(err) != code {
				t.Errorf("Get: %v, want %s", err, code)
			}
			srv.SetError(codes.OK)
			if _, err := api.List(ctx, &podresourcesv1.ListPodResourcesRequest{}); err != nil {
				t.Errorf("List after SetError(OK): %v", err)
			}
			if got := srv.Calls(); got != 2 {
				t.Errorf("Calls() = %d, want 2", got)
			}
		})
	}
}

func TestKubeletServerSetDelay(t *testing.T) {
	t.Parallel()
	srv, _, api := startKubelet(t)
	srv.SetDelay(time.Minute)
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := api.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("List: %v, want DeadlineExceeded", err)
	}
	// Half the delay: a List that waited for it would take a minute.
	if elapsed := time.Since(start); elapsed > 30*time.Second {
		t.Errorf("List took %s; the delay must end with the caller's deadline", elapsed)
	}
	srv.SetDelay(0)
	if _, err := api.List(callCtx(t), &podresourcesv1.ListPodResourcesRequest{}); err != nil {
		t.Errorf("List after SetDelay(0): %v", err)
	}
}

func TestKubeletServerGet(t *testing.T) {
	t.Parallel()
	_, _, api := startKubelet(t)
	tests := []struct {
		namespace, name string
		want            codes.Code
	}{
		{"research", "train-0", codes.OK},
		{"serving", "llm-0", codes.OK},
		{"research", "llm-0", codes.NotFound},
		{"", "", codes.NotFound},
	}
	for _, tt := range tests {
		t.Run(tt.namespace+"/"+tt.name, func(t *testing.T) {
			t.Parallel()
			resp, err := api.Get(callCtx(t), &podresourcesv1.GetPodResourcesRequest{PodNamespace: tt.namespace, PodName: tt.name})
			if status.Code(err) != tt.want {
				t.Fatalf("Get: %v, want %s", err, tt.want)
			}
			if tt.want != codes.OK {
				return
			}
			pod := resp.GetPodResources()
			if pod.GetNamespace() != tt.namespace || pod.GetName() != tt.name {
				t.Errorf("Get answered %s/%s", pod.GetNamespace(), pod.GetName())
			}
			for _, want := range kubeletAnswer().GetPodResources() {
				if want.GetNamespace() == tt.namespace && want.GetName() == tt.name && !proto.Equal(pod, want) {
					t.Errorf("Get = %v, want %v", pod, want)
				}
			}
		})
	}
}

func TestKubeletServerAllocatable(t *testing.T) {
	t.Parallel()
	srv, _, api := startKubelet(t)
	ctx := callCtx(t)
	resp, err := api.GetAllocatableResources(ctx, &podresourcesv1.AllocatableResourcesRequest{})
	if err != nil || len(resp.GetDevices()) != 0 {
		t.Errorf("GetAllocatableResources before SetAllocatable = %v, %v; want empty", resp, err)
	}
	want := &podresourcesv1.AllocatableResourcesResponse{Devices: []*podresourcesv1.ContainerDevices{
		{ResourceName: "nvidia.com/gpu", DeviceIds: []string{"nvidia0", "nvidia1"}},
	}}
	srv.SetAllocatable(func() *podresourcesv1.AllocatableResourcesResponse { return want })
	resp, err = api.GetAllocatableResources(ctx, &podresourcesv1.AllocatableResourcesRequest{})
	if err != nil || !proto.Equal(resp, want) {
		t.Errorf("GetAllocatableResources = %v, %v; want %v", resp, err, want)
	}
	if got := srv.Calls(); got != 0 {
		t.Errorf("Calls() = %d, want 0: only List calls count", got)
	}
}
