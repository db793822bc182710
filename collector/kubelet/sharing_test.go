package kubelet_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpuxray/gpuxray/collector"
	"github.com/gpuxray/gpuxray/collector/kubelet"
	"github.com/gpuxray/gpuxray/collector/sim"
)

// TestListMergesNUMANodes: the kubelet lists a device once per NUMA node
// of its topology, each in a ContainerDevices of its own; that is one
// device, listed once, and a malformed one is counted once.
func TestListMergesNUMANodes(t *testing.T) {
	t.Parallel()
	numa := func(id string, node int64) *podresourcesv1.ContainerDevices {
		d := devices("nvidia.com/gpu", id)
		d.Topology = &podresourcesv1.TopologyInfo{Nodes: []*podresourcesv1.NUMANode{{ID: node}}}
		return d
	}
	_, socket := serve(t, answer(pod("ml", "p", container("main",
		numa(uuidA, 0), numa(uuidA, 1), numa(uuidB, 1), numa("bogus", 0), numa("bogus", 1)))))
	c, _ := newClient(t, socket, nil)
	list, err := c.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []collector.Allocation{
		alloc(t, "ml", "p", "main", "nvidia.com/gpu", uuidA, false),
		alloc(t, "ml", "p", "main", "nvidia.com/gpu", uuidB, false),
	}
	if !reflect.DeepEqual(list.Allocations, want) {
		t.Errorf("allocations\n got %+v\nwant %+v", list.Allocations, want)
	}
	if len(list.Problems) != 1 || c.MalformedTotal() != 1 {
		t.Errorf("%d problems, %d malformed; want the malformed ID once", len(list.Problems), c.MalformedTotal())
	}
}

// TestListGKEAndHAMiIDs: GKE's shares and HAMi's slices are listed as
// shared allocations; HAMi's keep the slice's GPU for Sharing to replace.
func TestListGKEAndHAMiIDs(t *testing.T) {
	t.Parallel()
	_, socket := serve(t, answer(
		pod("ml", "gke", container("main", devices("nvidia.com/gpu", "nvidia1/vgpu3", "nvidia2/gi4/vgpu0", "nvidia0"))),
		pod("ml", "hami", container("main", devices("nvidia.com/gpu", uuidA+"-7"))),
	))
	c, _ := newClient(t, socket, nil)
	list, err := c.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range list.Allocations {
		got = append(got, a.Pod+" "+a.Device.ID+" "+map[bool]string{true: "shared", false: "whole"}[a.Shared])
	}
	want := []string{"gke nvidia0 whole", "gke nvidia1/vgpu3 shared", "gke nvidia2/gi4/vgpu0 shared", "hami " + uuidA + "-7 shared"}
	if !slices.Equal(got, want) || len(list.Problems) != 0 {
		t.Errorf("allocations %v, problems %v; want %v", got, list.Problems, want)
	}
}

// fakeLister answers a fixed list.
type fakeLister struct {
	list collector.AllocationList
	err  error
}

func (f *fakeLister) List(context.Context) (collector.AllocationList, error) { return f.list, f.err }

// fakePods knows pods by namespace/name and lists KAI groups.
type fakePods map[string]collector.Pod

func (f fakePods) Pod(namespace, name string) (collector.Pod, bool) {
	p, ok := f[namespace+"/"+name]
	return p, ok
}

func (f fakePods) PodsInGPUGroup(group string) []collector.Pod {
	var out []collector.Pod
	for _, p := range f {
		if slices.Contains(p.Sharing.GPUGroups, group) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b collector.Pod) int {
		if a.Name < b.Name {
			return -1
		}
		return 1
	})
	return out
}

// podsOnly hides PodsInGPUGroup.
type podsOnly struct{ fakePods }

func (p podsOnly) PodsInGPUGroup() {}

func hamiAlloc(t *testing.T, pod, container, id string) collector.Allocation {
	t.Helper()
	ref, err := collector.ParseDeviceID(id)
	if err != nil {
		t.Fatal(err)
	}
	return collector.Allocation{Namespace: "ml", Pod: pod, Container: container, Resource: "nvidia.com/gpu", Device: ref, Shared: true}
}

