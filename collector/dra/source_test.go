package dra

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap/zaptest"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/gpuxray/gpuxray/collector"
	"github.com/gpuxray/gpuxray/internal/testtool"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// klog's flush daemon, started when client-go is imported.
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
	)
}

const (
	node   = "gpu-node-1"
	driver = "gpu.nvidia.com"

	uuid0   = "GPU-3b9f1e2a-7c4d-4e8f-9a1b-2c3d4e5f6a7b"
	uuid1   = "GPU-4c0a2f3b-8d5e-4f90-ab2c-3d4e5f6a7b8c"
	uuid2   = "GPU-5d1b3a4c-9e6f-4a01-bc3d-4e5f6a7b8c9d"
	migUUID = "MIG-8f6c2d1e-4b3a-5c6d-7e8f-9a0b1c2d3e4f"
)

// wire returns a v1 slice as the client decodes it from the API server's
// JSON.
func wire(t *testing.T, sl *resourcev1.ResourceSlice) *ResourceSlice {
	t.Helper()
	b, err := json.Marshal(sl)
	if err != nil {
		t.Fatal(err)
	}
	var out ResourceSlice
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

func pemCert(srv *httptest.Server) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}

func str(v string) resourcev1.DeviceAttribute { return resourcev1.DeviceAttribute{StringValue: &v} }

type attrs = map[resourcev1.QualifiedName]resourcev1.DeviceAttribute

// gpuDevice is a whole GPU as NVIDIA's driver announces it: gpu-<minor>,
// with its UUID in "uuid" (or, qualified, "gpu.nvidia.com/uuid").
func gpuDevice(minor int, uuidKey, uuid string) resourcev1.Device {
	a := attrs{
		"type": str("gpu"), "productName": str("NVIDIA H100 80GB HBM3"), "brand": str("Nvidia"),
		"architecture": str("Hopper"), "driverVersion": {VersionValue: new("580.95.5")},
		"resource.kubernetes.io/pciBusID": str(fmt.Sprintf("0000:%02x:00.0", 0x18+minor)),
	}
	if uuid != "" {
		a[resourcev1.QualifiedName(uuidKey)] = str(uuid)
	}
	return resourcev1.Device{Name: fmt.Sprintf("gpu-%d", minor), Attributes: a}
}

// migDevice is a MIG device: with a UUID once created, without one while
// it is an abstract partition (dynamic MIG).
func migDevice(name, parent, profile, uuid string) resourcev1.Device {
	a := attrs{"type": str("mig"), "parentUUID": str(parent), "profile": str(profile), "productName": str("NVIDIA H100 80GB HBM3")}
	if uuid != "" {
		a["uuid"] = str(uuid)
	}
	return resourcev1.Device{Name: name, Attributes: a}
}

func resourceSlice(name, drv, nodeName, pool string, generation int64, devs ...resourcev1.Device) *resourcev1.ResourceSlice {
	return &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourcev1.ResourceSliceSpec{
			Driver: drv, NodeName: &nodeName,
			Pool:    resourcev1.ResourcePool{Name: pool, Generation: generation, ResourceSliceCount: 1},
			Devices: devs,
		},
	}
}

const (
	migName = "gpu-2-mig-1g10gb-19-0"
	// oddMIG is a MIG device without a uuid whose name does not say its
	// profile ID and placement.
	oddMIG = "gpu-2-mig-extra"
	// vfioName is a GPU passed through to VMs.
	vfioName = "gpu-vfio-3"
)

// nodeSlices are a node's slices: NVIDIA's driver's GPUs (one with its UUID
// under the qualified name, a dynamic MIG partition, which has no uuid, a
// MIG device of no canonical name, and a GPU passed through to VMs, whose
// uuid is the driver's own), a NIC driver's, and another node's.
func nodeSlices() []*resourcev1.ResourceSlice {
	vfio := resourcev1.Device{Name: vfioName, Attributes: attrs{"type": str("vfio"), "uuid": str("4a4c4b1e-5d5e-5f60-8a61-626364656667")}}
	return []*resourcev1.ResourceSlice{
		resourceSlice("gpu-node-1-gpu.nvidia.com-a", driver, node, node, 1,
			gpuDevice(0, "uuid", uuid0), gpuDevice(1, "gpu.nvidia.com/uuid", uuid1),
			migDevice(migName, uuid2, "1g.10gb", ""), migDevice(oddMIG, uuid2, "1g.10gb", ""), vfio),
		resourceSlice("gpu-node-1-nic.example.com-a", "nic.example.com", node, node, 1,
			resourcev1.Device{Name: "gpu-0", Attributes: attrs{"uuid": str(uuid2)}}),
		resourceSlice("gpu-node-2-gpu.nvidia.com-a", driver, "gpu-node-2", "gpu-node-2", 1, gpuDevice(0, "uuid", uuid2)),
	}
}

