package sim

import (
	"crypto/sha256"
	"fmt"
	"sort"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Attribute and capacity names of NVIDIA's DRA driver. Names without a
// domain are in the driver's (gpu.nvidia.com/uuid, fully qualified).
const (
	AttrType        resourcev1.QualifiedName = "type"
	AttrUUID        resourcev1.QualifiedName = "uuid"
	AttrParentUUID  resourcev1.QualifiedName = "parentUUID"
	AttrProfile     resourcev1.QualifiedName = "profile"
	AttrProductName resourcev1.QualifiedName = "productName"
	// AttrPCIBusID is the standard attribute Kubernetes defines for a
	// device's PCI address.
	AttrPCIBusID resourcev1.QualifiedName = "resource.kubernetes.io/pciBusID"
)

// The values of the type attribute.
const (
	DeviceTypeGPU  = "gpu"
	DeviceTypeMIG  = "mig"
	DeviceTypeVFIO = "vfio"
)

// ResourceSlices are the node's ResourceSlices as NVIDIA's DRA driver
// publishes them at the clock's now, sorted by name, without the API
// server's fields (resourceVersion, the pool's generation): one slice per
// GPU it publishes (DRAGPU) with that GPU's devices, and, with a GPU in
// dynamic MIG mode, one slice before them with the counter sets the
// partitions consume from, as the driver does for Kubernetes 1.35 and
// newer (a v1 slice holds devices or counters, not both). None when the
// DRA driver does not run on the node.
func (n *Node) ResourceSlices() []resourcev1.ResourceSlice {
	if !n.sc.UsesDRA() {
		return nil
	}
	t, _ := n.now()
	node := n.sc.Node
	var out []resourcev1.ResourceSlice
	var counters []resourcev1.CounterSet
	for g := range n.sc.GPUs {
		if !n.sc.DRAGPU(g) {
			continue
		}
		var devs []resourcev1.Device
		switch {
		case n.sc.VFIO[g]:
			devs = []resourcev1.Device{n.vfioDevice(g)}
		case n.sc.MIGDynamic[g]:
			devs = n.partitions(g, t)
			if n.sys.migToggle() {
				devs = append(devs, n.partitionableGPU(g))
			}
			counters = append(counters, n.counterSet(g))
		case n.migEnabled(g):
			for _, md := range n.mig[g] {
				devs = append(devs, n.staticMIGDevice(md))
			}
		default:
			devs = []resourcev1.Device{n.gpuDevice(g)}
		}
		sort.Slice(devs, func(a, b int) bool { return devs[a].Name < devs[b].Name })
		out = append(out, n.slice(fmt.Sprintf("gpu%d", g), resourcev1.ResourceSliceSpec{Devices: devs}))
	}
	if counters != nil {
		out = append(out, n.slice("counters", resourcev1.ResourceSliceSpec{SharedCounters: counters}))
	}
	for i := range out {
		out[i].Spec.Driver = DRADriver
		out[i].Spec.NodeName = &node
		out[i].Spec.Pool = resourcev1.ResourcePool{Name: node, ResourceSliceCount: int64(len(out))}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out
}

// slice names a slice as the driver's slice controller does, with the
// node and driver and a suffix (stable here, random there).
func (n *Node) slice(part string, spec resourcev1.ResourceSliceSpec) resourcev1.ResourceSlice {
	s := resourcev1.ResourceSlice{Spec: spec}
	s.APIVersion, s.Kind = resourcev1.SchemeGroupVersion.String(), "ResourceSlice"
	s.Name = n.sc.Node + "-" + DRADriver + "-" + nameSuffix(n.sc.Node, part)
	return s
}

// nameSuffix is five characters of the alphabet Kubernetes draws generated
// names from, derived from key.
func nameSuffix(node, key string) string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	h := sha256.Sum256([]byte("gpuxray-sim/" + node + "/resourceslice/" + key))
	out := make([]byte, 5)
	for i := range out {
		out[i] = alphabet[int(h[i])%len(alphabet)]
	}
	return string(out)
}

func str(v string) resourcev1.DeviceAttribute { return resourcev1.DeviceAttribute{StringValue: &v} }
func version(v string) resourcev1.DeviceAttribute {
	return resourcev1.DeviceAttribute{VersionValue: &v}
}

func quantity(v int64) resourcev1.DeviceCapacity {
	return resourcev1.DeviceCapacity{Value: *resource.NewQuantity(v, resource.BinarySI)}
}

// commonAttributes are the attributes the driver gives a GPU and its MIG
// devices alike.
func (n *Node) commonAttributes(g int) map[resourcev1.QualifiedName]resourcev1.DeviceAttribute {
	dev := n.srv.Devices[g].(*server.Device)
	cuda := n.srv.CudaDriverVersion
	return map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
		AttrProductName:         str(dev.Config.Name),
		"brand":                 str("Nvidia"),
		"architecture":          str(architecture(dev.Config.Architecture)),
		"cudaComputeCapability": version(fmt.Sprintf("%d.%d.0", dev.Config.CudaMajor, dev.Config.CudaMinor)),
		"driverVersion":         version(n.srv.DriverVersion),
		"cudaDriverVersion":     version(fmt.Sprintf("%d.%d.0", cuda/1000, cuda%1000/10)),
		AttrPCIBusID:            str(dev.PciBusID),
	}
}