// TestSharingHAMi: HAMi lets the kubelet pick any slice and gives the
// container the GPU its annotation names (server.go Allocate, without
// GetPreferredAllocation): a container's slices become the annotation's
// GPUs; without the pod or its annotation they are held, unresolved, and
// counted while they last.
func TestSharingHAMi(t *testing.T) {
	t.Parallel()
	next := &fakeLister{list: collector.AllocationList{At: start, Allocations: []collector.Allocation{
		hamiAlloc(t, "a", "main", uuidB+"-0"), hamiAlloc(t, "a", "main", uuidB+"-1"),
		hamiAlloc(t, "b", "main", uuidA+"-2"),
		alloc(t, "ml", "c", "main", "nvidia.com/gpu", uuidC, false),
	}}}
	pods := fakePods{"ml/a": {Namespace: "ml", Name: "a", Sharing: collector.Sharing{Devices: map[string][]string{"main": {uuidA, uuidD}}}}}
	s := kubelet.NewSharing(next, pods, zaptest.NewLogger(t))
	list, err := s.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range list.Allocations {
		got = append(got, a.Pod+" "+a.Device.UUID)
		if a.Pod == "a" && (!a.Shared || !a.Device.HAMi || a.Device.Kind != collector.RefUUID) {
			t.Errorf("a's allocation %+v, want a shared HAMi GPU", a)
		}
	}
	if want := []string{"a " + uuidA, "a " + uuidD, "c " + uuidC}; !slices.Equal(got, want) {
		t.Errorf("allocations %v, want %v", got, want)
	}
	var se *collector.SourceError
	if list.Unresolved != 1 || len(list.Problems) != 1 || !errors.As(list.Problems[0], &se) || se.Reason != kubelet.ReasonUnresolvedShare {
		t.Errorf("unresolved %d, problems %v; want b's slice held unresolved", list.Unresolved, list.Problems)
	}

	// No pod source: every slice is unresolved.
	list, _ = kubelet.NewSharing(next, nil, nil).List(context.Background())
	if list.Unresolved != 3 || len(list.Allocations) != 1 {
		t.Errorf("without pods: %d unresolved, %d allocations; want the 3 slices and c's", list.Unresolved, len(list.Allocations))
	}
	// A stale answer counts no problem again.
	next.err = collector.NewSourceError(collector.SourceKubelet, kubelet.ReasonUnavailable, errors.New("down"))
	list, _ = s.List(context.Background())
	if list.Unresolved != 1 || len(list.Problems) != 0 {
		t.Errorf("stale: %d unresolved, problems %v", list.Unresolved, list.Problems)
	}
}

