package sim

import (
	"slices"
	"strings"
	"testing"
)

// draHead is head on a DRA node, five lines long, so case lines start at 6.
const draHead = head + "allocation: dra\n"

// dynHead is draHead with gpu:0 in dynamic MIG mode, seven lines long.
const dynHead = draHead + "mig:\n  \"gpu:0\": dynamic\n"

func TestParseDRAErrors(t *testing.T) {
	t.Parallel()
	tests := []parseErrorCase{
		{"node allocation unknown", head + "allocation: dynamic\n",
			`t.yaml:5: allocation: "dynamic" is not an allocation; want device-plugin or dra`},
		{"pod allocation unknown", head + pod + "    allocation: DRA\n",
			`t.yaml:9: pods[0].allocation: "DRA" is not an allocation; want device-plugin or dra`},
		{"claim on a device-plugin pod", head + pod + "    claim: c\n",
			"t.yaml:9: pods[0].claim: a claim is DRA's, but the pod's devices come from the device plugin; give it allocation: dra"},
		{"claim on a pod the node's allocation makes device-plugin", draHead + pod + "    allocation: device-plugin\n    claim: c\n",
			"t.yaml:11: pods[0].claim: a claim is DRA's, but the pod's devices come from the device plugin; give it allocation: dra"},
		{"claim name malformed", draHead + pod + "    claim: Shared_GPU\n",
			`t.yaml:10: pods[0].claim: "Shared_GPU" is not a claim name: lower-case letters, digits, '-' and '.'`},
		{"resource on a DRA pod", draHead + pod + "    resource: nvidia.com/gpu\n",
			"t.yaml:10: pods[0].resource: an extended resource is the device plugin's; a DRA pod's devices come through its claim"},
		{"replica on a DRA pod", draHead + "pods:\n  - namespace: a\n    name: p\n    devices: [\"gpu:1::0\"]\n",
			"t.yaml:9: pods[0].devices[0]: gpu:1::0: DRA gives a GPU to one claim; pods share it by naming the same claim"},
		{"shared claim with other devices", draHead + pod + "    claim: c\n  - namespace: a\n    name: q\n    claim: c\n    devices: [\"gpu:1\"]\n",
			"t.yaml:14: pods[1].devices: [gpu:1] differs from the [gpu:0] of claim a/c that pods[0] holds; pods naming one claim share its devices"},
		{"shared claim with one device fewer", draHead + "pods:\n  - namespace: a\n    name: p\n    claim: c\n    devices: [\"gpu:0\", \"gpu:1\"]\n  - namespace: a\n    name: q\n    claim: c\n    devices: [\"gpu:1\"]\n",
			"t.yaml:14: pods[1].devices: [gpu:1] differs from the [gpu:0, gpu:1] of claim a/c that pods[0] holds; pods naming one claim share its devices"},
		{"two claims on one GPU at once", draHead + pod + "  - namespace: a\n    name: q\n    devices: [\"gpu:0\"]\n    from: 1h\n",
			"t.yaml:12: pods[1].devices[0]: gpu:0 is also held by a/p (pods[0], gpu:0 as gpu:0 from 0s to 4h)"},
		{"same claim name in another namespace is another claim", draHead + pod + "    claim: c\n  - namespace: b\n    name: q\n    claim: c\n    devices: [\"gpu:0\"]\n",
			"t.yaml:14: pods[1].devices[0]: gpu:0 is also held by a/p (pods[0], gpu:0 as gpu:0 from 0s to 4h)"},
		{"device plugin and DRA on one GPU", head + pod + "    to: 1h\n  - namespace: a\n    name: q\n    allocation: dra\n    devices: [\"gpu:0\"]\n    from: 2h\n",
			"t.yaml:13: pods[1].devices[0]: gpu:0 is also handed out by the device plugin, to a/p (pods[0]); the device plugin and the DRA driver do not share a GPU"},
		{"DRA and device plugin on one GPU", draHead + pod + "    to: 1h\n  - namespace: a\n    name: q\n    allocation: device-plugin\n    devices: [\"gpu:0\"]\n    from: 2h\n",
			"t.yaml:14: pods[1].devices[0]: gpu:0 is also handed out by DRA, to a/p (pods[0]); the device plugin and the DRA driver do not share a GPU"},
		{"dynamic mode value unknown", draHead + "mig:\n  \"gpu:0\": on-demand\n",
			`t.yaml:7: mig.gpu:0: "on-demand" is not a MIG layout; want a list of profiles, such as [3g.40gb, 2g.20gb], or dynamic`},
		{"dynamic MIG without the DRA driver", head + "mig:\n  \"gpu:0\": dynamic\n",
			"t.yaml:6: mig.gpu:0: dynamic MIG devices are made by the DRA driver; set allocation: dra, on the node or on a pod"},
		{"dynamic device on a GPU not in dynamic mode", draHead + "pods:\n  - namespace: a\n    name: p\n    devices: [\"mig:1:1g.10gb\"]\n",
			`t.yaml:9: pods[0].devices[0]: mig:1:1g.10gb: gpu:1 is not in dynamic MIG mode; give it mig: {"gpu:1": dynamic}`},
		{"dynamic device on a fixed layout", draHead + "mig:\n  \"gpu:1\": [3g.40gb]\npods:\n  - namespace: a\n    name: p\n    devices: [\"mig:1:3g.40gb\"]\n",
			"t.yaml:11: pods[0].devices[0]: mig:1:3g.40gb: gpu:1 has a fixed MIG layout; hold one of its devices as mig:1/S, or make it dynamic under mig"},
		{"dynamic device off the node", dynHead + "pods:\n  - namespace: a\n    name: p\n    devices: [\"mig:8:1g.10gb\"]\n",
			"t.yaml:11: pods[0].devices[0]: mig:8:1g.10gb is not on one of the node's 8 GPUs (gpu:0 to gpu:7)"},
		{"dynamic profile unknown", dynHead + "pods:\n  - namespace: a\n    name: p\n    devices: [\"mig:0:1g.5gb\"]\n",
			`t.yaml:11: pods[0].devices[0]: mig:0:1g.5gb: "1g.5gb" is not a MIG profile of the NVIDIA H100 80GB HBM3; want one of 1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb`},
		{"dynamic device on a device-plugin pod", dynHead + "pods:\n  - namespace: a\n    name: p\n    allocation: device-plugin\n    devices: [\"mig:0:1g.10gb\"]\n",
			"t.yaml:12: pods[0].devices[0]: mig:0:1g.10gb: dynamic MIG devices are made by the DRA driver; give the pod allocation: dra"},
		{"fixed slot on a dynamic GPU", dynHead + "pods:\n  - namespace: a\n    name: p\n    devices: [\"mig:0/0\"]\n",
			"t.yaml:11: pods[0].devices[0]: mig:0/0: gpu:0 is in dynamic MIG mode; ask for a profile, as mig:0:<profile>"},
		// On Ampere the driver offers dynamic MIG only in MIG mode, which
		// takes a reset to leave (nvlib.go isDynamicMIGCapable).
		{"whole A100 in dynamic mode", strings.Replace(dynHead, "dgxh100", "dgxa100", 1) + "pods:\n  - namespace: a\n    name: p\n    devices: [\"gpu:0\"]\n",
			"t.yaml:11: pods[0].devices[0]: gpu:0: the NVIDIA A100-SXM4-40GB cannot leave MIG mode without a reset, so NVIDIA's DRA driver offers only its MIG devices (mig:0:<profile>)"},
		{"whole dynamic GPU from the device plugin", dynHead + "pods:\n  - namespace: a\n    name: p\n    allocation: device-plugin\n    devices: [\"gpu:0\"]\n",
			"t.yaml:12: pods[0].devices[0]: gpu:0 is in dynamic MIG mode: only NVIDIA's DRA driver hands it out, whole as gpu-0 or in partitions; give the pod allocation: dra"},
		{"whole GPU beside its partitions", dynHead + "pods:\n  - namespace: a\n    name: p\n    devices: [\"gpu:0\"]\n    to: 1h\n" +
			"  - namespace: a\n    name: q\n    devices: [\"mig:0:1g.10gb\"]\n    from: 30m\n",
			"t.yaml:15: pods[1].devices[0]: mig:0:1g.10gb cannot be made from 30m to 4h while a/p (pods[0]) holds gpu:0 whole"},
		{"dynamic memory above the profile's", dynHead + "pods:\n  - namespace: a\n    name: p\n    devices: [\"mig:0:1g.10gb\"]\n    memory: 11GiB\n",
			"t.yaml:12: pods[0].memory: 11GiB is more than the 10GiB of mig:0:1g.10gb (1g.10gb)"},
		{"dynamic device does not fit", dynHead + "pods:\n  - namespace: a\n    name: p\n    devices: [\"mig:0:4g.40gb\"]\n    to: 2h\n" +
			"  - namespace: a\n    name: q\n    devices: [\"mig:0:3g.40gb\"]\n  - namespace: a\n    name: r\n    devices: [\"mig:0:1g.10gb\"]\n    from: 1h\n",
			"t.yaml:18: pods[2].devices[0]: mig:0:1g.10gb does not fit on gpu:0 at 1h beside the MIG devices made for 4g.40gb of a/p, 3g.40gb of a/q"},
		{"dynamic devices out of memory slices", dynHead + "pods:\n  - namespace: a\n    name: p\n    devices: [\"mig:0:3g.40gb\", \"mig:0:3g.40gb\", \"mig:0:1g.10gb\"]\n",
			"t.yaml:11: pods[0].devices[2]: mig:0:1g.10gb does not fit on gpu:0 at 0s beside the MIG devices made for 3g.40gb of a/p, 3g.40gb of a/p"},
	}
	checkParseErrors(t, tests)
}