func architecture(a nvml.DeviceArchitecture) string {
	switch a {
	case nvml.DEVICE_ARCH_AMPERE:
		return "Ampere"
	case nvml.DEVICE_ARCH_HOPPER:
		return "Hopper"
	case nvml.DEVICE_ARCH_BLACKWELL:
		return "Blackwell"
	}
	return "Unknown"
}

// gpuDevice is a whole GPU: gpu-<minor>, type gpu, its UUID, and its memory
// as capacity.
func (n *Node) gpuDevice(g int) resourcev1.Device {
	attrs := n.commonAttributes(g)
	attrs[AttrType], attrs[AttrUUID] = str(DeviceTypeGPU), str(n.uuids[g])
	return resourcev1.Device{
		Name:       GPUDeviceName(n.sc.minor(g)),
		Attributes: attrs,
		Capacity:   map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{"memory": quantity(int64(n.sys.memTotal()))},
	}
}

// migAttributes are a MIG device's: type mig, its parent's UUID and its
// profile.
func (n *Node) migAttributes(g int, p migProfile) map[resourcev1.QualifiedName]resourcev1.DeviceAttribute {
	attrs := n.commonAttributes(g)
	attrs[AttrType], attrs[AttrParentUUID], attrs[AttrProfile] = str(DeviceTypeMIG), str(n.uuids[g]), str(p.name)
	return attrs
}

// migCapacity is what a MIG device of profile p has: its multiprocessors,
// engines and memory, in bytes.
func migCapacity(p migProfile) map[resourcev1.QualifiedName]resourcev1.DeviceCapacity {
	i := p.info
	return map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{
		"multiprocessors": quantity(int64(i.MultiprocessorCount)),
		"copyEngines":     quantity(int64(i.CopyEngineCount)),
		"decoders":        quantity(int64(i.DecoderCount)),
		"encoders":        quantity(int64(i.EncoderCount)),
		"jpegEngines":     quantity(int64(i.JpegCount)),
		"ofaEngines":      quantity(int64(i.OfaCount)),
		"memory":          quantity(int64(i.MemorySizeMB) << 20),
	}
}

// counterNames are the counters the capacities of migCapacity consume, as
// the driver derives them (DNS labels).
var counterNames = map[resourcev1.QualifiedName]string{
	"multiprocessors": "multiprocessors", "copyEngines": "copy-engines", "decoders": "decoders",
	"encoders": "encoders", "jpegEngines": "jpeg-engines", "ofaEngines": "ofa-engines", "memory": "memory",
}

// staticMIGDevice is a MIG device of a fixed layout, which exists for as
// long as the node: named by its placement, with its UUID, and the memory
// slices it takes as capacity (memorySlice<i>: 1).
func (n *Node) staticMIGDevice(md *migDevice) resourcev1.Device {
	attrs := n.migAttributes(md.gpu, md.profile)
	attrs[AttrUUID] = str(md.uuid)
	capacity := migCapacity(md.profile)
	for i := md.start; i < md.start+md.profile.memSlices; i++ {
		capacity[resourcev1.QualifiedName(fmt.Sprintf("memorySlice%d", i))] = quantity(1)
	}
	return resourcev1.Device{Name: md.profile.draName(n.sc.minor(md.gpu), md.start), Attributes: attrs, Capacity: capacity}
}

// SetPartitionUUIDs says whether a dynamic MIG partition carries the uuid
// of the MIG device made of it while that exists, or never (the default),
// as NVIDIA's driver publishes it: a reader then has to find the device
// from the partition's parentUUID, profile and placement. Call it before
// the node is used.
func (n *Node) SetPartitionUUIDs(publish bool) { n.partitionUUIDs = publish }

// counterSetName is the counter set of the partitions of the GPU with
// minor number minor.
func counterSetName(minor int) string { return fmt.Sprintf("gpu-%d-counter-set", minor) }

