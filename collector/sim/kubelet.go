package sim

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// KubeletServer is a fake kubelet that serves the real pod-resources gRPC API
// on a unix socket, with hooks to inject the kubelet's failures. It is safe
// for concurrent use.
type KubeletServer struct {
	podresourcesv1.UnimplementedPodResourcesListerServer

	list func() *podresourcesv1.ListPodResourcesResponse

	mu          sync.Mutex
	srv         *grpc.Server
	path        string
	code        codes.Code
	delay       time.Duration
	allocatable func() *podresourcesv1.AllocatableResourcesResponse
	calls       int
}

// NewKubeletServer returns a server whose List answers list(), called once per
// request; list must not modify a response after returning it, since gRPC
// encodes it concurrently. Until SetAllocatable is called, GetAllocatableResources answers an
// empty list.
func NewKubeletServer(list func() *podresourcesv1.ListPodResourcesResponse) *KubeletServer {
	return &KubeletServer{list: list}
}

// Start listens on socketPath, replacing a stale socket file as a kubelet
// does, and serves in the background until Stop. It may be called again
// after Stop, like a restarted kubelet.
func (s *KubeletServer) Start(socketPath string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return fmt.Errorf("fake kubelet already serving on %s", s.path)
	}
	if err := os.Remove(socketPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove stale socket: %w", err)
	}
	lis, err := net.Listen("unix", socketPath)
	if err != nil {
		return fmt.Errorf("fake kubelet: %w", err)
	}
	srv := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(srv, s)
	s.srv, s.path = srv, socketPath
	// Serve returns when Stop closes the listener; its error says only that.
	go func() { _ = srv.Serve(lis) }()
	return nil
}

// Stop closes every connection at once and removes the socket file, like a
// kubelet going away. Stop on a stopped server does nothing.
func (s *KubeletServer) Stop() {
	s.mu.Lock()
	srv, path := s.srv, s.path
	s.srv = nil
	s.mu.Unlock()
	if srv == nil {
		return
	}
	srv.Stop()
	// The listener usually unlinks the file on close; make sure of it.
	_ = os.Remove(path)
}

// SetError makes every call answer code until SetError(codes.OK).
func (s *KubeletServer) SetError(code codes.Code) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.code = code
}

// SetDelay makes every call wait d before answering, or until the caller's
// deadline, whichever comes first.
func (s *KubeletServer) SetDelay(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay = d
}

// SetAllocatable sets the answer of GetAllocatableResources.
func (s *KubeletServer) SetAllocatable(f func() *podresourcesv1.AllocatableResourcesResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.allocatable = f
}

// Calls is the number of List requests received, failed ones included.
func (s *KubeletServer) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// List implements podresourcesv1.PodResourcesListerServer.
func (s *KubeletServer) List(ctx context.Context, _ *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	s.mu.Lock()
	s.calls++
	s.mu.Unlock()
	if err := s.kubeletFault(ctx); err != nil {
		return nil, err
	}
	return s.kubeletList(), nil
}

// GetAllocatableResources implements podresourcesv1.PodResourcesListerServer.
func (s *KubeletServer) GetAllocatableResources(ctx context.Context, _ *podresourcesv1.AllocatableResourcesRequest) (*podresourcesv1.AllocatableResourcesResponse, error) {
	if err := s.kubeletFault(ctx); err != nil {
		return nil, err
	}
	s.mu.Lock()
	f := s.allocatable
	s.mu.Unlock()
	if f == nil {
		return &podresourcesv1.AllocatableResourcesResponse{}, nil
	}
	if resp := f(); resp != nil {
		return resp, nil
	}
	return &podresourcesv1.AllocatableResourcesResponse{}, nil
}

// Get implements podresourcesv1.PodResourcesListerServer from List's answer.
func (s *KubeletServer) Get(ctx context.Context, req *podresourcesv1.GetPodResourcesRequest) (*podresourcesv1.GetPodResourcesResponse, error) {
	if err := s.kubeletFault(ctx); err != nil {
		return nil, err
	}
	for _, pod := range s.kubeletList().GetPodResources() {
		if pod.GetNamespace() == req.GetPodNamespace() && pod.GetName() == req.GetPodName() {
			return &podresourcesv1.GetPodResourcesResponse{PodResources: pod}, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "pod %s/%s not found", req.GetPodNamespace(), req.GetPodName())
}

// kubeletFault applies the injected delay, then the injected error.
func (s *KubeletServer) kubeletFault(ctx context.Context) error {
	s.mu.Lock()
	code, delay := s.code, s.delay
	s.mu.Unlock()
	if delay > 0 {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		}
	}
	if code != codes.OK {
		return status.Errorf(code, "injected %s", code)
	}
	return nil
}

// kubeletList returns list()'s answer, never nil.
func (s *KubeletServer) kubeletList() *podresourcesv1.ListPodResourcesResponse {
	var resp *podresourcesv1.ListPodResourcesResponse
	if s.list != nil {
		resp = s.list()
	}
	if resp == nil {
		return &podresourcesv1.ListPodResourcesResponse{}
	}
	return resp
}
