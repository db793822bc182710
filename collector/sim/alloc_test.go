package sim_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	resourcev1 "k8s.io/api/resource/v1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpuxray/gpuxray/collector"
	"github.com/gpuxray/gpuxray/collector/sim"
)

func parse(t *testing.T, src string) *sim.Scenario {
	t.Helper()
	sc, err := sim.ParseScenario([]byte(src), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

const allocHead = "start: 2026-12-01T08:00:00Z\nduration: 1h\nnode: n\nsystem: dgxh100\n"

func handle(t *testing.T, n *sim.Node, i int) nvml.Device {
	t.Helper()
	h, ret := n.NVML().DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		t.Fatalf("DeviceGetHandleByIndex(%d) = %v", i, ret)
	}
	return h
}

func slicesAt(n *sim.Node) map[string]*resourcev1.Device {
	out := map[string]*resourcev1.Device{}
	for _, s := range n.ResourceSlices() {
		for i := range s.Spec.Devices {
			out[s.Spec.Devices[i].Name] = &s.Spec.Devices[i]
		}
	}
	return out
}

// TestMIGModeFollowsTheDriver: on an H100 in dynamic MIG mode NVIDIA's DRA
// driver turns MIG mode on to make the first MIG device and off after the
// last (nvlib.go createMigDevice, maybeDisableMigMode), and offers the GPU
// whole meanwhile: NVML's MIG mode, MIG calls and sample ring follow. The
// partition never carries a uuid; the GPU instance of the MIG device says
// its profile ID and placement, or NO_PERMISSION to an unprivileged caller.
func TestMIGModeFollowsTheDriver(t *testing.T) {
	t.Parallel()
	sc := parse(t, allocHead+`gpus: 1
allocation: dra
minor_numbers: [3]
mig:
  "gpu:0": dynamic
pods:
  - {namespace: a, name: whole, devices: ["gpu:0"], to: 10m, util: [{at: 0s, value: 0.5}]}
  - {namespace: a, name: part, devices: ["mig:0:1g.10gb"], from: 20m, to: 30m, util: [{at: 20m, value: 1}]}
`)
	n, clock := newNode(t, sc, 5*time.Minute)
	h := handle(t, n, 0)
	mode := func() int {
		m, _, ret := h.GetMigMode()
		if ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		return m
	}
	if m := mode(); m != nvml.DEVICE_MIG_DISABLE {
		t.Errorf("at 5m MIG mode %d, want disabled while the GPU is held whole", m)
	}
	if _, samples, ret := h.GetSamples(nvml.GPU_UTILIZATION_SAMPLES, 0); ret != nvml.SUCCESS || len(samples) == 0 {
		t.Errorf("at 5m GetSamples = %d samples, %v", len(samples), ret)
	}
	devs := slicesAt(n)
	if g := devs["gpu-3"]; g == nil || attr(g, "uuid") != n.DeviceUUID(0) {
		t.Errorf("the whole GPU is not offered as gpu-3 with its uuid: %+v", g)
	}

	clock.Set(sc.Start.Add(25 * time.Minute))
	if m := mode(); m != nvml.DEVICE_MIG_ENABLE {
		t.Errorf("at 25m MIG mode %d, want enabled while a MIG device lives", m)
	}
	if _, _, ret := h.GetSamples(nvml.GPU_UTILIZATION_SAMPLES, 0); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("at 25m GetSamples = %v, want ERROR_NOT_SUPPORTED in MIG mode", ret)
	}
	m, ret := h.GetMigDeviceHandleByIndex(0)
	if ret != nvml.SUCCESS {
		t.Fatalf("MIG device 0 at 25m: %v", ret)
	}
	gi, _ := m.GetGpuInstanceId()
	inst, ret := h.GetGpuInstanceById(gi)
	if ret != nvml.SUCCESS {
		t.Fatalf("GetGpuInstanceById(%d) = %v", gi, ret)
	}
	info, ret := inst.GetInfo()
	if ret != nvml.SUCCESS || info.ProfileId != 19 || info.Placement.Start != 0 || info.Placement.Size != 1 || int(info.Id) != gi {
		t.Errorf("GPU instance info %+v, %v; want profile 19 at memory slice 0, size 1", info, ret)
	}
	if p := slicesAt(n)["gpu-3-mig-1g10gb-19-0"]; p == nil || attr(p, "uuid") != "" || attr(p, "parentUUID") != n.DeviceUUID(0) {
		t.Errorf("the made partition: %+v, want no uuid and its parent", p)
	}
	n.SetMIGPrivileged(false)
	if _, ret := h.GetGpuInstanceById(gi); ret != nvml.ERROR_NO_PERMISSION {
		t.Errorf("unprivileged GetGpuInstanceById = %v, want ERROR_NO_PERMISSION", ret)
	}

	clock.Set(sc.Start.Add(40 * time.Minute))
	if m := mode(); m != nvml.DEVICE_MIG_DISABLE {
		t.Errorf("at 40m MIG mode %d, want disabled after the last MIG device", m)
	}
	_, samples, ret := h.GetSamples(nvml.GPU_UTILIZATION_SAMPLES, 0)
	off := uint64(sc.Start.Add(30 * time.Minute).UnixMicro())
	if ret != nvml.SUCCESS || len(samples) == 0 || samples[0].TimeStamp <= off {
		t.Errorf("at 40m GetSamples = %d samples from %v, %v; want the ring started when MIG mode went off", len(samples), samples, ret)
	}
}

