package kubelet_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuxray/gpuxray/internal/testtool"

	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpuxray/gpuxray/collector"
	"github.com/gpuxray/gpuxray/collector/kubelet"
	"github.com/gpuxray/gpuxray/collector/sim"
)

const (
	uuidA = "GPU-3b9f1e2a-7c4d-4e8f-9a1b-2c3d4e5f6a7b"
	uuidB = "GPU-4c0a2f3b-8d5e-4f90-ab2c-3d4e5f6a7b8c"
	uuidC = "GPU-5d1b3a4c-9e6f-4a01-bc3d-4e5f6a7b8c9d"
	uuidD = "GPU-6e2c4b5d-af70-4b12-cd4e-5f6a7b8c9dae"
	uuidE = "GPU-7f3d5c6e-b081-4c23-de5f-6a7b8c9daebf"
	migA  = "MIG-8f6c2d1e-4b3a-5c6d-7e8f-9a0b1c2d3e4f"
)

// start is the fake clock's origin.
var start = time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)

// fakeClock is a clock that moves only when told to.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func socketPath(t *testing.T) string { return testtool.SocketPath(t, "kubelet.sock") }

// serve starts a fake kubelet answering list on a fresh socket.
func serve(t *testing.T, list func() *podresourcesv1.ListPodResourcesResponse) (*sim.KubeletServer, string) {
	t.Helper()
	srv := sim.NewKubeletServer(list)
	path := socketPath(t)
	if err := srv.Start(path); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(srv.Stop)
	return srv, path
}

// newClient returns a client of the socket on a fake clock.
func newClient(t *testing.T, socket string, mutate func(*kubelet.Config)) (*kubelet.Client, *fakeClock) {
	t.Helper()
	clock := &fakeClock{now: start}
	cfg := kubelet.DefaultConfig()
	cfg.Socket, cfg.Clock = socket, clock
	if mutate != nil {
		mutate(&cfg)
	}
	c, err := kubelet.New(cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c, clock
}

func pod(namespace, name string, containers ...*podresourcesv1.ContainerResources) *podresourcesv1.PodResources {
	return &podresourcesv1.PodResources{Namespace: namespace, Name: name, Containers: containers}
}

func container(name string, devices ...*podresourcesv1.ContainerDevices) *podresourcesv1.ContainerResources {
	return &podresourcesv1.ContainerResources{Name: name, Devices: devices}
}

func devices(resource string, ids ...string) *podresourcesv1.ContainerDevices {
	return &podresourcesv1.ContainerDevices{ResourceName: resource, DeviceIds: ids}
}

func answer(pods ...*podresourcesv1.PodResources) func() *podresourcesv1.ListPodResourcesResponse {
	return func() *podresourcesv1.ListPodResourcesResponse {
		return &podresourcesv1.ListPodResourcesResponse{PodResources: pods}
	}
}

// alloc builds the expected allocation of one device ID.
func alloc(t *testing.T, namespace, pod, container, resource, id string, shared bool) collector.Allocation {
	t.Helper()
	ref, err := collector.ParseDeviceID(id)
	if err != nil {
		t.Fatalf("bad test device ID %q: %v", id, err)
	}
	return collector.Allocation{Namespace: namespace, Pod: pod, Container: container, Resource: resource, Device: ref, Shared: shared}
}

// sourceReason returns the reason of a *collector.SourceError from the kubelet.
func sourceReason(t *testing.T, err error) string {
	t.Helper()
	var se *collector.SourceError
	if !errors.As(err, &se) {
		t.Fatalf("error %v is not a *collector.SourceError", err)
	}
	if se.Source != collector.SourceKubelet {
		t.Errorf("SourceError.Source = %q, want %q", se.Source, collector.SourceKubelet)
	}
	return se.Reason
}

// realistic is a node's answer with every device ID form, listed out of order.
var realistic = answer(
	pod("serving", "llm-0",
		container("server", devices("nvidia.com/gpu", uuidC+"::1", uuidC+"::0")),
		container("proxy"),
	),
	pod("research", "llama-train-0",
		container("trainer",
			devices("nvidia.com/gpu", uuidB, uuidA),
			devices("example.com/fpga", "fpga0"),
			devices("cpu"),
		),
		container("sidecar", devices("example.com/vgpu", uuidE)),
	),
	pod("research", "mig-job", container("worker", devices("nvidia.com/mig-1g.10gb", migA))),
	pod("serving", "embed-0", container("server", devices("nvidia.com/gpu.shared", uuidD))),
	pod("gke", "gke-0", container("main", devices("nvidia.com/gpu", "nvidia1/gi2", "nvidia0"))),
	pod("research", "broken", container("main", devices("nvidia.com/gpu", "GPU-xyz", uuidA+"::x"))),
	pod("kube-system", "dns"),
)

func TestListConverts(t *testing.T) {
	t.Parallel()
	base := []collector.Allocation{
		alloc(t, "gke", "gke-0", "main", "nvidia.com/gpu", "nvidia0", false),
		alloc(t, "gke", "gke-0", "main", "nvidia.com/gpu", "nvidia1/gi2", false),
		alloc(t, "research", "llama-train-0", "trainer", "nvidia.com/gpu", uuidA, false),
		alloc(t, "research", "llama-train-0", "trainer", "nvidia.com/gpu", uuidB, false),
		alloc(t, "research", "mig-job", "worker", "nvidia.com/mig-1g.10gb", migA, false),
		alloc(t, "serving", "embed-0", "server", "nvidia.com/gpu.shared", uuidD, true),
		alloc(t, "serving", "llm-0", "server", "nvidia.com/gpu", uuidC+"::0", true),
		alloc(t, "serving", "llm-0", "server", "nvidia.com/gpu", uuidC+"::1", true),
	}
	// "sidecar" sorts before "trainer".
	withExtra := append(base[:2:2],
		alloc(t, "research", "llama-train-0", "sidecar", "example.com/vgpu", uuidE, false))
	withExtra = append(withExtra, base[2:]...)

	tests := []struct {
		name  string
		extra []string
		want  []collector.Allocation
	}{
		{"default resources", nil, base},
		{"extra resource", []string{"example.com/vgpu"}, withExtra},
		{"extra names match exactly", []string{"example.com/vgpu-other", "example.com"}, base},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv, path := serve(t, realistic)
			c, _ := newClient(t, path, func(cfg *kubelet.Config) { cfg.ResourceNames = tt.extra })
			list, err := c.List(t.Context())
			if err != nil {
				t.Fatalf("List: %v", err)
			}
			if list.Stale || !list.At.Equal(start) {
				t.Errorf("List: Stale %v At %v, want fresh at %v", list.Stale, list.At, start)
			}
			if !reflect.DeepEqual(list.Allocations, tt.want) {
				t.Errorf("List allocations:\n got %+v\nwant %+v", list.Allocations, tt.want)
			}
			if got := c.MalformedTotal(); got != 2 {
				t.Errorf("MalformedTotal() = %d, want 2", got)
			}
			if got := srv.Calls(); got != 1 {
				t.Errorf("kubelet served %d calls, want 1", got)
			}
		})
	}
}

