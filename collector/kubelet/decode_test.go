package kubelet

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"go.uber.org/zap"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpuxray/gpuxray/collector"
)

// generatedContainers is the reference decoder: the generated podresourcesv1
// types, read into the views the conversion takes.
func generatedContainers(t *testing.T, b []byte) []wireContainer {
	t.Helper()
	var resp podresourcesv1.ListPodResourcesResponse
	if err := proto.Unmarshal(b, &resp); err != nil {
		t.Fatalf("generated decoder: %v", err)
	}
	var out []wireContainer
	for _, pod := range resp.GetPodResources() {
		for _, ctr := range pod.GetContainers() {
			c := wireContainer{namespace: pod.GetNamespace(), pod: pod.GetName(), name: ctr.GetName()}
			for _, dev := range ctr.GetDevices() {
				c.devices = append(c.devices, wireDevices{resource: dev.GetResourceName(), ids: dev.GetDeviceIds()})
			}
			for _, dr := range ctr.GetDynamicResources() {
				cl := wireClaim{name: dr.GetClaimName(), namespace: dr.GetClaimNamespace()}
				for _, r := range dr.GetClaimResources() {
					cl.resources = append(cl.resources, wireClaimResource{driver: r.GetDriverName(), pool: r.GetPoolName(), device: r.GetDeviceName(), share: r.GetShareId()})
				}
				c.claims = append(c.claims, cl)
			}
			out = append(out, c)
		}
	}
	return out
}

// decoded is what d reads of b, copied out of the reused views, with nil
// for the empty slices the reference has as nil.
func decoded(t *testing.T, d *decoder, b []byte) []wireContainer {
	t.Helper()
	var out []wireContainer
	err := d.decode(b, func(c *wireContainer) {
		cp := wireContainer{namespace: c.namespace, pod: c.pod, name: c.name}
		for _, dev := range c.devices {
			var ids []string
			if len(dev.ids) > 0 {
				ids = append(ids, dev.ids...)
			}
			cp.devices = append(cp.devices, wireDevices{resource: dev.resource, ids: ids})
		}
		for _, cl := range c.claims {
			var rs []wireClaimResource
			if len(cl.resources) > 0 {
				rs = append(rs, cl.resources...)
			}
			cp.claims = append(cp.claims, wireClaim{name: cl.name, namespace: cl.namespace, resources: rs})
		}
		out = append(out, cp)
	})
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	return out
}

// randomAnswer is an answer with every field of api.proto, the ones the
// decoder skips (CPU IDs, memory, topology, CDI devices) included.
func randomAnswer(r *rand.Rand) *podresourcesv1.ListPodResourcesResponse {
	str := func(prefix string) string {
		switch r.IntN(6) {
		case 0:
			return ""
		case 1:
			return prefix + "-é-" + fmt.Sprint(r.IntN(3)) // repeated, and not ASCII
		}
		return fmt.Sprintf("%s-%d", prefix, r.IntN(1000))
	}
	topo := func() *podresourcesv1.TopologyInfo {
		if r.IntN(2) == 0 {
			return nil
		}
		return &podresourcesv1.TopologyInfo{Nodes: []*podresourcesv1.NUMANode{{ID: r.Int64N(4)}, {ID: 1}}}
	}
	resp := &podresourcesv1.ListPodResourcesResponse{}
	for range r.IntN(8) {
		pod := &podresourcesv1.PodResources{Name: str("pod"), Namespace: str("ns"), CpuIds: []int64{1, 2, r.Int64N(64)}}
		for range r.IntN(4) {
			ctr := &podresourcesv1.ContainerResources{Name: str("ctr"), CpuIds: []int64{r.Int64N(64)}}
			for range r.IntN(4) {
				dev := &podresourcesv1.ContainerDevices{ResourceName: str("nvidia.com/gpu"), Topology: topo()}
				for range r.IntN(4) {
					dev.DeviceIds = append(dev.DeviceIds, str("GPU-id"))
				}
				ctr.Devices = append(ctr.Devices, dev)
			}
			for range r.IntN(2) {
				ctr.Memory = append(ctr.Memory, &podresourcesv1.ContainerMemory{MemoryType: "memory", Size: r.Uint64(), Topology: topo()})
			}
			for range r.IntN(3) {
				dr := &podresourcesv1.DynamicResource{ClaimName: str("claim"), ClaimNamespace: str("ns")}
				for range r.IntN(3) {
					cr := &podresourcesv1.ClaimResource{DriverName: str("gpu.nvidia.com"), PoolName: str("pool"), DeviceName: str("gpu")}
					if r.IntN(2) == 0 {
						s := str("share")
						cr.ShareId = &s
					}
					for range r.IntN(2) {
						cr.CdiDevices = append(cr.CdiDevices, &podresourcesv1.CDIDevice{Name: str("cdi")})
					}
					dr.ClaimResources = append(dr.ClaimResources, cr)
				}
				ctr.DynamicResources = append(ctr.DynamicResources, dr)
			}
			pod.Containers = append(pod.Containers, ctr)
		}
		resp.PodResources = append(resp.PodResources, pod)
	}
	return resp
}