// run starts a Source against the server and stops it at the end of the
// test, before the server closes (Close waits for open watches).
func run(t *testing.T, api *apiServer, cfg Config) (*Source, *Client) {
	t.Helper()
	client, err := NewClient(api.restConfig())
	if err != nil {
		t.Fatal(err)
	}
	src, err := New(cfg, client, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := src.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after its context was cancelled")
		}
	})
	return src, client
}

func waitSync(t *testing.T, src *Source) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if !src.WaitForSync(ctx) {
		t.Fatal("the source did not sync")
	}
}

func waitRV(t *testing.T, src *Source, rv string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := src.WaitForResourceVersion(ctx, rv); err != nil {
		t.Fatal(err)
	}
}

// resolves checks what Resolve answers for a device of the GPU driver.
// resolvesPlacement checks that device resolves to the MIG instance of
// parent with GI profile ID profileID placed at start: NVIDIA's driver
// names a dynamic MIG partition so and publishes no uuid for it.
func resolvesPlacement(t *testing.T, src *Source, device, parent string, profileID, start int, profile string) {
	t.Helper()
	ref, err := src.Resolve(driver, node, device)
	want := collector.DeviceRef{ID: device, Kind: collector.RefMIGPlacement, UUID: parent, GIProfile: profileID, Placement: start, Profile: profile}
	if err != nil || ref != want {
		t.Errorf("Resolve(%s) = %+v, %v; want %+v", device, ref, err, want)
	}
}

func resolves(t *testing.T, src *Source, device, wantUUID string, wantErr error) {
	t.Helper()
	ref, err := src.Resolve(driver, node, device)
	if wantErr != nil {
		if !errors.Is(err, wantErr) {
			t.Errorf("Resolve(%s) = %+v, %v; want %v", device, ref, err, wantErr)
		}
		return
	}
	if err != nil || ref.UUID != wantUUID || ref.Kind != collector.RefUUID || ref.ID != wantUUID {
		t.Errorf("Resolve(%s) = %+v, %v; want %s", device, ref, err, wantUUID)
	}
}

func takeHealth(t *testing.T, src *Source, what string, want func(up bool, errs []error) bool) []error {
	t.Helper()
	var all []error
	testtool.Eventually(t, what, func() bool {
		up, errs := src.Health()
		all = append(all, errs...)
		return want(up, all)
	})
	return all
}

func reasons(errs []error) map[string]int {
	out := map[string]int{}
	for _, err := range errs {
		var se *collector.SourceError
		if !errors.As(err, &se) || se.Source != collector.SourceDRA {
			out["not a dra SourceError: "+err.Error()]++
			continue
		}
		out[se.Reason]++
	}
	return out
}