// partitions are the MIG devices a GPU in dynamic MIG mode offers: every
// profile at every placement, each consuming its engines, memory and memory
// slices from the GPU's counter set (partitionable devices). None carries
// a uuid, as NVIDIA's driver announces them (partitions.go MigSpec
// PartGetDevice: CommonAttributesMig, no uuid), whether or not a MIG
// device has been made of it; with SetPartitionUUIDs(true), one the driver
// has made a MIG device of carries that device's UUID while it exists.
func (n *Node) partitions(g int, t time.Duration) []resourcev1.Device {
	minor := n.sc.minor(g)
	alive := map[string]string{}
	for _, md := range n.mig[g] {
		if md.holding != nil && md.alive(t) {
			alive[md.profile.draName(minor, md.start)] = md.uuid
		}
	}
	var out []resourcev1.Device
	for _, p := range n.sys.migProfiles() {
		for _, st := range p.starts() {
			name := p.draName(minor, st)
			attrs := n.migAttributes(g, p)
			if uuid, ok := alive[name]; ok && n.partitionUUIDs {
				attrs[AttrUUID] = str(uuid)
			}
			counters := map[string]resourcev1.Counter{}
			for c, v := range migCapacity(p) {
				counters[counterNames[c]] = resourcev1.Counter{Value: v.Value}
			}
			for i := st; i < st+p.memSlices; i++ {
				counters[fmt.Sprintf("memory-slice-%d", i)] = resourcev1.Counter{Value: *resource.NewQuantity(1, resource.BinarySI)}
			}
			out = append(out, resourcev1.Device{
				Name:             name,
				Attributes:       attrs,
				Capacity:         migCapacity(p),
				ConsumesCounters: []resourcev1.DeviceCounterConsumption{{CounterSet: counterSetName(minor), Counters: counters}},
			})
		}
	}
	return out
}

// counterSet is what GPU g's partitions consume from: the largest of each
// capacity over its profiles, and its eight memory slices.
func (n *Node) counterSet(g int) resourcev1.CounterSet {
	return resourcev1.CounterSet{Name: counterSetName(n.sc.minor(g)), Counters: n.allCounters()}
}

// maxCapacities is the largest of each capacity over the GPU's profiles,
// what the driver announces as the whole GPU's capacity in dynamic MIG
// mode (deviceinfo.go AddDetailAfterWalkingMigProfiles, partitions.go
// PartCapacities).
func (n *Node) maxCapacities() map[resourcev1.QualifiedName]resourcev1.DeviceCapacity {
	out := map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{}
	for _, p := range n.sys.migProfiles() {
		for c, v := range migCapacity(p) {
			if cur, ok := out[c]; !ok || cur.Value.Cmp(v.Value) < 0 {
				out[c] = v
			}
		}
	}
	return out
}

// allCounters are maxCapacities as counters, and one counter per memory
// slice.
func (n *Node) allCounters() map[string]resourcev1.Counter {
	counters := map[string]resourcev1.Counter{}
	for c, v := range n.maxCapacities() {
		counters[counterNames[c]] = resourcev1.Counter{Value: v.Value}
	}
	for i := range migMemorySlices {
		counters[fmt.Sprintf("memory-slice-%d", i)] = resourcev1.Counter{Value: *resource.NewQuantity(1, resource.BinarySI)}
	}
	return counters
}

// partitionableGPU is the whole GPU as the driver offers it beside its
// partitions where MIG mode changes without a reset (nvlib.go: "Hopper+
// supports reset-less MIG mode toggling, so advertise both the full GPU
// and the dynamic MIG profiles irrespective of current MIG state";
// partitions.go GpuInfo PartGetDevice): gpu-<minor> with its uuid,
// consuming every counter of its counter set, so that it and a partition
// are never allocated at once.
func (n *Node) partitionableGPU(g int) resourcev1.Device {
	d := n.gpuDevice(g)
	d.Capacity = n.maxCapacities()
	d.ConsumesCounters = []resourcev1.DeviceCounterConsumption{{CounterSet: counterSetName(n.sc.minor(g)), Counters: n.allCounters()}}
	return d
}

// vfioDevice is a GPU bound to vfio-pci as the driver announces it for
// passthrough (deviceinfo.go VfioDeviceInfo GetDevice): gpu-vfio-<n>, n
// its place among the node's NVIDIA PCI devices, type vfio, and a uuid
// the driver derives from its PCI address (nvlib.go getVfioDeviceInfo:
// uuid.NewSHA1(uuid.NameSpaceDNS, address)), which NVML never reports.
func (n *Node) vfioDevice(g int) resourcev1.Device {
	dev := n.srv.Devices[g].(*server.Device)
	numa := int64(n.sc.numaNodes(g)[0])
	return resourcev1.Device{
		Name: VFIODeviceName(g),
		Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			AttrType:         str(DeviceTypeVFIO),
			AttrUUID:         str(VFIOUUID(dev.PciBusID)),
			"deviceID":       str(fmt.Sprintf("0x%04x", dev.Config.PciDeviceId>>16)),
			"vendorID":       str("0x10de"),
			"numa":           {IntValue: &numa},
			AttrProductName:  str(dev.Config.Name),
			"iommuFDEnabled": {BoolValue: new(bool)},
			AttrPCIBusID:     str(dev.PciBusID),
		},
		Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{"addressableMemory": quantity(int64(n.sys.memTotal()))},
	}
}