// TestMIGModeStaysOnAmpere: an A100 leaves MIG mode only with a reset, so
// the driver offers dynamic MIG only on a GPU already in MIG mode, and
// never the GPU whole (nvlib.go isDynamicMIGCapable).
func TestMIGModeStaysOnAmpere(t *testing.T) {
	t.Parallel()
	sc := parse(t, strings.Replace(allocHead, "dgxh100", "dgxa100", 1)+`gpus: 1
allocation: dra
mig:
  "gpu:0": dynamic
pods:
  - {namespace: a, name: part, devices: ["mig:0:1g.5gb"], from: 20m, to: 30m}
`)
	n, clock := newNode(t, sc, 5*time.Minute)
	for _, at := range []time.Duration{5 * time.Minute, 25 * time.Minute, 40 * time.Minute} {
		clock.Set(sc.Start.Add(at))
		if m, _, _ := handle(t, n, 0).GetMigMode(); m != nvml.DEVICE_MIG_ENABLE {
			t.Errorf("at %s MIG mode %d, want enabled", at, m)
		}
		if g := slicesAt(n)["gpu-0"]; g != nil {
			t.Errorf("at %s the A100 is offered whole", at)
		}
	}
}

// TestMinorNumbers: a GPU's minor number, which NVML reports and NVIDIA's
// DRA driver names devices by, is the scenario's, not its index.
func TestMinorNumbers(t *testing.T) {
	t.Parallel()
	sc := parse(t, allocHead+"gpus: 2\nallocation: dra\nminor_numbers: [1, 0]\npods:\n  - {namespace: a, name: p, devices: [\"gpu:0\"]}\n")
	n, _ := newNode(t, sc, time.Minute)
	for i, want := range []int{1, 0} {
		if m, ret := handle(t, n, i).GetMinorNumber(); ret != nvml.SUCCESS || m != want {
			t.Errorf("gpu:%d minor %d, %v; want %d", i, m, ret, want)
		}
	}
	devs := slicesAt(n)
	if attr(devs["gpu-1"], "uuid") != n.DeviceUUID(0) || attr(devs["gpu-0"], "uuid") != n.DeviceUUID(1) {
		t.Errorf("gpu-1 is %q, gpu-0 %q; want gpu:0's and gpu:1's", attr(devs["gpu-1"], "uuid"), attr(devs["gpu-0"], "uuid"))
	}
	rows, _ := claimRows(listKubelet(t, n))
	if len(rows) != 1 || rows[0].device != "gpu-1" {
		t.Errorf("the kubelet lists %+v, want a/p's claim on gpu-1", rows)
	}
}