// TestListWatch runs a Source against a loopback API server that serves
// one version of resource.k8s.io: the first list resolves the node's GPUs
// (unqualified and qualified UUID attributes), a MIG device the driver
// then creates resolves once its slice is updated with its UUID, and a
// deleted slice's devices no longer resolve. Every request asks for this
// node's slices only, and the client falls back from v1 to the version
// served.
func TestListWatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		version  string
		useTLS   bool
		jsonOnly bool
		// wantLists are the versions the first lists asked for.
		wantLists []string
	}{
		{"v1", "v1", true, false, []string{"v1"}},
		{"v1beta2 on a 1.33 server", "v1beta2", true, false, []string{"v1", "v1beta2"}},
		{"v1beta1 on a 1.32 server", "v1beta1", true, false, []string{"v1", "v1beta2", "v1beta1"}},
		{"json only", "v1", true, true, []string{"v1"}},
		{"plain http (replay's simulator)", "v1", false, true, []string{"v1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			api := newAPIServer(t, tt.useTLS, tt.jsonOnly, tt.version)
			for _, sl := range nodeSlices() {
				api.put(sl, true)
			}
			src, client := run(t, api, DefaultConfig(node))
			waitSync(t, src)
			if got := client.Version(); got != tt.version {
				t.Errorf("Version() = %q, want %q", got, tt.version)
			}

			resolves(t, src, "gpu-0", uuid0, nil)
			resolves(t, src, "gpu-1", uuid1, nil)
			resolvesPlacement(t, src, migName, uuid2, 19, 0, "1g.10gb")
			resolves(t, src, oddMIG, "", ErrNoUUID)
			resolves(t, src, vfioName, "", ErrPassthrough)
			resolves(t, src, "gpu-7", "", ErrUnknownDevice)
			if _, err := src.Resolve("nic.example.com", node, "gpu-0"); !errors.Is(err, ErrUnknownDevice) {
				t.Errorf("a NIC driver's device resolved: %v", err)
			}
			if _, err := src.Resolve(driver, "gpu-node-2", "gpu-0"); !errors.Is(err, ErrUnknownDevice) {
				t.Errorf("another node's device resolved: %v", err)
			}

			// The driver creates the MIG device and republishes the slice
			// with its UUID: seen through the watch.
			testtool.Eventually(t, "a watch is open", func() bool {
				reqs := api.requests()
				return len(reqs) > 0 && reqs[len(reqs)-1].isWatch() && reqs[len(reqs)-1].status == 200
			})
			created := nodeSlices()[0]
			created.Spec.Pool.Generation = 2
			created.Spec.Devices[2] = migDevice(migName, uuid2, "1g.10gb", migUUID)
			waitRV(t, src, api.put(created, true))
			resolves(t, src, migName, migUUID, nil)

			waitRV(t, src, api.remove(created.Name))
			resolves(t, src, "gpu-0", "", ErrUnknownDevice)
			resolves(t, src, migName, "", ErrUnknownDevice)

			reqs := api.requests()
			var lists []string
			for i, r := range reqs {
				if r.query.Get("fieldSelector") != "spec.nodeName="+node {
					t.Errorf("request %d: field selector %q, want spec.nodeName=%s", i, r.query.Get("fieldSelector"), node)
				}
				if r.userAgent != "gpuxray" || r.accept != jsonType || r.auth != "Bearer not-a-real-token" {
					t.Errorf("request %d: User-Agent %q, Accept %q, Authorization %q", i, r.userAgent, r.accept, r.auth)
				}
				if r.isWatch() {
					if r.version != tt.version || r.query.Get("sendInitialEvents") != "" {
						t.Errorf("request %d: watch of %s with query %v, want a plain watch of %s", i, r.version, r.query, tt.version)
					}
					continue
				}
				lists = append(lists, r.version)
			}
			if !slices.Equal(lists, tt.wantLists) {
				t.Errorf("lists asked for versions %q, want %q", lists, tt.wantLists)
			}
			if errs := takeHealth(t, src, "the source is up", func(up bool, _ []error) bool { return up }); len(errs) != 0 {
				t.Errorf("errors counted: %v", errs)
			}
		})
	}
}

// TestExpiredWatchRelists ends the watch with 410 Gone after a change the
// watch never sent: the reflector lists again, the change is seen, and the
// normal end of a watch is not counted as a failure.
func TestExpiredWatchRelists(t *testing.T) {
	t.Parallel()
	api := newAPIServer(t, true, false, "v1")
	for _, sl := range nodeSlices() {
		api.put(sl, true)
	}
	src, _ := run(t, api, DefaultConfig(node))
	waitSync(t, src)
	resolvesPlacement(t, src, migName, uuid2, 19, 0, "1g.10gb")

	created := nodeSlices()[0]
	created.Spec.Devices[2] = migDevice(migName, uuid2, "1g.10gb", migUUID)
	rv := api.put(created, false)
	api.expire()
	waitRV(t, src, rv)
	resolves(t, src, migName, migUUID, nil)

	var lists int
	for _, r := range api.requests() {
		if !r.isWatch() {
			lists++
		}
	}
	if lists != 2 {
		t.Errorf("%d lists, want 2 (the first, and the one after 410 Gone)", lists)
	}
	if errs := takeHealth(t, src, "the source is up", func(up bool, _ []error) bool { return up }); len(errs) != 0 {
		t.Errorf("an expired watch was counted: %v", errs)
	}
}