func TestListDeadline(t *testing.T) {
	t.Parallel()
	srv, path := serve(t, realistic)
	c, clock := newClient(t, path, func(cfg *kubelet.Config) { cfg.Timeout = 200 * time.Millisecond })
	good, err := c.List(t.Context())
	if err != nil {
		t.Fatalf("List: %v", err)
	}

	srv.SetDelay(time.Minute)
	clock.Advance(time.Second)
	began := time.Now()
	list, err := c.List(t.Context())
	if reason := sourceReason(t, err); reason != kubelet.ReasonDeadline {
		t.Errorf("reason = %q, want %q (err %v)", reason, kubelet.ReasonDeadline, err)
	}
	// Half the server's delay: a List that waited for it would take a minute.
	if elapsed := time.Since(began); elapsed > 30*time.Second {
		t.Errorf("List took %s with a 200ms timeout", elapsed)
	}
	want := good
	want.Stale = true
	if !reflect.DeepEqual(list, want) {
		t.Errorf("List after deadline = %+v, want the last good list marked stale: %+v", list, want)
	}
}

func TestListNeverGood(t *testing.T) {
	t.Parallel()
	c, _ := newClient(t, socketPath(t), nil) // nothing listens there
	list, err := c.List(t.Context())
	if reason := sourceReason(t, err); reason != kubelet.ReasonUnavailable {
		t.Errorf("reason = %q, want %q (err %v)", reason, kubelet.ReasonUnavailable, err)
	}
	if want := (collector.AllocationList{Stale: true}); !reflect.DeepEqual(list, want) {
		t.Errorf("List = %+v, want %+v", list, want)
	}
}

