package dra

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/gpuxray/gpuxray/collector"
)

// fakeKubelet answers list, or fails returning it marked stale, as the
// kubelet client does.
type fakeKubelet struct {
	list collector.AllocationList
	err  error
}

func (f *fakeKubelet) List(context.Context) (collector.AllocationList, error) {
	l := f.list
	l.Stale = f.err != nil
	return l, f.err
}

func draAlloc(pod, drv, device string) collector.Allocation {
	d := collector.DRADevice{ClaimNamespace: "ml", Claim: pod + "-claim", Driver: drv, Pool: node, Device: device}
	return collector.Allocation{Namespace: "ml", Pod: pod, Container: "main", Resource: drv,
		Device: collector.DeviceRef{ID: drv + "/" + node + "/" + device, Kind: collector.RefDRA}, DRA: d}
}

func TestResolver(t *testing.T) {
	t.Parallel()
	src, err := New(DefaultConfig(node), &Client{}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := (*store)(src).Replace([]any{wire(t, nodeSlices()[0]), wire(t, nodeSlices()[1])}, "7"); err != nil {
		t.Fatal(err)
	}
	plugin, _ := collector.ParseDeviceID(uuid2)
	devicePlugin := collector.Allocation{Namespace: "ml", Pod: "dp", Container: "main", Resource: "nvidia.com/gpu", Device: plugin}
	at := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	kube := &fakeKubelet{list: collector.AllocationList{At: at, Allocations: []collector.Allocation{
		devicePlugin,
		draAlloc("train", driver, "gpu-0"),
		draAlloc("train", driver, "gpu-1"),
		draAlloc("train", "nic.example.com", "gpu-0"),
		draAlloc("mig", driver, migName),
		draAlloc("vm", driver, vfioName),
		draAlloc("imex", "compute-domain.nvidia.com", "channel-0"),
		draAlloc("gone", driver, "gpu-9"),
	}, Problems: []error{collector.NewSourceError(collector.SourceKubelet, "malformed_device_id", errors.New("x"))}}}
	original := append([]collector.Allocation(nil), kube.list.Allocations...)
	r := NewResolver(kube, src, DefaultConfig(node), zaptest.NewLogger(t))

	resolved := func(a collector.Allocation, uuid string) collector.Allocation {
		a.Device, _ = collector.ParseDeviceID(uuid)
		return a
	}
	placed := draAlloc("mig", driver, migName)
	placed.Device = collector.DeviceRef{ID: migName, Kind: collector.RefMIGPlacement, UUID: uuid2, GIProfile: 19, Placement: 0, Profile: "1g.10gb"}
	// The VFIO device, which NVML does not see, and the ComputeDomain
	// driver's IMEX channel are neither allocations nor unresolved.
	wantAllocs := []collector.Allocation{
		devicePlugin,
		resolved(draAlloc("train", driver, "gpu-0"), uuid0),
		resolved(draAlloc("train", driver, "gpu-1"), uuid1),
		placed,
	}
	problemReasons := func(l collector.AllocationList) map[string]int {
		out := map[string]int{}
		for _, p := range l.Problems {
			var se *collector.SourceError
			if errors.As(p, &se) {
				out[se.Source+"/"+se.Reason]++
			}
		}
		return out
	}

	list, err := r.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(list.Allocations, wantAllocs) {
		t.Errorf("allocations:\n got %+v\nwant %+v", list.Allocations, wantAllocs)
	}
	if list.Unresolved != 1 || !list.At.Equal(at) || list.Stale {
		t.Errorf("Unresolved %d, At %v, Stale %v; want 1 unresolved, fresh at %v", list.Unresolved, list.At, list.Stale, at)
	}
	want := map[string]int{"kubelet/malformed_device_id": 1, "dra/other_driver": 1, "dra/unresolved_device": 1}
	if got := problemReasons(list); !reflect.DeepEqual(got, want) {
		t.Errorf("problems = %v, want %v", got, want)
	}
	if !reflect.DeepEqual(kube.list.Allocations, original) {
		t.Error("the kubelet client's allocations were modified")
	}

	// The next answer: the other driver's device is not counted again; the
	// unresolved ones are, as long as they last.
	list, _ = r.List(t.Context())
	want = map[string]int{"kubelet/malformed_device_id": 1, "dra/unresolved_device": 1}
	if got := problemReasons(list); !reflect.DeepEqual(got, want) {
		t.Errorf("second answer's problems = %v, want %v", got, want)
	}

	// The kubelet fails: its last answer, still resolved, counts nothing new.
	kube.err = collector.NewSourceError(collector.SourceKubelet, "unavailable", errors.New("down"))
	list, err = r.List(t.Context())
	if !errors.Is(err, kube.err) || !list.Stale || list.Unresolved != 1 || !reflect.DeepEqual(list.Allocations, wantAllocs) {
		t.Errorf("stale answer = %+v, %v", list, err)
	}
	if got := problemReasons(list); !reflect.DeepEqual(got, map[string]int{"kubelet/malformed_device_id": 1}) {
		t.Errorf("stale answer's problems = %v, want the kubelet's own only", got)
	}

	// A driver that publishes the created MIG device's uuid: the uuid
	// wins over the placement.
	kube.err = nil
	created := nodeSlices()[0]
	created.Spec.Devices[2] = migDevice(migName, uuid2, "1g.10gb", migUUID)
	if err := (*store)(src).Update(wire(t, created)); err != nil {
		t.Fatal(err)
	}
	list, _ = r.List(t.Context())
	if list.Unresolved != 1 || len(list.Allocations) != 4 || list.Allocations[3].Device.UUID != migUUID {
		t.Errorf("after the MIG device was created: %d unresolved, allocations %+v", list.Unresolved, list.Allocations)
	}
}

// TestResolverOff: without a source (DRA off) every GPU driver's device is
// unresolved, never dropped silently, and other drivers' are ignored.
func TestResolverOff(t *testing.T) {
	t.Parallel()
	kube := &fakeKubelet{list: collector.AllocationList{Allocations: []collector.Allocation{
		draAlloc("train", driver, "gpu-0"), draAlloc("train", "nic.example.com", "eth0"),
	}}}
	list, err := NewResolver(kube, nil, DefaultConfig(node), nil).List(t.Context())
	if err != nil || list.Unresolved != 1 || len(list.Allocations) != 0 || len(list.Problems) != 2 {
		t.Errorf("List = %+v, %v; want one unresolved device, no allocation, two problems", list, err)
	}
}