// TestForbidden: RBAC denies the list, the source is down and counts it,
// no device resolves; granted, it lists and is up.
func TestForbidden(t *testing.T) {
	t.Parallel()
	api := newAPIServer(t, true, false, "v1")
	for _, sl := range nodeSlices() {
		api.put(sl, true)
	}
	api.set(func(s *apiServer) { s.forbidden = true })
	src, _ := run(t, api, DefaultConfig(node))
	errs := takeHealth(t, src, "the refusal is reported", func(up bool, errs []error) bool { return !up && len(errs) > 0 })
	if r := reasons(errs); r[ReasonForbidden] == 0 || len(r) != 1 {
		t.Errorf("reasons = %v, want only %q", r, ReasonForbidden)
	}
	resolves(t, src, "gpu-0", "", ErrNotSynced)

	api.set(func(s *apiServer) { s.forbidden = false })
	takeHealth(t, src, "the source recovers", func(up bool, _ []error) bool { return up })
	resolves(t, src, "gpu-0", uuid0, nil)
}

// TestAPIServerDown: an API server that drops every connection from the
// start leaves every device unresolved and the source down, counted; one
// that goes away later leaves the slices last seen resolvable, the source
// down, and a device not in them unresolved.
func TestAPIServerDown(t *testing.T) {
	t.Parallel()
	t.Run("from the start", func(t *testing.T) {
		t.Parallel()
		api := newAPIServer(t, true, false, "v1")
		api.put(nodeSlices()[0], true)
		api.setDown(true)
		src, _ := run(t, api, DefaultConfig(node))
		errs := takeHealth(t, src, "the failure is reported", func(up bool, errs []error) bool { return !up && len(errs) > 0 })
		if r := reasons(errs); r[ReasonUnavailable] == 0 || len(r) != 1 {
			t.Errorf("reasons = %v, want only %q", r, ReasonUnavailable)
		}
		resolves(t, src, "gpu-0", "", ErrNotSynced)
		if src.HasSynced() {
			t.Error("synced without a list")
		}
	})
	t.Run("later", func(t *testing.T) {
		t.Parallel()
		api := newAPIServer(t, true, false, "v1")
		api.put(nodeSlices()[0], true)
		src, _ := run(t, api, DefaultConfig(node))
		waitSync(t, src)
		takeHealth(t, src, "up", func(up bool, _ []error) bool { return up })
		api.setDown(true)
		errs := takeHealth(t, src, "the failure is reported", func(up bool, errs []error) bool { return !up && len(errs) > 0 })
		if r := reasons(errs); r[ReasonUnavailable] == 0 || len(r) != 1 {
			t.Errorf("reasons = %v, want only %q", r, ReasonUnavailable)
		}
		resolves(t, src, "gpu-0", uuid0, nil)
		resolves(t, src, "gpu-3", "", ErrUnknownDevice)
		api.setDown(false)
		takeHealth(t, src, "the source recovers", func(up bool, _ []error) bool { return up })
	})
}

// TestNotServed: an API server without resource.k8s.io has no DRA: the
// source is up with nothing to resolve, and counts nothing.
func TestNotServed(t *testing.T) {
	t.Parallel()
	api := newAPIServer(t, true, false)
	src, _ := run(t, api, DefaultConfig(node))
	waitSync(t, src)
	resolves(t, src, "gpu-0", "", ErrUnknownDevice)
	if errs := takeHealth(t, src, "up", func(up bool, _ []error) bool { return up }); len(errs) != 0 {
		t.Errorf("errors counted: %v", errs)
	}
	var versions []string
	for _, r := range api.requests()[:3] {
		versions = append(versions, r.version)
	}
	if want := []string{"v1", "v1beta2", "v1beta1"}; !slices.Equal(versions, want) {
		t.Errorf("first requests asked for %q, want %q", versions, want)
	}
}