// listed is one ContainerDevices the kubelet lists: pod, container,
// resource, device ID and NUMA nodes.
type listed struct {
	pod, container, resource, id string
	numa                         string
}

func kubeletDevices(resp *podresourcesv1.ListPodResourcesResponse) (out []listed, containers map[string][]string) {
	containers = map[string][]string{}
	for _, p := range resp.GetPodResources() {
		for _, c := range p.GetContainers() {
			containers[p.GetName()] = append(containers[p.GetName()], c.GetName())
			for _, d := range c.GetDevices() {
				var numa []string
				for _, node := range d.GetTopology().GetNodes() {
					numa = append(numa, fmt.Sprint(node.GetID()))
				}
				for _, id := range d.GetDeviceIds() {
					out = append(out, listed{p.GetName(), c.GetName(), d.GetResourceName(), id, strings.Join(numa, ",")})
				}
			}
		}
	}
	return out, containers
}

// TestKubeletListsAsTheKubelet: one ContainerDevices per device and NUMA
// node, each with one ID (containerDevicesFromResourceDeviceInstances);
// sidecars listed before the pod's containers and regular init containers
// never (server_v1.go); GKE's and HAMi's device IDs.
func TestKubeletListsAsTheKubelet(t *testing.T) {
	t.Parallel()
	t.Run("numa", func(t *testing.T) {
		t.Parallel()
		sc := parse(t, allocHead+"gpus: 8\nnuma_nodes: {\"gpu:0\": [0, 1]}\npods:\n  - {namespace: a, name: p, devices: [\"gpu:0\", \"gpu:5\"]}\n")
		n, _ := newNode(t, sc, time.Minute)
		got, _ := kubeletDevices(listKubelet(t, n))
		want := []listed{
			{"p", "main", sim.ResourceGPU, n.DeviceUUID(0), "0"},
			{"p", "main", sim.ResourceGPU, n.DeviceUUID(0), "1"},
			{"p", "main", sim.ResourceGPU, n.DeviceUUID(5), "1"},
		}
		if !slices.Equal(got, want) {
			t.Errorf("listed\n got %+v\nwant %+v", got, want)
		}
	})
	t.Run("containers", func(t *testing.T) {
		t.Parallel()
		sc := parse(t, allocHead+`gpus: 2
pods:
  - {namespace: a, name: init, devices: ["gpu:0"], container_type: init}
  - {namespace: a, name: side, container: proxy, devices: ["gpu:1"], container_type: sidecar}
`)
		n, _ := newNode(t, sc, time.Minute)
		got, containers := kubeletDevices(listKubelet(t, n))
		if want := []listed{{"side", "proxy", sim.ResourceGPU, n.DeviceUUID(1), "0"}}; !slices.Equal(got, want) {
			t.Errorf("listed %+v, want the sidecar's device only", got)
		}
		if !slices.Equal(containers["init"], []string{"app"}) || !slices.Equal(containers["side"], []string{"proxy", "app"}) {
			t.Errorf("containers %v, want init's regular container only and side's sidecar first", containers)
		}
	})
	t.Run("gke", func(t *testing.T) {
		t.Parallel()
		n, _ := newNode(t, loadScenario(t, "gke-timesharing.yaml"), time.Minute)
		got, _ := kubeletDevices(listKubelet(t, n))
		var ids []string
		for _, l := range got {
			ids = append(ids, l.pod+" "+l.resource+" "+l.id)
		}
		want := []string{"mig-0 nvidia.com/gpu nvidia2/gi2", "train-0 nvidia.com/gpu nvidia0", "chat-0 nvidia.com/gpu nvidia1/vgpu0", "chat-1 nvidia.com/gpu nvidia1/vgpu1"}
		if !slices.Equal(ids, want) {
			t.Errorf("GKE IDs\n got %v\nwant %v", ids, want)
		}
	})
	t.Run("hami", func(t *testing.T) {
		t.Parallel()
		sc := parse(t, allocHead+"gpus: 2\ndevice_ids: hami\npods:\n  - {namespace: a, name: p, devices: [\"gpu:0::3\"]}\n")
		n, _ := newNode(t, sc, time.Minute)
		got, _ := kubeletDevices(listKubelet(t, n))
		// The kubelet picked a slice of the other GPU; HAMi gave gpu:0.
		if len(got) != 1 || got[0].id != n.DeviceUUID(1)+"-3" {
			t.Errorf("listed %+v, want slice 3 of gpu:1", got)
		}
		p, _ := n.Pod("a", "p")
		if want := map[string][]string{"main": {n.DeviceUUID(0)}}; fmt.Sprint(p.Sharing.Devices) != fmt.Sprint(want) {
			t.Errorf("HAMi's annotation says %v, want %v", p.Sharing.Devices, want)
		}
	})
}