// reversed re-encodes message b with its fields in reverse order, and
// those of the messages named in nested (field number → their own nested
// fields) likewise: protobuf allows any order, and the generated encoder
// writes only one.
func reversed(t *testing.T, b []byte, nested schema) []byte {
	t.Helper()
	type field struct {
		num  protowire.Number
		typ  protowire.Type
		body []byte // the value's bytes, tag excluded
	}
	var fs []field
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatal(protowire.ParseError(n))
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			t.Fatal(protowire.ParseError(m))
		}
		body := b[:m]
		b = b[m:]
		if sub, ok := nested[num]; ok && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(body)
			body = protowire.AppendBytes(nil, reversed(t, v, sub))
		}
		fs = append(fs, field{num, typ, body})
	}
	var out []byte
	for i := len(fs) - 1; i >= 0; i-- {
		out = protowire.AppendTag(out, fs[i].num, fs[i].typ)
		out = append(out, fs[i].body...)
	}
	return out
}

// schema names a message's fields that are messages, with theirs.
type schema map[protowire.Number]schema

// listSchema is a ListPodResourcesResponse's, for reversed.
var listSchema = schema{
	fieldListPods: {
		fieldPodContainers: {
			fieldContainerDevices: {},
			fieldContainerDynamic: {
				fieldDynamicClaimResources: {},
			},
		},
	},
}

// TestDecodeMatchesGenerated: the decoder reads what the generated types
// read, for answers with every field, in the generated order and in
// reverse, one decoder after another (its strings are reused).
func TestDecodeMatchesGenerated(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	d := newDecoder()
	for i := range 300 {
		b, err := proto.Marshal(randomAnswer(r))
		if err != nil {
			t.Fatal(err)
		}
		for _, order := range []struct {
			name string
			b    []byte
		}{{"generated order", b}, {"reversed", reversed(t, b, listSchema)}} {
			want := generatedContainers(t, order.b)
			if got := decoded(t, d, order.b); !reflect.DeepEqual(got, want) {
				t.Fatalf("answer %d, %s:\n got %+v\nwant %+v", i, order.name, got, want)
			}
		}
	}
}