// TestNotServedAsksOnce: a cluster without resource.k8s.io is found so by
// the first list's three GETs; lists after that make no request until
// RecheckNotServed has passed, then one GET of the group, and the lists
// again once the group is served (an upgrade).
func TestNotServedAsksOnce(t *testing.T) {
	t.Parallel()
	api := newAPIServer(t, false, false)
	client, err := NewClient(api.restConfig())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1e9, 0)
	client.now = func() time.Time { return now }
	ctx := context.Background()
	for i := range 5 {
		if _, err := client.List(ctx, metav1.ListOptions{}); !errors.Is(err, ErrNotServed) {
			t.Fatalf("list %d: %v, want ErrNotServed", i, err)
		}
		if _, err := client.ListClaims(ctx, "ml", metav1.ListOptions{}); !errors.Is(err, ErrNotServed) {
			t.Fatalf("claims list %d: %v, want ErrNotServed", i, err)
		}
	}
	if n := len(api.requests()); n != 3 {
		t.Errorf("%d requests for ten lists, want the first list's 3", n)
	}
	now = now.Add(RecheckNotServed)
	for range 3 {
		if _, err := client.List(ctx, metav1.ListOptions{}); !errors.Is(err, ErrNotServed) {
			t.Fatalf("after %s: %v, want ErrNotServed", RecheckNotServed, err)
		}
	}
	if n := len(api.requests()); n != 4 {
		t.Errorf("%d requests, want 4: one more GET of the group after %s", n, RecheckNotServed)
	}
	api.set(func(s *apiServer) { s.served["v1"] = true })
	now = now.Add(RecheckNotServed)
	if _, err := client.List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node}); err != nil {
		t.Fatalf("after the upgrade: %v", err)
	}
}

// TestBookmark: a bookmark moves the resource version on without an
// object; WaitForResourceVersion sees it.
func TestBookmark(t *testing.T) {
	t.Parallel()
	api := newAPIServer(t, true, false, "v1")
	api.put(nodeSlices()[0], true)
	src, _ := run(t, api, DefaultConfig(node))
	waitSync(t, src)
	testtool.Eventually(t, "a watch is open", func() bool {
		reqs := api.requests()
		return reqs[len(reqs)-1].isWatch()
	})
	rv := api.bookmark()
	waitRV(t, src, rv)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := src.WaitForResourceVersion(ctx, "999999"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitForResourceVersion of a future version = %v, want a deadline", err)
	}
}