// TestKAIReservation: the kubelet lists KAI's reservation pod, holding the
// GPU through the device plugin, and not the fraction pods, which request
// no GPU; the reservation pod and its fractions carry one GPU group, and
// the reservation lives from the group's first pod to its last.
func TestKAIReservation(t *testing.T) {
	t.Parallel()
	sc := parse(t, allocHead+`gpus: 2
pods:
  - {namespace: a, name: f1, devices: ["gpu:1"], gpu_fraction: 0.5, to: 30m}
  - {namespace: b, name: f2, container: worker, devices: ["gpu:1"], gpu_fraction: 0.25, from: 10m, to: 40m}
`)
	n, clock := newNode(t, sc, 20*time.Minute)
	got, containers := kubeletDevices(listKubelet(t, n))
	if len(got) != 1 || !strings.HasPrefix(got[0].pod, "gpu-reservation-n-") || got[0].id != n.DeviceUUID(1) || got[0].container != sim.KAIReservationContainer {
		t.Fatalf("listed %+v, want the reservation pod on gpu:1", got)
	}
	if _, ok := containers["f1"]; ok {
		t.Error("a fraction pod is listed")
	}
	rp, ok := n.Pod(collector.KAIReservationNamespace, got[0].pod)
	if !ok || len(rp.Sharing.GPUGroups) != 1 || rp.Phase != "Running" {
		t.Fatalf("reservation pod %+v, %v", rp, ok)
	}
	var members []string
	for _, p := range n.PodsInGPUGroup(rp.Sharing.GPUGroups[0]) {
		members = append(members, p.Namespace+"/"+p.Name+"/"+p.Sharing.GPUContainer)
	}
	if want := []string{"a/f1/main", "b/f2/worker", collector.KAIReservationNamespace + "/" + got[0].pod + "/"}; !slices.Equal(members, want) {
		t.Errorf("group members %v, want %v", members, want)
	}
	clock.Set(sc.Start.Add(45 * time.Minute))
	if got, _ := kubeletDevices(listKubelet(t, n)); len(got) != 0 {
		t.Errorf("after the last fraction: %+v listed", got)
	}
}