// TestDecodeMalformed: a truncated answer is an error, not a partial list.
func TestDecodeMalformed(t *testing.T) {
	t.Parallel()
	b, err := proto.Marshal(&podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{
		{Name: "p", Namespace: "ns", Containers: []*podresourcesv1.ContainerResources{
			{Name: "c", Devices: []*podresourcesv1.ContainerDevices{{ResourceName: "nvidia.com/gpu", DeviceIds: []string{"GPU-1"}}}},
		}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for n := 1; n < len(b); n++ {
		err := newDecoder().decode(b[:n], func(*wireContainer) {})
		if !errors.Is(err, errWire) {
			t.Errorf("answer cut to %d of %d bytes: error %v, want %v", n, len(b), err, errWire)
		}
	}
}

func newTestClient(t *testing.T) *Client {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Socket = "/nonexistent/kubelet.sock"
	c, err := New(cfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestDecodeInvalidUTF8: a pod name that is not UTF-8, which the generated
// types reject with the whole answer, costs that pod's entry only.
func TestDecodeInvalidUTF8(t *testing.T) {
	t.Parallel()
	pod := func(name string) []byte {
		devs := protowire.AppendTag(nil, fieldDevicesResource, protowire.BytesType)
		devs = protowire.AppendString(devs, "nvidia.com/gpu")
		devs = protowire.AppendTag(devs, fieldDevicesIDs, protowire.BytesType)
		devs = protowire.AppendString(devs, "GPU-3b9f1e2a-7c4d-4e8f-9a1b-2c3d4e5f6a7b")
		ctr := protowire.AppendTag(nil, fieldContainerName, protowire.BytesType)
		ctr = protowire.AppendString(ctr, "main")
		ctr = protowire.AppendTag(ctr, fieldContainerDevices, protowire.BytesType)
		ctr = protowire.AppendBytes(ctr, devs)
		p := protowire.AppendTag(nil, fieldPodName, protowire.BytesType)
		p = protowire.AppendString(p, name)
		p = protowire.AppendTag(p, fieldPodNamespace, protowire.BytesType)
		p = protowire.AppendString(p, "ml")
		p = protowire.AppendTag(p, fieldPodContainers, protowire.BytesType)
		p = protowire.AppendBytes(p, ctr)
		b := protowire.AppendTag(nil, fieldListPods, protowire.BytesType)
		return protowire.AppendBytes(b, p)
	}
	answer := append(pod("bad-\xff"), pod("good")...)
	if err := proto.Unmarshal(answer, &podresourcesv1.ListPodResourcesResponse{}); err == nil {
		t.Fatal("the generated types take the answer; the test means one they reject")
	}
	c := newTestClient(t)
	allocs, problems, err := c.allocations(answer, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(allocs) != 1 || allocs[0].Pod != "good" {
		t.Errorf("allocations %+v, want pod good's only", allocs)
	}
	var se *collector.SourceError
	if len(problems) != 1 || !errors.As(problems[0], &se) || se.Reason != ReasonInvalidName {
		t.Errorf("problems %v, want one %s", problems, ReasonInvalidName)
	}
}

// TestAllocationsReuse: an answer like the previous one is decoded and
// converted without allocating, into the slice of an earlier one.
func TestAllocationsReuse(t *testing.T) {
	resp := &podresourcesv1.ListPodResourcesResponse{}
	for i := range 110 {
		resp.PodResources = append(resp.PodResources, &podresourcesv1.PodResources{
			Namespace: fmt.Sprintf("team-%d", i%7), Name: fmt.Sprintf("pod-%03d", i),
			Containers: []*podresourcesv1.ContainerResources{
				{Name: "main", Devices: []*podresourcesv1.ContainerDevices{{
					ResourceName: "nvidia.com/gpu",
					DeviceIds:    []string{fmt.Sprintf("GPU-%08x-1111-2222-3333-444455556666::%d", i%8, i%18)},
					Topology:     &podresourcesv1.TopologyInfo{Nodes: []*podresourcesv1.NUMANode{{ID: 0}}},
				}}},
				{Name: "sidecar"},
			},
		})
	}
	b, err := proto.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	c := newTestClient(t)
	var buf []collector.Allocation
	allocs := testing.AllocsPerRun(20, func() {
		var err error
		buf, _, err = c.allocations(b, buf[:0])
		if err != nil || len(buf) != 110 {
			t.Fatalf("%d allocations, %v", len(buf), err)
		}
	})
	if allocs != 0 && !raceEnabled {
		t.Errorf("%.1f allocations a decode of the same answer, want 0", allocs)
	}
}