// TestParseDRAValues checks what the DRA keys decode to: the node's
// allocation as every pod's default, a pod's own, claims named after their
// pod unless named, and dynamic MIG devices.
func TestParseDRAValues(t *testing.T) {
	t.Parallel()
	src := dynHead + `pods:
  - namespace: a
    name: p
    devices: ["gpu:1"]
  - namespace: a
    name: q
    claim: shared
    devices: ["gpu:2"]
  - namespace: a
    name: r
    claim: shared
    devices: ["gpu:2"]
    from: 1h
  - namespace: a
    name: s
    allocation: device-plugin
    devices: ["gpu:3::0"]
    resource: nvidia.com/gpu.shared
  - namespace: a
    name: m
    devices: ["mig:0:1g.10gb", "mig:0:3g.40gb"]
    memory: 5GiB
`
	s, err := ParseScenario([]byte(src), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if s.Allocation != AllocationDRA || !s.MIGDynamic[0] || s.MIG[0] == nil || len(s.MIG[0]) != 0 {
		t.Errorf("allocation %q, dynamic %v, layout %v; want dra, gpu:0 dynamic with an empty layout", s.Allocation, s.MIGDynamic, s.MIG[0])
	}
	type want struct{ alloc, claim, resource string }
	wants := []want{
		{AllocationDRA, "p", ""}, {AllocationDRA, "shared", ""}, {AllocationDRA, "shared", ""},
		{AllocationDevicePlugin, "", ResourceGPUShared}, {AllocationDRA, "m", ""},
	}
	for i, w := range wants {
		p := s.Pods[i]
		if p.Allocation != w.alloc || p.Claim != w.claim || p.Resource != w.resource {
			t.Errorf("pods[%d]: allocation %q, claim %q, resource %q; want %+v", i, p.Allocation, p.Claim, p.Resource, w)
		}
	}
	m := s.Pods[4].Devices
	if len(m) != 2 || m[0] != (DeviceSpec{GPU: 0, MIG: true, Dynamic: true, Profile: "1g.10gb"}) || m[1].String() != "mig:0:3g.40gb" {
		t.Errorf("dynamic devices %+v", m)
	}
	if !s.UsesDRA() || !s.DRAGPU(0) || !s.DRAGPU(1) || s.DRAGPU(3) || !s.DRAGPU(7) {
		t.Errorf("DRA GPUs: uses %v, 0 %v, 1 %v, 3 %v, 7 %v; want all but the device plugin's gpu:3", s.UsesDRA(), s.DRAGPU(0), s.DRAGPU(1), s.DRAGPU(3), s.DRAGPU(7))
	}
	var names []string
	for _, c := range s.claims() {
		names = append(names, c.namespace+"/"+c.name)
	}
	if want := []string{"a/p", "a/shared", "a/m"}; !slices.Equal(names, want) {
		t.Errorf("claims %v, want %v", names, want)
	}
}

// TestMIGPlan checks where the driver places dynamic MIG devices: the
// lowest free placement of the profile at each creation, after the
// devices that end then are gone, and the MIG device index and GPU
// instance ID they get.
func TestMIGPlan(t *testing.T) {
	t.Parallel()
	src := dynHead + `pods:
  - {namespace: a, name: big, devices: ["mig:0:3g.40gb"], to: 1h}
  - {namespace: a, name: one, devices: ["mig:0:1g.10gb"], from: 10m, to: 2h}
  - {namespace: a, name: two, devices: ["mig:0:1g.10gb"], from: 20m}
  - {namespace: a, name: after, devices: ["mig:0:3g.40gb"], from: 1h}
  - {namespace: b, name: x, claim: c, devices: ["mig:0:1g.20gb"], from: 30m, to: 50m}
  - {namespace: b, name: y, claim: c, devices: ["mig:0:1g.20gb"], from: 40m, to: 3h}
`
	s, err := ParseScenario([]byte(src), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	plan, pe := s.migPlan()
	if pe != nil {
		t.Fatal(pe.msg)
	}
	type row struct {
		name     string
		from, to float64 // minutes
		slot, gi int
	}
	want := []row{
		{"gpu-0-mig-3g40gb-9-0", 0, 60, 0, 2},
		{"gpu-0-mig-1g10gb-19-4", 10, 120, 1, 7},
		{"gpu-0-mig-1g10gb-19-5", 20, 240, 2, 8},
		// The claim's device lives from its first pod's start to its last's end.
		{"gpu-0-mig-1g20gb-15-6", 30, 180, 3, 9},
		// Created at 1h, when big's is destroyed: it takes its place.
		{"gpu-0-mig-3g40gb-9-0", 60, 240, 0, 2},
	}
	var got []row
	uuids := map[string]bool{}
	for _, h := range plan {
		got = append(got, row{h.profile.draName(h.gpu, h.start), h.from.Minutes(), h.to.Minutes(), h.slot, h.gi})
		uuids[h.uuid] = true
	}
	if !slices.Equal(got, want) {
		t.Errorf("plan\n got %+v\nwant %+v", got, want)
	}
	// The same placement made again is a device of its own.
	if len(uuids) != len(plan) {
		t.Errorf("%d UUIDs for %d devices", len(uuids), len(plan))
	}
}

// TestStaticPlacements places fixed layouts on memory slices, backtracking
// where the first placement of a profile would block a later one, and
// reports a layout that no placement holds.
func TestStaticPlacements(t *testing.T) {
	t.Parallel()
	sys := systems["dgxh100"]
	tests := []struct {
		layout []string
		want   []int
		ok     bool
	}{
		{[]string{"3g.40gb", "2g.20gb", "", "1g.10gb"}, []int{0, 4, -1, 6}, true},
		// 3g.40gb at 0 would leave no room for two 2g.20gb.
		{[]string{"3g.40gb", "2g.20gb", "2g.20gb"}, []int{4, 0, 2}, true},
		// 1g.20gb at 4 would leave the two 1g.10gb only slice 6.
		{[]string{"4g.40gb", "1g.20gb", "1g.10gb", "1g.10gb"}, []int{0, 6, 4, 5}, true},
		// One-slice instances never start at the last memory slice.
		{[]string{"1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"}, nil, false},
	}
	for _, tt := range tests {
		got, ok := sys.staticPlacements(tt.layout)
		if ok != tt.ok || (ok && !slices.Equal(got, tt.want)) {
			t.Errorf("staticPlacements(%v) = %v, %v; want %v, %v", tt.layout, got, ok, tt.want, tt.ok)
		}
	}
}