// TestVFIO: a GPU bound to vfio-pci is not in NVML, whose indices close
// up; NVIDIA's DRA driver publishes it as gpu-vfio-<n>, type vfio, with a
// uuid derived from its PCI address.
func TestVFIO(t *testing.T) {
	t.Parallel()
	sc := parse(t, allocHead+"gpus: 3\nallocation: dra\nvfio: [\"gpu:1\"]\npods:\n  - {namespace: vm, name: v, devices: [\"gpu:1\"]}\n")
	n, _ := newNode(t, sc, time.Minute)
	if c, _ := n.NVML().DeviceGetCount(); c != 2 {
		t.Errorf("NVML counts %d GPUs, want 2", c)
	}
	if u, _ := handle(t, n, 1).GetUUID(); u != n.DeviceUUID(2) {
		t.Errorf("NVML index 1 is %s, want gpu:2 (%s)", u, n.DeviceUUID(2))
	}
	if _, ret := n.NVML().DeviceGetHandleByUUID(n.DeviceUUID(1)); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("the passed-through GPU is found by UUID: %v", ret)
	}
	devs := slicesAt(n)
	v := devs["gpu-vfio-1"]
	if v == nil || attr(v, "type") != "vfio" || attr(v, "uuid") == "" || strings.HasPrefix(attr(v, "uuid"), "GPU-") || devs["gpu-1"] != nil {
		t.Errorf("slices %v; want gpu-vfio-1 of type vfio with the driver's uuid, and no gpu-1", devs)
	}
	// The driver's uuid.NewSHA1(uuid.NameSpaceDNS, address), computed
	// independently: RFC 4122 §4.3's DNS namespace example.
	if got := sim.VFIOUUID("www.example.com"); got != "2ed6657d-e927-568b-95e1-2665a8aea6a2" {
		t.Errorf("VFIOUUID(www.example.com) = %s", got)
	}
}

// TestScenarioAllocationErrors: the allocation keys refuse what the real
// components cannot do.
func TestScenarioAllocationErrors(t *testing.T) {
	t.Parallel()
	h := allocHead + "gpus: 2\n"
	for _, tt := range []struct{ name, src, want string }{
		{"unknown scheme", h + "device_ids: amd\n", `t.yaml:6: device_ids: "amd" is not a device ID scheme; want nvidia, gke or hami`},
		{"minor numbers count", h + "minor_numbers: [0]\n", "t.yaml:6: minor_numbers: 1 minor numbers for 2 GPUs; give one per GPU, by index"},
		{"minor number twice", h + "minor_numbers: [1, 1]\n", "t.yaml:6: minor_numbers[1]: 1 is already gpu:0's minor number"},
		{"vfio without DRA", h + "vfio: [\"gpu:0\"]\n", "t.yaml:6: vfio: NVIDIA's DRA driver passes GPUs through to VMs; set allocation: dra"},
		{"fraction over one", h + "pods:\n  - {namespace: a, name: p, devices: [\"gpu:0\"], gpu_fraction: 0.6}\n  - {namespace: a, name: q, devices: [\"gpu:0\"], gpu_fraction: 0.5}\n",
			"t.yaml:7: pods[0].gpu_fraction: gpu:0's fractions add up to 1.1 at 0s, more than one GPU"},
		{"fraction beside a whole holder", h + "pods:\n  - {namespace: a, name: p, devices: [\"gpu:0\"]}\n  - {namespace: a, name: q, devices: [\"gpu:0\"], gpu_fraction: 0.5}\n",
			"t.yaml:8: pods[1].devices[0]: gpu:0 is also held by a/p (pods[0], gpu:0 as gpu:0 from 0s to 1h)"},
		{"fraction of a replica", h + "pods:\n  - {namespace: a, name: p, devices: [\"gpu:0::1\"], gpu_fraction: 0.5}\n",
			"t.yaml:7: pods[0].gpu_fraction: a KAI Scheduler fraction is of one whole GPU (devices: [gpu:N]) that the NVIDIA device plugin hands its reservation pod as nvidia.com/gpu"},
		{"container type unknown", h + "pods:\n  - {namespace: a, name: p, devices: [\"gpu:0\"], container_type: ephemeral}\n",
			`t.yaml:7: pods[0].container_type: "ephemeral" is not a container type; want init or sidecar (a regular container gives none)`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := sim.ParseScenario([]byte(tt.src), "t.yaml")
			if err == nil || err.Error() != tt.want {
				t.Errorf("error\n got: %v\nwant: %s", err, tt.want)
			}
		})
	}
}