func TestListBackoff(t *testing.T) {
	t.Parallel()
	srv, path := serve(t, realistic)
	c, clock := newClient(t, path, nil)
	good, err := c.List(t.Context())
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	wantStale := good
	wantStale.Stale = true

	srv.SetError(codes.ResourceExhausted)
	// list calls once and checks whether the call reached the kubelet.
	list := func(step string, wantSent bool) {
		t.Helper()
		before := srv.Calls()
		got, err := c.List(t.Context())
		if sent := srv.Calls() > before; sent != wantSent {
			t.Fatalf("%s: call reached the kubelet: %v, want %v", step, sent, wantSent)
		}
		if !reflect.DeepEqual(got, wantStale) {
			t.Errorf("%s: List = %+v, want the last good list marked stale", step, got)
		}
		if wantSent {
			if reason := sourceReason(t, err); reason != kubelet.ReasonExhausted {
				t.Errorf("%s: reason = %q, want %q", step, reason, kubelet.ReasonExhausted)
			}
			return
		}
		// Down, but not a SourceError: the refusal was already counted.
		var se *collector.SourceError
		if err != kubelet.ErrBackoff || errors.As(err, &se) {
			t.Errorf("%s: skipped call returned %v, want ErrBackoff itself", step, err)
		}
	}

	list("first refusal", true)
	// Each refusal doubles the window, up to 30s.
	for _, window := range []time.Duration{1, 2, 4, 8, 16, 30, 30} {
		window *= time.Second
		clock.Advance(window - time.Millisecond)
		list(fmt.Sprintf("within %s", window), false)
		if _, err := c.Allocatable(t.Context()); err != kubelet.ErrBackoff {
			t.Errorf("Allocatable within %s: %v, want ErrBackoff", window, err)
		}
		clock.Advance(time.Millisecond)
		list(fmt.Sprintf("after %s", window), true)
	}

	// A success ends the backoff and resets the window to 1s.
	srv.SetError(codes.OK)
	clock.Advance(30 * time.Second)
	fresh, err := c.List(t.Context())
	if err != nil || fresh.Stale || !fresh.At.Equal(clock.Now()) {
		t.Fatalf("List after backoff = %+v, %v; want fresh", fresh, err)
	}
	wantStale = fresh
	wantStale.Stale = true
	srv.SetError(codes.ResourceExhausted)
	list("refusal after success", true)
	clock.Advance(time.Second)
	list("after reset window", true)
}