// TestStore drives the store as the reflector does: pool generations,
// attribute forms and UUIDs that are not UUIDs.
func TestStore(t *testing.T) {
	t.Parallel()
	src, err := New(DefaultConfig(node), &Client{}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	st := (*store)(src)
	resolves(t, src, "gpu-0", "", ErrNotSynced)
	oldGen := resourceSlice("old", driver, node, node, 1, gpuDevice(0, "uuid", uuid2), gpuDevice(5, "uuid", uuid2))
	newGen := resourceSlice("new", driver, node, node, 2, gpuDevice(0, "uuid", uuid0))
	newGen2 := resourceSlice("new-2", driver, node, node, 2, gpuDevice(1, "uuid", uuid1))
	bad := resourceSlice("bad", driver, node, "other-pool", 1,
		gpuDevice(0, "uuid", "not-a-uuid"), gpuDevice(1, "uuid", uuid1+"::1"),
		resourcev1.Device{Name: "gpu-2", Attributes: attrs{"uuid": {IntValue: new(int64(3))}}},
		gpuDevice(3, "example.com/uuid", uuid0))
	if err := st.Replace([]any{wire(t, oldGen), wire(t, newGen), wire(t, newGen2), wire(t, bad)}, "5"); err != nil {
		t.Fatal(err)
	}
	resolves(t, src, "gpu-0", uuid0, nil)           // the newest generation wins
	resolves(t, src, "gpu-1", uuid1, nil)           // from the other slice of that generation
	resolves(t, src, "gpu-5", "", ErrUnknownDevice) // only in an older generation
	for _, dev := range []string{"gpu-0", "gpu-1", "gpu-2", "gpu-3"} {
		if _, err := src.Resolve(driver, "other-pool", dev); !errors.Is(err, ErrNoUUID) {
			t.Errorf("Resolve(other-pool/%s) = %v, want %v", dev, err, ErrNoUUID)
		}
	}
	if got := src.ResourceVersion(); got != "5" {
		t.Errorf("ResourceVersion() = %q, want 5", got)
	}
	if err := st.Delete(wire(t, newGen)); err != nil {
		t.Fatal(err)
	}
	resolves(t, src, "gpu-0", "", ErrUnknownDevice) // generation 2 still has new-2
	if err := st.Delete(wire(t, newGen2)); err != nil {
		t.Fatal(err)
	}
	resolves(t, src, "gpu-5", uuid2, nil) // generation 1 is the newest left
}

func TestConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"default", DefaultConfig("n1"), ""},
		{"qualified attribute", Config{NodeName: "n", Drivers: []string{driver}, UUIDAttribute: "gpu.nvidia.com/uuid"}, ""},
		{"no node", DefaultConfig(""), "NODE_NAME is empty"},
		{"no driver", Config{NodeName: "n", UUIDAttribute: "uuid"}, "no DRA driver is named"},
		{"bad driver", Config{NodeName: "n", Drivers: []string{"GPU NVIDIA"}, UUIDAttribute: "uuid"}, `DRA driver name "GPU NVIDIA" is not a DNS subdomain`},
		{"bad attribute", Config{NodeName: "n", Drivers: []string{driver}, UUIDAttribute: "the uuid"}, `the UUID attribute "the uuid" is not a device attribute name`},
		{"bad domain", Config{NodeName: "n", Drivers: []string{driver}, UUIDAttribute: "Not_A_Domain/uuid"}, "is not a device attribute name"},
		{"empty attribute", Config{NodeName: "n", Drivers: []string{driver}}, `the UUID attribute ""`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.want == "" {
				if err != nil {
					t.Errorf("%s: Validate() = %v, want nil", tt.name, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%s: Validate() = %v, want an error containing %q", tt.name, err, tt.want)
			}
		})
	}
	for _, tt := range []struct {
		attr, driver string
		want         []string
	}{
		{"uuid", driver, []string{"uuid", "gpu.nvidia.com/uuid"}},
		{"gpu.nvidia.com/uuid", driver, []string{"gpu.nvidia.com/uuid", "uuid"}},
		{"example.com/uuid", driver, []string{"example.com/uuid"}},
	} {
		c := Config{UUIDAttribute: tt.attr}
		if got := c.uuidKeys(tt.driver); !slices.Equal(got, tt.want) {
			t.Errorf("uuidKeys(%s) with %s = %q, want %q", tt.driver, tt.attr, got, tt.want)
		}
	}
	if _, err := New(Config{}, &Client{}, nil); err == nil {
		t.Error("New with an invalid configuration succeeded")
	}
	if _, err := New(DefaultConfig(node), nil, nil); err == nil {
		t.Error("New with no client succeeded")
	}
}

func TestLoadConfig(t *testing.T) {
	t.Parallel()
	path := t.TempDir() + "/kubeconfig"
	kc := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: not-a-real-token}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	rc, err := LoadConfig(path)
	if err != nil || rc.Host != "https://127.0.0.1:6443" || rc.BearerToken != "not-a-real-token" {
		t.Fatalf("LoadConfig = %+v, %v", rc, err)
	}
	if c, err := NewClient(rc); err != nil || c.Version() != "v1" {
		t.Fatalf("NewClient = %v, %v", c, err)
	}
	if os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		return
	}
	if _, err := LoadConfig(""); err == nil {
		t.Error("LoadConfig in-cluster succeeded outside a cluster")
	}
}

func TestRunTwice(t *testing.T) {
	t.Parallel()
	api := newAPIServer(t, true, false, "v1")
	src, _ := run(t, api, DefaultConfig(node))
	waitSync(t, src)
	if err := src.Run(context.Background()); err == nil {
		t.Error("a second Run succeeded")
	}
}