// TestSharingKAI: KAI's reservation pod holds the GPU for the fraction
// pods of its GPU group, which the kubelet does not list: the GPU is
// theirs, shared, in the container KAI gives it; with no fraction pod
// running, or no way to list a group, the reservation pod keeps it.
func TestSharingKAI(t *testing.T) {
	t.Parallel()
	res := alloc(t, collector.KAIReservationNamespace, "gpu-reservation-n-abcde", "resource-reservation", "nvidia.com/gpu", uuidA, false)
	next := &fakeLister{list: collector.AllocationList{At: start, Allocations: []collector.Allocation{res}}}
	group := collector.Sharing{GPUGroups: []string{"g1"}}
	pods := fakePods{
		collector.KAIReservationNamespace + "/gpu-reservation-n-abcde": {Namespace: collector.KAIReservationNamespace, Name: "gpu-reservation-n-abcde", Phase: "Running", Sharing: group},
		"ml/f1":   {Namespace: "ml", Name: "f1", Phase: "Running", Sharing: collector.Sharing{GPUGroups: []string{"g1"}, GPUContainer: "main"}},
		"web/f2":  {Namespace: "web", Name: "f2", Phase: "Pending", Sharing: collector.Sharing{GPUGroups: []string{"g1"}, GPUContainer: "worker"}},
		"ml/done": {Namespace: "ml", Name: "done", Phase: "Succeeded", Sharing: collector.Sharing{GPUGroups: []string{"g1"}, GPUContainer: "main"}},
	}
	list, err := kubelet.NewSharing(next, pods, nil).List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range list.Allocations {
		got = append(got, a.Namespace+"/"+a.Pod+"/"+a.Container+" "+a.Device.UUID)
		if !a.Shared {
			t.Errorf("%s/%s not shared", a.Namespace, a.Pod)
		}
	}
	// f2, Pending, holds nothing until it runs.
	if want := []string{"ml/f1/main " + uuidA}; !slices.Equal(got, want) {
		t.Errorf("allocations %v, want %v", got, want)
	}
	pods["web/f2"] = collector.Pod{Namespace: "web", Name: "f2", Phase: "Running", Sharing: collector.Sharing{GPUGroups: []string{"g1"}, GPUContainer: "worker"}}
	list, _ = kubelet.NewSharing(next, pods, nil).List(context.Background())
	got = got[:0]
	for _, a := range list.Allocations {
		got = append(got, a.Namespace+"/"+a.Pod+"/"+a.Container+" "+a.Device.UUID)
	}
	if want := []string{"ml/f1/main " + uuidA, "web/f2/worker " + uuidA}; !slices.Equal(got, want) {
		t.Errorf("allocations %v, want %v", got, want)
	}
	for _, tc := range []struct {
		name string
		pods kubelet.PodLookup
	}{
		{"no fraction running", fakePods{collector.KAIReservationNamespace + "/gpu-reservation-n-abcde": pods[collector.KAIReservationNamespace+"/gpu-reservation-n-abcde"]}},
		{"no group listing", podsOnly{pods}},
		{"no pod source", nil},
	} {
		list, _ := kubelet.NewSharing(next, tc.pods, nil).List(context.Background())
		if !reflect.DeepEqual(list.Allocations, []collector.Allocation{res}) {
			t.Errorf("%s: allocations %+v, want the reservation pod's", tc.name, list.Allocations)
		}
	}
}

// TestSharingOnTheSimulatedNode replays a HAMi node and a KAI node through
// the real kubelet client and Sharing: every pod is credited with the GPU
// the scheduler gave it, which for HAMi is not the one the kubelet lists.
func TestSharingOnTheSimulatedNode(t *testing.T) {
	t.Parallel()
	const head = "start: 2026-12-01T08:00:00Z\nduration: 1h\nnode: n\nsystem: dgxh100\ngpus: 3\n"
	for _, tc := range []struct {
		name, src string
		want      map[string]int
	}{
		{"hami", head + "device_ids: hami\npods:\n  - {namespace: a, name: p, devices: [\"gpu:0::1\"]}\n", map[string]int{"p": 0}},
		{"kai", head + "pods:\n  - {namespace: a, name: p, devices: [\"gpu:0\"]}\n  - {namespace: a, name: q, devices: [\"gpu:2\"], gpu_fraction: 0.5}\n",
			map[string]int{"p": 0, "q": 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sc, err := sim.ParseScenario([]byte(tc.src), "t.yaml")
			if err != nil {
				t.Fatal(err)
			}
			n, err := sim.NewNode(sc, sim.NewVirtualClock(sc.Start.Add(time.Minute)))
			if err != nil {
				t.Fatal(err)
			}
			_, socket := serve(t, n.ListResponse)
			c, _ := newClient(t, socket, nil)
			list, err := kubelet.NewSharing(c, n, nil).List(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, a := range list.Allocations {
				got[a.Pod] = a.Device.UUID
			}
			want := map[string]string{}
			for pod, gpu := range tc.want {
				want[pod] = n.DeviceUUID(gpu)
			}
			if !reflect.DeepEqual(got, want) || list.Unresolved != 0 {
				t.Errorf("pods on %v (%d unresolved), want %v", got, list.Unresolved, want)
			}
		})
	}
}
