package sim_test

import (
	"context"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	resourcev1 "k8s.io/api/resource/v1"
	resourcev1beta2 "k8s.io/api/resource/v1beta2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpuxray/gpuxray/collector/sim"
)

func loadScenario(t *testing.T, name string) *sim.Scenario {
	t.Helper()
	sc, err := sim.LoadScenario(filepath.Join("..", "..", "test", "scenarios", name))
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func newNode(t *testing.T, sc *sim.Scenario, at time.Duration) (*sim.Node, *sim.VirtualClock) {
	t.Helper()
	clock := sim.NewVirtualClock(sc.Start.Add(at))
	n, err := sim.NewNode(sc, clock)
	if err != nil {
		t.Fatal(err)
	}
	return n, clock
}

// listKubelet serves n's pod resources on a unix socket and lists them
// with the kubelet's generated gRPC client.
func listKubelet(t *testing.T, n *sim.Node) *podresourcesv1.ListPodResourcesResponse {
	t.Helper()
	srv := sim.NewKubeletServer(n.ListResponse)
	path := kubeletSocket(t)
	if err := srv.Start(path); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	resp, err := podresourcesv1.NewPodResourcesListerClient(conn).List(callCtx(t), &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// claimRow is one claim resource as a kubelet client decodes it.
type claimRow struct {
	pod, claimNamespace, claim, driver, pool, device, cdi string
	hasShareID                                            bool
	// cdis is how many CDI devices the device lists: its own and its
	// claim's devices' before it.
	cdis int
}

func claimRows(resp *podresourcesv1.ListPodResourcesResponse) (rows []claimRow, deviceIDs map[string][]string) {
	deviceIDs = map[string][]string{}
	for _, p := range resp.GetPodResources() {
		for _, c := range p.GetContainers() {
			for _, d := range c.GetDevices() {
				deviceIDs[p.GetName()] = append(deviceIDs[p.GetName()], d.GetResourceName()+" "+d.GetDeviceIds()[0])
			}
			for _, dr := range c.GetDynamicResources() {
				for _, cr := range dr.GetClaimResources() {
					row := claimRow{pod: p.GetName(), claimNamespace: dr.GetClaimNamespace(), claim: dr.GetClaimName(),
						driver: cr.GetDriverName(), pool: cr.GetPoolName(), device: cr.GetDeviceName(), hasShareID: cr.ShareId != nil}
					// The kubelet hands each device of a driver the CDI
					// devices gathered so far: its own is the last.
					if cdi := cr.GetCdiDevices(); len(cdi) > 0 {
						row.cdi = cdi[len(cdi)-1].GetName()
						row.cdis = len(cdi)
					}
					rows = append(rows, row)
				}
			}
		}
	}
	return rows, deviceIDs
}

// TestKubeletListsClaims lists DRA pods over the real pod-resources API:
// each pod's claim, with the driver, the pool (the node), the device's
// name in the slices and no share ID; the pods of a shared claim each list
// it; a mixed node lists device IDs for its device-plugin pods alongside.
func TestKubeletListsClaims(t *testing.T) {
	t.Parallel()
	cdi := func(ns, claim, dev string) string {
		return "k8s.gpu.nvidia.com/claim=" + sim.ClaimUID("sim-node", ns, claim) + "-" + dev
	}
	row := func(pod, ns, claim, dev string) claimRow {
		return claimRow{pod, ns, claim, sim.DRADriver, "sim-node", dev, cdi(ns, claim, dev), false, 1}
	}
	second := func(r claimRow) claimRow { r.cdis = 2; return r }
	tests := []struct {
		file string
		at   time.Duration
		want []claimRow
		ids  map[string][]string
	}{
		{"dra-whole.yaml", 20 * time.Minute, []claimRow{
			row("train-0", "research", "train-0", "gpu-0"), second(row("train-0", "research", "train-0", "gpu-1")),
			row("llm-0", "serving", "llm-0", "gpu-2"),
		}, nil},
		{"dra-shared.yaml", 20 * time.Minute, []claimRow{
			row("batch", "ml", "batch", "gpu-1"),
			row("notebook-a", "ml", "shared-gpu", "gpu-0"), row("notebook-b", "ml", "shared-gpu", "gpu-0"),
		}, nil},
		{"dra-mig.yaml", 10 * time.Minute, []claimRow{
			row("embed-0", "inference", "embed-0", "gpu-0-mig-1g10gb-19-4"),
			row("eval-0", "research", "eval-0", "gpu-1"), row("finetune-0", "research", "finetune-0", "gpu-0-mig-3g40gb-9-0"),
		}, nil},
		{"dra-mig.yaml", 50 * time.Minute, []claimRow{
			row("embed-1", "inference", "embed-1", "gpu-0-mig-1g10gb-19-0"), row("eval-0", "research", "eval-0", "gpu-1"),
		}, nil},
		{"dra-mixed.yaml", 40 * time.Minute, []claimRow{row("train-dra", "ml", "train-dra", "gpu-1")}, map[string][]string{
			"train-dp": {"nvidia.com/gpu GPU-"}, "slice-0": {"nvidia.com/gpu.shared GPU-"}, "slice-1": {"nvidia.com/gpu.shared GPU-"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file+"@"+tt.at.String(), func(t *testing.T) {
			t.Parallel()
			n, _ := newNode(t, loadScenario(t, tt.file), tt.at)
			rows, ids := claimRows(listKubelet(t, n))
			if !slices.Equal(rows, tt.want) {
				t.Errorf("claims\n got %+v\nwant %+v", rows, tt.want)
			}
			if len(ids) != len(tt.ids) {
				t.Errorf("device IDs %v, want pods %v", ids, tt.ids)
			}
			for pod, want := range tt.ids {
				got := ids[pod]
				if len(got) != 1 || got[0][:len(want[0])] != want[0] {
					t.Errorf("%s device IDs %v, want %v…", pod, got, want)
				}
			}
		})
	}
}

// restClient is a client-go REST client for resource.k8s.io/version on
// the server, as a DRA slice watcher builds one.
func restClient(t *testing.T, srv *sim.APIServer, version string, protobuf bool) *rest.RESTClient {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := resourcev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := resourcev1beta2.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	gv := schema.GroupVersion{Group: sim.ResourceGroup, Version: version}
	cfg := &rest.Config{Host: srv.URL(), APIPath: "/apis", Timeout: 10 * time.Second}
	if ca := srv.CACert(); ca != nil {
		cfg.TLSClientConfig.CAData = ca
	}
	cfg.GroupVersion = &gv
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	if protobuf {
		cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
		cfg.ContentType = "application/vnd.kubernetes.protobuf"
	}
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

func listSlices(ctx context.Context, rc *rest.RESTClient, opts metav1.ListOptions) (*resourcev1.ResourceSliceList, error) {
	list := &resourcev1.ResourceSliceList{}
	err := rc.Get().Resource("resourceslices").VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(list)
	return list, err
}

func watchSlices(ctx context.Context, rc *rest.RESTClient, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return rc.Get().Resource("resourceslices").VersionedParams(&opts, metav1.ParameterCodec).Watch(ctx)
}

// nextEvent waits for w's next event.
func nextEvent(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("the watch ended")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no watch event in 10s")
	}
	return watch.Event{}
}

func device(s *resourcev1.ResourceSlice, name string) *resourcev1.Device {
	for i := range s.Spec.Devices {
		if s.Spec.Devices[i].Name == name {
			return &s.Spec.Devices[i]
		}
	}
	return nil
}

func attr(d *resourcev1.Device, name resourcev1.QualifiedName) string {
	if a, ok := d.Attributes[name]; ok && a.StringValue != nil {
		return *a.StringValue
	}
	return ""
}

// nvmlMIGUUID is the UUID of the MIG device at index slot of gpu as the
// simulated NVML reports it, "" when there is none.
func nvmlMIGUUID(t *testing.T, lib nvml.Interface, gpu, slot int) string {
	t.Helper()
	h, ret := lib.DeviceGetHandleByIndex(gpu)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	m, ret := h.GetMigDeviceHandleByIndex(slot)
	if ret == nvml.ERROR_NOT_FOUND {
		return ""
	}
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	uuid, ret := m.GetUUID()
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	return uuid
}

// TestAPIServerDynamicMIG lists and watches the slices of dra-mig.yaml
// with client-go, in JSON and in protobuf: at 4m the 1g.10gb partition at
// memory slice 4 has no uuid; when embed-0 starts (5m) every slice of the
// pool is MODIFIED with the next generation and that partition carries the
// UUID NVML now reports for the new MIG device; at 35m it has none again
// and NVML has no such device.
func TestAPIServerDynamicMIG(t *testing.T) {
	t.Parallel()
	for _, protobuf := range []bool{false, true} {
		t.Run("protobuf="+strconv.FormatBool(protobuf), func(t *testing.T) {
			t.Parallel()
			n, clock := newNode(t, loadScenario(t, "dra-mig.yaml"), 4*time.Minute)
			// The shape in which a partition carries its MIG device's
			// uuid: its slice changes as devices come and go.
			n.SetPartitionUUIDs(true)
			srv := sim.NewAPIServer(n)
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(srv.Stop)
			rc := restClient(t, srv, "v1", protobuf)
			ctx := callCtx(t)

			list, err := listSlices(ctx, rc, metav1.ListOptions{FieldSelector: "spec.nodeName=sim-node"})
			if err != nil {
				t.Fatal(err)
			}
			if len(list.Items) != 3 || list.ResourceVersion != srv.ResourceVersion() {
				t.Fatalf("%d slices at %s, want 3 (gpu:0's partitions, gpu:1, counters) at %s", len(list.Items), list.ResourceVersion, srv.ResourceVersion())
			}
			const part = "gpu-0-mig-1g10gb-19-4"
			var gpu0, gpu1, counters *resourcev1.ResourceSlice
			for i := range list.Items {
				s := &list.Items[i]
				if s.Spec.Driver != sim.DRADriver || s.Spec.Pool.Name != "sim-node" || s.Spec.Pool.ResourceSliceCount != 3 || s.Spec.Pool.Generation != 1 || *s.Spec.NodeName != "sim-node" {
					t.Errorf("slice %s: spec %+v", s.Name, s.Spec.Pool)
				}
				switch {
				case len(s.Spec.SharedCounters) > 0:
					counters = s
				case device(s, part) != nil:
					gpu0 = s
				case device(s, "gpu-1") != nil:
					gpu1 = s
				}
			}
			if gpu0 == nil || gpu1 == nil || counters == nil {
				t.Fatalf("slices %+v", list.Items)
			}
			if len(gpu0.Spec.Devices) != 19 {
				t.Errorf("gpu:0 offers %d devices, want 18 partitions (7+4+3+2+1+1) and the whole GPU", len(gpu0.Spec.Devices))
			}
			// An H100 leaves MIG mode without a reset: the driver offers it
			// whole too, consuming all its partitions' counters.
			if g := device(gpu0, "gpu-0"); g == nil || attr(g, "uuid") != n.DeviceUUID(0) || len(g.ConsumesCounters) != 1 || len(g.ConsumesCounters[0].Counters) != 15 {
				t.Errorf("gpu-0 beside its partitions: %+v", g)
			}
			d := device(gpu0, part)
			if attr(d, "type") != "mig" || attr(d, "profile") != "1g.10gb" || attr(d, "parentUUID") != n.DeviceUUID(0) || attr(d, "uuid") != "" {
				t.Errorf("partition %s before its claim: %+v", part, d.Attributes)
			}
			slice4 := d.ConsumesCounters[0].Counters["memory-slice-4"].Value
			if len(d.ConsumesCounters) != 1 || d.ConsumesCounters[0].CounterSet != "gpu-0-counter-set" || slice4.Value() != 1 {
				t.Errorf("partition %s consumes %+v", part, d.ConsumesCounters)
			}
			if cs := counters.Spec.SharedCounters; len(cs) != 1 || cs[0].Name != "gpu-0-counter-set" || len(cs[0].Counters) != 15 {
				t.Errorf("counter sets %+v, want gpu-0-counter-set with 7 capacities and 8 memory slices", cs)
			}
			if g := device(gpu1, "gpu-1"); attr(g, "type") != "gpu" || attr(g, "uuid") != n.DeviceUUID(1) {
				t.Errorf("gpu-1: %+v", g.Attributes)
			}
			// The 3g.40gb of finetune-0 exists: its partition has its UUID.
			if got, want := attr(device(gpu0, "gpu-0-mig-3g40gb-9-0"), "uuid"), nvmlMIGUUID(t, n.NVML(), 0, 0); got == "" || got != want {
				t.Errorf("3g.40gb partition uuid %q, NVML %q", got, want)
			}

			w, err := watchSlices(ctx, rc, metav1.ListOptions{FieldSelector: "spec.nodeName=sim-node", ResourceVersion: list.ResourceVersion})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			step := func(at time.Duration) (uuid string) {
				clock.Set(n.Scenario().Start.Add(at))
				rv := srv.ResourceVersion()
				seen := map[string]bool{}
				for len(seen) < 3 {
					ev := nextEvent(t, w)
					s, ok := ev.Object.(*resourcev1.ResourceSlice)
					if ev.Type != watch.Modified || !ok {
						t.Fatalf("event %s %T, want MODIFIED slices", ev.Type, ev.Object)
					}
					seen[s.Name] = true
					if s.Name == gpu0.Name {
						uuid = attr(device(s, part), "uuid")
					}
					if len(seen) == 3 && s.ResourceVersion != rv {
						t.Errorf("last event at %s, server at %s", s.ResourceVersion, rv)
					}
				}
				return uuid
			}
			got := step(5 * time.Minute)
			if want := nvmlMIGUUID(t, n.NVML(), 0, 1); got == "" || got != want {
				t.Errorf("at 5m: partition uuid %q, NVML's new MIG device %q", got, want)
			}
			if _, ret := n.NVML().DeviceGetHandleByUUID(got); ret != nvml.SUCCESS {
				t.Errorf("DeviceGetHandleByUUID(%s) = %v", got, ret)
			}
			if again := step(35 * time.Minute); again != "" {
				t.Errorf("at 35m: partition uuid %q, want none", again)
			}
			if _, ret := n.NVML().DeviceGetHandleByUUID(got); ret != nvml.ERROR_NOT_FOUND {
				t.Errorf("DeviceGetHandleByUUID of the destroyed device = %v, want ERROR_NOT_FOUND", ret)
			}
			if u := nvmlMIGUUID(t, n.NVML(), 0, 1); u != "" {
				t.Errorf("MIG index 1 after 35m: %s, want none", u)
			}
		})
	}
}

// TestAPIServerProtocol checks the rest of what a list+watch client meets:
// discovery, other nodes' slices not listed, unsupported field selectors,
// watches from "" (the current state first) and with sendInitialEvents,
// 410 for a resourceVersion the server forgot, errors, v1beta2, TLS and a
// restart on the same address.
func TestAPIServerProtocol(t *testing.T) {
	t.Parallel()
	n, clock := newNode(t, loadScenario(t, "dra-mig.yaml"), 0)
	n.SetPartitionUUIDs(true) // so that the slices change at 5m
	srv := sim.NewAPIServer(n)
	if err := srv.StartTLS(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	ctx := callCtx(t)
	rc := restClient(t, srv, "v1", true)

	dc, err := discovery.NewDiscoveryClientForConfig(&rest.Config{Host: srv.URL(), TLSClientConfig: rest.TLSClientConfig{CAData: srv.CACert()}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := dc.ServerResourcesForGroupVersion("resource.k8s.io/v1")
	if err != nil || len(res.APIResources) != 2 || res.APIResources[0].Name != "resourceslices" || !slices.Contains(res.APIResources[0].Verbs, "watch") ||
		res.APIResources[1].Name != "resourceclaims" || !res.APIResources[1].Namespaced {
		t.Errorf("resource.k8s.io/v1 resources = %+v, %v", res, err)
	}
	groups, err := dc.ServerGroups()
	if err != nil || len(groups.Groups) != 2 || groups.Groups[1].Name != sim.ResourceGroup || groups.Groups[1].PreferredVersion.Version != "v1" {
		t.Errorf("groups = %+v, %v; want the legacy group and resource.k8s.io, preferring v1", groups, err)
	}

	if list, err := listSlices(ctx, rc, metav1.ListOptions{FieldSelector: "spec.nodeName=other-node"}); err != nil || len(list.Items) != 0 {
		t.Errorf("other node's slices: %d, %v", len(list.Items), err)
	}
	if _, err := listSlices(ctx, rc, metav1.ListOptions{FieldSelector: "spec.pool=x"}); !apierrors.IsBadRequest(err) {
		t.Errorf("unsupported field selector: %v, want 400", err)
	}
	list, err := listSlices(ctx, rc, metav1.ListOptions{FieldSelector: "spec.driver=gpu.nvidia.com"})
	if err != nil || len(list.Items) != 3 {
		t.Fatalf("list = %d, %v", len(list.Items), err)
	}
	got := &resourcev1.ResourceSlice{}
	if err := rc.Get().Resource("resourceslices").Name(list.Items[0].Name).Do(ctx).Into(got); err != nil || got.Name != list.Items[0].Name {
		t.Errorf("get %s = %s, %v", list.Items[0].Name, got.Name, err)
	}
	if err := rc.Get().Resource("resourceslices").Name("nope").Do(ctx).Into(got); !apierrors.IsNotFound(err) {
		t.Errorf("get nope = %v, want 404", err)
	}

	// A watch from "" starts with the current state.
	w, err := watchSlices(ctx, rc, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if ev := nextEvent(t, w); ev.Type != watch.Added {
			t.Errorf("first events: %s, want ADDED", ev.Type)
		}
	}
	w.Stop()
	// A watch-list: the state, then a bookmark ending it.
	w, err = watchSlices(ctx, rc, metav1.ListOptions{SendInitialEvents: new(true), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		nextEvent(t, w)
	}
	ev := nextEvent(t, w)
	if s, ok := ev.Object.(*resourcev1.ResourceSlice); ev.Type != watch.Bookmark || !ok || s.Annotations[metav1.InitialEventsAnnotationKey] != "true" || s.ResourceVersion != list.ResourceVersion {
		t.Errorf("after the initial events: %s %+v, want the initial-events-end bookmark at %s", ev.Type, ev.Object, list.ResourceVersion)
	}
	w.Stop()

	// Forgotten history: 410, on a watch as an ERROR event with the Status.
	clock.Set(n.Scenario().Start.Add(5 * time.Minute))
	srv.Sync()
	srv.Compact()
	w, err = watchSlices(ctx, rc, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	ev = nextEvent(t, w)
	if st, ok := ev.Object.(*metav1.Status); ev.Type != watch.Error || !ok || st.Code != http.StatusGone || !apierrors.IsResourceExpired(apierrors.FromObject(st)) {
		t.Errorf("watch from a compacted resourceVersion: %s %+v, want ERROR 410 Expired", ev.Type, ev.Object)
	}
	w.Stop()
	_, err = listSlices(ctx, rc, metav1.ListOptions{ResourceVersion: list.ResourceVersion, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Errorf("exact list of an old resourceVersion: %v, want 410", err)
	}

	srv.SetError(http.StatusServiceUnavailable)
	if _, err := listSlices(ctx, rc, metav1.ListOptions{}); !apierrors.IsServiceUnavailable(err) {
		t.Errorf("list with an injected 503: %v", err)
	}
	srv.SetError(0)

	// An older cluster: v1beta2 only. v1 is not there; v1beta2 is.
	srv.SetVersions(sim.APIVersionV1beta2)
	if _, err := dc.ServerResourcesForGroupVersion("resource.k8s.io/v1"); !apierrors.IsNotFound(err) {
		t.Errorf("v1 discovery on a v1beta2 server: %v, want 404", err)
	}
	old := &resourcev1beta2.ResourceSliceList{}
	if err := restClient(t, srv, "v1beta2", false).Get().Resource("resourceslices").Do(ctx).Into(old); err != nil || len(old.Items) != 3 || old.Items[0].Spec.Driver != sim.DRADriver {
		t.Errorf("v1beta2 list = %d slices, %v", len(old.Items), err)
	}

	// A restart comes back on the same address.
	url := srv.URL()
	srv.Stop()
	if _, err := listSlices(ctx, rc, metav1.ListOptions{}); err == nil {
		t.Error("list of a stopped server succeeded")
	}
	if err := srv.StartTLS(); err != nil {
		t.Fatal(err)
	}
	srv.SetVersions(sim.APIVersionV1)
	if srv.URL() != url {
		t.Errorf("restarted on %s, want %s", srv.URL(), url)
	}
	if _, err := listSlices(ctx, rc, metav1.ListOptions{}); err != nil {
		t.Errorf("list after restart: %v", err)
	}
}

// TestAPIServerNoDRA serves no slices for a device-plugin node, and the
// mixed node's DRA driver only the GPUs the device plugin does not hold.
func TestAPIServerNoDRA(t *testing.T) {
	t.Parallel()
	n, _ := newNode(t, loadScenario(t, "shared.yaml"), 0)
	if s := n.ResourceSlices(); len(s) != 0 {
		t.Errorf("device-plugin node: %d slices", len(s))
	}
	n, _ = newNode(t, loadScenario(t, "dra-mixed.yaml"), 0)
	var names []string
	for _, s := range n.ResourceSlices() {
		for _, d := range s.Spec.Devices {
			names = append(names, d.Name+" "+*d.Attributes["uuid"].StringValue)
		}
	}
	if want := []string{"gpu-1 " + n.DeviceUUID(1), "gpu-3 " + n.DeviceUUID(3)}; !slices.Equal(names, want) {
		t.Errorf("mixed node's DRA devices %v, want %v", names, want)
	}
}

// TestPartitionUUIDsAsNVIDIAsDriver: with SetPartitionUUIDs(false) a
// dynamic MIG partition never carries a uuid, as NVIDIA's driver publishes
// it, while the device exists in NVML and its parentUUID and profile say
// where to look.
func TestPartitionUUIDsAsNVIDIAsDriver(t *testing.T) {
	t.Parallel()
	n, _ := newNode(t, loadScenario(t, "dra-mig.yaml"), 10*time.Minute)
	n.SetPartitionUUIDs(false)
	if nvmlMIGUUID(t, n.NVML(), 0, 1) == "" {
		t.Fatal("no MIG device for embed-0 at 10m")
	}
	for _, s := range n.ResourceSlices() {
		for i := range s.Spec.Devices {
			d := &s.Spec.Devices[i]
			if attr(d, "type") == "mig" && (attr(d, "uuid") != "" || attr(d, "parentUUID") != n.DeviceUUID(0) || attr(d, "profile") == "") {
				t.Errorf("partition %s: %v", d.Name, d.Attributes)
			}
		}
	}
}

// TestFixedMIGLayoutOnDRA: a fixed MIG layout's devices are named by their
// placement (3g.40gb at memory slice 0, 2g.20gb at 4, 1g.10gb at 6), carry
// the UUIDs NVML reports and the memory slices they take, and the kubelet
// lists a DRA pod's MIG device by that name.
func TestFixedMIGLayoutOnDRA(t *testing.T) {
	t.Parallel()
	sc, err := sim.ParseScenario([]byte(`start: 2026-12-01T08:00:00Z
duration: 1h
node: sim-node
system: dgxh100
gpus: 1
allocation: dra
mig:
  "gpu:0": [3g.40gb, 2g.20gb, empty, 1g.10gb]
pods:
  - {namespace: a, name: p, devices: ["mig:0/3"]}
`), "fixed.yaml")
	if err != nil {
		t.Fatal(err)
	}
	n, _ := newNode(t, sc, time.Minute)
	rs := n.ResourceSlices()
	if len(rs) != 1 {
		t.Fatalf("%d slices, want one for gpu:0", len(rs))
	}
	var got []string
	for i := range rs[0].Spec.Devices {
		d := &rs[0].Spec.Devices[i]
		var mem []string
		for c := range d.Capacity {
			if strings.HasPrefix(string(c), "memorySlice") {
				mem = append(mem, string(c))
			}
		}
		sort.Strings(mem)
		got = append(got, d.Name+" "+attr(d, "uuid")+" "+strings.Join(mem, ","))
	}
	want := []string{
		"gpu-0-mig-1g10gb-19-6 " + nvmlMIGUUID(t, n.NVML(), 0, 3) + " memorySlice6",
		"gpu-0-mig-2g20gb-14-4 " + nvmlMIGUUID(t, n.NVML(), 0, 1) + " memorySlice4,memorySlice5",
		"gpu-0-mig-3g40gb-9-0 " + nvmlMIGUUID(t, n.NVML(), 0, 0) + " memorySlice0,memorySlice1,memorySlice2,memorySlice3",
	}
	if !slices.Equal(got, want) {
		t.Errorf("devices\n got %v\nwant %v", got, want)
	}
	rows, _ := claimRows(listKubelet(t, n))
	if len(rows) != 1 || rows[0].device != "gpu-0-mig-1g10gb-19-6" {
		t.Errorf("kubelet lists %+v, want a/p's claim on gpu-0-mig-1g10gb-19-6", rows)
	}
}

// TestAPIServerDownFault: over an apiserver_down fault every request
// answers 503 and the open watch ends at its start; after it, lists work
// again and show what changed meanwhile.
func TestAPIServerDownFault(t *testing.T) {
	t.Parallel()
	sc := loadScenario(t, "dra-mig.yaml")
	sc.Faults = []sim.Fault{{Kind: sim.FaultAPIServerDown, From: 3 * time.Minute, To: 8 * time.Minute}}
	n, clock := newNode(t, sc, time.Minute)
	srv := sim.NewAPIServer(n)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	ctx := callCtx(t)
	rc := restClient(t, srv, "v1", false)
	w, err := watchSlices(ctx, rc, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		nextEvent(t, w)
	}
	clock.Set(sc.Start.Add(5 * time.Minute))
	if !srv.Down() {
		t.Fatal("Down() = false during the fault")
	}
	select {
	case _, ok := <-w.ResultChan():
		if ok {
			t.Error("an event during the fault, want the watch ended")
		}
	case <-time.After(10 * time.Second):
		t.Error("the watch did not end when the API server went down")
	}
	if _, err := listSlices(ctx, rc, metav1.ListOptions{}); !apierrors.IsServiceUnavailable(err) {
		t.Errorf("list during the fault = %v, want 503", err)
	}
	clock.Set(sc.Start.Add(8 * time.Minute))
	if srv.Down() {
		t.Fatal("Down() = true after the fault")
	}
	if list, err := listSlices(ctx, rc, metav1.ListOptions{}); err != nil || len(list.Items) != 3 {
		t.Errorf("list after the fault = %d slices, %v", len(list.Items), err)
	}
}
