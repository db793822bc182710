package node

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"k8s.io/client-go/rest"
)

func TestReconfiguring(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		labels map[string]string
		want   string
	}{
		{map[string]string{"nvidia.com/gpu.present": "true", "nvidia.com/mig.config.state": "success"}, ""},
		{map[string]string{"nvidia.com/mig.config.state": "pending"}, "nvidia.com/mig.config.state=pending"},
		{map[string]string{"nvidia.com/mig.config.state": "rebooting"}, "nvidia.com/mig.config.state=rebooting"},
		{map[string]string{"nvidia.com/mig.config.state": "failed"}, ""},
		{map[string]string{"nvidia.com/gpu-driver-upgrade-state": "drain-required"}, ""},
		{map[string]string{"nvidia.com/gpu-driver-upgrade-state": "pod-restart-required"}, "nvidia.com/gpu-driver-upgrade-state=pod-restart-required"},
		{map[string]string{"nvidia.com/gpu-driver-upgrade-state": "validation-required"}, ""},
		{map[string]string{"nvidia.com/gpu-driver-upgrade-state": "upgrade-done"}, ""},
		// A client the user turned off for good is no reconfiguration.
		{map[string]string{"nvidia.com/gpu.deploy.dcgm-exporter": "false"}, ""},
		{map[string]string{"nvidia.com/gpu.deploy.dcgm-exporter": "true", "nvidia.com/gpu.deploy.device-plugin": "paused-for-driver-upgrade"}, "nvidia.com/gpu.deploy.device-plugin=paused-for-driver-upgrade"},
		{map[string]string{"nvidia.com/gpu.deploy.client": "paused-for-mig-change"}, "nvidia.com/gpu.deploy.client=paused-for-mig-change"},
		// k8s-driver-manager's maybeSetPaused on a value neither true nor false.
		{map[string]string{"nvidia.com/gpu.deploy.dcgm": "custom_paused-for-driver-upgrade"}, "nvidia.com/gpu.deploy.dcgm=custom_paused-for-driver-upgrade"},
	} {
		busy, why := Reconfiguring(tc.labels)
		if busy != (tc.want != "") || why != tc.want {
			t.Errorf("Reconfiguring(%v) = %v, %q; want %q", tc.labels, busy, why, tc.want)
		}
	}
}

// apiServer serves GET /api/v1/nodes/<name> with the labels it holds, as
// PartialObjectMetadata when asked for it, as the API server does.
type apiServer struct {
	mu     sync.Mutex
	labels map[string]string
	status int
	gets   int
}

func (a *apiServer) set(labels map[string]string, status int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.labels, a.status = labels, status
}

func (a *apiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.gets++
	if r.Method != http.MethodGet || r.URL.Path != "/api/v1/nodes/gpu-node-1" {
		http.NotFound(w, r)
		return
	}
	if a.status != 0 {
		w.WriteHeader(a.status)
		w.Write([]byte(`{"kind":"Status","message":"nope"}`))
		return
	}
	obj := map[string]any{"metadata": map[string]any{"name": "gpu-node-1", "labels": a.labels}}
	if r.Header.Get("Accept") == partialMetadata {
		obj["kind"], obj["apiVersion"] = "PartialObjectMetadata", "meta.k8s.io/v1"
	} else {
		obj["kind"], obj["apiVersion"] = "Node", "v1"
		obj["status"] = map[string]any{"images": []any{}}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(obj)
}

func TestClientLabels(t *testing.T) {
	t.Parallel()
	api := &apiServer{labels: map[string]string{"nvidia.com/mig.config.state": "pending"}}
	srv := httptest.NewServer(api)
	defer srv.Close()
	c, err := NewClientFor(&rest.Config{Host: srv.URL}, "gpu-node-1")
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Labels(context.Background())
	if err != nil || got["nvidia.com/mig.config.state"] != "pending" {
		t.Fatalf("Labels() = %v, %v", got, err)
	}
	api.set(nil, http.StatusForbidden)
	if _, err := c.Labels(context.Background()); err == nil {
		t.Fatal("Labels() on 403: no error")
	}
}

// releaser records what the watch does; Release answers false (a call in
// flight) the first busy times.
type releaser struct {
	mu     sync.Mutex
	calls  []string
	refuse int
}

func (r *releaser) Release(reason string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, "release "+reason)
	if r.refuse > 0 {
		r.refuse--
		return false
	}
	return true
}

func (r *releaser) Reacquire() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, "reacquire")
}

func (r *releaser) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// TestWatch: the watch releases while the labels announce a
// reconfiguration, retries a release a call in flight refused, takes NVML
// back after, and does nothing on a failed read.
func TestWatch(t *testing.T) {
	t.Parallel()
	api := &apiServer{labels: map[string]string{}}
	srv := httptest.NewServer(api)
	defer srv.Close()
	c, err := NewClientFor(&rest.Config{Host: srv.URL}, "gpu-node-1")
	if err != nil {
		t.Fatal(err)
	}
	r := &releaser{refuse: 1}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	cfg := Config{Name: "gpu-node-1", Interval: 5 * time.Millisecond, Timeout: time.Second}
	go func() { done <- Watch(ctx, cfg, c, r, zap.NewNop()) }()
	wait := func(want []string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			got := r.seen()
			if len(got) >= len(want) {
				if !slices.Equal(got[:len(want)], want) {
					t.Fatalf("calls %q, want %q", got, want)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("calls %q, want %q", got, want)
			}
		}
	}
	api.set(map[string]string{"nvidia.com/mig.config.state": "pending"}, 0)
	const why = "release nvidia.com/mig.config.state=pending"
	wait([]string{why, why}) // refused once, retried
	api.set(nil, http.StatusServiceUnavailable)
	time.Sleep(30 * time.Millisecond)
	api.set(map[string]string{"nvidia.com/mig.config.state": "success"}, 0)
	got := r.seen()
	wait(append(slices.Clone(got), "reacquire"))
	for _, c := range got {
		if c == "reacquire" {
			t.Fatalf("calls %q: taken back while the node could not be read", got)
		}
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}