// TestDeepCopy: a copy shares nothing with its original.
func TestDeepCopy(t *testing.T) {
	t.Parallel()
	sl := wire(t, nodeSlices()[0])
	sl.Spec.Devices = append(sl.Spec.Devices, Device{Name: "old", Basic: &BasicDevice{Attributes: map[string]DeviceAttribute{"uuid": {String: new(uuid0)}}}})
	list := &ResourceSliceList{ListMeta: metav1.ListMeta{ResourceVersion: "3"}, Items: []ResourceSlice{*sl}}
	cp := list.DeepCopyObject().(*ResourceSliceList)
	if !reflect.DeepEqual(cp, list) {
		t.Fatalf("copy differs:\n%+v\n%+v", cp, list)
	}
	*cp.Items[0].Spec.Devices[0].Attributes["uuid"].String = "changed"
	last := len(sl.Spec.Devices) - 1
	*cp.Items[0].Spec.Devices[last].Basic.Attributes["uuid"].String = "changed"
	cp.Items[0].Labels = map[string]string{"a": "b"}
	if *list.Items[0].Spec.Devices[0].Attributes["uuid"].String != uuid0 || *sl.Spec.Devices[last].Basic.Attributes["uuid"].String != uuid0 || list.Items[0].Labels != nil {
		t.Error("the copy shares its attributes or metadata with the original")
	}
	if (*ResourceSlice)(nil).DeepCopyObject() != nil || (*ResourceSliceList)(nil).DeepCopyObject() != nil {
		t.Error("a nil copy is not nil")
	}
}

// store drives a Source's store as the reflector does, with API objects.
type store Source

func (st *store) Replace(list []any, rv string) error {
	objs := make([]runtime.Object, len(list))
	for i, o := range list {
		objs[i] = o.(runtime.Object)
	}
	return st.lw.ApplyList(objs, rv)
}

func (st *store) Update(obj any) error { return st.lw.Apply(watch.Modified, obj.(runtime.Object)) }

func (st *store) Delete(obj any) error { return st.lw.Apply(watch.Deleted, obj.(runtime.Object)) }

// TestWatchGoneAsStatus: a watch call answered with the HTTP status 410
// Gone (the resource version was compacted while no watch was open) makes
// the reflector list again, and is not counted: the slices changed while
// the log was compacted are seen. Before, the 410 was counted as a failure
// and the source reported down.
func TestWatchGoneAsStatus(t *testing.T) {
	t.Parallel()
	api := newAPIServer(t, true, false, "v1")
	for _, sl := range nodeSlices() {
		api.put(sl, true)
	}
	api.set(func(s *apiServer) { s.goneStatus = true })
	src, _ := run(t, api, DefaultConfig(node))
	waitSync(t, src)
	testtool.Eventually(t, "a watch is open", func() bool {
		reqs := api.requests()
		return reqs[len(reqs)-1].isWatch() && reqs[len(reqs)-1].status == 200
	})
	// An event on the watch, so that its end below is not one of a watch
	// cut at once.
	waitRV(t, src, api.bookmark())
	takeHealth(t, src, "up", func(up bool, _ []error) bool { return up })

	created := nodeSlices()[0]
	created.Spec.Devices[2] = migDevice(migName, uuid2, "1g.10gb", migUUID)
	rv := api.put(created, false)
	api.set(func(s *apiServer) { s.compacted, s.log = s.rv, nil })
	api.srv.CloseClientConnections() // the watch ends; the next is from a compacted version
	waitRV(t, src, rv)
	resolves(t, src, migName, migUUID, nil)

	var gone int
	for _, r := range api.requests() {
		if r.isWatch() && r.status == http.StatusGone {
			gone++
		}
	}
	if gone == 0 {
		t.Fatal("no watch was answered 410: the test did not test")
	}
	if errs := takeHealth(t, src, "the source is up", func(up bool, _ []error) bool { return up }); len(errs) != 0 {
		t.Errorf("a 410 Gone watch was counted: %v", errs)
	}
}