func TestListKubeletRestart(t *testing.T) {
	t.Parallel()
	srv, path := serve(t, realistic)
	c, clock := newClient(t, path, nil)
	good, err := c.List(t.Context())
	if err != nil {
		t.Fatalf("List: %v", err)
	}

	srv.Stop()
	clock.Advance(time.Second)
	list, err := c.List(t.Context())
	if reason := sourceReason(t, err); reason != kubelet.ReasonUnavailable {
		t.Errorf("reason while stopped = %q, want %q (err %v)", reason, kubelet.ReasonUnavailable, err)
	}
	if !list.Stale || !list.At.Equal(good.At) || !reflect.DeepEqual(list.Allocations, good.Allocations) {
		t.Errorf("List while stopped = %+v, want the last good list marked stale", list)
	}

	if err := srv.Start(path); err != nil {
		t.Fatalf("restart: %v", err)
	}
	// gRPC reconnects after its own backoff (at most 5s); poll as the engine would.
	deadline := time.Now().Add(15 * time.Second)
	for {
		clock.Advance(time.Second)
		list, err = c.List(t.Context())
		if err == nil || time.Now().After(deadline) {
			break
		}
		if reason := sourceReason(t, err); reason != kubelet.ReasonUnavailable {
			t.Fatalf("reason while reconnecting = %q, want %q (err %v)", reason, kubelet.ReasonUnavailable, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("List after restart: %v", err)
	}
	if list.Stale || !list.At.Equal(clock.Now()) || !reflect.DeepEqual(list.Allocations, good.Allocations) {
		t.Errorf("List after restart = %+v, want a fresh copy of the first answer", list)
	}
}

func TestListLargeAnswer(t *testing.T) {
	t.Parallel()
	const pods, perPod = 2000, 50
	var resp podresourcesv1.ListPodResourcesResponse
	for p := range pods {
		ids := make([]string, perPod)
		for i := range ids {
			ids[i] = fmt.Sprintf("GPU-%08x-7c4d-4e8f-9a1b-2c3d4e5f6a7b::%d", p, i)
		}
		resp.PodResources = append(resp.PodResources, pod("batch", fmt.Sprintf("worker-%04d", p),
			container("main", devices("nvidia.com/gpu", ids...))))
	}
	if size := proto.Size(&resp); size <= 4<<20 {
		t.Fatalf("answer is %d bytes, want more than gRPC's 4 MiB default", size)
	}
	_, path := serve(t, func() *podresourcesv1.ListPodResourcesResponse { return &resp })

	tests := []struct {
		name       string
		maxRecv    int
		wantReason string
	}{
		{"default limit", kubelet.DefaultConfig().MaxRecvBytes, ""},
		{"gRPC default limit", 4 << 20, kubelet.ReasonExhausted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, _ := newClient(t, path, func(cfg *kubelet.Config) { cfg.MaxRecvBytes = tt.maxRecv })
			list, err := c.List(t.Context())
			if tt.wantReason != "" {
				if reason := sourceReason(t, err); reason != tt.wantReason {
					t.Errorf("reason = %q, want %q (err %v)", reason, tt.wantReason, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("List: %v", err)
			}
			if got := len(list.Allocations); got != pods*perPod {
				t.Fatalf("List returned %d allocations, want %d", got, pods*perPod)
			}
			first, last := list.Allocations[0], list.Allocations[len(list.Allocations)-1]
			if first.Pod != "worker-0000" || first.Device.ID != "GPU-00000000-7c4d-4e8f-9a1b-2c3d4e5f6a7b::0" ||
				last.Pod != "worker-1999" || !last.Shared {
				t.Errorf("List allocations run from %+v to %+v", first, last)
			}
		})
	}
}

func TestAllocatable(t *testing.T) {
	t.Parallel()
	srv, path := serve(t, realistic)
	srv.SetAllocatable(func() *podresourcesv1.AllocatableResourcesResponse {
		return &podresourcesv1.AllocatableResourcesResponse{Devices: []*podresourcesv1.ContainerDevices{
			devices("nvidia.com/gpu", "nvidia1", "nvidia0", "nvidiaX"),
			devices("nvidia.com/mig-3g.40gb", migA),
			devices("example.com/fpga", "fpga0"),
		}}
	})
	c, _ := newClient(t, path, nil)
	refs, err := c.Allocatable(t.Context())
	if err != nil {
		t.Fatalf("Allocatable: %v", err)
	}
	var ids []string
	for _, r := range refs {
		ids = append(ids, r.ID)
	}
	if want := []string{migA, "nvidia0", "nvidia1"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("Allocatable IDs = %q, want %q", ids, want)
	}
	if got := c.MalformedTotal(); got != 1 {
		t.Errorf("MalformedTotal() = %d, want 1", got)
	}

	srv.SetError(codes.Unavailable)
	if _, err := c.Allocatable(t.Context()); sourceReason(t, err) != kubelet.ReasonUnavailable {
		t.Errorf("Allocatable with the kubelet failing: %v, want reason %q", err, kubelet.ReasonUnavailable)
	}
}

func TestClose(t *testing.T) {
	t.Parallel()
	_, path := serve(t, realistic)
	c, _ := newClient(t, path, nil)
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	list, err := c.List(t.Context())
	if reason := sourceReason(t, err); reason != kubelet.ReasonOther || !list.Stale {
		t.Errorf("List after Close = %+v, %v; want stale and reason %q", list, err, kubelet.ReasonOther)
	}
}

func claim(namespace, name string, resources ...*podresourcesv1.ClaimResource) *podresourcesv1.DynamicResource {
	return &podresourcesv1.DynamicResource{ClaimNamespace: namespace, ClaimName: name, ClaimResources: resources}
}

func claimDevice(driver, pool, device string, shareID ...string) *podresourcesv1.ClaimResource {
	r := &podresourcesv1.ClaimResource{DriverName: driver, PoolName: pool, DeviceName: device,
		CdiDevices: []*podresourcesv1.CDIDevice{{Name: "k8s.gpu.nvidia.com/claim=uid-" + device}}}
	if len(shareID) > 0 {
		r.ShareId = &shareID[0]
	}
	return r
}

// draAlloc builds the expected allocation of one DRA device.
func draAlloc(namespace, pod, container string, d collector.DRADevice, shared bool) collector.Allocation {
	return collector.Allocation{
		Namespace: namespace, Pod: pod, Container: container, Resource: d.Driver,
		Device: collector.DeviceRef{ID: d.Driver + "/" + d.Pool + "/" + d.Device, Kind: collector.RefDRA},
		Shared: shared, DRA: d,
	}
}

// TestListDynamicResources serves, over the real gRPC API, a mixed node: a
// device plugin's GPUs next to GPUs, a MIG device and a NIC allocated
// through DRA claims, one claim shared by two pods, one device shared
// through a share ID, and DRA entries that cannot be used.
func TestListDynamicResources(t *testing.T) {
	t.Parallel()
	const node = "gpu-node-1"
	gpu := func(ns, claimName, device string, share ...string) collector.DRADevice {
		d := collector.DRADevice{ClaimNamespace: ns, Claim: claimName, Driver: "gpu.nvidia.com", Pool: node, Device: device}
		if len(share) > 0 {
			d.ShareID = share[0]
		}
		return d
	}
	withDRA := func(c *podresourcesv1.ContainerResources, claims ...*podresourcesv1.DynamicResource) *podresourcesv1.ContainerResources {
		c.DynamicResources = claims
		return c
	}
	long := strings.Repeat("x", 254)
	_, path := serve(t, answer(
		pod("research", "train-0", withDRA(container("trainer", devices("nvidia.com/gpu", uuidA)),
			claim("research", "train-0-gpus", claimDevice("gpu.nvidia.com", node, "gpu-1"), claimDevice("gpu.nvidia.com", node, "gpu-2")),
			claim("research", "train-0-nic", claimDevice("nic.example.com", node, "eth1")),
		)),
		// Two pods of one notebook share a claim's GPU.
		pod("notebooks", "nb-a", withDRA(container("jupyter"), claim("notebooks", "shared-gpu", claimDevice("gpu.nvidia.com", node, "gpu-3")))),
		pod("notebooks", "nb-b", withDRA(container("jupyter"), claim("", "shared-gpu", claimDevice("gpu.nvidia.com", node, "gpu-3")))),
		// A share of a device that allows several allocations.
		pod("serving", "embed-0", withDRA(container("server"),
			claim("serving", "embed-0-gpu", claimDevice("gpu.nvidia.com", node, "gpu-4", "c0ffee00-0000-4000-8000-000000000001")))),
		pod("serving", "mig-0", withDRA(container("server"),
			claim("serving", "mig-0-gpu", claimDevice("gpu.nvidia.com", node, "gpu-5-mig-1g10gb-19-0")))),
		pod("research", "broken", withDRA(container("main"),
			claim("research", "bad", claimDevice("gpu.nvidia.com", node, ""), claimDevice("gpu.nvidia.com", long, "gpu-6")))),
	))
	c, _ := newClient(t, path, nil)
	list, err := c.List(t.Context())
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	want := []collector.Allocation{
		draAlloc("notebooks", "nb-a", "jupyter", gpu("notebooks", "shared-gpu", "gpu-3"), true),
		draAlloc("notebooks", "nb-b", "jupyter", gpu("notebooks", "shared-gpu", "gpu-3"), true),
		alloc(t, "research", "train-0", "trainer", "nvidia.com/gpu", uuidA, false),
		draAlloc("research", "train-0", "trainer", gpu("research", "train-0-gpus", "gpu-1"), false),
		draAlloc("research", "train-0", "trainer", gpu("research", "train-0-gpus", "gpu-2"), false),
		draAlloc("research", "train-0", "trainer", collector.DRADevice{
			ClaimNamespace: "research", Claim: "train-0-nic", Driver: "nic.example.com", Pool: node, Device: "eth1"}, false),
		draAlloc("serving", "embed-0", "server", gpu("serving", "embed-0-gpu", "gpu-4", "c0ffee00-0000-4000-8000-000000000001"), true),
		draAlloc("serving", "mig-0", "server", gpu("serving", "mig-0-gpu", "gpu-5-mig-1g10gb-19-0"), false),
	}
	if !reflect.DeepEqual(list.Allocations, want) {
		t.Errorf("List allocations:\n got %+v\nwant %+v", list.Allocations, want)
	}
	var reasons []string
	for _, p := range list.Problems {
		reasons = append(reasons, sourceReason(t, p))
	}
	if want := []string{kubelet.ReasonMalformedDeviceID, kubelet.ReasonMalformedDeviceID}; !reflect.DeepEqual(reasons, want) {
		t.Errorf("problems %q, want %q: %v", reasons, want, list.Problems)
	}
	if got := c.MalformedTotal(); got != 2 {
		t.Errorf("MalformedTotal() = %d, want 2", got)
	}
}

// TestListSharedClaimOneContainer checks that a claim one container lists
// under two requests is not taken for a shared one.
func TestListSharedClaimOneContainer(t *testing.T) {
	t.Parallel()
	ctr := container("main")
	ctr.DynamicResources = []*podresourcesv1.DynamicResource{
		claim("ml", "c", claimDevice("gpu.nvidia.com", "n", "gpu-0")),
		claim("ml", "c", claimDevice("gpu.nvidia.com", "n", "gpu-1")),
	}
	_, path := serve(t, answer(pod("ml", "p", ctr)))
	c, _ := newClient(t, path, nil)
	list, err := c.List(t.Context())
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(list.Allocations) != 2 || list.Allocations[0].Shared || list.Allocations[1].Shared {
		t.Errorf("List allocations = %+v, want two exclusive DRA devices", list.Allocations)
	}
}