// TestNotServedAfterListed: an API server that answers 404 for every
// version of resource.k8s.io after the slices were listed (an aggregated
// API gone, a downgrade) is a failure, counted, and the slices last seen
// still resolve, as docs/dra.md promises. Before, the 404 wiped them and
// the source stayed up.
func TestNotServedAfterListed(t *testing.T) {
	t.Parallel()
	api := newAPIServer(t, true, false, "v1")
	api.put(nodeSlices()[0], true)
	src, _ := run(t, api, DefaultConfig(node))
	waitSync(t, src)
	takeHealth(t, src, "up", func(up bool, _ []error) bool { return up })
	api.set(func(s *apiServer) { s.served = map[string]bool{} })
	api.expire() // the watch ends with 410: the reflector lists, and finds nothing served
	// Rounds are sequential: once a second list has been answered 404, the
	// first one's answer has been handled.
	testtool.Eventually(t, "two lists answered 404", func() bool {
		n := 0
		for _, r := range api.requests() {
			if !r.isWatch() && r.status == http.StatusNotFound && r.version == "v1beta1" {
				n++
			}
		}
		return n >= 2
	})
	errs := takeHealth(t, src, "the 404 is reported", func(up bool, errs []error) bool { return !up && len(errs) > 0 })
	if r := reasons(errs); r[ReasonOther] == 0 {
		t.Errorf("reasons = %v, want other", r)
	}
	resolves(t, src, "gpu-0", uuid0, nil)
	resolves(t, src, "gpu-1", uuid1, nil)
	if !src.HasSynced() {
		t.Error("not synced")
	}
}

// TestSliceBounds: a slice beyond the API's bounds is refused (more than
// 128 devices), and attribute values longer than the API's 64 bytes are
// not kept: a 1 MiB attribute costs nothing when a device is resolved.
// Before, the slice was kept whole and each unresolved device's error
// quoted its megabyte of attributes at every poll.
func TestSliceBounds(t *testing.T) {
	t.Parallel()
	src, err := New(DefaultConfig(node), &Client{}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	st := (*store)(src)
	huge := strings.Repeat("x", 1<<20)
	mib := resourceSlice("mib", driver, node, node, 1,
		resourcev1.Device{Name: "gpu-0", Attributes: attrs{"type": str(huge), "parentUUID": str(huge), "profile": str(huge)}},
		gpuDevice(1, "uuid", "GPU-"+huge))
	var many []resourcev1.Device
	for i := range 129 {
		many = append(many, gpuDevice(i, "uuid", uuid0))
	}
	tooMany := resourceSlice("too-many", driver, node, "other-pool", 1, many...)
	if err := st.Replace([]any{wire(t, mib), wire(t, tooMany)}, "5"); err != nil {
		t.Fatal(err)
	}
	for _, dev := range []string{"gpu-0", "gpu-1"} {
		_, err := src.Resolve(driver, node, dev)
		if !errors.Is(err, ErrNoUUID) {
			t.Errorf("Resolve(%s) = %v, want %v", dev, err, ErrNoUUID)
		}
		if err != nil && len(err.Error()) > 1024 {
			t.Errorf("Resolve(%s): an error of %d bytes", dev, len(err.Error()))
		}
	}
	if _, err := src.Resolve(driver, "other-pool", "gpu-0"); !errors.Is(err, ErrUnknownDevice) {
		t.Errorf("a slice of 129 devices was kept: %v", err)
	}
	_, errs := src.Health()
	if r := reasons(errs); r["too_large"] != 1 || len(r) != 1 {
		t.Errorf("reasons = %v, want one too_large", r)
	}
}

// TestWatchCutAtOnce: watches that the server (or a proxy) ends at once
// with no event are counted (unavailable) and the source is down; client-go
// backs off between them. Before, nothing was counted and the source
// stayed up while it relisted every few seconds.
func TestWatchCutAtOnce(t *testing.T) {
	t.Parallel()
	api := newAPIServer(t, true, false, "v1")
	api.put(nodeSlices()[0], true)
	api.set(func(s *apiServer) { s.cutWatches = true })
	src, _ := run(t, api, DefaultConfig(node))
	waitSync(t, src)
	errs := takeHealth(t, src, "the cut watches are counted", func(up bool, errs []error) bool { return !up && len(errs) >= 2 })
	if r := reasons(errs); r[ReasonUnavailable] < 2 || len(r) != 1 {
		t.Errorf("reasons = %v, want only unavailable", r)
	}
	resolves(t, src, "gpu-0", uuid0, nil)
	api.set(func(s *apiServer) { s.cutWatches = false })
	takeHealth(t, src, "up once watches last", func(up bool, _ []error) bool { return up })
}
